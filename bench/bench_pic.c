/*
 * hypic-bench pic: RAG-shaped requests on the `small` preset — a system
 * segment, then 8 documents of ~512 tokens drawn from a pool of 32 (already
 * cached: entries built independently, for W = 8 and W = 0) in random order,
 * then a 32-token query. Every request runs in every mode on the same
 * executor, so the ratios are measured side by side:
 *   - TTFT per mode (wall time of the request: lookups are in memory here);
 *   - the inline build overhead: a request whose segments are all misses,
 *     built inline by `pic`, against `full` on the same tokens;
 *   - entry bytes per body token;
 *   - each mode's divergence from `full` on the first generated token:
 *     KL(full ‖ mode) of the next-token distributions and top-1 agreement;
 *   - the composition time per hit: hy_entry_apply of the W = 0 entries of a
 *     request's segments onto a running state. With no seam to recompute it
 *     is all composition — S ← T·S + S_body and the conv tail per linear
 *     layer, K re-rotated and K, V appended per attention layer — the part of
 *     a `pic` hit that does not depend on W (a W = 8 hit adds an 8-token
 *     prefill). Reported over every hit of several requests as the median
 *     and the fastest tenth: on a loaded machine a parallel region whose
 *     thread is descheduled stalls the whole apply, which the median shows
 *     and the fastest tenth mostly does not.
 * The physical limit next to TTFT: the tokens each mode sends through the
 * forward pass (pic recomputes 8-token seams and the query only).
 */
#include "bench.h"
#include "hy_common.h"
#include "hy_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { POOL = 32, DOCS = 8, QUERY = 32, SYSTEM = 256, NSEG = DOCS + 1 };

static int32_t *random_tokens(hy_rng *r, int n, int vocab)
{
    int32_t *t = malloc((size_t)n * sizeof *t);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(3 + hy_rng_next(r) % (uint64_t)(vocab - 3));
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

typedef struct segset {
    int32_t *tok[POOL + 1]; /* [0..POOL) documents, [POOL] the system segment */
    int len[POOL + 1];
    hy_entry *e8[POOL + 1], *e0[POOL + 1]; /* W = 8 and W = 0 entries */
} segset;

int hy_bench_pic(int argc, char **argv)
{
    const char *model = NULL;
    long nreq = 50, seed = 1;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--requests") == 0 && i + 1 < argc)
            nreq = strtol(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtol(argv[++i], NULL, 10);
        else
            nreq = -1;
        if (nreq < 1 || nreq > 100000) {
            fprintf(stderr, "usage: hypic-bench pic [--model DIR] [--requests N] [--seed N]\n");
            return 2;
        }
    }
    hy_bench_model bm;
    if (hy_bench_open(&bm, model)) return 1;
    const int V = bm.c->vocab;
    hy_err e = {0};
    hy_rng r;
    hy_rng_seed(&r, (uint64_t)seed);
    segset S = {0};
    int rc = 0;

    /* The pool: documents of 448..575 tokens and a system segment, cached. */
    printf("building entries for %d documents and the system segment (W = 8 and W = 0) ...\n",
           POOL);
    fflush(stdout);
    size_t entry_bytes = 0, body_tokens = 0;
    double t_build = 0;
    for (int d = 0; d <= POOL && !rc; d++) {
        S.len[d] = d == POOL ? SYSTEM : 448 + (int)(hy_rng_next(&r) % 128);
        S.tok[d] = random_tokens(&r, S.len[d], V);
        double t0 = hy_now_s();
        hy_state_reset(bm.st);
        rc = hy_entry_build(bm.ex, bm.st, S.tok[d], (size_t)S.len[d], HY_SEAM_DEFAULT, HY_ENTRY_F32,
                            NULL, &S.e8[d], &e);
        t_build += hy_now_s() - t0;
        hy_state_reset(bm.st);
        if (!rc)
            rc = hy_entry_build(bm.ex, bm.st, S.tok[d], (size_t)S.len[d], 0, HY_ENTRY_F32, NULL,
                                &S.e0[d], &e);
        if (!rc) {
            entry_bytes += hy_entry_payload_bytes(S.e8[d]);
            body_tokens += (size_t)hy_entry_body_tokens(S.e8[d]);
        }
    }
    const double bytes_per_token = (double)entry_bytes / (double)body_tokens;
    printf("  %zu body tokens, %.1f MiB of W = 8 entries: %.0f bytes per body token; independent "
           "builds at %.0f tokens/s\n",
           body_tokens, (double)entry_bytes / (1 << 20), bytes_per_token,
           (double)body_tokens / t_build);

    hy_prefix_cache *pc = NULL;
    if (!rc) rc = hy_prefix_cache_new((size_t)1 << 30, &pc, &e);
    float *lf = malloc((size_t)V * 4), *lm = malloc((size_t)V * 4);
    double ttft[HY_MODE_COUNT] = {0}, kl[HY_MODE_COUNT] = {0};
    int agree[HY_MODE_COUNT] = {0};
    int64_t prefilled[HY_MODE_COUNT] = {0};
    double over_full = 0, over_pic = 0;
    const int n_over = 4;

    for (long q = -n_over - 1; q < nreq && !rc; q++) {
        /* q < 0: warm-up (q = -n_over-1 seeds the prefix cache) and the
         * inline-build overhead requests (misses, entries discarded) */
        hy_segment seg[NSEG];
        int pick[DOCS];
        seg[0] = (hy_segment){S.tok[POOL], (size_t)S.len[POOL], NULL};
        for (int i = 0; i < DOCS; i++) {
            int d, dup;
            do {
                d = (int)(hy_rng_next(&r) % POOL);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= pick[j] == d;
            } while (dup);
            pick[i] = d;
            seg[1 + i] = (hy_segment){S.tok[d], (size_t)S.len[d], NULL};
        }
        int32_t *query = random_tokens(&r, QUERY, V);
        hy_request rq = {.segs = seg,
                         .nsegs = NSEG,
                         .query = query,
                         .nq = QUERY,
                         .W = HY_SEAM_DEFAULT,
                         .dtype = HY_ENTRY_F32,
                         .prefix = pc};
        hy_result res = {0};
        if (q == -n_over - 1) { /* seed the prefix cache, as earlier traffic would */
            rq.mode = HY_MODE_PREFIX;
            rc = hy_combine(bm.ex, bm.st, &rq, lf, &res, &e);
        } else if (q < 0) {
            /* all misses: pic prefills every segment and builds its entry
             * inline; full runs before and after it, so drift cancels */
            double t0 = hy_now_s();
            rq.mode = HY_MODE_FULL;
            rc = hy_combine(bm.ex, bm.st, &rq, lf, &res, &e);
            double t1 = hy_now_s();
            rq.mode = HY_MODE_PIC;
            if (!rc) rc = hy_combine(bm.ex, bm.st, &rq, lm, &res, &e);
            double t2 = hy_now_s();
            rq.mode = HY_MODE_FULL;
            if (!rc) rc = hy_combine(bm.ex, bm.st, &rq, lf, &res, &e);
            over_full += ((t1 - t0) + (hy_now_s() - t2)) / 2;
            over_pic += t2 - t1;
        } else {
            for (int mode = 0; mode < HY_MODE_COUNT && !rc; mode++) {
                for (int i = 0; i < NSEG; i++) {
                    const int d = i == 0 ? POOL : pick[i - 1];
                    seg[i].entry = mode == HY_MODE_NOSEAM ? S.e0[d] : S.e8[d];
                }
                rq.mode = (hy_mode)mode;
                double t0 = hy_now_s();
                rc = hy_combine(bm.ex, bm.st, &rq, mode == HY_MODE_FULL ? lf : lm, &res, &e);
                ttft[mode] += hy_now_s() - t0;
                prefilled[mode] += res.prefilled;
                if (rc || mode == HY_MODE_FULL) continue;
                kl[mode] += hy_kl_logits(lf, lm, V);
                agree[mode] += argmax(lf, V) == argmax(lm, V);
            }
            if ((q + 1) % 10 == 0 || q + 1 == nreq) {
                printf("  %ld/%ld requests: mean TTFT full %.0f ms, pic %.1f ms\n", q + 1, nreq,
                       ttft[HY_MODE_FULL] / (double)(q + 1) * 1e3,
                       ttft[HY_MODE_PIC] / (double)(q + 1) * 1e3);
                fflush(stdout);
            }
        }
        free(query);
    }

    /* Composition per hit: requests' segments applied from their W = 0
     * entries, each hy_entry_apply timed alone (the KV cache already has the
     * capacity of a request, so no apply reallocates it). */
    enum { COMPOSE_ROUNDS = 24 };
    double compose_s[COMPOSE_ROUNDS * NSEG];
    int n_compose = 0;
    for (int round = 0; round < COMPOSE_ROUNDS && !rc; round++) {
        hy_state_reset(bm.st);
        for (int i = 0; i < NSEG && !rc; i++) {
            const int d = i == 0 ? POOL : (int)(hy_rng_next(&r) % POOL);
            const uint64_t t0 = hy_now_ns();
            rc = hy_entry_apply(bm.ex, bm.st, S.e0[d], true, &e);
            compose_s[n_compose++] = (double)(hy_now_ns() - t0) * 1e-9;
        }
    }
    if (rc) {
        fprintf(stderr, "hypic-bench: %s\n", e.msg);
        return 1;
    }
    qsort(compose_s, (size_t)n_compose, sizeof *compose_s, cmp_double);
    const double compose_us = compose_s[n_compose / 2] * 1e6;
    const double compose_p10_us = compose_s[n_compose / 10] * 1e6;
    double compose_mean_us = 0;
    for (int i = 0; i < n_compose; i++) compose_mean_us += compose_s[i] * 1e6 / n_compose;

    const double N = (double)nreq;
    printf("\n mode     TTFT ms   tokens prefilled   KL vs full   top-1 agree\n");
    for (int mode = 0; mode < HY_MODE_COUNT; mode++)
        printf(" %-7s %8.1f   %16.0f   %10.2e   %10.2f\n", hy_mode_name((hy_mode)mode),
               ttft[mode] / N * 1e3, (double)prefilled[mode] / N, mode ? kl[mode] / N : 0.0,
               mode ? agree[mode] / N : 1.0);
    const double sp_prefix = ttft[HY_MODE_PREFIX] / ttft[HY_MODE_PIC];
    const double sp_full = ttft[HY_MODE_FULL] / ttft[HY_MODE_PIC];
    const double overhead = (over_pic - over_full) / over_full * 100.0;
    const double tok_ratio = (double)prefilled[HY_MODE_PREFIX] / (double)prefilled[HY_MODE_PIC];
    printf("\npic over prefix: %.1fx TTFT (target >= 8x); the token-count bound is %.1fx "
           "(tokens prefix prefills / tokens pic prefills)\n",
           sp_prefix, tok_ratio);
    printf("pic over full: %.1fx TTFT\n", sp_full);
    printf("inline build overhead over a plain prefill: %.1f%% (target <= 6%%; %d requests of "
           "all misses)\n",
           overhead, n_over);
    printf("entry bytes per body token: %.0f\n", bytes_per_token);
    printf("composition per hit (hy_entry_apply of a W = 0 entry, no seam): median %.0f us, "
           "fastest tenth %.0f us, mean %.0f us over %d hits\n",
           compose_us, compose_p10_us, compose_mean_us, n_compose);
    printf("(random weights: KL and agreement show how far each approximation moves the output, "
           "not task quality)\n");
    printf("{\"bench\":\"pic\",\"requests\":%ld,\"ttft_ms\":{\"full\":%.2f,\"prefix\":%.2f,"
           "\"pic\":%.2f,\"noseam\":%.2f,\"naive\":%.2f},\"pic_over_prefix_speedup\":%.2f,"
           "\"pic_over_full_speedup\":%.2f,\"build_overhead_pct\":%.2f,"
           "\"kl_vs_full\":{\"prefix\":%.3e,\"pic\":%.3e,\"noseam\":%.3e,\"naive\":%.3e},"
           "\"top1_agree_vs_full\":{\"prefix\":%.3f,\"pic\":%.3f,\"noseam\":%.3f,\"naive\":%.3f},"
           "\"tokens_prefilled\":{\"full\":%.0f,\"prefix\":%.0f,\"pic\":%.0f},"
           "\"entry_bytes_per_token\":%.1f,\"compose_us_per_hit\":%.1f,"
           "\"compose_p10_us_per_hit\":%.1f,\"compose_mean_us_per_hit\":%.1f}\n",
           nreq, ttft[0] / N * 1e3, ttft[1] / N * 1e3, ttft[2] / N * 1e3, ttft[3] / N * 1e3,
           ttft[4] / N * 1e3, sp_prefix, sp_full, overhead, kl[1] / N, kl[2] / N, kl[3] / N,
           kl[4] / N, agree[1] / N, agree[2] / N, agree[3] / N, agree[4] / N,
           (double)prefilled[0] / N, (double)prefilled[1] / N, (double)prefilled[2] / N,
           bytes_per_token, compose_us, compose_p10_us, compose_mean_us);
    for (int d = 0; d <= POOL; d++) {
        free(S.tok[d]);
        hy_entry_free(S.e8[d]);
        hy_entry_free(S.e0[d]);
    }
    free(lf), free(lm);
    hy_prefix_cache_free(pc);
    hy_bench_close(&bm);
    return 0;
}
