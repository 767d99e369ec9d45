/*
 * The gated delta rule on the device: the gates, the chunked WY/UT form and
 * the token-by-token form over every value head of a layer
 * (include/hy_cuda_gdn.h). The arithmetic is in gdn_body.h, whose opening
 * comment describes each kernel's blocks, threads, shared memory and
 * phases; a kernel here is those bodies in order with a barrier between two
 * phases, and a launcher checks the shapes (gdn_body.h's checks, which the
 * twins in emu_gdn.c make too), sizes the grid and the shared memory, and
 * queues it.
 */
#include "hy_cuda_gdn.h"

#include "gdn_body.h"

#include <cuda_runtime.h>

/* Past this many bytes of dynamic shared memory a kernel must opt in. */
#define DEFAULT_SMEM_LIMIT (48 * 1024)

static __global__ void __launch_bounds__(HY_CU_GDN_GATE_THREADS)
    gdn_gates_kernel(hy_cu_gdn_gate_args a)
{
    __shared__ float sh[HY_CU_GDN_GATE_THREADS];
    const int t = (int)blockIdx.x, vec = (int)blockIdx.y;
    const int tid = (int)threadIdx.x, nthr = (int)blockDim.x;
    hy_cu_gdn_gate_square(&a, t, vec, tid, nthr, sh);
    __syncthreads();
    for (int half = nthr / 2; half > 0; half /= 2) {
        hy_cu_gdn_gate_tree(half, tid, sh);
        __syncthreads();
    }
    hy_cu_gdn_gate_scale(&a, t, vec, tid, nthr, sh);
}

static __global__ void __launch_bounds__(HY_CU_GDN_REC_COLS) gdn_recurrent_kernel(hy_cu_gdn_args a)
{
    extern __shared__ float sh[];
    const int h = (int)blockIdx.x, tile = (int)blockIdx.y;
    const int tid = (int)threadIdx.x, nthr = (int)blockDim.x;
    hy_cu_gdn_rec_load(&a, h, tile, tid, nthr, sh);
    for (int t = 0; t < a.n; t++) {
        __syncthreads(); /* every thread is done with the previous token's k, q */
        hy_cu_gdn_rec_stage(&a, h, t, tid, nthr, sh);
        __syncthreads();
        hy_cu_gdn_rec_step(&a, h, tile, t, tid, nthr, sh);
    }
    /* a thread stores the column only it touched: no barrier needed */
    hy_cu_gdn_rec_store(&a, h, tile, tid, nthr, sh);
}

static __global__ void __launch_bounds__(HY_CU_GDN_CHUNK_THREADS)
    gdn_chunked_kernel(hy_cu_gdn_args a)
{
    extern __shared__ float sh[];
    const int h = (int)blockIdx.x, tid = (int)threadIdx.x, nthr = (int)blockDim.x;
    for (int c0 = 0; c0 < a.n; c0 += HY_CU_GDN_CHUNK)
        for (int ph = 0; ph < HY_CU_GDN_NPHASES; ph++) {
            if (!hy_cu_gdn_chunk_runs(&a, ph)) continue; /* the same for the whole block */
            hy_cu_gdn_chunk_phase(&a, ph, h, c0, tid, nthr, sh);
            __syncthreads();
        }
}

extern "C" int hy_cu_gdn_gates(hy_cu_stream stream, const hy_cu_gdn_gate_args *a, hy_err *err)
{
    const int rc = hy_cu_gdn_gates_check(a, err);
    if (rc != HY_OK || a->n == 0) return rc;
    const dim3 grid((unsigned)a->n, (unsigned)(2 * a->Hk));
    gdn_gates_kernel<<<grid, HY_CU_GDN_GATE_THREADS, 0, stream>>>(*a);
    return hy_cu_check(cudaGetLastError(), "gdn_gates", err);
}

extern "C" int hy_cu_gdn_recurrent(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err)
{
    int rc = hy_cu_gdn_check(a, "gdn_recurrent", err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int nthr = HY_CU_GDN_REC_COLS;
    const dim3 grid((unsigned)a->Hv, (unsigned)((hy_cu_gdn_rec_width(a) + nthr - 1) / nthr));
    const size_t bytes = hy_cu_gdn_rec_floats(a->dk, nthr) * sizeof(float);
    gdn_recurrent_kernel<<<grid, nthr, bytes, stream>>>(*a);
    return hy_cu_check(cudaGetLastError(), "gdn_recurrent", err);
}

extern "C" int hy_cu_gdn_chunked(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err)
{
    int rc = hy_cu_gdn_check(a, "gdn_chunked", err);
    if (rc != HY_OK || a->n == 0) return rc;
    /* the chunk's working set: 129 KiB at dk = dv = 128 (gdn_body.h) */
    const size_t bytes = hy_cu_gdn_chunk_floats(a->dk, a->dv) * sizeof(float);
    if (bytes > DEFAULT_SMEM_LIMIT) {
        rc = hy_cu_check(cudaFuncSetAttribute(gdn_chunked_kernel,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)bytes),
                         "gdn_chunked: shared memory limit", err);
        if (rc != HY_OK) return rc;
    }
    gdn_chunked_kernel<<<(unsigned)a->Hv, HY_CU_GDN_CHUNK_THREADS, bytes, stream>>>(*a);
    return hy_cu_check(cudaGetLastError(), "gdn_chunked", err);
}
