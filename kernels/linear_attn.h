/*
 * Every linear-attention family HYPIC caches, behind one prefix (hy_la_).
 * Included at the end of hy_kernels.h; the kernels live in linear_attn.c
 * (scalar and diagonal decays, the delta rule by delegation to gdn.c),
 * kda.c (Kimi Delta Attention) and la_compose.c (composition and RoPE).
 *
 * Per head the state is S[dk][dv] ([K,V] layout) and every token does
 *     S_t = A_t·S_{t-1} + B_t,      o_t = S_tᵀ q_t (after the update)
 * with (DESIGN.md §1.1; g are log-decays, ≤ 0):
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
#ifndef HY_LINEAR_ATTN_H
#define HY_LINEAR_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "common/hy_common.h"

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
