/*
 * The linear-attention families of hy_kernels.h (hy_la_*): their table, the kernels
 * of the gated families without a delta rule (RetNet, Lightning, Mamba2,
 * simple GLA, GLA), and the dispatch of the delta-rule families (DeltaNet and
 * Gated DeltaNet to gdn.c, KDA to kda.c).
 *
 * Gated families, one head, decay vector a_t = exp(g_t) (a scalar broadcast
 * over the key axis, or GLA's dk-vector):
 *
 * recurrent — S ← Diag(a_t)·S + k vᵀ;  o = Sᵀq, with a_t carried in two
 * floats (split_decay) so a constant decay near 1 does not drift.
 *
 * chunked — chunks of L ≤ 64 tokens. With G_i = g_1 + … + g_i (per key dim
 * for GLA) and log-decays ≤ 0, every ratio exp(G_i − G_j), j ≤ i, is ≤ 1:
 *     o_i = (q_i ⊙ exp(G_i))ᵀ S + Σ_{j≤i} (Σ_d q_i[d] k_j[d] exp(G_i[d] − G_j[d])) v_j
 *     S  ← Diag(exp(G_L))·S + (k ⊙ exp(G_L − G))ᵀ V
 * For a scalar decay the intra-chunk scores are one GEMM q kᵀ scaled by the
 * ratios; for GLA each score carries its own per-dimension ratios, formed
 * pairwise (never as exp(G_i)·exp(−G_j), which overflows for strong decays).
 *
 * T for these families is a scalar or a diagonal, exp(Σ g) — summed in
 * double and exponentiated once rather than multiplied token by token.
 *
 * DeltaNet and Gated DeltaNet go to hy_gdn_recurrent / hy_gdn_chunked
 * (DeltaNet with g = 0) in blocks of DELTA_BLOCK tokens whose g and β are
 * copied contiguous, because hy_gdn_in shares one stride between them; the
 * blocks are whole chunks, so chunks still count from this call's first token.
 */
#include "hy_kernels.h"
#include "la_internal.h"

#include <assert.h>
#include <string.h>

static const struct {
    const char *name;
    hy_la_tkind kind;
    int decaying, beta;
} g_family[HY_LA_NFAMILIES] = {
    [HY_LA_RETNET] = {"retnet", HY_LA_T_SCALAR, 1, 0},
    [HY_LA_LIGHTNING] = {"lightning", HY_LA_T_SCALAR, 1, 0},
    [HY_LA_MAMBA2] = {"mamba2", HY_LA_T_SCALAR, 1, 0},
    [HY_LA_SIMPLE_GLA] = {"simple_gla", HY_LA_T_SCALAR, 1, 0},
    [HY_LA_GLA] = {"gla", HY_LA_T_DIAG, 1, 0},
    [HY_LA_DELTANET] = {"deltanet", HY_LA_T_DENSE, 0, 1},
    [HY_LA_GDN] = {"gated_deltanet", HY_LA_T_DENSE, 1, 1},
    [HY_LA_KDA] = {"kda", HY_LA_T_DENSE, 1, 1},
};

const char *hy_la_family_name(hy_la_family f)
{
    return (unsigned)f < HY_LA_NFAMILIES ? g_family[f].name : "?";
}

hy_la_tkind hy_la_t_kind(hy_la_family f)
{
    assert((unsigned)f < HY_LA_NFAMILIES);
    return g_family[f].kind;
}

size_t hy_la_t_size(hy_la_family f, int dk)
{
    switch (hy_la_t_kind(f)) {
    case HY_LA_T_SCALAR:
        return 1;
    case HY_LA_T_DIAG:
        return (size_t)dk;
    case HY_LA_T_DENSE:
        return (size_t)dk * (size_t)dk;
    }
    return 0;
}

int hy_la_decaying(hy_la_family f)
{
    assert((unsigned)f < HY_LA_NFAMILIES);
    return g_family[f].decaying;
}

int hy_la_has_beta(hy_la_family f)
{
    assert((unsigned)f < HY_LA_NFAMILIES);
    return g_family[f].beta;
}

float hy_la_retnet_log_decay(int h)
{
    return (float)log1p(-ldexp(1.0, -5 - h));
}

/* The scalar log-decay of token t (the constant for RetNet and Lightning). */
static float scalar_gate(const hy_la_in *in, int t)
{
    if (in->family == HY_LA_RETNET || in->family == HY_LA_LIGHTNING) return in->g0;
    return in->g[(size_t)t * in->ldg];
}

int hy_la_log_transition(const hy_la_in *in, double *logT)
{
    switch (hy_la_t_kind(in->family)) {
    case HY_LA_T_SCALAR:
        if (in->family == HY_LA_RETNET || in->family == HY_LA_LIGHTNING) {
            logT[0] += (double)in->g0 * in->n;
        } else {
            double s = 0;
            for (int t = 0; t < in->n; t++) s += in->g[(size_t)t * in->ldg];
            logT[0] += s;
        }
        return HY_OK;
    case HY_LA_T_DIAG:
        for (int t = 0; t < in->n; t++) {
            const float *gt = in->g + (size_t)t * in->ldg;
            for (int d = 0; d < in->dk; d++) logT[d] += gt[d];
        }
        return HY_OK;
    case HY_LA_T_DENSE:
        break;
    }
    return HY_EINVAL;
}

/* T ← exp(Σ g)·T for a scalar or diagonal T. */
static void advance_decay_t(const hy_la_in *in, float *T)
{
    const int w = hy_la_t_kind(in->family) == HY_LA_T_DIAG ? in->dk : 1;
    double logT[w];
    memset(logT, 0, sizeof logT);
    hy_la_log_transition(in, logT);
    for (int d = 0; d < w; d++) T[d] = (float)((double)T[d] * exp(logT[d]));
}

/* A decay a = exp(g) as hi + lo, hi = fl(a): a decay near 1 rounded to fp32 is
 * off by up to 2^-25 in the same direction at every token, which a constant
 * decay (RetNet, Lightning) compounds to n·2^-25 over n tokens (6e-5 at 2048);
 * carrying lo keeps the recurrence within the random rounding of S itself. */
static void split_decay(float g, float *hi, float *lo)
{
    const double a = exp((double)g);
    *hi = (float)a;
    *lo = (float)(a - (double)*hi);
}

static void gated_recurrent(const hy_la_in *in, float *S, float *o, size_t ldo)
{
    const int dk = in->dk, dv = in->dv, diag = in->family == HY_LA_GLA;
    for (int t = 0; t < in->n; t++) {
        const float *kt = in->k + (size_t)t * in->ldk, *vt = in->v + (size_t)t * in->ldv;
        const float *gt = diag ? in->g + (size_t)t * in->ldg : NULL;
        float hi = 0.0f, lo = 0.0f;
        if (!diag) split_decay(scalar_gate(in, t), &hi, &lo);
        float *ot = o ? o + (size_t)t * ldo : NULL;
        const float *qt = o ? in->q + (size_t)t * in->ldq : NULL;
        if (ot) memset(ot, 0, (size_t)dv * sizeof *ot);
        for (int i = 0; i < dk; i++) {
            if (diag) split_decay(gt[i], &hi, &lo);
            const float ki = kt[i];
            float *Si = S + (size_t)i * dv;
            for (int j = 0; j < dv; j++) Si[j] = hi * Si[j] + (lo * Si[j] + ki * vt[j]);
            if (ot) {
                const float qi = qt[i];
                for (int j = 0; j < dv; j++) ot[j] += qi * Si[j];
            }
        }
    }
}

static size_t gated_scratch(int dk)
{
    const size_t L = HY_LA_CHUNK;
    return L * L + 3 * L * (size_t)dk;
}

static void gated_chunked(const hy_la_in *in, float *S, float *o, size_t ldo, float *work)
{
    const int CL = HY_LA_CHUNK, n = in->n, dk = in->dk, dv = in->dv;
    const int diag = in->family == HY_LA_GLA, w = diag ? dk : 1;
    float *G = work;                  /* [L][w] cumulative log-decay */
    float *A = G + (size_t)CL * dk;   /* [L][L] decayed q kᵀ, masked to j ≤ i */
    float *Qg = A + (size_t)CL * CL;  /* [L][dk] q ⊙ exp(G) */
    float *Kd = Qg + (size_t)CL * dk; /* [L][dk] k ⊙ exp(G_L − G) */

    for (int c0 = 0; c0 < n; c0 += CL) {
        const int L = HY_MIN_INT(CL, n - c0);
        const float *kc = in->k + (size_t)c0 * in->ldk, *vc = in->v + (size_t)c0 * in->ldv;
        for (int i = 0; i < L; i++) {
            float *Gi = G + (size_t)i * w;
            const float *prev = i ? Gi - w : NULL;
            if (diag) {
                const float *gt = in->g + (size_t)(c0 + i) * in->ldg;
                for (int d = 0; d < dk; d++) Gi[d] = (prev ? prev[d] : 0.0f) + gt[d];
            } else {
                Gi[0] = (prev ? prev[0] : 0.0f) + scalar_gate(in, c0 + i);
            }
        }
        const float *GL = G + (size_t)(L - 1) * w;

        if (o) {
            const float *qc = in->q + (size_t)c0 * in->ldq;
            float *oc = o + (size_t)c0 * ldo;
            for (int i = 0; i < L; i++) {
                const float *qi = qc + (size_t)i * in->ldq, *Gi = G + (size_t)i * w;
                float *qg = Qg + (size_t)i * dk;
                if (diag) {
                    for (int d = 0; d < dk; d++) qg[d] = qi[d] * hy_expf(Gi[d]);
                } else { /* one exponential per row: a scalar decay */
                    const float e = hy_expf(Gi[0]);
#pragma omp simd
                    for (int d = 0; d < dk; d++) qg[d] = qi[d] * e;
                }
            }
            hy_gemm(0, 0, L, dv, dk, 1.0f, Qg, (size_t)dk, S, (size_t)dv, 0.0f, oc, ldo);
            if (!diag) hy_gemm(0, 1, L, L, dk, 1.0f, qc, in->ldq, kc, in->ldk, 0.0f, A, (size_t)CL);
            for (int i = 0; i < L; i++) {
                float *Ai = A + (size_t)i * CL;
                const float *qi = qc + (size_t)i * in->ldq, *Gi = G + (size_t)i * w;
                for (int j = 0; j <= i; j++) {
                    if (!diag) {
                        Ai[j] *= hy_expf(Gi[0] - G[j]);
                        continue;
                    }
                    const float *kj = kc + (size_t)j * in->ldk, *Gj = G + (size_t)j * dk;
                    float s = 0.0f;
#pragma omp simd reduction(+ : s)
                    for (int d = 0; d < dk; d++) s += qi[d] * kj[d] * hy_expf(Gi[d] - Gj[d]);
                    Ai[j] = s;
                }
                for (int j = i + 1; j < L; j++) Ai[j] = 0.0f;
            }
            hy_gemm(0, 0, L, dv, L, 1.0f, A, (size_t)CL, vc, in->ldv, 1.0f, oc, ldo);
        }

        /* S ← Diag(exp(G_L))·S + (k ⊙ exp(G_L − G))ᵀ V */
        for (int i = 0; i < L; i++) {
            const float *ki = kc + (size_t)i * in->ldk, *Gi = G + (size_t)i * w;
            float *kd = Kd + (size_t)i * dk;
            if (diag) {
                for (int d = 0; d < dk; d++) kd[d] = ki[d] * hy_expf(GL[d] - Gi[d]);
            } else {
                const float e = hy_expf(GL[0] - Gi[0]);
#pragma omp simd
                for (int d = 0; d < dk; d++) kd[d] = ki[d] * e;
            }
        }
        const float eL = hy_expf(GL[0]);
        for (int d = 0; d < dk; d++) {
            const float e = diag ? hy_expf(GL[d]) : eL;
            float *Sd = S + (size_t)d * dv;
#pragma omp simd
            for (int j = 0; j < dv; j++) Sd[j] *= e;
        }
        hy_gemm(1, 0, dk, dv, L, 1.0f, Kd, (size_t)dk, vc, in->ldv, 1.0f, S, (size_t)dv);
    }
}

/* A multiple of the GDN chunk, so delegated blocks keep the chunk grid. */
#define DELTA_BLOCK 256
_Static_assert(DELTA_BLOCK % HY_GDN_CHUNK == 0, "delta blocks must be whole chunks");
_Static_assert(HY_LA_CHUNK == HY_GDN_CHUNK, "one chunk size for every family");

/* DeltaNet and GDN through gdn.c; work == NULL selects the recurrent form. */
static void delta_run(const hy_la_in *in, float *S, float *o, size_t ldo, float *T, float *work)
{
    float g[DELTA_BLOCK], b[DELTA_BLOCK];
    const int gated = in->family == HY_LA_GDN;
    for (int b0 = 0; b0 < in->n; b0 += DELTA_BLOCK) {
        const int B = HY_MIN_INT(DELTA_BLOCK, in->n - b0);
        for (int t = 0; t < B; t++) {
            g[t] = gated ? in->g[(size_t)(b0 + t) * in->ldg] : 0.0f;
            b[t] = in->beta[(size_t)(b0 + t) * in->ldb];
        }
        const hy_gdn_in gi = {.n = B,
                              .dk = in->dk,
                              .dv = in->dv,
                              .q = o ? in->q + (size_t)b0 * in->ldq : NULL,
                              .k = in->k + (size_t)b0 * in->ldk,
                              .v = in->v + (size_t)b0 * in->ldv,
                              .ldq = in->ldq,
                              .ldk = in->ldk,
                              .ldv = in->ldv,
                              .g = g,
                              .beta = b,
                              .ldgb = 1};
        float *ob = o ? o + (size_t)b0 * ldo : NULL;
        if (work)
            hy_gdn_chunked(&gi, S, ob, ldo, T, work);
        else
            hy_gdn_recurrent(&gi, S, ob, ldo, T);
    }
}

void hy_la_recurrent(const hy_la_in *in, float *S, float *o, size_t ldo, float *T)
{
    switch (in->family) {
    case HY_LA_DELTANET:
    case HY_LA_GDN:
        delta_run(in, S, o, ldo, T, NULL);
        return;
    case HY_LA_KDA:
        hy_la_kda_recurrent(in, S, o, ldo, T);
        return;
    default:
        assert((unsigned)in->family < HY_LA_NFAMILIES);
        gated_recurrent(in, S, o, ldo);
        if (T) advance_decay_t(in, T);
        return;
    }
}

size_t hy_la_chunked_scratch(hy_la_family f, int dk, int dv)
{
    switch (f) {
    case HY_LA_DELTANET:
    case HY_LA_GDN:
        return hy_gdn_chunked_scratch(dk, dv);
    case HY_LA_KDA:
        return hy_la_kda_scratch(dk, dv);
    default:
        return gated_scratch(dk);
    }
}

void hy_la_chunked(const hy_la_in *in, float *S, float *o, size_t ldo, float *T, float *work)
{
    assert(work);
    switch (in->family) {
    case HY_LA_DELTANET:
    case HY_LA_GDN:
        delta_run(in, S, o, ldo, T, work);
        return;
    case HY_LA_KDA:
        hy_la_kda_chunked(in, S, o, ldo, T, work);
        return;
    default:
        assert((unsigned)in->family < HY_LA_NFAMILIES);
        gated_chunked(in, S, o, ldo, work);
        if (T) advance_decay_t(in, T);
        return;
    }
}
