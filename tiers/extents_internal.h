/*
 * Private to tiers/: the block allocator shared by the host arena (arena.c,
 * over an mmap'd region) and the hbm tier (hbm.c, over a cudaMalloc'd one).
 * It manages offsets only, [0, capacity), and never touches the memory they
 * stand for, so the same code serves host and device memory.
 *
 * First fit over an offset-sorted treap of free extents with coalescing on
 * release, at HY_PAGE granularity; live blocks in a hash table (offset →
 * size). Fragmentation is 1 − largest free extent / total free bytes.
 * Release never allocates, so it cannot fail; an out-of-memory surfaces only
 * as HY_ENOMEM from alloc.
 *
 * Thread safety: none; the owner serialises calls.
 */
#ifndef HY_EXTENTS_H
#define HY_EXTENTS_H

#include "hy_tiers.h"

typedef struct hy_extents hy_extents;

/* HY_EXTENTS_STATS_FIELDS (hy_tiers.h): the allocator's figures, shared by the
 * stats of every tier built on it. */
typedef struct hy_extents_stats {
    HY_EXTENTS_STATS_FIELDS
} hy_extents_stats;

/* Designated initialisers of those fields from a hy_extents_stats x, for the
 * stats structs that embed them. */
#define HY_EXTENTS_STATS_INIT(x)                                                                   \
    .capacity = (x).capacity, .used = (x).used, .free_bytes = (x).free_bytes,                      \
    .largest_free = (x).largest_free, .free_extents = (x).free_extents, .blocks = (x).blocks,      \
    .fragmentation = (x).fragmentation

/* An allocator over [0, capacity): capacity > 0, a multiple of HY_PAGE, at
 * most 2^48 (the caller checks and names the limit). `name` (a string that
 * outlives the allocator, e.g. "arena") prefixes its messages. HY_ENOMEM is
 * the only failure. */
int hy_extents_new(const char *name, size_t capacity, hy_extents **out);
void hy_extents_free(hy_extents *x);

/* The contracts of hy_arena_alloc, _release, _block_size, _stats_get and
 * _check (arena_internal.h), which are these: alloc returns HY_EINVAL for 0 bytes,
 * HY_ERANGE for more than the capacity, HY_ENOMEM when no free extent is
 * large enough; release of an offset that is not a live block aborts in
 * every build. */
int hy_extents_alloc(hy_extents *x, size_t bytes, size_t *off);
void hy_extents_release(hy_extents *x, size_t off);
size_t hy_extents_block_size(const hy_extents *x, size_t off);
void hy_extents_stats_get(const hy_extents *x, hy_extents_stats *st);
int hy_extents_check(const hy_extents *x, hy_err *err);

#endif
