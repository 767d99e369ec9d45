/*
 * hypic-bench executor: prefill throughput on the `small` preset (generated
 * into a temporary directory unless --model is given) at 512, 2048 and 8192
 * tokens with the chunked delta rule, the recurrent delta rule at 2048 in the
 * same run, peak RSS, and the machine's limit for this model: the forward
 * FLOPs of each prefill divided by the sgemm rate measured here, as a
 * fraction of the time actually taken. Then where the 2048-token prefill's
 * time goes: the executor's own per-operation profile (hy_exec_profile) of
 * separate profiled runs, as ms and % of the prefill, with the GEMMs' achieved
 * rate against the same sgemm limit.
 */
#include "bench.h"
#include "hy_common.h"
#include "hy_kernels.h"
#include "hy_model.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The delta rule alone on one layer's heads (all heads in parallel, as the
 * executor runs them), n tokens: seconds for the chunked and recurrent forms. */
static void time_delta_rule(const hy_model_config *c, int n, double *chunked, double *recurrent)
{
    const int Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv, r = Hv / c->lin_k_heads;
    const int C = hy_config_conv_dim(c), Kd = c->lin_k_heads * dk;
    float *x = hy_alloc((size_t)n * C * 4), *g = hy_alloc((size_t)n * Hv * 4);
    float *b = hy_alloc((size_t)n * Hv * 4), *o = hy_alloc((size_t)n * Hv * dv * 4);
    float *S = hy_calloc((size_t)Hv * dk * dv * 4);
    const size_t per = hy_gdn_chunked_scratch(dk, dv);
    float *work = hy_alloc(per * (size_t)omp_get_max_threads() * 4);
    hy_rng rng;
    hy_rng_seed(&rng, 3);
    for (size_t i = 0; i < (size_t)n * C; i++) x[i] = (float)hy_rng_normal(&rng) * 0.1f;
    for (int i = 0; i < n * Hv; i++) {
        g[i] = (float)(-0.5 * hy_rng_uniform(&rng));
        b[i] = (float)hy_rng_uniform(&rng);
    }
    for (int mode = 0; mode < 2; mode++) {
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = hy_now_s();
#pragma omp parallel for schedule(dynamic, 1)
            for (int h = 0; h < Hv; h++) {
                const hy_gdn_in in = {.n = n,
                                      .dk = dk,
                                      .dv = dv,
                                      .q = x + (h / r) * dk,
                                      .k = x + Kd + (h / r) * dk,
                                      .v = x + 2 * Kd + h * dv,
                                      .ldq = (size_t)C,
                                      .ldk = (size_t)C,
                                      .ldv = (size_t)C,
                                      .g = g + h,
                                      .beta = b + h,
                                      .ldgb = (size_t)Hv};
                float *Sh = S + (size_t)h * dk * dv, *oh = o + (size_t)h * dv;
                if (mode == 0)
                    hy_gdn_chunked(&in, Sh, oh, (size_t)Hv * dv, NULL,
                                   work + per * omp_get_thread_num());
                else
                    hy_gdn_recurrent(&in, Sh, oh, (size_t)Hv * dv, NULL);
            }
            double dt = hy_now_s() - t0;
            if (dt < best) best = dt;
        }
        *(mode == 0 ? chunked : recurrent) = best;
    }
    hy_free(x), hy_free(g), hy_free(b), hy_free(o), hy_free(S), hy_free(work);
}

/* Aggregate sgemm rate with every core running its own single-threaded
 * product at once: an upper bound on what any split of one product reaches. */
static double sgemm_per_core_sum(int m, int n, int k)
{
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
        float *A = hy_calloc((size_t)m * k * 4), *B = hy_calloc((size_t)n * k * 4),
              *C = hy_calloc((size_t)m * n * 4);
        double best = 1e30;
        for (int r = 0; r < 3; r++) {
#pragma omp barrier
            double t0 = hy_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A, k, B, k, 0.0f, C,
                        n);
            double dt = hy_now_s() - t0;
            if (dt < best) best = dt;
        }
        total += 2.0 * m * n * k / best;
        hy_free(A), hy_free(B), hy_free(C);
    }
    return total;
}

double hy_bench_sgemm_flops(int m, int n, int k, int reps)
{
    float *A = hy_alloc((size_t)m * k * 4), *B = hy_alloc((size_t)n * k * 4),
          *C = hy_alloc((size_t)m * n * 4);
    for (size_t i = 0; i < (size_t)m * k; i++) A[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)n * k; i++) B[i] = (float)(i % 5) * 0.1f;
    double best = 1e30;
    for (int r = 0; r < reps + 1; r++) { /* the first run warms the threads */
        double t0 = hy_now_s();
        hy_linear(m, k, n, A, (size_t)k, B, C, (size_t)n);
        double dt = hy_now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    hy_free(A), hy_free(B), hy_free(C);
    return 2.0 * m * n * k / best;
}

/* Profiles reps prefills of n tokens from the empty state and keeps the
 * profile of the fastest, as the timed runs keep their best. Separate from
 * the timed runs so that the throughput figures are those of an executor with
 * profiling off. */
static int profile_prefill(hy_exec *ex, hy_state *st, const int32_t *tok, int n, int reps,
                           float *logits, hy_exec_prof *best, hy_err *e)
{
    int rc = 0;
    hy_exec_set_profiling(ex, true);
    for (int r = 0; r < reps && !rc; r++) {
        hy_exec_profile_reset(ex);
        hy_state_reset(st);
        rc = hy_exec_prefill(ex, st, tok, (size_t)n, logits, e);
        hy_exec_prof p;
        hy_exec_profile(ex, &p);
        if (r == 0 || p.total_s < best->total_s) *best = p;
    }
    hy_exec_set_profiling(ex, false);
    return rc;
}

/* Best-of-reps seconds to prefill n tokens from the empty state. */
static int time_prefill(hy_exec *ex, hy_state *st, const int32_t *tok, int n, int reps,
                        float *logits, double *best, hy_err *e)
{
    *best = 1e30;
    for (int r = 0; r < reps; r++) {
        hy_state_reset(st);
        double t0 = hy_now_s();
        int rc = hy_exec_prefill(ex, st, tok, (size_t)n, logits, e);
        double dt = hy_now_s() - t0;
        if (rc) return rc;
        if (dt < *best) *best = dt;
    }
    return 0;
}

/* --device: the device executor against the CPU's on the same model, in the
 * same run — prefill tokens/s at each length (alternating, best of reps
 * each), the recurrent form at the middle length, decode tokens/s — and the
 * device's limit: its GEMM rate, fp32 (what the executor's products use)
 * and bf16 inputs with fp32 accumulation, on 4096³ products (1024³ when
 * emulated); a prefill's forward FLOPs over its time as a fraction of each. */
static int executor_on_device(hy_bench_model *bm, hy_exec_device kind, int num, const char *spec,
                              int quick)
{
    const hy_model_config *c = bm->c;
    hy_err e = {0};
    hy_exec *dx = NULL;
    hy_state *ds = NULL;
    if (hy_exec_new(bm->m, 0, &dx, &e) || hy_state_new(bm->m, &ds, &e) ||
        hy_exec_set_device(dx, kind, num, &e)) {
        fprintf(stderr, "hypic-bench executor: --device %s: %s\n", spec, e.msg);
        hy_state_free(ds);
        hy_exec_free(dx);
        return 1;
    }
    const char *name = hy_exec_device_name(dx);
    printf("device: %s\n", name);
    double g32 = 0, g16 = 0;
    const int gn = kind == HY_EXEC_EMULATED ? 1024 : 4096;
    if (hy_exec_device_gemm_rate(dx, gn, &g32, &g16, &e)) {
        fprintf(stderr, "hypic-bench executor: %s\n", e.msg);
        return 1;
    }
    printf("the device's GEMM rate, %d^3: fp32 %.1f TFLOP/s, bf16 (fp32 accumulation) %.1f "
           "TFLOP/s\n",
           gn, g32 / 1e12, g16 / 1e12);
    const int lens[] = {512, 2048, 8192};
    const int nl = quick ? 2 : 3, reps = quick ? 1 : 3;
    int32_t *tok = malloc(8192 * sizeof *tok);
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    hy_rng r;
    hy_rng_seed(&r, 42);
    for (int i = 0; i < 8192; i++) tok[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)c->vocab);
    double dev[3] = {0}, cpu[3] = {0}, f32[3] = {0}, f16[3] = {0}, secs;
    int rc = time_prefill(dx, ds, tok, 256, 1, logits, &secs, &e); /* warm-up: weights, buffers */
    printf("\n tokens   device tok/s   cpu tok/s   device/cpu   of fp32 limit   of bf16 limit\n");
    for (int i = 0; i < nl && !rc; i++) {
        const int n = lens[i];
        double best_d = 1e30, best_c = 1e30;
        for (int k = 0; k < reps && !rc; k++) { /* alternating */
            rc = time_prefill(dx, ds, tok, n, 1, logits, &secs, &e);
            best_d = fmin(best_d, secs);
            if (!rc) rc = time_prefill(bm->ex, bm->st, tok, n, 1, logits, &secs, &e);
            best_c = fmin(best_c, secs);
        }
        const double fl = hy_config_prefill_flops(c, 0, n);
        dev[i] = n / best_d, cpu[i] = n / best_c;
        f32[i] = fl / best_d / g32, f16[i] = fl / best_d / g16;
        printf("%7d   %12.0f   %9.0f   %10.2f   %13.3f   %13.3f\n", n, dev[i], cpu[i],
               dev[i] / cpu[i], f32[i], f16[i]);
        fflush(stdout);
    }
    double rec = 0, dec_d = 0, dec_c = 0;
    if (!rc) {
        hy_exec_set_gdn_mode(dx, HY_GDN_RECURRENT);
        rc = time_prefill(dx, ds, tok, lens[1], 1, logits, &secs, &e);
        rec = lens[1] / secs;
        hy_exec_set_gdn_mode(dx, HY_GDN_CHUNKED);
    }
    const int nd = quick ? 32 : 128;
    for (int side = 0; side < 2 && !rc; side++) {
        hy_exec *x = side ? bm->ex : dx;
        hy_state *st = side ? bm->st : ds;
        hy_state_reset(st);
        const double t0 = hy_now_s();
        for (int i = 0; i < nd && !rc; i++) rc = hy_exec_decode(x, st, tok[i], logits, &e);
        *(side ? &dec_c : &dec_d) = nd / (hy_now_s() - t0);
    }
    if (rc) {
        fprintf(stderr, "hypic-bench executor: %s\n", e.msg);
        return 1;
    }
    printf("recurrent at %d tokens on the device: %.0f tokens/s (chunked %.2fx)\n", lens[1], rec,
           dev[1] / rec);
    printf("decode, one token per call (%d tokens): device %.0f tokens/s, cpu %.0f tokens/s "
           "(what each token changed comes back to the host: a pass is a call)\n",
           nd, dec_d, dec_c);
    printf("{\"bench\":\"executor\",\"device\":\"%s\",\"model_params_m\":%.2f,"
           "\"gemm_fp32_tflops\":%.3f,\"gemm_bf16_tflops\":%.3f",
           name, (double)hy_config_param_count(c) / 1e6, g32 / 1e12, g16 / 1e12);
    for (int i = 0; i < nl; i++)
        printf(",\"prefill_tok_s_%d\":%.1f,\"cpu_prefill_tok_s_%d\":%.1f,"
               "\"device_over_cpu_%d\":%.3f,\"fraction_of_fp32_gemm_%d\":%.4f,"
               "\"fraction_of_bf16_gemm_%d\":%.4f",
               lens[i], dev[i], lens[i], cpu[i], lens[i], dev[i] / cpu[i], lens[i], f32[i], lens[i],
               f16[i]);
    printf(",\"recurrent_tok_s_%d\":%.1f,\"decode_tok_s\":%.1f,\"cpu_decode_tok_s\":%.1f}\n",
           lens[1], rec, dec_d, dec_c);
    free(tok);
    free(logits);
    hy_state_free(ds);
    hy_exec_free(dx);
    return 0;
}

int hy_bench_executor(int argc, char **argv)
{
    const char *model = NULL, *device = NULL;
    int quick = 0, dnum = 0;
    hy_exec_device dkind = HY_EXEC_CPU;
    hy_weights weights = HY_WEIGHTS_AUTO;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                 hy_exec_device_parse(argv[i + 1], &dkind, &dnum) == 0)
            device = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--weights") == 0 && i + 1 < argc &&
                 hy_weights_parse(argv[i + 1], &weights) == 0)
            i++;
        else {
            fprintf(
                stderr,
                "usage: hypic-bench executor [--model DIR] [--weights auto|f32|bf16|q8] [--quick]\n"
                "                            [--device cuda|cuda:N|emulated]\n");
            return 2;
        }
    }
    hy_err e = {0};
    hy_bench_model bm;
    if (hy_bench_open_with(&bm, model, weights)) return 1;
    if (device && dkind != HY_EXEC_CPU) {
        const int drc = executor_on_device(&bm, dkind, dnum, device, quick);
        hy_bench_close(&bm);
        return drc;
    }
    hy_exec *ex = bm.ex;
    hy_state *st = bm.st;
    const hy_model_config *c = bm.c;

    /* The limit: the best sgemm rate seen, measured before and after the
     * prefills (the machine is shared; a lower reading would flatter us). */
    double sg_split = hy_bench_sgemm_flops(2048, 2048, 2048, quick ? 1 : 3);
    double sg_cores = sgemm_per_core_sum(1024, 1024, 1024);
    printf("sgemm: one 2048^3 product split over %d threads %.1f GFLOP/s; every core on its own "
           "1024^3 product %.1f GFLOP/s\n",
           omp_get_max_threads(), sg_split / 1e9, sg_cores / 1e9);
    double sgemm = sg_split > sg_cores ? sg_split : sg_cores;

    const int lens[] = {512, 2048, 8192};
    const int nl = quick ? 2 : 3;
    int32_t *tok = malloc(8192 * sizeof *tok);
    hy_rng r;
    hy_rng_seed(&r, 42);
    for (int i = 0; i < 8192; i++) tok[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)c->vocab);
    float *logits = malloc((size_t)c->vocab * sizeof *logits);
    double rate[3] = {0}, frac[3] = {0}, flops[3] = {0}, took[3] = {0}, secs;
    int rc = time_prefill(ex, st, tok, 256, 1, logits, &secs, &e); /* warm-up */
    printf("\n tokens   mode        seconds   tokens/s   GFLOP   GFLOP/s\n");
    for (int i = 0; i < nl && !rc; i++) {
        const int n = lens[i];
        rc = time_prefill(ex, st, tok, n, n >= 8192 || quick ? 1 : 3, logits, &secs, &e);
        double fl = hy_config_prefill_flops(c, 0, n);
        rate[i] = n / secs;
        flops[i] = fl;
        took[i] = secs;
        printf("%7d   chunked   %9.3f  %9.0f  %6.1f  %8.1f\n", n, secs, rate[i], fl / 1e9,
               fl / secs / 1e9);
        fflush(stdout);
    }
    /* the breakdown at 2048 tokens (lens[1], run with --quick too) */
    const int bn = lens[1], breps = quick ? 1 : 3;
    hy_exec_prof prof = {0};
    if (!rc) rc = profile_prefill(ex, st, tok, bn, breps, logits, &prof, &e);
    double rec_rate = 0, rec_frac = 0;
    if (!rc) {
        hy_exec_set_gdn_mode(ex, HY_GDN_RECURRENT);
        const int n = quick ? 512 : 2048;
        rc = time_prefill(ex, st, tok, n, 1, logits, &secs, &e);
        double fl = hy_config_prefill_flops(c, 0, n);
        rec_rate = n / secs;
        rec_frac = fl / secs;
        printf("%7d   recurrent %9.3f  %9.0f  %6.1f  %8.1f\n", n, secs, rec_rate, fl / 1e9,
               fl / secs / 1e9);
    }
    if (rc) {
        fprintf(stderr, "hypic-bench: %s\n", e.msg);
        return 1;
    }
    sg_split = fmax(sg_split, hy_bench_sgemm_flops(2048, 2048, 2048, quick ? 1 : 3));
    sg_cores = fmax(sg_cores, sgemm_per_core_sum(1024, 1024, 1024));
    sgemm = fmax(sg_split, sg_cores);
    printf("\nsgemm limit (best of the readings before and after): %.1f GFLOP/s\n", sgemm / 1e9);
    for (int i = 0; i < nl; i++) {
        frac[i] = flops[i] / sgemm / took[i];
        printf("  %5d tokens: %.2f of the limit (the time sgemm would need for these FLOPs / "
               "the time taken)\n",
               lens[i], frac[i]);
    }
    rec_frac /= sgemm;
    printf("  recurrent: %.2f of the limit\n", rec_frac);

    /* Per-operation breakdown of the fastest profiled prefill. */
    const double pf_s = prof.total_s, gemm_s = prof.seconds[HY_EXEC_OP_GEMM];
    const double gemm_rate = gemm_s > 0 ? prof.gemm_flops / gemm_s : 0;
    double op_ms[HY_EXEC_OP_COUNT];
    printf("\nwhere a %d-token prefill's time goes (executor profile, fastest of %d profiled "
           "runs: %.1f ms; unprofiled best %.1f ms):\n",
           bn, breps, pf_s * 1e3, took[1] * 1e3);
    printf("  %-12s %9s %7s %7s\n", "op", "ms", "%", "calls");
    for (int k = 0; k < HY_EXEC_OP_COUNT; k++) {
        op_ms[k] = prof.seconds[k] * 1e3;
        printf("  %-12s %9.1f %6.1f%% %7lld\n", hy_exec_op_name((hy_exec_op)k), op_ms[k],
               pf_s > 0 ? 100.0 * op_ms[k] / 1e3 / pf_s : 0.0, (long long)prof.calls[k]);
    }
    printf("  GEMMs: %.1f GFLOP at %.1f GFLOP/s = %.2f of the sgemm limit (%.1f GFLOP/s); "
           "everything else: %.1f ms\n",
           prof.gemm_flops / 1e9, gemm_rate / 1e9, gemm_rate / sgemm, sgemm / 1e9,
           (pf_s - gemm_s) * 1e3);

    /* Decode: the same tokens one call each (every GEMM a GEMV). */
    double dec_rate = 0;
    {
        const int nd = quick ? 64 : 256;
        hy_exec_set_gdn_mode(ex, HY_GDN_CHUNKED);
        hy_state_reset(st);
        double t0 = hy_now_s();
        for (int i = 0; i < nd && !rc; i++) rc = hy_exec_decode(ex, st, tok[i], logits, &e);
        dec_rate = nd / (hy_now_s() - t0);
        printf("\ndecode, one token per call (%d tokens): %.0f tokens/s\n", nd, dec_rate);
    }
    /* MLA: a prefill attending over expanded rows against one in the latent
     * space (hy_mla_mode), alternating, best of 3 each; and what AUTO takes */
    const int mn = quick ? 512 : 2048;
    double mla_s[2] = {1e30, 1e30};
    hy_mla_mode mla_auto = HY_MLA_AUTO;
    for (int r = 0; r < 3 && c->mla && !rc; r++)
        for (int k = 0; k < 2 && !rc; k++) {
            const int m = (r + k) % 2;
            double s1;
            hy_exec_set_mla_mode(ex, m ? HY_MLA_ABSORBED : HY_MLA_EXPANDED);
            rc = time_prefill(ex, st, tok, mn, 1, logits, &s1, &e);
            mla_s[m] = fmin(mla_s[m], s1);
        }
    if (c->mla && !rc) {
        hy_exec_set_mla_mode(ex, HY_MLA_AUTO);
        hy_state_reset(st);
        rc = hy_exec_prefill(ex, st, tok, (size_t)mn, logits, &e);
        mla_auto = hy_exec_mla_mode_used(ex);
        printf("\nMLA, a %d-token prefill: over expanded rows %.0f tokens/s, in the latent space "
               "%.0f tokens/s (%.2fx); AUTO attends %s\n",
               mn, mn / mla_s[0], mn / mla_s[1], mla_s[0] / mla_s[1],
               mla_auto == HY_MLA_ABSORBED ? "in the latent space" : "over expanded rows");
    }
    if (rc) {
        fprintf(stderr, "hypic-bench: %s\n", e.msg);
        return 1;
    }
    hy_bench_weights wf;
    if (hy_bench_weight_formats(model, quick, &wf)) return 1;
    const int ri = quick ? 0 : 1; /* the recurrent run's length: 2048 (512 with --quick) */
    double ratio = rate[ri] / rec_rate, dr_chunked = 0, dr_recurrent = 0;
    time_delta_rule(c, lens[ri], &dr_chunked, &dr_recurrent);
    printf("\ndelta rule alone, one layer (%d heads, dk %d, dv %d), %d tokens: chunked %.1f ms, "
           "recurrent %.1f ms: %.2fx\n",
           c->lin_v_heads, c->lin_dk, c->lin_dv, lens[ri], dr_chunked * 1e3, dr_recurrent * 1e3,
           dr_recurrent / dr_chunked);
    double rss = (double)hy_peak_rss_bytes() / (1 << 20);
    printf("whole model, chunked / recurrent at %d tokens: %.2fx (target >= 5x)\n", lens[ri],
           ratio);
    printf("fraction of the sgemm limit at %d tokens: %.2f (target >= 0.5)\n", lens[ri], frac[ri]);
    printf("peak RSS: %.0f MiB\n", rss);
    /* The keys name the lengths measured: a --quick run has no 8192-token
     * figures and compares chunked with recurrent at 512 tokens, not 2048. */
    printf("{\"bench\":\"executor\",\"model_params_m\":%.2f,\"sgemm_gflops\":%.2f",
           (double)hy_config_param_count(c) / 1e6, sgemm / 1e9);
    for (int i = 0; i < nl; i++) printf(",\"prefill_tok_s_%d\":%.1f", lens[i], rate[i]);
    printf(",\"recurrent_tok_s_%d\":%.1f,\"decode_tok_s\":%.1f,"
           "\"chunked_over_recurrent_%d\":%.3f,\"delta_rule_chunked_over_recurrent_%d\":%.3f",
           lens[ri], rec_rate, dec_rate, lens[ri], ratio, lens[ri], dr_recurrent / dr_chunked);
    for (int i = 0; i < nl; i++) printf(",\"fraction_of_sgemm_limit_%d\":%.3f", lens[i], frac[i]);
    printf(",\"breakdown_tokens\":%d,\"breakdown_prefill_ms\":%.2f,\"breakdown_ms\":{", bn,
           pf_s * 1e3);
    for (int k = 0; k < HY_EXEC_OP_COUNT; k++)
        printf("%s\"%s\":%.3f", k ? "," : "", hy_exec_op_name((hy_exec_op)k), op_ms[k]);
    printf("},\"breakdown_pct\":{");
    for (int k = 0; k < HY_EXEC_OP_COUNT; k++)
        printf("%s\"%s\":%.2f", k ? "," : "", hy_exec_op_name((hy_exec_op)k),
               pf_s > 0 ? 100.0 * op_ms[k] / 1e3 / pf_s : 0.0);
    printf("},\"gemm_gflops\":%.2f,\"gemm_fraction_of_sgemm\":%.3f", gemm_rate / 1e9,
           gemm_rate / sgemm);
    if (c->mla)
        printf(",\"mla_prefill_tok_s_%d\":{\"expanded\":%.1f,\"latent\":%.1f},"
               "\"mla_auto_latent\":%s",
               mn, mn / mla_s[0], mn / mla_s[1], mla_auto == HY_MLA_ABSORBED ? "true" : "false");
    if (wf.ran) {
        static const char *const keys[HY_BENCH_NFORMATS] = {"bf16", "bf16_math", "q8", "f32"};
        printf(",\"weights\":{\"rounds\":%d,\"prefill_tokens\":%d,\"stream_gb_s\":%.2f,"
               "\"bf16_math_available\":%s",
               wf.rounds, wf.prefill_tokens, wf.stream_gb_s, wf.bf16_math ? "true" : "false");
        for (int k = 0; k < HY_BENCH_NFORMATS; k++) {
            printf(",\"%s\":{\"matrix_mb\":%.2f,\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.1f,"
                   "\"decode_fraction_of_stream\":%.3f",
                   keys[k], wf.matrix_mb[k], wf.prefill_tok_s[k], wf.decode_tok_s[k],
                   wf.decode_bw_fraction[k]);
            if (k < HY_BENCH_NFORMATS - 1)
                printf(",\"logits_max_abs_diff\":%.3g", wf.logits_max_abs_diff[k]);
            printf("}");
        }
        printf(",\"decode_bf16_over_f32\":%.3f,\"prefill_bf16_over_f32\":%.3f,"
               "\"prefill_bf16_math_over_f32\":%.3f,\"decode_q8_over_f32\":%.3f,"
               "\"decode_q8_over_bf16\":%.3f,\"prefill_q8_over_f32\":%.3f,"
               "\"logits_max_abs\":%.3f}",
               wf.decode_tok_s[0] / wf.decode_tok_s[3], wf.prefill_tok_s[0] / wf.prefill_tok_s[3],
               wf.prefill_tok_s[1] / wf.prefill_tok_s[3], wf.decode_tok_s[2] / wf.decode_tok_s[3],
               wf.decode_tok_s[2] / wf.decode_tok_s[0], wf.prefill_tok_s[2] / wf.prefill_tok_s[3],
               wf.logits_max_abs);
    }
    printf(",\"peak_rss_mb\":%.1f,\"threads\":%d,\"quick\":%s}\n", rss, omp_get_max_threads(),
           quick ? "true" : "false");
    free(tok), free(logits);
    hy_bench_close(&bm);
    return 0;
}
