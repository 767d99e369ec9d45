/*
 * The host tier's memory: one arena allocated at start and carved into
 * page-aligned blocks for MB-sized payloads. mmap'd 2 MiB-aligned,
 * transparent huge pages requested (MADV_HUGEPAGE) and then populated (the
 * advice must come first: MAP_POPULATE would fault 4 KiB pages in before
 * it), and mlock'd best-effort (a failure to lock is reported in stats, not
 * an error).
 *
 * Pinned for the GPU when the store has an hbm tier: the store registers the
 * whole region with the CUDA driver (hy_hbm_pin_host, cudaHostRegister) right
 * after opening the tier, and unregisters it before the arena is freed, so
 * host ↔ hbm copies run by DMA at the link's rate. The arena itself makes no
 * CUDA call; whoever pins it says so with hy_arena_set_pinned, and stats
 * report it. A failure to pin is a warning: copies still work, pageable.
 *
 * Allocation (extents.c, shared with the hbm tier): first fit over an
 * offset-sorted tree of free extents with coalescing on free, at HY_PAGE
 * granularity (payloads go straight to and from O_DIRECT I/O, which needs
 * 4 KiB alignment). Fragmentation is reported as 1 − largest free extent /
 * total free bytes.
 *
 * Thread safety: none inside; the store serialises calls (store.c holds its
 * lock around them).
 */
#ifndef HY_ARENA_H
#define HY_ARENA_H

#include "extents_internal.h"
#include "hy_tiers.h"

typedef struct hy_arena hy_arena;

/* Creates an arena of `bytes` (rounded up to HY_PAGE). */
int hy_arena_new(size_t bytes, hy_arena **out, hy_err *err);
void hy_arena_free_all(hy_arena *a); /* destroys the arena */

/* Reserves a block of at least `bytes`; *off is its offset (a multiple of
 * HY_PAGE). HY_ENOMEM when no free extent is large enough (the caller evicts
 * and retries). HY_EINVAL for 0 bytes and HY_ERANGE for more than the
 * capacity (no eviction could help); neither changes the arena. */
int hy_arena_alloc(hy_arena *a, size_t bytes, size_t *off);
/* Returns a block (its offset as returned by alloc). Freeing an offset that
 * is not a live block is a broken invariant: assert (it aborts in every
 * build, NDEBUG included, since carrying on would hand bytes out twice).
 * Never allocates, so it cannot fail. */
void hy_arena_release(hy_arena *a, size_t off);
/* The address of a block. */
void *hy_arena_ptr(hy_arena *a, size_t off);
/* The whole region: its base address (HY_PAGE-aligned, 2 MiB-aligned in
 * fact) and, in *bytes, its capacity; for registering it with a device. */
void *hy_arena_region(hy_arena *a, size_t *bytes);
/* Records whether the region is pinned (registered with the CUDA driver by
 * the caller); reported in stats. */
void hy_arena_set_pinned(hy_arena *a, bool pinned);
/* The rounded size of a live block; 0 when off is not one. */
size_t hy_arena_block_size(const hy_arena *a, size_t off);
void hy_arena_stats_get(const hy_arena *a, hy_arena_stats *st);
/* Verifies the allocator's invariants (free extents sorted, disjoint and
 * maximal, live blocks in bounds, used + free == capacity, the counters);
 * O(extents + table size), for tests and debugging. HY_EFORMAT naming the
 * broken one. */
int hy_arena_check(const hy_arena *a, hy_err *err);

#endif
