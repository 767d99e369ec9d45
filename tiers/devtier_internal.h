/*
 * Private to tiers/: the tier manager's view of its device tier (hbm). The
 * store makes every call into GPU memory through this table, so its
 * three-tier logic (placement, demotion, promotion, leases) is one piece of
 * code whatever sits behind it. The product has exactly one implementation,
 * hy_devtier_hbm (devtier.c), which wraps hbm_internal.h; hbm is never emulated in
 * the product.
 *
 * hy_store_open_with_devtier exists for tests: it opens a store over an
 * implementation the caller supplies, so that tests on machines without a
 * GPU can drive the manager's hbm paths through a host-memory test double
 * defined in the test itself (tests/tiers/test_tier_moves.c). Nothing else
 * should call it.
 *
 * Contract of an implementation (hbm_internal.h's, which the test double mirrors):
 *   - blocks are page-aligned offsets in [0, capacity), from alloc, with
 *     hy_arena_alloc's codes (HY_ENOMEM: full, the store evicts and retries);
 *   - alloc, release, block_size, stats, pin_host and unpin_host are called
 *     with the store's lock held, so never concurrently with each other;
 *   - write, read and device_ptr are called without it, from any thread,
 *     concurrently with each other and with alloc and release of other
 *     blocks (the implementation guards its allocator itself: hbm.c has a
 *     mutex), never with a release of the block they touch (the store pins
 *     the entry); write and read return once the bytes have arrived;
 *   - stats may run concurrently with copies.
 */
#ifndef HY_DEVTIER_H
#define HY_DEVTIER_H

#include "hbm_internal.h"
#include "hy_tiers.h"

typedef struct hy_devtier_ops {
    const char *name; /* for logs and hy_store_stats.hbm_why */
    int (*alloc)(void *ctx, size_t bytes, size_t *off);
    void (*release)(void *ctx, size_t off);
    size_t (*block_size)(void *ctx, size_t off);
    int (*write)(void *ctx, size_t off, const void *host_src, size_t n, hy_err *err);
    int (*read)(void *ctx, size_t off, void *host_dst, size_t n, hy_err *err);
    void *(*device_ptr)(void *ctx, size_t off);
    void (*stats)(void *ctx, hy_hbm_stats *st); /* capacity: the tier's bytes */
    /* Optional (NULL: host memory is never pinned): register / unregister the
     * host arena's region for DMA. */
    int (*pin_host)(void *ctx, void *p, size_t n, hy_err *err);
    void (*unpin_host)(void *ctx, void *p);
    void (*close)(void *ctx);
} hy_devtier_ops;

/* The hbm tier (hbm_internal.h); ctx is a hy_hbm *. */
extern const hy_devtier_ops hy_devtier_hbm;

/* For tests only (see the top of the file): hy_store_open with the device
 * tier given as ops + ctx instead of opened from cfg->hbm_bytes and
 * cfg->hbm_device (both ignored; the tier's capacity is what ops->stats
 * reports; cfg->hbm_policy applies). The store owns ctx from this call on,
 * whatever it returns: ops->close(ctx) runs at hy_store_close, or before a
 * failed open returns. */
int hy_store_open_with_devtier(const hy_store_config *cfg, const hy_devtier_ops *ops, void *ctx,
                               hy_store **out, hy_err *err);

#endif
