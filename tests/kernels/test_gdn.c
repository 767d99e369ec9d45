/*
 * The gated delta rule kernels: the recurrent form against a double-precision
 * transcription of the definition (S ← exp(g)(I − β k kᵀ) S + β k vᵀ, o = Sᵀq),
 * and the chunked form against the recurrent one, from zero and non-zero
 * initial states, with strong and near-zero decays, lengths around the chunk
 * size and up to 2048 tokens. Inputs are read through row strides, as the
 * executor does.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "test_util.h"

#include <string.h>

typedef struct gdn_case {
    int n, dk, dv;
    double g_lo, g_hi; /* log-decay drawn uniformly in [g_lo, g_hi] */
    int warm_state;
} gdn_case;

typedef struct gdn_data {
    int n, dk, dv, ld, ldgb;
    float *q, *k, *v, *g, *b, *S0;
} gdn_data;

/* Random inputs laid out with strides wider than the rows (ld = dk + dk + dv + 3). */
static gdn_data make(const gdn_case *c, uint64_t seed)
{
    gdn_data d = {c->n, c->dk, c->dv, 2 * c->dk + c->dv + 3, 2, NULL, NULL, NULL, NULL, NULL, NULL};
    hy_rng r;
    hy_rng_seed(&r, seed);
    float *buf = calloc((size_t)c->n * d.ld, sizeof(float));
    d.q = buf;
    d.k = buf + c->dk;
    d.v = buf + 2 * c->dk;
    d.g = calloc((size_t)c->n * d.ldgb, sizeof(float));
    d.b = calloc((size_t)c->n * d.ldgb, sizeof(float));
    d.S0 = calloc((size_t)c->dk * c->dv, sizeof(float));
    for (int t = 0; t < c->n; t++) {
        float *row = buf + (size_t)t * d.ld;
        for (int i = 0; i < 2 * c->dk + c->dv; i++) row[i] = (float)hy_rng_normal(&r);
        hy_l2norm_scale(row, c->dk, 1e-6f, 1.0f / sqrtf((float)c->dk));
        hy_l2norm_scale(row + c->dk, c->dk, 1e-6f, 1.0f);
        d.g[(size_t)t * d.ldgb] = (float)(c->g_lo + (c->g_hi - c->g_lo) * hy_rng_uniform(&r));
        d.b[(size_t)t * d.ldgb] = (float)hy_rng_uniform(&r);
    }
    if (c->warm_state)
        for (int i = 0; i < c->dk * c->dv; i++) d.S0[i] = (float)hy_rng_normal(&r);
    return d;
}

/* The kernel inputs for tokens [a, a + n) of d. */
static hy_gdn_in in_of(const gdn_data *d, int a, int n)
{
    return (hy_gdn_in){.n = n,
                       .dk = d->dk,
                       .dv = d->dv,
                       .q = d->q + (size_t)a * d->ld,
                       .k = d->k + (size_t)a * d->ld,
                       .v = d->v + (size_t)a * d->ld,
                       .ldq = (size_t)d->ld,
                       .ldk = (size_t)d->ld,
                       .ldv = (size_t)d->ld,
                       .g = d->g + (size_t)a * d->ldgb,
                       .beta = d->b + (size_t)a * d->ldgb,
                       .ldgb = (size_t)d->ldgb};
}

static void drop(gdn_data *d)
{
    free(d->q);
    free(d->g);
    free(d->b);
    free(d->S0);
}

/* Double-precision reference straight from the definition. */
static void reference(const gdn_data *d, double *S, double *o)
{
    const int dk = d->dk, dv = d->dv;
    double *u = malloc(sizeof(double) * (size_t)dv);
    for (int t = 0; t < d->n; t++) {
        const float *q = d->q + (size_t)t * d->ld, *k = d->k + (size_t)t * d->ld;
        const float *v = d->v + (size_t)t * d->ld;
        const double a = exp((double)d->g[(size_t)t * d->ldgb]), b = d->b[(size_t)t * d->ldgb];
        /* S ← a (S − β k (kᵀ S)) + β k vᵀ */
        for (int j = 0; j < dv; j++) {
            u[j] = 0;
            for (int i = 0; i < dk; i++) u[j] += k[i] * S[i * dv + j];
        }
        for (int i = 0; i < dk; i++)
            for (int j = 0; j < dv; j++)
                S[i * dv + j] = a * (S[i * dv + j] - b * k[i] * u[j]) + b * k[i] * v[j];
        for (int j = 0; j < dv; j++) {
            double s = 0;
            for (int i = 0; i < dk; i++) s += S[i * dv + j] * q[i];
            o[(size_t)t * dv + j] = s;
        }
    }
    free(u);
}

static double rel_vs_double(const float *a, const double *ref, size_t n)
{
    double m = 0, s = 1e-30;
    for (size_t i = 0; i < n; i++) {
        s = fmax(s, fabs(ref[i]));
        double e = fabs((double)a[i] - ref[i]);
        if (!(e <= m)) m = e;
    }
    return m / s;
}

static void check_case(const gdn_case *c, uint64_t seed, int against_double)
{
    gdn_data d = make(c, seed);
    const size_t SS = (size_t)c->dk * c->dv, OS = (size_t)c->n * c->dv;
    float *Sr = malloc(SS * sizeof(float)), *Sc = malloc(SS * sizeof(float));
    float *orr = calloc(OS, sizeof(float)), *oc = calloc(OS, sizeof(float));
    float *work = malloc(hy_gdn_chunked_scratch(c->dk, c->dv) * sizeof(float));
    memcpy(Sr, d.S0, SS * sizeof(float));
    memcpy(Sc, d.S0, SS * sizeof(float));
    const hy_gdn_in in = in_of(&d, 0, c->n);
    hy_gdn_recurrent(&in, Sr, orr, c->dv, NULL);
    hy_gdn_chunked(&in, Sc, oc, c->dv, NULL, work);
    double es = hy_rel_diff(Sc, Sr, SS), eo = hy_rel_diff(oc, orr, OS);
    printf("\n    n=%-4d dk=%-3d dv=%-3d g in [%g, %g]%s: chunked vs recurrent S %.1e o %.1e", c->n,
           c->dk, c->dv, c->g_lo, c->g_hi, c->warm_state ? " warm" : "", es, eo);
    CU_ASSERT(es <= 1e-5);
    CU_ASSERT(eo <= 1e-5);
    if (against_double) {
        double *S = malloc(SS * sizeof(double)), *o = malloc(OS * sizeof(double));
        for (size_t i = 0; i < SS; i++) S[i] = d.S0[i];
        reference(&d, S, o);
        double rs = rel_vs_double(Sr, S, SS), ro = rel_vs_double(orr, o, OS);
        printf("  recurrent vs fp64 S %.1e o %.1e", rs, ro);
        CU_ASSERT(rs <= 1e-5);
        CU_ASSERT(ro <= 1e-5);
        free(S);
        free(o);
    }
    free(Sr);
    free(Sc);
    free(orr);
    free(oc);
    free(work);
    drop(&d);
}

static void test_recurrent_matches_definition(void)
{
    const gdn_case cases[] = {
        {1, 16, 16, -1.0, 0.0, 0},  {9, 8, 12, -0.5, -0.01, 1}, {65, 16, 32, -3, -1, 1},
        {200, 32, 16, -1e-4, 0, 1}, {130, 64, 64, -8, -4, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i], 100 + i, 1);
}

static void test_chunked_matches_recurrent(void)
{
    const gdn_case cases[] = {
        {1, 16, 16, -1, 0, 1},          {2, 16, 16, -1, 0, 0},  {63, 32, 32, -1, 0, 1},
        {64, 32, 32, -1, 0, 1},         {65, 32, 32, -1, 0, 1}, {127, 16, 48, -0.3, -0.1, 1},
        {300, 64, 64, -1e-4, 0.0, 1},   /* near-zero decay: the delta rule alone */
        {300, 64, 64, -12.0, -6.0, 1},  /* strong decay: state forgets within a token */
        {2048, 128, 128, -0.5, 0.0, 1}, /* the real head size, a long segment */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(&cases[i], 200 + i, 0);
}

/* Splitting a sequence into calls that carry the state equals one call. */
static void test_state_carries_across_calls(void)
{
    const gdn_case c = {150, 16, 24, -1, 0, 1};
    gdn_data d = make(&c, 7);
    const size_t SS = (size_t)c.dk * c.dv, OS = (size_t)c.n * c.dv;
    float *S1 = malloc(SS * 4), *S2 = malloc(SS * 4), *o1 = calloc(OS, 4), *o2 = calloc(OS, 4);
    float *work = malloc(hy_gdn_chunked_scratch(c.dk, c.dv) * sizeof(float));
    memcpy(S1, d.S0, SS * 4);
    memcpy(S2, d.S0, SS * 4);
    const hy_gdn_in all = in_of(&d, 0, c.n);
    hy_gdn_chunked(&all, S1, o1, c.dv, NULL, work);
    const int cuts[] = {0, 37, 38, 101, 150};
    for (int i = 0; i + 1 < 5; i++) {
        const int a = cuts[i], n = cuts[i + 1] - cuts[i];
        const hy_gdn_in part = in_of(&d, a, n);
        hy_gdn_chunked(&part, S2, o2 + (size_t)a * c.dv, c.dv, NULL, work);
    }
    CU_ASSERT(hy_rel_diff(S2, S1, SS) <= 1e-5);
    CU_ASSERT(hy_rel_diff(o2, o1, OS) <= 1e-5);
    free(S1);
    free(S2);
    free(o1);
    free(o2);
    free(work);
    drop(&d);
}

/* The transition operator: both forms give the same T from I, and the state
 * map is affine with it: S_end(S0) = T·S0 + S_end(0). */
static void test_transition_operator(void)
{
    const gdn_case cases[] = {{1, 16, 24, -1, 0, 1},
                              {100, 32, 16, -0.5, 0, 1},
                              {300, 64, 64, -1e-4, 0, 1},
                              {257, 32, 32, -6, -2, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const gdn_case *c = &cases[ci];
        gdn_data d = make(c, 300 + ci);
        const int dk = c->dk, dv = c->dv;
        const size_t SS = (size_t)dk * dv, TT = (size_t)dk * dk;
        float *Tr = calloc(TT, 4), *Tc = calloc(TT, 4), *S0c = calloc(SS, 4), *Sw = malloc(SS * 4);
        float *Sz = calloc(SS, 4), *pred = malloc(SS * 4), *scratch = calloc(SS, 4);
        float *work = malloc(hy_gdn_chunked_scratch(dk, dv) * 4);
        for (int i = 0; i < dk; i++) Tr[i * dk + i] = Tc[i * dk + i] = 1.0f;
        const hy_gdn_in in = in_of(&d, 0, c->n);
        hy_gdn_recurrent(&in, scratch, NULL, 0, Tr);
        memcpy(Sw, d.S0, SS * 4);
        hy_gdn_chunked(&in, Sw, NULL, 0, Tc, work);   /* warm start, with T */
        hy_gdn_chunked(&in, Sz, NULL, 0, NULL, work); /* zero start */
        double et = hy_rel_diff(Tc, Tr, TT);
        /* pred = T·S0 + S(C|0) */
        hy_gemm(0, 0, dk, dv, dk, 1.0f, Tc, dk, d.S0, dv, 0.0f, pred, dv);
        for (size_t i = 0; i < SS; i++) pred[i] += Sz[i];
        double ea = hy_rel_diff(pred, Sw, SS);
        printf("\n    n=%-4d dk=%-3d dv=%-3d: T chunked vs recurrent %.1e, T·S0 + S(C|0) vs S_end "
               "%.1e",
               c->n, dk, dv, et, ea);
        CU_ASSERT(et <= 1e-5);
        CU_ASSERT(ea <= 1e-5);
        free(Tr), free(Tc), free(S0c), free(Sw), free(Sz), free(pred), free(scratch), free(work);
        drop(&d);
    }
}

/* Two value heads of one key head (the same q and k, their own v, g, β),
 * run as the executor runs them — the first over every piece of a step, then
 * the second — sharing k·kᵀ and q·kᵀ: each head's outputs, states and T are
 * those of the unshared kernel bit for bit, pieces that share a slot (a
 * one-row piece then the next) included. */
static void test_value_heads_share_products(void)
{
    const gdn_case c = {300, 32, 24, -1, 0, 1};
    gdn_data d[2] = {make(&c, 11), make(&c, 12)};
    for (int t = 0; t < c.n; t++) /* head 1 reads head 0's queries and keys */
        memcpy(d[1].q + (size_t)t * d[1].ld, d[0].q + (size_t)t * d[0].ld, 2 * c.dk * sizeof(float));
    const size_t SS = (size_t)c.dk * c.dv, OS = (size_t)c.n * c.dv, TT = (size_t)c.dk * c.dk;
    const size_t nslots = hy_gdn_share_slots((size_t)c.n), CL = HY_GDN_CHUNK;
    float *prods = malloc(nslots * 2 * CL * CL * sizeof *prods);
    int64_t *tags = malloc(nslots * 2 * sizeof *tags);
    for (size_t i = 0; i < 2 * nslots; i++) tags[i] = -1;
    float *work = malloc(hy_gdn_chunked_scratch(c.dk, c.dv) * sizeof(float));
    const int cuts[] = {0, 37, 38, 101, 230, 300}; /* the piece [101, 230) also advances T */
    for (int h = 0; h < 2; h++) {
        float *S1 = malloc(SS * 4), *S2 = malloc(SS * 4), *o1 = calloc(OS, 4), *o2 = calloc(OS, 4);
        float *T1 = calloc(TT, 4), *T2 = calloc(TT, 4);
        for (int i = 0; i < c.dk; i++) T1[i * c.dk + i] = T2[i * c.dk + i] = 1.0f;
        memcpy(S1, d[h].S0, SS * 4);
        memcpy(S2, d[h].S0, SS * 4);
        for (int i = 0; i + 1 < 6; i++) {
            const int a = cuts[i], n = cuts[i + 1] - cuts[i];
            const hy_gdn_in part = in_of(&d[h], a, n);
            const hy_gdn_share sh = {prods, tags, nslots, 5, a};
            hy_gdn_chunked(&part, S1, o1 + (size_t)a * c.dv, c.dv, a == 101 ? T1 : NULL, work);
            hy_gdn_chunked_shared(&part, S2, o2 + (size_t)a * c.dv, c.dv, a == 101 ? T2 : NULL,
                                  work, &sh);
        }
        CU_ASSERT(memcmp(S1, S2, SS * 4) == 0);
        CU_ASSERT(memcmp(o1, o2, OS * 4) == 0);
        CU_ASSERT(memcmp(T1, T2, TT * 4) == 0);
        free(S1), free(S2), free(o1), free(o2), free(T1), free(T2);
    }
    /* the last piece's chunks are tagged with whose they are, and a tagged
     * slot is read, not recomputed: cleared, the piece's output changes */
    CU_ASSERT_EQUAL(tags[2 * ((230 / CL) % nslots)], 5);
    float *S = malloc(SS * 4), *o = calloc(OS, 4), *oz = calloc(OS, 4);
    const hy_gdn_in last = in_of(&d[1], 230, 70);
    const hy_gdn_share sh = {prods, tags, nslots, 5, 230};
    memcpy(S, d[1].S0, SS * 4);
    hy_gdn_chunked_shared(&last, S, o, c.dv, NULL, work, &sh);
    memset(prods + ((230 / CL) % nslots) * 2 * CL * CL, 0, 2 * CL * CL * sizeof *prods);
    memcpy(S, d[1].S0, SS * 4);
    hy_gdn_chunked_shared(&last, S, oz, c.dv, NULL, work, &sh);
    CU_ASSERT(memcmp(o, oz, (size_t)64 * c.dv * 4) != 0);
    free(S), free(o), free(oz);
    free(prods), free(tags), free(work);
    drop(&d[0]);
    drop(&d[1]);
}

int main(void)
{
    static const hy_test_case cases[] = {
        {"recurrent_matches_fp64_definition", test_recurrent_matches_definition},
        {"chunked_matches_recurrent", test_chunked_matches_recurrent},
        {"state_carries_across_calls", test_state_carries_across_calls},
        {"transition_operator_is_affine_map", test_transition_operator},
        {"value_heads_share_products_exactly", test_value_heads_share_products},
        {NULL, NULL},
    };
    return hy_test_main("gated_delta_rule", cases);
}
