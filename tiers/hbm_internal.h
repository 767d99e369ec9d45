/*
 * The hbm tier: one region of GPU memory (cudaMalloc'd at open) carved into
 * page-aligned blocks by the same first-fit, coalescing allocator as the host
 * arena (extents_internal.h), with copies between host buffers and blocks. It exists
 * only when the build has CUDA (HY_WITH_CUDA, which defines HY_HAVE_CUDA) and
 * the machine has a device; otherwise hy_hbm_open refuses with
 * HY_EUNSUPPORTED and says why. It is never emulated in host memory.
 *
 * How the store uses it (docs/architecture.md#the-store; tiers/store_hbm.c). hbm is the top
 * tier, above host; the store reaches it through a table of calls
 * (tiers/devtier_internal.h) whose only implementation in the product wraps this
 * file:
 *   open     with a configured hbm capacity, the store asks
 *            hy_hbm_available(); when false it logs the reason and runs with
 *            host (+ NVMe) only, as on the CPU build machines (its stats say
 *            why); when true it opens the tier and pins its host arena with
 *            hy_hbm_pin_host so copies between the two run by DMA;
 *   commit   payloads are always written into a host-arena buffer first
 *            (reserve → write → commit); when the hbm admitter takes the
 *            entry, a block is allocated and hy_hbm_write copies the payload
 *            up; the host admitter then decides whether the host copy stays;
 *   acquire  a device lease (hy_store_acquire_device) carries
 *            hy_hbm_device_ptr() of the block; an entry not in hbm is
 *            promoted with hy_hbm_write from its host copy, or from bytes
 *            read from NVMe, whose checksums are verified on the way (host
 *            copies never left the process); a host lease on an entry held
 *            only in hbm is copied down with hy_hbm_read;
 *   evict    an hbm victim is demoted to host, never dropped: a host block is
 *            allocated (evicting host → NVMe if needed), hy_hbm_read copies
 *            the bytes down, then hy_hbm_release frees the device block (a
 *            victim that already has a host copy just loses its block).
 *
 * Transfers run on a stream the tier owns (non-blocking with respect to the
 * legacy default stream, so cache copies do not serialise with the model's
 * kernels on it) and are synchronous for the caller: write and read return
 * once the bytes have arrived, so a device pointer handed out afterwards
 * needs no further ordering.
 *
 * Thread safety: the tier has a mutex of its own around its allocator and
 * counters. alloc, release, block_size, stats and check may be called from
 * any thread; write and read hold the mutex only to look their block up and
 * to count, and run the transfer itself unlocked, so copies of different
 * blocks from different threads overlap with each other and with
 * allocations. The caller guarantees that a block is not released (nor the
 * tier closed) while a copy to or from it runs: the store pins the entry.
 */
#ifndef HY_HBM_H
#define HY_HBM_H

#include "extents_internal.h"
#include "hy_tiers.h"

typedef struct hy_hbm hy_hbm;

/* Allocates `bytes` (rounded up to HY_PAGE) of memory on CUDA device
 * `device` and a stream for copies. HY_EUNSUPPORTED when hy_hbm_available()
 * is false (the message carries its reason); HY_EINVAL for 0 bytes or a
 * device index that does not exist; HY_ERANGE past 2^48 bytes; HY_ENOMEM
 * when the device cannot hold the region (the message gives cudaMalloc's
 * error and the device's free and total bytes); HY_EIO for other CUDA
 * failures. *out is NULL on failure. */
int hy_hbm_open(size_t bytes, int device, hy_hbm **out, hy_err *err);
/* Frees the device memory and the stream. Device pointers into the tier
 * die with it. NULL is a no-op. */
void hy_hbm_close(hy_hbm *h);

/* Allocation, with hy_arena_alloc's contract (arena_internal.h): *off is a multiple
 * of HY_PAGE; HY_ENOMEM when no free extent is large enough (the caller
 * demotes and retries), HY_EINVAL for 0 bytes, HY_ERANGE for more than the
 * capacity. */
int hy_hbm_alloc(hy_hbm *h, size_t bytes, size_t *off);
/* Returns a block; an offset that is not a live block aborts (a broken
 * invariant, as in the arena). Cannot fail. */
void hy_hbm_release(hy_hbm *h, size_t off);
/* The rounded size of a live block; 0 when off is not one. */
size_t hy_hbm_block_size(const hy_hbm *h, size_t off);

/* Copies n bytes from host memory into the start of the live block at off
 * (write), or from that block into host memory (read), and waits for the
 * copy to finish. The host buffer may be pageable or pinned: pinned memory
 * (cudaHostAlloc, or registered with cudaHostRegister) is copied by DMA at
 * the link's full rate; pageable memory — the host arena's mmap'd region
 * until it is pinned — goes through the driver's staging buffers at a
 * fraction of it (stats count those copies as `pageable`). HY_EINVAL when
 * off is not a live block or a buffer is NULL, HY_ERANGE when n is 0 or
 * larger than the block, HY_EIO when CUDA reports an error (a sticky one,
 * such as an illegal address, leaves the device unusable for this process),
 * HY_EUNSUPPORTED in a build without CUDA. */
int hy_hbm_write(hy_hbm *h, size_t off, const void *host_src, size_t n, hy_err *err);
int hy_hbm_read(hy_hbm *h, size_t off, void *host_dst, size_t n, hy_err *err);

/* The device address of the block at off, for GPU consumers (kernels, or
 * cudaMemcpy between devices); valid until the block is released or the
 * tier closed. Never dereference it on the host. */
void *hy_hbm_device_ptr(hy_hbm *h, size_t off);

void hy_hbm_stats_get(const hy_hbm *h, hy_hbm_stats *st);

/* Registers host memory [p, p + n) with the CUDA driver (cudaHostRegister,
 * portable: pinned for every device and context), so copies between it and
 * the tier run by DMA at the link's rate instead of through the driver's
 * staging buffers. p and n should be page-aligned (the host arena's region
 * is). HY_EINVAL for NULL or 0 bytes, HY_EIO when the driver refuses (the
 * message says why: e.g. the memory lock limit), HY_EUNSUPPORTED in a build
 * without CUDA. A failure leaves the memory usable, only pageable. */
int hy_hbm_pin_host(hy_hbm *h, void *p, size_t n, hy_err *err);
/* Unregisters memory pinned by hy_hbm_pin_host (p as passed to it); before
 * the memory is unmapped. A failure is logged; NULL is a no-op. */
void hy_hbm_unpin_host(hy_hbm *h, void *p);
/* The allocator's invariants (hy_arena_check); for tests and debugging. */
int hy_hbm_check(const hy_hbm *h, hy_err *err);

#endif
