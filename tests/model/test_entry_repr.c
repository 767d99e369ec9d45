/*
 * Each linear head's T and S(body|0) in its compact form (model/entry_repr.c):
 *   - the delta rule's WY form: a body shorter than dk gives γ·I + U·Vt of
 *     rank at most nb, exact to rounding, γ the body's decay;
 *   - a head that forgot its prefix is stored as nothing;
 *   - the bound each head states holds, and is within the tolerance, on
 *     random operators of every shape and on the trained `recall-long`
 *     model's states: ‖T̃·S − T·S‖ ≤ bound·‖S‖ for random states S, and the
 *     stated bound is the error of what is stored;
 *   - an entry round-trips (serialise, decode, view) to the same records,
 *     payloads and bytes, and composes the same;
 *   - a version-1 entry (written by the build before version 2, fixtures in
 *     tests/fixtures/entry-v1) is still read, keeps its key and composes
 *     as the exact version-2 entry of the same segment;
 *   - a version-2 section whose head records lie is refused, naming the head.
 */
#include "hy_kernels.h"
#include "model_internal.h"
#include "random_tokens.h"
#include "test_util.h"
#include "tiny_model.h"

#include <math.h>
#include <string.h>

#ifndef HY_FIXTURES_DIR
#define HY_FIXTURES_DIR "tests/fixtures"
#endif
#ifndef HY_MODELS_DIR
#define HY_MODELS_DIR "models"
#endif

static char g_tmp[64];
static hy_model *g_tiny;

/* --- helpers ------------------------------------------------------------ */

static double frob(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return sqrt(s);
}

static double frob_diff(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s);
}

static void randn(hy_rng *r, float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)(scale * hy_rng_normal(r));
}

/* T̃ as a dense matrix: the head applied to the identity (S(body|0) zero). */
static void dense_of_t(const hy_head_rep *t, hy_la_tkind kind, int dk, float *out)
{
    const hy_head_rep zero = {.form = HY_FORM_ZERO};
    float *work = malloc(hy_rep_apply_scratch(kind, dk, dk) * sizeof *work);
    memset(out, 0, (size_t)dk * dk * sizeof *out);
    for (int i = 0; i < dk; i++) out[(size_t)i * dk + i] = 1.0f;
    hy_rep_apply(kind, dk, dk, t, &zero, true, out, work);
    free(work);
}

/* S̃ as a dense matrix: the head added to a zero state. */
static void dense_of_s(const hy_head_rep *s, int dk, int dv, float *out)
{
    const hy_head_rep zero = {.form = HY_FORM_ZERO};
    float *work = malloc(hy_rep_apply_scratch(HY_LA_T_DENSE, dk, dv) * sizeof *work);
    memset(out, 0, (size_t)dk * dv * sizeof *out);
    hy_rep_apply(HY_LA_T_DENSE, dk, dv, &zero, s, false, out, work);
    free(work);
}

/* The delta rule's T over n tokens of random unit keys, with its γ: the
 * kernel advancing T from I, as a capture does. */
static double gdn_t(hy_rng *r, int dk, int n, double decay, float *T)
{
    const int dv = 4;
    float *q = malloc((size_t)n * dk * sizeof *q), *k = malloc((size_t)n * dk * sizeof *k);
    float *v = malloc((size_t)n * dv * sizeof *v), *g = malloc((size_t)n * sizeof *g);
    float *beta = malloc((size_t)n * sizeof *beta), S[4 * 256] = {0};
    randn(r, q, (size_t)n * dk, 1), randn(r, v, (size_t)n * dv, 1);
    double lg = 0;
    for (int t = 0; t < n; t++) {
        float *kt = k + (size_t)t * dk;
        randn(r, kt, (size_t)dk, 1);
        const double nk = frob(kt, (size_t)dk);
        for (int i = 0; i < dk; i++) kt[i] = (float)(kt[i] / nk);
        g[t] = (float)(log(decay) * (0.5 + hy_rng_uniform(r)));
        beta[t] = (float)(0.2 + 0.8 * hy_rng_uniform(r));
        lg += g[t];
    }
    hy_la_t_identity(HY_LA_T_DENSE, dk, T);
    const hy_la_in in = {.family = HY_LA_GDN,
                         .n = n,
                         .dk = dk,
                         .dv = dv,
                         .q = q,
                         .k = k,
                         .v = v,
                         .ldq = (size_t)dk,
                         .ldk = (size_t)dk,
                         .ldv = (size_t)dv,
                         .g = g,
                         .ldg = 1,
                         .beta = beta,
                         .ldb = 1};
    hy_la_recurrent(&in, S, NULL, 0, T);
    free(q), free(k), free(v), free(g), free(beta);
    return lg;
}

/* Checks head t against T: the stated bound is the stored error and within
 * tol, and random unit states move by at most the bound. */
static void check_t(const hy_head_rep *t, const float *T, int dk, float tol, hy_rng *r)
{
    const size_t n = (size_t)dk * dk;
    float *D = malloc(n * sizeof *D), *S = malloc(n * sizeof *S), *A = malloc(n * sizeof *A);
    float *B = malloc(n * sizeof *B);
    dense_of_t(t, HY_LA_T_DENSE, dk, D);
    const double err = frob_diff(D, T, n);
    CU_ASSERT(t->bound <= tol);
    /* the bound states what is stored (rounding of the check's own sums aside) */
    CU_ASSERT(err <= t->bound * 1.001 + 1e-6);
    if (!(err <= t->bound * 1.001 + 1e-6))
        printf("\n    form %s rank %d: error %.3g over its bound %.3g", hy_entry_form_name(t->form),
               t->rank, err, (double)t->bound);
    for (int trial = 0; trial < 3; trial++) {
        randn(r, S, n, 1);
        const double ns = frob(S, n);
        for (size_t i = 0; i < n; i++) S[i] = (float)(S[i] / ns);
        hy_gemm(0, 0, dk, dk, dk, 1.0f, D, (size_t)dk, S, (size_t)dk, 0.0f, A, (size_t)dk);
        hy_gemm(0, 0, dk, dk, dk, 1.0f, T, (size_t)dk, S, (size_t)dk, 0.0f, B, (size_t)dk);
        CU_ASSERT(frob_diff(A, B, n) <= t->bound * 1.001 + 1e-6);
    }
    free(D), free(S), free(A), free(B);
}

static void check_s(const hy_head_rep *s, const float *S, int dk, int dv, float tol)
{
    const size_t n = (size_t)dk * dv;
    float *D = malloc(n * sizeof *D);
    dense_of_s(s, dk, dv, D);
    const double nrm = frob(S, n), err = frob_diff(D, S, n);
    CU_ASSERT(s->bound <= tol);
    CU_ASSERT(err <= (s->bound * 1.001 + 1e-6) * nrm + 1e-12);
    free(D);
}

/* --- the forms ----------------------------------------------------------- */

static void test_wy_form_is_exact_below_dk(void)
{
    hy_rng r;
    hy_rng_seed(&r, 7);
    const int dk = 64;
    for (int nb = 1; nb < dk; nb += 9) {
        float *T = malloc((size_t)dk * dk * sizeof *T);
        const double lg = gdn_t(&r, dk, nb, 0.97, T);
        for (int bf = 0; bf < 2; bf++) {
            const hy_entry_repr rp = {HY_ENTRY_F32, bf ? HY_ENTRY_BF16 : HY_ENTRY_F32, HY_ENTRY_F32,
                                      1e-4f};
            hy_head_rep h;
            CU_ASSERT_EQUAL_FATAL(hy_rep_encode_t(HY_LA_T_DENSE, dk, T, lg, &rp, &h), HY_OK);
            /* γ·I + U·Vt of rank ≤ nb whenever that is smaller than dense */
            if (2 * nb < dk) {
                CU_ASSERT_EQUAL(h.form, HY_FORM_IPLR);
                CU_ASSERT(h.rank <= nb);
                CU_ASSERT(fabs(h.gamma - exp(lg)) <= 1e-6 * exp(lg));
            }
            check_t(&h, T, dk, rp.tol, &r);
            if (nb == 10)
                printf("\n    nb %d < dk %d: %s rank %d, %s, bound %.2e (exact: γ = %.4f)", nb, dk,
                       hy_entry_form_name(h.form), h.rank, bf ? "bf16" : "f32", (double)h.bound,
                       exp(lg));
            free((void *)h.p);
        }
        free(T);
    }
}

static void test_forgetting_head_is_nothing(void)
{
    hy_rng r;
    hy_rng_seed(&r, 8);
    const int dk = 32, nb = 60;
    float *T = malloc((size_t)dk * dk * sizeof *T);
    const double lg = gdn_t(&r, dk, nb, 0.14, T); /* 0.14 per token, as recall's heads */
    const hy_entry_repr rp = {HY_ENTRY_F32, HY_ENTRY_F32, HY_ENTRY_F32, 1e-3f};
    hy_head_rep h;
    CU_ASSERT_EQUAL_FATAL(hy_rep_encode_t(HY_LA_T_DENSE, dk, T, lg, &rp, &h), HY_OK);
    CU_ASSERT_EQUAL(h.form, HY_FORM_ZERO);
    CU_ASSERT_EQUAL(h.bytes, 0);
    CU_ASSERT(h.bound == (float)frob(T, (size_t)dk * dk));
    check_t(&h, T, dk, rp.tol, &r);
    /* the family's own scalar and diagonal kinds, and their zero */
    float one = 0.5f, tiny = 1e-5f, d[32];
    for (int i = 0; i < 32; i++) d[i] = 0.3f + 0.01f * i;
    CU_ASSERT_EQUAL(hy_rep_encode_t(HY_LA_T_SCALAR, dk, &one, NAN, &rp, &h), HY_OK);
    CU_ASSERT(h.form == HY_FORM_SCALAR && h.gamma == 0.5f && h.bytes == 0);
    CU_ASSERT_EQUAL(hy_rep_encode_t(HY_LA_T_SCALAR, dk, &tiny, NAN, &rp, &h), HY_OK);
    CU_ASSERT(h.form == HY_FORM_ZERO && h.bound == tiny);
    const hy_entry_repr rb = {HY_ENTRY_F32, HY_ENTRY_BF16, HY_ENTRY_F32, 1e-2f};
    CU_ASSERT_EQUAL(hy_rep_encode_t(HY_LA_T_DIAG, dk, d, NAN, &rb, &h), HY_OK);
    CU_ASSERT(h.form == HY_FORM_DIAG && h.dtype == HY_ENTRY_BF16 && h.bound <= 1e-2f);
    free((void *)h.p);
    free(T);
}

static void test_bounds_hold_on_random_operators(void)
{
    hy_rng r;
    hy_rng_seed(&r, 9);
    const float tols[] = {1e-3f, 1e-2f, 0.1f};
    int forms[HY_FORM_COUNT] = {0}, sforms[HY_FORM_COUNT] = {0};
    for (int dk = 16; dk <= 128; dk *= 2)
        for (int trial = 0; trial < 6; trial++) {
            const int dv = trial % 2 ? dk : dk / 2;
            float *T = malloc((size_t)dk * dk * sizeof *T), *S = malloc((size_t)dk * dv * 4);
            const int nb = 1 + (int)(hy_rng_uniform(&r) * 3 * dk);
            const double lg = gdn_t(&r, dk, nb, trial < 3 ? 0.999 : 0.9, T);
            /* a state of decaying spectrum: nb recent outer products */
            memset(S, 0, (size_t)dk * dv * 4);
            float *a = malloc((size_t)dk * 4), *b = malloc((size_t)dv * 4);
            for (int t = 0; t < nb; t++) {
                randn(&r, a, (size_t)dk, 1), randn(&r, b, (size_t)dv, pow(0.9, nb - t));
                hy_gemm(0, 0, dk, dv, 1, 1.0f, a, 1, b, (size_t)dv, 1.0f, S, (size_t)dv);
            }
            for (size_t ti = 0; ti < sizeof tols / sizeof *tols; ti++)
                for (int bf = 0; bf < 2; bf++) {
                    const hy_entry_dtype d = bf ? HY_ENTRY_BF16 : HY_ENTRY_F32;
                    const hy_entry_repr rp = {d, d, d, tols[ti]};
                    hy_head_rep ht, hs;
                    CU_ASSERT_EQUAL_FATAL(hy_rep_encode_t(HY_LA_T_DENSE, dk, T, lg, &rp, &ht), 0);
                    CU_ASSERT_EQUAL_FATAL(hy_rep_encode_s(dk, dv, S, &rp, &hs), 0);
                    check_t(&ht, T, dk, rp.tol, &r);
                    check_s(&hs, S, dk, dv, rp.tol);
                    CU_ASSERT(ht.bytes <= (size_t)dk * dk * 4 && hs.bytes <= (size_t)dk * dv * 4);
                    forms[ht.form]++, sforms[hs.form]++;
                    free((void *)ht.p), free((void *)hs.p);
                }
            free(a), free(b), free(T), free(S);
        }
    printf("\n    T forms:");
    for (int f = 0; f < HY_FORM_COUNT; f++)
        if (forms[f]) printf(" %s %d", hy_entry_form_name(f), forms[f]);
    printf("; S forms:");
    for (int f = 0; f < HY_FORM_COUNT; f++)
        if (sforms[f]) printf(" %s %d", hy_entry_form_name(f), sforms[f]);
    CU_ASSERT(forms[HY_FORM_IPLR] > 0 && sforms[HY_FORM_LOWRANK] > 0);
}

/* The trained model's states: every head of every linear layer of an entry
 * built at a tolerance against the exact entry of the same segment. */
static void test_bounds_hold_on_trained_states(void)
{
    hy_err e = {0};
    hy_model *m;
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&m, HY_MODELS_DIR "/hypic-recall-long", &e), 0);
    const hy_model_config *c = hy_model_cfg(m);
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(m, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(m, &st, &e), 0);
    const char *docs[] = {"cedar dune DPB774; IIX547; frost FYZ083; timber pebble CLV845; mist.\n",
                          "inlet timber SEJ248; BNF984; brook VLF277; pebble hollow QAK611;\n",
                          "VCQ078; HYG484; orchard.\n"};
    const float tols[] = {1e-3f, 1e-2f, 0.05f};
    hy_rng r;
    hy_rng_seed(&r, 10);
    const int H = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    size_t exact_bytes = 0, compact_bytes[3] = {0};
    for (size_t d = 0; d < sizeof docs / sizeof *docs; d++) {
        int32_t tok[128];
        const size_t n = hy_tokenize_bytes(docs[d], tok, 128, c->vocab);
        hy_entry *ref;
        hy_state_reset(st);
        CU_ASSERT_EQUAL_FATAL(
            hy_entry_build(ex, st, tok, n, 8, hy_entry_exact(HY_ENTRY_F32), NULL, &ref, &e), 0);
        exact_bytes += hy_entry_payload_bytes(ref);
        for (size_t ti = 0; ti < 3; ti++) {
            const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, tols[ti]};
            hy_entry *got;
            hy_state_reset(st);
            CU_ASSERT_EQUAL_FATAL(hy_entry_build(ex, st, tok, n, 8, rp, NULL, &got, &e), 0);
            compact_bytes[ti] += hy_entry_payload_bytes(got);
            float *T = malloc((size_t)dk * dk * 4), *S = malloc((size_t)dk * dv * 4);
            for (int li = 0; li < c->n_layers; li++) {
                if (c->layer_kind[li] != HY_LAYER_LINEAR) continue;
                for (int h = 0; h < H; h++) {
                    const size_t at = (size_t)li * H + h;
                    memcpy(T, ref->th[at].p, (size_t)dk * dk * 4);
                    memcpy(S, ref->sh[at].p, (size_t)dk * dv * 4);
                    check_t(&got->th[at], T, dk, rp.tol, &r);
                    check_s(&got->sh[at], S, dk, dv, rp.tol);
                }
            }
            free(T), free(S);
            hy_entry_free(got);
        }
        hy_entry_free(ref);
    }
    printf("\n    recall-long, 3 documents: exact %zu bytes; at tol 1e-3 %.2fx, 1e-2 %.2fx, "
           "0.05 %.2fx smaller",
           exact_bytes, (double)exact_bytes / compact_bytes[0],
           (double)exact_bytes / compact_bytes[1], (double)exact_bytes / compact_bytes[2]);
    CU_ASSERT(compact_bytes[2] < exact_bytes);
    hy_state_free(st);
    hy_exec_free(ex);
    hy_model_close(m);
}

/* --- entries -------------------------------------------------------------- */

/* Logits of a query after [prefix, e] composed. */
static void compose_logits(hy_exec *ex, hy_state *st, const hy_entry *e, float *logits)
{
    hy_err err = {0};
    const hy_model_config *c = hy_model_cfg(g_tiny);
    int32_t *pre = tokens(17, c->vocab, 77), *q = tokens(5, c->vocab, 78);
    hy_state_reset(st);
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, st, pre, 17, NULL, &err), 0);
    CU_ASSERT_EQUAL(hy_entry_apply(ex, st, e, true, &err), 0);
    CU_ASSERT_EQUAL(hy_exec_prefill(ex, st, q, 5, logits, &err), 0);
    free(pre), free(q);
}

/* How two entries' heads must agree: stored alike (forms, payloads, bounds),
 * or up to the rounding of the build that made them (the same forms, ranks
 * and sizes, each stored value within fp32 rounding — one bf16 step where a
 * sum's last bit moved a bf16 rounding — of the other's; bounds aside: a
 * version-1 entry states the worst case of bf16 rounding, a build its
 * measured error). */
typedef enum { SAME, CLOSE } heads_agree;

static bool head_pair(const hy_head_rep *x, const hy_head_rep *y, heads_agree how)
{
    if (x->form != y->form || x->dtype != y->dtype || x->rank != y->rank || x->bytes != y->bytes)
        return false;
    if (how != CLOSE)
        return x->gamma == y->gamma && x->bound == y->bound &&
               (!x->bytes || memcmp(x->p, y->p, x->bytes) == 0);
    const bool bf = x->dtype == HY_ENTRY_BF16;
    for (size_t i = 0; i < x->bytes / (bf ? 2 : 4); i++) {
        const float u = bf ? hy_bf16_to_f32(((const uint16_t *)x->p)[i]) : ((const float *)x->p)[i];
        const float v = bf ? hy_bf16_to_f32(((const uint16_t *)y->p)[i]) : ((const float *)y->p)[i];
        if (fabsf(u - v) > (bf ? 0x1p-7f : 1e-5f) * fmaxf(1.0f, fabsf(v))) return false;
    }
    return true;
}

static bool heads_match(const hy_entry *a, const hy_entry *b, heads_agree how)
{
    const hy_model_config *c = &a->cfg;
    for (int li = 0; li < c->n_layers; li++) {
        if (c->layer_kind[li] != HY_LAYER_LINEAR) continue;
        for (int h = 0; h < c->lin_v_heads; h++) {
            const size_t at = (size_t)li * c->lin_v_heads + h;
            if (!head_pair(&a->th[at], &b->th[at], how) || !head_pair(&a->sh[at], &b->sh[at], how))
                return false;
        }
    }
    return true;
}

static bool same_heads(const hy_entry *a, const hy_entry *b)
{
    return heads_match(a, b, SAME);
}

static void test_round_trip(void)
{
    hy_err e = {0};
    const hy_model_config *c = hy_model_cfg(g_tiny);
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_tiny, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_tiny, &st, &e), 0);
    int32_t *tok = tokens(90, c->vocab, 5);
    const hy_entry_repr reprs[] = {{HY_ENTRY_F32, HY_ENTRY_F32, HY_ENTRY_F32, 0.01f},
                                   {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.05f},
                                   {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.0f}};
    float *la = malloc((size_t)c->vocab * 4), *lb = malloc((size_t)c->vocab * 4);
    for (size_t i = 0; i < sizeof reprs / sizeof *reprs; i++) {
        hy_entry *ent, *back, *view;
        hy_state_reset(st);
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(ex, st, tok, 90, 8, reprs[i], NULL, &ent, &e), 0);
        CU_ASSERT_EQUAL(hy_entry_version(ent), 2);
        void *buf, *again;
        size_t len, len2;
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(ent, &buf, &len, &e), 0);
        CU_ASSERT_EQUAL(len, hy_entry_serialized_bytes(ent));
        CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(g_tiny, buf, len, &back, &e), 0);
        void *al = hy_alloc(len);
        memcpy(al, buf, len);
        CU_ASSERT_EQUAL_FATAL(hy_entry_view(g_tiny, al, len, &view, &e), 0);
        CU_ASSERT(same_heads(ent, back) && same_heads(ent, view));
        CU_ASSERT(hy_entry_repr_eq(hy_entry_repr_of(back), reprs[i]));
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(back, &again, &len2, &e), 0);
        CU_ASSERT(len2 == len && memcmp(buf, again, len) == 0);
        compose_logits(ex, st, ent, la);
        compose_logits(ex, st, view, lb);
        CU_ASSERT_EQUAL(memcmp(la, lb, (size_t)c->vocab * 4), 0);
        hy_entry_census k;
        hy_entry_census_of(ent, &k);
        printf("\n    tol %g %s: %zu bytes; T heads", (double)reprs[i].tol,
               reprs[i].s == HY_ENTRY_BF16 ? "bf16" : "f32", len);
        for (int f = 0; f < HY_FORM_COUNT; f++)
            if (k.t_heads[f]) printf(" %s %d", hy_entry_form_name(f), k.t_heads[f]);
        printf(", S heads");
        for (int f = 0; f < HY_FORM_COUNT; f++)
            if (k.s_heads[f]) printf(" %s %d", hy_entry_form_name(f), k.s_heads[f]);
        hy_entry_free(view), hy_entry_free(back), hy_entry_free(ent);
        hy_free(al), free(buf), free(again);
    }
    free(la), free(lb), free(tok);
    hy_state_free(st);
    hy_exec_free(ex);
}

static unsigned char *read_fixture(const char *name, size_t *len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/entry-v1/%s", HY_FIXTURES_DIR, name);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = hy_alloc(*len);
    CU_ASSERT_EQUAL_FATAL(fread(b, 1, *len, f), *len);
    fclose(f);
    return b;
}

static void test_version1_still_read(void)
{
    hy_err e = {0};
    const hy_model_config *c = hy_model_cfg(g_tiny);
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_tiny, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_tiny, &st, &e), 0);
    int32_t tok[40];
    for (int i = 0; i < 40; i++) tok[i] = (i * 37 + 11) % c->vocab; /* as the fixtures' writer */
    uint8_t fp[32], key[32];
    hy_model_fingerprint(g_tiny, fp);
    float *la = malloc((size_t)c->vocab * 4), *lb = malloc((size_t)c->vocab * 4);
    for (int d = 0; d < 2; d++) {
        const hy_entry_dtype dt = d ? HY_ENTRY_BF16 : HY_ENTRY_F32;
        size_t len;
        unsigned char *f =
            read_fixture(d ? "entry-v1-tiny-bf16.bin" : "entry-v1-tiny-f32.bin", &len);
        /* the key the version-1 build gave it, then the entry */
        CU_ASSERT_EQUAL(hy_entry_key("", fp, 8, hy_entry_exact(dt), tok, 40, key), 0);
        CU_ASSERT_EQUAL(memcmp(key, f, 32), 0);
        hy_entry *v1, *v1view, *v2;
        CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(g_tiny, f + 32, len - 32, &v1, &e), 0);
        void *al = hy_alloc(len - 32);
        memcpy(al, f + 32, len - 32);
        CU_ASSERT_EQUAL_FATAL(hy_entry_view(g_tiny, al, len - 32, &v1view, &e), 0);
        CU_ASSERT_EQUAL(hy_entry_version(v1), 1);
        CU_ASSERT(hy_entry_repr_eq(hy_entry_repr_of(v1), hy_entry_exact(dt)));
        hy_state_reset(st);
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(ex, st, tok, 40, 8, hy_entry_exact(dt), NULL, &v2, &e),
                              0);
        /* the fixtures' writer was an earlier build: its sums may round
         * differently from this one's (vectorised reductions), never more */
        CU_ASSERT(heads_match(v1, v1view, SAME));
        CU_ASSERT(heads_match(v1, v2, CLOSE));
        compose_logits(ex, st, v1view, la);
        compose_logits(ex, st, v2, lb);
        double worst = 0;
        for (int i = 0; i < c->vocab; i++) worst = fmax(worst, fabs((double)la[i] - lb[i]));
        CU_ASSERT(worst <= (d ? 1e-2 : 1e-4));
        /* written again, it is version 2 with the same contents */
        void *buf;
        size_t n2;
        hy_entry *back;
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(v1, &buf, &n2, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(g_tiny, buf, n2, &back, &e), 0);
        CU_ASSERT(hy_entry_version(back) == 2 && heads_match(back, v1, SAME));
        printf("\n    version 1 (%s, %zu bytes) read, key kept, composes as version 2",
               d ? "bf16" : "f32", len - 32);
        free(buf);
        hy_entry_free(back), hy_entry_free(v1), hy_entry_free(v1view), hy_entry_free(v2);
        hy_free(al), hy_free(f);
    }
    /* compact representations have keys of their own; −0 is 0 */
    uint8_t k2[32], k3[32];
    const hy_entry_repr a = {HY_ENTRY_F32, HY_ENTRY_F32, HY_ENTRY_F32, 0.01f};
    const hy_entry_repr z = {HY_ENTRY_F32, HY_ENTRY_F32, HY_ENTRY_F32, -0.0f};
    CU_ASSERT_EQUAL(hy_entry_key("", fp, 8, a, tok, 40, k2), 0);
    CU_ASSERT_EQUAL(hy_entry_key("", fp, 8, z, tok, 40, k3), 0);
    hy_entry_key("", fp, 8, hy_entry_exact(HY_ENTRY_F32), tok, 40, key);
    CU_ASSERT(memcmp(k2, key, 32) != 0 && memcmp(k3, key, 32) == 0);
    free(la), free(lb);
    hy_state_free(st);
    hy_exec_free(ex);
}

/* The serialised entry's section table entry of (kind, layer). */
static unsigned char *section_rec(unsigned char *p, uint32_t kind, uint32_t layer)
{
    uint32_t ns;
    memcpy(&ns, p + 16, 4);
    for (uint32_t i = 0; i < ns; i++) {
        unsigned char *t = p + 104 + 32 * i;
        uint32_t k, l;
        memcpy(&k, t, 4), memcpy(&l, t + 4, 4);
        if (k == kind && l == layer) return t;
    }
    return NULL;
}

/* Every checksum made right again after an edit, so that decoding reaches
 * the head tables. */
static void reseal(unsigned char *p)
{
    uint32_t ns, hdr;
    memcpy(&ns, p + 16, 4), memcpy(&hdr, p + 12, 4);
    for (uint32_t i = 0; i < ns; i++) {
        unsigned char *t = p + 104 + 32 * i;
        uint64_t off, len;
        memcpy(&off, t + 8, 8), memcpy(&len, t + 16, 8);
        const uint64_t s = hy_xxh3(p + off, len);
        memcpy(t + 24, &s, 8);
    }
    memset(p + 80, 0, 8);
    const uint64_t h = hy_xxh3(p, hdr);
    memcpy(p + 80, &h, 8);
}

static void test_lying_head_records_refused(void)
{
    hy_err e = {0};
    const hy_model_config *c = hy_model_cfg(g_tiny);
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_tiny, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_tiny, &st, &e), 0);
    int32_t *tok = tokens(60, c->vocab, 6);
    hy_entry *ent;
    const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_F32, 0.02f};
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(ex, st, tok, 60, 8, rp, NULL, &ent, &e), 0);
    void *buf;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(ent, &buf, &len, &e), 0);
    int lin = 0;
    while (c->layer_kind[lin] != HY_LAYER_LINEAR) lin++;
    /* edits of head 1's record in the first linear layer's T (or S) */
    struct {
        int s_part, at, size;
        uint32_t v;
        const char *want;
    } edits[] = {
        {0, 0, 1, 9, "form 9"},
        {0, 0, 1, HY_FORM_DIAG, "form 2"}, /* a diagonal of a dense family */
        {1, 0, 1, HY_FORM_IPLR, "form 4"}, /* γ·I is T's */
        {0, 1, 1, 7, "dtype 7"},
        {0, 12, 4, 12345, "payload bytes"},
        {0, 8, 4, 0x7fc00000u, "not finite"}, /* a NaN bound */
        {1, 2, 2, 4000, "rank 4000"},
    };
    for (size_t i = 0; i < sizeof edits / sizeof *edits; i++) {
        unsigned char *p = malloc(len);
        memcpy(p, buf, len);
        unsigned char *rec = section_rec(p, edits[i].s_part ? 3 : 2, (uint32_t)lin);
        CU_ASSERT_PTR_NOT_NULL_FATAL(rec);
        uint64_t off;
        memcpy(&off, rec + 8, 8);
        unsigned char *head = p + off + 16; /* head 1 */
        if (edits[i].s_part && edits[i].at == 2 && head[0] != HY_FORM_LOWRANK)
            head[0] = HY_FORM_LOWRANK;
        memcpy(head + edits[i].at, &edits[i].v, (size_t)edits[i].size);
        reseal(p);
        hy_entry *bad = NULL;
        hy_err be = {0};
        CU_ASSERT_EQUAL(hy_entry_deserialize(g_tiny, p, len, &bad, &be), HY_EFORMAT);
        CU_ASSERT_PTR_NULL(bad);
        CU_ASSERT_PTR_NOT_NULL(strstr(be.msg, edits[i].want));
        CU_ASSERT_PTR_NOT_NULL(strstr(be.msg, "head 1"));
        printf("\n    %s", be.msg);
        free(p);
    }
    free(buf), free(tok);
    hy_entry_free(ent);
    hy_state_free(st);
    hy_exec_free(ex);
}

int main(void)
{
    if (tiny_model_open("hy_test_entry_repr_", g_tmp, sizeof g_tmp, &g_tiny)) return 1;
    static const hy_test_case cases[] = {
        {"the WY form: γ·I + U·Vt of rank ≤ nb, exact, below dk", test_wy_form_is_exact_below_dk},
        {"a head that forgot is stored as nothing", test_forgetting_head_is_nothing},
        {"stated bounds hold on random operators", test_bounds_hold_on_random_operators},
        {"stated bounds hold on recall-long's states", test_bounds_hold_on_trained_states},
        {"round trip: records, payloads, bytes, composition", test_round_trip},
        {"a version-1 entry is read, keeps its key, composes the same", test_version1_still_read},
        {"lying head records are refused, naming the head", test_lying_head_records_refused},
        {NULL, NULL},
    };
    return tiny_model_main("entry_repr", cases, g_tiny, g_tmp);
}
