/*
 * Dense building blocks: BLAS wrappers, RMS and L2 norms, the short causal
 * convolution of the linear-attention layers, and rotary embeddings.
 */
#include "kernels/hy_kernels.h"

#include <cblas.h>
#include <string.h>

void hy_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, size_t lda,
             const float *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (m <= 0 || n <= 0) return;
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, alpha, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
}

void hy_linear(int n, int in, int out, const float *X, size_t ldx, const float *W, float *Y,
               size_t ldy)
{
    hy_gemm(0, 1, n, out, in, 1.0f, X, ldx, W, (size_t)in, 0.0f, Y, ldy);
}

void hy_rmsnorm(int n, int d, const float *x, size_t ldx, const float *w, float eps, float *out,
                size_t ldo)
{
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * ldx;
        float *orow = out + (size_t)t * ldo;
        float ss = 0.0f;
        for (int i = 0; i < d; i++) ss += xr[i] * xr[i];
        float r = 1.0f / sqrtf(ss / (float)d + eps);
        for (int i = 0; i < d; i++) orow[i] = xr[i] * r * w[i];
    }
}

void hy_l2norm_scale(float *x, int d, float eps, float scale)
{
    float ss = 0.0f;
    for (int i = 0; i < d; i++) ss += x[i] * x[i];
    float r = scale / sqrtf(ss + eps);
    for (int i = 0; i < d; i++) x[i] *= r;
}

void hy_conv1d_silu(int n, int C, int K, const float *in, size_t ldi, float *state, const float *w,
                    float *out, size_t ldo)
{
    const int P = K - 1;
    for (int t = 0; t < n; t++) {
        float *orow = out + (size_t)t * ldo;
        memset(orow, 0, (size_t)C * sizeof *orow);
        for (int j = 0; j < K; j++) {
            int idx = t + j - P; /* input index this tap reads */
            const float *xr = idx < 0 ? state + (size_t)(idx + P) * C : in + (size_t)idx * ldi;
            const float *wr = w + (size_t)j * C;
            for (int c = 0; c < C; c++) orow[c] += wr[c] * xr[c];
        }
        for (int c = 0; c < C; c++) orow[c] = hy_siluf(orow[c]);
    }
    /* The new state is the last P inputs of (state ++ in). */
    if (n >= P) {
        for (int r = 0; r < P; r++)
            memcpy(state + (size_t)r * C, in + (size_t)(n - P + r) * ldi, (size_t)C * sizeof(float));
    } else {
        memmove(state, state + (size_t)n * C, (size_t)(P - n) * C * sizeof(float));
        for (int r = 0; r < n; r++)
            memcpy(state + (size_t)(P - n + r) * C, in + (size_t)r * ldi, (size_t)C * sizeof(float));
    }
}

void hy_rope_inv_freq(int rd, double theta, float *inv_freq)
{
    for (int i = 0; i < rd / 2; i++)
        inv_freq[i] = (float)(1.0 / pow(theta, (double)(2 * i) / (double)rd));
}

void hy_rope_apply(float *x, int rd, const float *inv_freq, int64_t pos)
{
    const int h = rd / 2;
    for (int i = 0; i < h; i++) {
        float ang = (float)pos * inv_freq[i]; /* fp32 product, as the reference */
        float c = cosf(ang), s = sinf(ang);
        float a = x[i], b = x[i + h];
        x[i] = a * c - b * s;
        x[i + h] = b * c + a * s;
    }
}
