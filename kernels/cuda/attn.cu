/*
 * Causal softmax attention and a hole's keys and values on the device, the
 * kernels over attn_body.h's bodies (the design is described there).
 *
 *   attn_kernel     grid (row tiles, Hkv, splits), HY_CU_ATTN_THREADS threads,
 *                   hy_cu_attn_shared_floats(hd) floats of dynamic shared
 *                   memory (58–165 KiB for hd 64–512: above 48 KiB the kernel
 *                   is allowed it first);
 *   merge_kernel    one thread per output value, when split;
 *   hole_kv_kernel  one thread per key (and value) element;
 * the last two in blocks of HY_CU_ATTN_ELEM_THREADS. The launchers' checks
 * and the number of splits are attn_body.h's, which the twins (emu_attn.c)
 * use too.
 */
#include "hy_cuda_attn.h"

#include "attn_body.h"

#include <cuda_runtime.h>

static __global__ void __launch_bounds__(HY_CU_ATTN_THREADS)
    attn_kernel(hy_cu_attn a, int splits, float *work)
{
    extern __shared__ float attn_sh[];
    const int tid = (int)threadIdx.x, nthr = (int)blockDim.x;
    hy_cu_attn_plan p;
    hy_cu_attn_plan_of(&a, splits, (int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, &p);
    hy_cu_attn_start(&a, &p, tid, nthr, attn_sh);
    __syncthreads();
    for (int64_t kt = p.t0; kt < p.t1; kt++) {
        hy_cu_attn_load(&a, &p, kt, tid, nthr, attn_sh);
        __syncthreads();
        hy_cu_attn_scores(&a, &p, kt, tid, nthr, attn_sh);
        __syncthreads();
        hy_cu_attn_softmax(&a, &p, tid, nthr, attn_sh);
        __syncthreads();
        hy_cu_attn_accumulate(&a, &p, kt, tid, nthr, attn_sh);
        __syncthreads();
    }
    hy_cu_attn_finish(&a, &p, work, tid, nthr, attn_sh);
}

static __global__ void merge_kernel(hy_cu_attn a, int splits, const float *work, size_t total)
{
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < total) hy_cu_attn_merge(&a, splits, work, e);
}

static __global__ void hole_kv_kernel(hy_cu_hole_kv h, size_t total)
{
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < total) hy_cu_hole_kv_elem(&h, e);
}

extern "C" size_t hy_cu_attention_work(const hy_cu_attn *a)
{
    return hy_cu_attn_work_wanted(a);
}

extern "C" int hy_cu_attention(hy_cu_stream stream, const hy_cu_attn *a, float *work,
                               size_t work_floats, hy_err *err)
{
    int rc = hy_cu_attention_check(a, err);
    if (rc != HY_OK || a->n == 0) return rc;
    const int splits = hy_cu_attn_launch_splits(a, work, work_floats);
    const size_t shared = hy_cu_attn_shared_floats(a->hd) * sizeof(float);
    rc = hy_cu_check(
        cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared),
        "attention: shared memory", err);
    if (rc != HY_OK) return rc;
    const dim3 grid((unsigned)hy_cu_attn_row_tiles(a), (unsigned)a->Hkv, (unsigned)splits);
    attn_kernel<<<grid, HY_CU_ATTN_THREADS, shared, (cudaStream_t)stream>>>(*a, splits, work);
    rc = hy_cu_check(cudaGetLastError(), "attention", err);
    if (rc != HY_OK || splits == 1) return rc;
    const size_t total = (size_t)a->n * a->Hq * a->hd, T = HY_CU_ATTN_ELEM_THREADS;
    merge_kernel<<<(unsigned)((total + T - 1) / T), (unsigned)T, 0, (cudaStream_t)stream>>>(
        *a, splits, work, total);
    return hy_cu_check(cudaGetLastError(), "attention: merge", err);
}

extern "C" int hy_cu_hole_kv_write(hy_cu_stream stream, const hy_cu_hole_kv *h, hy_err *err)
{
    const int rc = hy_cu_hole_kv_check(h, err);
    if (rc != HY_OK || h->nb == 0) return rc;
    const size_t total = (size_t)h->nb * h->Hkv * h->hd, T = HY_CU_ATTN_ELEM_THREADS;
    hole_kv_kernel<<<(unsigned)((total + T - 1) / T), (unsigned)T, 0, (cudaStream_t)stream>>>(
        *h, total);
    return hy_cu_check(cudaGetLastError(), "hole K/V", err);
}
