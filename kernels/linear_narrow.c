/*
 * Products with weight matrices kept narrower than fp32, accumulated in fp32:
 *
 *   - bf16: a BF16 checkpoint's own bytes, half of fp32's;
 *   - q8: 8-bit integers with one fp32 scale per 32 consecutive values
 *     (1.125 bytes a weight), quantised at load time from any checkpoint.
 *
 * Decode and other products of a few rows stream W once: each weight row is
 * widened as it is read and dotted with every row of X (memory-bound, so
 * the widening is nearly free and fewer bytes are a faster step). Larger
 * products take one of two paths:
 *
 *   - with bf16 arithmetic asked for (executor.weights bf16), bf16 weights
 *     and AVX512-BF16 in the build's -march, X is rounded to bf16
 *     once and tiles of 8 rows × 32 outputs accumulate pairs of products with
 *     vdpbf16ps, twice the multiply-adds of an fp32 FMA per instruction: the
 *     arithmetic llama.cpp's and PyTorch's bf16 CPU GEMMs do, with the same
 *     rounding of the activations to bf16;
 *   - otherwise each panel of W is widened into fp32 and handed to sgemm
 *     (Debian's OpenBLAS has no bf16 or int8 GEMM), X staying fp32: the fp32
 *     path's sums on the same weight values.
 */
#include "hy_kernels.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX512F__)
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
#define DIRECT_ROWS 4
/* Rows of W a panel widens into fp32 for sgemm: 256 rows of a 1024-wide
 * matrix are 1 MiB, which stays in L2 while BLAS packs it. */
#define PANEL 256

/* A narrow weight matrix: bf16 values, or q8 ones. */
typedef struct narrow {
    const uint16_t *bf16; /* [out][in], or NULL for q8 */
    hy_q8w q8;
} narrow;

/* --- bf16 ---------------------------------------------------------------- */

/* Y[r][o] = X[r] · W[o] for n rows, outputs [o0, o1). */
static void bf16_direct(int n, int in, int o0, int o1, const float *X, size_t ldx,
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

/* --- q8 ------------------------------------------------------------------ */

/* Whether row o's values are whole blocks: it starts on a block and its
 * width is a multiple of one (every projection of the shipped models). */
static inline bool q8_aligned(const hy_q8w *w, int in, int o)
{
    return (w->off + (size_t)o * in) % HY_Q8_BLOCK == 0 && in % HY_Q8_BLOCK == 0;
}

/* Row o widened to fp32 into dst [in]. */
static void q8_widen_row(const hy_q8w *w, int in, int o, float *dst)
{
    const size_t base = w->off + (size_t)o * in;
    const int8_t *q = w->q + base;
    if (q8_aligned(w, in, o)) {
        const float *sc = w->scale + base / HY_Q8_BLOCK;
        for (int b = 0; b < in / HY_Q8_BLOCK; b++) {
            const float s = sc[b];
#pragma omp simd
            for (int j = 0; j < HY_Q8_BLOCK; j++)
                dst[b * HY_Q8_BLOCK + j] = s * (float)q[b * HY_Q8_BLOCK + j];
        }
        return;
    }
    for (int i = 0; i < in; i++) dst[i] = w->scale[(base + (size_t)i) / HY_Q8_BLOCK] * (float)q[i];
}

/* Widest row the direct dots take with X in int16 (on the stack, a row each). */
#define Q8_I16_MAX_IN 8192

#if defined(__AVX512BW__)
/* Row x [in] as int16 steps of one scale, its largest magnitude ±32767:
 * returns the step. The rounding, at most half a step, is 2^-16 of the
 * row's largest value — a fraction of q8's own 2^-8 of a block's largest
 * weight — and lets a block's 32 products be summed exactly in integers. */
static float q8_round_x(const float *x, int in, int16_t *xi)
{
    float amax = 0;
    for (int i = 0; i < in; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float step = amax / 32767.0f, inv = amax > 0 ? 32767.0f / amax : 0.0f;
    for (int i = 0; i < in; i++) xi[i] = (int16_t)nearbyintf(x[i] * inv);
    return step;
}

/* A block's 32 products of int8 weights and int16 activations, summed in
 * pairs into 16 int32 lanes (exact: |Σ| < 2^7 · 2^15 · 2). */
static inline __m512i q8_block_dot(const int8_t *q, const int16_t *x)
{
    const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const void *)q));
    const __m512i v = _mm512_loadu_si512((const void *)x);
#if defined(__AVX512VNNI__)
    return _mm512_dpwssd_epi32(_mm512_setzero_si512(), w, v);
#else
    return _mm512_madd_epi16(w, v);
#endif
}

/* n (1..DIRECT_ROWS, a constant where inlined) rows of rounded X (xi [n][in],
 * steps [n]) against an aligned weight row: per block an integer dot, then
 * one multiply-add by the block's scale; two accumulators a row (even and
 * odd blocks) so that the adds do not wait on each other. */
static inline __attribute__((always_inline)) void q8_dot_rows(int n, int in, const int8_t *q,
                                                              const float *sc, const int16_t *xi,
                                                              const float *step, float *out)
{
    __m512 a[DIRECT_ROWS], e[DIRECT_ROWS];
    for (int r = 0; r < n; r++) a[r] = e[r] = _mm512_setzero_ps();
    const int nb = in / HY_Q8_BLOCK;
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        const __m512 s0 = _mm512_set1_ps(sc[b]), s1 = _mm512_set1_ps(sc[b + 1]);
        for (int r = 0; r < n; r++) {
            const int16_t *x = xi + (size_t)r * in + 32 * b;
            a[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q8_block_dot(q + 32 * b, x)), s0, a[r]);
            e[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q8_block_dot(q + 32 * b + 32, x + 32)), s1,
                                   e[r]);
        }
    }
    if (b < nb) {
        const __m512 s0 = _mm512_set1_ps(sc[b]);
        for (int r = 0; r < n; r++)
            a[r] = _mm512_fmadd_ps(
                _mm512_cvtepi32_ps(q8_block_dot(q + 32 * b, xi + (size_t)r * in + 32 * b)), s0,
                a[r]);
    }
    for (int r = 0; r < n; r++) out[r] = step[r] * _mm512_reduce_add_ps(_mm512_add_ps(a[r], e[r]));
}
#endif

bool hy_linear_q8_rounds_x(int n, int in)
{
#if defined(__AVX512BW__)
    return n <= DIRECT_ROWS && in % HY_Q8_BLOCK == 0 && in <= Q8_I16_MAX_IN;
#else
    (void)n, (void)in;
    return false;
#endif
}

void hy_q8_round_x(const float *x, int in, float *out)
{
    float amax = 0;
    for (int i = 0; i < in; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float step = amax / 32767.0f, inv = amax > 0 ? 32767.0f / amax : 0.0f;
    for (int i = 0; i < in; i++) out[i] = nearbyintf(x[i] * inv) * step;
}

/* Y[r][o] = X[r] · W[o] for n rows, outputs [o0, o1): W streamed once, each
 * row widened as it is read. */
static void q8_direct(int n, int in, int o0, int o1, const float *X, size_t ldx, const hy_q8w *w,
                      float *Y, size_t ldy)
{
    float row[256], d[DIRECT_ROWS];
#if defined(__AVX512BW__)
    /* rows whose width is whole blocks: X rounded to int16 once */
    if (hy_linear_q8_rounds_x(n, in) && w->off % HY_Q8_BLOCK == 0) {
        int16_t xi[DIRECT_ROWS * Q8_I16_MAX_IN] __attribute__((aligned(64)));
        float step[DIRECT_ROWS];
        for (int r = 0; r < n; r++) step[r] = q8_round_x(X + (size_t)r * ldx, in, xi + (size_t)r * in);
        for (int o = o0; o < o1; o++) {
            const size_t base = w->off + (size_t)o * in;
            const int8_t *q = w->q + base;
            const float *sc = w->scale + base / HY_Q8_BLOCK;
            switch (n) { /* the row count a constant in each copy */
            case 1: q8_dot_rows(1, in, q, sc, xi, step, d); break;
            case 2: q8_dot_rows(2, in, q, sc, xi, step, d); break;
            case 3: q8_dot_rows(3, in, q, sc, xi, step, d); break;
            default: q8_dot_rows(4, in, q, sc, xi, step, d); break;
            }
            for (int r = 0; r < n; r++) Y[(size_t)r * ldy + o] = d[r];
        }
        return;
    }
#endif
    for (int o = o0; o < o1; o++) {
        const size_t base = w->off + (size_t)o * in;
        /* widened a piece at a time into row, then dotted */
        for (int r = 0; r < n; r++) d[r] = 0;
        for (int i0 = 0; i0 < in; i0 += 256) {
            const int len = HY_MIN_INT(256, in - i0);
            if (q8_aligned(w, in, o)) {
                for (int b = 0; b < len / HY_Q8_BLOCK; b++) {
                    const float s = w->scale[(base + (size_t)i0) / HY_Q8_BLOCK + (size_t)b];
                    const int8_t *q = w->q + base + i0 + b * HY_Q8_BLOCK;
#pragma omp simd
                    for (int j = 0; j < HY_Q8_BLOCK; j++) row[b * HY_Q8_BLOCK + j] = s * (float)q[j];
                }
            } else {
                for (int i = 0; i < len; i++)
                    row[i] = w->scale[(base + (size_t)(i0 + i)) / HY_Q8_BLOCK] *
                             (float)w->q[base + (size_t)(i0 + i)];
            }
            for (int r = 0; r < n; r++) {
                const float *x = X + (size_t)r * ldx + i0;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < len; i++) s += x[i] * row[i];
                d[r] += s;
            }
        }
        for (int r = 0; r < n; r++) Y[(size_t)r * ldy + o] = d[r];
    }
}

void hy_q8_quantize(const float *x, size_t n, int8_t *q, float *scale)
{
    for (size_t b0 = 0; b0 < n; b0 += HY_Q8_BLOCK) {
        const size_t len = n - b0 < HY_Q8_BLOCK ? n - b0 : HY_Q8_BLOCK;
        float amax = 0;
        for (size_t i = 0; i < len; i++) amax = fmaxf(amax, fabsf(x[b0 + i]));
        const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
        scale[b0 / HY_Q8_BLOCK] = s;
        for (size_t i = 0; i < len; i++) {
            const float v = nearbyintf(x[b0 + i] * inv);
            q[b0 + i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
        }
    }
}

/* --- either format ------------------------------------------------------- */

static void direct(const narrow *w, int n, int in, int o0, int o1, const float *X, size_t ldx,
                   float *Y, size_t ldy)
{
    if (w->bf16)
        bf16_direct(n, in, o0, o1, X, ldx, w->bf16, Y, ldy);
    else
        q8_direct(n, in, o0, o1, X, ldx, &w->q8, Y, ldy);
}

/* Rows [p, p + rows) of W widened into panel [rows][in]. */
static void widen(const narrow *w, int in, int p, int rows, float *panel)
{
    if (w->bf16) {
        const uint16_t *src = w->bf16 + (size_t)p * in;
        const size_t cnt = (size_t)rows * in;
#pragma omp simd
        for (size_t i = 0; i < cnt; i++) panel[i] = bf16_widen(src[i]);
        return;
    }
    for (int r = 0; r < rows; r++) q8_widen_row(&w->q8, in, p + r, panel + (size_t)r * in);
}

/* Outputs [o0, o1) of Y = X · Wᵀ by panels of W widened into panel (room for
 * PANEL rows of in floats), each one sgemm on this thread. */
static void linear_widened(const narrow *w, int n, int in, int o0, int o1, const float *X,
                           size_t ldx, float *Y, size_t ldy, float *panel)
{
    for (int p = o0; p < o1; p += PANEL) {
        const int rows = HY_MIN_INT(PANEL, o1 - p);
        widen(w, in, p, rows, panel);
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
    return bf16_math && n > DIRECT_ROWS;
#else
    (void)n, (void)bf16_math;
    return false;
#endif
}

/* Y = X · Wᵀ for a narrow W: direct dots for a few rows, else bf16
 * arithmetic where asked for and possible, else widened panels. */
static void narrow_linear(const narrow *w, int n, int in, int out, const float *X, size_t ldx,
                          float *Y, size_t ldy, bool bf16_math)
{
    if (n <= 0 || out <= 0) return;
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* Split over the threads when there is enough of W to stream or enough
     * arithmetic, as hy_gemm does; by outputs, so that each thread reads (and
     * packs or widens) only its own share of W. */
    const int split = nt > 1 && ((double)out * in >= 262144.0 || 2.0 * n * out * (double)in >= 4e6);
    if (n <= DIRECT_ROWS) {
        if (!split) { /* no parallel region, not even an inactive one */
            direct(w, n, in, 0, out, X, ldx, Y, ldy);
            return;
        }
#pragma omp parallel for schedule(static)
        for (int b = 0; b < 2 * nt; b++) { /* two blocks a thread: uneven cores even out */
            const int s = (int)((int64_t)out * b / (2 * nt)),
                      e = (int)((int64_t)out * (b + 1) / (2 * nt));
            direct(w, n, in, s, e, X, ldx, Y, ldy);
        }
        return;
    }
#if defined(__AVX512BF16__)
    /* past it: fp32 arithmetic asked for, or no memory for the rounded rows
     * or a packed panel, and the widening path */
    if (w->bf16 && bf16_math && linear_dot(n, in, out, X, ldx, w->bf16, Y, ldy, split)) return;
#else
    (void)bf16_math; /* no bf16 arithmetic on this CPU: always the widening path */
#endif
    const int nb = (out + PANEL - 1) / PANEL;
    if (!split) {
        float *panel = hy_alloc((size_t)PANEL * in * sizeof *panel);
        if (panel)
            linear_widened(w, n, in, 0, out, X, ldx, Y, ldy, panel);
        else /* no scratch to widen into: slower, the same sums */
            direct(w, n, in, 0, out, X, ldx, Y, ldy);
        hy_free(panel);
        return;
    }
#pragma omp parallel
    {
        float *panel = hy_alloc((size_t)PANEL * in * sizeof *panel);
#pragma omp for schedule(dynamic, 1)
        for (int b = 0; b < nb; b++) {
            const int o0 = b * PANEL, o1 = HY_MIN_INT(out, o0 + PANEL);
            if (panel)
                linear_widened(w, n, in, o0, o1, X, ldx, Y, ldy, panel);
            else
                direct(w, n, in, o0, o1, X, ldx, Y, ldy);
        }
        hy_free(panel);
    }
}

void hy_linear_bf16(int n, int in, int out, const float *X, size_t ldx, const uint16_t *W, float *Y,
                    size_t ldy, bool bf16_math)
{
    const narrow w = {.bf16 = W};
    narrow_linear(&w, n, in, out, X, ldx, Y, ldy, bf16_math);
}

void hy_linear_q8(int n, int in, int out, const float *X, size_t ldx, const hy_q8w *W, float *Y,
                  size_t ldy)
{
    const narrow w = {.q8 = *W};
    narrow_linear(&w, n, in, out, X, ldx, Y, ldy, false);
}
