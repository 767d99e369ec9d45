/*
 * The dense kernels against direct double-precision transcriptions: causal
 * attention over a KV cache with earlier positions, the causal conv with its
 * carried state, rotary embeddings (including that rotations compose, which
 * re-rotating cached keys relies on), RMS and L2 norms, and the GEMM wrapper's
 * transpose flags.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "test_util.h"

#include <string.h>

static float *randn(hy_rng *r, size_t n)
{
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)hy_rng_normal(r);
    return x;
}

/* Direct attention of query rows at positions pos[t] (each sees keys
 * [0, pos[t]]) against o; the largest absolute difference. */
static double attention_error(int n, int hd, const int64_t *pos, const float *q, const float *K,
                              const float *V, int ld, float scale, const float *o)
{
    double worst = 0;
    double *p = malloc((size_t)(pos[n - 1] + 1) * sizeof(double));
    for (int t = 0; t < n; t++) {
        const int valid = (int)pos[t] + 1;
        double mx = -1e300, z = 0;
        for (int j = 0; j < valid; j++) {
            double s = 0;
            for (int i = 0; i < hd; i++) s += (double)q[(size_t)t * ld + i] * K[(size_t)j * ld + i];
            p[j] = s * scale;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j < valid; j++) z += (p[j] = exp(p[j] - mx));
        for (int i = 0; i < hd; i++) {
            double acc = 0;
            for (int j = 0; j < valid; j++) acc += p[j] / z * V[(size_t)j * ld + i];
            worst = fmax(worst, fabs(acc - o[(size_t)t * hd + i]));
        }
    }
    free(p);
    return worst;
}

static void test_attention_matches_definition(void)
{
    hy_rng r;
    hy_rng_seed(&r, 1);
    const int hd = 24, pos0 = 37, n = 150, ctx = pos0 + n, ld = 2 * hd; /* strided rows */
    float *q = randn(&r, (size_t)n * ld), *K = randn(&r, (size_t)ctx * ld),
          *V = randn(&r, (size_t)ctx * ld);
    float *o = calloc((size_t)n * hd, sizeof(float));
    float *scores = malloc((size_t)HY_ATTN_BLOCK * ctx * sizeof(float));
    const float scale = 0.3f;
    hy_attention(n, hd, pos0, q, ld, K, ld, V, ld, scale, o, hd, scores);
    int64_t pos[150];
    for (int t = 0; t < n; t++) pos[t] = pos0 + t;
    const double worst = attention_error(n, hd, pos, q, K, V, ld, scale, o);
    printf("\n    attention n=%d after %d cached: max abs error %.1e", n, pos0, worst);
    CU_ASSERT(worst < 1e-5);
    free(q), free(K), free(V), free(o), free(scores);
}

/* hy_attention_at of n random rows at pos[] (head size hd, row stride ld)
 * against the definition; the scores scratch starts as NaN, so a product
 * that reads a score nobody wrote fails. Returns the largest error. */
static double attention_at_error(hy_rng *r, int n, int hd, int ld, const int64_t *pos)
{
    const int ctx = (int)pos[n - 1] + 1;
    float *q = randn(r, (size_t)n * ld), *K = randn(r, (size_t)ctx * ld),
          *V = randn(r, (size_t)ctx * ld);
    float *o = calloc((size_t)n * hd, sizeof(float));
    float *scores = malloc((size_t)HY_ATTN_BLOCK * ctx * sizeof(float));
    for (size_t i = 0; i < (size_t)HY_ATTN_BLOCK * ctx; i++) scores[i] = NAN;
    hy_attention_at(n, hd, hd, pos, q, ld, K, ld, V, ld, 0.25f, o, hd, scores);
    const double worst = attention_error(n, hd, pos, q, K, V, ld, 0.25f, o);
    free(q), free(K), free(V), free(o), free(scores);
    return worst;
}

/* Rows at positions with gaps between them (a request's seams and query
 * around composed holes) and repeats of none: each row sees exactly the keys
 * up to its own position, whichever block it shares. */
static void test_attention_at_scattered_positions(void)
{
    hy_rng r;
    hy_rng_seed(&r, 3);
    enum { N = 100 };
    int64_t pos[N];
    int64_t at = 5;
    for (int t = 0; t < N; t++) { /* runs of 1–9 rows, gaps of 0–40 positions */
        pos[t] = at++;
        if (hy_rng_next(&r) % 5 == 0) at += (int64_t)(hy_rng_next(&r) % 41);
    }
    const double worst = attention_at_error(&r, N, 16, 19, pos);
    printf("\n    %d rows over %d positions: max abs error %.1e", N, (int)pos[N - 1] + 1, worst);
    CU_ASSERT(worst < 1e-5);
}

/* A request's rows: 8-row seams hundreds of positions apart (each block's
 * rows skip whole key tiles), then a 40-row query — the tiled products
 * over the rows that reach each tile must still give every row its exact
 * causal attention. */
static void test_attention_at_seams_far_apart(void)
{
    hy_rng r;
    hy_rng_seed(&r, 4);
    enum { N = 11 * 8 + 40 };
    int64_t pos[N];
    int64_t at = 0;
    int t = 0;
    for (int s = 0; s < 11; s++) {
        for (int i = 0; i < 8; i++) pos[t++] = at + i;
        at += 200 + (int64_t)(hy_rng_next(&r) % 500);
    }
    for (int i = 0; i < 40; i++) pos[t++] = at + i;
    const double worst = attention_at_error(&r, N, 16, 17, pos);
    printf("\n    %d rows, seams 200+ positions apart, over %d positions: max abs error %.1e", N,
           (int)pos[N - 1] + 1, worst);
    CU_ASSERT(worst < 1e-5);
}

/* Keys in two parts (MLA in the latent space): the same as one attention
 * over the concatenated queries and keys, with the values the first part. */
static void test_attention_at2_two_key_parts(void)
{
    hy_rng r;
    hy_rng_seed(&r, 5);
    enum { N = 70, D1 = 24, D2 = 8, D = D1 + D2 };
    int64_t pos[N];
    for (int i = 0; i < N; i++) pos[i] = i < 20 ? 3 * i : 300 + i; /* seams, then a run */
    const int ctx = (int)pos[N - 1] + 1;
    float *q = randn(&r, (size_t)N * D), *K = randn(&r, (size_t)ctx * D);
    float *q2 = malloc((size_t)N * D2 * 4), *K2 = malloc((size_t)ctx * D2 * 4);
    for (int i = 0; i < N; i++) memcpy(q2 + i * D2, q + i * D + D1, D2 * 4);
    for (int j = 0; j < ctx; j++) memcpy(K2 + j * D2, K + j * D + D1, D2 * 4);
    float *o1 = malloc((size_t)N * D1 * 4), *o2 = malloc((size_t)N * D1 * 4);
    float *sc = malloc((size_t)HY_ATTN_BLOCK * ctx * 4);
    hy_attention_at(N, D, D1, pos, q, D, K, D, K, D, 0.3f, o1, D1, sc);
    hy_attention_at2(N, D1, D2, D1, pos, q, D, K, D, q2, D2, K2, D2, K, D, 0.3f, o2, D1, sc);
    const double worst = hy_max_abs_diff(o2, o1, (size_t)N * D1);
    printf("\n    %d rows, keys of %d + %d: against one attention over both %.1e", N, D1, D2,
           worst);
    CU_ASSERT(worst < 1e-5);
    free(q), free(K), free(q2), free(K2), free(o1), free(o2), free(sc);
}

static void test_conv_carries_state(void)
{
    hy_rng r;
    hy_rng_seed(&r, 2);
    const int C = 13, K = 4, n = 11, ld = C + 5;
    float *in = randn(&r, (size_t)n * ld), *w = randn(&r, (size_t)K * C);
    float *out1 = malloc((size_t)n * C * 4), *out2 = malloc((size_t)n * C * 4);
    float st1[3 * 13] = {0}, st2[3 * 13] = {0};
    hy_conv1d_silu(n, C, K, in, ld, st1, w, NULL, out1, C);
    /* direct: zero history */
    double worst = 0;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int j = 0; j < K; j++) {
                int idx = t + j - (K - 1);
                if (idx >= 0) s += (double)w[j * C + c] * in[(size_t)idx * ld + c];
            }
            s = s / (1 + exp(-s));
            worst = fmax(worst, fabs(s - out1[t * C + c]));
        }
    CU_ASSERT(worst < 1e-5);
    /* the same sequence in pieces of 1, 2 and 8 tokens */
    const int cuts[] = {0, 1, 3, 11};
    for (int i = 0; i < 3; i++)
        hy_conv1d_silu(cuts[i + 1] - cuts[i], C, K, in + (size_t)cuts[i] * ld, ld, st2, w, NULL,
                       out2 + (size_t)cuts[i] * C, C);
    CU_ASSERT(hy_max_abs_diff(out2, out1, (size_t)n * C) == 0.0);
    CU_ASSERT(memcmp(st1, st2, sizeof st1) == 0);
    /* the state holds the last K-1 inputs, oldest first */
    for (int j = 0; j < K - 1; j++)
        CU_ASSERT(memcmp(st1 + j * C, in + (size_t)(n - (K - 1) + j) * ld, (size_t)C * 4) == 0);
    /* a bias (Mamba2's conv) is added before the SiLU */
    float *bias = randn(&r, (size_t)C), st3[3 * 13] = {0};
    hy_conv1d_silu(n, C, K, in, ld, st3, w, bias, out2, C);
    double bworst = 0;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < C; c++) {
            double s = bias[c];
            for (int j = 0; j < K; j++) {
                int idx = t + j - (K - 1);
                if (idx >= 0) s += (double)w[j * C + c] * in[(size_t)idx * ld + c];
            }
            s = s / (1 + exp(-s));
            bworst = fmax(bworst, fabs(s - out2[t * C + c]));
        }
    CU_ASSERT(bworst < 1e-5);
    CU_ASSERT(memcmp(st1, st3, sizeof st1) == 0); /* the state holds inputs, not biased sums */
    free(in), free(w), free(out1), free(out2), free(bias);
}

static void test_rope(void)
{
    const int rd = 8;
    float inv[4];
    hy_rope_inv_freq(rd, 10000.0, inv);
    CU_ASSERT_DOUBLE_EQUAL(inv[0], 1.0, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(inv[1], pow(10000.0, -0.25), 1e-7);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    memcpy(y, x, sizeof x);
    hy_rope_apply(y, rd, inv, 3);
    /* pair (i, i+4) rotates by angle 3·inv[i] (rotate_half convention) */
    for (int i = 0; i < 4; i++) {
        double a = 3.0 * inv[i];
        CU_ASSERT_DOUBLE_EQUAL(y[i], x[i] * cos(a) - x[i + 4] * sin(a), 1e-5);
        CU_ASSERT_DOUBLE_EQUAL(y[i + 4], x[i + 4] * cos(a) + x[i] * sin(a), 1e-5);
    }
    /* rotations compose: R(5)·R(3) = R(8), and position 0 is the identity */
    float z[8];
    memcpy(z, x, sizeof x);
    hy_rope_apply(z, rd, inv, 8);
    hy_rope_apply(y, rd, inv, 5);
    CU_ASSERT(hy_max_abs_diff(y, z, 8) < 1e-5);
    memcpy(z, x, sizeof x);
    hy_rope_apply(z, rd, inv, 0);
    CU_ASSERT(memcmp(z, x, sizeof x) == 0);
}

static void test_norms(void)
{
    float x[6] = {1, -2, 3, 0.5f, 0, 4}, w[3] = {1, 2, 0.5f}, out[6];
    hy_rmsnorm(2, 3, x, 3, w, 1e-6f, out, 3);
    double r0 = 1 / sqrt((1 + 4 + 9) / 3.0 + 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[1], -2 * r0 * 2, 1e-5);
    double r1 = 1 / sqrt((0.25 + 16) / 3.0 + 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(out[5], 4 * r1 * 0.5, 1e-5);
    float v[3] = {3, 4, 0};
    hy_l2norm_scale(v, 3, 1e-6f, 2.0f);
    CU_ASSERT_DOUBLE_EQUAL(v[0], 2 * 3 / sqrt(25 + 1e-6), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(v[1], 2 * 4 / sqrt(25 + 1e-6), 1e-6);
    CU_ASSERT_DOUBLE_EQUAL(hy_softplusf(0.0f), log(2.0), 1e-6);
    CU_ASSERT_EQUAL(hy_softplusf(30.0f), 30.0f);
}

static void test_gemm_transposes(void)
{
    /* A [2][3], B [3][2]: C = A·B; with stored transposes the same result */
    const float A[6] = {1, 2, 3, 4, 5, 6}, At[6] = {1, 4, 2, 5, 3, 6};
    const float B[6] = {1, 0, 0, 1, 1, 1}, Bt[6] = {1, 0, 1, 0, 1, 1};
    const float want[4] = {4, 5, 10, 11};
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float C[4] = {0};
            hy_gemm(ta, tb, 2, 2, 3, 1.0f, ta ? At : A, ta ? 2 : 3, tb ? Bt : B, tb ? 3 : 2, 0.0f,
                    C, 2);
            CU_ASSERT(memcmp(C, want, sizeof C) == 0);
        }
    float Y[4];
    hy_linear(2, 3, 2, A, 3, Bt, Y, 2); /* nn.Linear with W = Bt [2][3] */
    CU_ASSERT(memcmp(Y, want, sizeof Y) == 0);
}

/* Products large enough to be split over threads, and single rows (GEMV),
 * in every transpose combination, against a double-precision product. */
static void test_gemm_split_and_gemv(void)
{
    hy_rng r;
    hy_rng_seed(&r, 9);
    const int shapes[][3] = {
        {300, 257, 130}, {1, 3000, 200}, {1, 700, 513}, {40, 2000, 96}, {2048, 64, 64}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        float *A = randn(&r, (size_t)m * k), *B = randn(&r, (size_t)n * k);
        float *C = malloc((size_t)m * n * 4), *C0 = randn(&r, (size_t)m * n);
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                if (ta && m == 1) continue;
                memcpy(C, C0, (size_t)m * n * 4);
                /* A as [m][k] (or [k][m]), B as [k][n] (or [n][k]); beta 0.5 accumulates */
                hy_gemm(ta, tb, m, n, k, 1.5f, A, ta ? (size_t)m : (size_t)k, B,
                        tb ? (size_t)k : (size_t)n, 0.5f, C, (size_t)n);
                double worst = 0;
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double acc = 0;
                        for (int q = 0; q < k; q++) {
                            double a = ta ? A[(size_t)q * m + i] : A[(size_t)i * k + q];
                            double b = tb ? B[(size_t)j * k + q] : B[(size_t)q * n + j];
                            acc += a * b;
                        }
                        acc = 1.5 * acc + 0.5 * C0[(size_t)i * n + j];
                        worst = fmax(worst, fabs(acc - C[(size_t)i * n + j]));
                    }
                if (worst > 1e-3)
                    printf("\n    %dx%dx%d ta=%d tb=%d: error %.2e", m, n, k, ta, tb, worst);
                CU_ASSERT(worst <= 1e-3);
            }
        free(A), free(B), free(C), free(C0);
    }
}

static void test_fast_exp(void)
{
    double worst = 0;
    for (double x = -87.0; x <= 88.0; x += 0.0137) {
        /* relative to exp of the float argument actually passed */
        double want = exp((double)(float)x), got = hy_expf((float)x);
        worst = fmax(worst, fabs(got - want) / want);
    }
    printf("\n    hy_expf max relative error over [-87, 88]: %.2e", worst);
    CU_ASSERT(worst < 5e-7);
    CU_ASSERT(hy_expf(-1000.0f) < 2e-38f);
    CU_ASSERT(hy_expf(0.0f) == 1.0f);
    CU_ASSERT_DOUBLE_EQUAL(hy_sigmoidf(0.0f), 0.5, 1e-7);
    CU_ASSERT_DOUBLE_EQUAL(hy_siluf(2.0f), 2.0 / (1.0 + exp(-2.0)), 1e-6);
}

/* KL between softmaxes: 0 for equal or shifted logits, the closed form on
 * two entries, and no overflow for logits far outside exp's range. */
static void test_kl_logits(void)
{
    const float a[3] = {1.0f, -2.0f, 0.5f}, shifted[3] = {1001.0f, 998.0f, 1000.5f};
    CU_ASSERT_DOUBLE_EQUAL(hy_kl_logits(a, a, 3), 0.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(hy_kl_logits(a, shifted, 3), 0.0, 1e-9);
    /* p = (1/2, 1/2), q = softmax(0, ln 3) = (1/4, 3/4):
     * KL = ½ ln(½ / ¼) + ½ ln(½ / ¾) = ½ ln(4/3) */
    const float p[2] = {0.0f, 0.0f}, q[2] = {0.0f, (float)log(3.0)};
    CU_ASSERT_DOUBLE_EQUAL(hy_kl_logits(p, q, 2), 0.5 * log(4.0 / 3.0), 1e-7);
    CU_ASSERT(hy_kl_logits(q, p, 2) > 0); /* not symmetric, never negative */
    const float big[2] = {3000.0f, 0.0f}, flat[2] = {0.0f, 0.0f};
    const double kl = hy_kl_logits(big, flat, 2);
    CU_ASSERT(isfinite(kl) && fabs(kl - log(2.0)) < 1e-6);
}

/* The query heads of one KV head together (hy_attention_heads): each
 * head's rows — seams far apart, then a run, so tiles are skipped — equal
 * hy_attention_at of that head alone; rows of a head are qhs apart in a
 * row of q and written ohs apart in o (the executor's fused rows). */
static void test_attention_heads_match_one_at_a_time(void)
{
    hy_rng r;
    hy_rng_seed(&r, 6);
    enum { N = 9 * 8 + 70, G = 4, D = 16, QHS = 2 * D, LDQ = G * QHS + 3, LDO = G * D + 5 };
    int64_t pos[N];
    int64_t at = 0;
    int t = 0;
    for (int s = 0; s < 9; s++) {
        for (int i = 0; i < 8; i++) pos[t++] = at + i;
        at += 150 + (int64_t)(hy_rng_next(&r) % 400);
    }
    for (int i = 0; i < 70; i++) pos[t++] = at + i;
    const int ctx = (int)pos[N - 1] + 1;
    float *q = randn(&r, (size_t)N * LDQ), *K = randn(&r, (size_t)ctx * D),
          *V = randn(&r, (size_t)ctx * D);
    float *o1 = calloc((size_t)N * LDO, 4), *o2 = calloc((size_t)N * LDO, 4);
    float *sc = malloc((size_t)HY_ATTN_BLOCK * ctx * 4);
    const size_t nw = hy_attention_heads_scratch(G, D, D, ctx);
    float *work = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++) work[i] = NAN; /* a score nobody wrote fails */
    for (int h = 0; h < G; h++)
        hy_attention_at(N, D, D, pos, q + h * QHS, LDQ, K, D, V, D, 0.25f, o1 + h * D, LDO, sc);
    hy_attention_heads(N, G, D, D, pos, q, LDQ, QHS, K, D, V, D, 0.25f, o2, LDO, D, work);
    const double worst = hy_max_abs_diff(o2, o1, (size_t)N * LDO);
    printf("\n    %d rows of %d heads over %d positions: against a head at a time %.1e", N, G, ctx,
           worst);
    CU_ASSERT(worst < 1e-6);
    for (int i = 0; i < N; i++) /* the gaps between heads' outputs are untouched */
        for (int j = G * D; j < LDO; j++) CU_ASSERT_EQUAL(o2[(size_t)i * LDO + j], 0.0f);
    free(q), free(K), free(V), free(o1), free(o2), free(sc), free(work);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"attention_matches_definition", test_attention_matches_definition},
        {"attention_at_scattered_positions", test_attention_at_scattered_positions},
        {"attention_at_seams_far_apart", test_attention_at_seams_far_apart},
        {"attention_at2_two_key_parts", test_attention_at2_two_key_parts},
        {"attention_heads_match_one_at_a_time", test_attention_heads_match_one_at_a_time},
        {"conv_carries_state", test_conv_carries_state},
        {"rope_rotate_half_and_composition", test_rope},
        {"rms_and_l2_norms", test_norms},
        {"gemm_transposes", test_gemm_transposes},
        {"gemm_split_over_threads_and_gemv", test_gemm_split_and_gemv},
        {"fast_exp_accuracy", test_fast_exp},
        {"kl_between_softmaxes", test_kl_logits},
        {NULL, NULL},
    };
    return hy_test_main("dense_kernels", cases);
}
