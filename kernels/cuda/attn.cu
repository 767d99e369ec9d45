/*
 * Causal softmax attention and a hole's keys and values on the device, the
 * kernels over attn_body.h's bodies (the design is described there).
 *
 *   attn_kernel     grid (row tiles, Hkv, splits), HY_CU_ATTN_THREADS threads,
 *                   hy_cu_attn_shared_floats(hd) floats of dynamic shared
 *                   memory (58–165 KiB for hd 64–512: above 48 KiB the kernel
 *                   is allowed it first);
 *   merge_kernel    one thread per output value, when split;
 *   hole_kv_kernel  one thread per key (and value) element.
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
    if (a->n <= 0 || a->Hkv <= 0 || a->Hq % a->Hkv != 0 || a->hd <= 0) return 0;
    return hy_cu_attn_work_floats(a, hy_cu_attn_splits(a));
}

extern "C" int hy_cu_attention(hy_cu_stream stream, const hy_cu_attn *a, float *work,
                               size_t work_floats, hy_err *err)
{
    if (a->n < 0 || a->Hq < 1 || a->Hkv < 1 || a->Hq % a->Hkv != 0)
        return hy_err_set(err, HY_EINVAL, "attention: %d rows of %d query heads over %d KV heads",
                          a->n, a->Hq, a->Hkv);
    if (a->hd < 1 || a->hd > HY_CU_ATTN_MAX_HD)
        return hy_err_set(err, HY_EINVAL, "attention: head dim %d outside [1, %d]", a->hd,
                          HY_CU_ATTN_MAX_HD);
    if (a->n == 0) return HY_OK;
    if (!a->q || !a->K || !a->V || !a->o || a->ctx < 1 || (!a->pos && a->pos0 < 0) ||
        (!a->pos && a->pos0 + a->n > a->ctx))
        return hy_err_set(err, HY_EINVAL,
                          "attention: missing operand, or rows at %lld + %d past a context of %lld",
                          (long long)a->pos0, a->n, (long long)a->ctx);
    const int tiles = hy_cu_attn_row_tiles(a);
    if (a->Hkv > 65535)
        return hy_err_set(err, HY_EINVAL, "attention: %d KV heads (a grid holds 65535)", a->Hkv);
    int splits = hy_cu_attn_splits(a);
    if (!work || work_floats < hy_cu_attn_work_floats(a, splits)) splits = 1;

    const size_t shared = hy_cu_attn_shared_floats(a->hd) * sizeof(float);
    int rc = hy_cu_check(
        cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared),
        "attention: shared memory", err);
    if (rc != HY_OK) return rc;
    const dim3 grid((unsigned)tiles, (unsigned)a->Hkv, (unsigned)splits);
    attn_kernel<<<grid, HY_CU_ATTN_THREADS, shared, (cudaStream_t)stream>>>(*a, splits, work);
    rc = hy_cu_check(cudaGetLastError(), "attention", err);
    if (rc != HY_OK || splits == 1) return rc;
    const size_t total = (size_t)a->n * a->Hq * a->hd;
    merge_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(*a, splits,
                                                                                    work, total);
    return hy_cu_check(cudaGetLastError(), "attention: merge", err);
}

extern "C" int hy_cu_hole_kv_write(hy_cu_stream stream, const hy_cu_hole_kv *h, hy_err *err)
{
    if (h->nb < 0 || h->Hkv < 1 || h->hd < 1 || h->rd < 0 || h->rd % 2 || h->rd > h->hd ||
        h->p0 < 0 || (h->dtype != HY_CU_F32 && h->dtype != HY_CU_BF16))
        return hy_err_set(err, HY_EINVAL,
                          "hole K/V: %d tokens of %d heads of %d dims, rotary %d, dtype %d at %lld",
                          h->nb, h->Hkv, h->hd, h->rd, h->dtype, (long long)h->p0);
    if (h->nb == 0) return HY_OK;
    const size_t row = (size_t)h->Hkv * h->hd;
    if (!h->eK || !h->eV || !h->K || !h->V || (h->rd && !h->rope) || h->ldk < row || h->ldv < row)
        return hy_err_set(err, HY_EINVAL, "hole K/V: missing operand or rows narrower than %zu",
                          row);
    const size_t total = (size_t)h->nb * row;
    hole_kv_kernel<<<(unsigned)((total + 255) / 256), 256, 0, (cudaStream_t)stream>>>(*h, total);
    return hy_cu_check(cudaGetLastError(), "hole K/V", err);
}
