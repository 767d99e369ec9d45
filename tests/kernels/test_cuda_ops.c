/*
 * The device's small operations (kernels/cuda/ops.cu) against the CPU code
 * they stand in for: the norms (hy_rmsnorm, exec_internal.h's per-head and
 * gated row norms, hy_l2norm_scale), the short convolution (hy_conv1d_silu),
 * RoPE (hy_rope_cos_sin, hy_rope_rotate), and transcriptions of the
 * executor's static loops — ffn.c's SwiGLU and relu², its softmax routing
 * (route_token, top_k), the rows gathered per expert, the weighted scatter
 * back and the shared expert's gate; attention_layers.c's output gate;
 * forward.c's embedding copy, bias and residuals.
 *
 * Host part, every build: each body of ops_body.h run as its kernel runs it
 * over whole problems — a phased kernel block by block, each phase for
 * every thread before the next (the barrier's guarantee), shared memory
 * filled with NaN at a block's start — and once more with each phase's
 * threads in reverse order, which must give the same bits (no thread of a
 * phase reads what another writes in it). Shapes include the real ones:
 * hidden 1024 and 2048, head_dim 256 with a rotary 64 in q|gate rows, 32
 * value heads of 128, 6144 conv channels with kernel 4, 256 experts top-8
 * and 512 top-10.
 *
 * Device part, with nvcc (HY_HAVE_CUDA_KERNELS): the launchers refuse bad
 * shapes; with a device they run the same problems, copied back and held to
 * the same tolerances; without one a line says the device tests were skipped.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "exec_internal.h"
#include "ops_body.h"
#include "test_util.h"

#include <string.h>

#ifdef HY_HAVE_CUDA_KERNELS
#include "hy_cuda_ops.h"
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
 * Copies, counts and offsets (embedding, gather, plan, conv state, relu²,
 * bias, residual add: one IEEE operation or none) must agree bit for bit. */
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

static void *dup_bytes(const void *x, size_t bytes)
{
    void *y = malloc(bytes ? bytes : 1);
    memcpy(y, x, bytes);
    return y;
}

static float *fdup(const float *x, size_t n)
{
    return dup_bytes(x, n * sizeof(float));
}

/* max |a − b| / |b| per element (0 where both are 0). */
static double rel_elem(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - (double)b[i]);
        const double e = d == 0 ? 0 : d / fmax(fabs((double)b[i]), 1e-30);
        if (!(e <= m)) m = e; /* NaN fails */
    }
    return m;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* A phased kernel on the host: each block's shared memory filled with NaN,
 * then each phase for every thread (in reverse order with rev) before the
 * next phase starts. */
#define EMULATE(PHASE, NPHASES, ARGS, NBLOCKS, NTHR, SHFLOATS, REV)                                \
    do {                                                                                           \
        const size_t shn_ = (SHFLOATS) > 0 ? (size_t)(SHFLOATS) : 1;                               \
        float *sh_ = malloc(shn_ * sizeof(float));                                                 \
        for (int b_ = 0; b_ < (NBLOCKS); b_++) {                                                   \
            for (size_t i_ = 0; i_ < shn_; i_++) sh_[i_] = NAN;                                    \
            for (int ph_ = 0; ph_ < (NPHASES); ph_++)                                              \
                for (int u_ = 0; u_ < (NTHR); u_++)                                                \
                    PHASE(ARGS, ph_, b_, (REV) ? (NTHR)-1 - u_ : u_, (NTHR), sh_);                 \
        }                                                                                          \
        free(sh_);                                                                                 \
    } while (0)

#ifdef HY_HAVE_CUDA_KERNELS
static int g_device; /* main found a device */

static void *dput(const void *h, size_t bytes)
{
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return NULL;
    if (h && cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

/* After the queued work, d's bytes into h; 0 (and why) on a failure. */
static int dget(void *h, const void *d, size_t bytes)
{
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess) e = cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) printf("\n    device: %s", cudaGetErrorString(e));
    return e == cudaSuccess;
}

static int launched(int rc, const hy_err *err)
{
    if (rc != HY_OK) printf("\n    launch: %s", err->msg);
    return rc == HY_OK;
}
#endif

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

static void norm_host(const norm_data *D, float *X, float *O, int rev)
{
    const norm_case *c = D->c;
    hy_cu_norm_args a;
    memset(&a, 0, sizeof a);
    a.kind = c->kind, a.heads = c->heads, a.d = c->d;
    a.x = X, a.ldx = c->ldx, a.xhs = c->xhs;
    a.out = c->ldo ? O : X, a.ldo = c->ldo ? c->ldo : c->ldx, a.ohs = c->ldo ? c->ohs : c->xhs;
    a.w = D->w, a.z = D->z, a.ldz = c->ldz, a.zhs = (size_t)c->d;
    a.eps = D->eps, a.scale = D->scale;
    const int nthr = hy_cu_norm_threads(c->d);
    EMULATE(hy_cu_norm_phase, hy_cu_norm_phases(nthr), &a, c->n * c->heads, nthr,
            hy_cu_norm_shared(nthr), rev);
}

/* The worse of x's and out's errors against the reference. */
static double norm_err(const norm_data *D, const float *X, const float *O, const float *RX,
                       const float *RO)
{
    const norm_case *c = D->c;
    return fmax(rel_elem(X, RX, (size_t)c->n * c->ldx), rel_elem(O, RO, norm_outs(c)));
}

#ifdef HY_HAVE_CUDA_KERNELS
static int norm_device(const norm_data *D, float *X, float *O)
{
    const norm_case *c = D->c;
    const size_t nx = (size_t)c->n * c->ldx * 4, no = norm_outs(c) * 4;
    float *x = dput(X, nx), *o = dput(O, no), *z = dput(D->z, (size_t)c->n * c->ldz * 4);
    float *w = dput(D->w, (size_t)c->d * 4);
    hy_err err = {0};
    int rc = HY_EINVAL;
    if (c->kind == HY_CU_NORM_RMS && c->heads == 1)
        rc = hy_cu_rmsnorm(NULL, c->n, c->d, x, c->ldx, w, D->eps, c->ldo ? o : x,
                           c->ldo ? c->ldo : c->ldx, &err);
    else if (c->kind == HY_CU_NORM_RMS)
        rc = hy_cu_rmsnorm_heads(NULL, c->n, c->heads, c->d, x, c->ldx, c->xhs, w, D->eps,
                                 c->ldo ? o : x, c->ldo ? c->ldo : c->ldx, c->ldo ? c->ohs : c->xhs,
                                 &err);
    else if (c->kind == HY_CU_NORM_GATED)
        rc = hy_cu_gated_rmsnorm(NULL, c->n, c->heads, c->d, x, c->ldx, z, c->ldz, w, D->eps, &err);
    else
        rc = hy_cu_l2norm_heads(NULL, c->n, c->heads, c->d, x, c->ldx, D->eps, D->scale, &err);
    const int ok = launched(rc, &err) && dget(X, x, nx) && (!no || dget(O, o, no));
    cudaFree(x), cudaFree(o), cudaFree(z), cudaFree(w);
    return ok;
}
#endif

static void test_norms(void)
{
    for (size_t i = 0; i < sizeof k_norms / sizeof *k_norms; i++) {
        const norm_case *c = &k_norms[i];
        norm_data D = norm_make(c, 100 + i);
        const size_t nx = (size_t)c->n * c->ldx, no = norm_outs(c);
        float *RX = fdup(D.x, nx), *RO = calloc(no + 1, 4);
        float *X[2] = {fdup(D.x, nx), fdup(D.x, nx)},
              *O[2] = {calloc(no + 1, 4), calloc(no + 1, 4)};
        norm_cpu(&D, RX, RO);
        for (int rev = 0; rev < 2; rev++) norm_host(&D, X[rev], O[rev], rev);
        const double e = norm_err(&D, X[0], O[0], RX, RO);
        printf("\n    %-22s host %.2e", c->what, e);
        CU_ASSERT(e <= TOL_NORM);
        CU_ASSERT(memcmp(X[0], X[1], nx * 4) == 0 && memcmp(O[0], O[1], no * 4) == 0);
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) {
            float *DX = fdup(D.x, nx), *DO = calloc(no + 1, 4);
            CU_ASSERT_FATAL(norm_device(&D, DX, DO));
            const double ed = norm_err(&D, DX, DO, RX, RO);
            printf(", device %.2e", ed);
            CU_ASSERT(ed <= TOL_NORM);
            free(DX), free(DO);
        }
#endif
        free(RX), free(RO), free(X[0]), free(X[1]), free(O[0]), free(O[1]);
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

static void conv_host(int n, const conv_case *c, const float *in, float *state, const float *w,
                      const float *bias, float *out)
{
    hy_cu_conv_args a;
    a.n = n, a.C = c->C, a.K = c->K, a.in = in, a.ldi = c->ldi, a.state = state;
    a.w = w, a.bias = bias, a.out = out, a.ldo = (size_t)c->C;
    for (int t = 0; t < n; t++)
        for (int ch = 0; ch < c->C; ch++) hy_cu_conv_out(&a, t, ch);
    for (int ch = 0; ch < c->C; ch++) hy_cu_conv_state(&a, ch); /* the second kernel */
}

static void test_conv(void)
{
    for (size_t i = 0; i < sizeof k_convs / sizeof *k_convs; i++) {
        const conv_case *c = &k_convs[i];
        hy_rng r;
        hy_rng_seed(&r, 200 + i);
        const size_t SN = (size_t)(c->K - 1) * c->C;
        float *w = randn(&r, (size_t)c->K * c->C, 0.5f), *bias = randn(&r, (size_t)c->C, 0.3f);
        float *S0 = randn(&r, SN, c->warm ? 1.0f : 0.0f);
        float *SR = fdup(S0, SN), *SH = fdup(S0, SN);
        const float *b = c->bias ? bias : NULL;
        double worst = 0;
        int state_same = 1;
#ifdef HY_HAVE_CUDA_KERNELS
        float *dS = g_device ? dput(S0, SN * 4) : NULL,
              *dw = g_device ? dput(w, (size_t)c->K * c->C * 4) : NULL;
        float *db = g_device && b ? dput(b, (size_t)c->C * 4) : NULL;
        double worst_d = 0;
        int state_same_d = 1;
#endif
        for (int k = 0; k < 4 && c->calls[k]; k++) {
            const int n = c->calls[k];
            float *in = randn(&r, (size_t)n * c->ldi, 1.0f);
            float *OR = malloc((size_t)n * c->C * 4), *OH = malloc((size_t)n * c->C * 4);
            hy_conv1d_silu(n, c->C, c->K, in, c->ldi, SR, w, b, OR, (size_t)c->C);
            conv_host(n, c, in, SH, w, b, OH);
            const double scale = fmax(max_abs(OR, (size_t)n * c->C), 1e-30);
            worst = fmax(worst, hy_max_abs_diff(OH, OR, (size_t)n * c->C) / scale);
            state_same &= memcmp(SH, SR, SN * 4) == 0;
#ifdef HY_HAVE_CUDA_KERNELS
            if (g_device) {
                float *din = dput(in, (size_t)n * c->ldi * 4),
                      *dout = dput(NULL, (size_t)n * c->C * 4);
                float *OD = malloc((size_t)n * c->C * 4), *SD = malloc(SN * 4 + 4);
                hy_err err = {0};
                CU_ASSERT_FATAL(launched(hy_cu_conv1d_silu(NULL, n, c->C, c->K, din, c->ldi, dS, dw,
                                                           db, dout, (size_t)c->C, &err),
                                         &err) &&
                                dget(OD, dout, (size_t)n * c->C * 4) && dget(SD, dS, SN * 4));
                worst_d = fmax(worst_d, hy_max_abs_diff(OD, OR, (size_t)n * c->C) / scale);
                state_same_d &= memcmp(SD, SR, SN * 4) == 0;
                cudaFree(din), cudaFree(dout), free(OD), free(SD);
            }
#endif
            free(in), free(OR), free(OH);
        }
        printf("\n    conv C %d K %d: host %.2e", c->C, c->K, worst);
        CU_ASSERT(worst <= TOL_SAME);
        CU_ASSERT(state_same);
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) {
            printf(", device %.2e", worst_d);
            CU_ASSERT(worst_d <= TOL_SUM);
            CU_ASSERT(state_same_d);
            cudaFree(dS), cudaFree(dw), cudaFree(db);
        }
#endif
        free(w), free(bias), free(S0), free(SR), free(SH);
    }
}

/* --- elementwise and the embedding ------------------------------------------------------ */

#ifdef HY_HAVE_CUDA_KERNELS
/* The device's n floats at d, freed; NULL when they could not be had. */
static float *fetch(float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof(float));
    if (!dget(h, d, n * sizeof(float))) free(h), h = NULL;
    cudaFree(d);
    return h;
}
#endif

static void test_elementwise(void)
{
    hy_rng r;
    hy_rng_seed(&r, 300);
    const int n = 3;

    /* SwiGLU from gate | up rows (ffn.c) */
    const int I = 512;
    const size_t ldg = 2 * (size_t)I + 3, NH = (size_t)n * I;
    float *gu = randn(&r, (size_t)n * ldg, 3.0f), *hR = malloc(NH * 4), *hH = malloc(NH * 4);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < I; j++)
            hR[(size_t)t * I + j] = hy_siluf(gu[(size_t)t * ldg + j]) * gu[(size_t)t * ldg + I + j];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < I; j++) hy_cu_swiglu_elem(I, gu, ldg, hH, (size_t)I, t, j);
    printf("\n    swiglu host %.2e", rel_elem(hH, hR, NH));
    CU_ASSERT(rel_elem(hH, hR, NH) <= TOL_ELEM);

    /* relu² in place (ffn.c), a bias, the residual, the scaled residual (forward.c) */
    const int d = 300;
    const size_t ldx = 301, NX = (size_t)n * ldx, NC = 3000;
    float *x0 = randn(&r, NX, 1.0f), *xR = fdup(x0, NX), *xH = fdup(x0, NX);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) {
            float *p = xR + (size_t)t * ldx + j;
            const float v = *p > 0.0f ? *p : 0.0f;
            *p = v * v;
        }
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) hy_cu_relu2_elem(xH, ldx, t, j);
    CU_ASSERT(memcmp(xH, xR, NX * 4) == 0);
    float *b = randn(&r, (size_t)d, 1.0f), *yb0 = randn(&r, NX, 1.0f);
    float *ybR = fdup(yb0, NX), *ybH = fdup(yb0, NX);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) ybR[(size_t)t * ldx + j] += b[j];
    for (int t = 0; t < n; t++)
        for (int j = 0; j < d; j++) hy_cu_add_bias_elem(b, ybH, ldx, t, j);
    CU_ASSERT(memcmp(ybH, ybR, NX * 4) == 0);
    float *ra = randn(&r, NC, 1.0f), *rb = randn(&r, NC, 1.0f);
    float *addR = fdup(ra, NC), *addH = fdup(ra, NC), *axR = malloc(NC * 4), *axH = malloc(NC * 4);
    const float alpha = 0.7f, beta = 1.3f;
    for (size_t i = 0; i < NC; i++) addR[i] += rb[i], axR[i] = alpha * ra[i] + beta * rb[i];
    for (size_t i = 0; i < NC; i++)
        hy_cu_add_elem(addH, rb, i), hy_cu_axpby_elem(alpha, ra, beta, rb, axH, i);
    CU_ASSERT(memcmp(addH, addR, NC * 4) == 0);
    const double ax_scale = max_abs(axR, NC);
    CU_ASSERT(hy_max_abs_diff(axH, axR, NC) / ax_scale <= TOL_SUM);

    /* attention's output gate: 16 heads of 256, each gate beside its query in
     * q_proj's rows (attention_layers.c) */
    const int Hq = 16, hd = 256, qs = 2 * hd, Qd = Hq * hd, P = Hq * qs + 1024;
    const size_t NO = (size_t)n * Qd;
    float *proj = randn(&r, (size_t)n * P, 2.0f), *ob0 = randn(&r, NO, 1.0f);
    float *obR = fdup(ob0, NO), *obH = fdup(ob0, NO);
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hq; h++) {
            float *oh = obR + (size_t)t * Qd + (size_t)h * hd;
            const float *gate = proj + (size_t)t * P + (size_t)h * qs + hd;
            for (int j = 0; j < hd; j++) oh[j] *= hy_sigmoidf(gate[j]);
        }
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hq; h++)
            for (int j = 0; j < hd; j++)
                hy_cu_mul_sigmoid_elem(obH, (size_t)Qd, (size_t)hd, proj + hd, (size_t)P,
                                       (size_t)qs, t, h, j);
    printf(", output gate host %.2e", rel_elem(obH, obR, NO));
    CU_ASSERT(rel_elem(obH, obR, NO) <= TOL_ELEM);

    /* the embedding rows of the step's tokens (forward.c) */
    const int vocab = 50, H = 1024, nt = 6;
    const size_t NE = (size_t)nt * H;
    float *table = randn(&r, (size_t)vocab * H, 1.0f), *eR = malloc(NE * 4), *eH = malloc(NE * 4);
    int32_t ids[6];
    for (int t = 0; t < nt; t++) ids[t] = (int32_t)(hy_rng_next(&r) % (uint64_t)vocab);
    ids[nt - 1] = vocab - 1; /* the last row of the table */
    for (int t = 0; t < nt; t++)
        memcpy(eR + (size_t)t * H, table + (size_t)ids[t] * H, (size_t)H * sizeof(float));
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < H; j++) hy_cu_embed_elem(H, ids, table, eH, (size_t)H, t, j);
    CU_ASSERT(memcmp(eH, eR, NE * 4) == 0);

#ifdef HY_HAVE_CUDA_KERNELS
    if (g_device) {
        hy_err err = {0};
        float *dgu = dput(gu, (size_t)n * ldg * 4), *dh = dput(NULL, NH * 4);
        CU_ASSERT(launched(hy_cu_swiglu(NULL, n, I, dgu, ldg, dh, (size_t)I, &err), &err));
        float *hD = fetch(dh, NH);
        CU_ASSERT_FATAL(hD != NULL);
        printf(", device: swiglu %.2e", rel_elem(hD, hR, NH));
        CU_ASSERT(rel_elem(hD, hR, NH) <= TOL_ELEM);

        float *dx = dput(x0, NX * 4), *dyb = dput(yb0, NX * 4), *dbias = dput(b, (size_t)d * 4);
        CU_ASSERT(launched(hy_cu_relu2(NULL, n, d, dx, ldx, &err), &err));
        CU_ASSERT(launched(hy_cu_add_bias(NULL, n, d, dbias, dyb, ldx, &err), &err));
        float *xD = fetch(dx, NX), *ybD = fetch(dyb, NX);
        CU_ASSERT_FATAL(xD && ybD);
        CU_ASSERT(memcmp(xD, xR, NX * 4) == 0);
        CU_ASSERT(memcmp(ybD, ybR, NX * 4) == 0);

        float *da = dput(ra, NC * 4), *db = dput(rb, NC * 4), *dax = dput(NULL, NC * 4);
        CU_ASSERT(launched(hy_cu_axpby(NULL, NC, alpha, da, beta, db, dax, &err), &err));
        CU_ASSERT(launched(hy_cu_add(NULL, NC, da, db, &err), &err));
        float *axD = fetch(dax, NC), *addD = fetch(da, NC);
        CU_ASSERT_FATAL(axD && addD);
        CU_ASSERT(memcmp(addD, addR, NC * 4) == 0);
        CU_ASSERT(hy_max_abs_diff(axD, axR, NC) / ax_scale <= TOL_SUM);

        float *dproj = dput(proj, (size_t)n * P * 4), *dob = dput(ob0, NO * 4);
        CU_ASSERT(launched(hy_cu_mul_sigmoid(NULL, n, Hq, hd, dob, (size_t)Qd, (size_t)hd,
                                             dproj + hd, (size_t)P, (size_t)qs, &err),
                           &err));
        float *obD = fetch(dob, NO);
        CU_ASSERT_FATAL(obD != NULL);
        printf(", output gate %.2e", rel_elem(obD, obR, NO));
        CU_ASSERT(rel_elem(obD, obR, NO) <= TOL_ELEM);

        float *dtable = dput(table, (size_t)vocab * H * 4), *de = dput(NULL, NE * 4);
        int32_t *dids = dput(ids, sizeof ids);
        CU_ASSERT(launched(hy_cu_embed(NULL, nt, H, dids, dtable, de, (size_t)H, &err), &err));
        float *eD = fetch(de, NE);
        CU_ASSERT_FATAL(eD != NULL);
        CU_ASSERT(memcmp(eD, eR, NE * 4) == 0);

        cudaFree(dgu), cudaFree(dbias), cudaFree(db), cudaFree(dproj), cudaFree(dtable);
        cudaFree(dids);
        free(hD), free(xD), free(ybD), free(axD), free(addD), free(obD), free(eD);
    }
#endif
    free(gu), free(hR), free(hH), free(x0), free(xR), free(xH), free(b), free(yb0), free(ybR);
    free(ybH), free(ra), free(rb), free(addR), free(addH), free(axR), free(axH), free(proj);
    free(ob0), free(obR), free(obH), free(table), free(eR), free(eH);
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

static void test_rope_table(void)
{
    for (size_t c = 0; c < sizeof k_tables / sizeof *k_tables; c++) {
        const rope_table_case *tc = &k_tables[c];
        const int rd = tc->rd;
        const size_t N = (size_t)tc->npos * rd;
        float *inv = malloc((size_t)rd / 2 * 4), *R = malloc(N * 4), *H = malloc(N * 4);
        hy_rope_inv_freq(rd, tc->theta, inv);
        for (int64_t p = 0; p < tc->npos; p++) hy_rope_cos_sin(rd, inv, tc->pos0 + p, R + p * rd);
        for (int64_t p = 0; p < tc->npos; p++)
            for (int i = 0; i < rd / 2; i++) hy_cu_rope_table_elem(rd, inv, tc->pos0, H, p, i);
        CU_ASSERT(memcmp(H, R, N * 4) == 0); /* the same libm on the same fp32 angles */
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) {
            hy_err err = {0};
            float *dinv = dput(inv, (size_t)rd / 2 * 4), *dcs = dput(NULL, N * 4);
            CU_ASSERT(
                launched(hy_cu_rope_table(NULL, rd, dinv, tc->pos0, tc->npos, dcs, &err), &err));
            float *D = fetch(dcs, N);
            CU_ASSERT_FATAL(D != NULL);
            printf("\n    table rd %d from %lld: device %.2e", rd, (long long)tc->pos0,
                   hy_max_abs_diff(D, R, N));
            CU_ASSERT(hy_max_abs_diff(D, R, N) <= TOL_TRIG);
            cudaFree(dinv), free(D);
        }
#endif
        free(inv), free(R), free(H);
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
            if (!(e <= m)) m = e;
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
    float *qR = fdup(q0, NQ), *kR = fdup(k0, NK), *qH = fdup(q0, NQ), *kH = fdup(k0, NK);
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
    hy_cu_rope_args a;
    a.rd = rd, a.pos = pos, a.cs = cs;
    a.q = qH, a.ldq = P, a.qhs = (size_t)qs, a.nq = Hq;
    a.k = kH, a.ldk = (size_t)KV, a.khs = (size_t)hd, a.nk = Hkv;
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hq + Hkv; h++)
            for (int i = 0; i < rd / 2; i++) hy_cu_rope_rotate_elem(&a, t, h, i);
    int same = 1;
    const double e = fmax(rope_err(qH, qR, n, P, Hq, (size_t)qs, rd, &same),
                          rope_err(kH, kR, n, (size_t)KV, Hkv, (size_t)hd, rd, &same));
    printf("\n    rotate host %.2e", e);
    CU_ASSERT(e <= TOL_SAME);
    CU_ASSERT(same);
#ifdef HY_HAVE_CUDA_KERNELS
    if (g_device) {
        hy_err err = {0};
        float *dq = dput(q0, NQ * 4), *dk = dput(k0, NK * 4),
              *dcs = dput(cs, (size_t)npos * rd * 4);
        int64_t *dpos = dput(pos, sizeof pos);
        CU_ASSERT(launched(hy_cu_rope_rotate(NULL, n, rd, dpos, dcs, dq, P, (size_t)qs, Hq, dk,
                                             (size_t)KV, (size_t)hd, Hkv, &err),
                           &err));
        float *qD = fetch(dq, NQ), *kD = fetch(dk, NK);
        CU_ASSERT_FATAL(qD && kD);
        int same_d = 1;
        const double ed = fmax(rope_err(qD, qR, n, P, Hq, (size_t)qs, rd, &same_d),
                               rope_err(kD, kR, n, (size_t)KV, Hkv, (size_t)hd, rd, &same_d));
        printf(", device %.2e", ed);
        CU_ASSERT(ed <= TOL_SUM);
        CU_ASSERT(same_d);
        cudaFree(dcs), cudaFree(dpos), free(qD), free(kD);
    }
#endif
    free(inv), free(cs), free(q0), free(k0), free(qR), free(kR), free(qH), free(kH);
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

/* The bodies over the layer. Each step reads the CPU's inputs (its routing,
 * its expert outputs, its weighted sum), so a step's error is its own. */
static void moe_host(const moe_data *M, moe_out *o, int rev)
{
    const moe_case *c = M->c;
    const int n = c->n, E = c->E, k = c->k, D = c->D;

    hy_cu_route_args ra;
    ra.E = E, ra.k = k, ra.norm_topk = c->norm_topk, ra.logits = M->logits, ra.ldl = M->ldl;
    ra.topi = o->topi, ra.topw = o->topw;
    const int rt = hy_cu_route_threads(E);
    EMULATE(hy_cu_route_phase, hy_cu_route_phases(rt), &ra, n, rt, hy_cu_route_shared(E, k, rt),
            rev);

    hy_cu_plan_args pa;
    pa.N = M->N, pa.E = E, pa.topi = M->ti, pa.offsets = o->offsets, pa.rows = o->rows;
    pa.slot_row = o->slot_row;
    const int pt = hy_cu_plan_threads(M->N);
    EMULATE(hy_cu_plan_phase, hy_cu_plan_phases(pt), &pa, E, pt, hy_cu_plan_shared(pt), rev);

    for (int q = 0; q < M->N; q++)
        for (int d = 0; d < D; d++)
            hy_cu_moe_gather_elem(k, o->rows, M->src, M->lds, o->xe, (size_t)D, q, d);

    hy_cu_combine_args ca;
    ca.k = k, ca.D = D, ca.slot_row = o->slot_row, ca.topw = M->tw, ca.ye = M->ye;
    ca.ldy = (size_t)D, ca.out = o->acc, ca.ldo = (size_t)D;
    const int ct = hy_cu_combine_threads(D);
    EMULATE(hy_cu_combine_phase, hy_cu_combine_phases(), &ca, n, ct, hy_cu_combine_shared(k), rev);

    memcpy(o->y, M->acc, (size_t)n * D * 4);
    hy_cu_sgate_args sa;
    sa.H = D, sa.x = M->src, sa.ldx = M->lds, sa.wg = M->wg, sa.ye = M->yes, sa.ldye = (size_t)D;
    sa.y = o->y, sa.ldy = (size_t)D;
    const int st = hy_cu_sgate_threads(D);
    EMULATE(hy_cu_sgate_phase, hy_cu_sgate_phases(st), &sa, n, st, hy_cu_sgate_shared(st), rev);
}

#ifdef HY_HAVE_CUDA_KERNELS
/* The launchers over the layer, each step from the CPU's inputs as above
 * (the plan from the device's own routing, which must be the CPU's). */
static int moe_device(const moe_data *M, moe_out *o)
{
    const moe_case *c = M->c;
    const int n = c->n, E = c->E, k = c->k, D = c->D;
    const size_t N = (size_t)M->N, ND = (size_t)n * D;
    hy_err err = {0};
    float *logits = dput(M->logits, (size_t)n * M->ldl * 4),
          *src = dput(M->src, (size_t)n * M->lds * 4);
    float *tw = dput(M->tw, N * 4), *ye = dput(M->ye, N * D * 4), *acc = dput(NULL, ND * 4);
    float *y = dput(M->acc, ND * 4), *yes = dput(M->yes, ND * 4);
    float *wg = M->wg ? dput(M->wg, (size_t)D * 4) : NULL, *topw = dput(NULL, N * 4);
    float *xe = dput(NULL, N * D * 4);
    int32_t *topi = dput(NULL, N * 4), *offsets = dput(NULL, (size_t)(E + 1) * 4);
    int32_t *rows = dput(NULL, N * 4), *slot_row = dput(NULL, N * 4);
    int ok =
        launched(hy_cu_moe_route(NULL, n, E, k, c->norm_topk, logits, M->ldl, topi, topw, &err),
                 &err) &&
        launched(hy_cu_moe_plan(NULL, n, k, E, topi, offsets, rows, slot_row, &err), &err) &&
        launched(hy_cu_moe_gather(NULL, n, k, D, rows, src, M->lds, xe, (size_t)D, &err), &err) &&
        launched(
            hy_cu_moe_combine(NULL, n, k, D, slot_row, tw, ye, (size_t)D, acc, (size_t)D, &err),
            &err) &&
        launched(
            hy_cu_moe_shared_gate(NULL, n, D, src, M->lds, wg, yes, (size_t)D, y, (size_t)D, &err),
            &err);
    ok = ok && dget(o->topi, topi, N * 4) && dget(o->topw, topw, N * 4) &&
         dget(o->offsets, offsets, (size_t)(E + 1) * 4) && dget(o->rows, rows, N * 4) &&
         dget(o->slot_row, slot_row, N * 4) && dget(o->xe, xe, N * D * 4) &&
         dget(o->acc, acc, ND * 4) && dget(o->y, y, ND * 4);
    cudaFree(logits), cudaFree(src), cudaFree(tw), cudaFree(ye), cudaFree(acc), cudaFree(y);
    cudaFree(yes), cudaFree(wg), cudaFree(topw), cudaFree(xe), cudaFree(topi), cudaFree(offsets);
    cudaFree(rows), cudaFree(slot_row);
    return ok;
}
#endif

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
        moe_out o[2] = {moe_out_new(&M), moe_out_new(&M)};
        printf("\n    n %d, %d experts, top %d, width %d", c->n, c->E, c->k, c->D);
        for (int rev = 0; rev < 2; rev++) moe_host(&M, &o[rev], rev);
        moe_check(&M, &o[0], "host", TOL_SAME);
        const size_t N = (size_t)M.N, ND = (size_t)c->n * c->D;
        CU_ASSERT(memcmp(o[0].topw, o[1].topw, N * 4) == 0 &&
                  memcmp(o[0].topi, o[1].topi, N * 4) == 0 &&
                  memcmp(o[0].slot_row, o[1].slot_row, N * 4) == 0 &&
                  memcmp(o[0].acc, o[1].acc, ND * 4) == 0 && memcmp(o[0].y, o[1].y, ND * 4) == 0);
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) {
            moe_out d = moe_out_new(&M);
            CU_ASSERT_FATAL(moe_device(&M, &d));
            moe_check(&M, &d, "device", TOL_SUM);
            moe_out_free(&d);
        }
#endif
        moe_out_free(&o[0]), moe_out_free(&o[1]);
        moe_drop(&M);
    }
}

/* --- the launchers' refusals, and main ---------------------------------------------------------
 */

#ifdef HY_HAVE_CUDA_KERNELS
/* Shapes the launchers refuse before touching the device, and empty work
 * they accept without queuing anything: no device needed. */
static void test_launchers_refuse_bad_shapes(void)
{
    hy_err err = {0};
    CU_ASSERT_EQUAL(hy_cu_rmsnorm(NULL, -1, 64, NULL, 64, NULL, 1e-6f, NULL, 64, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(
        hy_cu_rmsnorm_heads(NULL, 2, 0, 64, NULL, 64, 64, NULL, 1e-6f, NULL, 64, 64, &err),
        HY_EINVAL);
    CU_ASSERT_EQUAL(hy_cu_conv1d_silu(NULL, 4, 0, 4, NULL, 0, NULL, NULL, NULL, NULL, 0, &err),
                    HY_EINVAL);
    CU_ASSERT_EQUAL(hy_cu_rope_table(NULL, 63, NULL, 0, 10, NULL, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_cu_rope_rotate(NULL, 2, 64, NULL, NULL, NULL, 0, 0, 1, NULL, 0, 0, 1, &err),
                    HY_EINVAL); /* key heads without keys */
    CU_ASSERT_EQUAL(hy_cu_moe_route(NULL, 1, 8, 9, 1, NULL, 8, NULL, NULL, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_cu_moe_route(NULL, 1, 20000, 8, 1, NULL, 20000, NULL, NULL, &err),
                    HY_EINVAL); /* its probabilities would not fit in shared memory */
    CU_ASSERT_EQUAL(hy_cu_moe_plan(NULL, 1 << 22, 4, 64, NULL, NULL, NULL, NULL, &err), HY_EINVAL);
    CU_ASSERT_EQUAL(hy_cu_moe_combine(NULL, 1 << 22, 4, 64, NULL, NULL, NULL, 64, NULL, 64, &err),
                    HY_EINVAL);
    printf("\n    last refusal: %s", err.msg);
    CU_ASSERT_EQUAL(hy_cu_rmsnorm(NULL, 0, 64, NULL, 64, NULL, 1e-6f, NULL, 64, &err), HY_OK);
    CU_ASSERT_EQUAL(hy_cu_swiglu(NULL, 0, 512, NULL, 1024, NULL, 512, &err), HY_OK);
    CU_ASSERT_EQUAL(hy_cu_add(NULL, 0, NULL, NULL, &err), HY_OK);
    CU_ASSERT_EQUAL(hy_cu_moe_route(NULL, 0, 64, 4, 1, NULL, 64, NULL, NULL, &err), HY_OK);
}
#endif

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
        {"norms_match_cpu", test_norms},
        {"conv_matches_cpu_and_carries_state", test_conv},
        {"elementwise_match_executor", test_elementwise},
        {"rope_table_matches_cpu", test_rope_table},
        {"rope_rotates_first_rd_dims_only", test_rope_rotate},
        {"moe_routing_rows_and_sums_match_executor", test_moe},
#ifdef HY_HAVE_CUDA_KERNELS
        {"launchers_refuse_bad_shapes", test_launchers_refuse_bad_shapes},
#endif
        {NULL, NULL},
    };
    return hy_test_main("cuda_ops", cases);
}
