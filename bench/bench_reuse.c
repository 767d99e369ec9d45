/*
 * hypic-bench reuse: fetch or recompute, per hit. Two hypic-cached members
 * of one cluster (child processes on loopback, the tests' fixture; a static
 * member list) serve the `small` preset, each with a host tier too small for
 * every entry and an NVMe tier written through; requests go to the first,
 * so the hits of a request lie some in its memory, some on its NVMe and
 * some on the other member (streamed from it while the pass runs). Each request
 * holds short and long documents (every one warmed first) and a query; it is
 * sent three times in a row, once per policy — always fetch, always
 * recompute, auto (the daemon's choice: recompute a hit when computing its
 * tokens is estimated to cost less than fetching its bytes from where they
 * lie, both fitted to what the daemon measured) — in the six orders in turn,
 * so that the drift of a shared machine and what one request leaves behind
 * (in the tiers, in the caches) fall on all three alike. Reports the TTFT of
 * each (median and mean), what auto chose by source and length, and the
 * estimates' rates: the physical limits the choice weighs (compute per
 * token on these cores, bytes per second from each tier and from the other
 * member over loopback).
 *
 *   hypic-bench reuse [--requests N] [--quick] [--daemon PATH]
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"
#include "../tests/etcd_fixture.h" /* hy_test_etcd_free_port */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NSHORT = 8, NLONG = 8, SHORT_TOKENS = 24, LONG_TOKENS = 400, PER_REQUEST = 4 };
enum { FETCH = 0, RECOMPUTE = 1, AUTO = 2, NPOL = 3 };
static const char *const k_pol[NPOL] = {"always fetch", "always recompute", "auto"};
static const int k_reuse[NPOL] = {HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH,
                                  HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_RECOMPUTE,
                                  HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_AUTO};

typedef struct doc {
    uint32_t ids[LONG_TOKENS];
    size_t n;
    Hypic__V1__Tokens tk;
    Hypic__V1__Segment sg;
} doc;

static doc g_docs[NSHORT + NLONG];

static void docs_make(uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    for (int d = 0; d < NSHORT + NLONG; d++) {
        doc *x = &g_docs[d];
        x->n = d < NSHORT ? SHORT_TOKENS : LONG_TOKENS;
        for (size_t i = 0; i < x->n; i++) x->ids[i] = 3 + (uint32_t)(hy_rng_next(&r) % 250);
        hy_bench_token_segment(&x->tk, &x->sg, x->ids, x->n);
    }
}

static int on_warm(void *ctx, const Hypic__V1__WarmProgress *p)
{
    (void)ctx, (void)p;
    return 0;
}

/* What auto chose, by where the hit lay and how long its document is. */
enum { HOST = 0, NVME = 1, REMOTE = 2, NSRC = 3 };
static const char *const k_src[NSRC] = {"host", "nvme", "remote"};
typedef struct tally {
    int fetched[NSRC][2], recomputed[NSRC][2]; /* [source][long?] */
    char why_example[2][200];                  /* the last line of each outcome */
} tally;

int hy_bench_reuse(int argc, char **argv)
{
    long nreq = 12;
    bool quick = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            nreq = atol(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            quick = true;
        else if (!strcmp(argv[i], "--daemon") && i + 1 < argc)
            setenv("HYPIC_CACHED", argv[++i], 1);
        else {
            fprintf(stderr, "usage: hypic-bench reuse [--requests N] [--quick] [--daemon PATH]\n");
            return 2;
        }
    }
    if (quick) nreq = 3;
    if (nreq < 1 || nreq > 1000) {
        fprintf(stderr, "hypic-bench reuse: --requests must be in 1..1000\n");
        return 2;
    }
    char tmp[160], model_dir[192];
    if (hy_bench_mkdtemp("reuse", tmp, sizeof tmp)) return 1;
    snprintf(model_dir, sizeof model_dir, "%s/small", tmp);
    int port[2] = {hy_test_etcd_free_port(), hy_test_etcd_free_port()};
    while (port[1] == port[0]) port[1] = hy_test_etcd_free_port();
    hy_err e = {0};
    hy_daemon d[2];
    hyc *c = NULL;
    double *ttft[NPOL] = {0};
    int rc = 1, started = 0;
    printf("generating the 'small' preset in %s ...\n", model_dir);
    fflush(stdout);
    if (hy_model_init("small", 1, model_dir, "F32", &e)) {
        fprintf(stderr, "hypic-bench reuse: %s\n", e.msg);
        goto out;
    }
    for (; started < 2; started++) {
        /* a host tier of 8 MiB: a few of the entries (about 2 MiB each in
         * the default representation); every one also on NVMe */
        char dir[200], yaml[1400];
        snprintf(dir, sizeof dir, "%s/member-%c", tmp, 'a' + started);
        snprintf(yaml, sizeof yaml,
                 "listen: 127.0.0.1:%d\n"
                 "http_listen: \"\"\n"
                 "models:\n"
                 "  - {name: small, path: \"%s\"}\n"
                 "tiers:\n"
                 "  host: {bytes: 8M}\n"
                 "  nvme: {path: var/nvme, bytes: 1G, extent_bytes: 64M, write_through: true}\n"
                 "cluster:\n"
                 "  id: %c\n"
                 "  members: [{id: a, address: \"127.0.0.1:%d\"}, {id: b, address: "
                 "\"127.0.0.1:%d\"}]\n"
                 "log:\n"
                 "  requests: false\n",
                 port[started], model_dir, 'a' + started, port[0], port[1]);
        if (mkdir(dir, 0700) != 0 || hy_daemon_start(&d[started], dir, yaml) != 0) {
            fprintf(stderr, "hypic-bench reuse: hypic-cached did not start (%s)\n",
                    hy_daemon_bin() ? hy_daemon_bin() : "no binary known");
            goto out;
        }
    }
    hyc_options o = {.target = d[0].grpc, .deadline_ms = 600000};
    hyc_status st;
    if (hyc_open(&o, &c, &st)) {
        fprintf(stderr, "hypic-bench reuse: %s\n", st.msg);
        goto out;
    }
    docs_make(7);
    {
        Hypic__V1__Segment *sp[NSHORT + NLONG];
        for (int i = 0; i < NSHORT + NLONG; i++) sp[i] = &g_docs[i].sg;
        Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
        wr.model = "small";
        wr.n_segments = NSHORT + NLONG;
        wr.segments = sp;
        printf("warming %d documents of %d tokens and %d of %d ...\n", NSHORT, SHORT_TOKENS, NLONG,
               LONG_TOKENS);
        fflush(stdout);
        if (hyc_warm(c, &wr, on_warm, NULL, &st)) {
            fprintf(stderr, "hypic-bench reuse: warm: %s\n", st.msg);
            goto out;
        }
        /* the other member's share is put to it in the background: until
         * a Lookup through the first finds every one */
        Hypic__V1__LookupRequest lq = HYPIC__V1__LOOKUP_REQUEST__INIT;
        lq.model = "small";
        lq.n_segments = NSHORT + NLONG;
        lq.segments = sp;
        for (int t = 0;; t++) {
            Hypic__V1__LookupResponse *lr = NULL;
            const bool all = !hyc_lookup(c, &lq, &lr, &st) && lr->leading_hits == lq.n_segments;
            int away = 0;
            for (size_t i = 0; all && i < lr->n_segments; i++)
                away += strcmp(lr->segments[i]->member, "b") == 0;
            if (all)
                printf("  %d of the %d documents' entries are held by the other member\n", away,
                       NSHORT + NLONG);
            hyc_free(lr);
            if (all) break;
            if (t == 500) {
                fprintf(stderr, "hypic-bench reuse: the entries did not reach their owners\n");
                goto out;
            }
            usleep(20000);
        }
    }
    static uint32_t query[8] = {11, 22, 33, 44, 55, 66, 77, 88};
    for (int k = 0; k < NPOL; k++)
        if (!(ttft[k] = calloc((size_t)nreq, sizeof(double)))) goto out;
    tally t = {0};
    hy_rng r;
    hy_rng_seed(&r, 99);
    /* auto measures what it weighs from the requests it serves: a few first */
    const long warm_requests = 4;
    printf("%ld requests of %d documents (half short, half long), each under the three policies "
           "in the six orders in turn, after %ld unmeasured ones in auto ...\n",
           nreq, PER_REQUEST, warm_requests);
    fflush(stdout);
    for (long q = -warm_requests; q < nreq; q++) {
        Hypic__V1__Segment *sp[PER_REQUEST];
        for (int i = 0; i < PER_REQUEST; i++) {
            const int base = i % 2 ? NSHORT : 0, count = i % 2 ? NLONG : NSHORT;
            sp[i] = &g_docs[base + (int)(hy_rng_next(&r) % (uint64_t)count)].sg;
        }
        for (int j = 0; j < (q < 0 ? 1 : NPOL); j++) {
            /* the six orders in turn: each policy runs after each other one
             * as often (one after always-recompute's long pass finds cold
             * caches) */
            static const int order[6][NPOL] = {{0, 1, 2}, {1, 2, 0}, {2, 0, 1},
                                               {0, 2, 1}, {2, 1, 0}, {1, 0, 2}};
            const int k = q < 0 ? AUTO : order[q % 6][j];
            Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
            rq.model = "small";
            rq.n_segments = PER_REQUEST;
            rq.segments = sp;
            rq.n_query = 8;
            rq.query = query;
            rq.mode = HYPIC__V1__MODE__MODE_PIC;
            rq.reuse = (Hypic__V1__PrefillRequest__Reuse)k_reuse[k];
            Hypic__V1__PrefillResponse *pr = NULL;
            if (hyc_prefill(c, &rq, &pr, &st)) {
                fprintf(stderr, "hypic-bench reuse: prefill: %s\n", st.msg);
                goto out;
            }
            if (q >= 0) ttft[k][q] = pr->timings->ttft_ms;
            for (size_t i = 0; q >= 0 && k == AUTO && i < pr->n_segments; i++) {
                const Hypic__V1__SegmentOutcome *oc = pr->segments[i];
                if (!oc->why[0]) continue;
                const int src = strstr(oc->why, "from remote") ? REMOTE
                                : strstr(oc->why, "from nvme") ? NVME
                                                               : HOST;
                const bool lng = rq.segments[i]->tokens->n_ids == LONG_TOKENS;
                if (oc->recomputed)
                    t.recomputed[src][lng]++;
                else
                    t.fetched[src][lng]++;
                snprintf(t.why_example[oc->recomputed], sizeof t.why_example[0], "%s", oc->why);
            }
            hyc_free(pr);
        }
        if (q >= 0 && ((q + 1) % 4 == 0 || q + 1 == nreq)) {
            printf("  %ld/%ld requests\n", q + 1, nreq);
            fflush(stdout);
        }
    }
    double p50[NPOL], mean[NPOL];
    printf("\n policy              TTFT ms (median, mean over %ld requests)\n", nreq);
    for (int k = 0; k < NPOL; k++) {
        mean[k] = 0;
        for (long q = 0; q < nreq; q++) mean[k] += ttft[k][q] / (double)nreq;
        qsort(ttft[k], (size_t)nreq, sizeof(double), hy_bench_cmp_double);
        p50[k] = ttft[k][nreq / 2];
        printf(" %-18s %8.1f %8.1f\n", k_pol[k], p50[k], mean[k]);
    }
    printf("\nauto's choices (hits fetched / recomputed):\n");
    for (int x = 0; x < NSRC; x++)
        printf("  from %-6s  short %2d / %2d   long %2d / %2d\n", k_src[x], t.fetched[x][0],
               t.recomputed[x][0], t.fetched[x][1], t.recomputed[x][1]);
    if (t.why_example[0][0]) printf("  e.g. %s\n", t.why_example[0]);
    if (t.why_example[1][0]) printf("  e.g. %s\n", t.why_example[1]);
    printf("the limits it weighs: computing a token in the pass on these cores against bringing "
           "an entry's bytes (about 2 MiB of fixed state whatever the document's length) from "
           "host memory, the NVMe device or the other member over loopback; each as the daemon "
           "measured it\n");
    printf("auto over always fetch: %.2f (median), auto over always recompute: %.2f (median)\n",
           p50[AUTO] / p50[FETCH], p50[AUTO] / p50[RECOMPUTE]);
    char counts[2][256];
    for (int k = 0; k < 2; k++) {
        int at = 0;
        for (int x = 0; x < NSRC; x++)
            at += snprintf(counts[k] + at, sizeof counts[k] - (size_t)at,
                           "%s\"%s_short\":%d,\"%s_long\":%d", x ? "," : "", k_src[x],
                           k ? t.recomputed[x][0] : t.fetched[x][0], k_src[x],
                           k ? t.recomputed[x][1] : t.fetched[x][1]);
    }
    printf("{\"bench\":\"reuse\",\"requests\":%ld,\"ttft_p50_ms\":{\"fetch\":%.2f,"
           "\"recompute\":%.2f,\"auto\":%.2f},\"ttft_mean_ms\":{\"fetch\":%.2f,"
           "\"recompute\":%.2f,\"auto\":%.2f},\"auto_over_fetch_p50\":%.3f,"
           "\"auto_over_recompute_p50\":%.3f,\"auto_fetched\":{%s},\"auto_recomputed\":{%s}}\n",
           nreq, p50[FETCH], p50[RECOMPUTE], p50[AUTO], mean[FETCH], mean[RECOMPUTE], mean[AUTO],
           p50[AUTO] / p50[FETCH], p50[AUTO] / p50[RECOMPUTE], counts[0], counts[1]);
    rc = 0;
out:
    for (int k = 0; k < NPOL; k++) free(ttft[k]);
    hyc_close(c);
    while (started > 0) hy_daemon_stop(&d[--started]);
    hy_bench_rmtree(tmp);
    return rc;
}
