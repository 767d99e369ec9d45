/* Private to hypic-bench tiers: its hbm part (bench_tiers_hbm.c). */
#ifndef HY_BENCH_TIERS_H
#define HY_BENCH_TIERS_H

#include "hy_common.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hbm_result {
    bool present;                  /* false: nothing measured; why says why */
    char why[192];                 /* "device N", or why there is no hbm tier */
    double write[3], read[3];      /* hy_hbm_write / hy_hbm_read, GB/s, per size */
    double raw_h2d[3], raw_d2h[3]; /* cudaMemcpy of the same pinned buffer, GB/s */
    uint64_t pageable;             /* tier copies that found the host buffer unpinned */
} hbm_result;

/* Measures the hbm tier's copies of each of sizes[nsizes] (nsizes <= 3)
 * against cudaMemcpy in the same run, or fills res->why when there is no
 * device. An error only when a device exists and a copy fails. */
int bench_tiers_hbm(const uint64_t *sizes, int nsizes, bool quick, hbm_result *res, hy_err *e);

#endif
