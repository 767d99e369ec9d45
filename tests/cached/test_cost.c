/*
 * Fetch or recompute (cached/cost.c): the estimates are fitted to what was
 * measured, and a hit is recomputed exactly when computing its tokens is
 * estimated to cost less than fetching its bytes from where they lie. Until
 * both are measured a hit is fetched, and says so; a request's policy
 * (fetch, recompute) wins over the estimates.
 */
#include "cost_internal.h"
#include "test_util.h"

#include <string.h>

/* A tier that reads at `gbps` after `lat_ms`, and a pass whose tokens cost
 * `tok_us` each over a fixed `fixed_ms`, measured a few times. */
static void measure(cost_fits *c, cost_source s, double gbps, double lat_ms, double tok_us,
                    double fixed_ms, int times)
{
    for (int i = 1; i <= times; i++) {
        const uint64_t bytes = (uint64_t)i << 20, tokens = 100u * (uint64_t)i;
        cost_fetched(c, s, bytes, lat_ms / 1e3 + (double)bytes / (gbps * 1e9));
        cost_computed(c, tokens, fixed_ms / 1e3 + (double)tokens * tok_us / 1e6);
    }
}

static void test_not_measured_yet(void)
{
    cost_fits *c;
    CU_ASSERT_EQUAL_FATAL(cost_new(&c), 0);
    char why[160];
    double f, k;
    measure(c, COST_FROM_NVME, 2.0, 0.1, 500.0, 5.0, COST_MIN_SAMPLES - 1);
    CU_ASSERT_FALSE(
        cost_recompute(c, COST_AUTO, COST_FROM_NVME, 4 << 20, 10, &f, &k, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "not measured yet"));
    CU_ASSERT_EQUAL(f, 0.0);
    printf("\n    %s", why);
    cost_free(c);
}

static void test_cheaper_wins(void)
{
    cost_fits *c;
    CU_ASSERT_EQUAL_FATAL(cost_new(&c), 0);
    /* NVMe at 1 GB/s and 0.2 ms; 50 us a token over a 20 ms pass */
    measure(c, COST_FROM_NVME, 1.0, 0.2, 50.0, 20.0, 8);
    char why[160];
    double f, k;
    /* 8 MiB to fetch (8.6 ms) or 40 tokens to compute (2 ms): recomputed */
    CU_ASSERT_TRUE(
        cost_recompute(c, COST_AUTO, COST_FROM_NVME, 8u << 20, 40, &f, &k, why, sizeof why));
    CU_ASSERT(f > 7e-3 && f < 10e-3);
    CU_ASSERT(k > 1.5e-3 && k < 2.5e-3); /* the pass's fixed part is not the segment's */
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "recomputed"));
    printf("\n    %s", why);
    /* the same bytes against 400 tokens (20 ms): fetched */
    CU_ASSERT_FALSE(
        cost_recompute(c, COST_AUTO, COST_FROM_NVME, 8u << 20, 400, &f, &k, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "fetched"));
    printf("\n    %s", why);
    /* a tier not measured: fetched, saying so */
    CU_ASSERT_FALSE(
        cost_recompute(c, COST_AUTO, COST_FROM_REMOTE, 8u << 20, 40, &f, &k, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "not measured yet"));
    /* the request's policy over the estimates */
    CU_ASSERT_FALSE(
        cost_recompute(c, COST_FETCH, COST_FROM_NVME, 8u << 20, 40, &f, &k, why, sizeof why));
    CU_ASSERT_TRUE(
        cost_recompute(c, COST_RECOMPUTE, COST_FROM_NVME, 1, 4000, &f, &k, why, sizeof why));
    cost_free(c);
}

/* The fit follows the last COST_SAMPLES: a tier that became slow is seen so. */
static void test_follows_the_device(void)
{
    cost_fits *c;
    CU_ASSERT_EQUAL_FATAL(cost_new(&c), 0);
    measure(c, COST_FROM_HOST, 10.0, 0.01, 50.0, 20.0, 8);
    double fast, slow;
    CU_ASSERT_TRUE(cost_fetch_s(c, COST_FROM_HOST, 8u << 20, &fast));
    for (int i = 0; i < COST_SAMPLES / 8; i++) measure(c, COST_FROM_HOST, 0.5, 0.01, 50.0, 20.0, 8);
    CU_ASSERT_TRUE(cost_fetch_s(c, COST_FROM_HOST, 8u << 20, &slow));
    printf("\n    8 MiB from host: %.2f ms, then %.2f ms once it read at 0.5 GB/s", fast * 1e3,
           slow * 1e3);
    CU_ASSERT(slow > 10 * fast);
    cost_free(c);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"a hit is fetched until both costs are measured", test_not_measured_yet},
        {"the cheaper of fetching and computing wins", test_cheaper_wins},
        {"the estimates follow the device", test_follows_the_device},
        {NULL, NULL},
    };
    return hy_test_main("fetch or recompute", cases);
}
