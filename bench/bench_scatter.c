/*
 * hypic-bench scatter: segment-level parallelism (docs/scheduler.md). A cold
 * request of 16 segments (log-normal lengths in 128..4096 tokens, about 32k
 * in all, and a 16-token query) is sent to a hypic-cached whose router
 * spawns m scatter workers of one thread each (scatter.spawn), for m = 1 and
 * m = 2 — this machine's cores: one per worker, the combiner on whatever is
 * left. Measured, in the same run:
 *
 *   cold TTFT (at the client) for m = 1 and 2, and the parallel efficiency
 *   TTFT(1) / (2 · TTFT(2)) — the limit is 1 (two workers on two cores);
 *
 *   LPT against round-robin on a skewed set (long and short segments
 *   alternating: a RAG prompt of documents between short tool specs), on 2
 *   workers: the router's makespan (dispatch to the last entry received)
 *   under each policy, two daemons up at once and the policies alternating,
 *   the best of 2 each; lpt_over_rr_makespan = round-robin's ÷ LPT's;
 *
 *   the inputs of the discrete-event simulator (scheduler/sim.c), each
 *   measured: the cost model fitted to Build calls of 128..4096 tokens on a
 *   worker, the entry's bytes (fixed + per token, from the same calls), the
 *   loopback gRPC rate (GetEntry of the largest entry), the composition per
 *   hit and the query (an all-hits request's forward pass), a call's round
 *   trip (Health) as the dispatch cost. The simulator then predicts m = 1, 2,
 *   4, 8, 16; its error against the measured m = 1 and 2 is reported.
 *
 * Entries leave a worker layer by layer as they are built (Build's stream),
 * so the simulator's pieces are the model's layers; every process runs with
 * executor.max_batch 4096, the longest segment, so that each segment is one
 * step and its layers finish one at a time.
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hy_scheduler.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NSEG = 16, NQ = 16, NSKEW = 8, NCAL = 6, VOCAB_FIRST = 3 };
#define MODEL_NAME "bench" /* the model's name in the daemon's configuration */
#define SKEW_REPS  2       /* requests per policy on the skewed set */
static const uint64_t k_cal[NCAL] = {128, 256, 512, 1024, 2048, 4096};
static const size_t k_sim_m[] = {1, 2, 4, 8, 16};
#define NSIM (sizeof k_sim_m / sizeof k_sim_m[0])

/* --- requests ------------------------------------------------------------------------ */

typedef struct request {
    size_t n;
    uint32_t *ids[NSEG];
    Hypic__V1__Tokens tk[NSEG];
    Hypic__V1__Segment sg[NSEG];
    Hypic__V1__Segment *sp[NSEG];
} request;

/* Segment lengths len[0..n) and their tokens, seeded: random ids in
 * [3, vocab) — the presets have random weights, content does not matter. */
static int request_make(request *r, const uint64_t *len, size_t n, uint64_t seed, int vocab)
{
    memset(r, 0, sizeof *r);
    hy_rng g;
    hy_rng_seed(&g, seed);
    for (size_t i = 0; i < n; i++) {
        if (!(r->ids[i] = malloc(len[i] * sizeof(uint32_t)))) return HY_ENOMEM;
        for (uint64_t t = 0; t < len[i]; t++)
            r->ids[i][t] = VOCAB_FIRST + (uint32_t)(hy_rng_uniform(&g) * (vocab - VOCAB_FIRST));
        hy_bench_token_segment(&r->tk[i], &r->sg[i], r->ids[i], len[i]);
        r->sp[i] = &r->sg[i];
    }
    r->n = n;
    return HY_OK;
}

static void request_free(request *r)
{
    for (size_t i = 0; i < r->n; i++) free(r->ids[i]);
}

/* 16 log-normal lengths in [128, 4096] summing to about total. */
static void lengths(uint64_t *len, size_t n, uint64_t total, uint64_t seed)
{
    hy_rng g;
    hy_rng_seed(&g, seed);
    double raw[NSEG];
    for (size_t i = 0; i < n; i++) raw[i] = exp(0.9 * hy_rng_normal(&g));
    double scale = (double)total / (double)n;
    for (int it = 0; it < 20; it++) { /* rescale around the clamps */
        uint64_t sum = 0;
        for (size_t i = 0; i < n; i++) {
            len[i] = (uint64_t)HY_MIN(HY_MAX(lround(raw[i] * scale), 128), 4096);
            sum += len[i];
        }
        scale *= (double)total / (double)sum;
    }
}

/* --- the daemon ---------------------------------------------------------------------- */

typedef struct daemon_run {
    hy_daemon d;
    hyc *c;
    char dir[200];
} daemon_run;

static int daemon_up(daemon_run *x, const char *root, const char *name, const char *model_dir,
                     int workers, const char *policy)
{
    snprintf(x->dir, sizeof x->dir, "%.64s/%.32s", root, name);
    if (mkdir(x->dir, 0700)) return 1;
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
             "models: [{name: " MODEL_NAME ", path: %s}]\n"
             "tiers: {host: {bytes: 4G, admit: always}}\n"
             "executor: {threads: 1, max_batch: 4096}\n"
             "limits: {max_message: 256M}\n"
             "scatter: {spawn: %d, spawn_threads: 1, min_tokens: 0, policy: %s,\n"
             "          timeout_ms: 600000, retries: 0}\n"
             "log: {requests: false}\n",
             model_dir, workers, policy);
    if (hy_daemon_start(&x->d, x->dir, cfg)) return 1;
    hyc_options o = {.target = x->d.grpc, .deadline_ms = 3600000, .max_message = 256u << 20};
    hyc_status st;
    if (hyc_open(&o, &x->c, &st)) {
        fprintf(stderr, "scatter: %s\n", st.msg);
        return 1;
    }
    /* its workers answer */
    for (int i = 0; i < 600; i++) {
        Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
        Hypic__V1__StatsResponse *s = NULL;
        int up = 0;
        if (hyc_stats(x->c, &q, &s, &st) == 0) {
            for (size_t k = 0; k < s->n_workers; k++) up += s->workers[k]->up;
            hyc_free(s);
        }
        if (up == workers) return 0;
        usleep(100000);
    }
    fprintf(stderr, "scatter: the daemon's %d workers did not come up\n", workers);
    return 1;
}

static void daemon_down(daemon_run *x)
{
    hyc_close(x->c);
    hy_daemon_stop(&x->d);
}

/* One Prefill of r in pic mode: the client's TTFT (max_new_tokens 0: the
 * response is the first token) and the daemon's timings. */
static int prefill(hyc *c, request *r, double *ttft_s, Hypic__V1__Timings *tm)
{
    static uint32_t query[NQ];
    for (int i = 0; i < NQ; i++) query[i] = 10 + (uint32_t)i;
    Hypic__V1__PrefillRequest q = HYPIC__V1__PREFILL_REQUEST__INIT;
    q.model = MODEL_NAME;
    q.n_segments = r->n;
    q.segments = r->sp;
    q.n_query = NQ;
    q.query = query;
    q.mode = HYPIC__V1__MODE__MODE_PIC;
    q.top_k = 1;
    Hypic__V1__PrefillResponse *out = NULL;
    hyc_status st;
    const double t0 = hy_now_s();
    if (hyc_prefill(c, &q, &out, &st)) {
        fprintf(stderr, "scatter: Prefill: %s\n", st.msg);
        return 1;
    }
    *ttft_s = hy_now_s() - t0;
    if (tm) *tm = *out->timings;
    hyc_free(out);
    return 0;
}

/* The address of the daemon's first worker. */
static int first_worker(hyc *c, char *addr, size_t cap)
{
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *s = NULL;
    hyc_status st;
    if (hyc_stats(c, &q, &s, &st) || s->n_workers == 0) return 1;
    snprintf(addr, cap, "%s", s->workers[0]->address);
    hyc_free(s);
    return 0;
}

/* --- the simulator's inputs ------------------------------------------------------- */

typedef struct measured {
    hy_cost_model cost; /* a Build on a worker, call included */
    double bytes_fixed, bytes_per_token;
    double link_bytes_s; /* GetEntry over loopback gRPC */
    double rtt_s;        /* a Health round trip */
    double compose_s, query_s;
} measured;

/* Builds of k_cal tokens on the worker at addr: the cost model and the entry
 * size; the largest entry is fetched back from the daemon (put first) for
 * the link's rate. */
static int calibrate(daemon_run *x, int vocab, measured *ms)
{
    char addr[256];
    if (first_worker(x->c, addr, sizeof addr)) return 1;
    hyc_options o = {.target = addr, .deadline_ms = 600000, .max_message = 256u << 20};
    hyc *w;
    hyc_status st;
    if (hyc_open(&o, &w, &st)) return 1;
    double secs[NCAL], bytes[NCAL];
    uint64_t n[NCAL];
    request r;
    if (request_make(&r, k_cal, NCAL, 777, vocab)) return 1;
    Hypic__V1__EntryMeta *big = NULL;
    void *bigb = NULL;
    size_t bign = 0;
    int rc = 0;
    printf("  calibration: Build on one worker (1 thread)\n");
    for (int i = 0; i < NCAL && !rc; i++) {
        Hypic__V1__BuildRequest q = HYPIC__V1__BUILD_REQUEST__INIT;
        q.model = MODEL_NAME;
        q.tokens = &r.tk[i];
        Hypic__V1__EntryMeta *m = NULL;
        void *b = NULL;
        size_t len = 0;
        const double t0 = hy_now_s();
        rc = hyc_build(w, &q, &m, &b, &len, &st);
        secs[i] = hy_now_s() - t0;
        if (rc) {
            fprintf(stderr, "scatter: Build: %s\n", st.msg);
            break;
        }
        n[i] = k_cal[i];
        bytes[i] = (double)len;
        printf("    %5llu tokens: %7.3f s (%6.0f tokens/s), entry %.1f MiB\n",
               (unsigned long long)n[i], secs[i], (double)n[i] / secs[i], bytes[i] / 1048576.0);
        if (i == NCAL - 1) {
            big = m, bigb = b, bign = len;
        } else {
            hyc_free(m);
            free(b);
        }
    }
    hyc_close(w);
    request_free(&r);
    hy_err e = {0};
    if (!rc && hy_cost_fit(n, secs, NCAL, &ms->cost, &e)) {
        fprintf(stderr, "scatter: %s\n", e.msg);
        rc = 1;
    }
    if (!rc) { /* bytes = fixed + per_token · n, least squares */
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int i = 0; i < NCAL; i++) {
            sx += (double)n[i], sy += bytes[i];
            sxx += (double)n[i] * (double)n[i], sxy += (double)n[i] * bytes[i];
        }
        ms->bytes_per_token = (NCAL * sxy - sx * sy) / (NCAL * sxx - sx * sx);
        ms->bytes_fixed = (sy - ms->bytes_per_token * sx) / NCAL;
    }
    /* the link: the largest entry through the daemon and back */
    if (!rc) {
        Hypic__V1__PutEntryResponse *pr = NULL;
        rc = hyc_put_entry(x->c, big, bigb, bign, 0, &pr, &st);
        double best = 1e9;
        for (int k = 0; !rc && k < 3; k++) {
            Hypic__V1__GetEntryRequest g = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
            g.model = MODEL_NAME;
            g.key = pr->key;
            Hypic__V1__EntryMeta *m = NULL;
            void *b = NULL;
            size_t len = 0;
            const double t0 = hy_now_s();
            rc = hyc_get_entry(x->c, &g, &m, &b, &len, &st);
            best = fmin(best, hy_now_s() - t0);
            hyc_free(m);
            free(b);
        }
        if (!rc) ms->link_bytes_s = (double)bign / best;
        hyc_free(pr);
        if (rc) fprintf(stderr, "scatter: the link's rate: %s\n", st.msg);
    }
    hyc_free(big);
    free(bigb);
    /* a call's round trip */
    double rtt = 1e9;
    for (int k = 0; !rc && k < 20; k++) {
        Hypic__V1__HealthRequest h = HYPIC__V1__HEALTH_REQUEST__INIT;
        Hypic__V1__HealthResponse *hr = NULL;
        const double t0 = hy_now_s();
        if (hyc_health(x->c, &h, &hr, &st) == 0) rtt = fmin(rtt, hy_now_s() - t0);
        hyc_free(hr);
    }
    ms->rtt_s = rtt;
    return rc;
}

/* --- the benchmark ---------------------------------------------------------------- */

static int usage(void)
{
    fprintf(stderr, "usage: hypic-bench scatter [--model DIR] [--quick] [--tokens N] [--seed N]\n"
                    "  --model    a checkpoint (default: the small preset, generated)\n"
                    "  --quick    8k tokens instead of 32k\n"
                    "  --tokens   the cold request's tokens in all (default 32768)\n");
    return 2;
}

int hy_bench_scatter(int argc, char **argv)
{
    uint64_t total = 32768, seed = 11;
    const char *given = NULL;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            given = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            total = 8192;
        else if (i + 1 < argc && strcmp(argv[i], "--tokens") == 0)
            total = strtoull(argv[++i], NULL, 10);
        else if (i + 1 < argc && strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[++i], NULL, 10);
        else
            return usage();
    }
    if (total < NSEG * 128 || total > NSEG * 4096) {
        fprintf(stderr, "scatter: --tokens must be %d..%d\n", NSEG * 128, NSEG * 4096);
        return 2;
    }
    char root[64] = "/tmp/hypic-bench-scatter-XXXXXX";
    if (!mkdtemp(root)) return 1;
    char model_dir[PATH_MAX];
    hy_err e = {0};
    if (given && !realpath(given, model_dir)) {
        fprintf(stderr, "scatter: --model %s: %s\n", given, strerror(errno));
        hy_bench_rmtree(root);
        return 1;
    }
    if (!given) snprintf(model_dir, sizeof model_dir, "%s/small", root);
    if (!given && hy_model_init("small", 1, model_dir, "F32", &e)) {
        fprintf(stderr, "scatter: %s\n", e.msg);
        hy_bench_rmtree(root);
        return 1;
    }
    hy_model *mdl;
    if (hy_model_open(&mdl, model_dir, &e)) {
        fprintf(stderr, "scatter: %s\n", e.msg);
        hy_bench_rmtree(root);
        return 1;
    }
    const int vocab = hy_model_cfg(mdl)->vocab, layers = hy_model_cfg(mdl)->n_layers;
    hy_model_close(mdl);

    uint64_t len[NSEG];
    lengths(len, NSEG, total, seed);
    uint64_t sum = 0, longest = 0;
    for (int i = 0; i < NSEG; i++) sum += len[i], longest = HY_MAX(longest, len[i]);
    printf("scatter: model %s, a cold request of %d segments, %llu tokens (longest %llu), "
           "query %d\n  lengths:",
           given ? given : "small (preset)", NSEG, (unsigned long long)sum,
           (unsigned long long)longest, NQ);
    for (int i = 0; i < NSEG; i++) printf(" %llu", (unsigned long long)len[i]);
    printf("\n");

    int rc = 0;
    double ttft[3] = {0}, makespan[3] = {0};
    Hypic__V1__Timings tm1 = HYPIC__V1__TIMINGS__INIT, tm2 = HYPIC__V1__TIMINGS__INIT;
    measured ms = {0};
    request cold;
    if (request_make(&cold, len, NSEG, seed * 1000 + 1, vocab)) return 1;
    /* m = 1: the request, then the same again (all hits: composition), and
     * the calibration */
    daemon_run x;
    if (!(rc = daemon_up(&x, root, "m1", model_dir, 1, "lpt"))) {
        rc = prefill(x.c, &cold, &ttft[1], &tm1);
        if (!rc) {
            makespan[1] = tm1.scatter_makespan_ms / 1e3;
            printf("  m = 1: TTFT %.2f s (makespan of the builds %.2f s, the combiner waited "
                   "%.2f s)\n",
                   ttft[1], makespan[1], tm1.scatter_wait_ms / 1e3);
        }
        double hit_ttft;
        Hypic__V1__Timings th = HYPIC__V1__TIMINGS__INIT;
        if (!rc) rc = prefill(x.c, &cold, &hit_ttft, &th);
        if (!rc) {
            /* the all-hits pass: every seam (W tokens each), the compositions
             * and the query; the query's share of the computed part by its
             * tokens */
            const double fwd = th.forward_ms / 1e3, comp = th.compose_ms / 1e3;
            const double seam_tokens = NSEG * 8.0;
            ms.query_s = (fwd - comp) * NQ / (NQ + seam_tokens);
            ms.compose_s = (fwd - ms.query_s) / NSEG;
            printf("  all hits: TTFT %.3f s; forward %.3f s: %.2f ms per segment composed, "
                   "query %.2f ms\n",
                   hit_ttft, fwd, ms.compose_s * 1e3, ms.query_s * 1e3);
        }
        if (!rc) rc = calibrate(&x, vocab, &ms);
        daemon_down(&x);
    }
    /* m = 2 */
    if (!rc && !(rc = daemon_up(&x, root, "m2", model_dir, 2, "lpt"))) {
        rc = prefill(x.c, &cold, &ttft[2], &tm2);
        if (!rc) {
            makespan[2] = tm2.scatter_makespan_ms / 1e3;
            printf("  m = 2: TTFT %.2f s (makespan %.2f s, the combiner waited %.2f s)\n", ttft[2],
                   makespan[2], tm2.scatter_wait_ms / 1e3);
        }
        daemon_down(&x);
    }
    request_free(&cold);
    /* LPT vs round-robin on the skewed set: both daemons up at once, the
     * policies alternating request by request (each request cold: new
     * tokens), the best makespan of each over SKEW_REPS — this machine's
     * speed drifts by a fifth over minutes, and alternation spreads that
     * over both */
    uint64_t skew[NSKEW];
    const uint64_t lo = HY_MAX(128, total / 128), hi = HY_MIN(4096, total / 16);
    for (int i = 0; i < NSKEW; i++) skew[i] = i % 2 ? lo : hi;
    double mk[2] = {1e30, 1e30}, tt[2] = {1e30, 1e30};
    static const char *const pols[2] = {"lpt", "round-robin"};
    daemon_run sd[2];
    bool up[2] = {false, false};
    for (int p = 0; p < 2 && !rc; p++) {
        char name[32];
        snprintf(name, sizeof name, "skew-%s", pols[p]);
        up[p] = !(rc = daemon_up(&sd[p], root, name, model_dir, 2, pols[p]));
    }
    for (int k = 0; k < SKEW_REPS * 2 && !rc; k++) {
        const int p = k % 2;
        request sk;
        if (request_make(&sk, skew, NSKEW, seed * 1000 + 2 + (uint64_t)k, vocab)) return 1;
        Hypic__V1__Timings ts = HYPIC__V1__TIMINGS__INIT;
        double t;
        rc = prefill(sd[p].c, &sk, &t, &ts);
        mk[p] = fmin(mk[p], ts.scatter_makespan_ms / 1e3);
        tt[p] = fmin(tt[p], t);
        request_free(&sk);
    }
    for (int p = 0; p < 2; p++)
        if (up[p]) daemon_down(&sd[p]);
    if (!rc)
        printf("  skewed set (%llu,%llu x %d) on 2 workers, best of %d each, alternating: makespan "
               "LPT %.2f s, round-robin %.2f s (TTFT %.2f / %.2f s)\n",
               (unsigned long long)hi, (unsigned long long)lo, NSKEW / 2, SKEW_REPS, mk[0], mk[1],
               tt[0], tt[1]);
    hy_bench_rmtree(root);
    if (rc) return 1;

    /* the simulator, fed with what was measured */
    hy_sim_config sc = {.prefill = ms.cost,
                        .entry_bytes_fixed = ms.bytes_fixed,
                        .entry_bytes_per_token = ms.bytes_per_token,
                        .worker_link_bytes_s = ms.link_bytes_s,
                        .combiner_link_bytes_s = ms.link_bytes_s,
                        .pieces = layers,
                        .dispatch_s = ms.rtt_s,
                        .compose_s = ms.compose_s,
                        .query_s = ms.query_s};
    double sim[NSIM];
    for (size_t k = 0; k < NSIM; k++) {
        hy_sim_result sr;
        if (hy_sim_run(&sc, len, NSEG, k_sim_m[k], HY_PLAN_LPT, &sr, &e)) {
            fprintf(stderr, "scatter: simulator: %s\n", e.msg);
            return 1;
        }
        sim[k] = sr.ttft_s;
    }
    const double eff = ttft[1] / (2 * ttft[2]);
    const double err1 = fabs(sim[0] - ttft[1]) / ttft[1], err2 = fabs(sim[1] - ttft[2]) / ttft[2];
    const double lpt_rr = mk[1] / mk[0];
    printf("\ncost model (a Build on one worker thread, call included): %.4f s + %.3e s/token + "
           "%.3e s/token^2\n",
           ms.cost.fixed_s, ms.cost.per_token_s, ms.cost.per_token2_s);
    printf("entry: %.1f MiB + %.1f KiB/token; loopback gRPC %.2f GB/s; round trip %.3f ms\n",
           ms.bytes_fixed / 1048576.0, ms.bytes_per_token / 1024.0, ms.link_bytes_s / 1e9,
           ms.rtt_s * 1e3);
    printf("\n%-22s %10s %10s\n", "", "measured", "simulated");
    printf("%-22s %9.2fs %9.2fs  (error %.1f%%)\n", "TTFT, 1 worker", ttft[1], sim[0], err1 * 100);
    printf("%-22s %9.2fs %9.2fs  (error %.1f%%)\n", "TTFT, 2 workers", ttft[2], sim[1], err2 * 100);
    for (size_t k = 2; k < NSIM; k++)
        printf("%-22s %10s %9.2fs  speedup %.2fx\n", "", "", sim[k], sim[0] / sim[k]);
    printf("\nparallel efficiency at m = 2: %.3f (limit 1: two workers on this machine's two "
           "cores, the combiner sharing them)\n",
           eff);
    double all = 0; /* every build one after another, over the longest alone */
    for (int i = 0; i < NSEG; i++) all += hy_cost_prefill(&ms.cost, len[i]);
    printf("simulated speedup: m = 8 %.2fx, m = 16 %.2fx (the longest segment, %llu tokens, "
           "bounds it: %.2fx at most from the builds alone)\n",
           sim[0] / sim[3], sim[0] / sim[4], (unsigned long long)longest,
           all / hy_cost_prefill(&ms.cost, longest));
    printf("LPT over round-robin, makespan on the skewed set: %.2fx\n", lpt_rr);
    printf("{\"bench\":\"scatter\",\"model\":\"%s\",\"segments\":%d,\"tokens\":%llu,"
           "\"cold_ttft_s\":{\"m1\":%.4f,\"m2\":%.4f},\"makespan_s\":{\"m1\":%.4f,\"m2\":%.4f},"
           "\"efficiency_m2\":%.4f,\"lpt_over_rr_makespan\":%.4f,"
           "\"skew_makespan_s\":{\"lpt\":%.4f,\"rr\":%.4f},"
           "\"sim_ttft_s\":{\"m1\":%.4f,\"m2\":%.4f,\"m4\":%.4f,\"m8\":%.4f,\"m16\":%.4f},"
           "\"sim_speedup\":{\"m2\":%.3f,\"m4\":%.3f,\"m8\":%.3f,\"m16\":%.3f},"
           "\"sim_error_m1\":%.4f,\"sim_error_m2\":%.4f,"
           "\"cost_model\":{\"fixed_s\":%.6f,\"per_token_s\":%.4e,\"per_token2_s\":%.4e},"
           "\"entry_bytes\":{\"fixed\":%.0f,\"per_token\":%.1f},\"link_gbs\":%.3f,"
           "\"compose_ms\":%.3f,\"query_ms\":%.3f,\"pieces\":%d}\n",
           given ? "given" : "small", NSEG, (unsigned long long)sum, ttft[1], ttft[2], makespan[1],
           makespan[2], eff, lpt_rr, mk[0], mk[1], sim[0], sim[1], sim[2], sim[3], sim[4],
           sim[0] / sim[1], sim[0] / sim[2], sim[0] / sim[3], sim[0] / sim[4], err1, err2,
           ms.cost.fixed_s, ms.cost.per_token_s, ms.cost.per_token2_s, ms.bytes_fixed,
           ms.bytes_per_token, ms.link_bytes_s / 1e9, ms.compose_s * 1e3, ms.query_s * 1e3, layers);
    return 0;
}
