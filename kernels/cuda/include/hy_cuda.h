/*
 * The CUDA kernels (kernels/cuda/): what the device executor runs for the
 * Gated DeltaNet family, each kernel's arithmetic in a body the host
 * compiler builds too (hy_cu_body.h). Built when the CUDA toolkit and nvcc
 * are found (HY_HAVE_CUDA_KERNELS); the device is needed only to run them.
 *
 * Conventions: every pointer argument is device memory unless it says
 * otherwise; matrices are row-major with explicit leading dimensions (in
 * elements), as the CPU kernels' (hy_kernels.h) whose contracts these follow;
 * a launcher queues its kernel on `stream` and returns HY_OK, or HY_EIO with
 * the CUDA error in err (a launch failure; an error of the kernel itself
 * shows at the next synchronisation).
 */
#ifndef HY_CUDA_H
#define HY_CUDA_H

#include "hy_common.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaStream_t without the runtime's headers; NULL: the legacy stream. */
typedef struct CUstream_st *hy_cu_stream;

/* HY_OK, or HY_EIO naming the CUDA error and what was launched. */
int hy_cu_check(int cuda_error, const char *what, hy_err *err);

/* --- products (cuBLAS) --------------------------------------------------- */
typedef struct hy_cu_blas hy_cu_blas;
/* A cuBLAS handle issuing on stream. */
int hy_cu_blas_new(hy_cu_stream stream, hy_cu_blas **out, hy_err *err);
void hy_cu_blas_free(hy_cu_blas *b);
/* Y [n][N] = X [n][K] · Wᵀ, W [N][K]: hy_linear's contract, fp32 throughout. */
int hy_cu_linear(hy_cu_blas *b, int n, int K, int N, const float *X, size_t ldx, const float *W,
                 float *Y, size_t ldy, hy_err *err);
/* The same with X and W in bf16, products accumulated in fp32, Y fp32. */
int hy_cu_linear_bf16(hy_cu_blas *b, int n, int K, int N, const uint16_t *X, size_t ldx,
                      const uint16_t *W, float *Y, size_t ldy, hy_err *err);
/* C [m][n] = alpha · op(A) · op(B) + beta · C: hy_gemm's contract (ta: A
 * stored [k][m]; tb: B stored [n][k]), fp32. */
int hy_cu_gemm(hy_cu_blas *b, int ta, int tb, int m, int n, int k, float alpha, const float *A,
               size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc,
               hy_err *err);
/* dst [n] = bf16(src [n]), rounded to nearest even (a GEMM's bf16 input). */
int hy_cu_to_bf16(hy_cu_stream stream, size_t n, const float *src, uint16_t *dst, hy_err *err);

#ifdef __cplusplus
}
#endif

#endif
