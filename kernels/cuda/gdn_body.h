/*
 * The arithmetic of the gated delta rule kernels (gdn.cu), as bodies both
 * compilers build (hy_cu_body.h): each function is what one thread of a
 * block does between two barriers. gdn.cu's kernels call them with
 * __syncthreads() between; their twins (emu_gdn.c) call them for every
 * thread of every block, one phase after another, on the host, and
 * tests/kernels/test_cuda_gdn.c compares both with the CPU kernels
 * (hy_gdn_chunked, hy_gdn_recurrent, hy_fwd_gdn_layer). The launchers'
 * argument checks are here too, so that a launcher and its twin refuse the
 * same arguments with the same message.
 *
 * Three kernels:
 *
 * gates — one block per (row, q-or-k head vector), HY_CU_GDN_GATE_THREADS
 *   threads (a power of two): each thread sums the squares of its strided
 *   share of the vector into shared memory, a tree halves the partials one
 *   level per phase, and every thread scales its share by the norm. The
 *   blocks of each row's first vector also write that row's β and g.
 *
 * recurrent — token by token. In the delta rule every column of S (and of
 *   T) evolves on its own: u_j = Σ_i k_i S_ij, δ_j = β(v_j − u_j),
 *   S_ij += k_i δ_j, o_j = Σ_i q_i S_ij. So a thread owns one column and
 *   needs nobody's partial sums; a block of HY_CU_GDN_REC_COLS threads owns
 *   that many consecutive columns of the head's [S | T] (dv + dk columns
 *   with T), kept in shared memory over the call (dk·32 + 2·dk floats,
 *   17 KiB at dk = 128). Per token one phase stages k and q in shared
 *   memory, the next advances the columns: two barriers a token.
 *
 * chunked — one block per value head, HY_CU_GDN_CHUNK_THREADS threads, the
 *   chunks of the call in order (each depends on the state the previous one
 *   left). Per chunk the phases (hy_cu_gdn_chunk_phase) follow kernels/gdn.c's
 *   WY/UT form step by step — load, Gram, solve, W and U, [−W T, T],
 *   V' = U − W S, [queries, masked q kᵀ, o], S — the bracketed ones only
 *   with T or o: 6 to 11 barriers a chunk. A phase's threads share out the
 *   elements of one small product (or, for the triangular solve, its
 *   columns), so no phase reads what another thread writes in it. S and T
 *   stay in global memory (64 KiB each per head at dk = dv = 128: they live
 *   in L2), read and written in place by the phases that update them; the
 *   chunk's working set — its keys, W, U and the two L×L matrices — sits in
 *   dynamic shared memory: hy_cu_gdn_chunk_floats(dk, dv) floats, 129 KiB
 *   at dk = dv = 128, past the default 48 KiB, so the launcher raises the
 *   kernel's limit with cudaFuncSetAttribute (Hopper allows 227 KiB).
 */
#ifndef HY_CU_GDN_BODY_H
#define HY_CU_GDN_BODY_H

#include "hy_cu_body.h"
#include "include/hy_cuda_gdn.h"

#define HY_CU_GDN_GATE_THREADS  64
#define HY_CU_GDN_REC_COLS      32
#define HY_CU_GDN_CHUNK_THREADS 256
#define HY_CU_GDN_L2_EPS        1e-6f

/* --- argument checks ----------------------------------------------------
 *
 * Host code only (they fill an hy_err), shared by gdn.cu's launchers and
 * emu_gdn.c's twins: HY_OK when the kernel takes the arguments — with n = 0
 * then a launch that does nothing, the pointers unchecked — else HY_EINVAL
 * with the reason in err. */

/* hy_cu_gdn_gates: n ≥ 0, 1 ≤ Hk ≤ 32767 (the grid's 2·Hk blocks in y),
 * Hv a multiple of Hk, dk, dv ≥ 1; with n > 0 every pointer set and rows
 * at least as wide as the channels they hold. */
static inline int hy_cu_gdn_gates_check(const hy_cu_gdn_gate_args *a, hy_err *err)
{
    if (!a) return hy_err_set(err, HY_EINVAL, "gdn_gates: no arguments");
    if (a->n < 0 || a->Hk < 1 || a->Hk > 32767 || a->Hv < 1 || a->Hv % a->Hk != 0 || a->dk < 1 ||
        a->dv < 1)
        return hy_err_set(err, HY_EINVAL,
                          "gdn_gates: n=%d Hk=%d Hv=%d dk=%d dv=%d (n >= 0, Hk <= 32767, Hv a "
                          "multiple of Hk)",
                          a->n, a->Hk, a->Hv, a->dk, a->dv);
    if (a->n == 0) return HY_OK;
    const size_t C = 2 * (size_t)a->Hk * a->dk + (size_t)a->Hv * a->dv;
    if (!a->cv || !a->proj || !a->neg_A || !a->dt_bias || !a->beta || !a->g)
        return hy_err_set(err, HY_EINVAL, "gdn_gates: a required pointer is NULL");
    if (a->ldc < C || a->ldp < C + (size_t)a->Hv * a->dv + 2 * (size_t)a->Hv)
        return hy_err_set(err, HY_EINVAL,
                          "gdn_gates: row strides ldc=%zu ldp=%zu shorter than their rows", a->ldc,
                          a->ldp);
    return HY_OK;
}

static inline int hy_cu_gdn_head_dim_ok(int d)
{
    return d == 16 || d == 32 || d == 64 || d == 128;
}

/* hy_cu_gdn_chunked and hy_cu_gdn_recurrent (`what` names which, for the
 * message): n ≥ 0, Hv a multiple of Hk, dk and dv each one of 16, 32, 64,
 * 128; with n > 0 S, k, v, g, beta set (q too when o is); row strides at
 * least as long as their rows. */
static inline int hy_cu_gdn_check(const hy_cu_gdn_args *a, const char *what, hy_err *err)
{
    if (!a) return hy_err_set(err, HY_EINVAL, "%s: no arguments", what);
    if (a->n < 0 || a->Hk < 1 || a->Hv < 1 || a->Hv % a->Hk != 0)
        return hy_err_set(err, HY_EINVAL, "%s: n=%d Hk=%d Hv=%d (n >= 0, Hv a multiple of Hk)",
                          what, a->n, a->Hk, a->Hv);
    if (!hy_cu_gdn_head_dim_ok(a->dk) || !hy_cu_gdn_head_dim_ok(a->dv))
        return hy_err_set(err, HY_EINVAL, "%s: dk=%d dv=%d (each one of 16, 32, 64, 128)", what,
                          a->dk, a->dv);
    const size_t Kd = (size_t)a->Hk * a->dk, Vd = (size_t)a->Hv * a->dv;
    if (a->n > 0 && (!a->S || !a->k || !a->v || !a->g || !a->beta || (a->o && !a->q)))
        return hy_err_set(err, HY_EINVAL, "%s: a required pointer is NULL", what);
    if (a->ldk < Kd || a->ldv < Vd || a->ldgb < (size_t)a->Hv ||
        (a->o && (a->ldq < Kd || a->ldo < Vd)))
        return hy_err_set(err, HY_EINVAL,
                          "%s: row strides ldq=%zu ldk=%zu ldv=%zu ldgb=%zu ldo=%zu shorter than "
                          "their rows",
                          what, a->ldq, a->ldk, a->ldv, a->ldgb, a->ldo);
    return HY_OK;
}

/* --- gates ------------------------------------------------------------- */

/* Block (t, vec): row t of the conv output, head vector vec of the
 * 2·Hk at its start (q heads, then k heads). Phase 1: sh[tid] = the sum of
 * the squares of elements tid, tid + nthr, …; the row's first block also
 * writes β and g of the row's Hv heads, shared out the same way.
 * sh: [nthr] floats. */
HY_CU_BODY void hy_cu_gdn_gate_square(const hy_cu_gdn_gate_args *a, int t, int vec, int tid,
                                      int nthr, float *sh)
{
    const float *x = a->cv + (size_t)t * a->ldc + (size_t)vec * a->dk;
    float ss = 0.0f;
    for (int i = tid; i < a->dk; i += nthr) ss += x[i] * x[i];
    sh[tid] = ss;
    if (vec != 0) return;
    const int Hv = a->Hv, C = 2 * a->Hk * a->dk + Hv * a->dv;
    const float *b = a->proj + (size_t)t * a->ldp + C + (size_t)Hv * a->dv, *ag = b + Hv;
    for (int h = tid; h < Hv; h += nthr) {
        a->beta[(size_t)t * Hv + h] = a->beta_scale * hy_cu_sigmoidf(b[h]);
        a->g[(size_t)t * Hv + h] = a->neg_A[h] * hy_cu_softplusf(ag[h] + a->dt_bias[h]);
    }
}

/* One level of the tree over the partials: sh[tid] += sh[tid + half] for
 * tid < half. Levels half = nthr/2, nthr/4, …, 1 leave the sum in sh[0]. */
HY_CU_BODY void hy_cu_gdn_gate_tree(int half, int tid, float *sh)
{
    if (tid < half) sh[tid] += sh[tid + half];
}

/* Last phase: the thread's share of the vector times scale / sqrt(sum + ε),
 * scale dk^-½ for a q head and 1 for a k head (hy_l2norm_scale). */
HY_CU_BODY void hy_cu_gdn_gate_scale(const hy_cu_gdn_gate_args *a, int t, int vec, int tid,
                                     int nthr, const float *sh)
{
    const float scale = vec < a->Hk ? 1.0f / sqrtf((float)a->dk) : 1.0f;
    const float r = scale / sqrtf(sh[0] + HY_CU_GDN_L2_EPS);
    float *x = a->cv + (size_t)t * a->ldc + (size_t)vec * a->dk;
    for (int i = tid; i < a->dk; i += nthr) x[i] *= r;
}

/* --- recurrent ---------------------------------------------------------- */

/* Columns of head h's [S | T] (T's only when it is advanced). */
HY_CU_BODY int hy_cu_gdn_rec_width(const hy_cu_gdn_args *a)
{
    return a->dv + (a->T ? a->dk : 0);
}

/* Shared floats of a recurrent block of nthr threads: its columns [dk][nthr]
 * then the token's k and q [2][dk]. */
HY_CU_BODY size_t hy_cu_gdn_rec_floats(int dk, int nthr)
{
    return (size_t)dk * (size_t)nthr + 2 * (size_t)dk;
}

/* Column tid of block `tile` of head h, at column c of [S | T]: its first
 * element and row stride in global memory, or NULL past the last column. */
HY_CU_BODY float *hy_cu_gdn_rec_column(const hy_cu_gdn_args *a, int h, int tile, int tid, int nthr,
                                       size_t *ld)
{
    const int c = tile * nthr + tid, dk = a->dk, dv = a->dv;
    if (c >= hy_cu_gdn_rec_width(a)) return NULL;
    if (c < dv) {
        *ld = (size_t)dv;
        return a->S + (size_t)h * dk * dv + c;
    }
    *ld = (size_t)dk;
    return a->T + (size_t)h * dk * dk + (c - dv);
}

/* First phase: the thread's column from global into sh[i·nthr + tid]. */
HY_CU_BODY void hy_cu_gdn_rec_load(const hy_cu_gdn_args *a, int h, int tile, int tid, int nthr,
                                   float *sh)
{
    size_t ld = 0;
    const float *col = hy_cu_gdn_rec_column(a, h, tile, tid, nthr, &ld);
    if (!col) return;
    for (int i = 0; i < a->dk; i++) sh[(size_t)i * nthr + tid] = col[(size_t)i * ld];
}

/* Per token t, phase 1: k_t (and q_t when o is wanted) into the shared
 * vectors after the columns. */
HY_CU_BODY void hy_cu_gdn_rec_stage(const hy_cu_gdn_args *a, int h, int t, int tid, int nthr,
                                    float *sh)
{
    const int dk = a->dk, hk = h / (a->Hv / a->Hk);
    float *kq = sh + (size_t)dk * nthr;
    const float *k = a->k + (size_t)t * a->ldk + (size_t)hk * dk;
    for (int i = tid; i < dk; i += nthr) kq[i] = k[i];
    if (!a->o) return; /* q may be NULL then */
    const float *q = a->q + (size_t)t * a->ldq + (size_t)hk * dk;
    for (int i = tid; i < dk; i += nthr) kq[dk + i] = q[i];
}

/* Per token t, phase 2: one token of hy_delta_step on the thread's column,
 * in its order: X ← exp(g)·X while u = Σ_i k_i X_i, δ = β(v − u) (v = 0 for
 * a column of T), X ← X + k δ while o = Σ_i q_i X_i (S's columns, when o
 * is wanted). */
HY_CU_BODY void hy_cu_gdn_rec_step(const hy_cu_gdn_args *a, int h, int tile, int t, int tid,
                                   int nthr, float *sh)
{
    const int c = tile * nthr + tid, dk = a->dk, dv = a->dv;
    if (c >= hy_cu_gdn_rec_width(a)) return;
    const float *k = sh + (size_t)dk * nthr, *q = k + dk;
    const size_t gb = (size_t)t * a->ldgb + h;
    const float at = hy_cu_expf(a->g[gb]), b = a->beta[gb];
    float *X = sh + tid;
    float u = 0.0f;
    for (int i = 0; i < dk; i++) {
        const float x = X[(size_t)i * nthr] * at;
        X[(size_t)i * nthr] = x;
        u += k[i] * x;
    }
    const float v = c < dv ? a->v[(size_t)t * a->ldv + (size_t)h * dv + c] : 0.0f;
    const float d = b * (v - u);
    const int out = a->o && c < dv;
    float s = 0.0f;
    for (int i = 0; i < dk; i++) {
        const float x = X[(size_t)i * nthr] + k[i] * d;
        X[(size_t)i * nthr] = x;
        if (out) s += q[i] * x;
    }
    if (out) a->o[(size_t)t * a->ldo + (size_t)h * dv + c] = s;
}

/* Last phase: the column back to global memory. */
HY_CU_BODY void hy_cu_gdn_rec_store(const hy_cu_gdn_args *a, int h, int tile, int tid, int nthr,
                                    const float *sh)
{
    size_t ld = 0;
    float *col = hy_cu_gdn_rec_column(a, h, tile, tid, nthr, &ld);
    if (!col) return;
    for (int i = 0; i < a->dk; i++) col[(size_t)i * ld] = sh[(size_t)i * nthr + tid];
}

/* --- chunked ------------------------------------------------------------ */

/* The chunk's working set in shared memory (L = HY_CU_GDN_CHUNK rows each,
 * whatever the chunk's length):
 *   Kc [L][dk + 1]  the chunk's keys (rows padded by one float, so that
 *                   threads reading the same element of different rows hit
 *                   different banks)
 *   W  [L][dk]      W = Tm (β k exp(G)); later the chunk's queries
 *   U  [L][dv]      U = Tm (β v), then V' = U − W S
 *   A  [L][L]       Lm, later the masked q kᵀ exp(G_i − G_j)
 *   Tm [L][L]       (I + Lm)^-1 (unit lower)
 *                   A and Tm together also hold −W T [L][dk] (dk ≤ 2L)
 *   G, eG, ed, bt [L]  G_i = g_1 + … + g_i, exp(G_i), exp(G_L − G_i), β_i */
typedef struct hy_cu_gdn_chunk_sh {
    float *Kc, *W, *U, *A, *Tm, *G, *eG, *ed, *bt;
} hy_cu_gdn_chunk_sh;

HY_CU_BODY size_t hy_cu_gdn_chunk_floats(int dk, int dv)
{
    const size_t L = HY_CU_GDN_CHUNK;
    return L * (size_t)(dk + 1) + L * (size_t)dk + L * (size_t)dv + 2 * L * L + 4 * L;
}

HY_CU_BODY hy_cu_gdn_chunk_sh hy_cu_gdn_chunk_layout(float *sh, int dk, int dv)
{
    const size_t L = HY_CU_GDN_CHUNK;
    hy_cu_gdn_chunk_sh s;
    s.Kc = sh;
    s.W = s.Kc + L * (size_t)(dk + 1);
    s.U = s.W + L * (size_t)dk;
    s.A = s.U + L * (size_t)dv;
    s.Tm = s.A + L * L;
    s.G = s.Tm + L * L;
    s.eG = s.G + L;
    s.ed = s.eG + L;
    s.bt = s.ed + L;
    return s;
}

/* Tokens of the chunk starting at c0. */
HY_CU_BODY int hy_cu_gdn_chunk_len(const hy_cu_gdn_args *a, int c0)
{
    return a->n - c0 < HY_CU_GDN_CHUNK ? a->n - c0 : HY_CU_GDN_CHUNK;
}

HY_CU_BODY int hy_cu_gdn_key_head(const hy_cu_gdn_args *a, int h)
{
    return h / (a->Hv / a->Hk);
}

/* Load: G, exp(G), exp(G_L − G) and β, summed in token order by thread 0
 * (as the CPU accumulates G), and the chunk's keys into Kc. */
HY_CU_BODY void hy_cu_gdn_chunk_load(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                     float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    if (tid == 0) {
        float acc = 0.0f;
        for (int i = 0; i < L; i++) {
            const size_t r = (size_t)(c0 + i) * a->ldgb + h;
            acc += a->g[r];
            s.G[i] = acc;
            s.eG[i] = hy_cu_expf(acc);
            s.bt[i] = a->beta[r];
        }
        for (int i = 0; i < L; i++) s.ed[i] = hy_cu_expf(acc - s.G[i]);
    }
    const float *k = a->k + (size_t)c0 * a->ldk + (size_t)hy_cu_gdn_key_head(a, h) * dk;
    for (int e = tid; e < L * dk; e += nthr) {
        const int i = e / dk, p = e % dk;
        s.Kc[i * (dk + 1) + p] = k[(size_t)i * a->ldk + p];
    }
}

/* Gram: Lm[i][j] = (k_i·k_j)·(β_i exp(G_i − G_j)) for j < i, into A. */
HY_CU_BODY void hy_cu_gdn_chunk_gram(const hy_cu_gdn_args *a, int c0, int tid, int nthr, float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0), CL = HY_CU_GDN_CHUNK;
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    for (int e = tid; e < L * L; e += nthr) {
        const int i = e / L, j = e % L;
        if (j >= i) continue;
        const float *ki = s.Kc + i * (dk + 1), *kj = s.Kc + j * (dk + 1);
        float dot = 0.0f;
        for (int p = 0; p < dk; p++) dot += ki[p] * kj[p];
        s.A[i * CL + j] = dot * (s.bt[i] * hy_cu_expf(s.G[i] - s.G[j]));
    }
}

/* Solve: Tm = (I + Lm)^-1, one column per thread by forward substitution,
 * Tm[i][j] = −Σ_{j≤m<i} Lm[i][m]·Tm[m][j] summed in m's order (that of
 * hy_unit_lower_inverse). A column reads only the thread's own column. */
HY_CU_BODY void hy_cu_gdn_chunk_solve(const hy_cu_gdn_args *a, int c0, int tid, int nthr, float *sh)
{
    const int L = hy_cu_gdn_chunk_len(a, c0), CL = HY_CU_GDN_CHUNK;
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, a->dk, a->dv);
    for (int j = tid; j < L; j += nthr) {
        for (int i = 0; i < j; i++) s.Tm[i * CL + j] = 0.0f;
        s.Tm[j * CL + j] = 1.0f;
        for (int i = j + 1; i < L; i++) {
            const float *Ai = s.A + i * CL;
            float x = 0.0f;
            for (int m = j; m < i; m++) x -= Ai[m] * s.Tm[m * CL + j];
            s.Tm[i * CL + j] = x;
        }
    }
}

/* W = Tm (β k exp(G)) [L][dk] and U = Tm (β v) [L][dv], their elements
 * shared out together (v read from global memory). */
HY_CU_BODY void hy_cu_gdn_chunk_wu(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                   float *sh)
{
    const int dk = a->dk, dv = a->dv, L = hy_cu_gdn_chunk_len(a, c0), CL = HY_CU_GDN_CHUNK;
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, dv);
    const float *v = a->v + (size_t)c0 * a->ldv + (size_t)h * dv;
    for (int e = tid; e < L * (dk + dv); e += nthr) {
        float acc = 0.0f;
        if (e < L * dk) {
            const int i = e / dk, p = e % dk;
            const float *Ti = s.Tm + i * CL;
            for (int m = 0; m <= i; m++)
                acc += Ti[m] * (s.bt[m] * s.eG[m] * s.Kc[m * (dk + 1) + p]);
            s.W[i * dk + p] = acc;
        } else {
            const int i = (e - L * dk) / dv, j = (e - L * dk) % dv;
            const float *Ti = s.Tm + i * CL;
            for (int m = 0; m <= i; m++) acc += Ti[m] * (s.bt[m] * v[(size_t)m * a->ldv + j]);
            s.U[i * dv + j] = acc;
        }
    }
}

/* With T: Vt = −W T [L][dk] (T of head h, read from global memory) into the
 * space of A and Tm, which the chunk no longer needs. */
HY_CU_BODY void hy_cu_gdn_chunk_t_product(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                          float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    const float *T = a->T + (size_t)h * dk * dk;
    for (int e = tid; e < L * dk; e += nthr) {
        const int i = e / dk, c = e % dk;
        const float *Wi = s.W + i * dk;
        float acc = 0.0f;
        for (int p = 0; p < dk; p++) acc += Wi[p] * T[(size_t)p * dk + c];
        s.A[i * dk + c] = -acc;
    }
}

/* With T: T ← exp(G_L)·T + Kdᵀ Vt, Kd = k exp(G_L − G): each thread its
 * elements of T, in place (the previous phase read T whole). */
HY_CU_BODY void hy_cu_gdn_chunk_t_update(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                         float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    float *T = a->T + (size_t)h * dk * dk;
    const float eGL = s.eG[L - 1];
    for (int e = tid; e < dk * dk; e += nthr) {
        const int p = e / dk, c = e % dk;
        float acc = 0.0f;
        for (int i = 0; i < L; i++) acc += (s.ed[i] * s.Kc[i * (dk + 1) + p]) * s.A[i * dk + c];
        T[e] = eGL * T[e] + acc;
    }
}

/* V' = U − W S: the values corrected by the state the chunk starts from. */
HY_CU_BODY void hy_cu_gdn_chunk_correct(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                        float *sh)
{
    const int dk = a->dk, dv = a->dv, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, dv);
    const float *S = a->S + (size_t)h * dk * dv;
    for (int e = tid; e < L * dv; e += nthr) {
        const int i = e / dv, j = e % dv;
        const float *Wi = s.W + i * dk;
        float acc = 0.0f;
        for (int p = 0; p < dk; p++) acc += Wi[p] * S[(size_t)p * dv + j];
        s.U[e] -= acc;
    }
}

/* With o: the chunk's queries into W (free since the correction). */
HY_CU_BODY void hy_cu_gdn_chunk_queries(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                        float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    const float *q = a->q + (size_t)c0 * a->ldq + (size_t)hy_cu_gdn_key_head(a, h) * dk;
    for (int e = tid; e < L * dk; e += nthr) {
        const int i = e / dk, p = e % dk;
        s.W[e] = q[(size_t)i * a->ldq + p];
    }
}

/* With o: A[i][j] = (q_i·k_j)·exp(G_i − G_j) for j ≤ i, 0 above. */
HY_CU_BODY void hy_cu_gdn_chunk_qk(const hy_cu_gdn_args *a, int c0, int tid, int nthr, float *sh)
{
    const int dk = a->dk, L = hy_cu_gdn_chunk_len(a, c0), CL = HY_CU_GDN_CHUNK;
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, a->dv);
    for (int e = tid; e < L * L; e += nthr) {
        const int i = e / L, j = e % L;
        float val = 0.0f;
        if (j <= i) {
            const float *qi = s.W + i * dk, *kj = s.Kc + j * (dk + 1);
            float dot = 0.0f;
            for (int p = 0; p < dk; p++) dot += qi[p] * kj[p];
            val = dot * hy_cu_expf(s.G[i] - s.G[j]);
        }
        s.A[i * CL + j] = val;
    }
}

/* With o: o_i = exp(G_i)·(q_i S) + Σ_{j≤i} A[i][j]·V'_j, S the state the
 * chunk starts from (global memory, not yet advanced). */
HY_CU_BODY void hy_cu_gdn_chunk_out(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                    float *sh)
{
    const int dk = a->dk, dv = a->dv, L = hy_cu_gdn_chunk_len(a, c0), CL = HY_CU_GDN_CHUNK;
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, dv);
    const float *S = a->S + (size_t)h * dk * dv;
    float *o = a->o + (size_t)c0 * a->ldo + (size_t)h * dv;
    for (int e = tid; e < L * dv; e += nthr) {
        const int i = e / dv, j = e % dv;
        const float *qi = s.W + i * dk, *Ai = s.A + i * CL;
        float inter = 0.0f, intra = 0.0f;
        for (int p = 0; p < dk; p++) inter += qi[p] * S[(size_t)p * dv + j];
        for (int m = 0; m <= i; m++) intra += Ai[m] * s.U[m * dv + j];
        o[(size_t)i * a->ldo + j] = s.eG[i] * inter + intra;
    }
}

/* State: S ← exp(G_L)·S + Kdᵀ V', Kd = k exp(G_L − G), in place in global
 * memory (every phase that read S is behind a barrier). */
HY_CU_BODY void hy_cu_gdn_chunk_state(const hy_cu_gdn_args *a, int h, int c0, int tid, int nthr,
                                      float *sh)
{
    const int dk = a->dk, dv = a->dv, L = hy_cu_gdn_chunk_len(a, c0);
    const hy_cu_gdn_chunk_sh s = hy_cu_gdn_chunk_layout(sh, dk, dv);
    float *S = a->S + (size_t)h * dk * dv;
    const float eGL = s.eG[L - 1];
    for (int e = tid; e < dk * dv; e += nthr) {
        const int p = e / dv, j = e % dv;
        float acc = 0.0f;
        for (int i = 0; i < L; i++) acc += (s.ed[i] * s.Kc[i * (dk + 1) + p]) * s.U[i * dv + j];
        S[e] = eGL * S[e] + acc;
    }
}

/* The phases of one chunk in order, a barrier after each; the T phases run
 * only when T is advanced, the query phases only when o is wanted. */
enum {
    HY_CU_GDN_PH_LOAD,
    HY_CU_GDN_PH_GRAM,
    HY_CU_GDN_PH_SOLVE,
    HY_CU_GDN_PH_WU,
    HY_CU_GDN_PH_T_PRODUCT,
    HY_CU_GDN_PH_T_UPDATE,
    HY_CU_GDN_PH_CORRECT,
    HY_CU_GDN_PH_QUERIES,
    HY_CU_GDN_PH_QK,
    HY_CU_GDN_PH_OUT,
    HY_CU_GDN_PH_STATE,
    HY_CU_GDN_NPHASES
};

HY_CU_BODY int hy_cu_gdn_chunk_runs(const hy_cu_gdn_args *a, int ph)
{
    if (ph == HY_CU_GDN_PH_T_PRODUCT || ph == HY_CU_GDN_PH_T_UPDATE) return a->T != NULL;
    if (ph == HY_CU_GDN_PH_QUERIES || ph == HY_CU_GDN_PH_QK || ph == HY_CU_GDN_PH_OUT)
        return a->o != NULL;
    return 1;
}

/* Phase ph of the chunk at c0 for thread tid of head h's block. */
HY_CU_BODY void hy_cu_gdn_chunk_phase(const hy_cu_gdn_args *a, int ph, int h, int c0, int tid,
                                      int nthr, float *sh)
{
    switch (ph) {
    case HY_CU_GDN_PH_LOAD:
        hy_cu_gdn_chunk_load(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_GRAM:
        hy_cu_gdn_chunk_gram(a, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_SOLVE:
        hy_cu_gdn_chunk_solve(a, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_WU:
        hy_cu_gdn_chunk_wu(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_T_PRODUCT:
        hy_cu_gdn_chunk_t_product(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_T_UPDATE:
        hy_cu_gdn_chunk_t_update(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_CORRECT:
        hy_cu_gdn_chunk_correct(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_QUERIES:
        hy_cu_gdn_chunk_queries(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_QK:
        hy_cu_gdn_chunk_qk(a, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_OUT:
        hy_cu_gdn_chunk_out(a, h, c0, tid, nthr, sh);
        break;
    case HY_CU_GDN_PH_STATE:
        hy_cu_gdn_chunk_state(a, h, c0, tid, nthr, sh);
        break;
    default:
        break;
    }
}

#endif
