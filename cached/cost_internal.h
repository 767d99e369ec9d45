/*
 * Fetch or recompute (cost.c): for each hit, whether bringing its entry from
 * where it lies costs more than computing its segment inside the pass. Both
 * costs are fitted to what was measured — the scheduler's least-squares fit,
 * seconds = fixed + a·n + b·n² with n bytes or tokens — over the last
 * COST_SAMPLES of each; a hit is recomputed when that is the cheaper. Each
 * model has its own (svc_model.costs); thread-safe.
 */
#ifndef HY_CACHED_COST_INTERNAL_H
#define HY_CACHED_COST_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COST_SAMPLES     64
#define COST_MIN_SAMPLES 4

/* Where a hit's entry comes from: a lease on the host (or hbm) tier, a read
 * from the NVMe tier, another member's GetEntry. */
typedef enum cost_source {
    COST_FROM_HOST,
    COST_FROM_NVME,
    COST_FROM_REMOTE,
    COST_FROM_COUNT
} cost_source;

/* How a request wants its hits: chosen by the costs, or always fetched, or
 * always recomputed (PrefillRequest.reuse, pic.reuse). */
typedef enum cost_policy { COST_AUTO, COST_FETCH, COST_RECOMPUTE } cost_policy;

typedef struct cost_fits cost_fits;

const char *cost_source_name(cost_source s); /* "host", "nvme", "remote" */
int cost_new(cost_fits **out);
void cost_free(cost_fits *c);
/* A fetch of `bytes` from s that took `seconds`; a pass that computed
 * `tokens` in `seconds` (its compositions and waits left out). */
void cost_fetched(cost_fits *c, cost_source s, uint64_t bytes, double seconds);
void cost_computed(cost_fits *c, uint64_t tokens, double seconds);
/* The estimates, in seconds; false while fewer than COST_MIN_SAMPLES were
 * measured (or the fit failed). Computing n tokens counts what they add to
 * a pass: the fit's terms in n, not its fixed part (paid anyway). */
bool cost_fetch_s(cost_fits *c, cost_source s, uint64_t bytes, double *out);
bool cost_compute_s(cost_fits *c, uint64_t tokens, double *out);
/* The choice for a hit of `bytes` in s whose segment would compute
 * `tokens`: true to recompute it. why gets one line saying which and why;
 * *fetch_s and *compute_s the estimates (0 when unknown). */
bool cost_recompute(cost_fits *c, cost_policy pol, cost_source s, uint64_t bytes, uint64_t tokens,
                    double *fetch_s, double *compute_s, char *why, size_t cap);

#endif
