/*
 * Products with weight matrices kept in bf16 (a BF16 checkpoint's own bytes,
 * half of fp32's), accumulated in fp32.
 *
 * Decode and other products of a few rows stream W once: each weight row is
 * widened as it is read and dotted with every row of X (memory-bound, so
 * the widening is free). Larger products take one of two paths:
 *
 *   - with bf16 arithmetic asked for (executor.weights bf16) and AVX512-BF16
 *     in the build's -march, X is rounded to bf16
 *     once and tiles of 8 rows × 32 outputs accumulate pairs of products with
 *     vdpbf16ps, twice the multiply-adds of an fp32 FMA per instruction: the
 *     arithmetic llama.cpp's and PyTorch's bf16 CPU GEMMs do, with the same
 *     rounding of the activations to bf16;
 *   - otherwise each panel of W is widened into fp32 and handed to sgemm
 *     (Debian's OpenBLAS has no bf16 GEMM), X staying fp32: the fp32 path's
 *     sums on the same weights.
 */
#include "hy_kernels.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

/* A bf16 value widened: its bits are the top half of the fp32 one. Inline
 * and branch-free so the loops below vectorise (a shift per lane). */
static inline float bf16_widen(uint16_t h)
{
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Up to this many rows of X, each weight row is dotted in place (decode, the
 * last token's logits): the product is a stream of W, and widening a panel
 * first would read it twice. */
#define BF16_DIRECT_ROWS 4
/* Rows of W a panel widens into fp32 for sgemm: 256 rows of a 1024-wide
 * matrix are 1 MiB, which stays in L2 while BLAS packs it. */
#define BF16_PANEL 256

/* Y[r][o] = X[r] · W[o] for n rows, outputs [o0, o1). */
static void linear_direct(int n, int in, int o0, int o1, const float *X, size_t ldx,
                          const uint16_t *W, float *Y, size_t ldy)
{
    for (int o = o0; o < o1; o++) {
        const uint16_t *w = W + (size_t)o * in;
        for (int r = 0; r < n; r++) {
            const float *x = X + (size_t)r * ldx;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int i = 0; i < in; i++) s += x[i] * bf16_widen(w[i]);
            Y[(size_t)r * ldy + o] = s;
        }
    }
}

/* Outputs [o0, o1) of Y = X · Wᵀ by panels of W widened into panel (room for
 * BF16_PANEL rows of in floats), each one sgemm on this thread. */
static void linear_widened(int n, int in, int o0, int o1, const float *X, size_t ldx,
                           const uint16_t *W, float *Y, size_t ldy, float *panel)
{
    for (int p = o0; p < o1; p += BF16_PANEL) {
        const int rows = HY_MIN_INT(BF16_PANEL, o1 - p);
        const uint16_t *w = W + (size_t)p * in;
        const size_t cnt = (size_t)rows * in;
#pragma omp simd
        for (size_t i = 0; i < cnt; i++) panel[i] = bf16_widen(w[i]);
        hy_gemm(0, 1, n, rows, in, 1.0f, X, ldx, panel, (size_t)in, 0.0f, Y + p, ldy);
    }
}

#if defined(__AVX512BF16__)
#define MR 8  /* rows of X a tile computes */
#define NR 32 /* outputs a tile computes: two vectors of 16 */

/* Row r of X [n][in] rounded to bf16 (nearest even) into Xb [n][2·kp], the
 * odd column past in zero: row r's pairs are the uint32s Xb32[r·kp + p]. */
static void round_row(int r, int in, int kp, const float *X, size_t ldx, uint16_t *Xb)
{
    const float *x = X + (size_t)r * ldx;
    uint16_t *o = Xb + (size_t)r * 2 * kp;
    int i = 0;
    for (; i + 16 <= in; i += 16)
        _mm256_storeu_si256((__m256i *)(o + i),
                            (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < in) { /* the last in − i < 16 columns, read and written under a mask */
        const __mmask16 m = (__mmask16)((1u << (in - i)) - 1);
        _mm256_mask_storeu_epi16(o + i, m,
                                 (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
    }
    for (int j = in; j < 2 * kp; j++) o[j] = 0;
}

/* Outputs [o0, o0 + cnt), cnt <= NR, of W packed as pairs: Wp[p][j] holds
 * output o0 + j's weights 2p and 2p + 1 (zero past in, or past cnt). */
static void pack_panel(const uint16_t *W, int in, int kp, int o0, int cnt, uint32_t *Wp)
{
    memset(Wp, 0, (size_t)kp * NR * sizeof *Wp);
    for (int j = 0; j < cnt; j++) {
        const uint16_t *w = W + (size_t)(o0 + j) * in;
        for (int p = 0; p < in / 2; p++) {
            uint32_t v;
            memcpy(&v, w + 2 * p, sizeof v);
            Wp[(size_t)p * NR + j] = v;
        }
        if (in % 2) Wp[(size_t)(in / 2) * NR + j] = w[in - 1];
    }
}

/* Y's rows [r0, r0 + rows), rows <= MR, outputs [o0, o0 + cnt): Σ over the
 * kp pairs of vdpbf16ps. A short tile repeats its last row (not stored). */
static void tile(int kp, const uint32_t *Xb32, int r0, int rows, const uint32_t *Wp, float *Y,
                 size_t ldy, int o0, int cnt)
{
    const uint32_t *x[MR];
    for (int r = 0; r < MR; r++) x[r] = Xb32 + (size_t)(r0 + HY_MIN_INT(r, rows - 1)) * kp;
    __m512 c[MR][2];
    for (int r = 0; r < MR; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        const __m512bh w0 = (__m512bh)_mm512_loadu_si512(Wp + (size_t)p * NR);
        const __m512bh w1 = (__m512bh)_mm512_loadu_si512(Wp + (size_t)p * NR + 16);
        for (int r = 0; r < MR; r++) {
            const __m512bh xr = (__m512bh)_mm512_set1_epi32((int)x[r][p]);
            c[r][0] = _mm512_dpbf16_ps(c[r][0], xr, w0);
            c[r][1] = _mm512_dpbf16_ps(c[r][1], xr, w1);
        }
    }
    const __mmask16 m0 = cnt >= 16 ? 0xffff : (__mmask16)((1u << cnt) - 1);
    const __mmask16 m1 = cnt >= 32 ? 0xffff : cnt <= 16 ? 0 : (__mmask16)((1u << (cnt - 16)) - 1);
    for (int r = 0; r < rows; r++) {
        float *y = Y + (size_t)(r0 + r) * ldy + o0;
        _mm512_mask_storeu_ps(y, m0, c[r][0]);
        _mm512_mask_storeu_ps(y + 16, m1, c[r][1]);
    }
}

/* Panels [b0, b1) of NR outputs of Y = X · Wᵀ, X rounded (Xb): each packed
 * into Wp once, then every row tile against it. */
static void dot_panels(int n, int in, int out, int b0, int b1, const uint16_t *Xb,
                       const uint16_t *W, float *Y, size_t ldy, uint32_t *Wp)
{
    const int kp = (in + 1) / 2;
    for (int b = b0; b < b1; b++) {
        const int o0 = b * NR, cnt = HY_MIN_INT(NR, out - o0);
        pack_panel(W, in, kp, o0, cnt, Wp);
        for (int r0 = 0; r0 < n; r0 += MR)
            tile(kp, (const uint32_t *)(const void *)Xb, r0, HY_MIN_INT(MR, n - r0), Wp, Y, ldy, o0,
                 cnt);
    }
}

/* Y = X · Wᵀ in bf16 arithmetic: X rounded once, panels over the threads
 * when split (never a parallel region otherwise: this runs inside the
 * executor's). 0 when out of memory (Y then incomplete). */
static int linear_dot(int n, int in, int out, const float *X, size_t ldx, const uint16_t *W,
                      float *Y, size_t ldy, int split)
{
    const int kp = (in + 1) / 2, np = (out + NR - 1) / NR;
    uint16_t *Xb = hy_alloc((size_t)n * 2 * kp * sizeof *Xb);
    if (!Xb) return 0;
    int ok = 1;
    if (!split) {
        for (int r = 0; r < n; r++) round_row(r, in, kp, X, ldx, Xb);
        uint32_t *Wp = hy_alloc((size_t)kp * NR * sizeof *Wp);
        if (Wp) dot_panels(n, in, out, 0, np, Xb, W, Y, ldy, Wp);
        ok = Wp != NULL;
        hy_free(Wp);
    } else {
#pragma omp parallel
        {
#pragma omp for schedule(static)
            for (int r = 0; r < n; r++) round_row(r, in, kp, X, ldx, Xb);
            uint32_t *Wp = hy_alloc((size_t)kp * NR * sizeof *Wp);
            if (!Wp) {
#pragma omp atomic write
                ok = 0;
            }
#pragma omp for schedule(dynamic, 1)
            for (int b = 0; b < np; b++)
                if (Wp) dot_panels(n, in, out, b, b + 1, Xb, W, Y, ldy, Wp);
            hy_free(Wp);
        }
    }
    hy_free(Xb);
    return ok;
}
#endif

bool hy_linear_bf16_rounds_x(int n, bool bf16_math)
{
#if defined(__AVX512BF16__)
    return bf16_math && n > BF16_DIRECT_ROWS;
#else
    (void)n, (void)bf16_math;
    return false;
#endif
}

void hy_linear_bf16(int n, int in, int out, const float *X, size_t ldx, const uint16_t *W, float *Y,
                    size_t ldy, bool bf16_math)
{
    if (n <= 0 || out <= 0) return;
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* Split over the threads when there is enough of W to stream or enough
     * arithmetic, as hy_gemm does; by outputs, so that each thread reads (and
     * packs or widens) only its own share of W. */
    const int split = nt > 1 && ((double)out * in >= 262144.0 || 2.0 * n * out * (double)in >= 4e6);
    if (n <= BF16_DIRECT_ROWS) {
        if (!split) { /* no parallel region, not even an inactive one */
            linear_direct(n, in, 0, out, X, ldx, W, Y, ldy);
            return;
        }
#pragma omp parallel for schedule(static)
        for (int b = 0; b < 2 * nt; b++) { /* two blocks a thread: uneven cores even out */
            const int s = (int)((int64_t)out * b / (2 * nt)),
                      e = (int)((int64_t)out * (b + 1) / (2 * nt));
            linear_direct(n, in, s, e, X, ldx, W, Y, ldy);
        }
        return;
    }
#if defined(__AVX512BF16__)
    /* past it: fp32 arithmetic asked for, or no memory for the rounded rows
     * or a packed panel, and the widening path */
    if (bf16_math && linear_dot(n, in, out, X, ldx, W, Y, ldy, split)) return;
#else
    (void)bf16_math; /* no bf16 arithmetic on this CPU: always the widening path */
#endif
    const int nb = (out + BF16_PANEL - 1) / BF16_PANEL;
    if (!split) {
        float *panel = hy_alloc((size_t)BF16_PANEL * in * sizeof *panel);
        if (panel)
            linear_widened(n, in, 0, out, X, ldx, W, Y, ldy, panel);
        else /* no scratch to widen into: slower, the same sums */
            linear_direct(n, in, 0, out, X, ldx, W, Y, ldy);
        hy_free(panel);
        return;
    }
#pragma omp parallel
    {
        float *panel = hy_alloc((size_t)BF16_PANEL * in * sizeof *panel);
#pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < nb; b++) {
            const int o0 = b * BF16_PANEL, o1 = HY_MIN_INT(out, o0 + BF16_PANEL);
            if (panel)
                linear_widened(n, in, o0, o1, X, ldx, W, Y, ldy, panel);
            else
                linear_direct(n, in, o0, o1, X, ldx, W, Y, ldy);
        }
        hy_free(panel);
    }
}
