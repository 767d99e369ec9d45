/*
 * The gated delta rule's device kernels (kernels/cuda/gdn.cu) against the CPU
 * kernels they stand in for, over whole layers in the executor's layout
 * (hy_fwd_gdn_layer: conv rows q | k | v with value head h reading key head
 * h / (Hv/Hk), g and β [n][Hv]).
 *
 * Host part, every build: the launchers' twins (hy_emu_gdn_*, emu_gdn.c),
 * which run gdn_body.h's bodies as the kernels run them — every block, each
 * phase for every thread before the next phase starts (what a barrier
 * guarantees), the block's shared memory NaN at its start so that a read of
 * something no phase wrote shows — against hy_gdn_chunked /
 * hy_gdn_recurrent per head and the executor's gate loop. The same runs
 * with the threads of each phase taken in reverse order
 * (hy_emu_set_reversed) give the same bits: no phase reads what another
 * thread of it writes. The twins refuse the shapes the kernels do not take,
 * through the checks their launchers make (gdn_body.h).
 *
 * Device part, with nvcc (HY_HAVE_CUDA_KERNELS): the launchers refuse the
 * same shapes with the same messages; with a device, they run the same
 * problems, copied back and held to the same tolerances.
 */
#include "hy_common.h"
#include "hy_cuda_gdn.h"
#include "hy_kernels.h"
#include "gdn_body.h"
#include "test_util.h"

#include <string.h>

#ifdef HY_HAVE_CUDA_KERNELS
#include <cuda_runtime_api.h>
#endif

_Static_assert(HY_CU_GDN_CHUNK == HY_GDN_CHUNK, "the device and CPU kernels cut the same chunks");

/* Tolerances, as max |x − ref| / max |ref| over one head's S, o or T (or one
 * gate array), ref the CPU kernel's result.
 *
 * TOL_RULE (S and o): both sides are fp32 evaluations of the same
 * recurrence whose products are summed in another order (BLAS's blocked
 * GEMMs and TRMMs against one sequential sum per element here; fused
 * multiply-adds on the device), with the same exp (hy_cu_expf is hy_expf).
 * Each element is a sum of at most dk + 64 ≤ 192 products, so its rounding
 * differs by a few units of 2^-24 ≈ 6e-8 times the size of the terms,
 * which is that of the results: the keys are unit vectors, β < 2 and the
 * decays ≤ 1 make every token a contraction, so an early difference does
 * not grow, and S and o, driven by the values, keep their size. Measured:
 * up to ~1e-6; 1e-5 is the bound test_gdn.c holds the two CPU forms to.
 *
 * T has no values driving it: it shrinks, by orders of magnitude over a few
 * hundred tokens of decay and of (I − β k kᵀ). A chunk computes its new T
 * as exp(G_L)·T − Kdᵀ(W T), whose rounding is relative to the T it starts
 * from; a chunk that shrinks T by a factor ρ magnifies the relative error
 * of what it carried and what it adds by 1/ρ. So head h's T is held to
 * TOL_T_CHUNK · κ_h, κ_h = Σ over the call's chunks of max |T| before the
 * chunk / max |T| after it (the CPU's; ≥ the number of chunks): 2e-6 per
 * chunk that keeps T's size (5 chunks: TOL_RULE), more where it shrinks.
 *
 * TOL_GATES: each gate output is a handful of fp32 operations (a sum of
 * dk ≤ 128 squares in another order, a square root and a division; exp and
 * log1p for the gates, log1pf the device's own): a few ulps, 1e-6 ≈ 16. */
#define TOL_RULE    1e-5
#define TOL_T_CHUNK 2e-6
#define TOL_GATES   1e-6

/* --- problems in the executor's layout --------------------------------- */

typedef struct layer_case {
    int Hk, Hv, dk, dv, n;
    int with_o, with_T;
    float beta_hi; /* β drawn in (0, beta_hi) */
} layer_case;

typedef struct layer {
    layer_case c;
    int C;          /* conv channels: q [Hk·dk] | k [Hk·dk] | v [Hv·dv] */
    size_t ldc;     /* C + 3: rows wider than their data */
    float *cv;      /* [n][ldc], q and k normalised as the gates leave them */
    float *g, *b;   /* [n][Hv] log-decays in [−3, −0.01], β */
    float *S0, *T0; /* [Hv][dk][dv] random; [Hv][dk][dk] I + noise */
} layer;

static layer make_layer(const layer_case *c, uint64_t seed)
{
    layer L = {*c, 0, 0, NULL, NULL, NULL, NULL, NULL};
    const int Kd = c->Hk * c->dk, Hv = c->Hv, dk = c->dk, dv = c->dv;
    L.C = 2 * Kd + Hv * dv;
    L.ldc = (size_t)L.C + 3;
    hy_rng r;
    hy_rng_seed(&r, seed);
    L.cv = calloc((size_t)c->n * L.ldc, sizeof(float));
    L.g = malloc((size_t)c->n * Hv * sizeof(float));
    L.b = malloc((size_t)c->n * Hv * sizeof(float));
    L.S0 = malloc((size_t)Hv * dk * dv * sizeof(float));
    L.T0 = malloc((size_t)Hv * dk * dk * sizeof(float));
    for (int t = 0; t < c->n; t++) {
        float *row = L.cv + (size_t)t * L.ldc;
        for (int i = 0; i < L.C; i++) row[i] = (float)hy_rng_normal(&r);
        for (int hk = 0; hk < c->Hk; hk++) {
            hy_l2norm_scale(row + hk * dk, dk, 1e-6f, 1.0f / sqrtf((float)dk));
            hy_l2norm_scale(row + Kd + hk * dk, dk, 1e-6f, 1.0f);
        }
        for (int h = 0; h < Hv; h++) {
            /* −softplus of a normal draw, kept in the range models produce:
             * odd heads forget slowly (g mostly −0.01, so that T is still
             * far from 0 after 300 tokens), even heads faster (mean ≈ −0.5) */
            const double mu = h % 2 ? -6.0 : -1.0;
            const float sp = hy_softplusf((float)(1.5 * hy_rng_normal(&r) + mu));
            L.g[(size_t)t * Hv + h] = -fminf(3.0f, fmaxf(0.01f, sp));
            L.b[(size_t)t * Hv + h] = c->beta_hi * (float)(0.005 + 0.99 * hy_rng_uniform(&r));
        }
    }
    for (size_t i = 0; i < (size_t)Hv * dk * dv; i++) L.S0[i] = (float)hy_rng_normal(&r);
    for (int h = 0; h < Hv; h++)
        for (int i = 0; i < dk * dk; i++)
            L.T0[(size_t)h * dk * dk + i] =
                (i % (dk + 1) == 0 ? 1.0f : 0.0f) + 0.1f * (float)hy_rng_normal(&r);
    return L;
}

static void drop_layer(layer *L)
{
    free(L->cv), free(L->g), free(L->b), free(L->S0), free(L->T0);
}

/* The kernels' arguments over L's inputs (cv, g, b: host or device copies
 * of them) with the given outputs. */
static hy_cu_gdn_args args_of(const layer *L, const float *cv, const float *g, const float *b,
                              float *S, float *o, float *T)
{
    const layer_case *c = &L->c;
    const int Kd = c->Hk * c->dk;
    hy_cu_gdn_args a;
    memset(&a, 0, sizeof a);
    a.n = c->n, a.Hk = c->Hk, a.Hv = c->Hv, a.dk = c->dk, a.dv = c->dv;
    a.q = cv, a.k = cv + Kd, a.v = cv + 2 * Kd;
    a.ldq = a.ldk = a.ldv = L->ldc;
    a.g = g, a.beta = b, a.ldgb = (size_t)c->Hv;
    a.S = S, a.o = o, a.ldo = (size_t)c->Hv * c->dv, a.T = T;
    return a;
}

/* The CPU kernels per head, as gdn_run calls them. */
static void cpu_layer(const layer *L, int chunked, float *S, float *o, float *T)
{
    const layer_case *c = &L->c;
    const int dk = c->dk, dv = c->dv, Kd = c->Hk * dk;
    const size_t ldo = (size_t)c->Hv * dv;
    float *work = malloc(hy_gdn_chunked_scratch(dk, dv) * sizeof(float));
    for (int h = 0; h < c->Hv; h++) {
        const int hk = h / (c->Hv / c->Hk);
        const hy_gdn_in in = {.n = c->n,
                              .dk = dk,
                              .dv = dv,
                              .q = L->cv + hk * dk,
                              .k = L->cv + Kd + hk * dk,
                              .v = L->cv + 2 * Kd + h * dv,
                              .ldq = L->ldc,
                              .ldk = L->ldc,
                              .ldv = L->ldc,
                              .g = L->g + h,
                              .beta = L->b + h,
                              .ldgb = (size_t)c->Hv};
        float *Sh = S + (size_t)h * dk * dv, *oh = o ? o + (size_t)h * dv : NULL;
        float *Th = T ? T + (size_t)h * dk * dk : NULL;
        if (chunked)
            hy_gdn_chunked(&in, Sh, oh, ldo, Th, work);
        else
            hy_gdn_recurrent(&in, Sh, oh, ldo, Th);
    }
    free(work);
}

/* --- comparing ---------------------------------------------------------- */

/* max |x − ref| / max |ref| over a block of rows × cols with row stride ld. */
static double rel_block(const float *x, const float *ref, int rows, int cols, size_t ld)
{
    double m = 0, s = 1e-30;
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const size_t e = (size_t)i * ld + j;
            s = fmax(s, fabs((double)ref[e]));
            const double d = fabs((double)x[e] - (double)ref[e]);
            if (!(d <= m)) m = d; /* NaN fails */
        }
    return m / s;
}

/* The outputs of one run of a layer: S, o (when asked), T (when asked). */
typedef struct outputs {
    float *S, *o, *T;
} outputs;

static outputs outputs_new(const layer *L)
{
    const layer_case *c = &L->c;
    const size_t SS = (size_t)c->Hv * c->dk * c->dv, TT = (size_t)c->Hv * c->dk * c->dk;
    outputs r = {malloc(SS * sizeof(float)), NULL, NULL};
    memcpy(r.S, L->S0, SS * sizeof(float));
    if (c->with_o) r.o = calloc((size_t)c->n * c->Hv * c->dv, sizeof(float));
    if (c->with_T) {
        r.T = malloc(TT * sizeof(float));
        memcpy(r.T, L->T0, TT * sizeof(float));
    }
    return r;
}

static void outputs_free(outputs *r)
{
    free(r->S), free(r->o), free(r->T);
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

/* κ_h of each head (TOL_T_CHUNK): the CPU kernel's T one chunk at a time. */
static void t_shrinking(const layer *L, double *kappa)
{
    const layer_case *c = &L->c;
    const size_t TT = (size_t)c->dk * c->dk;
    layer_case one = *c;
    one.with_o = 0;
    layer chunk = *L;
    outputs r = outputs_new(L);
    double *before = malloc((size_t)c->Hv * sizeof(double));
    for (int h = 0; h < c->Hv; h++) {
        kappa[h] = 0;
        before[h] = max_abs(r.T + (size_t)h * TT, TT);
    }
    for (int c0 = 0; c0 < c->n; c0 += HY_GDN_CHUNK) {
        one.n = HY_MIN(HY_GDN_CHUNK, c->n - c0);
        chunk.c = one;
        chunk.cv = L->cv + (size_t)c0 * L->ldc;
        chunk.g = L->g + (size_t)c0 * c->Hv, chunk.b = L->b + (size_t)c0 * c->Hv;
        cpu_layer(&chunk, 1, r.S, NULL, r.T);
        for (int h = 0; h < c->Hv; h++) {
            const double after = max_abs(r.T + (size_t)h * TT, TT);
            kappa[h] += after > 0 ? before[h] / after : 1.0; /* all 0: nothing left to compare */
            before[h] = after;
        }
    }
    free(before);
    outputs_free(&r);
}

/* 1 when x matches ref: every head's S and o within TOL_RULE, its T within
 * TOL_T_CHUNK·κ_h; prints the worst of each after `what`. */
static int compare(const layer *L, const outputs *x, const outputs *ref, const char *what)
{
    const layer_case *c = &L->c;
    const int dk = c->dk, dv = c->dv;
    double es = 0, eo = 0, et = 0, tol_t = 0, worst_t = -1; /* worst e_T / tolerance */
    double *kappa = c->with_T ? malloc((size_t)c->Hv * sizeof(double)) : NULL;
    if (kappa) t_shrinking(L, kappa);
    for (int h = 0; h < c->Hv; h++) {
        const double s =
            rel_block(x->S + (size_t)h * dk * dv, ref->S + (size_t)h * dk * dv, dk, dv, (size_t)dv);
        es = s > es || s != s ? s : es;
        if (c->with_o) {
            const double o = rel_block(x->o + (size_t)h * dv, ref->o + (size_t)h * dv, c->n, dv,
                                       (size_t)c->Hv * dv);
            eo = o > eo || o != o ? o : eo;
        }
        if (c->with_T) {
            const double t = rel_block(x->T + (size_t)h * dk * dk, ref->T + (size_t)h * dk * dk, dk,
                                       dk, (size_t)dk);
            const double tol = TOL_T_CHUNK * kappa[h];
            /* the head nearest its bound (NaN: at once); on a tie the tighter bound */
            const double r = t / tol;
            if (!(r <= worst_t) || (r == worst_t && tol < tol_t)) worst_t = r, et = t, tol_t = tol;
        }
    }
    free(kappa);
    printf("\n    Hk=%d Hv=%-2d dk=%-3d dv=%-3d n=%-3d %s: S %.1e", c->Hk, c->Hv, dk, dv, c->n,
           what, es);
    if (c->with_o) printf(" o %.1e", eo);
    if (c->with_T) printf(" T %.1e (tol %.0e)", et, tol_t);
    return es <= TOL_RULE && eo <= TOL_RULE && worst_t <= 1.0;
}

/* The layers every comparison runs: the tiny shape, dk != dv both ways, the
 * real head size (dk = dv = 128); lengths around the chunk size, with and
 * without o and T. */
static const layer_case k_cases[] = {
    {2, 4, 16, 16, 1, 1, 1, 1.0f},     {2, 4, 16, 16, 5, 1, 0, 1.0f},
    {2, 4, 16, 16, 64, 0, 1, 1.0f},    {2, 4, 16, 16, 65, 1, 1, 1.0f},
    {2, 4, 16, 16, 150, 0, 0, 1.0f},   {2, 4, 16, 16, 300, 1, 1, 2.0f},
    {1, 2, 32, 64, 1, 1, 0, 1.0f},     {1, 2, 32, 64, 65, 1, 1, 1.0f},
    {1, 2, 32, 64, 150, 1, 1, 1.0f},   {2, 2, 64, 32, 130, 1, 1, 1.0f},
    {2, 4, 128, 128, 1, 1, 1, 1.0f},   {2, 4, 128, 128, 65, 1, 1, 1.0f},
    {2, 4, 128, 128, 300, 1, 1, 1.0f},
};
#define NCASES (sizeof k_cases / sizeof *k_cases)

/* --- host part ----------------------------------------------------------- */

/* One layer through a twin (chunked or recurrent) on host memory: its
 * status, err filled when not HY_OK. */
static int run_twin(const layer *L, int chunked, outputs *out, hy_err *err)
{
    const hy_cu_gdn_args a = args_of(L, L->cv, L->g, L->b, out->S, out->o, out->T);
    return chunked ? hy_emu_gdn_chunked(NULL, &a, err) : hy_emu_gdn_recurrent(NULL, &a, err);
}

/* One layer through the twin and the CPU kernel: 1 when they match
 * (compare). */
static int host_vs_cpu(const layer *L, int chunked, outputs *emu)
{
    outputs ref = outputs_new(L);
    *emu = outputs_new(L);
    cpu_layer(L, chunked, ref.S, ref.o, ref.T);
    hy_err err = {0};
    const int rc = run_twin(L, chunked, emu, &err);
    if (rc != HY_OK) printf("\n    twin: %s", err.msg);
    const int ok =
        rc == HY_OK && compare(L, emu, &ref, chunked ? "chunked bodies" : "recurrent bodies");
    outputs_free(&ref);
    return ok;
}

static void check_bodies(int chunked)
{
    for (size_t i = 0; i < NCASES; i++) {
        layer L = make_layer(&k_cases[i], 500 + i);
        outputs emu;
        CU_ASSERT(host_vs_cpu(&L, chunked, &emu));
        outputs_free(&emu);
        drop_layer(&L);
    }
}

static void test_chunked_bodies_match_cpu(void)
{
    check_bodies(1);
}

static void test_recurrent_bodies_match_cpu(void)
{
    check_bodies(0);
}

/* A gate problem: the conv rows (v and the padding must come back untouched)
 * and the projection rows with z | b | a after the conv channels. */
typedef struct gate_case {
    int Hk, Hv, dk, dv, n;
    float beta_scale;
} gate_case;

typedef struct gate_layer {
    gate_case c;
    int C, P;
    size_t ldc, ldp;
    float *cv, *proj, *neg_A, *dt_bias;
} gate_layer;

static gate_layer make_gates(const gate_case *c, uint64_t seed)
{
    gate_layer G = {*c, 0, 0, 0, 0, NULL, NULL, NULL, NULL};
    G.C = 2 * c->Hk * c->dk + c->Hv * c->dv;
    G.P = G.C + c->Hv * c->dv + 2 * c->Hv;
    G.ldc = (size_t)G.C + 5, G.ldp = (size_t)G.P + 1;
    hy_rng r;
    hy_rng_seed(&r, seed);
    G.cv = malloc((size_t)c->n * G.ldc * sizeof(float));
    G.proj = malloc((size_t)c->n * G.ldp * sizeof(float));
    G.neg_A = malloc((size_t)c->Hv * sizeof(float));
    G.dt_bias = malloc((size_t)c->Hv * sizeof(float));
    for (size_t i = 0; i < (size_t)c->n * G.ldc; i++) G.cv[i] = (float)hy_rng_normal(&r);
    for (size_t i = 0; i < (size_t)c->n * G.ldp; i++) G.proj[i] = (float)(3 * hy_rng_normal(&r));
    for (int h = 0; h < c->Hv; h++) {
        G.neg_A[h] = -expf((float)(3 * hy_rng_uniform(&r) - 1)); /* −exp(A_log) */
        G.dt_bias[h] = (float)hy_rng_normal(&r);
    }
    return G;
}

static void drop_gates(gate_layer *G)
{
    free(G->cv), free(G->proj), free(G->neg_A), free(G->dt_bias);
}

static hy_cu_gdn_gate_args gate_args_of(const gate_layer *G, float *cv, const float *proj,
                                        const float *neg_A, const float *dt_bias, float *beta,
                                        float *g)
{
    hy_cu_gdn_gate_args a;
    memset(&a, 0, sizeof a);
    a.n = G->c.n, a.Hk = G->c.Hk, a.Hv = G->c.Hv, a.dk = G->c.dk, a.dv = G->c.dv;
    a.cv = cv, a.ldc = G->ldc, a.proj = proj, a.ldp = G->ldp;
    a.neg_A = neg_A, a.dt_bias = dt_bias, a.beta_scale = G->c.beta_scale;
    a.beta = beta, a.g = g;
    return a;
}

/* hy_fwd_gdn_layer's gate loop, verbatim, on cv (in place), beta and g. */
static void cpu_gates(const gate_layer *G, float *cv, float *beta, float *g)
{
    const gate_case *c = &G->c;
    const int Hk = c->Hk, Hv = c->Hv, dk = c->dk, Kd = Hk * dk, Vd = Hv * c->dv;
    const float qscale = 1.0f / sqrtf((float)dk);
    for (int t = 0; t < c->n; t++) {
        float *row = cv + (size_t)t * G->ldc;
        for (int hk = 0; hk < Hk; hk++) {
            hy_l2norm_scale(row + hk * dk, dk, 1e-6f, qscale);
            hy_l2norm_scale(row + Kd + hk * dk, dk, 1e-6f, 1.0f);
        }
        const float *b = G->proj + (size_t)t * G->ldp + G->C + Vd, *a = b + Hv;
        for (int h = 0; h < Hv; h++) {
            beta[(size_t)t * Hv + h] = c->beta_scale * hy_sigmoidf(b[h]);
            g[(size_t)t * Hv + h] = G->neg_A[h] * hy_softplusf(a[h] + G->dt_bias[h]);
        }
    }
}

/* The gates' outputs against the CPU's: q and k per head, β and g; the rest
 * of each conv row (v, the padding) must be the input's bits. */
static double compare_gates(const gate_layer *G, const float *cv, const float *beta, const float *g,
                            const float *ref_cv, const float *ref_beta, const float *ref_g,
                            const char *what)
{
    const gate_case *c = &G->c;
    const int Kd = c->Hk * c->dk;
    double eqk = 0;
    for (int v = 0; v < 2 * c->Hk; v++)
        eqk = fmax(eqk, rel_block(cv + (size_t)v * c->dk, ref_cv + (size_t)v * c->dk, c->n, c->dk,
                                  G->ldc));
    const double eb = rel_block(beta, ref_beta, c->n, c->Hv, (size_t)c->Hv);
    const double eg = rel_block(g, ref_g, c->n, c->Hv, (size_t)c->Hv);
    int rest_same = 1;
    for (int t = 0; t < c->n; t++) {
        const size_t off = (size_t)t * G->ldc + 2 * Kd, len = G->ldc - 2 * (size_t)Kd;
        if (memcmp(cv + off, G->cv + off, len * sizeof(float)) != 0) rest_same = 0;
    }
    printf("\n    Hk=%-2d Hv=%-2d dk=%-3d dv=%-3d n=%-3d %s: q,k %.1e beta %.1e g %.1e%s", c->Hk,
           c->Hv, c->dk, c->dv, c->n, what, eqk, eb, eg, rest_same ? "" : " (v changed!)");
    if (!rest_same || eqk != eqk || eb != eb || eg != eg) return INFINITY;
    return fmax(eqk, fmax(eb, eg));
}

static const gate_case k_gate_cases[] = {
    {2, 4, 16, 16, 5, 1.0f},
    {1, 2, 32, 64, 65, 2.0f},
    {2, 4, 128, 128, 7, 1.0f},
    {16, 32, 128, 128, 3, 1.0f}, /* Qwen3.5's layer */
};
#define NGATES (sizeof k_gate_cases / sizeof *k_gate_cases)

static void test_gate_bodies_match_executor(void)
{
    for (size_t i = 0; i < NGATES; i++) {
        gate_layer G = make_gates(&k_gate_cases[i], 700 + i);
        const size_t rows = (size_t)G.c.n * G.ldc, gb = (size_t)G.c.n * G.c.Hv;
        float *cv = malloc(rows * sizeof(float)), *ref = malloc(rows * sizeof(float));
        float *beta = malloc(gb * sizeof(float)), *g = malloc(gb * sizeof(float));
        float *rbeta = malloc(gb * sizeof(float)), *rg = malloc(gb * sizeof(float));
        memcpy(cv, G.cv, rows * sizeof(float));
        memcpy(ref, G.cv, rows * sizeof(float));
        cpu_gates(&G, ref, rbeta, rg);
        const hy_cu_gdn_gate_args a = gate_args_of(&G, cv, G.proj, G.neg_A, G.dt_bias, beta, g);
        hy_err err = {0};
        const int rc = hy_emu_gdn_gates(NULL, &a, &err);
        if (rc != HY_OK) printf("\n    twin: %s", err.msg);
        CU_ASSERT_EQUAL(rc, HY_OK);
        if (rc == HY_OK)
            CU_ASSERT(compare_gates(&G, cv, beta, g, ref, rbeta, rg, "gate bodies") <= TOL_GATES);
        free(cv), free(ref), free(beta), free(g), free(rbeta), free(rg);
        drop_gates(&G);
    }
}

/* Each phase's threads taken last to first (hy_emu_set_reversed) give the
 * bits of first to last: within a phase no thread reads what another writes
 * (a barrier would be missing otherwise). */
static void test_phases_are_race_free(void)
{
    const layer_case cases[] = {{2, 4, 16, 16, 150, 1, 1, 1.0f}, {1, 2, 32, 64, 70, 1, 1, 1.0f}};
    for (size_t i = 0; i < 2; i++) {
        layer L = make_layer(&cases[i], 900 + i);
        const size_t SS = (size_t)L.c.Hv * L.c.dk * L.c.dv, TT = (size_t)L.c.Hv * L.c.dk * L.c.dk;
        const size_t OS = (size_t)L.c.n * L.c.Hv * L.c.dv;
        for (int chunked = 0; chunked < 2; chunked++) {
            outputs r[2];
            for (int rev = 0; rev < 2; rev++) {
                r[rev] = outputs_new(&L);
                hy_emu_set_reversed(rev);
                CU_ASSERT_EQUAL(run_twin(&L, chunked, &r[rev], NULL), HY_OK);
            }
            hy_emu_set_reversed(false);
            CU_ASSERT(memcmp(r[0].S, r[1].S, SS * sizeof(float)) == 0);
            CU_ASSERT(memcmp(r[0].o, r[1].o, OS * sizeof(float)) == 0);
            CU_ASSERT(memcmp(r[0].T, r[1].T, TT * sizeof(float)) == 0);
            outputs_free(&r[0]), outputs_free(&r[1]);
        }
        drop_layer(&L);
    }
    gate_layer G = make_gates(&k_gate_cases[1], 950);
    const size_t rows = (size_t)G.c.n * G.ldc, gb = (size_t)G.c.n * G.c.Hv;
    float *cv[2], *beta[2], *g[2];
    for (int rev = 0; rev < 2; rev++) {
        cv[rev] = malloc(rows * sizeof(float));
        beta[rev] = malloc(gb * sizeof(float));
        g[rev] = malloc(gb * sizeof(float));
        memcpy(cv[rev], G.cv, rows * sizeof(float));
        const hy_cu_gdn_gate_args a =
            gate_args_of(&G, cv[rev], G.proj, G.neg_A, G.dt_bias, beta[rev], g[rev]);
        hy_emu_set_reversed(rev);
        CU_ASSERT_EQUAL(hy_emu_gdn_gates(NULL, &a, NULL), HY_OK);
    }
    hy_emu_set_reversed(false);
    CU_ASSERT(memcmp(cv[0], cv[1], rows * sizeof(float)) == 0);
    CU_ASSERT(memcmp(beta[0], beta[1], gb * sizeof(float)) == 0);
    CU_ASSERT(memcmp(g[0], g[1], gb * sizeof(float)) == 0);
    for (int rev = 0; rev < 2; rev++) free(cv[rev]), free(beta[rev]), free(g[rev]);
    drop_gates(&G);
}

/* --- refusals ------------------------------------------------------------ */

/* One set of launchers: the kernels' or their twins'. */
typedef struct gdn_launchers {
    int (*gates)(hy_cu_stream, const hy_cu_gdn_gate_args *, hy_err *);
    int (*chunked)(hy_cu_stream, const hy_cu_gdn_args *, hy_err *);
    int (*recurrent)(hy_cu_stream, const hy_cu_gdn_args *, hy_err *);
} gdn_launchers;

static const gdn_launchers k_twins = {hy_emu_gdn_gates, hy_emu_gdn_chunked, hy_emu_gdn_recurrent};
#ifdef HY_HAVE_CUDA_KERNELS
static const gdn_launchers k_kernels = {hy_cu_gdn_gates, hy_cu_gdn_chunked, hy_cu_gdn_recurrent};
#endif

#define NREFUSALS 7

/* Arguments l must refuse (HY_EINVAL each) before it touches memory: every
 * output keeps its bits. errs [NREFUSALS]: each refusal's report. */
static void refusals(const gdn_launchers *l, hy_err *errs)
{
    const layer_case c = {2, 4, 16, 16, 5, 1, 1, 1.0f};
    layer L = make_layer(&c, 1);
    outputs r = outputs_new(&L);
    hy_cu_gdn_args a = args_of(&L, L.cv, L.g, L.b, r.S, r.o, r.T);
    int k = 0;
    a.dk = 48; /* not one of 16, 32, 64, 128 */
    CU_ASSERT_EQUAL(l->chunked(NULL, &a, &errs[k++]), HY_EINVAL);
    CU_ASSERT_EQUAL(l->recurrent(NULL, &a, &errs[k++]), HY_EINVAL);
    a.dk = 16, a.Hv = 3; /* not a multiple of Hk */
    CU_ASSERT_EQUAL(l->chunked(NULL, &a, &errs[k++]), HY_EINVAL);
    a.Hv = 4, a.ldv = 8; /* shorter than a row's Hv·dv values */
    CU_ASSERT_EQUAL(l->recurrent(NULL, &a, &errs[k++]), HY_EINVAL);
    CU_ASSERT_EQUAL(l->chunked(NULL, NULL, &errs[k++]), HY_EINVAL);
    CU_ASSERT(memcmp(r.S, L.S0, (size_t)c.Hv * c.dk * c.dv * sizeof(float)) == 0);
    CU_ASSERT(memcmp(r.T, L.T0, (size_t)c.Hv * c.dk * c.dk * sizeof(float)) == 0);

    gate_layer G = make_gates(&k_gate_cases[0], 2);
    const size_t rows = (size_t)G.c.n * G.ldc, gb = (size_t)G.c.n * G.c.Hv;
    float *cv = malloc(rows * sizeof(float)), *beta = calloc(gb, sizeof(float));
    float *g = calloc(gb, sizeof(float));
    memcpy(cv, G.cv, rows * sizeof(float));
    hy_cu_gdn_gate_args ga = gate_args_of(&G, cv, G.proj, G.neg_A, G.dt_bias, beta, g);
    ga.Hv = 3; /* not a multiple of Hk */
    CU_ASSERT_EQUAL(l->gates(NULL, &ga, &errs[k++]), HY_EINVAL);
    ga.Hv = G.c.Hv, ga.ldp = (size_t)G.C; /* no room for z, b, a */
    CU_ASSERT_EQUAL(l->gates(NULL, &ga, &errs[k++]), HY_EINVAL);
    CU_ASSERT(memcmp(cv, G.cv, rows * sizeof(float)) == 0);
    for (size_t i = 0; i < gb; i++) CU_ASSERT(beta[i] == 0.0f && g[i] == 0.0f);
    CU_ASSERT_EQUAL(k, NREFUSALS);
    free(cv), free(beta), free(g);
    drop_gates(&G);
    outputs_free(&r);
    drop_layer(&L);
}

/* The twins refuse what the kernels do not take; with nvcc, the launchers
 * refuse the same arguments with the same reports (one check, gdn_body.h). */
static void test_launchers_refuse_bad_shapes(void)
{
    hy_err twin[NREFUSALS];
    memset(twin, 0, sizeof twin);
    refusals(&k_twins, twin);
    for (int i = 0; i < NREFUSALS; i++) CU_ASSERT_EQUAL(twin[i].code, HY_EINVAL);
    printf("\n    last refusal: %s", twin[NREFUSALS - 1].msg);
#ifdef HY_HAVE_CUDA_KERNELS
    hy_err kern[NREFUSALS];
    memset(kern, 0, sizeof kern);
    refusals(&k_kernels, kern);
    for (int i = 0; i < NREFUSALS; i++) {
        CU_ASSERT_EQUAL(kern[i].code, twin[i].code);
        CU_ASSERT_STRING_EQUAL(kern[i].msg, twin[i].msg);
    }
#endif
}

/* --- device part ------------------------------------------------------------ */

#ifdef HY_HAVE_CUDA_KERNELS

/* 1 when a device can run the kernels; else says once why not. */
static int device_present(void)
{
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e == cudaSuccess && count > 0) return 1;
    printf("\ntest_cuda_gdn: device tests skipped: no CUDA device (%s)\n",
           e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 0;
}

static float *dev_copy(const float *h, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n * sizeof(float)) != cudaSuccess) return NULL;
    if (h && cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return (float *)d;
}

static int host_copy(float *h, const float *d, size_t n)
{
    return cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess;
}

/* One layer through a launcher on the device, against the CPU kernel: 1
 * when they match (compare). */
static int device_vs_cpu(const layer *L, int chunked)
{
    const layer_case *c = &L->c;
    const size_t SS = (size_t)c->Hv * c->dk * c->dv, TT = (size_t)c->Hv * c->dk * c->dk;
    const size_t OS = (size_t)c->n * c->Hv * c->dv, GB = (size_t)c->n * c->Hv;
    outputs ref = outputs_new(L), got = outputs_new(L);
    cpu_layer(L, chunked, ref.S, ref.o, ref.T);
    float *cv = dev_copy(L->cv, (size_t)c->n * L->ldc), *g = dev_copy(L->g, GB);
    float *b = dev_copy(L->b, GB), *S = dev_copy(L->S0, SS);
    float *o = c->with_o ? dev_copy(NULL, OS) : NULL, *T = c->with_T ? dev_copy(L->T0, TT) : NULL;
    int ok = 0;
    hy_err err = {0};
    if (cv && g && b && S && (o || !c->with_o) && (T || !c->with_T)) {
        const hy_cu_gdn_args a = args_of(L, cv, g, b, S, o, T);
        const int rc =
            chunked ? hy_cu_gdn_chunked(NULL, &a, &err) : hy_cu_gdn_recurrent(NULL, &a, &err);
        if (rc != HY_OK) printf("\n    launch: %s", err.msg);
        const cudaError_t s = cudaDeviceSynchronize();
        if (s != cudaSuccess) printf("\n    kernel: %s", cudaGetErrorString(s));
        if (rc == HY_OK && s == cudaSuccess && host_copy(got.S, S, SS) &&
            (!o || host_copy(got.o, o, OS)) && (!T || host_copy(got.T, T, TT)))
            ok = compare(L, &got, &ref, chunked ? "chunked device" : "recurrent device");
    }
    cudaFree(cv), cudaFree(g), cudaFree(b), cudaFree(S), cudaFree(o), cudaFree(T);
    outputs_free(&ref), outputs_free(&got);
    return ok;
}

static double device_gates_vs_cpu(const gate_layer *G)
{
    const size_t rows = (size_t)G->c.n * G->ldc, gb = (size_t)G->c.n * G->c.Hv;
    const size_t prow = (size_t)G->c.n * G->ldp;
    float *ref = malloc(rows * sizeof(float)), *rbeta = malloc(gb * sizeof(float));
    float *rg = malloc(gb * sizeof(float)), *cv = malloc(rows * sizeof(float));
    float *beta = malloc(gb * sizeof(float)), *g = malloc(gb * sizeof(float));
    memcpy(ref, G->cv, rows * sizeof(float));
    cpu_gates(G, ref, rbeta, rg);
    float *dcv = dev_copy(G->cv, rows), *dproj = dev_copy(G->proj, prow);
    float *dA = dev_copy(G->neg_A, (size_t)G->c.Hv), *ddt = dev_copy(G->dt_bias, (size_t)G->c.Hv);
    float *dbeta = dev_copy(NULL, gb), *dg = dev_copy(NULL, gb);
    double e = INFINITY;
    hy_err err = {0};
    if (dcv && dproj && dA && ddt && dbeta && dg) {
        const hy_cu_gdn_gate_args a = gate_args_of(G, dcv, dproj, dA, ddt, dbeta, dg);
        const int rc = hy_cu_gdn_gates(NULL, &a, &err);
        if (rc != HY_OK) printf("\n    launch: %s", err.msg);
        const cudaError_t s = cudaDeviceSynchronize();
        if (rc == HY_OK && s == cudaSuccess && host_copy(cv, dcv, rows) &&
            host_copy(beta, dbeta, gb) && host_copy(g, dg, gb))
            e = compare_gates(G, cv, beta, g, ref, rbeta, rg, "gates device");
    }
    cudaFree(dcv), cudaFree(dproj), cudaFree(dA), cudaFree(ddt), cudaFree(dbeta), cudaFree(dg);
    free(ref), free(rbeta), free(rg), free(cv), free(beta), free(g);
    return e;
}

static void test_device_matches_cpu(void)
{
    if (!device_present()) return;
    for (size_t i = 0; i < NGATES; i++) {
        gate_layer G = make_gates(&k_gate_cases[i], 700 + i);
        CU_ASSERT(device_gates_vs_cpu(&G) <= TOL_GATES);
        drop_gates(&G);
    }
    for (size_t i = 0; i < NCASES; i++) {
        layer L = make_layer(&k_cases[i], 500 + i);
        CU_ASSERT(device_vs_cpu(&L, 1));
        CU_ASSERT(device_vs_cpu(&L, 0));
        drop_layer(&L);
    }
}

#endif

int main(void)
{
    static const hy_test_case cases[] = {
        {"gate_bodies_match_executor", test_gate_bodies_match_executor},
        {"chunked_bodies_match_cpu", test_chunked_bodies_match_cpu},
        {"recurrent_bodies_match_cpu", test_recurrent_bodies_match_cpu},
        {"phases_are_race_free", test_phases_are_race_free},
        {"launchers_refuse_bad_shapes", test_launchers_refuse_bad_shapes},
#ifdef HY_HAVE_CUDA_KERNELS
        {"device_matches_cpu", test_device_matches_cpu},
#endif
        {NULL, NULL},
    };
    return hy_test_main("cuda_gated_delta_rule", cases);
}
