/*
 * kernels: the math of the executor as small pure functions over plain fp32
 * arrays. Shapes are in the comments; "stride" arguments are the distance in
 * floats between consecutive tokens (rows), so a kernel can read one slice of
 * a wider fused projection without copying it out.
 *
 * Linear attention uses the [K,V] state layout of transformers and
 * flash-linear-attention: S[dk][dv], read out as o = Sᵀ q. The gated delta rule
 * (Qwen3-Next, Qwen3.5) per token is
 *     S ← exp(g)·S;  S ← S + k (β (v − Sᵀk))ᵀ;  o = Sᵀ q
 * with q, k already L2-normalised and q scaled by dk^-1/2.
 */
#ifndef HY_KERNELS_H
#define HY_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* Y[n][out] = X[n][in] · W[out][in]ᵀ (a bias-free nn.Linear), through BLAS. */
void hy_linear(int n, int in, int out, const float *X, size_t ldx, const float *W, float *Y,
               size_t ldy);
/* C[m][n] = alpha · op(A) · op(B) + beta · C, row-major. op(A) is [m][k]: A is
 * stored [m][k], or [k][m] when ta. op(B) is [k][n]: B is [k][n], or [n][k]
 * when tb. Runs on BLAS threads unless called inside a parallel region. */
void hy_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, size_t lda,
             const float *B, size_t ldb, float beta, float *C, size_t ldc);

/* out[t] = x[t] · rsqrt(mean(x[t]²) + eps) · w over d features, per row t;
 * w is the effective multiplier (1 + weight for Qwen's zero-centred norms). */
void hy_rmsnorm(int n, int d, const float *x, size_t ldx, const float *w, float eps, float *out,
                size_t ldo);
/* In place: x ← x · rsqrt(Σx² + eps) · scale over d features. */
void hy_l2norm_scale(float *x, int d, float eps, float scale);

/* exp for fp32 that the compiler can vectorise (no libm call, no errno):
 * Cephes' range reduction x = n·ln2 + r, |r| <= ln2/2, and its degree-6
 * polynomial; relative error below 2.5e-7 over the clamped range, which is
 * [-87.3, 88.7] (below it the result is FLT_MIN-sized instead of 0, which
 * every caller here treats as 0). Softmax, SiLU, sigmoid and the delta
 * rule's decays run through it; glibc's expf was a fifth of prefill time. */
static inline float hy_expf(float x)
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
    } scale = {.i = ((int32_t)n + 127) << 23};
    return p * scale.f;
}

static inline float hy_sigmoidf(float x)
{
    return 1.0f / (1.0f + hy_expf(-x));
}
static inline float hy_siluf(float x)
{
    return x / (1.0f + hy_expf(-x));
}
/* torch.nn.functional.softplus with beta 1 and threshold 20. */
static inline float hy_softplusf(float x)
{
    return x > 20.0f ? x : log1pf(hy_expf(x));
}

/* Depthwise causal convolution + SiLU over C channels, kernel K.
 * in: [n] rows of C (stride ldi); state: [K-1][C], the previous inputs, oldest
 * first (zeros at a sequence start), updated to the last K-1 inputs;
 * w: [K][C] (the checkpoint's [C][1][K] transposed, tap-major so the inner
 * loop runs over channels); out: [n][C] (stride ldo). */
void hy_conv1d_silu(int n, int C, int K, const float *in, size_t ldi, float *state, const float *w,
                    float *out, size_t ldo);

/* Rotary tables for rotate_half RoPE on the first rd dims of a head:
 * inv_freq[i] = theta^(-2i/rd), i < rd/2. */
void hy_rope_inv_freq(int rd, double theta, float *inv_freq);
/* Rotates x[0..rd) in place for position pos (pairs i and i + rd/2). */
void hy_rope_apply(float *x, int rd, const float *inv_freq, int64_t pos);

/* Inputs of one head of the gated delta rule, rows per token with strides:
 * q, k: [n] rows of dk (q L2-normalised and scaled, k L2-normalised);
 * v: [n] rows of dv; g (log decay) and beta: [n] scalars with stride ldgb. */
typedef struct hy_gdn_in {
    int n, dk, dv;
    const float *q, *k, *v;
    size_t ldq, ldk, ldv;
    const float *g, *beta;
    size_t ldgb;
} hy_gdn_in;

/* Gated delta rule, one head, token by token. S: [dk][dv] in/out; o: [n]
 * rows of dv (stride ldo), or NULL when only the state is wanted; T: NULL, or
 * [dk][dk] in/out advanced as T ← A_n⋯A_1·T with A_t = exp(g_t)(I − β_t k_t k_tᵀ),
 * the transition operator that maps any start state through these tokens. */
void hy_gdn_recurrent(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T);

#define HY_GDN_CHUNK     64
#define HY_MIN_INT(a, b) ((a) < (b) ? (a) : (b))
/* Floats of scratch hy_gdn_chunked needs for one head. */
size_t hy_gdn_chunked_scratch(int dk, int dv);
/* Same contract as hy_gdn_recurrent, computed in chunks of HY_GDN_CHUNK tokens
 * with the WY/UT form (the intra-chunk work becomes small GEMMs). Chunks are
 * counted from the first token of this call. work: hy_gdn_chunked_scratch()
 * floats. */
void hy_gdn_chunked(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T, float *work);

/* Causal softmax attention of one query head over a KV cache.
 * q: [n] rows of hd (ldq), already rotated, for positions pos0 .. pos0+n-1;
 * K, V: [pos0+n] rows of hd (ldk, ldv), rotated keys; o: [n] rows of hd (ldo);
 * scores: scratch of HY_ATTN_BLOCK × (pos0+n) floats. */
#define HY_ATTN_BLOCK 64
void hy_attention(int n, int hd, int64_t pos0, const float *q, size_t ldq, const float *K,
                  size_t ldk, const float *V, size_t ldv, float scale, float *o, size_t ldo,
                  float *scores);

/* Every linear-attention family (RetNet … KDA), its transition operator and
 * the composition of cached segments: hy_la_*. */
#include "kernels/linear_attn.h"

#endif
