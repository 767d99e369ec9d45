/*
 * kernels/cuda's attention layer and entry composition (attn.cu, compose.cu)
 * against the CPU: causal attention against hy_attention_heads, each linear
 * head's composition against hy_rep_apply, a hole's keys and values against
 * write_holes' rotation (hy_rope_rotate on the widened entry).
 *
 * Every build runs the launchers' twins (hy_emu_*, emu_attn.c): the bodies
 * (attn_body.h, compose_body.h) on the CPU as the kernels run them — every
 * block of the grid, each phase for every thread of the block before the
 * next phase (what a barrier guarantees), shared memory NaN at each block's
 * start so that a phase reading what no earlier phase wrote shows — and the
 * threads of each phase last to first must give the same bits (no phase
 * reads what another thread of it writes). With nvcc and a device, the
 * launchers run the same problems and are held to the same bounds; both
 * sets refuse the same bad arguments.
 */
#include "hy_common.h"
#include "hy_kernels.h"
#include "model_internal.h"
#include "test_util.h"

#include "attn_body.h"

#include <string.h>

#ifdef HY_HAVE_CUDA_KERNELS
#include <cuda_runtime_api.h>
static int g_device; /* a CUDA device is present: run the launchers too */
#endif

static float *randn(hy_rng *r, size_t n, float sd)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(sd * hy_rng_normal(r));
    return x;
}

static float *filled(size_t n, float v)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = v;
    return x;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)x[i]));
    return m;
}

#ifdef HY_HAVE_CUDA_KERNELS
/* A device copy of bytes at src (src NULL: uninitialised). */
static void *dev_put(const void *src, size_t bytes)
{
    void *d = NULL;
    CU_ASSERT_FATAL(cudaMalloc(&d, bytes ? bytes : 1) == cudaSuccess);
    if (src && bytes) CU_ASSERT_FATAL(cudaMemcpy(d, src, bytes, cudaMemcpyHostToDevice) == 0);
    return d;
}

static void dev_get(void *dst, const void *src, size_t bytes)
{
    CU_ASSERT_FATAL(cudaDeviceSynchronize() == cudaSuccess);
    CU_ASSERT_FATAL(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
}
#endif

/* === causal attention ===================================================== */

typedef struct attn_case {
    int n, Hq, Hkv, hd;
    int64_t pos0; /* the first row's position */
    int gaps;     /* rows at increasing positions with jumps (seams between holes) */
} attn_case;

typedef struct attn_prob {
    hy_cu_attn a;
    int64_t *pos;
    float *q, *K, *V;
    size_t olen; /* floats of o, its gaps included */
} attn_prob;

/* Random queries, keys and values, laid out with a gap between query heads
 * (as the output gate leaves) and wider output rows; q is drawn at twice a
 * unit scale so the softmax is peaked and the running maximum moves. */
static attn_prob attn_make(const attn_case *c, uint64_t seed)
{
    attn_prob p;
    memset(&p, 0, sizeof p);
    hy_rng r;
    hy_rng_seed(&r, seed);
    p.pos = malloc((size_t)c->n * sizeof *p.pos);
    int64_t at = c->pos0;
    for (int i = 0; i < c->n; i++) {
        p.pos[i] = at;
        at += c->gaps ? 1 + (int64_t)(hy_rng_uniform(&r) * 200) : 1;
    }
    hy_cu_attn *a = &p.a;
    a->n = c->n, a->Hq = c->Hq, a->Hkv = c->Hkv, a->hd = c->hd;
    a->pos0 = c->pos0;
    a->pos = c->gaps ? p.pos : NULL;
    a->ctx = p.pos[c->n - 1] + 1;
    a->qhs = (size_t)c->hd + 8;
    a->ldq = (size_t)c->Hq * a->qhs + 5;
    a->ldk = a->ldv = (size_t)c->Hkv * c->hd;
    a->ldo = (size_t)c->Hq * c->hd + 3;
    a->ohs = (size_t)c->hd;
    a->scale = 1.0f / sqrtf((float)c->hd);
    p.q = randn(&r, (size_t)c->n * a->ldq, 2.0f);
    p.K = randn(&r, (size_t)a->ctx * a->ldk, 1.0f);
    p.V = randn(&r, (size_t)a->ctx * a->ldv, 1.0f);
    a->q = p.q, a->K = p.K, a->V = p.V;
    p.olen = (size_t)c->n * a->ldo;
    return p;
}

static void attn_drop(attn_prob *p)
{
    free(p->pos), free(p->q), free(p->K), free(p->V);
}

/* The CPU kernel, a KV head at a time (its G query heads together). */
static void attn_reference(const attn_prob *p, float *o)
{
    const hy_cu_attn *a = &p->a;
    const int G = a->Hq / a->Hkv;
    float *work = malloc(hy_attention_heads_scratch(G, a->hd, a->hd, a->ctx) * sizeof *work);
    if (G == 1 && !a->pos) { /* one head per KV head, consecutive rows: hy_attention */
        for (int h = 0; h < a->Hq; h++)
            hy_attention(a->n, a->hd, a->pos0, a->q + (size_t)h * a->qhs, a->ldq,
                         a->K + (size_t)h * a->hd, a->ldk, a->V + (size_t)h * a->hd, a->ldv,
                         a->scale, o + (size_t)h * a->ohs, a->ldo, work);
        free(work);
        return;
    }
    for (int g = 0; g < a->Hkv; g++)
        hy_attention_heads(a->n, G, a->hd, a->hd, p->pos, a->q + (size_t)g * G * a->qhs, a->ldq,
                           a->qhs, a->K + (size_t)g * a->hd, a->ldk, a->V + (size_t)g * a->hd,
                           a->ldv, a->scale, o + (size_t)g * G * a->ohs, a->ldo, a->ohs, work);
    free(work);
}

/* Outputs are convex combinations of value rows, so both computations' rounding
 * is a few ulps of max|V| (the exps' 2.5e-7, a score's dot product of hd
 * terms, sums of up to ctx weights): the bound is 1e-5·max|V|, above what
 * fp32 reorderings give at these contexts (measured ≤ 3e-7) and below what a
 * key too many or too few changes (a weight of 1/ctx or more times a value of
 * unit scale, ≥ 2e-4 at ctx 4400). The gaps between rows and heads must hold
 * the sentinel still. */
#define ATTN_TOL 1e-5

static void attn_check(const attn_prob *p, const float *o, const float *ref, const char *what)
{
    const double err =
        hy_max_abs_diff(o, ref, p->olen) / max_abs(p->V, (size_t)p->a.ctx * p->a.ldv);
    if (!(err <= ATTN_TOL))
        printf("\n  %s: n %d Hq %d Hkv %d hd %d: error %.3g of max|V|\n", what, p->a.n, p->a.Hq,
               p->a.Hkv, p->a.hd, err);
    CU_ASSERT(err <= ATTN_TOL);
}

/* The twin into o (first set to the sentinel), with the work it asks for
 * (split when it would; NaN until the ranges write it) or without (one
 * range). */
static void attn_host(const attn_prob *p, float *o, int split)
{
    hy_cu_attn a = p->a;
    a.o = o;
    for (size_t i = 0; i < p->olen; i++) o[i] = -7.0f;
    const size_t wf = split ? hy_emu_attention_work(&a) : 0;
    float *work = wf ? filled(wf, NAN) : NULL;
    hy_err err = {0};
    CU_ASSERT_EQUAL(hy_emu_attention(NULL, &a, work, wf, &err), HY_OK);
    free(work);
}

#ifdef HY_HAVE_CUDA_KERNELS
/* The launcher on the device, with the work it asks for (split when it
 * would) and without (one range). */
static void attn_device(const attn_prob *p, const float *ref)
{
    hy_cu_attn a = p->a;
    const size_t qb = (size_t)a.n * a.ldq * 4, kb = (size_t)a.ctx * a.ldk * 4, ob = p->olen * 4;
    a.q = dev_put(p->q, qb), a.K = dev_put(p->K, kb), a.V = dev_put(p->V, kb);
    if (p->a.pos) a.pos = dev_put(p->pos, (size_t)a.n * sizeof *a.pos);
    float *o = filled(p->olen, -7.0f);
    a.o = dev_put(o, ob);
    const size_t wf = hy_cu_attention_work(&a);
    float *work = wf ? dev_put(NULL, wf * 4) : NULL;
    for (int pass = 0; pass < 2; pass++) {
        hy_err err = {0};
        CU_ASSERT_EQUAL(hy_cu_attention(NULL, &a, pass ? NULL : work, pass ? 0 : wf, &err), HY_OK);
        dev_get(o, a.o, ob);
        attn_check(p, o, ref, pass ? "device, one range" : "device");
    }
    cudaFree((void *)a.q), cudaFree((void *)a.K), cudaFree((void *)a.V), cudaFree(a.o);
    if (p->a.pos) cudaFree((void *)a.pos);
    cudaFree(work);
    free(o);
}
#endif

/* Prefill from the first position (every causal mask edge inside the first
 * tiles), a chunk after a long prefix, a decode row over a long context
 * (split), rows at scattered positions (a request's seams; split, a later
 * range holds no key of the early rows), over head dims 16, 64, 128 and 256
 * and groups of 1, 2, 4 and 8 query heads per KV head; with one,
 * consecutive rows are also hy_attention's contract. Each through the twin
 * in one range and, where it splits, with the work it asks for. */
static void test_attention_matches_cpu(void)
{
    static const attn_case cases[] = {
        {70, 4, 4, 16, 0, 0},    {37, 8, 4, 128, 1500, 0}, {5, 4, 1, 256, 2500, 0},
        {1, 8, 2, 128, 4399, 0}, {24, 4, 2, 128, 0, 1},    {3, 2, 2, 64, 3000, 1},
        {130, 2, 1, 64, 20, 0},  {2, 16, 2, 16, 3333, 0},  {40, 2, 2, 256, 700, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        attn_prob p = attn_make(&cases[ci], 100 + ci);
        float *ref = filled(p.olen, -7.0f), *o = filled(p.olen, -7.0f);
        attn_reference(&p, ref);
        for (int split = 0; split < 2; split++) {
            if (split && hy_emu_attention_work(&p.a) == 0) continue;
            attn_host(&p, o, split);
            attn_check(&p, o, ref, split ? "host bodies, split" : "host bodies, one range");
        }
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) attn_device(&p, ref);
#endif
        free(ref), free(o);
        attn_drop(&p);
    }
}

/* The split: a decode row over 1800, 4400 and 32801 keys (few blocks)
 * cuts into 3, 8 and 64 ranges (at least 512 keys each, 64 at most: the
 * last ranges empty), the work asked for is their partial rows, and the
 * result is the one range's (no work) within the bound; with one float of
 * work fewer than asked the launch takes one range, to the bit. A prefill
 * of enough rows does not split and asks for no work. */
static void test_attention_split(void)
{
    static const struct {
        attn_case c;
        int splits;
    } cases[] = {
        {{1, 8, 2, 128, 1799, 0}, 3},
        {{1, 8, 2, 128, 4399, 0}, 8},
        {{1, 4, 2, 16, 32800, 0}, 64},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        attn_prob p = attn_make(&cases[ci].c, 7 + ci);
        const int splits = cases[ci].splits;
        CU_ASSERT_EQUAL(hy_cu_attn_splits(&p.a), splits);
        const size_t wf = hy_emu_attention_work(&p.a);
        CU_ASSERT_EQUAL(wf, (size_t)splits * p.a.n * p.a.Hq * (p.a.hd + 2));
        float *o1 = filled(p.olen, 0.0f), *o = filled(p.olen, 0.0f), *work = filled(wf, NAN);
        hy_err err = {0};
        p.a.o = o1;
        CU_ASSERT_EQUAL(hy_emu_attention(NULL, &p.a, NULL, 0, &err), HY_OK);
        p.a.o = o;
        CU_ASSERT_EQUAL(hy_emu_attention(NULL, &p.a, work, wf, &err), HY_OK);
        const double tol = ATTN_TOL * max_abs(p.V, (size_t)p.a.ctx * p.a.ldv);
        CU_ASSERT(hy_max_abs_diff(o, o1, p.olen) <= tol);
        CU_ASSERT(!isnan(work[p.a.hd])); /* split 0 wrote its first row's m: the split ran */
        CU_ASSERT_EQUAL(hy_emu_attention(NULL, &p.a, work, wf - 1, &err), HY_OK);
        CU_ASSERT(memcmp(o, o1, p.olen * sizeof *o) == 0);
        free(o1), free(o), free(work);
        attn_drop(&p);
    }
    hy_cu_attn big;
    memset(&big, 0, sizeof big);
    big.n = 4096, big.pos0 = 0, big.ctx = 4096, big.Hkv = 8, big.Hq = 32, big.hd = 128;
    CU_ASSERT_EQUAL(hy_cu_attn_splits(&big), 1);
    CU_ASSERT_EQUAL(hy_emu_attention_work(&big), 0);
}

/* === composition of an entry's heads ======================================= */

/* One head's payload in both shapes: fp32 values (rounded to bf16 first
 * when stored so) and the stored bytes. */
typedef struct payload {
    float *f;
    void *bytes;
    size_t n;
} payload;

static payload pay_make(hy_rng *r, size_t n, float sd, float mean, int dtype)
{
    payload p = {randn(r, n, sd), NULL, n};
    for (size_t i = 0; i < n; i++) p.f[i] += mean;
    if (dtype == HY_ENTRY_BF16) {
        uint16_t *b = malloc((n ? n : 1) * sizeof *b);
        for (size_t i = 0; i < n; i++) b[i] = hy_f32_to_bf16(p.f[i]);
        p.bytes = b;
    } else {
        p.bytes = malloc((n ? n : 1) * sizeof(float));
        memcpy(p.bytes, p.f, n * sizeof(float));
    }
    return p;
}

typedef struct layer {
    int heads, dk, dv;
    hy_head_rep *th, *sh; /* the CPU's records */
    hy_cu_rep *ct, *cs;   /* the kernel's, pointing at the same host bytes */
    payload *tp, *sp;
    float *S0; /* [heads][hs] */
    size_t hs;
} layer;

static const int t_forms[] = {HY_FORM_ZERO,    HY_FORM_SCALAR, HY_FORM_DIAG,
                              HY_FORM_LOWRANK, HY_FORM_IPLR,   HY_FORM_DENSE};
static const int s_forms[] = {HY_FORM_ZERO, HY_FORM_DENSE, HY_FORM_LOWRANK};

/* A layer whose 18 heads take every pair of T and S forms, payloads in
 * dtype (mixed: by head parity), ranks 1, a few, and full in turn. */
static layer layer_make(int dk, int dv, int dtype_mode, uint64_t seed)
{
    layer L;
    memset(&L, 0, sizeof L);
    hy_rng r;
    hy_rng_seed(&r, seed);
    L.heads = 18, L.dk = dk, L.dv = dv, L.hs = (size_t)dk * dv + 7;
    L.th = calloc(18, sizeof *L.th), L.sh = calloc(18, sizeof *L.sh);
    L.ct = calloc(18, sizeof *L.ct), L.cs = calloc(18, sizeof *L.cs);
    L.tp = calloc(18, sizeof *L.tp), L.sp = calloc(18, sizeof *L.sp);
    const int kmin = dk < dv ? dk : dv;
    for (int h = 0; h < 18; h++) {
        const int dt = dtype_mode == 2 ? h % 2 : dtype_mode;
        const int tf = t_forms[h / 3], sf = s_forms[h % 3];
        const int rt = h % 3 == 0 ? 1 : (h % 3 == 1 ? (dk < 5 ? dk : 5) : dk);
        const int rs = h % 3 == 0 ? kmin : (h % 3 == 1 ? (kmin < 3 ? kmin : 3) : 1);
        hy_head_rep *t = &L.th[h], *s = &L.sh[h];
        t->form = (uint8_t)tf, t->dtype = (uint8_t)dt;
        s->form = (uint8_t)sf, s->dtype = (uint8_t)dt;
        const float sd = 1.0f / sqrtf((float)dk); /* T·S of S's scale */
        switch (tf) {
        case HY_FORM_SCALAR:
            t->dtype = HY_ENTRY_F32, t->gamma = (float)(0.5 + 0.5 * hy_rng_uniform(&r));
            break;
        case HY_FORM_DIAG:
            L.tp[h] = pay_make(&r, (size_t)dk, 0.2f, 0.7f, dt);
            break;
        case HY_FORM_LOWRANK:
        case HY_FORM_IPLR:
            t->rank = (uint16_t)rt;
            t->gamma = tf == HY_FORM_IPLR ? 0.8f : 0.0f;
            L.tp[h] = pay_make(&r, (size_t)2 * rt * dk, sqrtf(sd), 0.0f, dt);
            break;
        case HY_FORM_DENSE:
            L.tp[h] = pay_make(&r, (size_t)dk * dk, sd, 0.0f, dt);
            break;
        }
        if (sf == HY_FORM_DENSE) L.sp[h] = pay_make(&r, (size_t)dk * dv, 1.0f, 0.0f, dt);
        if (sf == HY_FORM_LOWRANK) {
            s->rank = (uint16_t)rs;
            L.sp[h] =
                pay_make(&r, (size_t)rs * (dk + dv), 1.0f / sqrtf(sqrtf((float)rs)), 0.0f, dt);
        }
        t->p = L.tp[h].bytes, s->p = L.sp[h].bytes;
        t->bytes = (uint32_t)hy_rep_payload_bytes(tf, t->dtype, t->rank, dk, dk);
        s->bytes = (uint32_t)hy_rep_payload_bytes(sf, s->dtype, s->rank, dk, dv);
        const hy_head_rep *src[2] = {t, s};
        hy_cu_rep *dst[2] = {&L.ct[h], &L.cs[h]};
        for (int k = 0; k < 2; k++) {
            dst[k]->form = src[k]->form, dst[k]->dtype = src[k]->dtype;
            dst[k]->rank = src[k]->rank, dst[k]->gamma = src[k]->gamma, dst[k]->p = src[k]->p;
        }
    }
    L.S0 = randn(&r, 18 * L.hs, 1.0f);
    return L;
}

static void layer_drop(layer *L)
{
    for (int h = 0; h < L->heads; h++) {
        free(L->tp[h].f), free(L->tp[h].bytes), free(L->sp[h].f), free(L->sp[h].bytes);
    }
    free(L->th), free(L->sh), free(L->ct), free(L->cs), free(L->tp), free(L->sp), free(L->S0);
}

/* The start states: S0, with the heads whose T is zero poisoned (NaN) when T
 * is used — their new state must not read the old. */
static float *layer_start(const layer *L, int use_T)
{
    float *S = malloc(L->heads * L->hs * sizeof *S);
    memcpy(S, L->S0, L->heads * L->hs * sizeof *S);
    for (int h = 0; h < L->heads && use_T; h++)
        if (L->th[h].form == HY_FORM_ZERO)
            for (size_t i = 0; i < (size_t)L->dk * L->dv; i++) S[h * L->hs + i] = NAN;
    return S;
}

/* Each new state is a sum of at most dk + rank + 1 products of unit-scale
 * terms, and the kernel sums them in another order than BLAS: fp32 rounding
 * of some ulps of the result's scale (measured ≤ 5e-7 of its largest value).
 * Bound: 1e-5 of the head's largest value — a wrong factor, a missing term or
 * a bf16 payload read as fp32 moves it by far more. The gap between heads
 * (hs > dk·dv) must be left as it was. */
#define COMPOSE_TOL 1e-5

static void compose_check(const layer *L, const float *S, const float *ref, const char *what,
                          int use_T)
{
    for (int h = 0; h < L->heads; h++) {
        const float *a = S + h * L->hs, *b = ref + h * L->hs;
        const size_t n = (size_t)L->dk * L->dv;
        const double err = hy_rel_diff(a, b, n);
        if (!(err <= COMPOSE_TOL))
            printf("\n  %s: dk %d dv %d head %d (T %s %s, S %s %s) use_T %d: error %.3g\n", what,
                   L->dk, L->dv, h, hy_entry_form_name(L->th[h].form),
                   L->th[h].dtype ? "bf16" : "f32", hy_entry_form_name(L->sh[h].form),
                   L->sh[h].dtype ? "bf16" : "f32", use_T, err);
        CU_ASSERT(err <= COMPOSE_TOL);
        CU_ASSERT(memcmp(a + n, b + n, (L->hs - n) * sizeof *a) == 0);
    }
}

#ifdef HY_HAVE_CUDA_KERNELS
static void compose_device(const layer *L, int use_T, const float *ref)
{
    hy_cu_rep *ct = malloc(L->heads * sizeof *ct), *cs = malloc(L->heads * sizeof *cs);
    for (int h = 0; h < L->heads; h++) {
        ct[h] = L->ct[h], cs[h] = L->cs[h];
        ct[h].p = L->th[h].bytes ? dev_put(L->th[h].p, L->th[h].bytes) : NULL;
        cs[h].p = L->sh[h].bytes ? dev_put(L->sh[h].p, L->sh[h].bytes) : NULL;
    }
    float *S = layer_start(L, use_T);
    const size_t sb = L->heads * L->hs * sizeof *S;
    hy_cu_compose c = {L->heads, L->dk, L->dv, use_T, NULL, NULL, NULL, L->hs};
    c.t = dev_put(ct, L->heads * sizeof *ct), c.s = dev_put(cs, L->heads * sizeof *cs);
    c.S = dev_put(S, sb);
    hy_err err = {0};
    CU_ASSERT_EQUAL(hy_cu_compose_layer(NULL, &c, &err), HY_OK);
    dev_get(S, c.S, sb);
    compose_check(L, S, ref, "device", use_T);
    for (int h = 0; h < L->heads; h++) cudaFree((void *)ct[h].p), cudaFree((void *)cs[h].p);
    cudaFree((void *)c.t), cudaFree((void *)c.s), cudaFree(c.S);
    free(ct), free(cs), free(S);
}
#endif

/* Every T form against every S form, fp32, bf16 and mixed payloads, with T
 * and naive, over square, tall, wide and tile-straddling shapes (dv not a
 * multiple of the block's columns). */
static void test_compose_matches_rep_apply(void)
{
    static const int shapes[][2] = {{16, 16}, {128, 128}, {128, 64}, {16, 48}, {64, 200}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int mode = 0; mode < 3; mode++) {
            const int dk = shapes[si][0], dv = shapes[si][1];
            layer L = layer_make(dk, dv, mode, 1000 + 10 * si + mode);
            float *work = malloc(hy_rep_apply_scratch(HY_LA_T_DENSE, dk, dv) * sizeof *work);
            for (int use_T = 1; use_T >= 0; use_T--) {
                float *ref = layer_start(&L, use_T), *S = layer_start(&L, use_T);
                for (int h = 0; h < L.heads; h++)
                    hy_rep_apply(HY_LA_T_DENSE, dk, dv, &L.th[h], &L.sh[h], use_T, ref + h * L.hs,
                                 work);
                const hy_cu_compose c = {L.heads, dk, dv, use_T, L.ct, L.cs, S, L.hs};
                hy_err err = {0};
                CU_ASSERT_EQUAL(hy_emu_compose_layer(NULL, &c, &err), HY_OK);
                compose_check(&L, S, ref, "host bodies", use_T);
#ifdef HY_HAVE_CUDA_KERNELS
                if (g_device) compose_device(&L, use_T, ref);
#endif
                free(ref), free(S);
            }
            free(work);
            layer_drop(&L);
        }
}

/* The form and dtype numbers the kernel reads are the entry's. */
static void test_compose_forms_are_the_entrys(void)
{
    CU_ASSERT_EQUAL(HY_CU_FORM_ZERO, HY_FORM_ZERO);
    CU_ASSERT_EQUAL(HY_CU_FORM_SCALAR, HY_FORM_SCALAR);
    CU_ASSERT_EQUAL(HY_CU_FORM_DIAG, HY_FORM_DIAG);
    CU_ASSERT_EQUAL(HY_CU_FORM_LOWRANK, HY_FORM_LOWRANK);
    CU_ASSERT_EQUAL(HY_CU_FORM_IPLR, HY_FORM_IPLR);
    CU_ASSERT_EQUAL(HY_CU_FORM_DENSE, HY_FORM_DENSE);
    CU_ASSERT_EQUAL(HY_CU_FORM_COUNT, HY_FORM_COUNT);
    CU_ASSERT_EQUAL(HY_CU_F32, HY_ENTRY_F32);
    CU_ASSERT_EQUAL(HY_CU_BF16, HY_ENTRY_BF16);
}

/* === a hole's keys and values ============================================== */

typedef struct hole_case {
    int nb, Hkv, hd, rd;
    int64_t p0;
    int dtype;
} hole_case;

static float widen(const void *p, int dtype, size_t at)
{
    return dtype == HY_ENTRY_BF16 ? hy_bf16_to_f32(((const uint16_t *)p)[at])
                                  : ((const float *)p)[at];
}

/* write_holes on the CPU: the entry's rows widened (bf16) into the cache and
 * rotated there, or rotated from the entry (fp32); the rest and V copied. */
static void hole_reference(const hy_cu_hole_kv *h, float *K, float *V)
{
    const size_t row = (size_t)h->Hkv * h->hd;
    for (int t = 0; t < h->nb; t++) {
        float *kr = K + (size_t)(h->p0 + t) * h->ldk, *vr = V + (size_t)(h->p0 + t) * h->ldv;
        float ek[row];
        for (size_t i = 0; i < row; i++) {
            ek[i] = widen(h->eK, h->dtype, (size_t)t * row + i);
            vr[i] = widen(h->eV, h->dtype, (size_t)t * row + i);
        }
        const float *cs = h->rd ? h->rope + (size_t)(h->p0 + t) * h->rd : NULL;
        for (int g = 0; g < h->Hkv; g++) {
            const size_t at = (size_t)g * h->hd;
            hy_rope_rotate(kr + at, ek + at, h->rd, cs);
            memcpy(kr + at + h->rd, ek + at + h->rd, (size_t)(h->hd - h->rd) * sizeof *kr);
        }
    }
}

/* A hole's problem: the entry's keys and values, the rope table over the
 * context, the caches' rows ld floats apart (set K and V before a write). */
typedef struct hole_prob {
    hy_cu_hole_kv h;
    payload ek, ev;
    float *inv, *rope;
    size_t cache; /* floats of each cache: ctx·ld */
} hole_prob;

static hole_prob hole_make(const hole_case *c, uint64_t seed)
{
    hole_prob p;
    memset(&p, 0, sizeof p);
    hy_rng r;
    hy_rng_seed(&r, seed);
    const int64_t ctx = c->p0 + c->nb + 3;
    const size_t row = (size_t)c->Hkv * c->hd, ld = row + 2, n = (size_t)c->nb * row;
    p.inv = malloc(((size_t)c->rd / 2 + 1) * sizeof *p.inv);
    p.rope = malloc(((size_t)ctx * c->rd + 1) * sizeof *p.rope);
    hy_rope_inv_freq(c->rd, 1e6, p.inv);
    for (int64_t t = 0; t < ctx && c->rd; t++)
        hy_rope_cos_sin(c->rd, p.inv, t, p.rope + (size_t)t * c->rd);
    p.ek = pay_make(&r, n, 1.0f, 0.0f, c->dtype);
    p.ev = pay_make(&r, n, 1.0f, 0.0f, c->dtype);
    const hy_cu_hole_kv h = {c->nb,  c->Hkv, c->hd, c->rd, c->dtype, p.ek.bytes, p.ev.bytes,
                             p.rope, c->p0,  NULL,  NULL,  ld,       ld};
    p.h = h;
    p.cache = (size_t)ctx * ld;
    return p;
}

static void hole_drop(hole_prob *p)
{
    free(p->inv), free(p->rope);
    free(p->ek.f), free(p->ek.bytes), free(p->ev.f), free(p->ev.bytes);
}

/* The twin into caches K and V filled with 3 first. */
static void hole_host(const hole_prob *p, float *K, float *V)
{
    hy_cu_hole_kv h = p->h;
    for (size_t i = 0; i < p->cache; i++) K[i] = V[i] = 3.0f;
    h.K = K, h.V = V;
    hy_err err = {0};
    CU_ASSERT_EQUAL(hy_emu_hole_kv_write(NULL, &h, &err), HY_OK);
}

/* Rotation by the table and widening are exact the same way on both sides
 * (each product rounded on its own, then one addition): the caches must be
 * equal to the bit, rows outside the hole untouched. */
static void test_hole_kv_matches_write_holes(void)
{
    static const hole_case cases[] = {
        {37, 2, 128, 64, 1234, HY_ENTRY_F32}, {37, 2, 128, 64, 1234, HY_ENTRY_BF16},
        {9, 4, 16, 16, 0, HY_ENTRY_BF16},     {20, 1, 256, 256, 5000, HY_ENTRY_F32},
        {5, 3, 64, 0, 77, HY_ENTRY_BF16},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const hole_case *c = &cases[ci];
        hole_prob p = hole_make(c, 50 + ci);
        const size_t cb = p.cache * sizeof(float);
        float *Kr = filled(p.cache, 3.0f), *Vr = filled(p.cache, 3.0f);
        float *K = filled(p.cache, 3.0f), *V = filled(p.cache, 3.0f);
        hole_reference(&p.h, Kr, Vr);
        hole_host(&p, K, V);
        CU_ASSERT(memcmp(K, Kr, cb) == 0);
        CU_ASSERT(memcmp(V, Vr, cb) == 0);
#ifdef HY_HAVE_CUDA_KERNELS
        if (g_device) {
            const size_t pb = (size_t)c->nb * c->Hkv * c->hd * (c->dtype ? 2 : 4);
            const int64_t ctx = c->p0 + c->nb + 3;
            hy_cu_hole_kv d = p.h;
            for (size_t i = 0; i < p.cache; i++) K[i] = V[i] = 3.0f;
            d.eK = dev_put(p.ek.bytes, pb), d.eV = dev_put(p.ev.bytes, pb);
            d.rope = c->rd ? dev_put(p.rope, (size_t)ctx * c->rd * sizeof(float)) : NULL;
            d.K = dev_put(K, cb), d.V = dev_put(V, cb);
            hy_err err = {0};
            CU_ASSERT_EQUAL(hy_cu_hole_kv_write(NULL, &d, &err), HY_OK);
            dev_get(K, d.K, cb);
            dev_get(V, d.V, cb);
            CU_ASSERT(memcmp(K, Kr, cb) == 0);
            CU_ASSERT(memcmp(V, Vr, cb) == 0);
            cudaFree((void *)d.eK), cudaFree((void *)d.eV), cudaFree((void *)d.rope);
            cudaFree(d.K), cudaFree(d.V);
        }
#endif
        free(Kr), free(Vr), free(K), free(V);
        hole_drop(&p);
    }
}

/* === the order of a phase's threads ========================================== */

/* Each phase's threads taken last to first give the bits of first to last
 * (within a phase no thread reads what another writes: a barrier would be
 * missing otherwise): attention over several row tiles in one range, and
 * split with rows at scattered positions (the merge too); every pair of
 * composition forms with T and naive; a hole's keys and values. */
static void test_phases_are_race_free(void)
{
    static const attn_case acases[] = {{70, 4, 4, 16, 0, 0}, {24, 4, 2, 128, 0, 1}};
    for (size_t ci = 0; ci < 2; ci++) {
        attn_prob p = attn_make(&acases[ci], 300 + ci);
        for (int split = 0; split < 2; split++) {
            float *o[2];
            for (int rev = 0; rev < 2; rev++) {
                hy_emu_set_reversed(rev);
                o[rev] = filled(p.olen, 0.0f);
                attn_host(&p, o[rev], split);
            }
            CU_ASSERT(memcmp(o[0], o[1], p.olen * sizeof(float)) == 0);
            free(o[0]), free(o[1]);
        }
        attn_drop(&p);
    }

    layer L = layer_make(64, 200, 2, 1300);
    const size_t SS = L.heads * L.hs;
    for (int use_T = 1; use_T >= 0; use_T--) {
        float *S[2];
        for (int rev = 0; rev < 2; rev++) {
            hy_emu_set_reversed(rev);
            S[rev] = layer_start(&L, use_T);
            const hy_cu_compose c = {L.heads, L.dk, L.dv, use_T, L.ct, L.cs, S[rev], L.hs};
            hy_err err = {0};
            CU_ASSERT_EQUAL(hy_emu_compose_layer(NULL, &c, &err), HY_OK);
        }
        CU_ASSERT(memcmp(S[0], S[1], SS * sizeof(float)) == 0);
        free(S[0]), free(S[1]);
    }
    layer_drop(&L);

    const hole_case hc = {37, 2, 128, 64, 1234, HY_ENTRY_BF16};
    hole_prob hp = hole_make(&hc, 1400);
    float *K[2], *V[2];
    for (int rev = 0; rev < 2; rev++) {
        hy_emu_set_reversed(rev);
        K[rev] = filled(hp.cache, 0.0f), V[rev] = filled(hp.cache, 0.0f);
        hole_host(&hp, K[rev], V[rev]);
    }
    CU_ASSERT(memcmp(K[0], K[1], hp.cache * sizeof(float)) == 0);
    CU_ASSERT(memcmp(V[0], V[1], hp.cache * sizeof(float)) == 0);
    for (int rev = 0; rev < 2; rev++) free(K[rev]), free(V[rev]);
    hole_drop(&hp);
    hy_emu_set_reversed(false);
}

/* === the launchers' refusals ================================================ */

/* A set of launchers: the twins, or the kernels' (same types). */
typedef struct launchers {
    const char *name;
    int (*attention)(hy_cu_stream, const hy_cu_attn *, float *, size_t, hy_err *);
    int (*compose_layer)(hy_cu_stream, const hy_cu_compose *, hy_err *);
    int (*hole_kv_write)(hy_cu_stream, const hy_cu_hole_kv *, hy_err *);
} launchers;

static const launchers k_launchers[] = {
    {"twins", hy_emu_attention, hy_emu_compose_layer, hy_emu_hole_kv_write},
#ifdef HY_HAVE_CUDA_KERNELS
    {"device", hy_cu_attention, hy_cu_compose_layer, hy_cu_hole_kv_write},
#endif
};

/* A call's status rc and its report err: HY_EINVAL with a reason. err is
 * cleared for the next call. */
static void refused(int rc, hy_err *err)
{
    CU_ASSERT_EQUAL(rc, HY_EINVAL);
    CU_ASSERT_EQUAL(err->code, HY_EINVAL);
    CU_ASSERT(err->msg[0] != '\0');
    memset(err, 0, sizeof *err);
}

/* Bad shapes and missing operands come back as HY_EINVAL before anything
 * is launched (no device needed), from the twins and the launchers alike;
 * nothing to do (no rows, heads or tokens) is HY_OK whatever the
 * pointers. The output a refused twin was given is left as it was. */
static void test_launchers_refuse_bad_shapes(void)
{
    for (size_t li = 0; li < sizeof k_launchers / sizeof k_launchers[0]; li++) {
        const launchers *L = &k_launchers[li];
        hy_err err = {0};
        hy_cu_attn a;
        memset(&a, 0, sizeof a);
        a.n = 1, a.Hq = 6, a.Hkv = 4, a.hd = 64;
        refused(L->attention(NULL, &a, NULL, 0, &err), &err);
        a.Hq = 8, a.hd = HY_CU_ATTN_MAX_HD + 1;
        refused(L->attention(NULL, &a, NULL, 0, &err), &err);
        a.Hq = a.Hkv = 70000, a.hd = 64; /* past the grid's y */
        refused(L->attention(NULL, &a, NULL, 0, &err), &err);
        a.Hq = 8, a.Hkv = 4; /* no operands */
        refused(L->attention(NULL, &a, NULL, 0, &err), &err);
        a.n = 0;
        CU_ASSERT_EQUAL(L->attention(NULL, &a, NULL, 0, &err), HY_OK);
        CU_ASSERT_EQUAL(hy_emu_attention_work(&a), 0);
        hy_cu_compose c;
        memset(&c, 0, sizeof c);
        c.heads = 2, c.dk = HY_CU_COMPOSE_MAX_DK + 1, c.dv = 8;
        refused(L->compose_layer(NULL, &c, &err), &err);
        c.dk = 8, c.use_T = 1; /* no records */
        refused(L->compose_layer(NULL, &c, &err), &err);
        c.heads = 0;
        CU_ASSERT_EQUAL(L->compose_layer(NULL, &c, &err), HY_OK);
        hy_cu_hole_kv h;
        memset(&h, 0, sizeof h);
        h.nb = 1, h.Hkv = 1, h.hd = 16, h.rd = 15;
        refused(L->hole_kv_write(NULL, &h, &err), &err);
        h.rd = 16; /* no operands */
        refused(L->hole_kv_write(NULL, &h, &err), &err);
        h.nb = 0;
        CU_ASSERT_EQUAL(L->hole_kv_write(NULL, &h, &err), HY_OK);
    }

    /* a twin refused for a stride leaves its output as it was */
    const attn_case ac = {4, 2, 2, 16, 10, 0};
    attn_prob p = attn_make(&ac, 9);
    float *o = filled(p.olen, -7.0f);
    hy_err err = {0};
    p.a.o = o;
    p.a.ldk = (size_t)p.a.Hkv * p.a.hd - 1;
    refused(hy_emu_attention(NULL, &p.a, NULL, 0, &err), &err);
    for (size_t i = 0; i < p.olen; i++) CU_ASSERT_EQUAL(o[i], -7.0f);
    free(o);
    attn_drop(&p);
}

int main(void)
{
#ifdef HY_HAVE_CUDA_KERNELS
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 1)
        printf("test_cuda_attn: device tests skipped: no CUDA device (%s)\n",
               cudaGetErrorString(e));
    else
        g_device = 1;
#endif
    static const hy_test_case cases[] = {
        {"attention_matches_cpu", test_attention_matches_cpu},
        {"attention_split_merges_to_one_range", test_attention_split},
        {"compose_matches_rep_apply", test_compose_matches_rep_apply},
        {"compose_forms_are_the_entrys", test_compose_forms_are_the_entrys},
        {"hole_kv_matches_write_holes", test_hole_kv_matches_write_holes},
        {"phases_are_race_free", test_phases_are_race_free},
        {"launchers_refuse_bad_shapes", test_launchers_refuse_bad_shapes},
        {NULL, NULL},
    };
    return hy_test_main("cuda_attention", cases);
}
