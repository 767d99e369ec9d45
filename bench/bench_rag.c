/*
 * hypic-bench rag: what position-independent caching buys in load. A RAG
 * trace (documents drawn by Zipf popularity, log-normal lengths, k distinct
 * documents and a short query per request, Poisson arrivals) is replayed
 * open-loop against a running hypic-cached, in each mode (full, prefix, pic)
 * at each offered rate of a rising list, and the highest rate each mode
 * sustains with its p99 TTFT under an SLO is compared: qps_ratio = pic over
 * prefix.
 *
 * The daemon is a real child process on loopback ports it picks, started and
 * always stopped through the tests' fixture (tests/cached/daemon_fixture.h),
 * as `hypic-bench service` does. Its host tier is sized to hold every entry
 * of the trace's documents and admits everything; prefix mode's checkpoints
 * get the same budget. Nothing is warmed: pic's first requests miss and build
 * their entries inline, prefix's build their checkpoints, as in production;
 * rates run from low to high, so a rate meets the cache the lower ones left
 * (--warm builds every document first with Warm instead).
 *
 * Open loop without coordinated omission, as in client/ctl_bench.c: request i
 * is due at t0 + arrival_i · (trace rate / offered rate) whatever the answers;
 * a pool of sender threads (one connection each) takes requests in order and
 * a request's TTFT counts from when it was due, at the client, until the
 * Prefill response (max_new_tokens 0: the response is the first token). A
 * request that failed, or that was still unsent when the drain time after
 * the window ran out, counts as an infinite TTFT in the percentiles. Once a
 * mode misses the SLO at a rate its higher rates are skipped (--all-rates
 * runs them).
 *
 * The trace format (docs/rag.md): a first line "# hypic-rag-trace v1", then
 * one request per line, "<arrival s> <query tokens> <doc>:<tokens> ...".
 * Document d's tokens are its first <tokens> ids of a random stream seeded
 * by d, in [3, vocab): the presets have random weights, so lengths and reuse
 * matter, content does not.
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_RATES = 16, MODES = 3, MAX_SENDERS = 256 };

/* The defaults of the SLO on p99 TTFT and of the offered rates (docs/rag.md
 * says why these values). */
#define SLO_MS_DEFAULT 5000.0
#define RATES_DEFAULT  "0.1,0.2,0.3,0.5,0.8,1.2,2,3"

static const hy_mode k_mode[MODES] = {HY_MODE_FULL, HY_MODE_PREFIX, HY_MODE_PIC};
static const Hypic__V1__Mode k_mode_rpc[MODES] = {
    HYPIC__V1__MODE__MODE_FULL, HYPIC__V1__MODE__MODE_PREFIX, HYPIC__V1__MODE__MODE_PIC};

/* --- trace files (the generator and the requests' messages: bench_trace.c) ------------ */

#define TRACE_MAGIC "# hypic-rag-trace v1"

static int trace_write(const hy_rag_trace *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return HY_EIO;
    fprintf(f, TRACE_MAGIC "\n# <arrival s> <query tokens> <doc id>:<doc tokens> ...\n");
    for (size_t i = 0; i < t->n; i++) {
        fprintf(f, "%.6f %d", t->r[i].arrival, t->r[i].nq);
        for (int j = 0; j < t->r[i].k; j++) fprintf(f, " %u:%d", t->r[i].doc[j], t->r[i].len[j]);
        fputc('\n', f);
    }
    return fclose(f) ? HY_EIO : HY_OK;
}

/* A whole-string integer in [lo, hi]. */
static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

/* Reads a trace file; on a bad line prints "FILE:LINE: field N ('text'): why"
 * and returns HY_EINVAL. Its rate: requests over the last arrival. */
static int trace_read(hy_rag_trace *t, const char *path, int max_tokens)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "hypic-bench rag: --trace %s: %s\n", path, strerror(errno));
        return HY_EIO;
    }
    char line[65536];
    int rc = HY_OK;
    long no = 0;
    double last = 0;
#define BAD(field, text, ...)                                                                      \
    do {                                                                                           \
        fprintf(stderr, "hypic-bench rag: %s:%ld: field %d ('%s'): ", path, no, field, text);      \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        rc = HY_EINVAL;                                                                            \
        goto out;                                                                                  \
    } while (0)
    while (fgets(line, sizeof line, f)) {
        no++;
        if (!strchr(line, '\n') && !feof(f)) BAD(0, "", "line longer than %zu bytes", sizeof line);
        line[strcspn(line, "\r\n")] = '\0';
        if (no == 1) {
            if (strcmp(line, TRACE_MAGIC) != 0)
                BAD(0, line, "the first line must be '" TRACE_MAGIC "'");
            continue;
        }
        char *save = NULL, *tok = strtok_r(line, " \t", &save);
        if (!tok || tok[0] == '#') continue; /* blank or comment */
        hy_rag_request r = {0};
        char *end;
        r.arrival = strtod(tok, &end);
        if (end == tok || *end || !isfinite(r.arrival) || r.arrival < 0)
            BAD(1, tok, "arrival: a number of seconds >= 0");
        if (r.arrival < last) BAD(1, tok, "arrival before the previous line's (%.6f)", last);
        last = r.arrival;
        long v;
        if (!(tok = strtok_r(NULL, " \t", &save))) BAD(2, "", "missing: query tokens");
        if (!parse_long(tok, 1, max_tokens, &v)) BAD(2, tok, "query tokens: 1..%d", max_tokens);
        r.nq = (int)v;
        for (int field = 3; (tok = strtok_r(NULL, " \t", &save)); field++) {
            if (r.k == HY_RAG_MAX_K) BAD(field, tok, "more than %d documents", HY_RAG_MAX_K);
            char *colon = strchr(tok, ':');
            if (!colon) BAD(field, tok, "a document: <doc id>:<doc tokens>");
            *colon = '\0';
            long id;
            if (!parse_long(tok, 0, UINT32_MAX, &id)) {
                *colon = ':';
                BAD(field, tok, "doc id: 0..%u", UINT32_MAX);
            }
            if (!parse_long(colon + 1, 1, max_tokens, &v)) {
                *colon = ':';
                BAD(field, tok, "doc tokens: 1..%d", max_tokens);
            }
            r.doc[r.k] = (uint32_t)id;
            r.len[r.k++] = (int)v;
        }
        if (!r.k) BAD(3, "", "missing: at least one <doc id>:<doc tokens>");
        if (hy_rag_trace_add(t, &r)) {
            rc = HY_ENOMEM;
            goto out;
        }
    }
#undef BAD
    if (no == 0) {
        fprintf(stderr, "hypic-bench rag: %s:1: empty; the first line must be '" TRACE_MAGIC "'\n",
                path);
        rc = HY_EINVAL;
    } else if (t->n < 2 || !(last > 0)) {
        fprintf(stderr, "hypic-bench rag: %s: needs at least 2 requests over a time > 0\n", path);
        rc = HY_EINVAL;
    } else {
        t->rate = (double)t->n / last;
    }
out:
    fclose(f);
    return rc;
}

/* --- one run: a mode at an offered rate --------------------------------------------- */

typedef struct sample {
    double ttft_ms;       /* client, from due; INFINITY when failed or unsent */
    double server_ms;     /* timings.ttft_ms */
    int hits, segs, code; /* code: gRPC status; -1 unsent */
    double done;          /* completion time, monotonic s */
} sample;

typedef struct run {
    const hy_rag_request *q; /* the window's requests, [n] */
    hy_rag_wire *w;          /* their messages, [n] */
    double base;             /* the trace time the window starts at */
    size_t n;                /* requests due inside the window */
    double scale;            /* due = t0 + arrival · scale */
    double t0, t_stop;       /* t_stop: a request not sent by then is abandoned */
    Hypic__V1__Mode mode;
    const char *target;
    int64_t deadline_ms;
    atomic_size_t next;
    pthread_barrier_t go;
    sample *s; /* [n] */
} run;

typedef struct sender {
    run *r;
    pthread_t thread;
    hyc *c;
    int connect_code;
    char msg[512];
} sender;

static void sleep_until(double t)
{
    struct timespec ts = {.tv_sec = (time_t)t, .tv_nsec = (long)((t - floor(t)) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* One Prefill, its TTFT counted from `due`. */
static void send_one(run *r, hyc *c, size_t i, double due)
{
    sample *s = &r->s[i];
    Hypic__V1__PrefillRequest rq = r->w[i].rq; /* a copy: the mode differs per run */
    rq.mode = r->mode;
    Hypic__V1__PrefillResponse *resp = NULL;
    hyc_status st;
    hyc_prefill(c, &rq, &resp, &st);
    s->done = hy_now_s();
    s->code = st.code;
    s->segs = (int)rq.n_segments;
    if (st.code == HYC_OK && resp) {
        s->ttft_ms = (s->done - due) * 1e3;
        s->server_ms = resp->timings ? resp->timings->ttft_ms : 0;
        for (size_t j = 0; j < resp->n_segments; j++)
            s->hits += resp->segments[j]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT ||
                       resp->segments[j]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_PREFIX;
    } else if (st.code != HYC_OK && st.code != HYC_DEADLINE_EXCEEDED) {
        static atomic_int said;
        if (atomic_fetch_add(&said, 1) < 3)
            fprintf(stderr, "hypic-bench rag: request %zu: %s: %s\n", i, hyc_code_name(st.code),
                    st.msg);
    }
    hyc_free(resp);
}

static void *sender_main(void *arg)
{
    sender *sd = arg;
    run *r = sd->r;
    hyc_options o = {.target = r->target, .deadline_ms = r->deadline_ms};
    hyc_status st = {0};
    if (!hyc_open(&o, &sd->c, &st)) { /* connect before the clock starts */
        Hypic__V1__HealthRequest hq = HYPIC__V1__HEALTH_REQUEST__INIT;
        Hypic__V1__HealthResponse *h = NULL;
        hyc_health(sd->c, &hq, &h, &st);
        hyc_free(h);
    }
    sd->connect_code = st.code;
    snprintf(sd->msg, sizeof sd->msg, "%s", st.msg);
    pthread_barrier_wait(&r->go); /* every sender connected */
    pthread_barrier_wait(&r->go); /* t0 set, or the run called off (n = 0) */
    if (sd->connect_code != HYC_OK) return NULL;
    for (size_t i; (i = atomic_fetch_add(&r->next, 1)) < r->n;) {
        const double due = r->t0 + (r->q[i].arrival - r->base) * r->scale;
        r->s[i].code = -1; /* unsent until sent */
        r->s[i].ttft_ms = INFINITY;
        if (hy_now_s() > r->t_stop) continue; /* abandoned: counted as over any SLO */
        sleep_until(due);
        send_one(r, sd->c, i, due);
    }
    return NULL;
}

/* What a run measured. */
typedef struct result {
    bool ran;
    double offered, achieved; /* requests/s */
    double realized;          /* requests/s the window's arrivals held: n / window */
    double p50, p99;          /* client TTFT, ms; INFINITY past the failures */
    double server_p50;        /* timings.ttft_ms of the successful ones */
    size_t requests, ok, errors, timeouts, unsent;
    long hits, segs;
} result;

/* Nearest-rank percentile q of sorted v[0..n). */
static double percentile(const double *v, size_t n, double q)
{
    if (!n) return NAN;
    const size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

/* The window of a rate: the requests from `first` on whose arrivals, scaled
 * to `rate`, fall in [0, duration) after the request before `first`, and more
 * until there are min_n (as the trace allows). Their count; *window: its
 * length in seconds (duration, or up to the last request's due time). */
static size_t window_size(const hy_rag_trace *t, size_t first, double rate, double duration,
                          size_t min_n, double *window)
{
    const double base = first ? t->r[first - 1].arrival : 0, scale = t->rate / rate;
    size_t n = 0;
    while (first + n < t->n && (t->r[first + n].arrival - base) * scale < duration) n++;
    while (first + n < t->n && n < min_n) n++;
    *window = n ? HY_MAX(duration, (t->r[first + n - 1].arrival - base) * scale) : duration;
    return n;
}

/* Sends requests [0, n) of the trace one after another, unmeasured, in mode m:
 * the warm-up that fills the cache (pic) or the checkpoints (prefix) before
 * the rates are measured. Prints its reuse. 0, or 1 after printing why. */
static int warmup(const hy_rag_trace *t, hy_rag_wire *w, size_t n, const char *target, int m)
{
    hyc_options o = {.target = target, .deadline_ms = 600000};
    hyc *c = NULL;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) {
        fprintf(stderr, "hypic-bench rag: warm-up: %s\n", st.msg);
        return 1;
    }
    const double t0 = hy_now_s();
    long hits = 0, segs = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        Hypic__V1__PrefillRequest rq = w[i].rq;
        rq.mode = k_mode_rpc[m];
        Hypic__V1__PrefillResponse *resp = NULL;
        if (hyc_prefill(c, &rq, &resp, &st)) {
            fprintf(stderr, "hypic-bench rag: warm-up request %zu: %s: %s\n", i,
                    hyc_code_name(st.code), st.msg);
            rc = 1;
        }
        for (size_t j = 0; resp && j < resp->n_segments; j++)
            hits += resp->segments[j]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT ||
                    resp->segments[j]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_PREFIX;
        segs += t->r[i].k;
        hyc_free(resp);
    }
    hyc_close(c);
    if (!rc)
        printf("  %-6s warm-up: %zu requests one at a time in %.1f s, reuse %ld/%ld segments "
               "(not measured)\n",
               hy_mode_name(k_mode[m]), n, hy_now_s() - t0, hits, segs);
    return rc;
}

/* Replays the trace's requests [first, first + n) at `rate` in mode m. A
 * request's deadline is `drain` after it was sent; one not sent `drain`
 * after the window is abandoned. 0, or 1 after printing why nothing could be
 * measured. */
static int run_one(const hy_rag_trace *t, hy_rag_wire *w, size_t first, size_t n,
                   const char *target, int m, double rate, double window, double drain,
                   int nsenders, result *out)
{
    run r = {.q = t->r + first,
             .w = w + first,
             .n = n,
             .scale = t->rate / rate,
             .base = first ? t->r[first - 1].arrival : 0,
             .mode = k_mode_rpc[m],
             .target = target};
    const double duration = window;
    r.deadline_ms = (int64_t)(drain * 1e3);
    memset(out, 0, sizeof *out);
    out->offered = rate;
    if (!r.n) {
        fprintf(stderr, "hypic-bench rag: no request of the trace is due in %.1f s at %.3g/s\n",
                duration, rate);
        return 1;
    }
    if (!(r.s = calloc(r.n, sizeof *r.s))) return 1;
    const int ns = (int)HY_MIN((size_t)nsenders, r.n);
    sender *sd = calloc((size_t)ns, sizeof *sd);
    if (!sd || pthread_barrier_init(&r.go, NULL, (unsigned)ns + 1)) {
        free(sd);
        free(r.s);
        return 1;
    }
    atomic_init(&r.next, 0);
    int started = 0, rc = 0;
    for (; started < ns; started++) {
        sd[started].r = &r;
        if (pthread_create(&sd[started].thread, NULL, sender_main, &sd[started])) break;
    }
    if (started < ns) { /* the barrier counts ns: cannot go on; threads stay blocked */
        fprintf(stderr, "hypic-bench rag: cannot start sender threads\n");
        exit(1); /* (the fixture's PDEATHSIG stops the daemon) */
    }
    pthread_barrier_wait(&r.go);
    for (int i = 0; i < ns; i++)
        if (sd[i].connect_code != HYC_OK) {
            fprintf(stderr, "hypic-bench rag: sender %d: %s: %s\n", i,
                    hyc_code_name(sd[i].connect_code), sd[i].msg);
            rc = 1;
            break;
        }
    r.t0 = hy_now_s() + 0.05;
    r.t_stop = r.t0 + duration + drain;
    if (rc) r.n = 0;
    pthread_barrier_wait(&r.go);
    for (int i = 0; i < ns; i++) {
        pthread_join(sd[i].thread, NULL);
        hyc_close(sd[i].c);
    }
    free(sd);
    pthread_barrier_destroy(&r.go);
    double *v = rc ? NULL : malloc(r.n * sizeof *v), *sv = rc ? NULL : malloc(r.n * sizeof *sv);
    if (!rc && (!v || !sv)) rc = 1;
    if (!rc) {
        size_t nsv = 0;
        double last = r.t0;
        for (size_t i = 0; i < r.n; i++) {
            const sample *s = &r.s[i];
            v[i] = s->ttft_ms;
            out->unsent += s->code == -1;
            out->errors += s->code > 0 && s->code != HYC_DEADLINE_EXCEEDED;
            out->timeouts += s->code == HYC_DEADLINE_EXCEEDED;
            if (s->code == HYC_OK) {
                out->ok++;
                sv[nsv++] = s->server_ms;
                last = HY_MAX(last, s->done);
            }
            if (m == 2 || m == 1) out->hits += s->hits, out->segs += s->segs;
        }
        qsort(v, r.n, sizeof *v, hy_bench_cmp_double);
        qsort(sv, nsv, sizeof *sv, hy_bench_cmp_double);
        out->ran = true;
        out->requests = r.n;
        out->p50 = percentile(v, r.n, 0.50);
        out->p99 = percentile(v, r.n, 0.99);
        out->server_p50 = percentile(sv, nsv, 0.50);
        out->achieved = (double)out->ok / HY_MAX(duration, last - r.t0);
        out->realized = (double)r.n / duration;
    }
    free(v);
    free(sv);
    free(r.s);
    return rc;
}

/* The highest offered rate whose p99 meets the SLO, interpolated linearly
 * between the last rate that meets it and the first that does not (to that
 * rate itself when the first failing p99 is infinite); 0 when the lowest
 * fails; the highest rate run when none fails (*capped set). */
static double qps_at_slo(const result *res, int nrates, double slo, bool *capped)
{
    *capped = false;
    double r_ok = 0, p_ok = 0;
    bool any = false;
    for (int i = 0; i < nrates; i++) {
        if (!res[i].ran) break;
        if (res[i].p99 <= slo) {
            r_ok = res[i].offered, p_ok = res[i].p99, any = true;
            continue;
        }
        if (!any || !isfinite(res[i].p99)) return r_ok;
        return r_ok + (res[i].offered - r_ok) * (slo - p_ok) / (res[i].p99 - p_ok);
    }
    *capped = any;
    return r_ok;
}

/* --- the daemon ----------------------------------------------------------------------- */

/* Bytes of one entry of a len-token document, from the model's shapes: per
 * linear layer the body state S [Hv][dk][dv] and the transition T [Hv][dk][dk]
 * and the conv tail, per attention layer K and V per token, fp32; plus the
 * token ids and a header's worth. An estimate for sizing the tier only. */
static double entry_bytes(const hy_model_config *c, int len)
{
    double b = 4.0 * len + 65536;
    for (int l = 0; l < c->n_layers; l++)
        if (c->layer_kind[l] == HY_LAYER_LINEAR)
            b += 4.0 * c->lin_v_heads * c->lin_dk * (c->lin_dv + c->lin_dk) +
                 4.0 * hy_config_conv_dim(c) * c->conv_kernel;
        else if (c->layer_kind[l] == HY_LAYER_ATTENTION)
            b += 8.0 * c->n_kv_heads * c->head_dim * len;
    return b;
}

/* gnuplot, when installed, renders rag_ttft.png from dir/rag_ttft.dat; x
 * from 0 to past the highest rate. */
static void render(const char *dir, double slo, double max_rate)
{
    char script[2048];
    snprintf(script, sizeof script,
             "set terminal pngcairo size 800,480\nset output 'rag_ttft.png'\n"
             "set title 'hypic-bench rag: TTFT vs offered load'\n"
             "set xlabel 'offered load (requests/s)'\nset ylabel 'TTFT (ms)'\n"
             "set logscale y\nset key outside right\nset datafile missing '?'\n"
             "set xrange [0:%g]\n"
             "plot for [m=0:2] 'rag_ttft.dat' u 1:(column(2+2*m+1)) w lp lw 2 lc m+1 pt m+1 t "
             "word('full prefix pic', m+1).' p99', "
             "for [m=0:2] '' u 1:(column(2+2*m)) w lp dt 2 lc m+1 pt m+1 t word('full prefix pic', "
             "m+1).' p50', "
             "%.3f w l lc rgb 'black' dt 3 t 'SLO'\n",
             max_rate * 1.1, slo);
    hy_bench_gnuplot(dir, "rag_ttft.gp", script);
}

/* Waits (up to 300 s) for the daemon to finish what timed-out or abandoned
 * calls left queued, so that the next run starts on an idle server. 0, or 1
 * after printing why not. */
static int quiesce(const char *target)
{
    hyc_options o = {.target = target, .deadline_ms = 10000};
    hyc *c = NULL;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) return 1;
    int rc = 1;
    for (int i = 0; i < 3000 && rc; i++) {
        Hypic__V1__StatsRequest rq = HYPIC__V1__STATS_REQUEST__INIT;
        Hypic__V1__StatsResponse *r = NULL;
        if (hyc_stats(c, &rq, &r, &st)) break;
        if (r->requests_in_flight == 0 && r->queue_depth == 0) rc = 0; /* besides this Stats */
        hyc_free(r);
        if (rc) usleep(100000);
    }
    hyc_close(c);
    if (rc) fprintf(stderr, "hypic-bench rag: the daemon did not go idle: %s\n", st.msg);
    return rc;
}

/* Host tier statistics after the runs: entries, bytes, evictions, dropped puts. */
static void print_store(const char *target, long long out[4])
{
    hyc_options o = {.target = target, .deadline_ms = 10000};
    hyc *c = NULL;
    hyc_status st;
    Hypic__V1__StatsRequest rq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    out[0] = out[1] = out[2] = out[3] = -1;
    if (!hyc_open(&o, &c, &st) && !hyc_stats(c, &rq, &r, &st) && r) {
        out[3] = (long long)r->puts_dropped;
        for (size_t i = 0; i < r->n_tiers; i++)
            if (r->tiers[i]->present && r->tiers[i]->tier == HYPIC__V1__TIER__TIER_HOST) {
                out[0] = (long long)r->tiers[i]->entries;
                out[1] = (long long)r->tiers[i]->bytes;
                out[2] = (long long)r->tiers[i]->evictions;
            }
    }
    hyc_free(r);
    hyc_close(c);
}

/* Builds the entry of every distinct document of the trace with Warm (--warm).
 * 0, or 1 after printing why. */
static int warm_docs(const hy_rag_trace *t, int vocab, const char *model, const char *target)
{
    hy_rag_doc *d = NULL;
    size_t nd = 0;
    if (hy_rag_docs(t, &d, &nd)) return 1;
    const int rc = hy_rag_warm(d, nd, vocab, model, target, "hypic-bench rag");
    free(d);
    if (!rc) printf("warmed %zu documents with Warm\n", nd);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: hypic-bench rag [--quick] [--trace FILE | --docs N --zipf S --doc-median L\n"
            "         --doc-sigma S --doc-min L --doc-max L --k K --query-tokens Q --seed N]\n"
            "         [--rates R1,R2,...] [--duration S] [--min-requests N] [--slo-ms MS]\n"
            "         [--senders N] [--drain S] [--warmup N] [--warm] [--all-rates]\n"
            "         [--preset small|tiny] [--write-trace FILE]\n"
            "         [--out DIR] [--daemon PATH]\n");
}

/* "%g" of a rate, as the JSON keys and the table print it. */
static const char *rate_key(double r, char *buf, size_t cap)
{
    snprintf(buf, cap, "%g", r);
    return buf;
}

static void json_ms(double v)
{
    if (isfinite(v))
        printf("%.2f", v);
    else
        printf("null");
}

/* Parses "0.25,0.5,1" into rising positive rates. */
static int parse_rates(const char *s, double *r, int *n)
{
    *n = 0;
    for (const char *p = s; *p;) {
        char *end;
        const double v = strtod(p, &end);
        if (end == p || !(v > 0) || !isfinite(v) || *n == MAX_RATES || (*n && v <= r[*n - 1]))
            return HY_EINVAL;
        r[(*n)++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return HY_EINVAL;
        p = end;
    }
    return *n ? HY_OK : HY_EINVAL;
}

/* The option table's values. */
typedef struct opts {
    hy_rag_gen g;
    double rates[MAX_RATES], duration, slo_ms, drain;
    int nrates, senders, min_requests, warmup;
    const char *trace_in, *trace_out, *outdir, *preset, *rates_text, *daemon;
    bool warm, all_rates, quick;
} opts;

/* Every option of the bench: its name, kind, where its value goes, bounds. */
typedef enum opt_kind { O_FLAG, O_INT, O_NUM, O_STR } opt_kind;
typedef struct opt {
    const char *name;
    opt_kind kind;
    size_t off; /* in opts */
    double lo, hi;
} opt;
#define OPT(name, kind, field, lo, hi)                                                             \
    {                                                                                              \
        name, kind, offsetof(opts, field), lo, hi                                                  \
    }
static const opt k_opts[] = {
    OPT("--quick", O_FLAG, quick, 0, 0),
    OPT("--warm", O_FLAG, warm, 0, 0),
    OPT("--all-rates", O_FLAG, all_rates, 0, 0),
    OPT("--trace", O_STR, trace_in, 0, 0),
    OPT("--write-trace", O_STR, trace_out, 0, 0),
    OPT("--out", O_STR, outdir, 0, 0),
    OPT("--rates", O_STR, rates_text, 0, 0),
    OPT("--daemon", O_STR, daemon, 0, 0),
    OPT("--preset", O_STR, preset, 0, 0),
    OPT("--docs", O_INT, g.docs, 1, 1000000),
    OPT("--k", O_INT, g.k, 1, HY_RAG_MAX_K),
    OPT("--query-tokens", O_INT, g.query, 1, 65536),
    OPT("--doc-min", O_INT, g.lmin, 1, 1 << 20),
    OPT("--doc-max", O_INT, g.lmax, 1, 1 << 20),
    OPT("--seed", O_INT, g.seed_int, 0, 2147483647),
    OPT("--senders", O_INT, senders, 1, MAX_SENDERS),
    OPT("--min-requests", O_INT, min_requests, 0, 1000000),
    OPT("--warmup", O_INT, warmup, 0, 1000000),
    OPT("--zipf", O_NUM, g.zipf, 0, 10),
    OPT("--doc-median", O_NUM, g.median, 1, 1 << 20),
    OPT("--doc-sigma", O_NUM, g.sigma, 0, 10),
    OPT("--duration", O_NUM, duration, 0.1, 86400),
    OPT("--slo-ms", O_NUM, slo_ms, 1, 1e7),
    OPT("--drain", O_NUM, drain, 0, 86400),
};
#undef OPT

/* Fills o from argv through k_opts. 0, or 2 after printing what is wrong. */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.g = {.docs = 200,
                      .k = 4,
                      .query = 16,
                      .lmin = 32,
                      .lmax = 1024,
                      .zipf = 1.0,
                      .median = 192,
                      .sigma = 0.5,
                      .seed_int = 1},
                .duration = 30,
                .slo_ms = -1,
                .drain = -1,
                .senders = 16,
                .min_requests = 10,
                .warmup = 30,
                .outdir = "hypic-bench-rag",
                .preset = "small",
                .rates_text = RATES_DEFAULT};
    for (int i = 0; i < argc; i++) {
        const opt *p = NULL;
        for (size_t j = 0; j < sizeof k_opts / sizeof *k_opts && !p; j++)
            if (strcmp(argv[i], k_opts[j].name) == 0) p = &k_opts[j];
        if (!p || (p->kind != O_FLAG && i + 1 == argc)) {
            fprintf(stderr, "hypic-bench rag: %s '%s'\n",
                    p ? "a value is missing after" : "unknown option", argv[i]);
            usage();
            return 2;
        }
        char *field = (char *)o + p->off, *end;
        const char *v = p->kind == O_FLAG ? NULL : argv[++i];
        long l;
        double x;
        switch (p->kind) {
        case O_FLAG:
            *(bool *)field = true;
            break;
        case O_STR:
            *(const char **)field = v;
            break;
        case O_INT:
            if (!parse_long(v, (long)p->lo, (long)p->hi, &l)) {
                fprintf(stderr, "hypic-bench rag: %s '%s': an integer in %.0f..%.0f\n", p->name, v,
                        p->lo, p->hi);
                return 2;
            }
            *(int *)field = (int)l;
            break;
        case O_NUM:
            x = strtod(v, &end);
            if (end == v || *end || !(x >= p->lo && x <= p->hi)) {
                fprintf(stderr, "hypic-bench rag: %s '%s': a number in [%g, %g]\n", p->name, v,
                        p->lo, p->hi);
                return 2;
            }
            *(double *)field = x;
            break;
        }
    }
    const char *rates = o->rates_text;
    o->g.seed = (uint64_t)o->g.seed_int;
    if (o->daemon) setenv("HYPIC_CACHED", o->daemon, 1); /* where the fixture looks first */
    if (o->quick) { /* everything exercised, in seconds: tiny pool, one short rate per mode */
        o->g.docs = 12, o->g.k = 2, o->g.query = 8, o->g.median = 48, o->g.sigma = 0.3;
        o->duration = 2, o->preset = "tiny", o->warmup = 4, o->min_requests = 4;
        rates = "4";
    }
    if (parse_rates(rates, o->rates, &o->nrates)) {
        fprintf(stderr,
                "hypic-bench rag: --rates '%s': up to %d rising positive numbers, "
                "comma-separated\n",
                rates, MAX_RATES);
        return 2;
    }
    if (o->g.k > o->g.docs || o->g.lmin > o->g.lmax) {
        fprintf(stderr, "hypic-bench rag: --k must be <= --docs and --doc-min <= --doc-max\n");
        return 2;
    }
    if (o->slo_ms < 0) o->slo_ms = SLO_MS_DEFAULT;
    if (o->drain < 0) o->drain = HY_MAX(5.0, 3 * o->slo_ms * 1e-3);
    return 0;
}

int hy_bench_rag(int argc, char **argv)
{
    setenv("OMP_WAIT_POLICY", "passive", 0);
    opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc) return rc;
    if (mkdir(o.outdir, 0755) && errno != EEXIST) {
        fprintf(stderr, "hypic-bench rag: --out %s: %s\n", o.outdir, strerror(errno));
        return 1;
    }

    /* the model: generated here, so its vocabulary is known before the daemon starts */
    char tmp[160], model_dir[192], daemon_dir[192];
    if (hy_bench_mkdtemp("rag", tmp, sizeof tmp)) return 1;
    snprintf(model_dir, sizeof model_dir, "%s/%s", tmp, o.preset);
    snprintf(daemon_dir, sizeof daemon_dir, "%s/daemon", tmp);
    rc = 1;
    hy_rag_trace t = {0};
    hy_rag_wire *w = NULL;
    hy_daemon d = {0};
    hy_err e = {0};
    hy_model_config mc;
    const double t_start = hy_now_s();
    /* the trace: each rate replays the requests after the lower rates' (so a
     * rate meets fresh requests against the cache the lower ones left), for
     * its window: --duration, or longer to hold --min-requests */
    double window[MAX_RATES], need = o.warmup;
    for (int k = 0; k < o.nrates; k++) need += 1.2 * o.rates[k] * o.duration + o.min_requests + 10;
    if (o.trace_in) {
        if (trace_read(&t, o.trace_in, 1 << 20)) goto out;
    } else if (hy_rag_trace_generate(&t, &o.g, (size_t)ceil(need))) {
        goto out;
    }
    const size_t nwarm = HY_MIN((size_t)o.warmup, t.n);
    size_t first[MAX_RATES + 1] = {nwarm}, count[MAX_RATES];
    for (int k = 0; k < o.nrates; k++) {
        count[k] =
            window_size(&t, first[k], o.rates[k], o.duration, (size_t)o.min_requests, &window[k]);
        first[k + 1] = first[k] + count[k];
    }
    printf("generating the '%s' preset in %s ...\n", o.preset, model_dir);
    fflush(stdout);
    if (hy_model_init(o.preset, 1, model_dir, "F32", &e) || hy_config_load(model_dir, &mc, &e)) {
        fprintf(stderr, "hypic-bench rag: %s\n", e.msg);
        goto out;
    }

    char trace_path[4200];
    snprintf(trace_path, sizeof trace_path, "%s/rag_trace.txt", o.outdir);
    if (trace_write(&t, trace_path) || (o.trace_out && trace_write(&t, o.trace_out))) {
        fprintf(stderr, "hypic-bench rag: cannot write the trace\n");
        goto out;
    }
    if (!(w = calloc(t.n, sizeof *w))) goto out;
    double tier = 64.0 * (1 << 20), tokens = 0;
    long distinct = 0;
    for (size_t i = 0; i < t.n; i++) {
        for (int j = 0; j < t.r[i].k; j++) {
            bool seen = false; /* distinct documents, for the tier's size */
            for (size_t a = 0; a <= i && !seen; a++)
                for (int b = 0; b < (a < i ? t.r[a].k : j) && !seen; b++)
                    seen = t.r[a].doc[b] == t.r[i].doc[j] && t.r[a].len[b] == t.r[i].len[j];
            if (!seen) tier += 1.5 * entry_bytes(&mc, t.r[i].len[j]), distinct++;
            tokens += t.r[i].len[j];
            if (t.r[i].len[j] + t.r[i].nq > (1 << 20)) goto out;
        }
        if (hy_rag_wire_make(&w[i], &t.r[i], i, mc.vocab, o.preset)) goto out;
    }
    const long tier_mib = (long)ceil(tier / (1 << 20));
    printf("trace: %zu requests (%s), %ld distinct documents, %.0f document tokens per request "
           "on average, k %d (first request), written to %s\n",
           t.n, o.trace_in ? o.trace_in : "generated", distinct, tokens / (double)t.n, t.r[0].k,
           trace_path);

    /* the daemon: a host tier that holds every entry and admits all; prefix's
     * checkpoints get the same budget */
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
             "models:\n  - {name: %s, path: \"%s\"}\n"
             "tiers:\n  host:\n    bytes: %ldM\n    admit: always\n"
             "pic:\n  prefix_cache_bytes: %ldM\n"
             "limits:\n  queue: 1024\n  in_flight_per_tenant: 1024\n"
             "log:\n  requests: false\n",
             o.preset, model_dir, tier_mib, tier_mib);
    if (mkdir(daemon_dir, 0700) != 0 || hy_daemon_start(&d, daemon_dir, yaml) != 0) {
        fprintf(stderr,
                "hypic-bench rag: hypic-cached did not start (%s; --daemon PATH or "
                "HYPIC_CACHED name the binary)\n",
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known");
        goto out;
    }
    printf("hypic-cached (pid %d) on %s: '%s', host tier %ld MiB (admit always), prefix "
           "checkpoints %ld MiB\n",
           (int)d.pid, d.grpc, o.preset, tier_mib, tier_mib);
    printf("open loop: %.1f s per rate (at least %d requests), %d senders, SLO p99 TTFT <= "
           "%.0f ms, drain %.0f s;\n  cache: %zu unmeasured requests first (prefix, pic), "
           "then warmed inline by the requests%s\n",
           o.duration, o.min_requests, o.senders, o.slo_ms, o.drain, nwarm,
           o.warm ? "; every document built with Warm before pic" : "");
    fflush(stdout);

    static result res[MODES][MAX_RATES];
    memset(res, 0, sizeof res);
    for (int m = 0; m < MODES; m++) {
        if (m == 2 && o.warm && warm_docs(&t, mc.vocab, o.preset, d.grpc)) goto out;
        if (m > 0 && nwarm && warmup(&t, w, nwarm, d.grpc, m)) goto out; /* full keeps nothing */
        for (int k = 0; k < o.nrates; k++) {
            result *r = &res[m][k];
            if (!count[k]) {
                printf("  %-6s the trace has no request left for %g/s: stopped (a longer trace, "
                       "or a shorter --duration)\n",
                       hy_mode_name(k_mode[m]), o.rates[k]);
                break;
            }
            if (run_one(&t, w, first[k], count[k], d.grpc, m, o.rates[k], window[k], o.drain,
                        o.senders, r) ||
                quiesce(d.grpc))
                goto out;
            printf("  %-6s %6.3g/s offered (%.3g/s in the window)  %6.3g/s achieved  p50 %9.1f ms  "
                   "p99 %9.1f ms  "
                   "server p50 %8.1f ms  %zu requests in %.0f s, %zu errors, %zu timeouts, "
                   "%zu unsent",
                   hy_mode_name(k_mode[m]), r->offered, r->realized, r->achieved, r->p50, r->p99,
                   r->server_p50, r->requests, window[k], r->errors, r->timeouts, r->unsent);
            if (m) printf(", reuse %ld/%ld segments", r->hits, r->segs);
            printf("\n");
            fflush(stdout);
            if (!(r->p99 <= o.slo_ms) && !o.all_rates) {
                if (k + 1 < o.nrates)
                    printf("  %-6s over the SLO: higher rates skipped (--all-rates runs them)\n",
                           hy_mode_name(k_mode[m]));
                break;
            }
        }
    }
    long long store[4];
    print_store(d.grpc, store);

    /* results */
    double qps[MODES];
    bool capped[MODES];
    long hits = 0, segs = 0, phits = 0, psegs = 0;
    for (int m = 0; m < MODES; m++) qps[m] = qps_at_slo(res[m], o.nrates, o.slo_ms, &capped[m]);
    for (int k = 0; k < o.nrates; k++)
        hits += res[2][k].hits, segs += res[2][k].segs, phits += res[1][k].hits,
            psegs += res[1][k].segs;
    const double hit_rate = segs ? (double)hits / (double)segs : 0;
    const double ratio = qps[1] > 0 ? qps[2] / qps[1] : NAN;
    printf("\nsustainable load under the SLO (p99 TTFT <= %.0f ms):\n", o.slo_ms);
    for (int m = 0; m < MODES; m++)
        printf("  %-6s %s%.3f requests/s\n", hy_mode_name(k_mode[m]), capped[m] ? ">= " : "",
               qps[m]);
    if (isfinite(ratio))
        printf("pic / prefix: %.2fx (target >= 2; the paper: 1.66)\n", ratio);
    else
        printf("pic / prefix: undefined (prefix meets the SLO at no rate run)\n");
    printf("pic hit rate over its runs: %.3f (%ld of %ld segments); prefix restored %ld of %ld "
           "segments from checkpoints\n",
           hit_rate, hits, segs, phits, psegs);
    printf("host tier after the runs: %lld entries, %.1f MiB, %lld evictions, %lld puts dropped\n",
           store[0], (double)store[1] / (1 << 20), store[2], store[3]);

    /* the plot's data: rate, then p50 and p99 per mode ('?': not run or unfinished) */
    char dat[4200];
    snprintf(dat, sizeof dat, "%s/rag_ttft.dat", o.outdir);
    FILE *f = fopen(dat, "w");
    if (f) {
        fprintf(f, "# rate full_p50 full_p99 prefix_p50 prefix_p99 pic_p50 pic_p99 (ms)\n");
        for (int k = 0; k < o.nrates; k++) {
            fprintf(f, "%g", o.rates[k]);
            for (int m = 0; m < MODES; m++)
                for (int q = 0; q < 2; q++) {
                    const double v = q ? res[m][k].p99 : res[m][k].p50;
                    if (res[m][k].ran && isfinite(v))
                        fprintf(f, " %.3f", v);
                    else
                        fprintf(f, " ?");
                }
            fputc('\n', f);
        }
        fclose(f);
        render(o.outdir, o.slo_ms, o.rates[o.nrates - 1]);
    }
    printf("%.0f s in all\n", hy_now_s() - t_start);

    /* the JSON line */
    char kb[32];
    printf("{\"bench\":\"rag\",\"preset\":\"%s\",\"trace\":\"%s\",\"requests_in_trace\":%zu,"
           "\"distinct_docs\":%ld,\"duration_s\":%.2f,\"senders\":%d,\"warmed\":%s,"
           "\"warmup_requests\":%zu,\"slo_ms\":%.1f,\"rates\":[",
           o.preset, o.trace_in ? "file" : "generated", t.n, distinct, o.duration, o.senders,
           o.warm ? "true" : "false", nwarm, o.slo_ms);
    for (int k = 0; k < o.nrates; k++) printf("%s%g", k ? "," : "", o.rates[k]);
    printf("],\"qps_at_slo\":{");
    for (int m = 0; m < MODES; m++)
        printf("%s\"%s\":%.4f", m ? "," : "", hy_mode_name(k_mode[m]), qps[m]);
    printf("},\"qps_at_slo_capped\":{");
    for (int m = 0; m < MODES; m++)
        printf("%s\"%s\":%s", m ? "," : "", hy_mode_name(k_mode[m]), capped[m] ? "true" : "false");
    printf("},\"qps_ratio\":");
    if (isfinite(ratio))
        printf("%.4f", ratio);
    else
        printf("null");
    static const char *const k_field[] = {"ttft_p50_ms", "ttft_p99_ms", "server_ttft_p50_ms",
                                          "achieved_qps", "window_qps"};
    for (int fld = 0; fld < 5; fld++) {
        printf(",\"%s\":{", k_field[fld]);
        for (int m = 0; m < MODES; m++) {
            printf("%s\"%s\":{", m ? "," : "", hy_mode_name(k_mode[m]));
            bool first = true;
            for (int k = 0; k < o.nrates; k++) {
                const result *r = &res[m][k];
                if (!r->ran) continue;
                printf("%s\"%s\":", first ? "" : ",", rate_key(o.rates[k], kb, sizeof kb));
                first = false;
                json_ms(fld == 0   ? r->p50
                        : fld == 1 ? r->p99
                        : fld == 2 ? r->server_p50
                        : fld == 3 ? r->achieved
                                   : r->realized);
            }
            printf("}");
        }
        printf("}");
    }
    size_t errors = 0, unsent = 0, timeouts = 0;
    for (int m = 0; m < MODES; m++)
        for (int k = 0; k < o.nrates; k++)
            errors += res[m][k].errors, unsent += res[m][k].unsent, timeouts += res[m][k].timeouts;
    printf(",\"errors\":%zu,\"timeouts\":%zu,\"unsent\":%zu,\"hit_rate\":%.4f,\"pic_hits\":%ld,"
           "\"pic_segments\":%ld,"
           "\"prefix_reuse_rate\":%.4f,\"host_tier\":{\"entries\":%lld,\"bytes\":%lld,"
           "\"evictions\":%lld,\"puts_dropped\":%lld}}\n",
           errors, timeouts, unsent, hit_rate, hits, segs,
           psegs ? (double)phits / (double)psegs : 0, store[0], store[1], store[2], store[3]);
    rc = 0;
out:
    fflush(stdout);
    if (d.pid > 0 && !hy_daemon_stop(&d)) {
        fprintf(stderr, "hypic-bench rag: hypic-cached did not stop cleanly; its log:\n");
        char cmd[sizeof d.log + 32];
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", d.log);
        if (system(cmd)) { /* the log is best effort */
        }
        rc = 1;
    }
    if (w)
        for (size_t i = 0; i < t.n; i++) free(w[i].ids);
    free(w);
    free(t.r);
    hy_bench_rmtree(tmp);
    return rc;
}
