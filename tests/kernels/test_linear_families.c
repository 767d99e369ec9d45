/*
 * Every linear-attention family of hy_kernels.h (hy_la_*), with random inputs
 * shaped as the models make them (q, k L2-normalised, β ∈ (0, 1), log-decays
 * from near zero to strong):
 *   - the recurrent form against a double-precision transcription of
 *     S_t = A_t·S_{t-1} + B_t (state, outputs and the transition operator T);
 *   - the chunked form against the recurrent one, from zero and random states;
 *   - segments built independently (S = 0, T = I) and composed — left fold,
 *     tree, and applied one by one to a running state as reuse does — against
 *     the recurrence over their concatenation;
 *   - segments read out of one run (S_i = S_end − T_i·S_start, as entries are
 *     built) against the same segments built alone, and the per-head batch
 *     functions the executor calls against one head at a time;
 *   - naive addition of segment states, wrong for every non-additive family;
 *   - RoPE: a canonical segment moved to start s against the segment built
 *     with its keys rotated at their absolute positions.
 * Each case prints its measured errors so the margins are visible.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "test_util.h"

#include <string.h>

typedef struct la_case {
    int n, dk, dv;
    double g_lo, g_hi; /* log-decay drawn uniformly in [g_lo, g_hi] (constant: the midpoint) */
    int warm;          /* random initial state instead of zeros */
    int tie_rd;        /* > 0: per-dim gates equal over RoPE pairs (i, i + tie_rd/2) */
} la_case;

typedef struct la_data {
    hy_la_family f;
    int n, dk, dv, ld, ldg, ldb;
    float *qkv, *q, *k, *v, *g, *b, *S0, g0;
} la_data;

static int gate_width(hy_la_family f, int dk)
{
    return hy_la_t_kind(f) == HY_LA_T_SCALAR || f == HY_LA_DELTANET ? 1 : dk;
}

/* Random inputs with row strides wider than the rows, as the executor reads
 * slices of fused projections. */
static la_data make(hy_la_family f, const la_case *c, uint64_t seed)
{
    la_data d = {.f = f, .n = c->n, .dk = c->dk, .dv = c->dv};
    d.ld = 2 * c->dk + c->dv + 3;
    d.ldg = gate_width(f, c->dk) + 1;
    d.ldb = 3;
    hy_rng r;
    hy_rng_seed(&r, seed);
    d.qkv = calloc((size_t)c->n * d.ld, sizeof(float));
    d.q = d.qkv, d.k = d.qkv + c->dk, d.v = d.qkv + 2 * c->dk;
    d.g = calloc((size_t)c->n * d.ldg, sizeof(float));
    d.b = calloc((size_t)c->n * d.ldb, sizeof(float));
    d.S0 = calloc((size_t)c->dk * c->dv, sizeof(float));
    d.g0 = (float)(0.5 * (c->g_lo + c->g_hi));
    const int w = gate_width(f, c->dk);
    for (int t = 0; t < c->n; t++) {
        float *row = d.qkv + (size_t)t * d.ld, *gt = d.g + (size_t)t * d.ldg;
        for (int i = 0; i < 2 * c->dk + c->dv; i++) row[i] = (float)hy_rng_normal(&r);
        hy_l2norm_scale(row, c->dk, 1e-6f, 1.0f / sqrtf((float)c->dk));
        hy_l2norm_scale(row + c->dk, c->dk, 1e-6f, 1.0f);
        for (int i = 0; i < w; i++)
            gt[i] = (float)(c->g_lo + (c->g_hi - c->g_lo) * hy_rng_uniform(&r));
        if (c->tie_rd > 0)
            for (int i = 0; i < c->tie_rd / 2; i++) gt[i + c->tie_rd / 2] = gt[i];
        d.b[(size_t)t * d.ldb] = (float)(0.02 + 0.96 * hy_rng_uniform(&r));
    }
    if (c->warm)
        for (int i = 0; i < c->dk * c->dv; i++) d.S0[i] = (float)hy_rng_normal(&r);
    return d;
}

static void drop(la_data *d)
{
    free(d->qkv), free(d->g), free(d->b), free(d->S0);
}

/* The kernel inputs for tokens [a, a + n) of d. */
static hy_la_in in_of(const la_data *d, int a, int n)
{
    return (hy_la_in){.family = d->f,
                      .n = n,
                      .dk = d->dk,
                      .dv = d->dv,
                      .q = d->q + (size_t)a * d->ld,
                      .k = d->k + (size_t)a * d->ld,
                      .v = d->v + (size_t)a * d->ld,
                      .ldq = (size_t)d->ld,
                      .ldk = (size_t)d->ld,
                      .ldv = (size_t)d->ld,
                      .g = d->g + (size_t)a * d->ldg,
                      .ldg = (size_t)d->ldg,
                      .beta = d->b + (size_t)a * d->ldb,
                      .ldb = (size_t)d->ldb,
                      .g0 = d->g0};
}

/* The log-decay of key dim i at token t, as the family table of hy_kernels.h has it. */
static double log_decay(const la_data *d, int t, int i)
{
    switch (d->f) {
    case HY_LA_RETNET:
    case HY_LA_LIGHTNING:
        return d->g0;
    case HY_LA_DELTANET:
        return 0.0;
    case HY_LA_GLA:
    case HY_LA_KDA:
        return d->g[(size_t)t * d->ldg + i];
    default:
        return d->g[(size_t)t * d->ldg];
    }
}

/* Double precision, straight from the definition: per token the decay
 * D = Diag(a) (a scalar decay broadcast), then for the delta rule
 * A·S + B = (I − β k kᵀ) D S + β k vᵀ = D S + β k (v − (D S)ᵀ k)ᵀ (GDN's
 * scalar decay commutes with the delta factor, so this order covers it too),
 * otherwise D S + k vᵀ; o = Sᵀq. T (dense: [dk][dk], else the diagonal
 * [dk]) advances by the same A with zero values. */
static void reference(const la_data *d, double *S, double *o, double *T)
{
    const int dk = d->dk, dv = d->dv, delta = hy_la_has_beta(d->f);
    const int dense = hy_la_t_kind(d->f) == HY_LA_T_DENSE, wt = dense ? dk : 1;
    double *u = malloc(sizeof(double) * (size_t)(dv > dk ? dv : dk)),
           *a = malloc(sizeof(double) * dk);
    for (int t = 0; t < d->n; t++) {
        const float *q = d->q + (size_t)t * d->ld, *k = d->k + (size_t)t * d->ld;
        const float *v = d->v + (size_t)t * d->ld;
        const double b = delta ? d->b[(size_t)t * d->ldb] : 1.0;
        for (int i = 0; i < dk; i++) a[i] = exp(log_decay(d, t, i));
        for (int pass = 0; pass < 2; pass++) { /* 0: S, 1: T */
            double *X = pass ? T : S;
            const int w = pass ? wt : dv;
            if (pass && !dense) {
                for (int i = 0; i < dk; i++) T[i] *= a[i];
                continue;
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < w; j++) X[(size_t)i * w + j] *= a[i];
            for (int j = 0; j < w; j++) {
                u[j] = 0;
                if (delta)
                    for (int i = 0; i < dk; i++) u[j] += k[i] * X[(size_t)i * w + j];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < w; j++)
                    X[(size_t)i * w + j] += b * k[i] * ((pass ? 0.0 : v[j]) - u[j]);
        }
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += S[(size_t)i * dv + j] * q[i];
            o[(size_t)t * dv + j] = s;
        }
    }
    free(u), free(a);
}

static double rel_vs_double(const float *x, const double *ref, size_t n)
{
    double m = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        s = fmax(s, fabs(ref[i]));
        double e = fabs((double)x[i] - ref[i]);
        if (!(e <= m)) m = e;
    }
    return m / s;
}

static float *fdup(const float *x, size_t n)
{
    float *y = malloc(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

static float *t_new(hy_la_family f, int dk)
{
    float *T = malloc(hy_la_t_size(f, dk) * sizeof(float));
    hy_la_t_identity(hy_la_t_kind(f), dk, T);
    return T;
}

static float *work_new(hy_la_family f, int dk, int dv)
{
    size_t a = hy_la_chunked_scratch(f, dk, dv), b = hy_la_compose_scratch(HY_LA_T_DENSE, dk, dv);
    return malloc((a > b ? a : b) * sizeof(float));
}

static const hy_la_family all_families[] = {HY_LA_RETNET,     HY_LA_LIGHTNING, HY_LA_MAMBA2,
                                            HY_LA_SIMPLE_GLA, HY_LA_GLA,       HY_LA_DELTANET,
                                            HY_LA_GDN,        HY_LA_KDA};
#define NFAM ((int)(sizeof all_families / sizeof *all_families))

static double g_worst[8]; /* per test, the worst error asserted small */

static void note(int slot, double e)
{
    if (!(e <= g_worst[slot])) g_worst[slot] = e;
}

static void test_family_table(void)
{
    CU_ASSERT(hy_la_t_size(HY_LA_RETNET, 64) == 1);
    CU_ASSERT(hy_la_t_size(HY_LA_SIMPLE_GLA, 64) == 1);
    CU_ASSERT(hy_la_t_size(HY_LA_GLA, 64) == 64);
    CU_ASSERT(hy_la_t_size(HY_LA_KDA, 64) == 64 * 64);
    CU_ASSERT(hy_la_t_size(HY_LA_DELTANET, 128) == 128 * 128);
    for (int i = 0; i < NFAM; i++)
        CU_ASSERT(hy_la_decaying(all_families[i]) == (all_families[i] != HY_LA_DELTANET));
    CU_ASSERT(fabs(hy_la_retnet_log_decay(0) - log(1.0 - 1.0 / 32)) < 1e-7);
    CU_ASSERT(fabs(hy_la_retnet_log_decay(7) - log(1.0 - 1.0 / 4096)) < 1e-9);
}

static void test_recurrent_matches_definition(void)
{
    const la_case cases[] = {
        {1, 16, 16, -1.0, 0.0, 0, 0},
        {77, 32, 24, -0.5, -0.01, 1, 0},
        {300, 64, 64, -6, -4, 1, 0},     /* strong decay: forgets within a token */
        {300, 64, 64, -1e-4, 0.0, 1, 0}, /* near zero: decay barely acts */
        {130, 16, 40, -3.0, -1.0, 1, 0},
        {2048, 64, 64, -1e-4, 0.0, 1, 0}, /* long: a constant decay near 1 must not drift */
    };
    for (int fi = 0; fi < NFAM; fi++) {
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            const la_case *c = &cases[ci];
            la_data d = make(all_families[fi], c, 100 + 10 * fi + ci);
            const int dk = c->dk, dv = c->dv, dense = hy_la_t_kind(d.f) == HY_LA_T_DENSE;
            const size_t SS = (size_t)dk * dv, OS = (size_t)c->n * dv;
            const size_t TS = hy_la_t_size(d.f, dk), TR = dense ? TS : (size_t)dk;
            float *S = fdup(d.S0, SS), *o = calloc(OS, 4), *T = t_new(d.f, dk);
            double *Sr = malloc(SS * 8), *orf = malloc(OS * 8), *Tr = calloc(TR, 8);
            for (size_t i = 0; i < SS; i++) Sr[i] = d.S0[i];
            for (int i = 0; i < dk; i++) Tr[dense ? (size_t)i * dk + i : (size_t)i] = 1.0;
            const hy_la_in in = in_of(&d, 0, c->n);
            hy_la_recurrent(&in, S, o, dv, T);
            reference(&d, Sr, orf, Tr);
            const double es = rel_vs_double(S, Sr, SS), eo = rel_vs_double(o, orf, OS);
            const double et = rel_vs_double(T, Tr, TS); /* scalar T: Tr[0] is its value */
            printf("\n    %-14s n=%-4d dk=%-3d dv=%-3d g in [%g, %g]%s: S %.1e o %.1e T %.1e",
                   hy_la_family_name(d.f), c->n, dk, dv, c->g_lo, c->g_hi, c->warm ? " warm" : "",
                   es, eo, et);
            CU_ASSERT(es <= 1e-5 && eo <= 1e-5 && et <= 1e-5);
            note(0, fmax(es, fmax(eo, et)));
            free(S), free(o), free(T), free(Sr), free(orf), free(Tr);
            drop(&d);
        }
    }
    printf("\n    worst %.1e", g_worst[0]);
}

static void chunked_case(hy_la_family f, const la_case *c, uint64_t seed)
{
    la_data d = make(f, c, seed);
    const int dk = c->dk, dv = c->dv;
    const size_t SS = (size_t)dk * dv, OS = (size_t)c->n * dv, TS = hy_la_t_size(f, dk);
    float *Sr = fdup(d.S0, SS), *Sc = fdup(d.S0, SS), *orr = calloc(OS, 4), *oc = calloc(OS, 4);
    float *Tr = t_new(f, dk), *Tc = t_new(f, dk), *work = work_new(f, dk, dv);
    const hy_la_in in = in_of(&d, 0, c->n);
    hy_la_recurrent(&in, Sr, orr, dv, Tr);
    hy_la_chunked(&in, Sc, oc, dv, Tc, work);
    const double es = hy_rel_diff(Sc, Sr, SS), eo = hy_rel_diff(oc, orr, OS);
    const double et = hy_rel_diff(Tc, Tr, TS);
    printf("\n    %-14s n=%-4d dk=%-3d dv=%-3d g in [%g, %g]%s: S %.1e o %.1e T %.1e",
           hy_la_family_name(f), c->n, dk, dv, c->g_lo, c->g_hi, c->warm ? " warm" : "", es, eo,
           et);
    CU_ASSERT(es <= 1e-5 && eo <= 1e-5 && et <= 1e-5);
    note(1, fmax(es, fmax(eo, et)));
    free(Sr), free(Sc), free(orr), free(oc), free(Tr), free(Tc), free(work);
    drop(&d);
}

static void test_chunked_matches_recurrent(void)
{
    const la_case cases[] = {
        {1, 16, 16, -1, 0, 1, 0},        {2, 16, 16, -1, 0, 0, 0},
        {63, 32, 32, -1, 0, 1, 0},       {64, 32, 32, -1, 0, 0, 0},
        {65, 32, 32, -1, 0, 1, 0},       {127, 16, 48, -0.3, -0.1, 1, 0},
        {300, 64, 64, -1e-4, 0.0, 1, 0}, {300, 64, 64, -6.0, -4.0, 1, 0},
        {2048, 64, 64, -0.5, 0.0, 1, 0}, {2048, 64, 64, -1e-4, 0.0, 0, 0},
    };
    for (int fi = 0; fi < NFAM; fi++)
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++)
            chunked_case(all_families[fi], &cases[ci], 200 + 16 * fi + ci);
    const la_case big = {2048, 128, 128, -0.5, 0.0, 1, 0}; /* Qwen3.5's head size */
    chunked_case(HY_LA_GDN, &big, 999);
    printf("\n    worst %.1e", g_worst[1]);
}

/* Cut [0, n) into k pieces of varied lengths (1 token up to several chunks). */
static void random_cuts(hy_rng *r, int n, int k, int *cut)
{
    cut[0] = 0, cut[k] = n;
    for (;;) {
        for (int i = 1; i < k; i++) cut[i] = 1 + (int)(hy_rng_uniform(r) * (n - 1));
        for (int i = 1; i < k; i++) /* insertion sort */
            for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
                int tmp = cut[j];
                cut[j] = cut[j - 1], cut[j - 1] = tmp;
            }
        int ok = 1;
        for (int i = 0; i < k; i++) ok &= cut[i + 1] > cut[i];
        if (ok) return;
    }
}

typedef struct segs {
    int k;
    float *T[16], *S[16];
} segs;

/* (T_i, S_i) for each piece, each built alone from S = 0, T = I (chunked). */
static segs build_segments(const la_data *d, const int *cut, int k, float *work)
{
    segs s = {.k = k};
    for (int i = 0; i < k; i++) {
        s.T[i] = t_new(d->f, d->dk);
        s.S[i] = calloc((size_t)d->dk * d->dv, sizeof(float));
        const hy_la_in in = in_of(d, cut[i], cut[i + 1] - cut[i]);
        hy_la_chunked(&in, s.S[i], NULL, 0, s.T[i], work);
    }
    return s;
}

static void segs_free(segs *s)
{
    for (int i = 0; i < s->k; i++) free(s->T[i]), free(s->S[i]);
}

static void compose_case(hy_la_family f, const la_case *c, int k, uint64_t seed)
{
    la_data d = make(f, c, seed);
    const int dk = c->dk, dv = c->dv;
    const hy_la_tkind kind = hy_la_t_kind(f);
    const size_t SS = (size_t)dk * dv, TS = hy_la_t_size(f, dk);
    float *work = work_new(f, dk, dv);
    hy_rng r;
    hy_rng_seed(&r, seed ^ 0x5eed);
    int cut[17];
    random_cuts(&r, c->n, k, cut);
    segs s = build_segments(&d, cut, k, work);

    /* The truth: one recurrence over the concatenation, from S0 and from I. */
    float *Sref = fdup(d.S0, SS), *Tref = t_new(f, dk);
    const hy_la_in all = in_of(&d, 0, c->n);
    hy_la_recurrent(&all, Sref, NULL, 0, Tref);

    /* Left fold from (I, 0), then the running state S0 through it. */
    float *T = t_new(f, dk), *S = calloc(SS, 4), *Send = fdup(d.S0, SS);
    hy_la_fold(kind, dk, dv, k, (const float *const *)s.T, (const float *const *)s.S, T, S, work);
    hy_la_apply(kind, dk, dv, T, S, Send, work);
    /* Reuse as hy_entry_apply runs it: only the running state advances,
     * S ← T_i·S + S_i per cached segment (hy_la_apply, per head), which
     * hy_la_fold with T NULL does too. */
    float *Srun = fdup(d.S0, SS), *Sfold = fdup(d.S0, SS);
    for (int i = 0; i < k; i++) hy_la_apply(kind, dk, dv, s.T[i], s.S[i], Srun, work);
    hy_la_fold(kind, dk, dv, k, (const float *const *)s.T, (const float *const *)s.S, NULL, Sfold,
               work);
    const double es = hy_rel_diff(Send, Sref, SS), et = hy_rel_diff(T, Tref, TS);
    const double er = fmax(hy_rel_diff(Srun, Sref, SS), hy_rel_diff(Sfold, Sref, SS));

    hy_la_reduce_tree(kind, dk, dv, k, s.T, s.S, work);
    const double xs = hy_rel_diff(s.S[0], S, SS), xt = hy_rel_diff(s.T[0], T, TS);
    printf("\n    %-14s k=%-2d n=%-4d g in [%g, %g]: fold vs sequential S %.1e T %.1e, "
           "running %.1e; tree vs fold S %.1e T %.1e",
           hy_la_family_name(f), k, c->n, c->g_lo, c->g_hi, es, et, er, xs, xt);
    CU_ASSERT(es <= 1e-5 && et <= 1e-5 && er <= 1e-5);
    CU_ASSERT(xs <= 1e-5 && xt <= 1e-5);
    note(2, fmax(es, fmax(et, er)));
    note(3, fmax(xs, xt));
    free(Sref), free(Tref), free(T), free(S), free(Send), free(Srun), free(Sfold), free(work);
    segs_free(&s);
    drop(&d);
}

static void test_composition_matches_sequential(void)
{
    const struct {
        int k, n;
        double lo, hi;
    } runs[] = {{2, 700, -1.0, 0.0},   {3, 1000, -6.0, -4.0}, {3, 400, -0.3, -0.01},
                {8, 2048, -1e-4, 0.0}, {16, 2048, -0.5, 0.0}, {16, 1500, -1e-4, 0.0}};
    for (int fi = 0; fi < NFAM; fi++)
        for (size_t ri = 0; ri < sizeof runs / sizeof *runs; ri++) {
            const la_case c = {runs[ri].n, 64, 64, runs[ri].lo, runs[ri].hi, 1, 0};
            compose_case(all_families[fi], &c, runs[ri].k, 400 + 8 * fi + ri);
        }
    printf("\n    worst: composed vs sequential %.1e, tree vs fold %.1e", g_worst[2], g_worst[3]);
}

/* k arrays of `each` floats, packed one after another (as heads are). */
static float *pack(float *const *x, int k, size_t each)
{
    float *p = malloc((size_t)k * each * sizeof(float));
    for (int i = 0; i < k; i++) memcpy(p + (size_t)i * each, x[i], each * sizeof(float));
    return p;
}

/* One run over the concatenation from a warm S0, cut into k segments: each
 * segment's pair read out of the run with hy_la_extract (S_i = S_end − T_i·
 * S_start, as an entry is built inline or after its seam) against the same
 * segment built alone from zero; the pairs applied back onto S0 in order (as
 * reuse does) against the run; and the per-head batch functions against a
 * loop over heads (the k segments taken as k heads). */
static void extract_case(hy_la_family f, int n, int k, double lo, double hi, uint64_t seed)
{
    const la_case c = {n, 64, 48, lo, hi, 1, 0};
    la_data d = make(f, &c, seed);
    const int dk = c.dk, dv = c.dv;
    const hy_la_tkind kind = hy_la_t_kind(f);
    const size_t SS = (size_t)dk * dv, TS = hy_la_t_size(f, dk);
    const size_t WS = hy_la_compose_scratch(kind, dk, dv);
    float *work = work_new(f, dk, dv), *wh = malloc(((size_t)k * WS + 1) * sizeof(float));
    hy_rng r;
    hy_rng_seed(&r, seed ^ 0xe7);
    int cut[17];
    random_cuts(&r, n, k, cut);
    segs alone = build_segments(&d, cut, k, work);

    float *S = fdup(d.S0, SS), *S0[16], *S1[16], *T[16], *Sc[16];
    for (int i = 0; i < k; i++) {
        S0[i] = fdup(S, SS);
        T[i] = t_new(f, dk);
        const hy_la_in in = in_of(&d, cut[i], cut[i + 1] - cut[i]);
        hy_la_chunked(&in, S, NULL, 0, T[i], work);
        S1[i] = fdup(S, SS);
        Sc[i] = malloc(SS * sizeof(float));
        hy_la_extract(kind, dk, dv, T[i], S0[i], S1[i], Sc[i], work);
    }
    double ee = 0;
    for (int i = 0; i < k; i++) ee = fmax(ee, hy_rel_diff(Sc[i], alone.S[i], SS));
    /* in place, over the start state or over the end state: the same floats */
    float *ip0 = fdup(S0[0], SS), *ip1 = fdup(S1[0], SS);
    hy_la_extract(kind, dk, dv, T[0], ip0, S1[0], ip0, work);
    hy_la_extract(kind, dk, dv, T[0], S0[0], ip1, ip1, work);
    const int same = !memcmp(ip0, Sc[0], SS * 4) && !memcmp(ip1, Sc[0], SS * 4);

    float *X = fdup(d.S0, SS);
    for (int i = 0; i < k; i++) hy_la_apply(kind, dk, dv, T[i], Sc[i], X, work);
    const double ea = hy_rel_diff(X, S, SS);

    /* k heads at once against one head at a time */
    float *Tp = pack(T, k, TS), *S0p = pack(S0, k, SS), *S1p = pack(S1, k, SS);
    float *Scp = malloc((size_t)k * SS * sizeof(float)), *Sp = pack(S0, k, SS);
    hy_la_extract_heads(kind, k, dk, dv, Tp, S0p, S1p, Scp, wh);
    hy_la_apply_heads(kind, k, dk, dv, Tp, Scp, Sp, wh);
    double eh = 0, eb = 0;
    for (int i = 0; i < k; i++) {
        float *one = fdup(S0[i], SS);
        hy_la_apply(kind, dk, dv, T[i], Sc[i], one, work);
        eh = fmax(eh, hy_rel_diff(Scp + (size_t)i * SS, Sc[i], SS));
        eh = fmax(eh, hy_rel_diff(Sp + (size_t)i * SS, one, SS));
        eb = fmax(eb, hy_rel_diff(Sp + (size_t)i * SS, S1[i], SS));
        free(one);
    }
    printf("\n    %-14s k=%-2d n=%-4d g in [%g, %g]: extracted vs built alone %.1e%s, "
           "reapplied vs run %.1e; heads vs one by one %.1e, vs run %.1e",
           hy_la_family_name(f), k, n, lo, hi, ee, same ? "" : " (in place differs)", ea, eh, eb);
    CU_ASSERT(ee <= 1e-5 && ea <= 1e-5 && eb <= 1e-5);
    CU_ASSERT(same);
    CU_ASSERT(eh <= 1e-6);
    note(5, fmax(ee, fmax(ea, eb)));
    for (int i = 0; i < k; i++) free(S0[i]), free(S1[i]), free(T[i]), free(Sc[i]);
    free(S), free(X), free(ip0), free(ip1), free(Tp), free(S0p), free(S1p), free(Scp), free(Sp);
    free(work), free(wh);
    segs_free(&alone);
    drop(&d);
}

static void test_extract_reads_segments_out_of_a_run(void)
{
    for (int fi = 0; fi < NFAM; fi++) {
        extract_case(all_families[fi], 700, 3, -0.02, -0.001, 600 + 8 * fi);
        extract_case(all_families[fi], 1200, 5, -1e-4, 0.0, 601 + 8 * fi);
        extract_case(all_families[fi], 300, 2, -6.0, -4.0, 602 + 8 * fi);
    }
    printf("\n    worst %.1e", g_worst[5]);
}

/* Summing the segment states (no T) against the recurrence, from S = 0. */
static double naive_error(hy_la_family f, double lo, double hi, float g0_override, int use_g0)
{
    const la_case c = {512, 64, 64, lo, hi, 0, 0};
    la_data d = make(f, &c, 77 + f);
    if (use_g0) d.g0 = g0_override;
    const size_t SS = (size_t)c.dk * c.dv;
    float *work = work_new(f, c.dk, c.dv);
    const int cut[5] = {0, 100, 230, 400, 512};
    segs s = build_segments(&d, cut, 4, work);
    float *sum = calloc(SS, 4), *ref = calloc(SS, 4);
    /* as `naive` reuse runs it: each segment applied with T replaced by I */
    static const float one = 1.0f;
    for (int i = 0; i < 4; i++) hy_la_apply(HY_LA_T_SCALAR, c.dk, c.dv, &one, s.S[i], sum, NULL);
    const hy_la_in all = in_of(&d, 0, c.n);
    hy_la_recurrent(&all, ref, NULL, 0, NULL);
    const double e = hy_rel_diff(sum, ref, SS);
    free(work), free(sum), free(ref);
    segs_free(&s);
    drop(&d);
    return e;
}

static void test_naive_addition_is_wrong(void)
{
    for (int fi = 0; fi < NFAM; fi++) {
        const hy_la_family f = all_families[fi];
        /* RetNet at its real γ of head 0 (log γ ≈ −0.032); the others at
         * moderate data-dependent decays. */
        const int retnet = f == HY_LA_RETNET;
        const double e = naive_error(f, -0.3, -0.01, hy_la_retnet_log_decay(0), retnet);
        printf("\n    %-14s (%s): naive Σ S_i vs sequential %.2f", hy_la_family_name(f),
               hy_la_decaying(f) ? "decaying" : "not decaying, delta rule", e);
        CU_ASSERT(e > 0.1);
    }
    /* With every decay 0 a scalar-decay family is plain linear attention,
     * additive: naive addition is then exact — and DeltaNet, which never
     * decays, is still not additive (asserted above). */
    const double e0 = naive_error(HY_LA_SIMPLE_GLA, 0.0, 0.0, 0, 0);
    const double e1 = naive_error(HY_LA_LIGHTNING, 0.0, 0.0, 0.0f, 1);
    printf("\n    simple_gla, lightning with zero decay (A = I): naive %.1e, %.1e", e0, e1);
    CU_ASSERT(e0 <= 1e-5 && e1 <= 1e-5);
}

/* x[0..rd) rotated to position pos in double, the exact rotation R(pos). */
static void rope_exact(float *x, int rd, const float *inv_freq, int64_t pos)
{
    const int h = rd / 2;
    for (int i = 0; i < h; i++) {
        const double ang = (double)pos * inv_freq[i], c = cos(ang), s = sin(ang);
        const double a = x[i], b = x[i + h];
        x[i] = (float)(a * c - b * s);
        x[i + h] = (float)(b * c + a * s);
    }
}

/* A copy of d whose keys (and queries) sit at positions s, s+1, … */
static la_data rotated(const la_data *d, int rd, const float *inv_freq, int64_t s)
{
    la_data e = *d;
    e.qkv = fdup(d->qkv, (size_t)d->n * d->ld);
    e.q = e.qkv, e.k = e.qkv + d->dk, e.v = e.qkv + 2 * d->dk;
    e.g = fdup(d->g, (size_t)d->n * d->ldg);
    e.b = fdup(d->b, (size_t)d->n * d->ldb);
    e.S0 = fdup(d->S0, (size_t)d->dk * d->dv);
    for (int t = 0; t < d->n; t++) {
        rope_exact(e.q + (size_t)t * d->ld, rd, inv_freq, s + t);
        rope_exact(e.k + (size_t)t * d->ld, rd, inv_freq, s + t);
    }
    return e;
}

/* Canonical segment moved to s vs built at s; returns the state error, or
 * -1 when the move is refused. */
static double rope_case(hy_la_family f, int n, int dk, int rd, int tie, int64_t s)
{
    const la_case c = {n, dk, dk, -0.5, -0.001, 0, tie ? rd : 0};
    la_data d = make(f, &c, 900 + f + (uint64_t)rd);
    float inv_freq[64];
    hy_rope_inv_freq(rd, 10000.0, inv_freq);
    la_data dc = rotated(&d, rd, inv_freq, 0), ds = rotated(&d, rd, inv_freq, s);
    float *work = work_new(f, dk, dk);
    const int cut[2] = {0, n};
    segs canon = build_segments(&dc, cut, 1, work), at_s = build_segments(&ds, cut, 1, work);
    const size_t SS = (size_t)dk * dk, TS = hy_la_t_size(f, dk);
    const hy_la_in in = in_of(&dc, 0, n);
    hy_err err = {0};
    const int rc = hy_la_rope_transition(hy_la_t_kind(f), dk, rd, inv_freq, s, canon.T[0], &err);
    hy_la_rope_state(dk, dk, rd, inv_freq, s, canon.S[0]);
    const double es = hy_rel_diff(canon.S[0], at_s.S[0], SS);
    const double et = rc ? -1 : hy_rel_diff(canon.T[0], at_s.T[0], TS);
    printf("\n    %-14s n=%-4d dk=%-3d rd=%-3d s=%-6lld%s: R(s)·S vs built at s %.1e, T %.1e%s%s",
           hy_la_family_name(f), n, dk, rd, (long long)s, tie ? " tied gates" : "", es, et,
           rc ? " — refused: " : "", rc ? err.msg : "");
    CU_ASSERT(hy_la_rope_commutes(&in, rd) == (rc == 0));
    if (rc == 0) {
        CU_ASSERT(es <= 1e-5 && et <= 1e-5);
        note(4, fmax(es, et));
    }
    free(work);
    segs_free(&canon), segs_free(&at_s);
    drop(&d), drop(&dc), drop(&ds);
    return rc ? -es : es;
}

static void test_rope_rerotation(void)
{
    const int64_t starts[] = {1, 777, 100000};
    for (int si = 0; si < 3; si++) {
        const int64_t s = starts[si];
        rope_case(HY_LA_LIGHTNING, 300, 64, 64, 0, s); /* Ring-linear: scalar T */
        rope_case(HY_LA_MAMBA2, 130, 64, 32, 0, s);
        rope_case(HY_LA_DELTANET, 200, 64, 64, 0, s);
        rope_case(HY_LA_GDN, 300, 64, 32, 0, s); /* partial rotary */
        rope_case(HY_LA_GDN, 300, 64, 64, 0, s);
        rope_case(HY_LA_GLA, 200, 64, 64, 1, s); /* diagonal, gates tied over pairs */
        rope_case(HY_LA_KDA, 200, 64, 32, 1, s);
    }
    /* Untied per-dimension gates: the move is refused, and it would be wrong. */
    const double e = rope_case(HY_LA_GLA, 200, 64, 64, 0, 777);
    CU_ASSERT(e < 0 && -e > 1e-3);
    printf("\n    worst accepted %.1e", g_worst[4]);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"family_table", test_family_table},
        {"recurrent_matches_fp64_definition", test_recurrent_matches_definition},
        {"chunked_matches_recurrent", test_chunked_matches_recurrent},
        {"composition_matches_sequential", test_composition_matches_sequential},
        {"extract_reads_segments_out_of_a_run", test_extract_reads_segments_out_of_a_run},
        {"naive_addition_is_wrong", test_naive_addition_is_wrong},
        {"rope_rerotation_matches_absolute_keys", test_rope_rerotation},
        {NULL, NULL},
    };
    return hy_test_main("linear_attention_families", cases);
}
