/*
 * Kimi Delta Attention (Kimi-Linear), one head: the gated delta rule with a
 * decay per key dimension. Per token, as flash-linear-attention's
 * naive_recurrent_kda — decay first, then the delta rule on the decayed S:
 *     S ← Diag(exp(g))·S;  δ = β (v − Sᵀk);  S ← S + k δᵀ;  o = Sᵀq
 * i.e. A = (I − β k kᵀ)·Diag(exp(g)), B = β k vᵀ.
 *
 * chunked — chunks of L ≤ 64 tokens in the WY/UT form, gdn.c's with the
 * scalar decay replaced by a vector. With Γ_i = Diag(exp(G_i)), G_i = g_1 +
 * … + g_i per key dim, unrolling gives S_i = Γ_i S_0 + Σ_{j≤i} (Γ_i/Γ_j) k_j δ_jᵀ
 * and δ_i = β_i (v_i − S_0ᵀ Γ_i k_i − Σ_{j<i} (k_iᵀ (Γ_i/Γ_j) k_j) δ_j), so
 *     Lm[i][j] = β_i Σ_d k_i[d] k_j[d] exp(G_i[d] − G_j[d])  for j < i
 *     Tm = (I + Lm)^-1,  U = Tm (β v),  W = Tm (β k ⊙ exp(G))
 *     V' = U − W S                                         (the δ rows)
 *     o  = (q ⊙ exp(G)) S + mask_{j≤i}(Σ_d q_i[d] k_j[d] exp(G_i[d] − G_j[d])) V'
 *     S  ← Diag(exp(G_L)) S + (k ⊙ exp(G_L − G))ᵀ V'
 *     T  ← Diag(exp(G_L)) T − (k ⊙ exp(G_L − G))ᵀ (W T)
 * Numerical stability: with log-decays ≤ 0 every exponential formed here has
 * an argument ≤ 0 — G_i − G_j for j ≤ i, G_L − G_i, and G_i itself — so none
 * overflows and an underflow to 0 is the true (negligible) value. The two
 * intra-chunk score matrices factor into (x ⊙ exp(G))(k ⊙ exp(−G))ᵀ, one
 * GEMM each, while the chunk's deepest cumulative decay stays within
 * exp(−80) (every factor then a normal fp32 number and each product its
 * pairwise value up to rounding); a chunk that decays further — where the
 * factors would overflow — takes the ratios pairwise (L²/2·dk exponentials). Lm's entries are bounded by β·|k_i||k_j| ≤ 1, the same regime
 * as gdn.c's forward substitution.
 */
#include "hy_kernels.h"
#include "la_internal.h"

#include <cblas.h>
#include <stdbool.h>
#include <string.h>

void hy_la_kda_recurrent(const hy_la_in *in, float *S, float *o, size_t ldo, float *T)
{
    const int dk = in->dk, dv = in->dv;
    float u[dv > dk ? dv : dk], a[dk];
    for (int t = 0; t < in->n; t++) {
        const float *kt = in->k + (size_t)t * in->ldk, *gt = in->g + (size_t)t * in->ldg;
        const float b = in->beta[(size_t)t * in->ldb];
        for (int i = 0; i < dk; i++) a[i] = hy_expf(gt[i]);
        const float *qt = o ? in->q + (size_t)t * in->ldq : NULL;
        hy_delta_step(S, dk, dv, a, b, kt, in->v + (size_t)t * in->ldv, qt,
                      o ? o + (size_t)t * ldo : NULL, u);
        if (T) hy_delta_step(T, dk, dk, a, b, kt, NULL, NULL, NULL, u);
    }
}

size_t hy_la_kda_scratch(int dk, int dv)
{
    const size_t L = HY_LA_CHUNK;
    return 2 * L * L + 6 * L * (size_t)dk + L * (size_t)dv + (size_t)dk;
}

/* A[i][j] = Σ_d x_i[d] k_j[d] exp(G_i[d] − G_j[d]) for j < i (j ≤ i when
 * diag), 0 elsewhere; rows i scaled by s[i] when s != NULL. */
static void decayed_scores(int L, int dk, const float *x, size_t ldx, const float *k, size_t ldk,
                           const float *G, int diag, const float *s, size_t lds, float *A, int lda)
{
    for (int i = 0; i < L; i++) {
        const float *xi = x + (size_t)i * ldx, *Gi = G + (size_t)i * dk;
        float *Ai = A + (size_t)i * lda;
        const int jend = diag ? i + 1 : i;
        for (int j = 0; j < jend; j++) {
            const float *kj = k + (size_t)j * ldk, *Gj = G + (size_t)j * dk;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int d = 0; d < dk; d++) acc += xi[d] * kj[d] * hy_expf(Gi[d] - Gj[d]);
            Ai[j] = s ? s[(size_t)i * lds] * acc : acc;
        }
        for (int j = jend; j < L; j++) Ai[j] = 0.0f;
    }
}

void hy_la_kda_chunked(const hy_la_in *in, float *S, float *o, size_t ldo, float *T, float *work)
{
    const int CL = HY_LA_CHUNK, n = in->n, dk = in->dk, dv = in->dv;
    const size_t ldq = in->ldq, ldk = in->ldk, ldv = in->ldv, ldg = in->ldg, ldb = in->ldb;
    float *G = work;                   /* [L][dk] cumulative log-decay */
    float *Tm = G + (size_t)CL * dk;   /* [L][L] (I + Lm)^-1, unit lower */
    float *A = Tm + (size_t)CL * CL;   /* [L][L] Lm, then the masked decayed q kᵀ */
    float *Wk = A + (size_t)CL * CL;   /* [L][dk] β k ⊙ exp(G) -> W */
    float *Qg = Wk + (size_t)CL * dk;  /* [L][dk] q ⊙ exp(G) */
    float *Kd = Qg + (size_t)CL * dk;  /* [L][dk] k ⊙ exp(G_L − G) */
    float *Vt = Kd + (size_t)CL * dk;  /* [L][dk] −W·T */
    float *Vn = Vt + (size_t)CL * dk;  /* [L][dv] β v -> U -> V' */
    float *eGL = Vn + (size_t)CL * dv; /* [dk] exp(G_L) */
    float *Ki = eGL + dk;              /* [L][dk] k ⊙ exp(−G) (factored chunks) */

    for (int c0 = 0; c0 < n; c0 += CL) {
        const int L = HY_MIN_INT(CL, n - c0);
        const float *qc = o ? in->q + (size_t)c0 * ldq : NULL, *kc = in->k + (size_t)c0 * ldk;
        const float *vc = in->v + (size_t)c0 * ldv, *gc = in->g + (size_t)c0 * ldg;
        const float *bc = in->beta + (size_t)c0 * ldb;
        for (int i = 0; i < L; i++) {
            float *Gi = G + (size_t)i * dk;
            const float *gi = gc + (size_t)i * ldg;
            for (int d = 0; d < dk; d++) Gi[d] = (i ? Gi[d - dk] : 0.0f) + gi[d];
        }
        const float *GL = G + (size_t)(L - 1) * dk;
        float deepest = 0.0f; /* the chunk's most negative cumulative log-decay */
        for (int d = 0; d < dk; d++) {
            eGL[d] = hy_expf(GL[d]);
            deepest = GL[d] < deepest ? GL[d] : deepest;
        }
        /* Within exp(±80) the pairwise ratios factor exactly as
         * (x ⊙ exp(G_i))·(k ⊙ exp(−G_j)) — no factor leaves fp32's normal
         * range — so the two score matrices are GEMMs; a chunk that decays
         * further takes them pairwise. */
        const bool factored = deepest >= -80.0f;

        /* The q / k scalings (W before Tm: β k ⊙ exp(G)). */
        for (int i = 0; i < L; i++) {
            const float bi = bc[(size_t)i * ldb], *Gi = G + (size_t)i * dk;
            const float *ki = kc + (size_t)i * ldk, *vi = vc + (size_t)i * ldv;
            float *wi = Wk + (size_t)i * dk, *kd = Kd + (size_t)i * dk;
            float *vn = Vn + (size_t)i * dv;
            float *qg = o ? Qg + (size_t)i * dk : NULL;
            const float *qi = o ? qc + (size_t)i * ldq : NULL;
            if (factored) { /* one exponential per entry: exp(−G) = 1 / exp(G) is normal */
                float *kin = Ki + (size_t)i * dk;
                for (int d = 0; d < dk; d++) {
                    const float e = hy_expf(Gi[d]), en = 1.0f / e;
                    wi[d] = bi * e * ki[d];
                    kd[d] = eGL[d] * en * ki[d];
                    kin[d] = en * ki[d];
                    if (qg) qg[d] = e * qi[d];
                }
            } else {
                for (int d = 0; d < dk; d++) {
                    wi[d] = bi * hy_expf(Gi[d]) * ki[d];
                    kd[d] = hy_expf(GL[d] - Gi[d]) * ki[d];
                    if (qg) qg[d] = hy_expf(Gi[d]) * qi[d];
                }
            }
            for (int j = 0; j < dv; j++) vn[j] = bi * vi[j];
        }

        /* Lm and its inverse by forward substitution: (I + Lm) Tm = I; then
         * U = Tm (β v), W = Tm (β k ⊙ exp(G)). */
        if (factored) {
            hy_gemm(0, 1, L, L, dk, 1.0f, Wk, (size_t)dk, Ki, (size_t)dk, 0.0f, A, (size_t)CL);
            for (int i = 0; i < L; i++)
                for (int j = i; j < CL; j++) A[(size_t)i * CL + j] = 0.0f;
        } else {
            decayed_scores(L, dk, kc, ldk, kc, ldk, G, 0, bc, ldb, A, CL);
        }
        hy_unit_lower_inverse(L, A, Tm, CL);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dv, 1.0f, Tm,
                    CL, Vn, dv);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dk, 1.0f, Tm,
                    CL, Wk, dk);

        /* The transition operator: T ← Diag(exp(G_L)) T + Kdᵀ (−W T). */
        if (T) {
            hy_gemm(0, 0, L, dk, dk, -1.0f, Wk, (size_t)dk, T, (size_t)dk, 0.0f, Vt, (size_t)dk);
            for (int d = 0; d < dk; d++)
                for (int j = 0; j < dk; j++) T[(size_t)d * dk + j] *= eGL[d];
            hy_gemm(1, 0, dk, dk, L, 1.0f, Kd, (size_t)dk, Vt, (size_t)dk, 1.0f, T, (size_t)dk);
        }

        /* V' = U − W S */
        hy_gemm(0, 0, L, dv, dk, -1.0f, Wk, (size_t)dk, S, (size_t)dv, 1.0f, Vn, (size_t)dv);

        /* o = (q ⊙ exp(G)) S + mask(decayed q kᵀ) V' */
        if (o) {
            float *oc = o + (size_t)c0 * ldo;
            hy_gemm(0, 0, L, dv, dk, 1.0f, Qg, (size_t)dk, S, (size_t)dv, 0.0f, oc, ldo);
            if (factored) {
                hy_gemm(0, 1, L, L, dk, 1.0f, Qg, (size_t)dk, Ki, (size_t)dk, 0.0f, A, (size_t)CL);
                for (int i = 0; i < L; i++)
                    for (int j = i + 1; j < CL; j++) A[(size_t)i * CL + j] = 0.0f;
            } else {
                decayed_scores(L, dk, qc, ldq, kc, ldk, G, 1, NULL, 0, A, CL);
            }
            hy_gemm(0, 0, L, dv, L, 1.0f, A, (size_t)CL, Vn, (size_t)dv, 1.0f, oc, ldo);
        }

        /* S ← Diag(exp(G_L)) S + (k ⊙ exp(G_L − G))ᵀ V' */
        for (int d = 0; d < dk; d++)
            for (int j = 0; j < dv; j++) S[(size_t)d * dv + j] *= eGL[d];
        hy_gemm(1, 0, dk, dv, L, 1.0f, Kd, (size_t)dk, Vn, (size_t)dv, 1.0f, S, (size_t)dv);
    }
}
