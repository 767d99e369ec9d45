/*
 * The quality watch (pic.shadow_rate): a fraction of the Prefill requests
 * that reused entries is computed again in full, off the request's path,
 * and the first token's distribution it served is compared with the exact
 * one.
 *
 * The request's handler offers it right after its pass (svc_shadow_offer:
 * the tokens and the served logits are copied, the draw made there); one
 * thread per daemon takes the offers in order, waits until the model has
 * no request running or queued, takes an executor context as a request
 * would, runs mode full over the same tokens and gives the context back —
 * or gives way before the pass's next step (executor.max_batch tokens) as
 * soon as a request waits for the context, the offer then dropped. KL(full
 * ‖ served) and whether the two argmaxes agree are summed per model and
 * mode: Stats (admins), /metrics, and a warning in the log for each
 * comparison past pic.shadow_kl_warn. Offers beyond SHADOW_QUEUE waiting are
 * dropped and counted: the watch never holds memory or time the service
 * needs.
 */
#include "service_internal.h"

#include "hy_kernels.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SHADOW_QUEUE        8
#define SHADOW_IDLE_POLL_US 5000

typedef struct shadow_job {
    svc_model *sm;
    int model;    /* its index in s->models */
    hy_mode mode; /* what was served */
    int32_t *tok; /* the segments' tokens, then the query's */
    size_t *seg_n;
    size_t nsegs, nq;
    float *served; /* [vocab] the logits served */
    struct shadow_job *next;
} shadow_job;

typedef struct svc_shadow {
    hy_svc *s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    shadow_job *head, *tail;
    int queued;
    uint64_t draw;        /* xorshift state of the sampling */
    svc_shadow_row *rows; /* [nmodels][HY_MODE_COUNT] */
} svc_shadow;

static void job_free(shadow_job *j)
{
    if (!j) return;
    free(j->tok);
    free(j->seg_n);
    free(j->served);
    free(j);
}

static svc_shadow_row *row_of(svc_shadow *w, int model, hy_mode mode)
{
    assert(model >= 0 && model < w->s->nmodels && (unsigned)mode < HY_MODE_COUNT);
    return &w->rows[(size_t)model * HY_MODE_COUNT + (size_t)mode];
}

/* A uniform draw in [0, 1) (under mu). */
static double draw(svc_shadow *w)
{
    uint64_t x = w->draw;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    w->draw = x;
    return (double)(x >> 11) * 0x1.0p-53;
}

void svc_shadow_offer(hy_svc *s, svc_model *sm, const hy_request *rq, int hits, const float *logits)
{
    svc_shadow *w = s->shadow;
    if (!w || hits == 0 || rq->mode == HY_MODE_FULL || rq->mode == HY_MODE_PREFIX) return;
    const int model = (int)(sm - s->models);
    pthread_mutex_lock(&w->mu);
    const bool take = draw(w) < (double)s->cfg.shadow_rate;
    const bool full = w->queued >= SHADOW_QUEUE;
    if (take && full) row_of(w, model, rq->mode)->dropped++;
    pthread_mutex_unlock(&w->mu);
    if (!take || full) return;
    size_t n = rq->nq;
    for (size_t i = 0; i < rq->nsegs; i++) n += rq->segs[i].n;
    const size_t V = (size_t)sm->c->vocab;
    shadow_job *j = calloc(1, sizeof *j);
    if (j) {
        j->tok = malloc(n * sizeof *j->tok);
        j->seg_n = malloc((rq->nsegs ? rq->nsegs : 1) * sizeof *j->seg_n);
        j->served = malloc(V * sizeof *j->served);
    }
    if (!j || !j->tok || !j->seg_n || !j->served) { /* the watch gives way */
        job_free(j);
        pthread_mutex_lock(&w->mu);
        row_of(w, model, rq->mode)->dropped++;
        pthread_mutex_unlock(&w->mu);
        return;
    }
    j->sm = sm, j->model = model, j->mode = rq->mode, j->nsegs = rq->nsegs, j->nq = rq->nq;
    size_t at = 0;
    for (size_t i = 0; i < rq->nsegs; i++) {
        memcpy(j->tok + at, rq->segs[i].tokens, rq->segs[i].n * sizeof *j->tok);
        j->seg_n[i] = rq->segs[i].n;
        at += rq->segs[i].n;
    }
    memcpy(j->tok + at, rq->query, rq->nq * sizeof *j->tok);
    memcpy(j->served, logits, V * sizeof *j->served);
    pthread_mutex_lock(&w->mu);
    if (w->stop || w->queued >= SHADOW_QUEUE) {
        row_of(w, model, rq->mode)->dropped++;
        pthread_mutex_unlock(&w->mu);
        job_free(j);
        return;
    }
    if (w->tail)
        w->tail->next = j;
    else
        w->head = j;
    w->tail = j;
    w->queued++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Waits until sm runs and queues nothing, then holds a context; NULL when
 * the watch stops or the daemon drains first. */
static svc_exec *wait_idle(svc_shadow *w, svc_model *sm)
{
    for (;;) {
        pthread_mutex_lock(&w->mu);
        const bool stop = w->stop;
        pthread_mutex_unlock(&w->mu);
        if (stop || atomic_load(&w->s->draining)) return NULL;
        svc_exec *x = svc_exec_take_idle(sm);
        if (x) return x;
        usleep(SHADOW_IDLE_POLL_US);
    }
}

static int argmax(const float *v, size_t n)
{
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int)best;
}

/* The watch's pass gives way (hy_exec_set_cancel) as soon as a request
 * waits for the model's executor: it delays none by more than a step. */
static bool someone_waits(void *ctx)
{
    svc_model *sm = ctx;
    svc_lock(&sm->mu);
    const bool waits = sm->head != NULL;
    svc_unlock(&sm->mu);
    return waits;
}

/* The exact pass over j's tokens, compared with what was served. */
static void shadow_run(svc_shadow *w, shadow_job *j)
{
    hy_svc *s = w->s;
    svc_model *sm = j->sm;
    const size_t V = (size_t)sm->c->vocab;
    float *exact = malloc(V * sizeof *exact);
    hy_segment *segs = calloc(j->nsegs ? j->nsegs : 1, sizeof *segs);
    svc_exec *x = exact && segs ? wait_idle(w, sm) : NULL;
    if (!x) {
        pthread_mutex_lock(&w->mu);
        row_of(w, j->model, j->mode)->dropped++;
        pthread_mutex_unlock(&w->mu);
        free(exact), free(segs);
        return;
    }
    size_t at = 0;
    for (size_t i = 0; i < j->nsegs; i++) {
        segs[i] = (hy_segment){.tokens = j->tok + at, .n = j->seg_n[i]};
        at += j->seg_n[i];
    }
    const hy_request rq = {
        .segs = segs, .nsegs = j->nsegs, .query = j->tok + at, .nq = j->nq, .mode = HY_MODE_FULL};
    hy_result res = {0};
    hy_err e = {0};
    const double t0 = hy_now_s();
    omp_set_num_threads(s->cfg.exec_threads);
    hy_exec_set_cancel(x->ex, someone_waits, sm);
    const int rc = hy_combine(x->ex, x->st, &rq, exact, &res, &e);
    const double dt = hy_now_s() - t0;
    svc_exec_give(s, sm, x);
    if (rc == HY_ECANCELED) { /* gave way to a request */
        pthread_mutex_lock(&w->mu);
        row_of(w, j->model, j->mode)->dropped++;
        pthread_mutex_unlock(&w->mu);
        free(exact), free(segs);
        return;
    }
    if (rc) {
        hy_log(HY_LOG_WARN, "shadow: the full pass of a %s request to model '%s' failed: %s",
               hy_mode_name(j->mode), sm->name, e.msg);
        pthread_mutex_lock(&w->mu);
        row_of(w, j->model, j->mode)->failed++;
        pthread_mutex_unlock(&w->mu);
        free(exact), free(segs);
        return;
    }
    const double kl = hy_kl_logits(exact, j->served, (int)V);
    const bool agree = argmax(exact, V) == argmax(j->served, V);
    const bool over = kl > (double)s->cfg.shadow_kl_warn;
    pthread_mutex_lock(&w->mu);
    svc_shadow_row *r = row_of(w, j->model, j->mode);
    r->compared++;
    r->kl_sum += kl;
    if (kl > r->kl_max) r->kl_max = kl;
    r->top1_agree += agree;
    r->over_threshold += over;
    r->seconds += dt;
    pthread_mutex_unlock(&w->mu);
    if (over)
        hy_log(HY_LOG_WARN,
               "shadow: model '%s', mode %s, %zu tokens in %zu segments: KL(full || served) = "
               "%.4g, past pic.shadow_kl_warn %.4g; top-1 %s",
               sm->name, hy_mode_name(j->mode), at + j->nq, j->nsegs, kl,
               (double)s->cfg.shadow_kl_warn, agree ? "agrees" : "differs");
    free(exact), free(segs);
}

static void *shadow_main(void *arg)
{
    svc_shadow *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->stop && !w->head) pthread_cond_wait(&w->cv, &w->mu);
        if (w->stop) break;
        shadow_job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        pthread_mutex_unlock(&w->mu);
        shadow_run(w, j);
        job_free(j);
        pthread_mutex_lock(&w->mu);
        w->queued--;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int svc_shadow_start(hy_svc *s, hy_err *err)
{
    if (s->cfg.shadow_rate <= 0.0f || s->nmodels == 0) return HY_OK;
    svc_shadow *w = calloc(1, sizeof *w);
    if (w) w->rows = calloc((size_t)s->nmodels * HY_MODE_COUNT, sizeof *w->rows);
    if (!w || !w->rows) {
        if (w) free(w->rows);
        free(w);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    w->s = s;
    w->draw = 0x9e3779b97f4a7c15ull ^ hy_wall_ns();
    if (!w->draw) w->draw = 1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, shadow_main, w)) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        free(w->rows);
        free(w);
        return hy_err_set(err, HY_ENOMEM, "cannot start the shadow thread (pic.shadow_rate)");
    }
    s->shadow = w;
    hy_log(HY_LOG_INFO,
           "shadow: %.3g of the requests that reuse entries recomputed in full when the executor "
           "is idle; warning past KL %.3g",
           (double)s->cfg.shadow_rate, (double)s->cfg.shadow_kl_warn);
    return HY_OK;
}

void svc_shadow_stop(hy_svc *s)
{
    svc_shadow *w = s->shadow;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    while (w->head) {
        shadow_job *j = w->head;
        w->head = j->next;
        job_free(j);
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->rows);
    free(w);
    s->shadow = NULL;
}

size_t svc_shadow_rows(hy_svc *s, svc_shadow_row *out, size_t cap)
{
    svc_shadow *w = s->shadow;
    if (!w) return 0;
    size_t n = 0;
    pthread_mutex_lock(&w->mu);
    for (int m = 0; m < s->nmodels; m++)
        for (int k = 0; k < HY_MODE_COUNT; k++) {
            const svc_shadow_row *r = row_of(w, m, (hy_mode)k);
            if (!r->compared && !r->dropped && !r->failed) continue;
            if (n < cap) {
                out[n] = *r;
                out[n].model = m;
                out[n].mode = (hy_mode)k;
            }
            n++;
        }
    pthread_mutex_unlock(&w->mu);
    return n < cap ? n : cap;
}
