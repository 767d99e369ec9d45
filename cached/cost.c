/*
 * Fetch or recompute (cost_internal.h): the fits of what fetching a model's
 * entries from each source and computing its tokens took, and the choice
 * they make for a hit.
 */
#include "cost_internal.h"
#include "hy_common.h"
#include "hy_scheduler.h"

#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

/* One fit: the last COST_SAMPLES samples (a ring) and the model they give. */
typedef struct fit {
    uint64_t n[COST_SAMPLES];
    double s[COST_SAMPLES];
    size_t count, next;
    hy_cost_model model;
    bool fitted;
} fit;

struct cost_fits {
    pthread_mutex_t mu;
    fit fetch[COST_FROM_COUNT];
    fit compute;
};

const char *cost_source_name(cost_source s)
{
    static const char *const names[] = {"host", "nvme", "remote"};
    return (unsigned)s < COST_FROM_COUNT ? names[s] : "?";
}

int cost_new(cost_fits **out)
{
    cost_fits *c = calloc(1, sizeof *c);
    if (!c) return HY_ENOMEM;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return HY_OK;
}

void cost_free(cost_fits *c)
{
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Adds a sample and refits (under mu). */
static void observe(fit *f, uint64_t n, double s)
{
    if (n == 0 || !(s > 0)) return;
    f->n[f->next] = n, f->s[f->next] = s;
    f->next = (f->next + 1) % COST_SAMPLES;
    if (f->count < COST_SAMPLES) f->count++;
    assert(f->count <= COST_SAMPLES && f->next < COST_SAMPLES); /* a ring of the last samples */
    hy_err ignored = {0};
    if (f->count >= COST_MIN_SAMPLES)
        f->fitted = hy_cost_fit(f->n, f->s, f->count, &f->model, &ignored) == HY_OK;
}

void cost_fetched(cost_fits *c, cost_source s, uint64_t bytes, double seconds)
{
    if (!c || (unsigned)s >= COST_FROM_COUNT) return;
    pthread_mutex_lock(&c->mu);
    observe(&c->fetch[s], bytes, seconds);
    pthread_mutex_unlock(&c->mu);
}

void cost_computed(cost_fits *c, uint64_t tokens, double seconds)
{
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    observe(&c->compute, tokens, seconds);
    pthread_mutex_unlock(&c->mu);
}

bool cost_fetch_s(cost_fits *c, cost_source s, uint64_t bytes, double *out)
{
    if (!c || (unsigned)s >= COST_FROM_COUNT) return false;
    pthread_mutex_lock(&c->mu);
    const bool ok = c->fetch[s].fitted;
    if (ok) *out = hy_cost_prefill(&c->fetch[s].model, bytes);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool cost_compute_s(cost_fits *c, uint64_t tokens, double *out)
{
    if (!c) return false;
    pthread_mutex_lock(&c->mu);
    const bool ok = c->compute.fitted;
    if (ok) {
        hy_cost_model m = c->compute.model;
        m.fixed_s = 0; /* a pass's own cost, paid whatever it computes */
        *out = hy_cost_prefill(&m, tokens);
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

bool cost_recompute(cost_fits *c, cost_policy pol, cost_source s, uint64_t bytes, uint64_t tokens,
                    double *fetch_s, double *compute_s, char *why, size_t cap)
{
    *fetch_s = *compute_s = 0;
    const bool fk = cost_fetch_s(c, s, bytes, fetch_s);
    const bool ck = cost_compute_s(c, tokens, compute_s);
    char size[32];
    if (bytes >= 1u << 20)
        snprintf(size, sizeof size, "%.1f MiB", (double)bytes / (1 << 20));
    else
        snprintf(size, sizeof size, "%.0f KiB", (double)bytes / 1024);
    if (pol == COST_FETCH) {
        snprintf(why, cap, "fetched from %s (%s): the request asked to fetch", cost_source_name(s),
                 size);
        return false;
    }
    if (pol == COST_RECOMPUTE) {
        snprintf(why, cap, "recomputed (%llu tokens): the request asked to recompute",
                 (unsigned long long)tokens);
        return true;
    }
    if (!fk || !ck) {
        snprintf(why, cap, "fetched from %s (%s): %s not measured yet", cost_source_name(s), size,
                 !fk ? "fetching from there" : "computing");
        return false;
    }
    const bool re = *compute_s < *fetch_s;
    snprintf(why, cap, "%s: computing %llu tokens %.2f ms %s fetching %s from %s %.2f ms",
             re ? "recomputed" : "fetched", (unsigned long long)tokens, *compute_s * 1e3,
             re ? "<" : ">=", size, cost_source_name(s), *fetch_s * 1e3);
    return re;
}
