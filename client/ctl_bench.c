/*
 * hypicctl bench: load on Lookup or Prefill, measured at the client.
 *
 * Closed loop (--clients N): N threads, each with its own connection,
 * sending its next request as soon as the last is answered; the load is
 * whatever the server sustains. Open loop (--rate R): requests are due at
 * start + i/R whatever the answers, taken by up to N threads (default 64),
 * and a request's latency counts from when it was due, not from when a
 * thread got to it, so a server that falls behind shows it in the
 * percentiles instead of slowing the schedule (no coordinated omission).
 *
 * Request i carries --per-request K segments, i*K .. i*K+K-1 modulo the
 * set, so consecutive requests name different segments in different
 * orders. The set is warmed first (unless --no-warm), so the calls measured
 * hit. Every thread connects and makes one Health call before the clock
 * starts.
 */
#include "ctl_internal.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH_CODES       17 /* gRPC status codes 0..16 */
#define BENCH_CLIENTS_MAX 1024

typedef struct bench {
    const ctl *x;
    bool prefill;
    ctl_segments segs;
    ctl_ids query;
    Hypic__V1__Mode mode;
    size_t per_request;
    int clients;
    double rate;     /* requests/s; 0: closed loop */
    double duration; /* seconds */
    /* The start: each client counts itself in `ready` once connected and
     * waits for `phase` to leave 0 (1: go, with t0 and t_end set; 2: the
     * run is off). */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ready, phase;
    double t0, t_end;   /* monotonic seconds */
    atomic_ullong next; /* open loop: the next request's index */
} bench;

typedef struct worker {
    bench *b;
    int index;
    pthread_t thread;
    hyc *c;
    int connect_code; /* Health's status before the run */
    char connect_msg[512];
    double *lat; /* ms */
    size_t n, cap;
    uint64_t codes[BENCH_CODES + 1]; /* the last: codes outside 0..16 */
    uint64_t seq;                    /* closed loop: this thread's request count */
} worker;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - floor(t)) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {
    }
}

/* Request i: its segments are i*K .. i*K+K-1 of the set, modulo its size. */
static int call(bench *b, hyc *c, uint64_t i, Hypic__V1__Segment **segs, hyc_status *st)
{
    for (size_t k = 0; k < b->per_request; k++)
        segs[k] = b->segs.segs[(i * b->per_request + k) % b->segs.n];
    if (b->prefill) {
        Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
        rq.model = (char *)b->x->model;
        rq.segments = segs;
        rq.n_segments = b->per_request;
        rq.query = b->query.ids;
        rq.n_query = b->query.n;
        rq.mode = b->mode;
        Hypic__V1__PrefillResponse *r = NULL;
        hyc_prefill(c, &rq, &r, st);
        hyc_free(r);
    } else {
        Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
        rq.model = (char *)b->x->model;
        rq.segments = segs;
        rq.n_segments = b->per_request;
        Hypic__V1__LookupResponse *r = NULL;
        hyc_lookup(c, &rq, &r, st);
        hyc_free(r);
    }
    return st->code;
}

static void record(worker *w, double ms, int code)
{
    w->codes[code >= 0 && code < BENCH_CODES ? code : BENCH_CODES]++;
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 4096;
        double *l = realloc(w->lat, cap * sizeof *l);
        if (!l) return; /* (out of memory: the sample is counted, not timed) */
        w->lat = l;
        w->cap = cap;
    }
    w->lat[w->n++] = ms;
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    bench *b = w->b;
    Hypic__V1__Segment **segs = calloc(b->per_request, sizeof *segs);
    /* connect before the clock starts (the clients wait for their
     * connection: with 64 handshaking at once on a loaded 2-core host, one
     * first connect in ~20 runs failed, and a fail-fast call then fails
     * until gRPC dials again) */
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    hyc_status st;
    hyc_health(w->c, &hr, &h, &st);
    hyc_free(h);
    w->connect_code = st.code;
    snprintf(w->connect_msg, sizeof w->connect_msg, "%s", st.msg);
    pthread_mutex_lock(&b->mu);
    b->ready++;
    pthread_cond_broadcast(&b->cv);
    while (b->phase == 0) pthread_cond_wait(&b->cv, &b->mu);
    bool go = b->phase == 1;
    pthread_mutex_unlock(&b->mu);
    if (!go || !segs || w->connect_code != HYC_OK) {
        free(segs);
        return NULL;
    }
    for (;;) {
        double due;
        uint64_t i;
        if (b->rate > 0) {
            i = atomic_fetch_add(&b->next, 1);
            due = b->t0 + (double)i / b->rate;
            if (due >= b->t_end) break;
            sleep_until(due);
        } else {
            due = now_s();
            if (due >= b->t_end) break;
            i = w->seq++ * (uint64_t)b->clients + (uint64_t)w->index;
        }
        int code = call(b, w->c, i, segs, &st);
        record(w, (now_s() - due) * 1e3, code);
    }
    free(segs);
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile q of sorted v[0..n). */
static double percentile(const double *v, size_t n, double q)
{
    if (!n) return 0;
    size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

static int warm_all(bench *b)
{
    hyc *c;
    int rc = ctl_connect(b->x, 0, &c);
    if (rc) return rc;
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = (char *)b->x->model;
    rq.segments = b->segs.segs;
    rq.n_segments = b->segs.n;
    hyc_status st;
    if (hyc_warm(c, &rq, NULL, NULL, &st)) rc = ctl_fail(&st);
    hyc_close(c);
    return rc;
}

/* Runs the clients and reports; the exit code. */
static int run(bench *b)
{
    /* one call that fails fast first: a wrong address or certificate is
     * reported at once, not after the clients' deadline */
    hyc *probe;
    int prc = ctl_connect(b->x, CTL_DEADLINE_DEFAULT_MS, &probe);
    if (prc) return prc;
    Hypic__V1__HealthRequest phr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *ph = NULL;
    hyc_status pst;
    if (hyc_health(probe, &phr, &ph, &pst)) prc = ctl_fail(&pst);
    hyc_free(ph);
    hyc_close(probe);
    if (prc) return prc;
    worker *w = calloc((size_t)b->clients, sizeof *w);
    if (!w) return ctl_error("out of memory");
    int rc = CTL_OK, started = 0;
    for (int i = 0; i < b->clients && !rc; i++) {
        w[i].b = b;
        w[i].index = i;
        rc = ctl_connect_waiting(b->x, CTL_DEADLINE_DEFAULT_MS, &w[i].c);
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    for (int i = 0; i < b->clients && !rc; i++, started++)
        if (pthread_create(&w[i].thread, NULL, worker_main, &w[i]))
            rc = ctl_error("cannot start client thread %d", i);
    pthread_mutex_lock(&b->mu);
    while (b->ready < started) pthread_cond_wait(&b->cv, &b->mu);
    b->t0 = now_s();
    b->t_end = b->t0 + b->duration;
    b->phase = rc ? 2 : 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    for (int i = 0; i < started; i++) pthread_join(w[i].thread, NULL);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    double elapsed = now_s() - b->t0;
    size_t n = 0;
    uint64_t codes[BENCH_CODES + 1] = {0};
    for (int i = 0; i < b->clients; i++) {
        n += w[i].n;
        for (int k = 0; k <= BENCH_CODES; k++) codes[k] += w[i].codes[k];
        if (!rc && w[i].connect_code != HYC_OK) {
            hyc_status st = {.code = w[i].connect_code};
            snprintf(st.msg, sizeof st.msg, "%s", w[i].connect_msg);
            rc = ctl_fail(&st);
        }
    }
    double *lat = rc ? NULL : malloc((n ? n : 1) * sizeof *lat);
    if (!rc && !lat) rc = ctl_error("out of memory");
    if (!rc) {
        size_t k = 0;
        for (int i = 0; i < b->clients; i++) {
            if (w[i].n)
                memcpy(lat + k, w[i].lat, w[i].n * sizeof *lat); /* an idle client has none */
            k += w[i].n;
        }
        qsort(lat, n, sizeof *lat, cmp_double);
        uint64_t total = 0, errors = 0;
        for (int k2 = 0; k2 <= BENCH_CODES; k2++) total += codes[k2];
        errors = total - codes[0];
        double qps = elapsed > 0 ? (double)codes[0] / elapsed : 0;
        double mean = 0;
        for (size_t i = 0; i < n; i++) mean += lat[i];
        mean = n ? mean / (double)n : 0;
        double p50 = percentile(lat, n, 0.50), p90 = percentile(lat, n, 0.90),
               p99 = percentile(lat, n, 0.99), max = n ? lat[n - 1] : 0;
        if (b->x->json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "method", b->prefill ? "prefill" : "lookup");
            cJSON_AddStringToObject(o, "loop", b->rate > 0 ? "open" : "closed");
            cJSON_AddNumberToObject(o, "clients", b->clients);
            cJSON_AddNumberToObject(o, "rate", b->rate);
            cJSON_AddNumberToObject(o, "segments_per_request", (double)b->per_request);
            cJSON_AddNumberToObject(o, "duration_s", elapsed);
            cJSON_AddNumberToObject(o, "requests", (double)total);
            cJSON_AddNumberToObject(o, "ok", (double)codes[0]);
            cJSON *e = cJSON_AddObjectToObject(o, "errors");
            for (int k2 = 1; k2 <= BENCH_CODES; k2++)
                if (codes[k2])
                    cJSON_AddNumberToObject(e, k2 < BENCH_CODES ? hyc_code_name(k2) : "OTHER",
                                            (double)codes[k2]);
            cJSON_AddNumberToObject(o, "qps", qps);
            cJSON_AddNumberToObject(o, "mean_ms", mean);
            cJSON_AddNumberToObject(o, "p50_ms", p50);
            cJSON_AddNumberToObject(o, "p90_ms", p90);
            cJSON_AddNumberToObject(o, "p99_ms", p99);
            cJSON_AddNumberToObject(o, "max_ms", max);
            ctl_json_print(o);
        } else {
            printf("%s, %s loop, %d clients", b->prefill ? "Prefill" : "Lookup",
                   b->rate > 0 ? "open" : "closed", b->clients);
            if (b->rate > 0) printf(", %.1f requests/s scheduled", b->rate);
            printf(", %zu segments per request, %.1f s\n", b->per_request, elapsed);
            printf("requests  %llu   ok %llu   errors %llu\n", (unsigned long long)total,
                   (unsigned long long)codes[0], (unsigned long long)errors);
            printf("qps       %.1f\n", qps);
            printf("latency   p50 %.3f ms   p90 %.3f ms   p99 %.3f ms   max %.3f ms   mean %.3f "
                   "ms\n",
                   p50, p90, p99, max, mean);
            for (int k2 = 1; k2 <= BENCH_CODES; k2++)
                if (codes[k2])
                    printf("errors    %s: %llu\n", k2 < BENCH_CODES ? hyc_code_name(k2) : "OTHER",
                           (unsigned long long)codes[k2]);
        }
        if (errors)
            rc = ctl_error("bench: %llu of %llu requests failed", (unsigned long long)errors,
                           (unsigned long long)total);
    }
    free(lat);
    for (int i = 0; i < b->clients; i++) {
        hyc_close(w[i].c);
        free(w[i].lat);
    }
    free(w);
    return rc;
}

typedef struct bench_args {
    bool prefill; /* --method prefill */
    uint64_t clients, nrandom, tokens, seed, per;
    double rate, duration;
    ctl_list files;
    const char *query, *text;
    Hypic__V1__Mode mode;
    bool no_warm, ids;
} bench_args;

static int opt_method(ctl *x, const ctl_opt *o, void *args, const char *v)
{
    bench_args *a = args;
    if (strcmp(v, "prefill") == 0)
        a->prefill = true;
    else if (strcmp(v, "lookup") == 0)
        a->prefill = false;
    else
        return ctl_usage(x, "%s: '%s' is not lookup or prefill", o->name, v);
    return CTL_OK;
}

int ctl_bench(ctl *x, int argc, char **argv)
{
    static const ctl_opt opts[] = {
        CTL_CALL("--method", bench_args, prefill, opt_method),
        CTL_U64("--clients", bench_args, clients, 1, BENCH_CLIENTS_MAX),
        CTL_DOUBLE("--rate", bench_args, rate, 0.001, 1e7),
        CTL_DOUBLE("--duration", bench_args, duration, 0.01, 86400),
        CTL_GATHER("--segment", bench_args, files),
        CTL_U64("--random", bench_args, nrandom, 1, 1 << 20),
        CTL_U64("--tokens", bench_args, tokens, 1, 1 << 24),
        CTL_U64("--per-request", bench_args, per, 1, 1 << 16),
        CTL_U64("--seed", bench_args, seed, 0, UINT64_MAX),
        CTL_STR_ENDS("--query", bench_args, query),
        CTL_STR_ENDS("--text", bench_args, text),
        CTL_CALL("--mode", bench_args, mode, ctl_opt_mode),
        CTL_FLAG("--no-warm", bench_args, no_warm),
        CTL_FLAG("--ids", bench_args, ids),
    };
    static const ctl_cmdline cl = {CTL_OPTS(opts)};
    bench_args a = {.duration = 10, .seed = 1};
    if (ctl_parse(x, argc, argv, &cl, &a)) return CTL_USAGE;
    char **files = a.files.v;
    const size_t nfiles = a.files.n;
    const bool ids = a.ids, warm = !a.no_warm, mode_set = a.mode != 0;
    const char *query_file = a.query, *text = a.text;
    const uint64_t clients = a.clients, nrandom = a.nrandom, tokens = a.tokens, seed = a.seed,
                   per = a.per;
    bench b = {
        .x = x, .duration = a.duration, .rate = a.rate, .prefill = a.prefill, .mode = a.mode};
    if (!nfiles == !nrandom) return ctl_usage(x, "one of --segment FILE... or --random N");
    if (nrandom && !tokens) return ctl_usage(x, "--random needs --tokens L");
    if (!nrandom && tokens) return ctl_usage(x, "--tokens goes with --random");
    if (query_file && text) return ctl_usage(x, "--query or --text, not both");
    if (!b.prefill && (query_file || text || mode_set))
        return ctl_usage(x, "--query, --text and --mode are for --method prefill");
    b.clients = clients ? (int)clients : b.rate > 0 ? 64 : 16;
    hy_err e = {0};
    int rc = nfiles ? ctl_segments_from_files(&b.segs, files, nfiles, ids, &e)
                    : ctl_segments_random(&b.segs, nrandom, tokens, seed, &e);
    if (rc) return ctl_error("%s", e.msg);
    b.per_request = per ? (size_t)per : HY_MIN(b.segs.n, (size_t)4);
    if (b.prefill) {
        /* the default query: a short question, as a frontend would append */
        rc = query_file ? ctl_ids_from_file(query_file, ids, &b.query, &e)
                        : ctl_ids_from_text(text ? text : "\nQ: and so?", &b.query, &e);
        if (!rc && !b.query.n) rc = hy_err_set(&e, HY_EINVAL, "the query has no tokens");
        if (rc) {
            ctl_segments_free(&b.segs);
            return ctl_error("%s", e.msg);
        }
    }
    atomic_init(&b.next, 0);
    rc = warm ? warm_all(&b) : CTL_OK;
    if (!rc) rc = run(&b);
    ctl_ids_free(&b.query);
    ctl_segments_free(&b.segs);
    return rc;
}
