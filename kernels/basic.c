/*
 * Dense building blocks: BLAS wrappers, RMS and L2 norms, the short causal
 * convolution of the linear-attention layers, and rotary embeddings.
 */
#include "hy_kernels.h"

#include <assert.h>

#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* OpenBLAS (the pthreads build, see CMakeLists.txt) runs every call on its
 * caller's thread: a call made inside one of our parallel regions stays on
 * that thread, and large products outside them are split over the OpenMP
 * threads here. */
static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_on_caller_thread(void)
{
    openblas_set_num_threads(1);
}

uint64_t hy_fp_flush_subnormals(void)
{
#if defined(__x86_64__) || defined(__i386__)
    const unsigned before = _mm_getcsr();
    _mm_setcsr(before | 0x8040u); /* FTZ (bit 15) | DAZ (bit 6) */
    return before;
#elif defined(__aarch64__)
    uint64_t before;
    __asm__ volatile("mrs %0, fpcr" : "=r"(before));
    __asm__ volatile("msr fpcr, %0" : : "r"(before | (UINT64_C(1) << 24))); /* FZ */
    return before;
#else
    return 0;
#endif
}

void hy_fp_restore(uint64_t mode)
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_setcsr((unsigned)mode);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(mode));
#else
    (void)mode;
#endif
}

static void gemm1(int ta, int tb, int m, int n, int k, float alpha, const float *A, size_t lda,
                  const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (m == 1 && !ta) { /* a single row (decode): GEMV streams B without packing it */
        if (tb)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, B, (int)ldb, A, 1, beta, C, 1);
        else
            cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, B, (int)ldb, A, 1, beta, C, 1);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
                k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

/* LAPACK (Fortran interface, column-major). */
void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda, float *s,
             float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
             int *iwork, int *info);

int hy_svd(int m, int n, float *A, float *sv, float *U, float *Vt)
{
    pthread_once(&g_blas_once, blas_on_caller_thread);
    /* Row-major A is column-major Aᵀ (n×m): Aᵀ = U'·Σ·V'ᵀ gives A = V'·Σ·U'ᵀ,
     * so LAPACK's column-major V'ᵀ (k×m) read row-major is our U [m][k] and
     * its U' (n×k) read row-major is our Vt [k][n]. */
    const int M = n, N = m, k = m < n ? m : n;
    int lwork = -1, info = 0;
    float q = 0.0f;
    int *iw = malloc(8 * (size_t)k * sizeof *iw);
    if (!iw) return HY_ENOMEM;
    sgesdd_("S", &M, &N, A, &M, sv, Vt, &M, U, &k, &q, &lwork, iw, &info);
    lwork = (int)q + 1;
    float *w = info == 0 ? malloc((size_t)lwork * sizeof *w) : NULL;
    if (!w) {
        free(iw);
        return info ? HY_ERANGE : HY_ENOMEM;
    }
    sgesdd_("S", &M, &N, A, &M, sv, Vt, &M, U, &k, w, &lwork, iw, &info);
    free(w);
    free(iw);
    return info ? HY_ERANGE : HY_OK;
}

void hy_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, size_t lda,
             const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (m <= 0 || n <= 0) return;
    pthread_once(&g_blas_once, blas_on_caller_thread);
    const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
    /* Worth splitting: enough arithmetic, or (a GEMV in decode) enough of B
     * to stream that two cores' bandwidth beats one. */
    const double flops = 2.0 * m * n * (double)k;
    if (nt == 1 || (flops < 4e6 && (double)n * k < 262144.0)) {
        gemm1(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split the rows of C when there are many of them, else its columns, so
     * that a product of a few hundred rows (a request's seams and query)
     * does not have every thread pack and stream the whole weight matrix:
     * measured on `small`, a 104-row pass's GEMMs ran at 42 GFLOP/s split by
     * rows and 50 by columns. Blocks are multiples of 16 so each keeps
     * BLAS-friendly shapes. */
    const int by_rows = m >= 256 * nt || m >= n;
    const int len = by_rows ? m : n;
    int blk = (len + 2 * nt - 1) / (2 * nt);
    blk = (blk + 15) & ~15;
    const int nb = (len + blk - 1) / blk;
#pragma omp parallel for schedule(dynamic, 1)
    for (int b = 0; b < nb; b++) {
        const int s = b * blk, l = len - s < blk ? len - s : blk;
        if (by_rows)
            gemm1(ta, tb, l, n, k, alpha, ta ? A + s : A + (size_t)s * lda, lda, B, ldb, beta,
                  C + (size_t)s * ldc, ldc);
        else
            gemm1(ta, tb, m, l, k, alpha, A, lda, tb ? B + (size_t)s * ldb : B + s, ldb, beta,
                  C + s, ldc);
    }
}

void hy_linear(int n, int in, int out, const float *X, size_t ldx, const float *W, float *Y,
               size_t ldy)
{
    hy_gemm(0, 1, n, out, in, 1.0f, X, ldx, W, (size_t)in, 0.0f, Y, ldy);
}

void hy_rmsnorm(int n, int d, const float *x, size_t ldx, const float *w, float eps, float *out,
                size_t ldo)
{
#pragma omp parallel for schedule(static) if (n >= 64)
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * ldx;
        float *orow = out + (size_t)t * ldo;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)d + eps);
        for (int i = 0; i < d; i++) orow[i] = xr[i] * r * w[i];
    }
}

void hy_l2norm_scale(float *x, int d, float eps, float scale)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; i++) ss += x[i] * x[i];
    float r = scale / sqrtf(ss + eps);
    for (int i = 0; i < d; i++) x[i] *= r;
}

void hy_conv1d_silu(int n, int C, int K, const float *in, size_t ldi, float *state, const float *w,
                    const float *bias, float *out, size_t ldo)
{
    const int P = K - 1;
#pragma omp parallel for schedule(static) if (n >= 16)
    for (int t = 0; t < n; t++) {
        float *orow = out + (size_t)t * ldo;
        if (bias)
            memcpy(orow, bias, (size_t)C * sizeof *orow);
        else
            memset(orow, 0, (size_t)C * sizeof *orow);
        for (int j = 0; j < K; j++) {
            int idx = t + j - P; /* input index this tap reads */
            const float *xr = idx < 0 ? state + (size_t)(idx + P) * C : in + (size_t)idx * ldi;
            const float *wr = w + (size_t)j * C;
            for (int c = 0; c < C; c++) orow[c] += wr[c] * xr[c];
        }
#pragma omp simd
        for (int c = 0; c < C; c++) orow[c] = hy_siluf(orow[c]);
    }
    /* The new state is the last P inputs of (state ++ in). */
    if (n >= P) {
        for (int r = 0; r < P; r++)
            memcpy(state + (size_t)r * C, in + (size_t)(n - P + r) * ldi,
                   (size_t)C * sizeof(float));
    } else {
        memmove(state, state + (size_t)n * C, (size_t)(P - n) * C * sizeof(float));
        for (int r = 0; r < n; r++)
            memcpy(state + (size_t)(P - n + r) * C, in + (size_t)r * ldi,
                   (size_t)C * sizeof(float));
    }
}

void hy_rope_inv_freq(int rd, double theta, float *inv_freq)
{
    for (int i = 0; i < rd / 2; i++)
        inv_freq[i] = (float)(1.0 / pow(theta, (double)(2 * i) / (double)rd));
}

void hy_rope_cos_sin(int rd, const float *inv_freq, int64_t pos, float *cs)
{
    const int h = rd / 2;
    for (int i = 0; i < h; i++) {
        const float ang = (float)pos * inv_freq[i]; /* fp32 product, as the reference */
        cs[i] = cosf(ang);
        cs[h + i] = sinf(ang);
    }
}

void hy_rope_rotate(float *dst, const float *src, int rd, const float *cs)
{
    const int h = rd / 2;
#pragma omp simd
    for (int i = 0; i < h; i++) {
        const float a = src[i], b = src[i + h], c = cs[i], s = cs[h + i];
        dst[i] = a * c - b * s;
        dst[i + h] = b * c + a * s;
    }
}

void hy_rope_apply(float *x, int rd, const float *inv_freq, int64_t pos)
{
    float cs[HY_ROPE_MAX_DIM];
    assert(rd <= HY_ROPE_MAX_DIM);
    hy_rope_cos_sin(rd, inv_freq, pos, cs);
    hy_rope_rotate(x, x, rd, cs);
}

double hy_kl_logits(const float *lp, const float *lq, int n)
{
    /* The maxima in float and one per loop: GCC 12 for aarch64 at -O3 fails
     * with an internal error vectorising two double fmax reductions in one. */
    float mpf = lp[0], mqf = lq[0];
    for (int i = 1; i < n; i++) mpf = lp[i] > mpf ? lp[i] : mpf;
    for (int i = 1; i < n; i++) mqf = lq[i] > mqf ? lq[i] : mqf;
    double mp = mpf, mq = mqf, zp = 0, zq = 0, kl = 0;
    for (int i = 0; i < n; i++) zp += exp(lp[i] - mp), zq += exp(lq[i] - mq);
    for (int i = 0; i < n; i++) { /* log-softmaxes, max-shifted: no overflow */
        double a = lp[i] - mp - log(zp), b = lq[i] - mq - log(zq);
        kl += exp(a) * (a - b);
    }
    return kl;
}
