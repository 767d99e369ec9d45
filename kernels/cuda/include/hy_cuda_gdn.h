/*
 * The gated delta rule on the device (kernels/cuda/gdn.cu): the gates that
 * prepare a GDN layer's conv output and projection for the delta rule, and
 * the delta rule itself over every value head of one layer, in the chunked
 * (WY/UT) and the token-by-token form. They follow the CPU kernels'
 * contracts (hy_fwd_gdn_layer's gate loop, hy_gdn_chunked, hy_gdn_recurrent
 * in hy_kernels.h) with the executor's layout: one call covers all heads,
 * value head h reading key head h / (Hv / Hk).
 *
 * Every pointer is device memory; hy_cuda.h's conventions hold (row-major,
 * leading dimensions in elements, a launcher queues on `stream` and returns
 * HY_OK, HY_EINVAL for a shape it does not take, or HY_EIO for a failed
 * launch). Each launcher hy_cu_gdn_X has a twin hy_emu_gdn_X over host
 * memory, which refuses what the launcher refuses and returns HY_ENOMEM
 * where it cannot allocate a block's shared memory.
 */
#ifndef HY_CUDA_GDN_H
#define HY_CUDA_GDN_H

#include "hy_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tokens per chunk of hy_cu_gdn_chunked, counted from a call's first token:
 * HY_GDN_CHUNK of the CPU kernel, so both cut a call at the same rows. */
#define HY_CU_GDN_CHUNK 64

/* The gates of one GDN layer over n rows, in place where hy_fwd_gdn_layer
 * computes them on the CPU:
 *   cv: [n] conv output rows (stride ldc) q [Hk·dk] | k [Hk·dk] | v [Hv·dv];
 *       each key head's q ← q·dk^-½ / sqrt(|q|² + 1e-6) and
 *       k ← k / sqrt(|k|² + 1e-6); v untouched.
 *   proj: [n] projection rows (stride ldp) whose conv channels (the first
 *       2·Hk·dk + Hv·dv) are followed by z [Hv·dv], b [Hv], a [Hv].
 *   beta, g: [n][Hv] out: beta = beta_scale·sigmoid(b),
 *       g = neg_A[h]·softplus(a + dt_bias[h]).
 *   neg_A, dt_bias: [Hv]. */
typedef struct hy_cu_gdn_gate_args {
    int n, Hk, Hv, dk, dv;
    float *cv;
    size_t ldc;
    const float *proj;
    size_t ldp;
    const float *neg_A, *dt_bias;
    float beta_scale;
    float *beta, *g;
} hy_cu_gdn_gate_args;

int hy_cu_gdn_gates(hy_cu_stream stream, const hy_cu_gdn_gate_args *a, hy_err *err);
/* Its twin on the host (hy_cuda.h, "the emulation"; emu_gdn.c). */
int hy_emu_gdn_gates(hy_cu_stream stream, const hy_cu_gdn_gate_args *a, hy_err *err);

/* The delta rule of one layer's Hv value heads over n tokens.
 *   q, k: [n] rows (strides ldq, ldk) of Hk heads of dk, key head hk at
 *       column hk·dk (q normalised and scaled, k normalised: the gates'
 *       output); value head h reads key head h / (Hv / Hk).
 *   v: [n] rows (stride ldv), value head h at column h·dv.
 *   g, beta: [n] rows (stride ldgb, usually Hv) of Hv log-decays and betas.
 *   S: [Hv][dk][dv] in/out, the heads' states.
 *   o: [n] rows (stride ldo) with head h's output at column h·dv, or NULL
 *       when only the states are wanted.
 *   T: NULL, or [Hv][dk][dk] in/out, each head's transition operator
 *       advanced as T ← A_n⋯A_1·T (hy_gdn_recurrent's contract).
 * dk and dv are each one of 16, 32, 64, 128; Hv a multiple of Hk. */
typedef struct hy_cu_gdn_args {
    int n, Hk, Hv, dk, dv;
    const float *q, *k, *v;
    size_t ldq, ldk, ldv;
    const float *g, *beta;
    size_t ldgb;
    float *S;
    float *o;
    size_t ldo;
    float *T;
} hy_cu_gdn_args;

/* hy_gdn_chunked per head: chunks of HY_CU_GDN_CHUNK tokens from the call's
 * first token, the last one shorter when n is not a multiple. */
int hy_cu_gdn_chunked(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err);
/* hy_gdn_recurrent per head: token by token (decode steps, single tokens). */
int hy_cu_gdn_recurrent(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err);
/* Their twins on the host (hy_cuda.h, "the emulation"; emu_gdn.c). */
int hy_emu_gdn_chunked(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err);
int hy_emu_gdn_recurrent(hy_cu_stream stream, const hy_cu_gdn_args *a, hy_err *err);

#ifdef __cplusplus
}
#endif

#endif
