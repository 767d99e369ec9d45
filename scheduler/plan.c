/*
 * The cost model and the planner (hy_scheduler.h).
 *
 * LPT is Graham's rule: sort the jobs by processing time, longest first, and
 * give each to the machine that would finish it earliest. Its makespan is
 * within 4/3 − 1/(3m) of the optimum on identical machines, where round-robin
 * in arrival order can be off by a factor approaching m when one long job
 * follows a run of short ones — which is what a RAG request with one long
 * document among short ones looks like. With workers of different measured
 * speeds "earliest finish" (ready + cost / speed) is the natural extension.
 */
#include "hy_scheduler.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double hy_cost_prefill(const hy_cost_model *c, uint64_t n)
{
    const double x = (double)n;
    return c->fixed_s + c->per_token_s * x + c->per_token2_s * x * x;
}

/* Solves the normal equations of a least-squares fit over the terms in
 * use[] (1, n, n²); false when they are singular. */
static bool fit_terms(const uint64_t *n, const double *s, size_t k, const bool use[3],
                      double coef[3])
{
    int idx[3], d = 0;
    for (int j = 0; j < 3; j++)
        if (use[j]) idx[d++] = j;
    assert(d >= 1 && "hy_cost_fit keeps one term at least");
    double a[3][4] = {{0}};
    for (size_t i = 0; i < k; i++) {
        const double x = (double)n[i], f[3] = {1.0, x, x * x};
        for (int r = 0; r < d; r++) {
            for (int q = 0; q < d; q++) a[r][q] += f[idx[r]] * f[idx[q]];
            a[r][d] += f[idx[r]] * s[i];
        }
    }
    /* Gaussian elimination with partial pivoting on d ≤ 3 unknowns */
    for (int col = 0; col < d; col++) {
        int piv = col;
        for (int r = col + 1; r < d; r++)
            if (fabs(a[r][col]) > fabs(a[piv][col])) piv = r;
        if (fabs(a[piv][col]) < 1e-300) return false;
        for (int q = 0; q <= d; q++) {
            double t = a[col][q];
            a[col][q] = a[piv][q];
            a[piv][q] = t;
        }
        for (int r = 0; r < d; r++) {
            if (r == col) continue;
            const double f = a[r][col] / a[col][col];
            for (int q = col; q <= d; q++) a[r][q] -= f * a[col][q];
        }
    }
    coef[0] = coef[1] = coef[2] = 0;
    for (int r = 0; r < d; r++) coef[idx[r]] = a[r][d] / a[r][r];
    return true;
}

int hy_cost_fit(const uint64_t *n, const double *s, size_t k, hy_cost_model *c, hy_err *err)
{
    if (k < 2) return hy_err_set(err, HY_EINVAL, "cost fit: %zu samples, need at least 2", k);
    size_t distinct = 0;
    for (size_t i = 0; i < k; i++) {
        if (n[i] == 0) return hy_err_set(err, HY_EINVAL, "cost fit: sample %zu has 0 tokens", i);
        if (!(s[i] > 0))
            return hy_err_set(err, HY_EINVAL, "cost fit: sample %zu has a time of %g s", i, s[i]);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++) seen = n[j] == n[i];
        distinct += !seen;
    }
    /* as many terms as distinct sizes allow; drop any that come out negative */
    bool use[3] = {true, true, distinct >= 3};
    double coef[3];
    for (;;) {
        if (!fit_terms(n, s, k, use, coef))
            return hy_err_set(err, HY_EINVAL, "cost fit: the samples do not determine the model");
        int worst = -1;
        for (int j = 0; j < 3; j++)
            if (use[j] && coef[j] < 0 && (worst < 0 || coef[j] < coef[worst])) worst = j;
        if (worst < 0) break;
        use[worst] = false;
        if (!use[0] && !use[1] && !use[2])
            return hy_err_set(err, HY_EINVAL, "cost fit: no non-negative model fits");
    }
    for (int j = 0; j < 3; j++) assert(coef[j] >= 0 && "negative terms were dropped");
    *c = (hy_cost_model){coef[0], coef[1], coef[2]};
    return 0;
}

const char *hy_plan_policy_name(hy_plan_policy p)
{
    return p == HY_PLAN_LPT ? "lpt" : p == HY_PLAN_RR ? "rr" : "?";
}

typedef struct by_cost {
    double cost;
    uint32_t i;
} by_cost;

static int cmp_longest(const void *a, const void *b)
{
    const by_cost *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i; /* ties: request order, for determinism */
}

int hy_plan_make(hy_plan_policy pol, const uint64_t *tokens, size_t n, const hy_cost_model *c,
                 const hy_worker_view *w, size_t m, hy_plan *p, hy_err *err)
{
    if (m == 0 || m > HY_PLAN_MAX_WORKERS)
        return hy_err_set(err, HY_EINVAL, "plan: %zu workers (1..%d)", m, HY_PLAN_MAX_WORKERS);
    size_t up = 0;
    for (size_t j = 0; j < m; j++) {
        if (!(w[j].speed > 0))
            return hy_err_set(err, HY_EINVAL, "plan: worker %zu has speed %g", j, w[j].speed);
        up += w[j].up;
    }
    if (!up) return hy_err_set(err, HY_EINVAL, "plan: none of the %zu workers is up", m);
    if (pol != HY_PLAN_LPT && pol != HY_PLAN_RR)
        return hy_err_set(err, HY_EINVAL, "plan: policy %d", (int)pol);
    double *free_at = malloc(m * sizeof *free_at);
    by_cost *jobs = malloc((n ? n : 1) * sizeof *jobs);
    if (!free_at || !jobs) {
        free(free_at);
        free(jobs);
        return hy_err_set(err, HY_ENOMEM, "plan: out of memory");
    }
    for (size_t j = 0; j < m; j++) free_at[j] = w[j].ready_s;
    for (size_t i = 0; i < n; i++) jobs[i] = (by_cost){hy_cost_prefill(c, tokens[i]), (uint32_t)i};
    if (pol == HY_PLAN_LPT) qsort(jobs, n, sizeof *jobs, cmp_longest);
    p->makespan_s = 0;
    size_t rr = 0;
    for (size_t k = 0; k < n; k++) {
        const uint32_t i = jobs[k].i;
        size_t best = SIZE_MAX;
        if (pol == HY_PLAN_LPT) {
            double best_end = INFINITY;
            for (size_t j = 0; j < m; j++) {
                if (!w[j].up) continue;
                const double end = free_at[j] + jobs[k].cost / w[j].speed;
                if (end < best_end) best_end = end, best = j;
            }
        } else {
            while (!w[rr % m].up) rr++;
            best = rr++ % m;
        }
        /* some worker is up (checked above): every job finds one */
        assert(best < m && w[best].up);
        p->worker[i] = (int)best;
        p->order[k] = i;
        p->start_s[i] = free_at[best];
        p->end_s[i] = free_at[best] + jobs[k].cost / w[best].speed;
        free_at[best] = p->end_s[i];
        if (p->end_s[i] > p->makespan_s) p->makespan_s = p->end_s[i];
    }
    free(free_at);
    free(jobs);
    return 0;
}
