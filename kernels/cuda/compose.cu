/*
 * An entry's linear heads composed into a request's states on the device,
 * the kernel over compose_body.h's bodies (the design is described there).
 *
 *   compose_kernel  grid (ceil(dv / C), heads), C = hy_cu_compose_cols(dk)
 *                   columns per block, HY_CU_COMPOSE_THREADS threads,
 *                   hy_cu_compose_shared_floats(dk) floats (32 KiB) of dynamic
 *                   shared memory: one launch for the layer, each head in its
 *                   own forms; dense T̃·S products in the kernel, not cuBLAS
 *                   (a layer's heads mix forms, and each product is small).
 *
 * The launcher's check is compose_body.h's, which the twin (emu_attn.c)
 * makes too.
 */
#include "hy_cuda_attn.h"

#include "compose_body.h"

#include <cuda_runtime.h>

static __global__ void __launch_bounds__(HY_CU_COMPOSE_THREADS) compose_kernel(hy_cu_compose c)
{
    extern __shared__ float compose_sh[];
    const int tid = (int)threadIdx.x, nthr = (int)blockDim.x;
    const int bx = (int)blockIdx.x, h = (int)blockIdx.y;
    hy_cu_compose_load(&c, bx, h, tid, nthr, compose_sh);
    __syncthreads();
    hy_cu_compose_project(&c, bx, h, tid, nthr, compose_sh);
    __syncthreads();
    hy_cu_compose_combine(&c, bx, h, tid, nthr, compose_sh);
}

extern "C" int hy_cu_compose_layer(hy_cu_stream stream, const hy_cu_compose *c, hy_err *err)
{
    const int rc = hy_cu_compose_check(c, err);
    if (rc != HY_OK || c->heads == 0) return rc;
    const dim3 grid((unsigned)hy_cu_compose_col_blocks(c), (unsigned)c->heads);
    const size_t shared = hy_cu_compose_shared_floats(c->dk) * sizeof(float);
    compose_kernel<<<grid, HY_CU_COMPOSE_THREADS, shared, (cudaStream_t)stream>>>(*c);
    return hy_cu_check(cudaGetLastError(), "compose", err);
}
