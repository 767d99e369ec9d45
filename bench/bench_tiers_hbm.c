/*
 * The hbm part of hypic-bench tiers: hy_hbm_write and hy_hbm_read (the hbm
 * tier's copies, on its own stream, synchronous for the caller) of 1, 16 and
 * 64 MiB between a host buffer pinned with hy_hbm_pin_host — as the store
 * pins its arena — and a block of the tier, against cudaMemcpy of the same
 * sizes between the same pinned buffer and a cudaMalloc'd buffer in the same
 * run. The limit is the host–device link (PCIe, or NVLink-C2C on Grace
 * machines). Without a device (or a CUDA build) it reports why and measures
 * nothing; the JSON then says "hbm_available": false.
 */
#include "bench_tiers.h"
#include "hbm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if HY_HAVE_CUDA
#include <cuda_runtime_api.h>

#define HBM_REPS 5

/* Best seconds of HBM_REPS passes of `iters` copies of `bytes`; one untimed
 * pass first. dir: 0 host→device, 1 device→host. tier: through hy_hbm_*. */
static int time_copies(hy_hbm *h, size_t off, void *dev, void *host, size_t bytes, int iters,
                       int dir, bool tier, double *best, hy_err *e)
{
    *best = 1e30;
    for (int rep = -1; rep < HBM_REPS; rep++) {
        double t0 = hy_now_s();
        for (int i = 0; i < iters; i++) {
            int rc = HY_OK;
            if (tier)
                rc = dir == 0 ? hy_hbm_write(h, off, host, bytes, e)
                              : hy_hbm_read(h, off, host, bytes, e);
            else if ((dir == 0
                          ? cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)
                          : cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
                rc = hy_err_set(e, HY_EIO, "cudaMemcpy of %zu bytes failed", bytes);
            if (rc) return rc;
        }
        if (rep >= 0) *best = HY_MIN(*best, hy_now_s() - t0);
    }
    return HY_OK;
}

int bench_tiers_hbm(const uint64_t *sizes, int nsizes, bool quick, hbm_result *res, hy_err *e)
{
    memset(res, 0, sizeof *res);
    if (!hy_hbm_available(res->why, sizeof res->why)) return HY_OK;
    const size_t S = (size_t)sizes[nsizes - 1];
    hy_hbm *h = NULL;
    void *host = NULL, *dev = NULL;
    bool pinned = false;
    int rc = hy_hbm_open(S, 0, &h, e);
    if (!rc && !(host = aligned_alloc(2u << 20, S)))
        rc = hy_err_set(e, HY_ENOMEM, "out of memory for a %zu-byte host buffer", S);
    if (!rc) {
        memset(host, 0x5a, S);
        rc = hy_hbm_pin_host(h, host, S, e);
        pinned = rc == HY_OK;
    }
    if (!rc && cudaMalloc(&dev, S) != cudaSuccess)
        rc = hy_err_set(e, HY_ENOMEM, "cudaMalloc of %zu bytes for the raw copies failed", S);
    size_t off = 0;
    if (!rc) rc = hy_hbm_alloc(h, S, &off);
    if (rc == HY_ENOMEM) hy_err_set(e, rc, "hbm tier of %zu bytes cannot hold a block of it", S);
    for (int i = 0; i < nsizes && !rc; i++) {
        const size_t bytes = (size_t)sizes[i];
        const int iters = (int)HY_MAX((quick ? 256 : 1024) * (1ull << 20) / bytes, 4);
        double t[4];
        for (int k = 0; k < 4 && !rc; k++) /* raw h2d, tier write, raw d2h, tier read */
            rc = time_copies(h, off, dev, host, bytes, iters, k / 2, k % 2, &t[k], e);
        const double gb = (double)bytes * iters / 1e9;
        res->raw_h2d[i] = gb / t[0], res->write[i] = gb / t[1];
        res->raw_d2h[i] = gb / t[2], res->read[i] = gb / t[3];
    }
    if (!rc) {
        hy_hbm_stats st;
        hy_hbm_stats_get(h, &st);
        res->pageable = st.pageable;
        res->present = true;
        snprintf(res->why, sizeof res->why, "device %d", st.device);
    }
    if (dev) cudaFree(dev);
    if (pinned) hy_hbm_unpin_host(h, host);
    free(host);
    hy_hbm_close(h);
    return rc;
}

#else

int bench_tiers_hbm(const uint64_t *sizes, int nsizes, bool quick, hbm_result *res, hy_err *e)
{
    (void)sizes, (void)nsizes, (void)quick, (void)e;
    memset(res, 0, sizeof *res);
    hy_hbm_available(res->why, sizeof res->why);
    return HY_OK;
}

#endif
