/*
 * The arithmetic of the CUDA kernels, written once for two compilers.
 *
 * Each kernel in kernels/cuda/ keeps its arithmetic in a body: a function of
 * one element, one row, or — for kernels whose threads cooperate — one phase
 * of a block (what a thread does between two barriers), given its thread
 * index, the block's thread count and the block's shared memory. nvcc
 * compiles a body as a __device__ function the __global__ kernel calls;
 * the host compiler (gcc, in `make test`) compiles the same text as a static
 * inline C function, and tests/kernels/test_cuda_*.c run it over whole
 * problems — every block, each phase for every thread before the next phase,
 * which is what a barrier guarantees — against the CPU kernels (hy_*).
 *
 * A body is therefore written in the subset of C and CUDA C++ both accept:
 * no restrict, no designated initialisers or compound literals, no C++
 * features, no warp intrinsics (a phase cannot see another thread's
 * registers); shared memory is a float pointer the caller sizes.
 */
#ifndef HY_CU_BODY_H
#define HY_CU_BODY_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define HY_CU_BODY __host__ __device__ static inline
#else
#define HY_CU_BODY static inline
#endif

/* exp for fp32 with the CPU kernels' range reduction and polynomial
 * (hy_expf): the device computes the decays, gates and softmax weights the
 * host computes, to the rounding of the operations' order. */
HY_CU_BODY float hy_cu_expf(float x)
{
    x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    const float n = floorf(x * 1.44269504088896341f + 0.5f);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    const float z = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * z + r + 1.0f;
    union {
        int32_t i;
        float f;
    } scale;
    scale.i = ((int32_t)n + 127) << 23;
    return p * scale.f;
}

HY_CU_BODY float hy_cu_sigmoidf(float x)
{
    return 1.0f / (1.0f + hy_cu_expf(-x));
}

HY_CU_BODY float hy_cu_siluf(float x)
{
    return x / (1.0f + hy_cu_expf(-x));
}

/* softplus with beta 1 and threshold 20, as torch's. */
HY_CU_BODY float hy_cu_softplusf(float x)
{
    return x > 20.0f ? x : log1pf(hy_cu_expf(x));
}

/* bf16 ↔ fp32: the high half of the fp32 bits, rounded to nearest even
 * (NaN kept quiet), as hy_f32_to_bf16 and torch round. */
HY_CU_BODY float hy_cu_bf16_to_f32(uint16_t b)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.u = (uint32_t)b << 16;
    return v.f;
}

HY_CU_BODY uint16_t hy_cu_f32_to_bf16(float f)
{
    union {
        uint32_t u;
        float f;
    } v;
    v.f = f;
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}

#endif
