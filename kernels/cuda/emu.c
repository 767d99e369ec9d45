/*
 * The emulation's memory and products (include/hy_cuda.h, "the emulation"):
 * host memory stands in for the device's and the CPU's BLAS for cuBLAS, with
 * the same contracts as blas.cu's. The kernels' twins are in emu_*.c.
 */
#include "hy_cuda.h"
#include "hy_kernels.h"

#include "hy_cu_body.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_bool g_reversed;

void hy_emu_set_reversed(bool reversed)
{
    atomic_store(&g_reversed, reversed);
}

bool hy_emu_reversed(void)
{
    return atomic_load(&g_reversed);
}

float *hy_emu_shared(size_t floats)
{
    float *p = hy_alloc((floats ? floats : 1) * sizeof *p);
    if (p)
        for (size_t i = 0; i < floats; i++) p[i] = NAN;
    return p;
}

int hy_emu_malloc(hy_cu_stream stream, size_t bytes, void **out, hy_err *err)
{
    (void)stream;
    /* poisoned, as device memory is not zeroed either: a read of what no
     * one wrote shows as NaN in the executor's comparisons */
    *out = hy_alloc(bytes ? bytes : 1);
    if (!*out) return hy_err_set(err, HY_ENOMEM, "emulated device: out of memory (%zu bytes)", bytes);
    memset(*out, 0xff, bytes);
    return HY_OK;
}

void hy_emu_free(hy_cu_stream stream, void *p)
{
    (void)stream;
    hy_free(p);
}

int hy_emu_copy(hy_cu_stream stream, void *dst, const void *src, size_t bytes, hy_cu_dir dir,
                hy_err *err)
{
    (void)stream, (void)dir, (void)err;
    if (bytes) memmove(dst, src, bytes);
    return HY_OK;
}

int hy_emu_copy_rows(hy_cu_stream stream, size_t n, size_t width, const void *src, size_t lds,
                     void *dst, size_t ldd, hy_err *err)
{
    (void)stream, (void)err;
    for (size_t r = 0; r < n; r++)
        memmove((char *)dst + r * ldd, (const char *)src + r * lds, width);
    return HY_OK;
}

int hy_emu_zero(hy_cu_stream stream, void *p, size_t bytes, hy_err *err)
{
    (void)stream, (void)err;
    if (bytes) memset(p, 0, bytes);
    return HY_OK;
}

int hy_emu_sync(hy_cu_stream stream, hy_err *err)
{
    (void)stream, (void)err;
    return HY_OK;
}

int hy_emu_gemm(hy_cu_blas *b, int ta, int tb, int m, int n, int k, float alpha, const float *A,
                size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc,
                hy_err *err)
{
    (void)b, (void)err;
    hy_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
    return HY_OK;
}

int hy_emu_linear(hy_cu_blas *b, int n, int K, int N, const float *X, size_t ldx, const float *W,
                  float *Y, size_t ldy, hy_err *err)
{
    return hy_emu_gemm(b, 0, 1, n, N, K, 1.0f, X, ldx, W, (size_t)K, 0.0f, Y, ldy, err);
}

int hy_emu_linear_bf16(hy_cu_blas *b, int n, int K, int N, const uint16_t *X, size_t ldx,
                       const uint16_t *W, float *Y, size_t ldy, hy_err *err)
{
    (void)b;
    /* both operands widened (exactly), the products in fp32 */
    float *x = malloc((size_t)n * K * sizeof *x), *w = malloc((size_t)N * K * sizeof *w);
    if (!x || !w) {
        free(x);
        free(w);
        return hy_err_set(err, HY_ENOMEM, "emulated bf16 product: out of memory");
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < K; j++) x[(size_t)i * K + j] = hy_cu_bf16_to_f32(X[(size_t)i * ldx + j]);
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = hy_cu_bf16_to_f32(W[i]);
    hy_gemm(0, 1, n, N, K, 1.0f, x, (size_t)K, w, (size_t)K, 0.0f, Y, ldy);
    free(x);
    free(w);
    return HY_OK;
}

int hy_emu_to_bf16(hy_cu_stream stream, size_t n, const float *src, uint16_t *dst, hy_err *err)
{
    (void)stream, (void)err;
    for (size_t i = 0; i < n; i++) dst[i] = hy_cu_f32_to_bf16(src[i]);
    return HY_OK;
}
