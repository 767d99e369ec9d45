/*
 * The arithmetic of kernels/cuda/ops.cu: the executor's elementwise work,
 * norms, short convolution, RoPE and the routed experts' bookkeeping, as
 * bodies both compilers build (hy_cu_body.h).
 *
 * Three shapes of body:
 *   - per element (t, j), named _elem: no thread needs another's result;
 *     the kernel maps its threads over the elements in any order, and so
 *     may a test;
 *   - per channel (the conv state): one thread walks a short sequence;
 *   - phased, for a block whose threads cooperate (a row's sum of squares,
 *     a token's softmax, an expert's list of rows): each phase is a body of
 *     (args, block, tid, nthr, sh) and a block runs phases 0, 1, … with a
 *     barrier after each. A family's `_phases(nthr)` says how many there
 *     are and its `_phase(…, ph, …)` which body phase ph is, so the kernel
 *     and its twin on the host (emu_ops.c) follow one schedule. Block sizes
 *     (`_threads`) and shared floats (`_shared`) are here too for the same
 *     reason, and so are the launchers' argument checks (`_check`), so that
 *     a launcher and its twin refuse the same arguments with the same
 *     message.
 *
 * Reductions are trees over shared memory (nthr a power of two, level s
 * adding sh[tid + s] into sh[tid]); the CPU kernels add in another order,
 * so sums agree to rounding, not bit for bit (the tests state by how much).
 * Integers that pass through shared memory (counts, row numbers) travel as
 * floats, exact below 2^24: the launchers refuse larger problems.
 */
#ifndef HY_CU_OPS_BODY_H
#define HY_CU_OPS_BODY_H

#include "hy_common.h"

#include "hy_cu_body.h"
#include "hy_cuda_ops.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Integers below this are exact in a float (shared memory's counts). */
#define HY_CU_EXACT_INT (1 << 24)
/* Dynamic shared memory, in bytes, a launch may ask for without opting in. */
#define HY_CU_SHARED_MAX ((size_t)48 << 10)

/* --- block shapes and tree levels ------------------------------------------ */

/* Threads for a block that reduces d values: a power of two in [32, 256],
 * one value a thread up to 256. */
HY_CU_BODY int hy_cu_row_threads(int d)
{
    int t = 32;
    while (t < d && t < 256) t *= 2;
    return t;
}

/* log2 of a power of two: the levels of a tree over nthr values. */
HY_CU_BODY int hy_cu_levels(int nthr)
{
    int l = 0;
    while ((1 << l) < nthr) l++;
    return l;
}

/* One level of a tree sum (s = nthr/2, nthr/4, …, 1): sh[0] ends with the total. */
HY_CU_BODY void hy_cu_tree_sum(float *sh, int tid, int s)
{
    if (tid < s) sh[tid] += sh[tid + s];
}

/* One level of a tree maximum. */
HY_CU_BODY void hy_cu_tree_max(float *sh, int tid, int s)
{
    if (tid < s && sh[tid + s] > sh[tid]) sh[tid] = sh[tid + s];
}

/* --- norms over heads: RMS (hy_rmsnorm), gated RMS, L2 with a scale ------- */

enum {
    HY_CU_NORM_RMS,   /* out = x·rsqrt(mean(x²) + eps)·w */
    HY_CU_NORM_GATED, /* out = x·rsqrt(mean(x²) + eps)·w·silu(z) */
    HY_CU_NORM_L2     /* out = x·scale / sqrt(Σx² + eps) */
};

/* One block per (token t, head h), block b = t·heads + h: the head's d values
 * at x + t·ldx + h·xhs, written to out + t·ldo + h·ohs (out may be x). w [d]
 * is shared by the heads (RMS, GATED); z + t·ldz + h·zhs is the gate (GATED).
 * A whole row is one head of width d. */
typedef struct hy_cu_norm_args {
    int kind, heads, d;
    const float *x;
    size_t ldx, xhs;
    float *out;
    size_t ldo, ohs;
    const float *w;
    const float *z;
    size_t ldz, zhs;
    float eps, scale;
} hy_cu_norm_args;

HY_CU_BODY int hy_cu_norm_threads(int d)
{
    return hy_cu_row_threads(d);
}
HY_CU_BODY size_t hy_cu_norm_shared(int nthr)
{
    return (size_t)nthr;
}
/* Phase 0 the partial sums, then the tree's levels, then the scaling. */
HY_CU_BODY int hy_cu_norm_phases(int nthr)
{
    return hy_cu_levels(nthr) + 2;
}

HY_CU_BODY void hy_cu_norm_sumsq(const hy_cu_norm_args *a, int b, int tid, int nthr, float *sh)
{
    const float *x = a->x + (size_t)(b / a->heads) * a->ldx + (size_t)(b % a->heads) * a->xhs;
    float ss = 0.0f;
    for (int i = tid; i < a->d; i += nthr) ss += x[i] * x[i];
    sh[tid] = ss;
}

/* Reads sh[0] (Σx²) and scales the values this thread summed: each thread
 * writes only what it alone read, so out may be x. */
HY_CU_BODY void hy_cu_norm_scale(const hy_cu_norm_args *a, int b, int tid, int nthr,
                                 const float *sh)
{
    const int t = b / a->heads, h = b % a->heads;
    const float *x = a->x + (size_t)t * a->ldx + (size_t)h * a->xhs;
    float *o = a->out + (size_t)t * a->ldo + (size_t)h * a->ohs;
    const float ss = sh[0];
    if (a->kind == HY_CU_NORM_L2) {
        const float r = a->scale / sqrtf(ss + a->eps);
        for (int i = tid; i < a->d; i += nthr) o[i] = x[i] * r;
        return;
    }
    const float r = 1.0f / sqrtf(ss / (float)a->d + a->eps);
    if (a->kind == HY_CU_NORM_RMS) {
        for (int i = tid; i < a->d; i += nthr) o[i] = x[i] * r * a->w[i];
        return;
    }
    const float *z = a->z + (size_t)t * a->ldz + (size_t)h * a->zhs;
    for (int i = tid; i < a->d; i += nthr) o[i] = x[i] * r * a->w[i] * hy_cu_siluf(z[i]);
}

HY_CU_BODY void hy_cu_norm_phase(const hy_cu_norm_args *a, int ph, int b, int tid, int nthr,
                                 float *sh)
{
    const int L = hy_cu_levels(nthr);
    if (ph == 0)
        hy_cu_norm_sumsq(a, b, tid, nthr, sh);
    else if (ph <= L)
        hy_cu_tree_sum(sh, tid, nthr >> ph);
    else
        hy_cu_norm_scale(a, b, tid, nthr, sh);
}

/* --- a few rows against bf16 weights (hy_linear_bf16's direct path) ------- */

/* Y [n][N] = X [n][K] · Wᵀ with W [N][K] in bf16, widened as it is read and
 * multiplied in fp32: what the CPU does for up to HY_CU_W16_ROWS rows (a
 * decode step) whatever its bf16 arithmetic, and a GEMV's shape — bound by
 * reading W once. One block per output column o: its threads stride over K
 * (consecutive threads, consecutive weights), each summing its share of
 * every row, then a tree per row. */
typedef struct hy_cu_w16_args {
    int n, K, N;
    const float *X;
    size_t ldx;
    const uint16_t *W;
    float *Y;
    size_t ldy;
} hy_cu_w16_args;

HY_CU_BODY int hy_cu_w16_threads(int K)
{
    return hy_cu_row_threads(K);
}
/* A row's partial sums each: sh[r·nthr + tid]. */
HY_CU_BODY size_t hy_cu_w16_shared(int nthr)
{
    return (size_t)HY_CU_W16_ROWS * nthr;
}
/* Phase 0 the partial sums, then the trees' levels, then the write. */
HY_CU_BODY int hy_cu_w16_phases(int nthr)
{
    return hy_cu_levels(nthr) + 2;
}

HY_CU_BODY void hy_cu_w16_phase(const hy_cu_w16_args *a, int ph, int o, int tid, int nthr,
                                float *sh)
{
    const int L = hy_cu_levels(nthr);
    if (ph == 0) {
        const uint16_t *w = a->W + (size_t)o * a->K;
        float acc[HY_CU_W16_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int k = tid; k < a->K; k += nthr) {
            const float wk = hy_cu_bf16_to_f32(w[k]);
            for (int r = 0; r < a->n; r++) acc[r] += a->X[(size_t)r * a->ldx + k] * wk;
        }
        for (int r = 0; r < a->n; r++) sh[r * nthr + tid] = acc[r];
    } else if (ph <= L) {
        for (int r = 0; r < a->n; r++) hy_cu_tree_sum(sh + r * nthr, tid, nthr >> ph);
    } else if (tid == 0) {
        for (int r = 0; r < a->n; r++) a->Y[(size_t)r * a->ldy + o] = sh[r * nthr];
    }
}

/* --- depthwise causal conv + SiLU (hy_conv1d_silu) ------------------------ */

/* in: [n] rows of C (ldi); state: [K-1][C] oldest first; w: [K][C]
 * tap-major; bias: [C] or NULL; out: [n] rows of C (ldo). */
typedef struct hy_cu_conv_args {
    int n, C, K;
    const float *in;
    size_t ldi;
    float *state;
    const float *w, *bias;
    float *out;
    size_t ldo;
} hy_cu_conv_args;

/* Output (t, c): the taps over (state ++ in) rows t … t+K-1, summed from
 * the bias in tap order as the CPU kernel sums them. Reads the state as it
 * was before the call. */
HY_CU_BODY void hy_cu_conv_out(const hy_cu_conv_args *a, int t, int c)
{
    const int P = a->K - 1;
    float acc = a->bias ? a->bias[c] : 0.0f;
    for (int j = 0; j < a->K; j++) {
        const int idx = t + j - P; /* the input row this tap reads; < 0: the state's */
        const float v =
            idx < 0 ? a->state[(size_t)(idx + P) * a->C + c] : a->in[(size_t)idx * a->ldi + c];
        acc += a->w[(size_t)j * a->C + c] * v;
    }
    a->out[(size_t)t * a->ldo + c] = hy_cu_siluf(acc);
}

/* Channel c's new state, after every output has read the old one: row r
 * becomes row n + r of (state ++ in). Ascending r reads rows at or past r,
 * which are not yet overwritten, so one thread does it in place. */
HY_CU_BODY void hy_cu_conv_state(const hy_cu_conv_args *a, int c)
{
    const int P = a->K - 1;
    for (int r = 0; r < P; r++) {
        const int src = a->n + r;
        a->state[(size_t)r * a->C + c] =
            src < P ? a->state[(size_t)src * a->C + c] : a->in[(size_t)(src - P) * a->ldi + c];
    }
}

/* --- elementwise ------------------------------------------------------------ */

/* SwiGLU: h[t][j] = silu(gate)·up from a row gate [I] | up [I] (stride ldg). */
HY_CU_BODY void hy_cu_swiglu_elem(int I, const float *gu, size_t ldg, float *h, size_t ldh, int t,
                                  int j)
{
    const float *g = gu + (size_t)t * ldg;
    h[(size_t)t * ldh + j] = hy_cu_siluf(g[j]) * g[I + j];
}

/* relu²: x ← max(x, 0)², in place (Nemotron-H's MLP). */
HY_CU_BODY void hy_cu_relu2_elem(float *x, size_t ldx, int t, int j)
{
    float *p = x + (size_t)t * ldx + j;
    const float r = *p > 0.0f ? *p : 0.0f;
    *p = r * r;
}

/* y[t][j] += b[j]: a projection's bias. */
HY_CU_BODY void hy_cu_add_bias_elem(const float *b, float *y, size_t ldy, int t, int j)
{
    y[(size_t)t * ldy + j] += b[j];
}

/* x[i] += y[i]: the residual. */
HY_CU_BODY void hy_cu_add_elem(float *x, const float *y, size_t i)
{
    x[i] += y[i];
}

/* x[i] = alpha·a[i] + beta·b[i]: MiniMax's scaled residual (x may be a or b). */
HY_CU_BODY void hy_cu_axpby_elem(float alpha, const float *a, float beta, const float *b, float *x,
                                 size_t i)
{
    x[i] = alpha * a[i] + beta * b[i];
}

/* o ← o·sigmoid(g) for value j of head h of row t (attention's output gate:
 * the gate sits beside each head's query in q_proj's rows). */
HY_CU_BODY void hy_cu_mul_sigmoid_elem(float *o, size_t ldo, size_t ohs, const float *g, size_t ldg,
                                       size_t ghs, int t, int h, int j)
{
    o[(size_t)t * ldo + (size_t)h * ohs + j] *=
        hy_cu_sigmoidf(g[(size_t)t * ldg + (size_t)h * ghs + j]);
}

/* out[t][j] = table[ids[t]][j], table [vocab][H]; the ids are the caller's
 * to check. */
HY_CU_BODY void hy_cu_embed_elem(int H, const int32_t *ids, const float *table, float *out,
                                 size_t ldo, int t, int j)
{
    out[(size_t)t * ldo + j] = table[(size_t)ids[t] * (size_t)H + j];
}

/* --- RoPE (hy_rope_cos_sin, hy_rope_rotate) ---------------------------------- */

/* Row p of the table: cs[p][i] = cos and cs[p][rd/2 + i] = sin of the fp32
 * angle (pos0 + p)·inv_freq[i], i < rd/2. */
HY_CU_BODY void hy_cu_rope_table_elem(int rd, const float *inv_freq, int64_t pos0, float *cs,
                                      int64_t p, int i)
{
    const int h = rd / 2;
    const float ang = (float)(pos0 + p) * inv_freq[i];
    float *row = cs + (size_t)p * (size_t)rd;
    row[i] = cosf(ang);
    row[h + i] = sinf(ang);
}

/* The first rd dims of each head rotated in place by the table row of the
 * token's position (rotate_half: pairs i and i + rd/2); dims past rd are not
 * touched. Heads [0, nq) are q's (q + t·ldq + h·qhs), heads [nq, nq + nk)
 * k's. cs: [positions][rd]; pos: [n]. */
typedef struct hy_cu_rope_args {
    int rd;
    const int64_t *pos;
    const float *cs;
    float *q;
    size_t ldq, qhs;
    int nq;
    float *k;
    size_t ldk, khs;
    int nk;
} hy_cu_rope_args;

HY_CU_BODY void hy_cu_rope_rotate_elem(const hy_cu_rope_args *a, int t, int head, int i)
{
    float *x = head < a->nq ? a->q + (size_t)t * a->ldq + (size_t)head * a->qhs
                            : a->k + (size_t)t * a->ldk + (size_t)(head - a->nq) * a->khs;
    const float *c = a->cs + (size_t)a->pos[t] * (size_t)a->rd;
    const int h = a->rd / 2;
    const float x0 = x[i], x1 = x[i + h], co = c[i], si = c[h + i];
    x[i] = x0 * co - x1 * si;
    x[i + h] = x1 * co + x0 * si;
}

/* --- MoE: softmax routing ----------------------------------------------------- */

/* One block per token t: softmax over the E logits of row t (ldl), the top
 * k experts in order (probability descending, ties to the lower index, as
 * the CPU's top_k picks them) into topi [n][k], their probabilities into
 * topw [n][k], renormalised to sum 1 when norm_topk. Logits are finite. */
typedef struct hy_cu_route_args {
    int E, k, norm_topk;
    const float *logits;
    size_t ldl;
    int32_t *topi;
    float *topw;
} hy_cu_route_args;

HY_CU_BODY int hy_cu_route_threads(int E)
{
    return hy_cu_row_threads(E);
}
/* p [E], the max's and the sum's trees [nthr] each, the chosen weights [k]. */
HY_CU_BODY size_t hy_cu_route_shared(int E, int k, int nthr)
{
    return (size_t)E + 2 * (size_t)nthr + (size_t)k;
}
/* max, its tree, exps, their tree, divide, select, weights. */
HY_CU_BODY int hy_cu_route_phases(int nthr)
{
    return 2 * hy_cu_levels(nthr) + 5;
}

HY_CU_BODY void hy_cu_route_max(const hy_cu_route_args *a, int t, int tid, int nthr, float *sh)
{
    const float *l = a->logits + (size_t)t * a->ldl;
    float m = -INFINITY;
    for (int e = tid; e < a->E; e += nthr) m = l[e] > m ? l[e] : m;
    sh[a->E + tid] = m;
}

HY_CU_BODY void hy_cu_route_exp(const hy_cu_route_args *a, int t, int tid, int nthr, float *sh)
{
    const float *l = a->logits + (size_t)t * a->ldl;
    const float mx = sh[a->E];
    float s = 0.0f;
    for (int e = tid; e < a->E; e += nthr) s += (sh[e] = hy_cu_expf(l[e] - mx));
    sh[a->E + nthr + tid] = s;
}

HY_CU_BODY void hy_cu_route_divide(const hy_cu_route_args *a, int tid, int nthr, float *sh)
{
    const float sum = sh[a->E + nthr];
    for (int e = tid; e < a->E; e += nthr) sh[e] /= sum;
}

/* Expert e's place in the order (p descending, index ascending) is the
 * number of experts before it; the first k places are the choice, in the
 * order the CPU's selection finds them. Counting stops at k, so only the
 * few likely experts scan the whole row. */
HY_CU_BODY void hy_cu_route_select(const hy_cu_route_args *a, int t, int tid, int nthr, float *sh)
{
    const float *p = sh;
    float *chosen = sh + a->E + 2 * nthr;
    for (int e = tid; e < a->E; e += nthr) {
        const float v = p[e];
        int rank = 0;
        for (int f = 0; f < a->E && rank < a->k; f++) rank += p[f] > v || (p[f] == v && f < e);
        if (rank < a->k) {
            a->topi[(size_t)t * a->k + rank] = e;
            chosen[rank] = v;
        }
    }
}

HY_CU_BODY void hy_cu_route_weights(const hy_cu_route_args *a, int t, int tid, int nthr,
                                    const float *sh)
{
    if (tid != 0) return;
    const float *chosen = sh + a->E + 2 * nthr;
    float *tw = a->topw + (size_t)t * a->k;
    float wsum = 0.0f;
    for (int j = 0; j < a->k; j++) wsum += (tw[j] = chosen[j]);
    if (a->norm_topk)
        for (int j = 0; j < a->k; j++) tw[j] /= wsum;
}

HY_CU_BODY void hy_cu_route_phase(const hy_cu_route_args *a, int ph, int t, int tid, int nthr,
                                  float *sh)
{
    const int L = hy_cu_levels(nthr);
    if (ph == 0)
        hy_cu_route_max(a, t, tid, nthr, sh);
    else if (ph <= L)
        hy_cu_tree_max(sh + a->E, tid, nthr >> ph);
    else if (ph == L + 1)
        hy_cu_route_exp(a, t, tid, nthr, sh);
    else if (ph <= 2 * L + 1)
        hy_cu_tree_sum(sh + a->E + nthr, tid, nthr >> (ph - L - 1));
    else if (ph == 2 * L + 2)
        hy_cu_route_divide(a, tid, nthr, sh);
    else if (ph == 2 * L + 3)
        hy_cu_route_select(a, t, tid, nthr, sh);
    else
        hy_cu_route_weights(a, t, tid, nthr, sh);
}

/* --- MoE: the rows of each expert ------------------------------------------- */

/* The N = n·k slots (slot s = t·k + j: token t's j-th choice, topi[s])
 * sorted by expert, within an expert by slot — the CPU's order:
 *   offsets [E+1]: expert e's rows are [offsets[e], offsets[e+1]);
 *   rows [N]: the slot of each sorted row;
 *   slot_row [N]: the sorted row of each slot (the inverse).
 * One block per expert e. Thread tid owns the slots [tid·c, (tid+1)·c),
 * c = ceil(N / nthr); it counts those routed to e and those routed to a
 * lower expert; a scan of the first counts places its rows within e's, the
 * sum of the second is where e's rows start. */
typedef struct hy_cu_plan_args {
    int N, E;
    const int32_t *topi;
    int32_t *offsets, *rows, *slot_row;
} hy_cu_plan_args;

HY_CU_BODY int hy_cu_plan_threads(int N)
{
    return hy_cu_row_threads((N + 15) / 16);
}
/* Counts routed to e, counts below e (a tree), the scan's two buffers. */
HY_CU_BODY size_t hy_cu_plan_shared(int nthr)
{
    return 4 * (size_t)nthr;
}
HY_CU_BODY int hy_cu_plan_phases(int nthr)
{
    return hy_cu_levels(nthr) + 2;
}

HY_CU_BODY void hy_cu_plan_count(const hy_cu_plan_args *a, int e, int tid, int nthr, float *sh)
{
    const int c = (a->N + nthr - 1) / nthr, s0 = tid * c;
    const int s1 = s0 + c < a->N ? s0 + c : a->N;
    int eq = 0, lt = 0;
    for (int s = s0; s < s1; s++) {
        eq += a->topi[s] == e;
        lt += a->topi[s] < e;
    }
    sh[tid] = (float)eq;
    sh[nthr + tid] = (float)lt;
    sh[2 * nthr + tid] = (float)eq;
}

/* Level ph (1 … L) of both reductions: a Hillis–Steele inclusive scan of
 * the counts (offset 2^(ph-1), from one buffer into the other) and a tree
 * sum of the counts below e. */
HY_CU_BODY void hy_cu_plan_level(int ph, int tid, int nthr, float *sh)
{
    const int s = 1 << (ph - 1);
    const float *src = sh + (ph % 2 ? 2 : 3) * (size_t)nthr;
    float *dst = sh + (ph % 2 ? 3 : 2) * (size_t)nthr;
    dst[tid] = src[tid] + (tid >= s ? src[tid - s] : 0.0f);
    hy_cu_tree_sum(sh + nthr, tid, nthr >> ph);
}

HY_CU_BODY void hy_cu_plan_write(const hy_cu_plan_args *a, int e, int tid, int nthr,
                                 const float *sh)
{
    const int L = hy_cu_levels(nthr);
    const int base = (int)sh[nthr];
    const int incl = (int)sh[(L % 2 ? 3 : 2) * (size_t)nthr + tid];
    int r = base + incl - (int)sh[tid];
    const int c = (a->N + nthr - 1) / nthr, s0 = tid * c;
    const int s1 = s0 + c < a->N ? s0 + c : a->N;
    for (int s = s0; s < s1; s++)
        if (a->topi[s] == e) {
            a->rows[r] = s;
            a->slot_row[s] = r++;
        }
    if (tid == 0) {
        a->offsets[e] = base;
        if (e == a->E - 1) a->offsets[a->E] = a->N;
    }
}

HY_CU_BODY void hy_cu_plan_phase(const hy_cu_plan_args *a, int ph, int e, int tid, int nthr,
                                 float *sh)
{
    if (ph == 0)
        hy_cu_plan_count(a, e, tid, nthr, sh);
    else if (ph <= hy_cu_levels(nthr))
        hy_cu_plan_level(ph, tid, nthr, sh);
    else
        hy_cu_plan_write(a, e, tid, nthr, sh);
}

/* The experts read their rows contiguously: xe row r = src row of the token
 * of slot rows[r] (k slots a token). */
HY_CU_BODY void hy_cu_moe_gather_elem(int k, const int32_t *rows, const float *src, size_t lds,
                                      float *xe, size_t ldxe, int r, int j)
{
    xe[(size_t)r * ldxe + j] = src[(size_t)(rows[r] / k) * lds + j];
}

/* --- MoE: the weighted sum back, and the shared expert's gate ---------------- */

/* One block per token t: out[t] = Σ_j topw[t][j]·ye[slot_row[t·k + j]],
 * summed from 0 in ascending expert order — the order in which the CPU adds
 * each expert's scattered rows — which is ascending sorted row, since the
 * experts' blocks are in expert order and a token's experts are distinct.
 * ye: [N] rows of D (ldy), expert outputs in sorted-row order. */
typedef struct hy_cu_combine_args {
    int k, D;
    const int32_t *slot_row;
    const float *topw;
    const float *ye;
    size_t ldy;
    float *out;
    size_t ldo;
} hy_cu_combine_args;

HY_CU_BODY int hy_cu_combine_threads(int D)
{
    return hy_cu_row_threads(D);
}
/* The token's rows [k] and weights [k], sorted. */
HY_CU_BODY size_t hy_cu_combine_shared(int k)
{
    return 2 * (size_t)k;
}
HY_CU_BODY int hy_cu_combine_phases(void)
{
    return 2;
}

HY_CU_BODY void hy_cu_combine_sort(const hy_cu_combine_args *a, int t, int tid, float *sh)
{
    if (tid != 0) return;
    float *row = sh, *w = sh + a->k;
    for (int j = 0; j < a->k; j++) { /* insertion sort: k is small */
        const float r = (float)a->slot_row[(size_t)t * a->k + j];
        const float wj = a->topw[(size_t)t * a->k + j];
        int i = j;
        for (; i > 0 && row[i - 1] > r; i--) row[i] = row[i - 1], w[i] = w[i - 1];
        row[i] = r, w[i] = wj;
    }
}

HY_CU_BODY void hy_cu_combine_sum(const hy_cu_combine_args *a, int t, int tid, int nthr,
                                  const float *sh)
{
    const float *row = sh, *w = sh + a->k;
    float *o = a->out + (size_t)t * a->ldo;
    for (int d = tid; d < a->D; d += nthr) {
        float acc = 0.0f;
        for (int j = 0; j < a->k; j++) acc += w[j] * a->ye[(size_t)row[j] * a->ldy + d];
        o[d] = acc;
    }
}

HY_CU_BODY void hy_cu_combine_phase(const hy_cu_combine_args *a, int ph, int t, int tid, int nthr,
                                    float *sh)
{
    if (ph == 0)
        hy_cu_combine_sort(a, t, tid, sh);
    else
        hy_cu_combine_sum(a, t, tid, nthr, sh);
}

/* One block per token t: y[t] += s·ye[t], s = sigmoid(x[t]·wg) (Qwen's
 * shared-expert gate), or s = 1 when wg is NULL. x: [n] rows of H (ldx). */
typedef struct hy_cu_sgate_args {
    int H;
    const float *x;
    size_t ldx;
    const float *wg;
    const float *ye;
    size_t ldye;
    float *y;
    size_t ldy;
} hy_cu_sgate_args;

HY_CU_BODY int hy_cu_sgate_threads(int H)
{
    return hy_cu_row_threads(H);
}
HY_CU_BODY size_t hy_cu_sgate_shared(int nthr)
{
    return (size_t)nthr;
}
HY_CU_BODY int hy_cu_sgate_phases(int nthr)
{
    return hy_cu_levels(nthr) + 2;
}

HY_CU_BODY void hy_cu_sgate_dot(const hy_cu_sgate_args *a, int t, int tid, int nthr, float *sh)
{
    const float *x = a->x + (size_t)t * a->ldx;
    float s = 0.0f;
    if (a->wg)
        for (int d = tid; d < a->H; d += nthr) s += x[d] * a->wg[d];
    sh[tid] = s;
}

HY_CU_BODY void hy_cu_sgate_add(const hy_cu_sgate_args *a, int t, int tid, int nthr,
                                const float *sh)
{
    const float s = a->wg ? hy_cu_sigmoidf(sh[0]) : 1.0f;
    float *y = a->y + (size_t)t * a->ldy;
    const float *e = a->ye + (size_t)t * a->ldye;
    for (int d = tid; d < a->H; d += nthr) y[d] += s * e[d];
}

HY_CU_BODY void hy_cu_sgate_phase(const hy_cu_sgate_args *a, int ph, int t, int tid, int nthr,
                                  float *sh)
{
    const int L = hy_cu_levels(nthr);
    if (ph == 0)
        hy_cu_sgate_dot(a, t, tid, nthr, sh);
    else if (ph <= L)
        hy_cu_tree_sum(sh, tid, nthr >> ph);
    else
        hy_cu_sgate_add(a, t, tid, nthr, sh);
}

/* --- argument checks ------------------------------------------------------------
 *
 * Host code only (they fill an hy_err), shared by ops.cu's launchers and
 * emu_ops.c's twins: HY_OK when the kernel takes the shape — with no rows
 * then a launch that queues nothing, the pointers unchecked — else
 * HY_EINVAL naming the launcher (`what` where several share a check) and
 * the shape. hy_cu_add and hy_cu_axpby take any count and have none. */

/* The norms (one block per head of each row): n ≥ 0, heads, d ≥ 1, n·heads
 * blocks within an int. */
static inline int hy_cu_norm_check(int n, int heads, int d, const char *what, hy_err *err)
{
    if (n < 0 || heads < 1 || d < 1 || (size_t)n * heads > INT_MAX)
        return hy_err_set(err, HY_EINVAL, "%s: %d rows of %d heads of %d", what, n, heads, d);
    return HY_OK;
}

/* n ≥ 0 rows of d ≥ 1: swiglu (d = I), relu2, add_bias, embed (d = H),
 * moe_shared_gate (d = H). */
static inline int hy_cu_rows_check(int n, int d, const char *what, hy_err *err)
{
    if (n < 0 || d < 1) return hy_err_set(err, HY_EINVAL, "%s: %d rows of %d", what, n, d);
    return HY_OK;
}

/* linear_w16: 0 ≤ n ≤ HY_CU_W16_ROWS rows, K, N ≥ 1 (N blocks). */
static inline int hy_cu_linear_w16_check(int n, int K, int N, hy_err *err)
{
    if (n < 0 || n > HY_CU_W16_ROWS || K < 1 || N < 1)
        return hy_err_set(err, HY_EINVAL, "linear_w16: %d rows (at most %d) of %d into %d", n,
                          HY_CU_W16_ROWS, K, N);
    return HY_OK;
}

static inline int hy_cu_conv1d_silu_check(int n, int C, int K, hy_err *err)
{
    if (n < 0 || C < 1 || K < 1)
        return hy_err_set(err, HY_EINVAL, "conv1d_silu: %d rows, %d channels, kernel %d", n, C, K);
    return HY_OK;
}

/* heads·d, a row's gated values, within an int (the kernel splits its flat
 * index by it). */
static inline int hy_cu_mul_sigmoid_check(int n, int heads, int d, hy_err *err)
{
    if (n < 0 || heads < 1 || d < 1 || (size_t)heads * d > INT_MAX)
        return hy_err_set(err, HY_EINVAL, "mul_sigmoid: %d rows of %d heads of %d", n, heads, d);
    return HY_OK;
}

/* rd even and ≥ 2, positions from pos0 ≥ 0, npos ≥ 0 of them. */
static inline int hy_cu_rope_table_check(int rd, int64_t pos0, int64_t npos, hy_err *err)
{
    if (rd < 2 || rd % 2 || npos < 0 || pos0 < 0)
        return hy_err_set(err, HY_EINVAL, "rope_table: rd %d, %lld positions from %lld", rd,
                          (long long)npos, (long long)pos0);
    return HY_OK;
}

/* rd even (0: nothing to rotate), head counts ≥ 0, k set when nk is not 0. */
static inline int hy_cu_rope_rotate_check(int n, int rd, int nq, int nk, const float *k,
                                          hy_err *err)
{
    if (n < 0 || rd < 0 || rd % 2 || nq < 0 || nk < 0 || (nk > 0 && !k))
        return hy_err_set(err, HY_EINVAL, "rope_rotate: %d rows, rd %d, %d + %d heads", n, rd, nq,
                          nk);
    return HY_OK;
}

/* 1 ≤ k ≤ E, and a token's probabilities, trees and choice in shared memory. */
static inline int hy_cu_moe_route_check(int n, int E, int k, hy_err *err)
{
    if (n < 0 || E < 1 || k < 1 || k > E ||
        hy_cu_route_shared(E, k, hy_cu_route_threads(E)) * sizeof(float) > HY_CU_SHARED_MAX)
        return hy_err_set(err, HY_EINVAL, "moe_route: %d rows, top %d of %d experts", n, k, E);
    return HY_OK;
}

/* n·k slots below HY_CU_EXACT_INT: their counts and rows pass through
 * shared memory as floats. */
static inline int hy_cu_moe_plan_check(int n, int k, int E, hy_err *err)
{
    if (n < 0 || k < 1 || E < 1 || (int64_t)n * k >= HY_CU_EXACT_INT)
        return hy_err_set(err, HY_EINVAL, "moe_plan: %d rows, top %d of %d experts", n, k, E);
    return HY_OK;
}

static inline int hy_cu_moe_gather_check(int n, int k, int D, hy_err *err)
{
    if (n < 0 || k < 1 || D < 1 || (int64_t)n * k > INT_MAX)
        return hy_err_set(err, HY_EINVAL, "moe_gather: %d rows, top %d, width %d", n, k, D);
    return HY_OK;
}

/* Sorted rows below HY_CU_EXACT_INT (floats in shared memory), a token's k
 * rows and weights in shared memory. */
static inline int hy_cu_moe_combine_check(int n, int k, int D, hy_err *err)
{
    if (n < 0 || k < 1 || D < 1 || (int64_t)n * k >= HY_CU_EXACT_INT ||
        hy_cu_combine_shared(k) * sizeof(float) > HY_CU_SHARED_MAX)
        return hy_err_set(err, HY_EINVAL, "moe_combine: %d rows, top %d, width %d", n, k, D);
    return HY_OK;
}

#endif
