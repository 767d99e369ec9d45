/*
 * The device tier table (devtier_internal.h) over the hbm tier (hbm_internal.h): the one
 * implementation the product has. Adapters only: ctx is the hy_hbm handle.
 */
#include "devtier_internal.h"

static int hbm_alloc(void *ctx, size_t bytes, size_t *off)
{
    return hy_hbm_alloc(ctx, bytes, off);
}

static void hbm_release(void *ctx, size_t off)
{
    hy_hbm_release(ctx, off);
}

static size_t hbm_block_size(void *ctx, size_t off)
{
    return hy_hbm_block_size(ctx, off);
}

static int hbm_write(void *ctx, size_t off, const void *src, size_t n, hy_err *err)
{
    return hy_hbm_write(ctx, off, src, n, err);
}

static int hbm_read(void *ctx, size_t off, void *dst, size_t n, hy_err *err)
{
    return hy_hbm_read(ctx, off, dst, n, err);
}

static void *hbm_device_ptr(void *ctx, size_t off)
{
    return hy_hbm_device_ptr(ctx, off);
}

static void hbm_stats(void *ctx, hy_hbm_stats *st)
{
    hy_hbm_stats_get(ctx, st);
}

static int hbm_pin_host(void *ctx, void *p, size_t n, hy_err *err)
{
    return hy_hbm_pin_host(ctx, p, n, err);
}

static void hbm_unpin_host(void *ctx, void *p)
{
    hy_hbm_unpin_host(ctx, p);
}

static void hbm_close(void *ctx)
{
    hy_hbm_close(ctx);
}

const hy_devtier_ops hy_devtier_hbm = {
    .name = "hbm",
    .alloc = hbm_alloc,
    .release = hbm_release,
    .block_size = hbm_block_size,
    .write = hbm_write,
    .read = hbm_read,
    .device_ptr = hbm_device_ptr,
    .stats = hbm_stats,
    .pin_host = hbm_pin_host,
    .unpin_host = hbm_unpin_host,
    .close = hbm_close,
};
