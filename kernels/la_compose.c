/*
 * Composing cached linear-attention segments, and moving them along the
 * sequence when their keys carry RoPE.
 *
 * A segment is a pair (T, S): S_end = T·S_0 + S for any start state S_0
 * ([K,V] layout, T acting on the key axis). Two segments in a row compose as
 *     (T2, S2)∘(T1, S1) = (T2·T1, T2·S1 + S2)
 * which is associative, so k segments reduce either as a left fold (what the
 * combiner does while it walks a prompt) or as a tree (log₂k levels whose
 * pairs are independent). T is a scalar, a diagonal or a dense dk×dk matrix
 * (hy_la_tkind); all of it is fp32.
 *
 * RoPE (Ring-linear): keys at absolute position p are R(p)·k̃. A segment built
 * at canonical start 0 and moved to start s sees keys R(s)R(p')k̃, so every
 * A_t becomes R(s)·A'_t·R(s)ᵀ and every B_t becomes R(s)·B'_t whenever the
 * family's decay commutes with R(s) — always for a scalar decay; for a
 * diagonal one only when each rotated pair (i, i + rd/2) decays equally,
 * since Rᵀ·Diag(d)·R mixes the pair's two decays otherwise. Then
 * S = R(s)·S' and T = R(s)·T'·R(s)ᵀ (scalar T unchanged).
 */
#include "hy_kernels.h"

#include <assert.h>
#include <string.h>

void hy_la_t_identity(hy_la_tkind kind, int dk, float *T)
{
    switch (kind) {
    case HY_LA_T_SCALAR:
        T[0] = 1.0f;
        return;
    case HY_LA_T_DIAG:
        for (int i = 0; i < dk; i++) T[i] = 1.0f;
        return;
    case HY_LA_T_DENSE:
        memset(T, 0, (size_t)dk * dk * sizeof *T);
        for (int i = 0; i < dk; i++) T[(size_t)i * dk + i] = 1.0f;
        return;
    }
}

size_t hy_la_compose_scratch(hy_la_tkind kind, int dk, int dv)
{
    return kind == HY_LA_T_DENSE ? (size_t)dk * (size_t)(dk > dv ? dk : dv) : 0;
}

/* Floats of T per head for the kind. */
static size_t t_floats(hy_la_tkind kind, int dk)
{
    return kind == HY_LA_T_SCALAR ? 1 : kind == HY_LA_T_DIAG ? (size_t)dk : (size_t)dk * dk;
}

/* C ← alpha·T·X + C for a dense T and X of width w: one GEMM accumulating
 * into C — the whole arithmetic, in the form that costs least (measured:
 * GEMM with beta 0 and a separate add pass was 1–2% slower at dk = dv = 128). */
static void dense_mul_acc(int dk, int w, float alpha, const float *T, const float *X, float *C)
{
    hy_gemm(0, 0, dk, w, dk, alpha, T, (size_t)dk, X, (size_t)w, 1.0f, C, (size_t)w);
}

/* X ← T·X + Y for X, Y of width w (Y NULL: zero). */
static void left_mul_add(hy_la_tkind kind, int dk, int w, const float *T, float *X, const float *Y,
                         float *work)
{
    const size_t n = (size_t)dk * w;
    switch (kind) {
    case HY_LA_T_SCALAR:
        for (size_t i = 0; i < n; i++) X[i] = T[0] * X[i] + (Y ? Y[i] : 0.0f);
        return;
    case HY_LA_T_DIAG:
        for (int i = 0; i < dk; i++) {
            float *Xi = X + (size_t)i * w;
            const float *Yi = Y ? Y + (size_t)i * w : NULL;
            for (int j = 0; j < w; j++) Xi[j] = T[i] * Xi[j] + (Yi ? Yi[j] : 0.0f);
        }
        return;
    case HY_LA_T_DENSE: /* GEMM cannot write over its input: through work */
        assert(work && work != X && work != T && (!Y || work != Y));
        if (Y)
            memcpy(work, Y, n * sizeof *work);
        else
            memset(work, 0, n * sizeof *work);
        dense_mul_acc(dk, w, 1.0f, T, X, work);
        memcpy(X, work, n * sizeof *X);
        return;
    }
}

void hy_la_apply(hy_la_tkind kind, int dk, int dv, const float *T, const float *Sc, float *S,
                 float *work)
{
    left_mul_add(kind, dk, dv, T, S, Sc, work);
}

void hy_la_apply_lowrank(int dk, int dv, int r, float gamma, const float *U, const float *Vt,
                         const float *Sc, float *S, float *work)
{
    const size_t n = (size_t)dk * dv;
    if (r > 0) { /* work ← Vt·S first: S is overwritten next */
        hy_gemm(0, 0, r, dv, dk, 1.0f, Vt, (size_t)dk, S, (size_t)dv, 0.0f, work, (size_t)dv);
        /* beta = γ; with γ = 0 BLAS does not read S (nor its NaNs) */
        hy_gemm(0, 0, dk, dv, r, 1.0f, U, (size_t)r, work, (size_t)dv, gamma, S, (size_t)dv);
    } else if (gamma == 0.0f) {
        memset(S, 0, n * sizeof *S);
    } else {
        for (size_t i = 0; i < n; i++) S[i] *= gamma;
    }
    if (Sc)
        for (size_t i = 0; i < n; i++) S[i] += Sc[i];
}

void hy_la_extract(hy_la_tkind kind, int dk, int dv, const float *T, const float *S0,
                   const float *S1, float *Sc, float *work)
{
    const size_t n = (size_t)dk * dv;
    switch (kind) {
    case HY_LA_T_SCALAR:
        for (size_t i = 0; i < n; i++) Sc[i] = S1[i] - T[0] * S0[i];
        return;
    case HY_LA_T_DIAG:
        for (int i = 0; i < dk; i++) {
            const float *a = S0 + (size_t)i * dv, *b = S1 + (size_t)i * dv;
            float *o = Sc + (size_t)i * dv;
            for (int j = 0; j < dv; j++) o[j] = b[j] - T[i] * a[j];
        }
        return;
    case HY_LA_T_DENSE:
        if (Sc != S0) { /* accumulate straight into Sc: no scratch, no copy back */
            if (Sc != S1) memcpy(Sc, S1, n * sizeof *Sc);
            dense_mul_acc(dk, dv, -1.0f, T, S0, Sc);
            return;
        }
        assert(work && work != S0 && work != S1 && work != T);
        memcpy(work, S1, n * sizeof *work);
        dense_mul_acc(dk, dv, -1.0f, T, S0, work);
        memcpy(Sc, work, n * sizeof *Sc);
        return;
    }
}

void hy_la_apply_heads(hy_la_tkind kind, int heads, int dk, int dv, const float *T, const float *Sc,
                       float *S, float *work)
{
    const size_t ts = t_floats(kind, dk), ss = (size_t)dk * dv;
    const size_t ws = hy_la_compose_scratch(kind, dk, dv);
#pragma omp parallel for schedule(static) if (heads > 1)
    for (int h = 0; h < heads; h++)
        left_mul_add(kind, dk, dv, T + h * ts, S + h * ss, Sc + h * ss,
                     work ? work + h * ws : NULL);
}

void hy_la_extract_heads(hy_la_tkind kind, int heads, int dk, int dv, const float *T,
                         const float *S0, const float *S1, float *Sc, float *work)
{
    const size_t ts = t_floats(kind, dk), ss = (size_t)dk * dv;
    const size_t ws = hy_la_compose_scratch(kind, dk, dv);
#pragma omp parallel for schedule(static) if (heads > 1)
    for (int h = 0; h < heads; h++)
        hy_la_extract(kind, dk, dv, T + h * ts, S0 + h * ss, S1 + h * ss, Sc + h * ss,
                      work ? work + h * ws : NULL);
}

void hy_la_compose(hy_la_tkind kind, int dk, int dv, const float *T2, const float *S2, float *T1,
                   float *S1, float *work)
{
    left_mul_add(kind, dk, dv, T2, S1, S2, work);
    if (!T1) return;
    if (kind == HY_LA_T_DENSE)
        left_mul_add(kind, dk, dk, T2, T1, NULL, work);
    else
        for (int i = 0; i < (kind == HY_LA_T_DIAG ? dk : 1); i++) T1[i] *= T2[i];
}

void hy_la_fold(hy_la_tkind kind, int dk, int dv, int k, const float *const *Ti,
                const float *const *Si, float *T, float *S, float *work)
{
    for (int i = 0; i < k; i++) hy_la_compose(kind, dk, dv, Ti[i], Si[i], T, S, work);
}

void hy_la_reduce_tree(hy_la_tkind kind, int dk, int dv, int k, float *const *Ti, float *const *Si,
                       float *work)
{
    for (int stride = 1; stride < k; stride *= 2)
        for (int i = 0; i + stride < k; i += 2 * stride)
            hy_la_compose(kind, dk, dv, Ti[i + stride], Si[i + stride], Ti[i], Si[i], work);
}

/* Rows of X (key axis, width w) ← R(s)·X. */
static void rotate_rows(float *X, int w, int rd, const float *inv_freq, int64_t s)
{
    const int h = rd / 2;
    for (int i = 0; i < h; i++) {
        const double ang = (double)s * (double)inv_freq[i];
        const float c = (float)cos(ang), sn = (float)sin(ang);
        float *a = X + (size_t)i * w, *b = X + (size_t)(i + h) * w;
        for (int j = 0; j < w; j++) {
            const float x = a[j], y = b[j];
            a[j] = x * c - y * sn;
            b[j] = y * c + x * sn;
        }
    }
}

void hy_la_rope_state(int dk, int dv, int rd, const float *inv_freq, int64_t s, float *S)
{
    assert(rd >= 0 && rd <= dk && rd % 2 == 0);
    (void)dk;
    rotate_rows(S, dv, rd, inv_freq, s);
}

int hy_la_rope_transition(hy_la_tkind kind, int dk, int rd, const float *inv_freq, int64_t s,
                          float *T, hy_err *err)
{
    if (rd < 0 || rd > dk || rd % 2)
        return hy_err_set(err, HY_EINVAL, "rotary dims %d: must be even and at most dk = %d", rd,
                          dk);
    switch (kind) {
    case HY_LA_T_SCALAR:
        return HY_OK;
    case HY_LA_T_DIAG:
        for (int i = 0; i < rd / 2; i++)
            if (T[i] != T[i + rd / 2])
                return hy_err_set(err, HY_EUNSUPPORTED,
                                  "diagonal T decays rotated pair (%d, %d) unequally (%g vs %g); "
                                  "it does not commute with RoPE",
                                  i, i + rd / 2, (double)T[i], (double)T[i + rd / 2]);
        return HY_OK;
    case HY_LA_T_DENSE:
        break;
    }
    /* T ← R·T (rows), then (R·T)·Rᵀ: the same rotation of every row as a vector. */
    rotate_rows(T, dk, rd, inv_freq, s);
    const int h = rd / 2;
    for (int i = 0; i < h; i++) {
        const double ang = (double)s * (double)inv_freq[i];
        const float c = (float)cos(ang), sn = (float)sin(ang);
        for (int r = 0; r < dk; r++) {
            float *row = T + (size_t)r * dk;
            const float x = row[i], y = row[i + h];
            row[i] = x * c - y * sn;
            row[i + h] = y * c + x * sn;
        }
    }
    return HY_OK;
}

int hy_la_rope_commutes(const hy_la_in *in, int rd)
{
    if (in->family != HY_LA_GLA && in->family != HY_LA_KDA) return 1;
    const int h = rd / 2;
    for (int t = 0; t < in->n; t++) {
        const float *gt = in->g + (size_t)t * in->ldg;
        for (int i = 0; i < h; i++)
            if (gt[i] != gt[i + h]) return 0;
    }
    return 1;
}
