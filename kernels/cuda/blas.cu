/*
 * Products on the device through cuBLAS, with the CPU kernels' row-major
 * contracts (hy_linear, hy_gemm). cuBLAS is column-major: a row-major
 * [r][c] matrix with leading dimension ld is its column-major transpose, so
 * C = op(A)·op(B) row-major is Cᵀ = op(B)ᵀ·op(A)ᵀ column-major — the same
 * call with the operands swapped.
 */
#include "hy_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

struct hy_cu_blas {
    cublasHandle_t h;
    hy_cu_stream stream;
};

extern "C" int hy_cu_check(int e, const char *what, hy_err *err)
{
    if (e == cudaSuccess) return HY_OK;
    return hy_err_set(err, HY_EIO, "%s: CUDA error %d (%s)", what, e,
                      cudaGetErrorString((cudaError_t)e));
}

static int blas_check(cublasStatus_t s, const char *what, hy_err *err)
{
    if (s == CUBLAS_STATUS_SUCCESS) return HY_OK;
    return hy_err_set(err, HY_EIO, "%s: cuBLAS status %d (%s)", what, (int)s,
                      cublasGetStatusString(s));
}

extern "C" int hy_cu_blas_new(hy_cu_stream stream, hy_cu_blas **out, hy_err *err)
{
    *out = NULL;
    hy_cu_blas *b = (hy_cu_blas *)calloc(1, sizeof *b);
    if (!b) return hy_err_set(err, HY_ENOMEM, "out of memory");
    int rc = blas_check(cublasCreate(&b->h), "cublasCreate", err);
    if (rc == HY_OK) rc = blas_check(cublasSetStream(b->h, stream), "cublasSetStream", err);
    /* fp32 products stay fp32: no TF32 unless asked */
    if (rc == HY_OK)
        rc = blas_check(cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err);
    if (rc != HY_OK) {
        hy_cu_blas_free(b);
        return rc;
    }
    b->stream = stream;
    *out = b;
    return HY_OK;
}

extern "C" void hy_cu_blas_free(hy_cu_blas *b)
{
    if (!b) return;
    if (b->h) cublasDestroy(b->h);
    free(b);
}

extern "C" int hy_cu_gemm(hy_cu_blas *b, int ta, int tb, int m, int n, int k, float alpha,
                          const float *A, size_t lda, const float *B, size_t ldb, float beta,
                          float *C, size_t ldc, hy_err *err)
{
    /* column-major: Cᵀ [n][m] = op(B)ᵀ · op(A)ᵀ; B's row-major storage is
     * op(B)ᵀ's column-major one when tb is 0 */
    return blas_check(cublasSgemm(b->h, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                  ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, B, (int)ldb, A,
                                  (int)lda, &beta, C, (int)ldc),
                      "cublasSgemm", err);
}

extern "C" int hy_cu_linear(hy_cu_blas *b, int n, int K, int N, const float *X, size_t ldx,
                            const float *W, float *Y, size_t ldy, hy_err *err)
{
    return hy_cu_gemm(b, 0, 1, n, N, K, 1.0f, X, ldx, W, (size_t)K, 0.0f, Y, ldy, err);
}

extern "C" int hy_cu_linear_bf16(hy_cu_blas *b, int n, int K, int N, const uint16_t *X, size_t ldx,
                                 const uint16_t *W, float *Y, size_t ldy, hy_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    /* Yᵀ [N][n] = W · Xᵀ column-major: W's row-major [N][K] is a
     * column-major [K][N] transposed */
    return blas_check(cublasGemmEx(b->h, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one, W, CUDA_R_16BF, K,
                                   X, CUDA_R_16BF, (int)ldx, &zero, Y, CUDA_R_32F, (int)ldy,
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                      "cublasGemmEx (bf16)", err);
}

#include "hy_cu_body.h"

__global__ void to_bf16_kernel(size_t n, const float *src, uint16_t *dst)
{
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = hy_cu_f32_to_bf16(src[i]);
}

extern "C" int hy_cu_to_bf16(hy_cu_stream stream, size_t n, const float *src, uint16_t *dst,
                             hy_err *err)
{
    if (n == 0) return HY_OK;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    to_bf16_kernel<<<blocks, 256, 0, stream>>>(n, src, dst);
    return hy_cu_check(cudaGetLastError(), "to_bf16", err);
}

/* --- device memory --------------------------------------------------------- */

extern "C" int hy_cu_malloc(hy_cu_stream stream, size_t bytes, void **out, hy_err *err)
{
    (void)stream;
    *out = NULL;
    const cudaError_t e = cudaMalloc(out, bytes ? bytes : 1);
    if (e == cudaSuccess) return HY_OK;
    *out = NULL;
    return hy_err_set(err, e == cudaErrorMemoryAllocation ? HY_ENOMEM : HY_EIO,
                      "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
}

extern "C" void hy_cu_free(hy_cu_stream stream, void *p)
{
    (void)stream;
    if (p) cudaFree(p);
}

extern "C" int hy_cu_copy(hy_cu_stream stream, void *dst, const void *src, size_t bytes,
                          hy_cu_dir dir, hy_err *err)
{
    if (bytes == 0) return HY_OK;
    const cudaMemcpyKind k = dir == HY_CU_H2D   ? cudaMemcpyHostToDevice
                             : dir == HY_CU_D2H ? cudaMemcpyDeviceToHost
                                                : cudaMemcpyDeviceToDevice;
    int rc = hy_cu_check(cudaMemcpyAsync(dst, src, bytes, k, stream), "cudaMemcpyAsync", err);
    /* the host reads what it copied back as soon as this returns */
    if (rc == HY_OK && dir == HY_CU_D2H)
        rc = hy_cu_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", err);
    return rc;
}

extern "C" int hy_cu_zero(hy_cu_stream stream, void *p, size_t bytes, hy_err *err)
{
    if (bytes == 0) return HY_OK;
    return hy_cu_check(cudaMemsetAsync(p, 0, bytes, stream), "cudaMemsetAsync", err);
}

extern "C" int hy_cu_sync(hy_cu_stream stream, hy_err *err)
{
    return hy_cu_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", err);
}

extern "C" int hy_cu_use_device(int device, char *name, size_t cap, hy_err *err)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        return hy_err_set(err, HY_ENOTFOUND, "no CUDA device: cudaGetDeviceCount: %s",
                          e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    if (device < 0 || device >= count)
        return hy_err_set(err, HY_ENOTFOUND, "no CUDA device %d: this machine has %d (0 … %d)",
                          device, count, count - 1);
    int rc = hy_cu_check(cudaSetDevice(device), "cudaSetDevice", err);
    cudaDeviceProp prop;
    if (rc == HY_OK && name && cap &&
        cudaGetDeviceProperties(&prop, device) == cudaSuccess)
        snprintf(name, cap, "%s", prop.name);
    return rc;
}

extern "C" int hy_cu_copy_rows(hy_cu_stream stream, size_t n, size_t width, const void *src,
                               size_t lds, void *dst, size_t ldd, hy_err *err)
{
    if (n == 0 || width == 0) return HY_OK;
    return hy_cu_check(cudaMemcpy2DAsync(dst, ldd, src, lds, width, n, cudaMemcpyDeviceToDevice,
                                         stream),
                       "cudaMemcpy2DAsync", err);
}
