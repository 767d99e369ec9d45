/*
 * The discrete-event model of a cold request (hy_scheduler.h), event by
 * event in the order they can happen:
 *
 *   1. the router hands out the segments in the plan's order, one every
 *      dispatch_s; a worker starts a segment when it has been handed it and
 *      has finished its previous one;
 *   2. a segment's entry leaves its worker in `pieces` equal pieces, piece j
 *      ready when (j+1)/pieces of the prefill is done (layer-by-layer
 *      streaming), each piece serialised on the worker's link;
 *   3. the pieces of all workers pass the combiner's ingress one at a time,
 *      in the order they come off the workers' links;
 *   4. the combiner composes the segments in request order, each when all of
 *      its pieces have arrived and the previous one is composed (it never
 *      waits for all of them: that is the streaming combiner);
 *   5. the query's prefill follows the last composition.
 *
 * Every duration comes from the configuration (hypic-bench scatter measures
 * them), so the model's error against a measured run is a test of the model.
 */
#include "hy_scheduler.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

typedef struct piece {
    double ready, done; /* off the worker's link, then through the ingress */
    uint32_t seg;
} piece;

static int cmp_ready(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    return x->ready < y->ready ? -1 : x->ready > y->ready;
}

int hy_sim_run(const hy_sim_config *c, const uint64_t *tokens, size_t n, size_t m,
               hy_plan_policy pol, hy_sim_result *r, hy_err *err)
{
    memset(r, 0, sizeof *r);
    if (c->pieces < 1) return hy_err_set(err, HY_EINVAL, "sim: pieces %d (at least 1)", c->pieces);
    if (c->dispatch_s < 0 || c->compose_s < 0 || c->query_s < 0 || c->entry_bytes_fixed < 0 ||
        c->entry_bytes_per_token < 0 || c->worker_link_bytes_s < 0 ||
        c->combiner_link_bytes_s < 0 || c->prefill.fixed_s < 0 || c->prefill.per_token_s < 0 ||
        c->prefill.per_token2_s < 0)
        return hy_err_set(err, HY_EINVAL, "sim: a negative cost or rate in the configuration");
    if (m == 0 || m > HY_PLAN_MAX_WORKERS)
        return hy_err_set(err, HY_EINVAL, "sim: %zu workers (1..%d)", m, HY_PLAN_MAX_WORKERS);
    if (n == 0) {
        r->ttft_s = c->query_s;
        return 0;
    }
    const size_t np = n * (size_t)c->pieces;
    hy_worker_view *w = calloc(m, sizeof *w);
    int *worker = malloc(n * sizeof *worker);
    uint32_t *order = malloc(n * sizeof *order);
    double *ps = malloc(n * sizeof *ps), *pe = malloc(n * sizeof *pe);
    double *free_at = calloc(m, sizeof *free_at), *link_at = calloc(m, sizeof *link_at);
    double *arrived = calloc(n, sizeof *arrived);
    piece *pc = malloc(np * sizeof *pc);
    int rc = 0;
    if (!w || !worker || !order || !ps || !pe || !free_at || !link_at || !arrived || !pc) {
        rc = hy_err_set(err, HY_ENOMEM, "sim: out of memory");
        goto out;
    }
    for (size_t j = 0; j < m; j++) w[j] = (hy_worker_view){1.0, 0.0, true};
    hy_plan plan = {worker, order, ps, pe, 0};
    if ((rc = hy_plan_make(pol, tokens, n, &c->prefill, w, m, &plan, err))) goto out;

    /* 1-2: dispatch, prefill, pieces off each worker's link */
    size_t k = 0;
    for (size_t d = 0; d < n; d++) {
        const uint32_t i = order[d];
        const int j = worker[i];
        /* the plan names one of the request's segments and one of the workers */
        assert(i < n && j >= 0 && (size_t)j < m);
        const double handed = (double)(d + 1) * c->dispatch_s;
        const double start = free_at[j] > handed ? free_at[j] : handed;
        const double dur = hy_cost_prefill(&c->prefill, tokens[i]);
        free_at[j] = start + dur;
        if (free_at[j] > r->makespan_s) r->makespan_s = free_at[j];
        const double bytes =
            (c->entry_bytes_fixed + c->entry_bytes_per_token * (double)tokens[i]) / c->pieces;
        for (int q = 0; q < c->pieces; q++) {
            const double ready = start + dur * (double)(q + 1) / c->pieces;
            const double t0 = link_at[j] > ready ? link_at[j] : ready;
            link_at[j] = t0 + (c->worker_link_bytes_s > 0 ? bytes / c->worker_link_bytes_s : 0);
            pc[k++] = (piece){link_at[j], 0, i};
        }
    }
    assert(k == np); /* every segment's pieces */
    /* 3: the combiner's ingress, one piece at a time */
    qsort(pc, np, sizeof *pc, cmp_ready);
    double ingress = 0;
    for (size_t q = 0; q < np; q++) {
        const uint32_t i = pc[q].seg;
        const double bytes =
            (c->entry_bytes_fixed + c->entry_bytes_per_token * (double)tokens[i]) / c->pieces;
        const double t0 = ingress > pc[q].ready ? ingress : pc[q].ready;
        ingress = t0 + (c->combiner_link_bytes_s > 0 ? bytes / c->combiner_link_bytes_s : 0);
        if (ingress > arrived[i]) arrived[i] = ingress;
        if (ingress > r->arrived_s) r->arrived_s = ingress;
    }
    /* 4-5: compose in request order as entries complete, then the query */
    double t = 0;
    for (size_t i = 0; i < n; i++) {
        if (arrived[i] > t) {
            r->compose_wait_s += arrived[i] - t;
            t = arrived[i];
        }
        t += c->compose_s;
    }
    r->ttft_s = t + c->query_s;
out:
    free(w);
    free(worker);
    free(order);
    free(ps);
    free(pe);
    free(free_at);
    free(link_at);
    free(arrived);
    free(pc);
    return rc;
}
