/*
 * scheduler: segment-level parallelism for cold requests (docs/scheduler.md).
 *
 * A cold request's segments are independent: each entry depends on its own
 * tokens only, so misses can be prefilled at once on several scatter workers
 * and composed, in request order, as each arrives. This header holds the
 * parts that decide and predict, as pure functions over plain arrays:
 *
 *   cost model   seconds to prefill a segment of n tokens from the empty
 *                state: fixed + per_token·n + per_token2·n² (the quadratic
 *                term is attention over the segment), fitted by least squares
 *                to measured (n, seconds) pairs, scaled per worker by its
 *                measured speed;
 *   planner      which worker prefills which miss: LPT (longest processing
 *                time first, each onto the worker that would finish it
 *                earliest) or round-robin in request order (for comparison);
 *   simulator    a discrete-event model of a cold request — dispatch, each
 *                worker's prefills in its planned order, each entry streamed
 *                to the combiner in pieces as layers finish (over the
 *                worker's link, then the combiner's shared ingress), the
 *                combiner composing in request order as entries complete, the
 *                query last — that predicts TTFT for m workers from measured
 *                costs (hypic-bench scatter checks it against measured runs).
 *
 * Uses common only.
 */
#ifndef HY_SCHEDULER_H
#define HY_SCHEDULER_H

#include "hy_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- cost model ---- */

typedef struct hy_cost_model {
    double fixed_s;      /* per segment: dispatch on the worker, entry framing */
    double per_token_s;  /* GEMMs, the delta rule, the entry's T and S passes */
    double per_token2_s; /* attention over the segment's own tokens */
} hy_cost_model;

/* Seconds to prefill n tokens at speed 1. */
double hy_cost_prefill(const hy_cost_model *c, uint64_t n);

/* Least-squares fit of c to k measured (n[i] tokens, s[i] seconds) pairs,
 * every coefficient ≥ 0 (a term that would come out negative is dropped and
 * the rest refitted). HY_EINVAL with fewer than 2 samples, a sample of 0
 * tokens or a non-positive time. */
int hy_cost_fit(const uint64_t *n, const double *s, size_t k, hy_cost_model *c, hy_err *err);

/* ---- planner ---- */

typedef enum hy_plan_policy {
    HY_PLAN_LPT = 0, /* longest first, each onto the worker that finishes it earliest */
    HY_PLAN_RR,      /* request order, worker i mod m among those up */
} hy_plan_policy;

const char *hy_plan_policy_name(hy_plan_policy p); /* "lpt", "rr" */

typedef struct hy_worker_view {
    double speed;   /* throughput relative to the cost model (1: as fitted); > 0 */
    double ready_s; /* when it can start (work already queued on it) */
    bool up;        /* false: assign nothing to it */
} hy_worker_view;

#define HY_PLAN_MAX_WORKERS 1024

typedef struct hy_plan {
    int *worker;       /* [n] the worker of each segment */
    uint32_t *order;   /* [n] the segments in the order they are dispatched (a worker runs
                        * its own in this order) */
    double *start_s;   /* [n] predicted start and end of each segment's prefill */
    double *end_s;     /* [n] */
    double makespan_s; /* the last end */
} hy_plan;

/* Plans n segments of tokens[i] tokens over workers w[0..m). The caller's
 * arrays in *p hold n entries each. HY_EINVAL when m is 0 or over
 * HY_PLAN_MAX_WORKERS, a speed is not positive, or no worker is up. */
int hy_plan_make(hy_plan_policy pol, const uint64_t *tokens, size_t n, const hy_cost_model *c,
                 const hy_worker_view *w, size_t m, hy_plan *p, hy_err *err);

/* ---- simulator ---- */

typedef struct hy_sim_config {
    hy_cost_model prefill;        /* one worker's prefill of a segment (speed 1) */
    double entry_bytes_fixed;     /* an entry's bytes: constant-size T, S, conv tails... */
    double entry_bytes_per_token; /* ...plus K and V per body token */
    double worker_link_bytes_s;   /* each worker's link to the combiner; 0: instant */
    double combiner_link_bytes_s; /* the combiner's ingress, shared; 0: instant */
    int pieces;                   /* an entry leaves in this many pieces as its layers finish
                                   * (streaming); 1: after the whole segment */
    double dispatch_s;            /* the router's time to hand out one segment */
    double compose_s;             /* the combiner per segment: its seam and T·S composition */
    double query_s;               /* the query's prefill once the last segment is composed */
} hy_sim_config;

typedef struct hy_sim_result {
    double ttft_s;         /* the query's logits */
    double makespan_s;     /* the last prefill's end */
    double arrived_s;      /* the last entry's arrival at the combiner */
    double compose_wait_s; /* combiner time spent waiting for the next entry in order */
} hy_sim_result;

/* Predicts a cold request of n segments on m identical workers (speed 1)
 * under pol. HY_EINVAL on a bad configuration (negative costs, pieces < 1,
 * m out of range), HY_ENOMEM. */
int hy_sim_run(const hy_sim_config *c, const uint64_t *tokens, size_t n, size_t m,
               hy_plan_policy pol, hy_sim_result *r, hy_err *err);

#endif
