/*
 * The weight formats of `hypic-bench executor`: one BF16 checkpoint (the
 * `small` preset generated in BF16, or --model when it is BF16) opened four
 * ways — matrices kept in bf16 with fp32 arithmetic, with bf16 arithmetic,
 * quantised to q8, and widened to fp32 — timed in rotating rounds (medians):
 * a 2048-token prefill (512 with --quick) and decode; each narrow way's
 * logits against fp32's; and decode's bytes per second against the
 * machine's streaming read bandwidth, measured here — the limit a decode
 * step meets, since it reads every weight matrix once.
 */
#include "bench.h"
#include "hy_common.h"
#include "hy_model.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct fmt_run {
    hy_model *m;
    hy_exec *ex;
    hy_state *st;
} fmt_run;

static int fmt_open(fmt_run *f, const char *dir, hy_weights w, hy_err *e)
{
    memset(f, 0, sizeof *f);
    int rc = hy_model_open_with(&f->m, dir, w, e);
    if (!rc) rc = hy_exec_new(f->m, 0, &f->ex, e);
    if (!rc) rc = hy_state_new(f->m, &f->st, e);
    return rc;
}

static void fmt_close(fmt_run *f)
{
    hy_state_free(f->st);
    hy_exec_free(f->ex);
    hy_model_close(f->m);
}

int hy_bench_weight_formats(const char *model, int quick, hy_bench_weights *out)
{
    memset(out, 0, sizeof *out);
    char tmp[200] = "";
    hy_err e = {0};
    if (!model) {
        if (hy_bench_mkdtemp("bf16", tmp, sizeof tmp)) return 1;
        printf("\nweight formats: generating the 'small' preset in BF16 in %s ...\n", tmp);
        fflush(stdout);
        if (hy_model_init("small", 1, tmp, "BF16", &e)) {
            fprintf(stderr, "hypic-bench: %s\n", e.msg);
            hy_bench_rmtree(tmp);
            return 1;
        }
        model = tmp;
    }
    /* [0] bf16 kept, fp32 arithmetic; [1] bf16 arithmetic; [2] q8; [3] widened to fp32 */
    enum { NF = HY_BENCH_NFORMATS };
    static const hy_weights modes[NF] = {HY_WEIGHTS_AUTO, HY_WEIGHTS_BF16, HY_WEIGHTS_Q8,
                                         HY_WEIGHTS_F32};
    fmt_run f[NF] = {{0}};
    int rc = 0;
    for (int k = 0; k < NF && !rc; k++) rc = fmt_open(&f[k], model, modes[k], &e);
    if (!rc && strcmp(hy_model_weights_name(f[0].m), "bf16") != 0) {
        printf("\nweight formats: %s is not a BF16 checkpoint; no bf16 figures\n", model);
        for (int k = 0; k < NF; k++) fmt_close(&f[k]);
        if (tmp[0]) hy_bench_rmtree(tmp);
        return 0;
    }
    const hy_model_config *c = rc ? NULL : hy_model_cfg(f[0].m);
    const int np = quick ? 512 : 2048, nd = quick ? 32 : 128, rounds = quick ? 3 : 5;
    int32_t *tok = malloc((size_t)np * sizeof *tok);
    float *lg[NF] = {NULL};
    if (!rc) {
        hy_rng r;
        hy_rng_seed(&r, 42);
        for (int i = 0; i < np; i++) tok[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)c->vocab);
        for (int k = 0; k < NF; k++) lg[k] = malloc((size_t)c->vocab * sizeof(float));
    }
    /* the logits of the same prompt, then of one decode after it, against fp32's */
    for (int step = 0; step < 2 && !rc; step++) {
        for (int k = 0; k < NF && !rc; k++)
            rc = step == 0 ? (hy_state_reset(f[k].st),
                              hy_exec_prefill(f[k].ex, f[k].st, tok, (size_t)np, lg[k], &e))
                           : hy_exec_decode(f[k].ex, f[k].st, tok[0], lg[k], &e);
        for (int k = 0; k < NF - 1 && !rc; k++)
            for (int i = 0; i < c->vocab; i++) {
                out->logits_max_abs_diff[k] =
                    fmax(out->logits_max_abs_diff[k], fabs((double)lg[k][i] - lg[NF - 1][i]));
                out->logits_max_abs = fmax(out->logits_max_abs, fabs((double)lg[NF - 1][i]));
            }
    }
    double pre[NF][8], dec[NF][8];
    for (int r = 0; r < rounds && !rc; r++)
        for (int j = 0; j < NF && !rc; j++) {
            const int k = (r + j) % NF; /* rotate which format goes first */
            hy_state_reset(f[k].st);
            double t0 = hy_now_s();
            rc = hy_exec_prefill(f[k].ex, f[k].st, tok, (size_t)np, lg[k], &e);
            pre[k][r] = np / (hy_now_s() - t0);
            hy_state_reset(f[k].st);
            t0 = hy_now_s();
            for (int i = 0; i < nd && !rc; i++)
                rc = hy_exec_decode(f[k].ex, f[k].st, tok[i], lg[k], &e);
            dec[k][r] = nd / (hy_now_s() - t0);
        }
    if (!rc) {
        const double bw = hy_bench_stream_read_bytes_s(quick ? 3 : 5);
        out->stream_gb_s = bw / 1e9;
        out->prefill_tokens = np;
        out->bf16_math = hy_model_bf16_math(f[1].m);
        for (int k = 0; k < NF; k++) {
            out->prefill_tok_s[k] = hy_bench_median(pre[k], (size_t)rounds);
            out->decode_tok_s[k] = hy_bench_median(dec[k], (size_t)rounds);
            out->matrix_mb[k] = (double)hy_model_matrix_bytes(f[k].m) / 1e6;
            out->decode_bw_fraction[k] =
                bw > 0 ? out->decode_tok_s[k] * out->matrix_mb[k] * 1e6 / bw : 0;
        }
        out->rounds = rounds;
        out->ran = 1;
        printf("\nweight formats, one BF16 checkpoint (%s), %d rotating rounds, medians:\n",
               tmp[0] ? "small" : model, rounds);
        printf("  %-10s %10s %16s %12s %22s %12s\n", "format", "matrices", "prefill tok/s",
               "decode tok/s", "decode / stream bw", "max |dlogit|");
        static const char *const names[NF] = {"bf16", "bf16 math", "q8", "f32"};
        for (int k = 0; k < NF; k++)
            printf("  %-10s %7.1f MB %10.0f (%d) %12.1f %15.2f of %.1f GB/s %12.2e\n", names[k],
                   out->matrix_mb[k], out->prefill_tok_s[k], np, out->decode_tok_s[k],
                   out->decode_bw_fraction[k], out->stream_gb_s,
                   k < NF - 1 ? out->logits_max_abs_diff[k] : 0.0);
        if (!out->bf16_math)
            printf("  (this build's CPU has no AVX512-BF16: 'bf16 math' is bf16 with fp32 "
                   "arithmetic)\n");
        printf("  bf16 / f32: prefill %.2fx, decode %.2fx (target >= 1.7x); bf16 math / f32: "
               "prefill %.2fx; q8 / f32: prefill %.2fx, decode %.2fx; largest |logit| %.2f\n",
               out->prefill_tok_s[0] / out->prefill_tok_s[3],
               out->decode_tok_s[0] / out->decode_tok_s[3],
               out->prefill_tok_s[1] / out->prefill_tok_s[3],
               out->prefill_tok_s[2] / out->prefill_tok_s[3],
               out->decode_tok_s[2] / out->decode_tok_s[3], out->logits_max_abs);
    }
    if (rc) fprintf(stderr, "hypic-bench: %s\n", e.msg);
    free(tok);
    for (int k = 0; k < NF; k++) free(lg[k]), fmt_close(&f[k]);
    if (tmp[0]) hy_bench_rmtree(tmp);
    return rc ? 1 : 0;
}
