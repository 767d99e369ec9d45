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
 */
#include "kernels/hy_kernels.h"

#include <cblas.h>
#include <string.h>

void hy_gdn_recurrent(int n, int dk, int dv, const float *q, size_t ldq, const float *k, size_t ldk,
                      const float *v, size_t ldv, const float *g, const float *beta, size_t ldgb,
                      float *S, float *o, size_t ldo)
{
    float u[dv], d[dv];
    for (int t = 0; t < n; t++) {
        const float *qt = q + (size_t)t * ldq, *kt = k + (size_t)t * ldk;
        const float *vt = v + (size_t)t * ldv;
        float *ot = o + (size_t)t * ldo;
        const float a = hy_expf(g[(size_t)t * ldgb]), b = beta[(size_t)t * ldgb];
        memset(u, 0, sizeof u);
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv;
            const float ki = kt[i];
            for (int j = 0; j < dv; j++) {
                Si[j] *= a;
                u[j] += ki * Si[j];
            }
        }
        for (int j = 0; j < dv; j++) d[j] = b * (vt[j] - u[j]);
        memset(ot, 0, (size_t)dv * sizeof *ot);
        for (int i = 0; i < dk; i++) {
            float *Si = S + (size_t)i * dv;
            const float ki = kt[i], qi = qt[i];
            for (int j = 0; j < dv; j++) {
                Si[j] += ki * d[j];
                ot[j] += qi * Si[j];
            }
        }
    }
}

size_t hy_gdn_chunked_scratch(int dk, int dv)
{
    const size_t L = HY_GDN_CHUNK;
    return 2 * L + 2 * L * L + 3 * L * (size_t)dk + L * (size_t)dv;
}

void hy_gdn_chunked(int n, int dk, int dv, const float *q, size_t ldq, const float *k, size_t ldk,
                    const float *v, size_t ldv, const float *g, const float *beta, size_t ldgb,
                    float *S, float *o, size_t ldo, float *work)
{
    const int CL = HY_GDN_CHUNK;
    float *G = work;                  /* [L] cumulative log-decay */
    float *eG = G + CL;               /* [L] exp(G) */
    float *T = eG + CL;               /* [L][L] (I + Lm)^-1, unit lower */
    float *A = T + (size_t)CL * CL;   /* [L][L] k kᵀ, then the masked q kᵀ */
    float *Wk = A + (size_t)CL * CL;  /* [L][dk] β k exp(G) -> W */
    float *Qg = Wk + (size_t)CL * dk; /* [L][dk] q exp(G) */
    float *Kd = Qg + (size_t)CL * dk; /* [L][dk] k exp(G_L - G) */
    float *Vn = Kd + (size_t)CL * dk; /* [L][dv] β v -> U -> V' */

    for (int c0 = 0; c0 < n; c0 += CL) {
        const int L = HY_MIN_INT(CL, n - c0);
        const float *qc = q + (size_t)c0 * ldq, *kc = k + (size_t)c0 * ldk;
        const float *vc = v + (size_t)c0 * ldv;
        float *oc = o + (size_t)c0 * ldo;
        float acc = 0.0f;
        for (int i = 0; i < L; i++) {
            acc += g[(size_t)(c0 + i) * ldgb];
            G[i] = acc;
            eG[i] = hy_expf(acc);
        }
        const float GL = G[L - 1], eGL = eG[L - 1];

        /* Lm and its inverse by forward substitution: (I + Lm) T = I. */
        hy_gemm(0, 1, L, L, dk, 1.0f, kc, ldk, kc, ldk, 0.0f, A, (size_t)CL);
        for (int i = 0; i < L; i++) {
            const float bi = beta[(size_t)(c0 + i) * ldgb];
            float *Ai = A + (size_t)i * CL;
#pragma omp simd
            for (int j = 0; j < i; j++) Ai[j] *= bi * hy_expf(G[i] - G[j]);
        }
        memset(T, 0, (size_t)CL * CL * sizeof *T);
        for (int i = 0; i < L; i++) {
            float *Ti = T + (size_t)i * CL;
            const float *Ai = A + (size_t)i * CL;
            for (int j = 0; j < i; j++) {
                float s = 0.0f;
                for (int m = j; m < i; m++) s += Ai[m] * T[(size_t)m * CL + j];
                Ti[j] = -s;
            }
            Ti[i] = 1.0f;
        }

        /* U = T (β v), W = T (β k exp(G)), and the q / k scalings. */
        for (int i = 0; i < L; i++) {
            const float bi = beta[(size_t)(c0 + i) * ldgb];
            const float *ki = kc + (size_t)i * ldk, *qi = qc + (size_t)i * ldq;
            const float *vi = vc + (size_t)i * ldv;
            float *wi = Wk + (size_t)i * dk, *qg = Qg + (size_t)i * dk, *kd = Kd + (size_t)i * dk;
            float *vn = Vn + (size_t)i * dv;
            const float e = eG[i], ed = hy_expf(GL - G[i]);
            for (int j = 0; j < dk; j++) {
                wi[j] = bi * e * ki[j];
                qg[j] = e * qi[j];
                kd[j] = ed * ki[j];
            }
            for (int j = 0; j < dv; j++) vn[j] = bi * vi[j];
        }
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dv, 1.0f, T,
                    CL, Vn, dv);
        cblas_strmm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, L, dk, 1.0f, T,
                    CL, Wk, dk);

        /* V' = U − W S */
        hy_gemm(0, 0, L, dv, dk, -1.0f, Wk, (size_t)dk, S, (size_t)dv, 1.0f, Vn, (size_t)dv);

        /* o = (q exp(G)) S + mask(q kᵀ exp(G_i − G_j)) V' */
        hy_gemm(0, 0, L, dv, dk, 1.0f, Qg, (size_t)dk, S, (size_t)dv, 0.0f, oc, ldo);
        hy_gemm(0, 1, L, L, dk, 1.0f, qc, ldq, kc, ldk, 0.0f, A, (size_t)CL);
        for (int i = 0; i < L; i++) {
            float *Ai = A + (size_t)i * CL;
#pragma omp simd
            for (int j = 0; j <= i; j++) Ai[j] *= hy_expf(G[i] - G[j]);
            for (int j = i + 1; j < L; j++) Ai[j] = 0.0f;
        }
        hy_gemm(0, 0, L, dv, L, 1.0f, A, (size_t)CL, Vn, (size_t)dv, 1.0f, oc, ldo);

        /* S ← exp(G_L) S + (k exp(G_L − G))ᵀ V' */
        for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] *= eGL;
        hy_gemm(1, 0, dk, dv, L, 1.0f, Kd, (size_t)dk, Vn, (size_t)dv, 1.0f, S, (size_t)dv);
    }
}
