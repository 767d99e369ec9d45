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

#include "hy_common.h"

/* Y[n][out] = X[n][in] · W[out][in]ᵀ (a bias-free nn.Linear), through BLAS. */
void hy_linear(int n, int in, int out, const float *X, size_t ldx, const float *W, float *Y,
               size_t ldy);
/* hy_linear with W[out][in] in bf16 (a checkpoint's own bytes, half of
 * fp32's), accumulated in fp32. Up to 4 rows (decode) each weight row is
 * widened as it streams, X staying fp32. More rows: with bf16_math on a CPU
 * with AVX512-BF16, X is rounded to bf16 and multiplied pairwise in hardware
 * (vdpbf16ps, about twice sgemm's rate); otherwise W is widened a panel at a
 * time for sgemm and X stays fp32 (the fp32 path's sums, reordered). */
void hy_linear_bf16(int n, int in, int out, const float *X, size_t ldx, const uint16_t *W, float *Y,
                    size_t ldy, bool bf16_math);
/* Whether hy_linear_bf16 of n rows rounds X to bf16 (bf16_math on this build's CPU). */
bool hy_linear_bf16_rounds_x(int n, bool bf16_math);
/* A weight matrix [out][in] kept in 8 bits: value (o, i) is
 * q[k] · scale[k / HY_Q8_BLOCK] with k = off + o·in + i — blocks of 32
 * consecutive values of the buffer holding the matrix, one fp32 scale each
 * (1.125 bytes a weight). */
#define HY_Q8_BLOCK 32
typedef struct hy_q8w {
    const int8_t *q;     /* the buffer's values */
    const float *scale;  /* [ceil(values / HY_Q8_BLOCK)] */
    size_t off;          /* the matrix's first value in the buffer */
} hy_q8w;
/* n values into q and their blocks' scales (symmetric: the block's largest
 * magnitude is ±127), blocks counted from x[0]. */
void hy_q8_quantize(const float *x, size_t n, int8_t *q, float *scale);
/* hy_linear with W in q8, accumulated in fp32. Up to 4 rows (decode) W
 * streams once: on a CPU with AVX512-BW and rows of whole blocks, each row of
 * X is rounded to int16 steps of its largest value / 32767 and a block's
 * products summed in integers (vpdpwssd), then scaled; otherwise each weight
 * row is widened to fp32. More rows: W widened a panel at a time for sgemm,
 * X staying fp32 (the products of the dequantised values). */
void hy_linear_q8(int n, int in, int out, const float *X, size_t ldx, const hy_q8w *W, float *Y,
                  size_t ldy);
/* Whether hy_linear_q8 of n rows of width in rounds X to int16 (with the
 * matrix starting on a block), and that rounding of row x [in] into out. */
bool hy_linear_q8_rounds_x(int n, int in);
void hy_q8_round_x(const float *x, int in, float *out);
/* C[m][n] = alpha · op(A) · op(B) + beta · C, row-major. op(A) is [m][k]: A is
 * stored [m][k], or [k][m] when ta. op(B) is [k][n]: B is [k][n], or [n][k]
 * when tb. Runs on BLAS threads unless called inside a parallel region. */
void hy_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, size_t lda,
             const float *B, size_t ldb, float beta, float *C, size_t ldc);

/* The thin SVD of a row-major m×n matrix A = U·Diag(sv)·Vt, k = min(m, n):
 * sv [k] descending, U [m][k], Vt [k][n], both row-major. A is destroyed.
 * LAPACK's divide-and-conquer sgesdd (OpenBLAS ships it), on the calling
 * thread. HY_ENOMEM, or HY_ERANGE when it does not converge. */
int hy_svd(int m, int n, float *A, float *sv, float *U, float *Vt);

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

/* Subnormal floats as zero on the calling thread — flushed when produced and
 * read as zero when consumed (x86: MXCSR FTZ and DAZ; aarch64: FPCR.FZ) —
 * returning the mode before, for hy_fp_restore. A transition operator over
 * hundreds of decaying tokens has entries far below FLT_MIN; an Intel core
 * takes a microcode assist on every subnormal operand (measured here: a
 * 128³ T·S product 10 ms instead of 0.15 ms), an AMD core barely slows. What
 * is flushed is below 1.2e-38 in magnitude, beneath the rounding of any sum
 * it would join. */
uint64_t hy_fp_flush_subnormals(void);
void hy_fp_restore(uint64_t mode);

/* Depthwise causal convolution + SiLU over C channels, kernel K.
 * in: [n] rows of C (stride ldi); state: [K-1][C], the previous inputs, oldest
 * first (zeros at a sequence start), updated to the last K-1 inputs;
 * w: [K][C] (the checkpoint's [C][1][K] transposed, tap-major so the inner
 * loop runs over channels); bias: [C] added before the SiLU, or NULL;
 * out: [n][C] (stride ldo). */
void hy_conv1d_silu(int n, int C, int K, const float *in, size_t ldi, float *state, const float *w,
                    const float *bias, float *out, size_t ldo);

/* Rotary tables for rotate_half RoPE on the first rd dims of a head:
 * inv_freq[i] = theta^(-2i/rd), i < rd/2. */
void hy_rope_inv_freq(int rd, double theta, float *inv_freq);
/* Rotates x[0..rd) in place for position pos (pairs i and i + rd/2). */
#define HY_ROPE_MAX_DIM 4096 /* config.c caps head_dim there */
void hy_rope_apply(float *x, int rd, const float *inv_freq, int64_t pos);
/* The same in two halves, so that a position's rotation is computed once for
 * every head (and kept, by the executor, for every layer and call): cs[i] =
 * cos and cs[rd/2 + i] = sin of the fp32 angle pos · inv_freq[i], i < rd/2;
 * then dst[0..rd) = src[0..rd) rotated by them (dst may be src; dims past rd
 * are the caller's). hy_rope_apply(x) ≡ hy_rope_rotate(x, x) bit for bit. */
void hy_rope_cos_sin(int rd, const float *inv_freq, int64_t pos, float *cs);
void hy_rope_rotate(float *dst, const float *src, int rd, const float *cs);

/* KL(p ‖ q) in nats, p = softmax(lp) and q = softmax(lq) over n logits,
 * in double from max-shifted log-softmaxes (the divergence of one run's
 * next-token distribution from another's). */
double hy_kl_logits(const float *lp, const float *lq, int n);

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
/* What the value heads of one key head can share: a chunk's k·kᵀ and q·kᵀ
 * depend only on its keys and queries, which those heads have in common.
 * Slots of both products, each tagged with whose they are: a chunk whose
 * slot carries its tag reads them, any other computes them into the slot
 * and tags it. One table per thread; the heads that share run on it one
 * after another. */
typedef struct hy_gdn_share {
    float *prods;   /* [nslots][2][HY_GDN_CHUNK][HY_GDN_CHUNK] */
    int64_t *tags;  /* [nslots][2]: {id, position and length}; start at -1 */
    size_t nslots;  /* hy_gdn_share_slots(rows of the step) */
    int64_t id;     /* whose keys (the layer's call and key head; never reused) */
    int64_t row0;   /* the first row of this call within the step */
} hy_gdn_share;
/* Slots for a step of rows rows: two chunks of different calls share one
 * only when a short chunk ends within a chunk of the next (recomputed). */
size_t hy_gdn_share_slots(size_t rows);
/* hy_gdn_chunked reading or filling sh (NULL: hy_gdn_chunked); the same sums. */
void hy_gdn_chunked_shared(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T,
                           float *work, const hy_gdn_share *sh);

/* Causal softmax attention of one query head over a KV cache.
 * q: [n] rows of hd (ldq), already rotated, for positions pos0 .. pos0+n-1;
 * K, V: [pos0+n] rows of hd (ldk, ldv), rotated keys; o: [n] rows of hd (ldo);
 * scores: scratch of HY_ATTN_BLOCK × (pos0+n) floats. */
#define HY_ATTN_BLOCK 64
#define HY_ATTN_TILE  256 /* keys per product past a block's shared context */
void hy_attention(int n, int hd, int64_t pos0, const float *q, size_t ldq, const float *K,
                  size_t ldk, const float *V, size_t ldv, float scale, float *o, size_t ldo,
                  float *scores);
/* The same for rows at positions pos[0..n) (non-decreasing, not necessarily
 * consecutive): row i attends to keys [0, pos[i]]; queries and keys of dk,
 * values and outputs of dv (MLA's differ). scores: HY_ATTN_BLOCK ×
 * (pos[n−1]+1) floats. */
/* hy_attention_at for the G query heads that read one KV head, together:
 * head h's row i is q + i·ldq + h·qhs and its output o + i·ldo + h·ohs.
 * work: hy_attention_heads_scratch(G, dk, dv, pos[n−1] + 1) floats. The
 * same sums as a head at a time (up to BLAS's order of additions), in products
 * of G times the rows. */
size_t hy_attention_heads_scratch(int G, int dk, int dv, int64_t ctx);
void hy_attention_heads(int n, int G, int dk, int dv, const int64_t *pos, const float *q,
                        size_t ldq, size_t qhs, const float *K, size_t ldk, const float *V,
                        size_t ldv, float scale, float *o, size_t ldo, size_t ohs, float *work);
void hy_attention_at(int n, int dk, int dv, const int64_t *pos, const float *q, size_t ldq,
                     const float *K, size_t ldk, const float *V, size_t ldv, float scale, float *o,
                     size_t ldo, float *scores);
/* hy_attention_at with keys in two parts, q·k = q1·K1 + q2·K2 (dk1 and dk2
 * wide): multi-head latent attention in the latent space, where q1 is a
 * query absorbed through kv_b_proj's key half and K1 the cached latents
 * (which are also the values: V may be K1), q2 and K2 the shared key part.
 * q2 NULL (dk2 0) is hy_attention_at. */
void hy_attention_at2(int n, int dk1, int dk2, int dv, const int64_t *pos, const float *q1,
                      size_t ldq1, const float *K1, size_t ldk1, const float *q2, size_t ldq2,
                      const float *K2, size_t ldk2, const float *V, size_t ldv, float scale,
                      float *o, size_t ldo, float *scores);

/* ==== Linear attention: every family, its transition operator, composition ==== */

/*
 * Every linear-attention family HYPIC caches, behind one prefix (hy_la_).
 * The kernels live in linear_attn.c
 * (scalar and diagonal decays, the delta rule by delegation to gdn.c),
 * kda.c (Kimi Delta Attention) and la_compose.c (composition and RoPE).
 *
 * Per head the state is S[dk][dv] ([K,V] layout) and every token does
 *     S_t = A_t·S_{t-1} + B_t,      o_t = S_tᵀ q_t (after the update)
 * with (g are log-decays, ≤ 0):
 *     RETNET, LIGHTNING   A = exp(g0)·I, g0 constant per head    B = k vᵀ
 *     MAMBA2, SIMPLE_GLA  A = exp(g_t)·I, g_t a scalar per token  B = k vᵀ
 *     GLA                 A = Diag(exp(g_t)), g_t ∈ R^dk          B = k vᵀ
 *     DELTANET            A = I − β k kᵀ                          B = β k vᵀ
 *     GDN                 A = exp(g_t)(I − β k kᵀ)                B = β k vᵀ
 *     KDA                 A = (I − β k kᵀ)·Diag(exp(g_t))         B = β k vᵀ
 * (KDA decays S first, then applies the delta rule to the decayed state, as
 * flash-linear-attention's naive_recurrent_kda.)
 *
 * A segment of n tokens maps any start state affinely: S_end = T·S_0 + S_C
 * with T = A_n⋯A_1. T is a scalar, a dk-vector (the diagonal) or a dk×dk
 * matrix by family; the kernels advance it on request and la_compose.c
 * composes (T, S) pairs. Everything is fp32.
 */
typedef enum hy_la_family {
    HY_LA_RETNET,
    HY_LA_LIGHTNING,
    HY_LA_MAMBA2,
    HY_LA_SIMPLE_GLA,
    HY_LA_GLA,
    HY_LA_DELTANET,
    HY_LA_GDN,
    HY_LA_KDA,
    HY_LA_NFAMILIES
} hy_la_family;

/* The shape of a family's transition operator T per head. */
typedef enum hy_la_tkind {
    HY_LA_T_SCALAR, /* 1 float: T = t·I */
    HY_LA_T_DIAG,   /* [dk] floats: T = Diag(t) */
    HY_LA_T_DENSE,  /* [dk][dk] floats */
} hy_la_tkind;

const char *hy_la_family_name(hy_la_family f);
hy_la_tkind hy_la_t_kind(hy_la_family f);
/* Floats of T per head: 1, dk or dk·dk. */
size_t hy_la_t_size(hy_la_family f, int dk);
/* 1 when A_t carries a decay factor (every family but DELTANET). Naive
 * addition of segment states (S = Σ S_C) is exact only when every A_t = I:
 * never for the delta rule (DELTANET included), and for the decaying families
 * only when all their log-decays are 0. */
int hy_la_decaying(hy_la_family f);
/* 1 when the family reads beta (DELTANET, GDN, KDA). */
int hy_la_has_beta(hy_la_family f);
/* RetNet's constant log-decay of head h: log(1 − 2^(−5−h)). */
float hy_la_retnet_log_decay(int h);

/* Inputs of one head, rows per token with strides (in floats):
 * q, k: [n] rows of dk (q L2-normalised and scaled, k L2-normalised, as the
 * models do before the kernel); v: [n] rows of dv;
 * g: per-token log-decays, row stride ldg — MAMBA2, SIMPLE_GLA, GDN: one
 * scalar per row; GLA, KDA: dk contiguous floats per row; other families
 * ignore it (NULL allowed);
 * beta: [n] scalars with stride ldb (DELTANET, GDN, KDA; else ignored);
 * g0: the constant log-decay of RETNET (log γ_h) and LIGHTNING (−s_h).
 * The chunked forms assume log-decays ≤ 0 (decays in (0, 1]), so that every
 * ratio exp(G_i − G_j) they form for j ≤ i is at most 1. */
typedef struct hy_la_in {
    hy_la_family family;
    int n, dk, dv;
    const float *q, *k, *v;
    size_t ldq, ldk, ldv;
    const float *g;
    size_t ldg;
    const float *beta;
    size_t ldb;
    float g0;
} hy_la_in;

/* --- the kernels (linear_attn.c, kda.c) ----------------------------------- */

/* Token by token. S: [dk][dv] in/out; o: [n] rows of dv (stride ldo) or NULL;
 * T: NULL, or hy_la_t_size() floats in/out advanced as T ← A_n⋯A_1·T.
 * Scalar and diagonal T are multiplied by exp(Σ_t g_t), the sum taken in
 * double and exponentiated once, so a long, strongly decaying segment gives
 * the correctly rounded product (0 only when it truly underflows). */
void hy_la_recurrent(const hy_la_in *in, float *S, float *o, size_t ldo, float *T);

#define HY_LA_CHUNK 64
/* Floats of scratch hy_la_chunked needs for one head of family f. */
size_t hy_la_chunked_scratch(hy_la_family f, int dk, int dv);
/* Same contract as hy_la_recurrent, in chunks of HY_LA_CHUNK tokens counted
 * from this call's first token: intra-chunk attention with decay ratios
 * exp(G_i − G_j), j ≤ i, and the carried state between chunks; the WY/UT form
 * for the delta-rule families. work: hy_la_chunked_scratch() floats. */
void hy_la_chunked(const hy_la_in *in, float *S, float *o, size_t ldo, float *T, float *work);

/* logT[d] += Σ_t log-decay of key dim d over the n tokens: the log of a
 * scalar (1 value) or diagonal (dk values) T, without rounding to fp32 or
 * underflow. Not defined for dense families (returns HY_EINVAL). */
int hy_la_log_transition(const hy_la_in *in, double *logT);

/* --- composition (la_compose.c) ------------------------------------------- */

/* T ← I for the kind (1, ones on the diagonal, or the identity matrix). */
void hy_la_t_identity(hy_la_tkind kind, int dk, float *T);
/* Floats of scratch the composition functions need (0 unless dense). */
size_t hy_la_compose_scratch(hy_la_tkind kind, int dk, int dv);
/* S ← T·S + Sc: a cached segment (T, Sc) applied to a running state.
 * S, Sc: [dk][dv]; work: hy_la_compose_scratch() floats. */
void hy_la_apply(hy_la_tkind kind, int dk, int dv, const float *T, const float *Sc, float *S,
                 float *work);
/* S ← γ·S + U·(Vt·S) + Sc for T = γ·I + U·Vt of rank r (a segment's T held
 * as a scaled identity plus low rank; γ = 0: low rank alone): 2·r·dk·dv
 * flops instead of dk·dk·dv. U: [dk][r], Vt: [r][dk]; Sc NULL: zero;
 * work: r·dv floats. */
void hy_la_apply_lowrank(int dk, int dv, int r, float gamma, const float *U, const float *Vt,
                         const float *Sc, float *S, float *work);
/* The inverse reading of a run: from the state S0 at a segment's start, the
 * state S1 after it and the segment's T, its state from zero
 *     Sc ← S1 − T·S0          (S1 = T·S0 + Sc: the map is affine)
 * so one pass over the segment that advances T beside the state yields its
 * pair (T, Sc). Sc may be S0 or S1 (in place); work, hy_la_compose_scratch()
 * floats, may alias none of them. */
void hy_la_extract(hy_la_tkind kind, int dk, int dv, const float *T, const float *S0,
                   const float *S1, float *Sc, float *work);
/* hy_la_apply and hy_la_extract over `heads` heads packed one after another
 * as the executor keeps them (per head hy_la_t_size() floats of T and dk·dv
 * of each state), the heads spread over OpenMP threads. work:
 * heads · hy_la_compose_scratch() floats, each head its own part. */
void hy_la_apply_heads(hy_la_tkind kind, int heads, int dk, int dv, const float *T, const float *Sc,
                       float *S, float *work);
void hy_la_extract_heads(hy_la_tkind kind, int heads, int dk, int dv, const float *T,
                         const float *S0, const float *S1, float *Sc, float *work);
/* The later segment (T2, S2) after the earlier (T1, S1), in place in the
 * earlier: (T1, S1) ← (T2·T1, T2·S1 + S2). T1 may be NULL (then only S1
 * advances, which is hy_la_apply). No argument may alias another. */
void hy_la_compose(hy_la_tkind kind, int dk, int dv, const float *T2, const float *S2, float *T1,
                   float *S1, float *work);
/* Left fold over k segments in order: for i < k, (T, S) ← (Ti[i], Si[i])∘(T, S).
 * Start from (I, 0) to get the pair of the concatenation, or pass T NULL and
 * a running state S to only advance it. */
void hy_la_fold(hy_la_tkind kind, int dk, int dv, int k, const float *const *Ti,
                const float *const *Si, float *T, float *S, float *work);
/* Tree reduction of k segments (pairs of neighbours, level by level, each
 * level's pairs independent): the pair of the concatenation ends in Ti[0],
 * Si[0]; the other entries are overwritten. Equal to hy_la_fold from (I, 0)
 * up to fp32 rounding (composition is associative). */
void hy_la_reduce_tree(hy_la_tkind kind, int dk, int dv, int k, float *const *Ti, float *const *Si,
                       float *work);

/* --- RoPE on the key axis (la_compose.c) ---------------------------------- */

/* Linear layers whose keys carry RoPE (Ring-linear) store a segment's state
 * canonicalised to start position 0; moving it to start s is S ← R(s)·S, R
 * the rotate_half rotation of the first rd key dims (pairs i and i + rd/2,
 * angle s·inv_freq[i], taken in double so a large s keeps its precision).
 * S: [dk][dv]. */
void hy_la_rope_state(int dk, int dv, int rd, const float *inv_freq, int64_t s, float *S);
/* The matching move of T: dense T ← R(s)·T·R(s)ᵀ; scalar T is unchanged; a
 * diagonal T commutes with R only when each rotated pair (i, i + rd/2) has
 * equal entries — otherwise HY_EUNSUPPORTED (and T is left as it was). */
int hy_la_rope_transition(hy_la_tkind kind, int dk, int rd, const float *inv_freq, int64_t s,
                          float *T, hy_err *err);
/* Whether a segment's cached state can be moved by R(s) at all: for GLA and
 * KDA every token's gate must be equal over each rotated pair (then every
 * partial product of decays commutes with R); the other families always can.
 * A check on T alone is necessary but not sufficient. */
int hy_la_rope_commutes(const hy_la_in *in, int rd);

#endif
