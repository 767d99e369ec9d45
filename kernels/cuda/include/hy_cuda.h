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

/* --- device memory --------------------------------------------------------- */
/* cudaMalloc, cudaFree, cudaMemcpyAsync (then, for copies to the host,
 * the stream's completion), cudaMemsetAsync to 0, cudaStreamSynchronize. */
int hy_cu_malloc(hy_cu_stream stream, size_t bytes, void **out, hy_err *err);
void hy_cu_free(hy_cu_stream stream, void *p);
typedef enum hy_cu_dir { HY_CU_H2D = 1, HY_CU_D2H = 2, HY_CU_D2D = 3 } hy_cu_dir;
int hy_cu_copy(hy_cu_stream stream, void *dst, const void *src, size_t bytes, hy_cu_dir dir,
               hy_err *err);
/* n rows of `width` bytes from src (stride lds bytes) to dst (stride ldd
 * bytes), device to device: cudaMemcpy2DAsync. */
int hy_cu_copy_rows(hy_cu_stream stream, size_t n, size_t width, const void *src, size_t lds,
                    void *dst, size_t ldd, hy_err *err);
int hy_cu_zero(hy_cu_stream stream, void *p, size_t bytes, hy_err *err);
int hy_cu_sync(hy_cu_stream stream, hy_err *err);
/* The device the calling thread uses (cudaSetDevice), checked to exist:
 * HY_ENOTFOUND "no CUDA device: …" or naming the ordinal past the count. */
int hy_cu_use_device(int device, char *name, size_t cap, hy_err *err);

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

/* --- the emulation --------------------------------------------------------------
 *
 * Every launcher hy_cu_X has a twin hy_emu_X with the same signature that
 * runs on the host, over host memory: the kernel's bodies (the same text
 * nvcc compiles) for every block and thread, phase by phase, and the
 * products through the CPU's BLAS. The device executor takes either set
 * (model/exec_dev.c), so `make test` runs its whole orchestration — every
 * launch, pointer and stride — against the CPU executor on any machine; a
 * device only changes who runs the bodies. The stream is ignored. Built
 * whether or not nvcc is present (libhy_cuda_emu). */
int hy_emu_malloc(hy_cu_stream stream, size_t bytes, void **out, hy_err *err);
void hy_emu_free(hy_cu_stream stream, void *p);
int hy_emu_copy(hy_cu_stream stream, void *dst, const void *src, size_t bytes, hy_cu_dir dir,
                hy_err *err);
int hy_emu_copy_rows(hy_cu_stream stream, size_t n, size_t width, const void *src, size_t lds,
                     void *dst, size_t ldd, hy_err *err);
int hy_emu_zero(hy_cu_stream stream, void *p, size_t bytes, hy_err *err);
int hy_emu_sync(hy_cu_stream stream, hy_err *err);
/* The products: hy_cu_linear's contracts on the host (hy_gemm); the handle
 * is not used (NULL). */
int hy_emu_linear(hy_cu_blas *b, int n, int K, int N, const float *X, size_t ldx, const float *W,
                  float *Y, size_t ldy, hy_err *err);
int hy_emu_linear_bf16(hy_cu_blas *b, int n, int K, int N, const uint16_t *X, size_t ldx,
                       const uint16_t *W, float *Y, size_t ldy, hy_err *err);
int hy_emu_gemm(hy_cu_blas *b, int ta, int tb, int m, int n, int k, float alpha, const float *A,
                size_t lda, const float *B, size_t ldb, float beta, float *C, size_t ldc,
                hy_err *err);
int hy_emu_to_bf16(hy_cu_stream stream, size_t n, const float *src, uint16_t *dst, hy_err *err);
/* How the twins run a block's threads within a phase: in order (the
 * default), or reversed — a phase whose result depends on the order reads
 * what another thread of the same phase writes, a race on the device. For
 * the tests; process-wide. */
void hy_emu_set_reversed(bool reversed);
bool hy_emu_reversed(void);
/* A block's shared memory for the twins: floats, filled with NaN (what no
 * phase wrote reads as NaN); freed with hy_free. NULL when out of memory. */
float *hy_emu_shared(size_t floats);

#ifdef __cplusplus
}
#endif

#endif
