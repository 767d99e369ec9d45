/*
 * The scheduler's pure parts (scheduler/plan.c, scheduler/sim.c): the cost
 * model and its fit, LPT against round-robin on the shape that matters (one
 * long document among short ones), workers of different speeds and workers
 * that are down, and the simulator's timeline checked against hand-computed
 * cases — one worker is the sum of everything, streaming an entry in pieces
 * hides its transfer behind the prefill, the combiner waits in request order.
 */
#include "hy_scheduler.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static void test_cost_model_and_fit(void)
{
    hy_cost_model c = {0.01, 2e-4, 3e-8}, f;
    CU_ASSERT_DOUBLE_EQUAL(hy_cost_prefill(&c, 1000), 0.01 + 0.2 + 0.03, 1e-12);
    uint64_t n[6] = {128, 256, 512, 1024, 2048, 4096};
    double s[6];
    for (int i = 0; i < 6; i++) s[i] = hy_cost_prefill(&c, n[i]);
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_cost_fit(n, s, 6, &f, &e), 0);
    CU_ASSERT(fabs(f.fixed_s - c.fixed_s) < 1e-9 && fabs(f.per_token_s - c.per_token_s) < 1e-12 &&
              fabs(f.per_token2_s - c.per_token2_s) < 1e-15);
    /* linear data bent slightly downwards: the quadratic term would be
     * negative, so it is dropped and the line refitted */
    for (int i = 0; i < 6; i++) s[i] = 0.005 + 1e-4 * (double)n[i] - 1e-10 * (double)(n[i] * n[i]);
    CU_ASSERT_EQUAL_FATAL(hy_cost_fit(n, s, 6, &f, &e), 0);
    CU_ASSERT(f.per_token2_s == 0 && f.per_token_s > 0 && f.fixed_s >= 0);
    /* two sizes: a line */
    CU_ASSERT_EQUAL(hy_cost_fit(n, s, 2, &f, &e), 0);
    CU_ASSERT(f.per_token2_s == 0);
    CU_ASSERT_EQUAL(hy_cost_fit(n, s, 1, &f, &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "at least 2") != NULL);
    uint64_t z[2] = {0, 5};
    CU_ASSERT_EQUAL(hy_cost_fit(z, s, 2, &f, &e), HY_EINVAL);
    double neg[2] = {0.1, -1};
    CU_ASSERT_EQUAL(hy_cost_fit(n, neg, 2, &f, &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "sample 1") != NULL);
}

typedef struct plan_buf {
    int worker[64];
    uint32_t order[64];
    double start[64], end[64];
    hy_plan p;
} plan_buf;

static hy_plan *buf(plan_buf *b)
{
    b->p = (hy_plan){b->worker, b->order, b->start, b->end, 0};
    return &b->p;
}

static const hy_cost_model k_linear = {0, 1e-3, 0}; /* 1 ms per token */

/* Seven short documents, then a long one: round-robin puts the long one
 * behind three short ones; LPT starts it first, alone. */
static void test_lpt_vs_round_robin(void)
{
    uint64_t t[8] = {100, 100, 100, 100, 100, 100, 100, 1000};
    hy_worker_view w[2] = {{1, 0, true}, {1, 0, true}};
    plan_buf a, b;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_plan_make(HY_PLAN_LPT, t, 8, &k_linear, w, 2, buf(&a), &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_plan_make(HY_PLAN_RR, t, 8, &k_linear, w, 2, buf(&b), &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(a.p.makespan_s, 1.0, 1e-12); /* the long one alone; 0.7 s beside it */
    CU_ASSERT_DOUBLE_EQUAL(b.p.makespan_s, 1.3, 1e-12); /* three short ones, then the long one */
    CU_ASSERT_EQUAL(a.order[0], 7);                     /* longest first */
    int on_long = a.worker[7], others = 0;
    for (int i = 0; i < 7; i++) others += a.worker[i] == on_long;
    CU_ASSERT_EQUAL(others, 0);
    for (int i = 0; i < 8; i++) CU_ASSERT_EQUAL(b.worker[i], i % 2); /* request order, i mod m */
    /* every segment exactly once, ends after starts, the makespan the last end */
    bool seen[8] = {0};
    double last = 0;
    for (int k = 0; k < 8; k++) {
        CU_ASSERT(!seen[a.order[k]]);
        seen[a.order[k]] = true;
        CU_ASSERT(a.end[a.order[k]] > a.start[a.order[k]]);
        last = fmax(last, a.end[a.order[k]]);
    }
    CU_ASSERT_DOUBLE_EQUAL(last, a.p.makespan_s, 1e-12);
}

static void test_speeds_and_down_workers(void)
{
    uint64_t t[12];
    for (int i = 0; i < 12; i++) t[i] = 100;
    hy_worker_view w[3] = {{2, 0, true}, {1, 0, true}, {1, 0, false}};
    plan_buf a;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_plan_make(HY_PLAN_LPT, t, 12, &k_linear, w, 3, buf(&a), &e), 0);
    int count[3] = {0};
    for (int i = 0; i < 12; i++) count[a.worker[i]]++;
    CU_ASSERT_EQUAL(count[2], 0);            /* down */
    CU_ASSERT_EQUAL(count[0], 2 * count[1]); /* twice as fast, twice the segments */
    CU_ASSERT_DOUBLE_EQUAL(a.p.makespan_s, 0.4, 1e-12);
    /* a worker busy until 1 s gets nothing that others finish sooner */
    hy_worker_view busy[2] = {{1, 1.0, true}, {1, 0, true}};
    CU_ASSERT_EQUAL(hy_plan_make(HY_PLAN_LPT, t, 4, &k_linear, busy, 2, buf(&a), &e), 0);
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(a.worker[i], 1);
    /* round-robin skips the down one too */
    CU_ASSERT_EQUAL(hy_plan_make(HY_PLAN_RR, t, 6, &k_linear, w, 3, buf(&a), &e), 0);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(a.worker[i], i % 2);
    /* refusals */
    CU_ASSERT_EQUAL(hy_plan_make(HY_PLAN_LPT, t, 4, &k_linear, w, 0, buf(&a), &e), HY_EINVAL);
    hy_worker_view none[1] = {{1, 0, false}};
    CU_ASSERT_EQUAL(hy_plan_make(HY_PLAN_LPT, t, 4, &k_linear, none, 1, buf(&a), &e), HY_EINVAL);
    CU_ASSERT(strstr(e.msg, "none of the 1 workers is up") != NULL);
    hy_worker_view slow[1] = {{0, 0, true}};
    CU_ASSERT_EQUAL(hy_plan_make(HY_PLAN_LPT, t, 4, &k_linear, slow, 1, buf(&a), &e), HY_EINVAL);
}

static void test_simulator_timeline(void)
{
    uint64_t t[4] = {100, 200, 300, 400};
    hy_sim_config c = {.prefill = k_linear, .pieces = 1, .compose_s = 0.01, .query_s = 0.05};
    hy_sim_result r;
    hy_err e = {0};
    /* one worker, instant links: everything in sequence */
    CU_ASSERT_EQUAL_FATAL(hy_sim_run(&c, t, 4, 1, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.makespan_s, 1.0, 1e-12);
    /* LPT runs 400, 300, 200, 100: segment 0 (100) arrives last, at 1.0 s */
    CU_ASSERT_DOUBLE_EQUAL(r.ttft_s, 1.0 + 4 * 0.01 + 0.05, 1e-12);
    /* two workers: {400, 100} and {300, 200}: both end at 0.5 s */
    CU_ASSERT_EQUAL(hy_sim_run(&c, t, 4, 2, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.makespan_s, 0.5, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(r.ttft_s, 0.5 + 4 * 0.01 + 0.05, 1e-12);
    /* a slow link: 1 MB entries at 10 MB/s each add 0.1 s after the prefill;
     * in 10 pieces as layers finish only the last piece's 0.01 s remains */
    c.entry_bytes_fixed = 1e6;
    c.worker_link_bytes_s = 1e7;
    uint64_t one[1] = {1000};
    CU_ASSERT_EQUAL(hy_sim_run(&c, one, 1, 1, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.arrived_s, 1.1, 1e-9);
    c.pieces = 10;
    CU_ASSERT_EQUAL(hy_sim_run(&c, one, 1, 1, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.arrived_s, 1.01, 1e-9);
    /* the shared ingress: two workers' entries queue behind each other */
    c.pieces = 1;
    c.worker_link_bytes_s = 0;
    c.combiner_link_bytes_s = 1e7;
    uint64_t two[2] = {500, 500};
    CU_ASSERT_EQUAL(hy_sim_run(&c, two, 2, 2, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.arrived_s, 0.5 + 0.2, 1e-9);
    /* the combiner composes in request order: a long first segment makes it wait */
    c.entry_bytes_fixed = 0;
    c.combiner_link_bytes_s = 0;
    uint64_t lopsided[3] = {1000, 10, 10};
    CU_ASSERT_EQUAL(hy_sim_run(&c, lopsided, 3, 3, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.compose_wait_s, 1.0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(r.ttft_s, 1.0 + 3 * 0.01 + 0.05, 1e-9);
    /* nothing cold: the query alone; bad configurations refused */
    CU_ASSERT_EQUAL(hy_sim_run(&c, t, 0, 2, HY_PLAN_LPT, &r, &e), 0);
    CU_ASSERT_DOUBLE_EQUAL(r.ttft_s, 0.05, 1e-12);
    c.pieces = 0;
    CU_ASSERT_EQUAL(hy_sim_run(&c, t, 4, 2, HY_PLAN_LPT, &r, &e), HY_EINVAL);
    c.pieces = 1;
    c.compose_s = -1;
    CU_ASSERT_EQUAL(hy_sim_run(&c, t, 4, 2, HY_PLAN_LPT, &r, &e), HY_EINVAL);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"cost model and its fit", test_cost_model_and_fit},
        {"LPT vs round-robin: a long document behind short ones", test_lpt_vs_round_robin},
        {"worker speeds, busy and down workers, refusals", test_speeds_and_down_workers},
        {"simulator: sequence, streaming pieces, ingress, request order", test_simulator_timeline},
        {NULL, NULL},
    };
    return hy_test_main("scheduler_plan", cases);
}
