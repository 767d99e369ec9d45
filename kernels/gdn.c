/*
 * The gated delta rule (Gated DeltaNet) of one head, in two forms that must
 * agree to fp32 rounding:
 *
 * recurrent — token by token, two passes over S per token:
 *     pass 1: S ← exp(g)·S and u = Sᵀk;   δ = β (v − u)
 *     pass 2: S ← S + k δᵀ and o = Sᵀq
 *
 * chunked — chunks of L ≤ 64 tokens in the WY/UT form. Within a chunk let
 * G_i = g_1 + … + g_i (so exp(G_i − G_j) ≤ 1 for j ≤ i) and
 *     Lm[i][j] = β_i (k_i·k_j) exp(G_i − G_j)  for j < i,   T = (I + Lm)^-1
 *     U = T (β v),   W = T (β k exp(G))                       [L×dv], [L×dk]
 *     V' = U − W S                      (values corrected by the carried state)
 *     o  = (q exp(G)) S + mask_{j≤i}(q kᵀ exp(G_i − G_j)) V'
 *     S  ← exp(G_L) S + (k exp(G_L − G))ᵀ V'
 * Everything but the triangular solve is a small GEMM.
 *
 * Both can also advance a transition operator T [dk][dk] (HYPIC's T_C): the
 * map S ↦ S_end is affine, S_end = T·S_0 + S(C|0), and T is what the same
 * recurrence does to a start state of I with all values zero. In the chunked
 * form that is T ← exp(G_L)·T − Kdᵀ·(W·T): it reuses the chunk's W and Kd.
 */
#include "la_internal.h"

#include <cblas.h>
#include <string.h>

/* One token of the delta rule on a state of width w (S, or T with w = dk):
 * X ← Diag(a)·X, then X ← X + k·(b(v − Xᵀk))ᵀ (v NULL: zero values);
 * out = Xᵀq when q != NULL. a: [dk] per-row decays (all equal for GDN). */
void hy_delta_step(float *X, int dk, int w, const float *a, float b, const float *k, const float *v,
                   const float *q, float *out, float *u)
{
    memset(u, 0, (size_t)w * sizeof *u);
    for (int i = 0; i < dk; i++) {
        float *Xi = X + (size_t)i * w;
        const float ai = a[i], ki = k[i];
        for (int j = 0; j < w; j++) {
            Xi[j] *= ai;
            u[j] += ki * Xi[j];
        }
    }
    for (int j = 0; j < w; j++) u[j] = b * ((v ? v[j] : 0.0f) - u[j]);
    if (q) memset(out, 0, (size_t)w * sizeof *out);
    for (int i = 0; i < dk; i++) {
        float *Xi = X + (size_t)i * w;
        const float ki = k[i];
        for (int j = 0; j < w; j++) Xi[j] += ki * u[j];
        if (q) {
            const float qi = q[i];
            for (int j = 0; j < w; j++) out[j] += qi * Xi[j];
        }
    }
}

/* Tm = (I + Lm)^-1 for Lm strictly lower triangular (its rows in A, stride
 * ld; the diagonal and above are ignored), by forward substitution:
 * Tm_i = −Σ_{m<i} A[i][m]·Tm_m over whole rows, each a vectorised axpy (row
 * m is zero past its diagonal, so element j takes the terms m ≥ j in the
 * column-wise order). */
void hy_unit_lower_inverse(int L, const float *A, float *Tm, int ld)
{
    memset(Tm, 0, (size_t)L * ld * sizeof *Tm);
    for (int i = 0; i < L; i++) {
        float *Ti = Tm + (size_t)i * ld;
        const float *Ai = A + (size_t)i * ld;
        for (int m = 0; m < i; m++) {
            const float a = Ai[m];
            const float *Tr = Tm + (size_t)m * ld;
#pragma omp simd
            for (int j = 0; j <= m; j++) Ti[j] -= a * Tr[j];
        }
        Ti[i] = 1.0f;
    }
}

void hy_gdn_recurrent(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T)
{
    const int dk = in->dk, dv = in->dv;
    float u[dv > dk ? dv : dk], a[dk];
    for (int t = 0; t < in->n; t++) {
        const float *kt = in->k + (size_t)t * in->ldk;
        const float at = hy_expf(in->g[(size_t)t * in->ldgb]), b = in->beta[(size_t)t * in->ldgb];
        for (int i = 0; i < dk; i++) a[i] = at;
        const float *qt = o ? in->q + (size_t)t * in->ldq : NULL;
        hy_delta_step(S, dk, dv, a, b, kt, in->v + (size_t)t * in->ldv, qt,
                      o ? o + (size_t)t * ldo : NULL, u);
        if (T) hy_delta_step(T, dk, dk, a, b, kt, NULL, NULL, NULL, u);
    }
}

size_t hy_gdn_chunked_scratch(int dk, int dv)
{
    const size_t L = HY_GDN_CHUNK;
    return 2 * L + 3 * L * L + 4 * L * (size_t)dk + 3 * L * (size_t)dv;
}

size_t hy_gdn_share_slots(size_t rows)
{
    return rows / HY_GDN_CHUNK + 2;
}

/* The slot of sh holding the chunk at row r (of the step) of length L, and
 * whether it already holds its products (else it is now tagged for them,
 * the caller computing them). */
static float *share_slot(const hy_gdn_share *sh, int64_t r, int L, bool with_q, bool *have)
{
    const size_t CL = HY_GDN_CHUNK, slot = (size_t)(r / (int64_t)CL) % sh->nslots;
    int64_t *tag = sh->tags + 2 * slot;
    const int64_t t1 = r * 256 + (int64_t)L * 2 + (with_q ? 1 : 0);
    *have = tag[0] == sh->id && tag[1] == t1;
    tag[0] = sh->id, tag[1] = t1;
    return sh->prods + slot * 2 * CL * CL;
}

void hy_gdn_chunked(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T, float *work)
{
    hy_gdn_chunked_shared(in, S, o, ldo, T, work, NULL);
}

void hy_gdn_chunked_shared(const hy_gdn_in *in, float *S, float *o, size_t ldo, float *T,
                           float *work, const hy_gdn_share *sh)
{
    const int CL = HY_GDN_CHUNK, n = in->n, dk = in->dk, dv = in->dv;
    const size_t ldq = in->ldq, ldk = in->ldk, ldv = in->ldv, ldgb = in->ldgb;
    float *G = work;                    /* [L] cumulative log-decay */
    float *eG = G + CL;                 /* [L] exp(G) */
    float *Tm = eG + CL;                /* [L][L] (I + Lm)^-1, unit lower */
    float *A = Tm + (size_t)CL * CL;    /* [L][L] k kᵀ, then the masked q kᵀ */
    float *Wk = A + (size_t)CL * CL;    /* [L][dk] β k exp(G) -> W */
    float *Qg = Wk + (size_t)CL * dk;   /* [L][dk] q exp(G) */
    float *Kd = Qg + (size_t)CL * dk;   /* [L][dk] k exp(G_L - G) */
    float *Vt = Kd + (size_t)CL * dk;   /* [L][dk] −W·T */
    float *Vn = Vt + (size_t)CL * dk;   /* [L][dv] β v -> U -> V' */
    float *Y = Vn + (size_t)CL * dv;    /* [2L][dv] W S, then (q exp(G)) S */
    float *D = Y + (size_t)2 * CL * dv; /* [L][L] exp(G_i − G_j), j <= i */

    for (int c0 = 0; c0 < n; c0 += CL) {
        const int L = HY_MIN_INT(CL, n - c0);
        const float *qc = o ? in->q + (size_t)c0 * ldq : NULL, *kc = in->k + (size_t)c0 * ldk;
        const float *vc = in->v + (size_t)c0 * ldv, *gc = in->g + (size_t)c0 * ldgb;
        const float *bc = in->beta + (size_t)c0 * ldgb;
        float acc = 0.0f;
        for (int i = 0; i < L; i++) {
            acc += gc[(size_t)i * ldgb];
            G[i] = acc;
            eG[i] = hy_expf(acc);
        }
        const float GL = G[L - 1], eGL = eG[L - 1];

        /* The decays between the chunk's positions, which both masks use. */
        for (int i = 0; i < L; i++) {
            float *Di = D + (size_t)i * CL;
#pragma omp simd
            for (int j = 0; j <= i; j++) Di[j] = hy_expf(G[i] - G[j]);
        }

        /* k·kᵀ and q·kᵀ: from the slot another value head of this key head
         * filled, or computed (into it, when sharing) */
        bool have = false;
        float *KK = sh ? share_slot(sh, sh->row0 + c0, L, o != NULL, &have) : A;
        float *QK = sh ? KK + (size_t)CL * CL : A;
        if (!have) {
            hy_gemm(0, 1, L, L, dk, 1.0f, kc, ldk, kc, ldk, 0.0f, KK, (size_t)CL);
            if (o && sh) hy_gemm(0, 1, L, L, dk, 1.0f, qc, ldq, kc, ldk, 0.0f, QK, (size_t)CL);
        }

        /* Lm and its inverse by forward substitution: (I + Lm) Tm = I (which
         * reads Lm's strictly lower part only). */
        for (int i = 0; i < L; i++) {
            const float bi = bc[(size_t)i * ldgb];
            float *Ai = A + (size_t)i * CL;
            const float *Ki = KK + (size_t)i * CL, *Di = D + (size_t)i * CL;
#pragma omp simd
            for (int j = 0; j < i; j++) Ai[j] = Ki[j] * (bi * Di[j]);
        }
        hy_unit_lower_inverse(L, A, Tm, CL);

        /* U = Tm (β v), W = Tm (β k exp(G)), and the q / k scalings. */
        for (int i = 0; i < L; i++) {
            const float bi = bc[(size_t)i * ldgb];
            const float *ki = kc + (size_t)i * ldk, *vi = vc + (size_t)i * ldv;
            float *wi = Wk + (size_t)i * dk, *kd = Kd + (size_t)i * dk;
            float *vn = Vn + (size_t)i * dv;
            const float e = eG[i], ed = hy_expf(GL - G[i]);
            for (int j = 0; j < dk; j++) {
                wi[j] = bi * e * ki[j];
                kd[j] = ed * ki[j];
            }
            if (o) {
                const float *qi = qc + (size_t)i * ldq;
                float *qg = Qg + (size_t)i * dk;
                for (int j = 0; j < dk; j++) qg[j] = e * qi[j];
            }
            for (int j = 0; j < dv; j++) vn[j] = bi * vi[j];
        }
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dv, 1.0f, Tm,
                    CL, Vn, dv);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dk, 1.0f, Tm,
                    CL, Wk, dk);

        /* The transition operator: T ← exp(G_L) T + Kdᵀ (−W T). */
        if (T) {
            hy_gemm(0, 0, L, dk, dk, -1.0f, Wk, (size_t)dk, T, (size_t)dk, 0.0f, Vt, (size_t)dk);
            for (size_t i = 0; i < (size_t)dk * dk; i++) T[i] *= eGL;
            hy_gemm(1, 0, dk, dk, L, 1.0f, Kd, (size_t)dk, Vt, (size_t)dk, 1.0f, T, (size_t)dk);
        }

        /* V' = U − W S, and o = (q exp(G)) S + mask(q kᵀ exp(G_i − G_j)) V'.
         * In a full chunk W and q exp(G) are adjacent rows of work: one
         * product of twice the rows for both (a 64-row product is below
         * what BLAS runs efficiently; two cost ~1.3x one of 128). */
        float *oc = o ? o + (size_t)c0 * ldo : NULL;
        if (o && L == CL) {
            hy_gemm(0, 0, 2 * L, dv, dk, 1.0f, Wk, (size_t)dk, S, (size_t)dv, 0.0f, Y, (size_t)dv);
            for (int i = 0; i < L; i++) {
                float *vn = Vn + (size_t)i * dv, *orow = oc + (size_t)i * ldo;
                const float *ws = Y + (size_t)i * dv, *qs = Y + (size_t)(L + i) * dv;
#pragma omp simd
                for (int j = 0; j < dv; j++) {
                    vn[j] -= ws[j];
                    orow[j] = qs[j];
                }
            }
        } else {
            hy_gemm(0, 0, L, dv, dk, -1.0f, Wk, (size_t)dk, S, (size_t)dv, 1.0f, Vn, (size_t)dv);
            if (o) hy_gemm(0, 0, L, dv, dk, 1.0f, Qg, (size_t)dk, S, (size_t)dv, 0.0f, oc, ldo);
        }
        if (o) {
            if (!sh) hy_gemm(0, 1, L, L, dk, 1.0f, qc, ldq, kc, ldk, 0.0f, QK, (size_t)CL);
            for (int i = 0; i < L; i++) {
                float *Ai = A + (size_t)i * CL;
                const float *Qi = QK + (size_t)i * CL, *Di = D + (size_t)i * CL;
#pragma omp simd
                for (int j = 0; j <= i; j++) Ai[j] = Qi[j] * Di[j];
                for (int j = i + 1; j < L; j++) Ai[j] = 0.0f;
            }
            hy_gemm(0, 0, L, dv, L, 1.0f, A, (size_t)CL, Vn, (size_t)dv, 1.0f, oc, ldo);
        }

        /* S ← exp(G_L) S + (k exp(G_L − G))ᵀ V' */
        for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= eGL;
        hy_gemm(1, 0, dk, dv, L, 1.0f, Kd, (size_t)dk, Vn, (size_t)dv, 1.0f, S, (size_t)dv);
    }
}
