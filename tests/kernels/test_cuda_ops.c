/*
 * The device's small operations (kernels/cuda/ops.cu) against the CPU code
 * they stand in for: the norms (hy_rmsnorm, exec_internal.h's per-head and
 * gated row norms, hy_l2norm_scale), the short convolution (hy_conv1d_silu),
 * a few rows against bf16 weights (hy_linear_bf16's direct path),
 * RoPE (hy_rope_cos_sin, hy_rope_rotate), and transcriptions of the
 * executor's static loops — ffn.c's SwiGLU and relu², its softmax routing
 * (route_token, top_k), the rows gathered per expert, the weighted scatter
 * back and the shared expert's gate; attention_layers.c's output gate;
 * forward.c's embedding copy, bias and residuals.
 *
 * Every problem runs each way the kernels can run (WAYS below), through the
 * same code and held to the same checks:
 *   - host, every build: the launchers' twins (hy_emu_*, emu_ops.c) over
 *     host memory, which run the bodies of ops_body.h as the kernels run
 *     them over whole problems — a phased kernel block by block, each phase
 *     for every thread before the next (the barrier's guarantee), shared
 *     memory filled with NaN at a block's start;
 *   - reversed, every build: the twins again with each phase's threads in
 *     reverse order (hy_emu_set_reversed), which must give the host's bits
 *     (no thread of a phase reads what another writes in it);
 *   - device, with nvcc (HY_HAVE_CUDA_KERNELS) and a device: the launchers
 *     over device memory; without a device a line says the device tests
 *     were skipped.
 * The twins, and with nvcc the launchers, refuse bad shapes. Shapes include
 * the real ones: hidden 1024 and 2048, head_dim 256 with a rotary 64 in
 * q|gate rows, 32 value heads of 128, 6144 conv channels with kernel 4, 256
 * experts top-8 and 512 top-10.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "exec_internal.h"
#include "hy_cuda_ops.h"
#include "ops_body.h"
#include "test_util.h"

#include <string.h>

#ifdef HY_HAVE_CUDA_KERNELS
#include <cuda_runtime_api.h>
#endif

/* Tolerances. u = 2^-24 ≈ 6e-8, the unit roundoff of fp32. Between the host
 * bodies and the CPU code only the order of sums differs; the device adds
 * fused multiply-adds (nvcc contracts a·b + c; hy_cu_expf's polynomial too),
 * which move each contracted step by at most an ulp, and its own sinf/cosf.
 *
 * TOL_NORM, max |x − ref| / |ref| per element: out = x·r·w(·silu z) with r
 * from a sum of d ≤ 2048 squares taken in a tree instead of the CPU's
 * vector lanes. Sums of positive terms in two orders differ by about
 * √d·u relative (2.7e-6 at d = 2048 as a random walk), the square root
 * halves it, and three or four roundings of the products (silu's own few
 * ulps on the device) add 3e-7. 4e-6.
 *
 * TOL_ELEM, per element relative: SwiGLU, the sigmoid gate: one exp, a
 * division and a product or two, the same expressions on both sides; the
 * device's contracted polynomial and division differ by a few ulps. 1e-6
 * (about 8 ulps).
 *
 * TOL_SUM, |x − ref| / max |ref| over the problem: short sums whose terms may
 * cancel — the conv's K taps from the bias, a rotation's two products, the
 * scaled residual's two, the experts' k weighted rows (Σ weights ≤ 1, so
 * the size of their terms is that of the rows, the scale used there). The
 * same order on both sides; a contraction changes each step by an ulp of
 * the terms: ≤ (K + 1)·u ≈ 3e-7 relative to them. 2e-6 on the device. On
 * the host the conv, the rotation and the experts' sum are the CPU's
 * expressions in the CPU's order, built by the same compiler, and must
 * agree bit for bit (TOL_SAME): the sum's order is part of the contract
 * (hy_cu_moe_combine adds in the CPU's expert order), which a tolerance
 * would not notice.
 *
 * TOL_ROUTE, per weight relative: a softmax probability p = e/Σe, its sum
 * over E ≤ 512 exps in a tree rather than in sequence (√E·u ≈ 1.4e-6 as a
 * random walk; all terms positive), then the division, and with norm_topk
 * the same again over k weights. 4e-6. The chosen experts must be the
 * CPU's exactly: the problems have no near-ties at the k-th place (checked
 * as they are drawn) other than exact ones, and an exact tie is broken the
 * same way on every side (one token's exps share one sum).
 *
 * TOL_GATE, |y − ref| / max(|y|, |ye|): the shared expert's gate sigmoid(x·w),
 * a dot product of H ≤ 2048 terms of size 1/√H in another order: its error
 * is ≈ √H·u·|x·w|_typical ≈ 3e-6 absolute, the sigmoid's slope ≤ 1/4
 * takes it to < 1e-6 on s, times |ye|. 2e-6.
 *
 * TOL_TRIG, absolute: CUDA's sinf and cosf are within 2 ulps over the full
 * range, glibc's within 1: at most 3 ulps of 1, 3.6e-7. 5e-7. (The host
 * body calls glibc's, and must agree exactly.)
 *
 * TOL_DOT, |y − ref| / Σ|x·w| per output: hy_cu_linear_w16's dot products
 * of K ≤ 6144 terms — each thread's strided share, then a tree — against
 * the CPU's direct path in its vector lanes: the same widened weights and
 * fp32 products, only the order of the sums differs, about √(depth)·u of
 * the sum of magnitudes as a random walk (8e-8 seen). 1e-6; a wrong row or
 * weight moves it to order 1.
 *
 * Copies, counts and offsets (embedding, gather, plan, conv state, relu²,
 * bias, residual add: one IEEE operation or none) must agree bit for bit. */
#define TOL_DOT   1e-6
#define TOL_NORM  4e-6
#define TOL_ELEM  1e-6
#define TOL_SUM   2e-6
#define TOL_SAME  0.0
#define TOL_ROUTE 4e-6
#define TOL_GATE  2e-6
#define TOL_TRIG  5e-7

/* --- helpers ------------------------------------------------------------------ */

static float *randn(hy_rng *r, size_t n, float scale)
{
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * (float)hy_rng_normal(r);
    return x;
}

static float *fdup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

/* max |a − b| / |b| per element (0 where both are 0), NaN where one is. */
static double rel_elem(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        const double e = d == 0 ? 0 : d / fmax(fabs((double)b[i]), 1e-30);
        if (isnan(e)) return NAN; /* fails every tolerance */
        if (e > m) m = e;
    }
    return m;
}

/* The larger of two errors, NaN if either is (fmax would drop it). */
static double worse(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : fmax(a, b);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* --- the ways a problem runs ----------------------------------------------------- */

/* The launcher (dev: over device memory) or its twin (over host memory):
 * they take the same arguments. */
#ifdef HY_HAVE_CUDA_KERNELS
static int g_device; /* main found a device */
#define OP(dev, name) ((dev) ? hy_cu_##name : hy_emu_##name)
#else
enum { g_device = 0 };
#define OP(dev, name) ((void)(dev), hy_emu_##name)
#endif

/* The twins; the twins with each phase's threads in reverse order; the
 * launchers, where there is a device. */
enum { HOST, REVERSED, DEVICE, WAYS };
static const char *const k_way[WAYS] = {"host", "reversed", "device"};

/* How many of the ways run here (DEVICE last). */
static int ways(void)
{
    return g_device ? WAYS : DEVICE;
}

/* Sets the twins' order of threads for `way`; whether it runs on the device. */
static int way_dev(int way)
{
    hy_emu_set_reversed(way == REVERSED);
    return way == DEVICE;
}

/* rc HY_OK, or false and why. */
static int ok(int rc, const hy_err *err)
{
    if (rc != HY_OK) printf("\n    failed: %s", err->msg);
    return rc == HY_OK;
}

/* A copy of h's bytes in way's memory (with h NULL uninitialised: NaN on
 * the host); NULL (and why) when it could not be had. */
static void *put(int way, const void *h, size_t bytes)
{
    const int dev = way == DEVICE;
    void *p = NULL;
    hy_err err = {0};
    if (!ok(OP(dev, malloc)(NULL, bytes, &p, &err), &err)) return NULL;
    if (h && !ok(OP(dev, copy)(NULL, p, h, bytes, HY_CU_H2D, &err), &err)) {
        OP(dev, free)(NULL, p);
        return NULL;
    }
    return p;
}

static void drop(int way, void *p)
{
    OP(way == DEVICE, free)(NULL, p);
}

/* p's bytes, once the work queued before is done, into h; false (and why)
 * on a failure, a kernel's included. */
static int get(int way, void *h, const void *p, size_t bytes)
{
    hy_err err = {0};
    return ok(OP(way == DEVICE, copy)(NULL, h, p, bytes, HY_CU_D2H, &err), &err);
}

/* p's n floats into new host memory, p dropped; NULL on a failure. */
static float *fetch(int way, float *p, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!get(way, h, p, n * sizeof(float))) free(h), h = NULL;
    drop(way, p);
    return h;
}

/* --- norms ------------------------------------------------------------------------ */

/* ldo 0: in place (out = x, its head stride xhs). */
typedef struct norm_case {
    const char *what;
    int kind, n, heads, d;
    size_t ldx, xhs, ldo, ohs, ldz;
} norm_case;

static const norm_case k_norms[] = {
    {"rows of H 1024", HY_CU_NORM_RMS, 4, 1, 1024, 1029, 0, 1024, 0, 0},
    {"rows of 100, in place", HY_CU_NORM_RMS, 3, 1, 100, 100, 0, 0, 0, 0},
    {"rows of H 2048", HY_CU_NORM_RMS, 2, 1, 2048, 2048, 0, 2048, 0, 0},
    {"rows of 5", HY_CU_NORM_RMS, 3, 1, 5, 7, 0, 5, 0, 0},
    /* q_norm in place in q|gate rows of q_proj (head stride 2·256) */
    {"q heads 16x256", HY_CU_NORM_RMS, 3, 16, 256, 16 * 512 + 1024, 512, 0, 0, 0},
    /* k_norm from the projection into a cache row of 2 heads */
    {"k heads 2x256", HY_CU_NORM_RMS, 3, 2, 256, 16 * 512 + 1024, 256, 512, 256, 0},
    /* GDN's output: 32 value heads of 128, z from the projection rows */
    {"gated 32x128", HY_CU_NORM_GATED, 3, 32, 128, 4096, 128, 0, 0, 4096 + 67},
    {"l2 16x128", HY_CU_NORM_L2, 3, 16, 128, 6144, 128, 0, 0, 0},
};

typedef struct norm_data {
    const norm_case *c;
    float *x, *z, *w; /* x [n·ldx], z [n·ldz], w [d] */
    float eps, scale;
} norm_data;

static norm_data norm_make(const norm_case *c, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    norm_data D = {c,
                   randn(&r, (size_t)c->n * c->ldx, 1.0f),
                   randn(&r, (size_t)c->n * c->ldz, 2.0f),
                   randn(&r, (size_t)c->d, 0.1f),
                   1e-6f,
                   1.0f};
    for (int i = 0; i < c->d; i++) D.w[i] += 1.0f;
    for (int t = 0; t < c->n; t++) { /* rows of very different sizes: eps matters for some */
        const float s = t % 3 == 0 ? 1.0f : t % 3 == 1 ? 30.0f : 1e-3f;
        for (size_t i = 0; i < c->ldx; i++) D.x[(size_t)t * c->ldx + i] *= s;
    }
    if (c->kind == HY_CU_NORM_L2) D.scale = 1.0f / sqrtf((float)c->d);
    return D;
}

static void norm_drop(norm_data *D)
{
    free(D->x), free(D->z), free(D->w);
}

static size_t norm_outs(const norm_case *c)
{
    return c->ldo ? (size_t)c->n * c->ldo : 0;
}

/* The CPU code: X a copy of x, O zeros (unless in place). */
static void norm_cpu(const norm_data *D, float *X, float *O)
{
    const norm_case *c = D->c;
    if (c->kind == HY_CU_NORM_RMS && c->heads == 1) {
        hy_rmsnorm(c->n, c->d, X, c->ldx, D->w, D->eps, c->ldo ? O : X, c->ldo ? c->ldo : c->ldx);
        return;
    }
    for (int t = 0; t < c->n; t++)
        for (int h = 0; h < c->heads; h++) {
            float *x = X + (size_t)t * c->ldx + (size_t)h * c->xhs;
            float *o = c->ldo ? O + (size_t)t * c->ldo + (size_t)h * c->ohs : x;
            if (c->kind == HY_CU_NORM_RMS)
                hy_fwd_rmsnorm_row(x, D->w, c->d, D->eps, o);
            else if (c->kind == HY_CU_NORM_GATED)
                hy_fwd_gated_rmsnorm(x, D->z + (size_t)t * c->ldz + (size_t)h * c->d, D->w, c->d,
                                     D->eps);
            else
                hy_l2norm_scale(x, c->d, D->eps, D->scale);
        }
}

/* The case's launcher (dev) or its twin over x, o (unless in place), z, w. */
static int norm_call(const norm_data *D, int dev, float *x, float *o, const float *z,
                     const float *w, hy_err *err)
{
    const norm_case *c = D->c;
    if (c->kind == HY_CU_NORM_RMS && c->heads == 1)
        return OP(dev, rmsnorm)(NULL, c->n, c->d, x, c->ldx, w, D->eps, c->ldo ? o : x,
                                c->ldo ? c->ldo : c->ldx, err);
    if (c->kind == HY_CU_NORM_RMS)
        return OP(dev, rmsnorm_heads)(NULL, c->n, c->heads, c->d, x, c->ldx, c->xhs, w, D->eps,
                                      c->ldo ? o : x, c->ldo ? c->ldo : c->ldx,
                                      c->ldo ? c->ohs : c->xhs, err);
    if (c->kind == HY_CU_NORM_GATED)
        return OP(dev, gated_rmsnorm)(NULL, c->n, c->heads, c->d, x, c->ldx, z, c->ldz, w, D->eps,
                                      err);
    return OP(dev, l2norm_heads)(NULL, c->n, c->heads, c->d, x, c->ldx, D->eps, D->scale, err);
}

/* The case run `way` from X (a copy of x) and O (zeros), which get the
 * results; false (and why) on a failure. */
static int norm_run(const norm_data *D, int way, float *X, float *O)
{
    const norm_case *c = D->c;
    const int dev = way_dev(way);
    const size_t nx = (size_t)c->n * c->ldx * 4, no = norm_outs(c) * 4;
    float *x = put(way, X, nx), *o = put(way, O, no),
          *z = put(way, D->z, (size_t)c->n * c->ldz * 4);
    float *w = put(way, D->w, (size_t)c->d * 4);
    hy_err err = {0};
    const int good =
        ok(norm_call(D, dev, x, o, z, w, &err), &err) && get(way, X, x, nx) && get(way, O, o, no);
    drop(way, x), drop(way, o), drop(way, z), drop(way, w);
    return good;
}

/* The worse of x's and out's errors against the reference. */
static double norm_err(const norm_data *D, const float *X, const float *O, const float *RX,
                       const float *RO)
{
    const norm_case *c = D->c;
    return worse(rel_elem(X, RX, (size_t)c->n * c->ldx), rel_elem(O, RO, norm_outs(c)));
}

static void test_norms(void)
{
    for (size_t i = 0; i < sizeof k_norms / sizeof *k_norms; i++) {
        const norm_case *c = &k_norms[i];
        norm_data D = norm_make(c, 100 + i);
        const size_t nx = (size_t)c->n * c->ldx, no = norm_outs(c);
        float *RX = fdup(D.x, nx), *RO = calloc(no + 1, 4), *X[WAYS] = {0}, *O[WAYS] = {0};
        norm_cpu(&D, RX, RO);
        printf("\n    %-22s", c->what);
        for (int way = 0; way < ways(); way++) {
            X[way] = fdup(D.x, nx), O[way] = calloc(no + 1, 4);
            CU_ASSERT_FATAL(norm_run(&D, way, X[way], O[way]));
            const double e = norm_err(&D, X[way], O[way], RX, RO);
            printf(" %s %.2e", k_way[way], e);
            CU_ASSERT(e <= TOL_NORM);
        }
        CU_ASSERT(memcmp(X[HOST], X[REVERSED], nx * 4) == 0 &&
                  memcmp(O[HOST], O[REVERSED], no * 4) == 0);
        for (int way = 0; way < WAYS; way++) free(X[way]), free(O[way]);
        free(RX), free(RO);
        norm_drop(&D);
    }
}

/* --- the short convolution ------------------------------------------------------------ */

typedef struct conv_case {
    int C, K, bias, warm;
    size_t ldi;
    int calls[4]; /* rows of each call, 0 ends */
} conv_case;

static const conv_case k_convs[] = {
    {6144, 4, 0, 1, 6144 + 4096 + 70, {7, 2, 1, 5}}, /* in a GDN projection's rows */
    {5, 2, 1, 0, 5, {1, 3, 0, 0}},
    {70, 4, 1, 0, 80, {1, 1, 2, 6}}, /* calls shorter than the state */
};

/* Each way carries its own state across the calls, from the same start as
 * the CPU's. */
static void test_conv(void)
{
    for (size_t i = 0; i < sizeof k_convs / sizeof *k_convs; i++) {
        const conv_case *c = &k_convs[i];
        hy_rng r;
        hy_rng_seed(&r, 200 + i);
        const size_t SN = (size_t)(c->K - 1) * c->C, SB = SN * 4, WB = (size_t)c->K * c->C * 4;
        float *w = randn(&r, (size_t)c->K * c->C, 0.5f), *bias = randn(&r, (size_t)c->C, 0.3f);
        float *S0 = randn(&r, SN, c->warm ? 1.0f : 0.0f), *SR = fdup(S0, SN), *SW = malloc(SB + 4);
        const float *b = c->bias ? bias : NULL;
        float *st[WAYS] = {0}, *wk[WAYS] = {0}, *bk[WAYS] = {0};
        double worst[WAYS] = {0};
        int same[WAYS] = {1, 1, 1};
        for (int way = 0; way < ways(); way++) {
            st[way] = put(way, S0, SB), wk[way] = put(way, w, WB);
            bk[way] = b ? put(way, b, (size_t)c->C * 4) : NULL;
        }
        for (int k = 0; k < 4 && c->calls[k]; k++) {
            const int n = c->calls[k];
            const size_t NO = (size_t)n * c->C;
            float *in = randn(&r, (size_t)n * c->ldi, 1.0f), *OR = malloc(NO * 4);
            hy_conv1d_silu(n, c->C, c->K, in, c->ldi, SR, w, b, OR, (size_t)c->C);
            const double scale = fmax(max_abs(OR, NO), 1e-30);
            for (int way = 0; way < ways(); way++) {
                const int dev = way_dev(way);
                float *din = put(way, in, (size_t)n * c->ldi * 4), *dout = put(way, NULL, NO * 4);
                hy_err err = {0};
                CU_ASSERT_FATAL(ok(OP(dev, conv1d_silu)(NULL, n, c->C, c->K, din, c->ldi, st[way],
                                                        wk[way], bk[way], dout, (size_t)c->C, &err),
                                   &err) &&
                                get(way, SW, st[way], SB));
                float *OW = fetch(way, dout, NO);
                CU_ASSERT_FATAL(OW != NULL);
                worst[way] = worse(worst[way], hy_max_abs_diff(OW, OR, NO) / scale);
                same[way] &= memcmp(SW, SR, SB) == 0;
                drop(way, din), free(OW);
            }
            free(in), free(OR);
        }
        printf("\n    conv C %d K %d:", c->C, c->K);
        for (int way = 0; way < ways(); way++) {
            printf(" %s %.2e", k_way[way], worst[way]);
            CU_ASSERT(worst[way] <= (way == DEVICE ? TOL_SUM : TOL_SAME));
            CU_ASSERT(same[way]);
            drop(way, st[way]), drop(way, wk[way]), drop(way, bk[way]);
        }
        free(w), free(bias), free(S0), free(SR), free(SW);
    }
}

/* --- a few rows against bf16 weights ------------------------------------------------- */

typedef struct w16_case {
    int n, K, N;
    size_t ldx;
} w16_case;
static const w16_case k_w16[] = {
    {1, 1024, 96, 1024}, /* a decode step's row, hidden 1024 */
    {4, 2048, 33, 2100}, /* four rows, strided */
    {3, 100, 7, 100},    /* K short of a block's threads */
    {2, 6144, 64, 6144}, /* the conv's width */
};

static void test_linear_w16(void)
{
    for (size_t i = 0; i < sizeof k_w16 / sizeof *k_w16; i++) {
        const w16_case *c = &k_w16[i];
        hy_rng r;
        hy_rng_seed(&r, 900 + i);
        const size_t NX = (size_t)c->n * c->ldx, NW = (size_t)c->N * c->K, NY = (size_t)c->n * c->N;
        float *X = randn(&r, NX, 1.0f), *Wf = randn(&r, NW, 0.05f), *ref = malloc(NY * 4);
        uint16_t *W = malloc(NW * sizeof *W);
        for (size_t j = 0; j < NW; j++) W[j] = hy_cu_f32_to_bf16(Wf[j]);
        hy_linear_bf16(c->n, c->K, c->N, X, c->ldx, W, ref, (size_t)c->N, false);
        double *mag = calloc(NY, sizeof *mag); /* Σ|x·w| per output */
        for (int t = 0; t < c->n; t++)
            for (int o = 0; o < c->N; o++)
                for (int k = 0; k < c->K; k++)
                    mag[(size_t)t * c->N + o] += fabs((double)X[(size_t)t * c->ldx + k] *
                                                      hy_cu_bf16_to_f32(W[(size_t)o * c->K + k]));
        float *first = NULL;
        printf("\n    linear_w16 %d rows, %d into %d:", c->n, c->K, c->N);
        for (int way = 0; way < ways(); way++) {
            const int dev = way_dev(way);
            float *dx = put(way, X, NX * 4), *dy = put(way, NULL, NY * 4);
            uint16_t *dw = put(way, W, NW * sizeof *W);
            hy_err err = {0};
            CU_ASSERT_FATAL(ok(
                OP(dev, linear_w16)(NULL, c->n, c->K, c->N, dx, c->ldx, dw, dy, (size_t)c->N, &err),
                &err));
            float *Y = fetch(way, dy, NY);
            CU_ASSERT_FATAL(Y != NULL);
            double worst = 0;
            for (size_t j = 0; j < NY; j++)
                worst = worse(worst, fabs((double)Y[j] - ref[j]) / fmax(mag[j], 1e-30));
            printf(" %s %.2e", k_way[way], worst);
            CU_ASSERT(worst <= TOL_DOT);
            if (way == HOST)
                first = Y;
            else {
                if (way == REVERSED) CU_ASSERT(memcmp(Y, first, NY * 4) == 0);
                free(Y);
            }
            drop(way, dx), drop(way, dw);
        }
        free(first), free(X), free(Wf), free(ref), free(W), free(mag);
    }
}

/* --- elementwise and the embedding ------------------------------------------------------ */

static void test_elementwise(void)
{
    hy_rng r;
    hy_rng_seed(&r, 300);
    const int n = 3;

    /* SwiGLU from gate | up rows (ffn.c) */
    const int I = 512;
    const size_t ldg = 2 * (size_t)I + 3, NH = (size_t)n * I;
    float *gu = randn(&r, (size_t)n * ldg, 3.0f), *hR = malloc(NH * 4);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < I; j++)
            hR[(size_t)t * I + j] = hy_siluf(gu[(size_t)t * ldg + j]) * gu[(size_t)t * ldg + I + j];

    /* relu² in place (ffn.c), a bias, the residual, the scaled residual (forward.c) */
    const int d = 300;
    const size_t ldx = 301, NX = (size_t)n * ldx, NC = 3000;
    float *x0 = randn(&r, NX, 1.0f), *xR = fdup(x0, NX);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) {
            float *p = xR + (size_t)t * ldx + j;
            const float v = *p > 0.0f ? *p : 0.0f;
            *p = v * v;
        }
    float *b = randn(&r, (size_t)d, 1.0f), *yb0 = randn(&r, NX, 1.0f), *ybR = fdup(yb0, NX);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) ybR[(size_t)t * ldx + j] += b[j];
    float *ra = randn(&r, NC, 1.0f), *rb = randn(&r, NC, 1.0f);
    float *addR = fdup(ra, NC), *axR = malloc(NC * 4);
    const float alpha = 0.7f, beta = 1.3f;
    for (size_t i = 0; i < NC; i++) addR[i] += rb[i], axR[i] = alpha * ra[i] + beta * rb[i];

    /* attention's output gate: 16 heads of 256, each gate beside its query in
     * q_proj's rows (attention_layers.c) */
    const int Hq = 16, hd = 256, qs = 2 * hd, Qd = Hq * hd, P = Hq * qs + 1024;
    const size_t NO = (size_t)n * Qd;
    float *proj = randn(&r, (size_t)n * P, 2.0f), *ob0 = randn(&r, NO, 1.0f), *obR = fdup(ob0, NO);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hq; h++) {
            float *oh = obR + (size_t)t * Qd + (size_t)h * hd;
            const float *gate = proj + (size_t)t * P + (size_t)h * qs + hd;
            for (int j = 0; j < hd; j++) oh[j] *= hy_sigmoidf(gate[j]);
        }

    /* the embedding rows of the step's tokens (forward.c) */
    const int vocab = 50, H = 1024, nt = 6;
    const size_t NE = (size_t)nt * H;
    float *table = randn(&r, (size_t)vocab * H, 1.0f), *eR = malloc(NE * 4);
    int32_t ids[6];
    for (int t = 0; t < nt; t++) ids[t] = (int32_t)(hy_rng_next(&r) % (uint64_t)vocab);
    ids[nt - 1] = vocab - 1; /* the last row of the table */
    for (int t = 0; t < nt; t++)
        memcpy(eR + (size_t)t * H, table + (size_t)ids[t] * H, (size_t)H * sizeof(float));

    for (int way = 0; way < ways(); way++) {
        const int dev = way_dev(way);
        hy_err err = {0};
        float *dgu = put(way, gu, (size_t)n * ldg * 4), *dh = put(way, NULL, NH * 4);
        CU_ASSERT(ok(OP(dev, swiglu)(NULL, n, I, dgu, ldg, dh, (size_t)I, &err), &err));
        float *hW = fetch(way, dh, NH);
        CU_ASSERT_FATAL(hW != NULL);
        printf("\n    %s: swiglu %.2e", k_way[way], rel_elem(hW, hR, NH));
        CU_ASSERT(rel_elem(hW, hR, NH) <= TOL_ELEM);

        float *dx = put(way, x0, NX * 4), *dyb = put(way, yb0, NX * 4),
              *db = put(way, b, (size_t)d * 4);
        CU_ASSERT(ok(OP(dev, relu2)(NULL, n, d, dx, ldx, &err), &err));
        CU_ASSERT(ok(OP(dev, add_bias)(NULL, n, d, db, dyb, ldx, &err), &err));
        float *xW = fetch(way, dx, NX), *ybW = fetch(way, dyb, NX);
        CU_ASSERT_FATAL(xW && ybW);
        CU_ASSERT(memcmp(xW, xR, NX * 4) == 0);
        CU_ASSERT(memcmp(ybW, ybR, NX * 4) == 0);

        float *da = put(way, ra, NC * 4), *drb = put(way, rb, NC * 4),
              *dax = put(way, NULL, NC * 4);
        CU_ASSERT(ok(OP(dev, axpby)(NULL, NC, alpha, da, beta, drb, dax, &err), &err));
        CU_ASSERT(ok(OP(dev, add)(NULL, NC, da, drb, &err), &err));
        float *axW = fetch(way, dax, NC), *addW = fetch(way, da, NC);
        CU_ASSERT_FATAL(axW && addW);
        CU_ASSERT(memcmp(addW, addR, NC * 4) == 0);
        CU_ASSERT(hy_max_abs_diff(axW, axR, NC) / max_abs(axR, NC) <= TOL_SUM);

        float *dproj = put(way, proj, (size_t)n * P * 4), *dob = put(way, ob0, NO * 4);
        CU_ASSERT(ok(OP(dev, mul_sigmoid)(NULL, n, Hq, hd, dob, (size_t)Qd, (size_t)hd, dproj + hd,
                                          (size_t)P, (size_t)qs, &err),
                     &err));
        float *obW = fetch(way, dob, NO);
        CU_ASSERT_FATAL(obW != NULL);
        printf(", output gate %.2e", rel_elem(obW, obR, NO));
        CU_ASSERT(rel_elem(obW, obR, NO) <= TOL_ELEM);

        float *dtable = put(way, table, (size_t)vocab * H * 4), *de = put(way, NULL, NE * 4);
        int32_t *dids = put(way, ids, sizeof ids);
        CU_ASSERT(ok(OP(dev, embed)(NULL, nt, H, dids, dtable, de, (size_t)H, &err), &err));
        float *eW = fetch(way, de, NE);
        CU_ASSERT_FATAL(eW != NULL);
        CU_ASSERT(memcmp(eW, eR, NE * 4) == 0);

        drop(way, dgu), drop(way, db), drop(way, drb), drop(way, dproj), drop(way, dtable);
        drop(way, dids);
        free(hW), free(xW), free(ybW), free(axW), free(addW), free(obW), free(eW);
    }
    free(gu), free(hR), free(x0), free(xR), free(b), free(yb0), free(ybR), free(ra), free(rb);
    free(addR), free(axR), free(proj), free(ob0), free(obR), free(table), free(eR);
}

/* --- RoPE ----------------------------------------------------------------------------------- */

typedef struct rope_table_case {
    int rd;
    double theta;
    int64_t pos0, npos;
} rope_table_case;

/* Qwen3-Next's partial RoPE (64 of 256 dims, theta 1e7), from 0 and far out;
 * a full 128-dim head with theta 1e6. */
static const rope_table_case k_tables[] = {
    {64, 1e7, 0, 300},
    {64, 1e7, 131000, 40},
    {128, 1e6, 0, 20},
};

/* The host's table is glibc's sinf and cosf of the CPU's fp32 angles: the
 * CPU's bits. */
static void test_rope_table(void)
{
    for (size_t c = 0; c < sizeof k_tables / sizeof *k_tables; c++) {
        const rope_table_case *tc = &k_tables[c];
        const int rd = tc->rd;
        const size_t N = (size_t)tc->npos * rd;
        float *inv = malloc((size_t)rd / 2 * 4), *R = malloc(N * 4);
        hy_rope_inv_freq(rd, tc->theta, inv);
        for (int64_t p = 0; p < tc->npos; p++) hy_rope_cos_sin(rd, inv, tc->pos0 + p, R + p * rd);
        printf("\n    table rd %d from %lld:", rd, (long long)tc->pos0);
        for (int way = 0; way < ways(); way++) {
            const int dev = way_dev(way);
            hy_err err = {0};
            float *dinv = put(way, inv, (size_t)rd / 2 * 4), *cs = put(way, NULL, N * 4);
            CU_ASSERT(ok(OP(dev, rope_table)(NULL, rd, dinv, tc->pos0, tc->npos, cs, &err), &err));
            float *W = fetch(way, cs, N);
            CU_ASSERT_FATAL(W != NULL);
            printf(" %s %.2e", k_way[way], hy_max_abs_diff(W, R, N));
            CU_ASSERT(dev ? hy_max_abs_diff(W, R, N) <= TOL_TRIG : memcmp(W, R, N * 4) == 0);
            drop(way, dinv), free(W);
        }
        free(inv), free(R);
    }
}

/* Whether column col of a row lies in the rotated dims of one of `heads`
 * heads of stride hs. */
static int rotated(size_t col, int heads, size_t hs, int rd)
{
    return col / hs < (size_t)heads && col % hs < (size_t)rd;
}

/* max |got − ref| / max |ref| over the rotated dims; untouched dims must be
 * the same bits (*same cleared otherwise). */
static double rope_err(const float *got, const float *ref, int n, size_t ld, int heads, size_t hs,
                       int rd, int *same)
{
    double m = 0, s = 1e-30;
    for (int t = 0; t < n; t++)
        for (size_t c = 0; c < ld; c++) {
            const size_t i = (size_t)t * ld + c;
            if (!rotated(c, heads, hs, rd)) {
                *same &= memcmp(&got[i], &ref[i], sizeof(float)) == 0;
                continue;
            }
            s = fmax(s, fabs((double)ref[i]));
            const double e = fabs((double)got[i] - (double)ref[i]);
            if (isnan(e)) return NAN;
            if (e > m) m = e;
        }
    return m / s;
}

/* Queries in q|gate rows of q_proj (16 heads of 256, stride 512) and keys
 * in cache rows (2 heads of 256), the first 64 dims of each rotated, rows at
 * positions out of order. */
static void test_rope_rotate(void)
{
    const int n = 5, rd = 64, hd = 256, Hq = 16, Hkv = 2, qs = 2 * hd, KV = Hkv * hd;
    const size_t P = (size_t)Hq * qs + 2 * (size_t)KV, NQ = (size_t)n * P, NK = (size_t)n * KV;
    const int64_t pos[5] = {3, 0, 299, 17, 150}, npos = 300;
    hy_rng r;
    hy_rng_seed(&r, 400);
    float *inv = malloc((size_t)rd / 2 * 4), *cs = malloc((size_t)npos * rd * 4);
    hy_rope_inv_freq(rd, 1e7, inv);
    for (int64_t p = 0; p < npos; p++) hy_rope_cos_sin(rd, inv, p, cs + p * rd);
    float *q0 = randn(&r, NQ, 1.0f), *k0 = randn(&r, NK, 1.0f);
    float *qR = fdup(q0, NQ), *kR = fdup(k0, NK);
    for (int t = 0; t < n; t++) {
        const float *c = cs + pos[t] * rd;
        for (int h = 0; h < Hq; h++) {
            float *qh = qR + (size_t)t * P + (size_t)h * qs;
            hy_rope_rotate(qh, qh, rd, c);
        }
        for (int g = 0; g < Hkv; g++) {
            float *kh = kR + (size_t)t * KV + (size_t)g * hd;
            hy_rope_rotate(kh, kh, rd, c);
        }
    }
    printf("\n    rotate:");
    for (int way = 0; way < ways(); way++) {
        const int dev = way_dev(way);
        hy_err err = {0};
        float *q = put(way, q0, NQ * 4), *k = put(way, k0, NK * 4);
        float *dcs = put(way, cs, (size_t)npos * rd * 4);
        int64_t *dpos = put(way, pos, sizeof pos);
        CU_ASSERT(ok(OP(dev, rope_rotate)(NULL, n, rd, dpos, dcs, q, P, (size_t)qs, Hq, k,
                                          (size_t)KV, (size_t)hd, Hkv, &err),
                     &err));
        float *qW = fetch(way, q, NQ), *kW = fetch(way, k, NK);
        CU_ASSERT_FATAL(qW && kW);
        int same = 1;
        const double e = worse(rope_err(qW, qR, n, P, Hq, (size_t)qs, rd, &same),
                               rope_err(kW, kR, n, (size_t)KV, Hkv, (size_t)hd, rd, &same));
        printf(" %s %.2e", k_way[way], e);
        CU_ASSERT(e <= (dev ? TOL_SUM : TOL_SAME));
        CU_ASSERT(same);
        drop(way, dcs), drop(way, dpos), free(qW), free(kW);
    }
    free(inv), free(cs), free(q0), free(k0), free(qR), free(kR);
}

/* --- routed experts -----------------------------------------------------------------------------
 */

/* ffn.c's top_k without the skip mask: k times the best of the experts not
 * yet taken, ties to the lower index. */
static void ref_top_k(const float *p, int E, int k, int *ti)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= ti[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        ti[j] = best;
    }
}

/* ffn.c's route_token for the softmax router; p [E] overwritten. */
static void ref_route(int E, int k, int norm_topk, float *p, float *tw, int *ti)
{
    float mx = p[0], sum = 0.0f;
    for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
    for (int e = 0; e < E; e++) sum += (p[e] = hy_expf(p[e] - mx));
    for (int e = 0; e < E; e++) p[e] /= sum;
    ref_top_k(p, E, k, ti);
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) wsum += (tw[j] = p[ti[j]]);
    if (norm_topk)
        for (int j = 0; j < k; j++) tw[j] /= wsum;
}

typedef struct moe_case {
    int n, E, k, D, norm_topk, gated;
    int ties; /* rows 0 and 1 of equal logits: all, or in pairs */
} moe_case;

static const moe_case k_moes[] = {
    {37, 256, 8, 1024, 1, 1, 0}, /* 256 experts, top-8 */
    {1, 512, 10, 2048, 1, 1, 0}, /* Qwen3-Next: 512, top-10, hidden 2048; a decode step */
    {6, 64, 4, 96, 0, 0, 1},
    {3, 8, 8, 40, 1, 1, 1}, /* every expert chosen */
};

/* One MoE layer's worth of inputs and the CPU's answers. */
typedef struct moe_data {
    const moe_case *c;
    int N;           /* n·k slots */
    size_t ldl, lds; /* logits' and the experts' input rows' strides */
    float *logits;   /* [n][ldl] */
    float *src;      /* [n][lds]: what the experts read (xn) */
    float *a, *bias; /* the stand-in experts: ye = a[e]·xe + bias[e] */
    float *wg, *yes; /* shared gate [D] (NULL: ungated), shared expert output [n][D] */
    /* the CPU's */
    int32_t *ti;             /* [N] */
    float *tw;               /* [N] */
    int32_t *offsets, *rows; /* [E+1], [N]: ffn.c's per-expert loop order */
    float *xe, *ye;          /* [N][D] gathered rows and the experts' outputs */
    float *acc, *y;          /* [n][D]: the weighted sum; plus the shared expert */
} moe_data;

/* The k+1 largest probabilities of a row, pairwise more than 1e-4 apart
 * relative to the larger (so no order of summation can swap them). */
static int well_separated(const float *logits, int E, int k)
{
    float *p = fdup(logits, (size_t)E), *tw = malloc((size_t)(k + 1) * 4);
    int *ti = malloc((size_t)(k + 1) * sizeof(int)), ok = 1;
    const int m = k < E ? k + 1 : k;
    ref_route(E, m, 0, p, tw, ti);
    for (int j = 0; j + 1 < m; j++) ok &= tw[j] - tw[j + 1] > 1e-4f * tw[j];
    free(p), free(tw), free(ti);
    return ok;
}

static moe_data moe_make(const moe_case *c, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    moe_data M;
    memset(&M, 0, sizeof M);
    const int n = c->n, E = c->E, k = c->k, D = c->D;
    M.c = c, M.N = n * k, M.ldl = (size_t)E + 3, M.lds = (size_t)D + 5;
    M.logits = calloc((size_t)n * M.ldl, 4);
    for (int t = 0; t < n; t++) {
        float *l = M.logits + (size_t)t * M.ldl;
        if (c->ties && t < 2) {
            for (int e = 0; e < E; e++) l[e] = t == 0 ? 0.25f : 0.5f * (float)(e / 2);
            continue;
        }
        do
            for (int e = 0; e < E; e++) l[e] = 1.5f * (float)hy_rng_normal(&r);
        while (!well_separated(l, E, k));
    }
    M.src = randn(&r, (size_t)n * M.lds, 1.0f);
    M.a = randn(&r, (size_t)E, 1.0f), M.bias = randn(&r, (size_t)E * D, 0.5f);
    M.wg = c->gated ? randn(&r, (size_t)D, 1.0f / sqrtf((float)D)) : NULL;
    M.yes = randn(&r, (size_t)n * D, 1.0f);

    /* routing, then ffn.c's loop over experts: rows gathered in order, the
     * expert's output rows scattered back weighted */
    M.ti = malloc((size_t)M.N * 4), M.tw = malloc((size_t)M.N * 4);
    float *p = malloc((size_t)E * 4);
    int *ti = malloc((size_t)k * sizeof(int));
    for (int t = 0; t < n; t++) {
        memcpy(p, M.logits + (size_t)t * M.ldl, (size_t)E * 4);
        ref_route(E, k, c->norm_topk, p, M.tw + (size_t)t * k, ti);
        for (int j = 0; j < k; j++) M.ti[(size_t)t * k + j] = ti[j];
    }
    free(p), free(ti);
    M.offsets = malloc((size_t)(E + 1) * 4), M.rows = malloc((size_t)M.N * 4);
    M.xe = malloc((size_t)M.N * D * 4), M.ye = malloc((size_t)M.N * D * 4);
    M.acc = calloc((size_t)n * D, 4);
    int m = 0;
    for (int e = 0; e < E; e++) {
        M.offsets[e] = m;
        const int m0 = m;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (M.ti[(size_t)t * k + j] == e) {
                    memcpy(M.xe + (size_t)m * D, M.src + (size_t)t * M.lds, (size_t)D * 4);
                    M.rows[m++] = t * k + j;
                }
        for (int q = m0; q < m; q++)
            for (int d = 0; d < D; d++)
                M.ye[(size_t)q * D + d] =
                    M.a[e] * M.xe[(size_t)q * D + d] + M.bias[(size_t)e * D + d];
        for (int q = m0; q < m; q++) {
            const int t = M.rows[q] / k;
            const float w = M.tw[M.rows[q]];
            float *yr = M.acc + (size_t)t * D;
            const float *er = M.ye + (size_t)q * D;
            for (int d = 0; d < D; d++) yr[d] += w * er[d];
        }
    }
    M.offsets[E] = m;
    /* the shared expert, gated or not (ffn.c) */
    M.y = fdup(M.acc, (size_t)n * D);
    for (int t = 0; t < n; t++) {
        const float *xr = M.src + (size_t)t * M.lds;
        float s = 1.0f;
        if (M.wg) {
            s = 0.0f;
            for (int d = 0; d < D; d++) s += xr[d] * M.wg[d];
            s = hy_sigmoidf(s);
        }
        float *yr = M.y + (size_t)t * D;
        const float *sr = M.yes + (size_t)t * D;
        for (int d = 0; d < D; d++) yr[d] += s * sr[d];
    }
    return M;
}

static void moe_drop(moe_data *M)
{
    free(M->logits), free(M->src), free(M->a), free(M->bias), free(M->wg), free(M->yes);
    free(M->ti), free(M->tw), free(M->offsets), free(M->rows), free(M->xe), free(M->ye);
    free(M->acc), free(M->y);
}

/* What a backend produced for one layer. */
typedef struct moe_out {
    int32_t *topi, *offsets, *rows, *slot_row;
    float *topw, *xe, *acc, *y;
} moe_out;

static moe_out moe_out_new(const moe_data *M)
{
    const size_t N = (size_t)M->N, D = (size_t)M->c->D, n = (size_t)M->c->n;
    moe_out o;
    o.topi = malloc(N * 4), o.topw = malloc(N * 4), o.offsets = malloc((size_t)(M->c->E + 1) * 4);
    o.rows = malloc(N * 4), o.slot_row = malloc(N * 4);
    for (size_t i = 0; i < N; i++) o.rows[i] = o.slot_row[i] = -1;
    o.xe = malloc(N * D * 4), o.acc = malloc(n * D * 4), o.y = malloc(n * D * 4);
    return o;
}

static void moe_out_free(moe_out *o)
{
    free(o->topi), free(o->topw), free(o->offsets), free(o->rows), free(o->slot_row);
    free(o->xe), free(o->acc), free(o->y);
}

/* The launchers (dev) or the twins over the layer, each step from the
 * CPU's inputs (its expert outputs, its weighted sum), so a step's error is
 * its own; the plan from the way's own routing, which must be the CPU's. */
static int moe_run(const moe_data *M, int way, moe_out *o)
{
    const moe_case *c = M->c;
    const int dev = way_dev(way), n = c->n, E = c->E, k = c->k, D = c->D;
    const size_t N = (size_t)M->N, ND = (size_t)n * D;
    hy_err err = {0};
    float *logits = put(way, M->logits, (size_t)n * M->ldl * 4),
          *src = put(way, M->src, (size_t)n * M->lds * 4);
    float *tw = put(way, M->tw, N * 4), *ye = put(way, M->ye, N * D * 4),
          *acc = put(way, NULL, ND * 4);
    float *y = put(way, M->acc, ND * 4), *yes = put(way, M->yes, ND * 4);
    float *wg = M->wg ? put(way, M->wg, (size_t)D * 4) : NULL, *topw = put(way, NULL, N * 4);
    float *xe = put(way, NULL, N * D * 4);
    int32_t *topi = put(way, NULL, N * 4), *offsets = put(way, NULL, (size_t)(E + 1) * 4);
    int32_t *rows = put(way, NULL, N * 4), *slot_row = put(way, NULL, N * 4);
    int good =
        ok(OP(dev, moe_route)(NULL, n, E, k, c->norm_topk, logits, M->ldl, topi, topw, &err),
           &err) &&
        ok(OP(dev, moe_plan)(NULL, n, k, E, topi, offsets, rows, slot_row, &err), &err) &&
        ok(OP(dev, moe_gather)(NULL, n, k, D, rows, src, M->lds, xe, (size_t)D, &err), &err) &&
        ok(OP(dev, moe_combine)(NULL, n, k, D, slot_row, tw, ye, (size_t)D, acc, (size_t)D, &err),
           &err) &&
        ok(OP(dev, moe_shared_gate)(NULL, n, D, src, M->lds, wg, yes, (size_t)D, y, (size_t)D,
                                    &err),
           &err);
    good = good && get(way, o->topi, topi, N * 4) && get(way, o->topw, topw, N * 4) &&
           get(way, o->offsets, offsets, (size_t)(E + 1) * 4) && get(way, o->rows, rows, N * 4) &&
           get(way, o->slot_row, slot_row, N * 4) && get(way, o->xe, xe, N * D * 4) &&
           get(way, o->acc, acc, ND * 4) && get(way, o->y, y, ND * 4);
    drop(way, logits), drop(way, src), drop(way, tw), drop(way, ye), drop(way, acc), drop(way, y);
    drop(way, yes), drop(way, wg), drop(way, topw), drop(way, xe), drop(way, topi);
    drop(way, offsets), drop(way, rows), drop(way, slot_row);
    return good;
}

/* A backend's layer against the CPU's: exact where the CPU's answer is an
 * integer or a copy, within the tolerances elsewhere. */
static void moe_check(const moe_data *M, const moe_out *o, const char *who, double tol_sum)
{
    const moe_case *c = M->c;
    const size_t N = (size_t)M->N, D = (size_t)c->D, ND = (size_t)c->n * D;
    CU_ASSERT(memcmp(o->topi, M->ti, N * 4) == 0);
    const double ew = rel_elem(o->topw, M->tw, N);
    CU_ASSERT(ew <= TOL_ROUTE);
    CU_ASSERT(memcmp(o->offsets, M->offsets, (size_t)(c->E + 1) * 4) == 0);
    CU_ASSERT(memcmp(o->rows, M->rows, N * 4) == 0);
    int inverse = 1;
    for (size_t q = 0; q < N; q++) inverse &= o->slot_row[M->rows[q]] == (int32_t)q;
    CU_ASSERT(inverse);
    CU_ASSERT(memcmp(o->xe, M->xe, N * D * 4) == 0);
    const double ea = hy_max_abs_diff(o->acc, M->acc, ND) / fmax(max_abs(M->ye, N * D), 1e-30);
    CU_ASSERT(ea <= tol_sum);
    const double gs = fmax(fmax(max_abs(M->y, ND), max_abs(M->yes, ND)), 1e-30);
    const double eg = hy_max_abs_diff(o->y, M->y, ND) / gs;
    CU_ASSERT(eg <= TOL_GATE);
    printf(", %s: weights %.2e, sum %.2e, shared %.2e", who, ew, ea, eg);
}

static void test_moe(void)
{
    for (size_t i = 0; i < sizeof k_moes / sizeof *k_moes; i++) {
        const moe_case *c = &k_moes[i];
        moe_data M = moe_make(c, 500 + i);
        moe_out o[WAYS];
        printf("\n    n %d, %d experts, top %d, width %d", c->n, c->E, c->k, c->D);
        for (int way = 0; way < ways(); way++) {
            o[way] = moe_out_new(&M);
            CU_ASSERT_FATAL(moe_run(&M, way, &o[way]));
            moe_check(&M, &o[way], k_way[way], way == DEVICE ? TOL_SUM : TOL_SAME);
        }
        const size_t N = (size_t)M.N, ND = (size_t)c->n * c->D;
        const moe_out *h = &o[HOST], *v = &o[REVERSED];
        CU_ASSERT(memcmp(h->topw, v->topw, N * 4) == 0 && memcmp(h->topi, v->topi, N * 4) == 0 &&
                  memcmp(h->slot_row, v->slot_row, N * 4) == 0 &&
                  memcmp(h->acc, v->acc, ND * 4) == 0 && memcmp(h->y, v->y, ND * 4) == 0);
        for (int way = 0; way < ways(); way++) moe_out_free(&o[way]);
        moe_drop(&M);
    }
}

/* --- the refusals, and main ------------------------------------------------------------------ */

/* Shapes the launcher (dev) or the twin refuses before touching memory, and
 * empty work each accepts without running anything: no device needed. */
static void refusals(int dev)
{
    hy_err err = {0};
    CU_ASSERT_EQUAL(OP(dev, rmsnorm)(NULL, -1, 64, NULL, 64, NULL, 1e-6f, NULL, 64, &err),
                    HY_EINVAL);
    CU_ASSERT_EQUAL(
        OP(dev, rmsnorm_heads)(NULL, 2, 0, 64, NULL, 64, 64, NULL, 1e-6f, NULL, 64, 64, &err),
        HY_EINVAL);
    CU_ASSERT_EQUAL(OP(dev, conv1d_silu)(NULL, 4, 0, 4, NULL, 0, NULL, NULL, NULL, NULL, 0, &err),
                    HY_EINVAL);
    CU_ASSERT_EQUAL(OP(dev, rope_table)(NULL, 63, NULL, 0, 10, NULL, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(OP(dev, linear_w16)(NULL, 5, 64, 8, NULL, 64, NULL, NULL, 8, &err),
                    HY_EINVAL); /* more rows than the direct path takes */
    CU_ASSERT_EQUAL(
        OP(dev, rope_rotate)(NULL, 2, 64, NULL, NULL, NULL, 0, 0, 1, NULL, 0, 0, 1, &err),
        HY_EINVAL); /* key heads without keys */
    CU_ASSERT_EQUAL(OP(dev, moe_route)(NULL, 1, 8, 9, 1, NULL, 8, NULL, NULL, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(OP(dev, moe_route)(NULL, 1, 20000, 8, 1, NULL, 20000, NULL, NULL, &err),
                    HY_EINVAL); /* its probabilities would not fit in shared memory */
    CU_ASSERT_EQUAL(OP(dev, moe_plan)(NULL, 1 << 22, 4, 64, NULL, NULL, NULL, NULL, &err),
                    HY_EINVAL);
    CU_ASSERT_EQUAL(
        OP(dev, moe_combine)(NULL, 1 << 22, 4, 64, NULL, NULL, NULL, 64, NULL, 64, &err),
        HY_EINVAL);
    printf("\n    %s: last refusal: %s", dev ? "launchers" : "twins", err.msg);
    CU_ASSERT_EQUAL(OP(dev, rmsnorm)(NULL, 0, 64, NULL, 64, NULL, 1e-6f, NULL, 64, &err), HY_OK);
    CU_ASSERT_EQUAL(OP(dev, swiglu)(NULL, 0, 512, NULL, 1024, NULL, 512, &err), HY_OK);
    CU_ASSERT_EQUAL(OP(dev, add)(NULL, 0, NULL, NULL, &err), HY_OK);
    CU_ASSERT_EQUAL(OP(dev, moe_route)(NULL, 0, 64, 4, 1, NULL, 64, NULL, NULL, &err), HY_OK);
}

static void test_twins_refuse_bad_shapes(void)
{
    refusals(0);
}

#ifdef HY_HAVE_CUDA_KERNELS
static void test_launchers_refuse_bad_shapes(void)
{
    refusals(1);
}
#endif

/* hy_cu_expf (hy_cu_body.h) is hy_expf written again for the device, which
 * cannot call the CPU header's: the two must agree to the bit, the clamps
 * included, so that every decay, gate and softmax weight is the same number
 * on both sides. */
static void test_expf(void)
{
    int differ = 0;
    for (int i = -2000000; i <= 2000000; i++) {
        const float x = (float)i * 5e-5f; /* [-100, 100] */
        const float a = hy_cu_expf(x), b = hy_expf(x);
        differ += memcmp(&a, &b, sizeof a) != 0;
    }
    const float edge[] = {-INFINITY, -87.3f, 88.7f, INFINITY, 0.0f, -0.0f, 1e-30f};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
        const float a = hy_cu_expf(edge[i]), b = hy_expf(edge[i]);
        differ += memcmp(&a, &b, sizeof a) != 0;
    }
    CU_ASSERT_EQUAL(differ, 0);
}

int main(void)
{
#ifdef HY_HAVE_CUDA_KERNELS
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    g_device = e == cudaSuccess && count > 0;
    if (!g_device)
        printf("test_cuda_ops: device tests skipped: no CUDA device (%s)\n",
               e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
#endif
    static const hy_test_case cases[] = {
        {"the bodies' exp is the CPU kernels'", test_expf},
        {"norms_match_cpu", test_norms},
        {"conv_matches_cpu_and_carries_state", test_conv},
        {"linear_w16_matches_the_cpus_direct_path", test_linear_w16},
        {"elementwise_match_executor", test_elementwise},
        {"rope_table_matches_cpu", test_rope_table},
        {"rope_rotates_first_rd_dims_only", test_rope_rotate},
        {"moe_routing_rows_and_sums_match_executor", test_moe},
        {"twins_refuse_bad_shapes", test_twins_refuse_bad_shapes},
#ifdef HY_HAVE_CUDA_KERNELS
        {"launchers_refuse_bad_shapes", test_launchers_refuse_bad_shapes},
#endif
        {NULL, NULL},
    };
    return hy_test_main("cuda_ops", cases);
}
