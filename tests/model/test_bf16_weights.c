/*
 * Weight matrices kept in bf16: the product kernel equals the fp32 one on
 * the same values (X rounded to bf16 where this CPU's path multiplies in
 * bf16), a few rows and many, alone and inside a parallel region; a BF16
 * checkpoint of every family opens with its matrices in bf16 at half the
 * bytes and gives the logits of the same checkpoint widened to fp32 (prefill
 * and decode) within the bound of its path; an F32 checkpoint stays fp32.
 */
#include "model_internal.h"
#include "test_util.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static char g_tmp[64];

/* hy_linear_bf16 against hy_linear on W widened, n rows (1..5: the direct
 * dots and the panels both), widths that are not multiples of a vector. */
static double kernel_diff(int n, int in, int out, int nested, bool math)
{
    hy_rng r;
    hy_rng_seed(&r, (uint64_t)(n * 1000 + in));
    float *X = malloc((size_t)n * (in + 3) * sizeof *X), *Wf = malloc((size_t)out * in * 4);
    uint16_t *W = malloc((size_t)out * in * 2);
    float *Y = calloc((size_t)n * (out + 5), 4), *R = calloc((size_t)n * (out + 5), 4);
    for (int i = 0; i < n * (in + 3); i++) X[i] = (float)hy_rng_normal(&r);
    for (size_t i = 0; i < (size_t)out * in; i++) {
        W[i] = hy_f32_to_bf16((float)hy_rng_normal(&r) * 0.1f);
        Wf[i] = hy_bf16_to_f32(W[i]);
    }
    /* the reference: fp32 products of the values the kernel multiplies (X
     * rounded to bf16 where this build's path rounds it) */
    float *Xr = malloc((size_t)n * (in + 3) * sizeof *Xr);
    for (int i = 0; i < n * (in + 3); i++)
        Xr[i] = hy_linear_bf16_rounds_x(n, math) ? hy_bf16_to_f32(hy_f32_to_bf16(X[i])) : X[i];
    hy_linear(n, in, out, Xr, (size_t)in + 3, Wf, R, (size_t)out + 5);
    free(Xr);
    if (nested) {
#pragma omp parallel num_threads(2)
        {
#pragma omp single
            hy_linear_bf16(n, in, out, X, (size_t)in + 3, W, Y, (size_t)out + 5, math);
        }
    } else {
        hy_linear_bf16(n, in, out, X, (size_t)in + 3, W, Y, (size_t)out + 5, math);
    }
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int o = 0; o < out + 5; o++) {
            const double d =
                fabs((double)Y[(size_t)t * (out + 5) + o] - R[(size_t)t * (out + 5) + o]);
            if (o >= out) /* the columns past out are untouched */
                CU_ASSERT_EQUAL(Y[(size_t)t * (out + 5) + o], 0.0f);
            worst = d > worst ? d : worst;
        }
    free(X), free(Wf), free(W), free(Y), free(R);
    return worst;
}

static void test_kernel_matches_fp32(void)
{
    const int shapes[][2] = {{37, 19}, {512, 600}, {1000, 300}, {64, 1030}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int n = 1; n <= 9; n += 2)
            for (int v = 0; v < 4; v++) { /* alone / nested, fp32 / bf16 arithmetic */
                const double d = kernel_diff(n, shapes[s][0], shapes[s][1], v & 1, v >> 1);
                /* sums of ~in products of size ~0.1: fp32 reassociation only */
                if (d > 1e-4) printf("\n  n %d in %d out %d: %g", n, shapes[s][0], shapes[s][1], d);
                CU_ASSERT(d <= 1e-4);
            }
}

static double logits_diff(const float *a, const float *b, int V, double *scale)
{
    double worst = 0, big = 0;
    for (int i = 0; i < V; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)b[i]));
    }
    *scale = big;
    return worst;
}

/* A prompt of n tokens then three decodes, from the empty state: logits of
 * each step into out [4][V]. */
static int run(hy_model *m, const int32_t *tok, int n, float *out)
{
    const hy_model_config *c = hy_model_cfg(m);
    hy_exec *ex = NULL;
    hy_state *st = NULL;
    hy_err e = {0};
    int rc = hy_exec_new(m, 0, &ex, &e);
    if (!rc) rc = hy_state_new(m, &st, &e);
    if (!rc) rc = hy_exec_prefill(ex, st, tok, (size_t)n, out, &e);
    for (int k = 1; k < 4 && !rc; k++)
        rc = hy_exec_decode(ex, st, tok[k], out + (size_t)k * c->vocab, &e);
    if (rc) printf("\n  %s", e.msg);
    hy_state_free(st);
    hy_exec_free(ex);
    return rc;
}

static void check_family(const char *preset, hy_weights mode)
{
    char dir[128];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, preset);
    CU_ASSERT_EQUAL_FATAL(hy_model_init(preset, 5, dir, "BF16", &e), 0);
    hy_model *mb = NULL, *mf = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&mb, dir, mode, &e), 0);
    CU_ASSERT_EQUAL(hy_model_bf16_math(mb),
                    mode == HY_WEIGHTS_BF16 && hy_linear_bf16_rounds_x(40, true));
    CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&mf, dir, HY_WEIGHTS_F32, &e), 0);
    CU_ASSERT_STRING_EQUAL(hy_model_weights_name(mb), "bf16");
    CU_ASSERT_STRING_EQUAL(hy_model_weights_name(mf), "f32");
    CU_ASSERT(hy_model_matrix_bytes(mf) > 0);
    CU_ASSERT_EQUAL(2 * hy_model_matrix_bytes(mb), hy_model_matrix_bytes(mf));
    const hy_model_config *c = hy_model_cfg(mf);
    const int n = 40;
    int32_t tok[40];
    hy_rng r;
    hy_rng_seed(&r, 9);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)c->vocab);
    float *lb = malloc((size_t)4 * c->vocab * sizeof *lb), *lf = malloc((size_t)4 * c->vocab * 4);
    CU_ASSERT_EQUAL_FATAL(run(mb, tok, n, lb), 0);
    CU_ASSERT_EQUAL_FATAL(run(mf, tok, n, lf), 0);
    /* Without bf16 arithmetic, the same values summed in another order:
     * fp32 rounding, well under the 1e-3 the golden tests allow against
     * transformers. With it, the prompt's activations are rounded to bf16
     * at every product (2^-9 of each), as bf16 inference does: a few
     * percent of the logits' range on these random models (measured up to
     * 2.6%), the same top token. */
    const double tol = hy_model_bf16_math(mb) ? 0.05 : 1e-4;
    for (int k = 0; k < 4; k++) {
        double scale;
        const float *b = lb + (size_t)k * c->vocab, *f = lf + (size_t)k * c->vocab;
        const double d = logits_diff(b, f, c->vocab, &scale);
        if (d > tol * (1 + scale))
            printf("\n  %s step %d: |dlogit| %g (max %g)", preset, k, d, scale);
        CU_ASSERT(d <= tol * (1 + scale));
        int ab = 0, af = 0;
        for (int i = 1; i < c->vocab; i++) {
            if (b[i] > b[ab]) ab = i;
            if (f[i] > f[af]) af = i;
        }
        CU_ASSERT_EQUAL(ab, af);
    }
    free(lb), free(lf);
    hy_model_close(mb);
    hy_model_close(mf);
}

static void test_families_match_fp32(void)
{
    const char *const presets[] = {"tiny",      "tiny-moe",      "tiny-olmo", "tiny-minimax",
                                   "tiny-kimi", "tiny-nemotron", "tiny-ling"};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        check_family(presets[i], HY_WEIGHTS_AUTO);
        check_family(presets[i], HY_WEIGHTS_BF16);
    }
}

static void test_f32_checkpoint_stays_f32(void)
{
    char dir[128];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/f32", g_tmp);
    CU_ASSERT_EQUAL_FATAL(hy_model_init("tiny", 5, dir, "F32", &e), 0);
    hy_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, dir, &e), 0);
    CU_ASSERT_STRING_EQUAL(hy_model_weights_name(m), "f32");
    /* narrowing is all or nothing: an fp32 value keeps every matrix fp32 */
    CU_ASSERT_EQUAL(hy_model_narrow(m, &e), 0);
    CU_ASSERT_STRING_EQUAL(hy_model_weights_name(m), "f32");
    hy_model_close(m);
    /* bf16 arithmetic is for bf16 weights: an F32 checkpoint is not rounded */
    CU_ASSERT_EQUAL_FATAL(hy_model_open_with(&m, dir, HY_WEIGHTS_BF16, &e), 0);
    CU_ASSERT_STRING_EQUAL(hy_model_weights_name(m), "f32");
    CU_ASSERT(!hy_model_bf16_math(m));
    hy_model_close(m);
    hy_weights w;
    CU_ASSERT_EQUAL(hy_weights_parse("f32", &w), 0);
    CU_ASSERT_EQUAL(w, HY_WEIGHTS_F32);
    CU_ASSERT_EQUAL(hy_weights_parse("auto", &w), 0);
    CU_ASSERT_EQUAL(w, HY_WEIGHTS_AUTO);
    CU_ASSERT_EQUAL(hy_weights_parse("bf16", &w), 0);
    CU_ASSERT_EQUAL(w, HY_WEIGHTS_BF16);
    CU_ASSERT_EQUAL(hy_weights_parse("bf17", &w), HY_EINVAL);
}

int main(void)
{
    if (hy_test_mkdtemp("bf16w", g_tmp, sizeof g_tmp)) return 1;
    const hy_test_case cases[] = {
        {"the bf16 product equals the fp32 one on the same values", test_kernel_matches_fp32},
        {"every family's BF16 checkpoint: bf16 matrices, half the bytes, fp32's logits",
         test_families_match_fp32},
        {"an F32 checkpoint stays fp32", test_f32_checkpoint_stays_f32},
        {NULL, NULL}};
    const int failed = hy_test_main("bf16 weights", cases);
    hy_test_rmtree(g_tmp);
    return failed;
}
