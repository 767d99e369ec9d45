/*
 * Shared by the CUnit test programs: a main() that registers one suite and
 * runs it verbosely (the summary ends the output), helpers for comparing float
 * arrays, and where the committed fixtures live.
 */
#ifndef HY_TEST_UTIL_H
#define HY_TEST_UTIL_H

#include <CUnit/Basic.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* CLOCK_MONOTONIC in milliseconds, and a sleep of ms milliseconds. */
static inline long long hy_test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void hy_test_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct hy_test_case {
    const char *name;
    void (*fn)(void);
} hy_test_case;

/* Runs the cases as one suite; the exit status is the number of failures. */
static inline int hy_test_main(const char *suite, const hy_test_case *cases)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    for (const hy_test_case *c = cases; c->name; c++) CU_add_test(s, c->name, c->fn);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned fails = CU_get_number_of_failures() + CU_get_number_of_tests_failed();
    CU_cleanup_registry();
    return fails ? 1 : 0;
}

/* max |a - b| */
static inline double hy_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) return d; /* a NaN anywhere is a failure, whatever follows it */
        if (d > m) m = d;
    }
    return m;
}

/* max |a - b| / max(max |b|, tiny): the error relative to the reference's scale. */
static inline double hy_rel_diff(const float *a, const float *ref, size_t n)
{
    double s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (isnan(ref[i])) return NAN; /* (fmax would drop it) */
        s = fmax(s, fabs((double)ref[i]));
    }
    return hy_max_abs_diff(a, ref, n) / s;
}

static inline int hy_test_rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

/* Creates a fresh directory /tmp/<prefix>XXXXXX in dir (at least 64 bytes). */
static inline int hy_test_mkdtemp(const char *prefix, char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/%sXXXXXX", prefix);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

/* rm -rf dir */
static inline void hy_test_rmtree(const char *dir)
{
    nftw(dir, hy_test_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

#endif
