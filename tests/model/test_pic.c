/*
 * The invariants of DESIGN.md §3 on generated checkpoints:
 *  (a) one linear layer, no attention: `pic` equals `full` for any segment
 *      order, with entries built independently;
 *  (b) entries built inline from a request, reused in that request: `pic`
 *      equals `full`;
 *  (c) K cached canonically and rotated to position p equals K computed at p;
 *  (d) segments of 1, 2, 3, 4, 9 and 2000 tokens, W = 0, W > n and an empty
 *      query are handled exactly or refused with a clear error;
 * and entries survive serialisation and refuse corruption, foreign models
 * and truncation. Also: `naive` (no T) is far from `full` on decaying layers.
 */
#include "hy_kernels.h"
#include "model_internal.h"
#include "test_util.h"

#include <string.h>

static char g_tmp[64];

typedef struct fixture {
    hy_model *m;
    hy_exec *ex;
    hy_state *st;
    const hy_model_config *c;
    float *lf, *lp; /* logits of full and of the mode under test */
} fixture;

static void setup(fixture *f, const char *preset, uint64_t seed)
{
    char dir[160];
    hy_err e = {0};
    snprintf(dir, sizeof dir, "%s/%s-%llu", g_tmp, preset, (unsigned long long)seed);
    CU_ASSERT_EQUAL_FATAL(hy_model_init(preset, seed, dir, "F32", &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_model_open(&f->m, dir, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(f->m, 0, &f->ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(f->m, &f->st, &e), 0);
    f->c = hy_model_cfg(f->m);
    f->lf = malloc((size_t)f->c->vocab * 4);
    f->lp = malloc((size_t)f->c->vocab * 4);
}

static void teardown(fixture *f)
{
    free(f->lf), free(f->lp);
    hy_state_free(f->st);
    hy_exec_free(f->ex);
    hy_model_close(f->m);
}

static int32_t *tokens(int n, int vocab, uint64_t seed)
{
    hy_rng r;
    hy_rng_seed(&r, seed);
    int32_t *t = malloc((size_t)n * sizeof *t + 4);
    for (int i = 0; i < n; i++) t[i] = (int32_t)(hy_rng_next(&r) % (uint64_t)vocab);
    return t;
}

/* max |a − b| over the logits, relative to max |b| */
static double logit_err(const fixture *f)
{
    return hy_rel_diff(f->lp, f->lf, (size_t)f->c->vocab);
}

static int run(fixture *f, hy_segment *segs, size_t ns, const int32_t *q, size_t nq, hy_mode mode,
               int W, float *logits, hy_entry **built, hy_err *e)
{
    hy_request rq = {.segs = segs, .nsegs = ns, .query = q, .nq = nq, .mode = mode, .W = W};
    hy_result res = {.built = built};
    return hy_combine(f->ex, f->st, &rq, logits, &res, e);
}

/* (a) */
static void test_single_linear_layer_any_order(void)
{
    fixture f;
    setup(&f, "tiny-linear", 1);
    hy_err e = {0};
    enum { NS = 5 };
    const int lens[NS] = {40, 9, 130, 64, 77};
    int32_t *seg[NS];
    hy_entry *ent[NS];
    for (int i = 0; i < NS; i++) {
        seg[i] = tokens(lens[i], f.c->vocab, 10 + i);
        hy_state_reset(f.st); /* independent build: each from the empty state */
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(f.ex, f.st, seg[i], lens[i], HY_SEAM_DEFAULT,
                                             HY_ENTRY_F32, NULL, &ent[i], &e),
                              0);
    }
    int32_t *q = tokens(12, f.c->vocab, 99);
    const int orders[4][NS] = {{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 0, 4, 1, 3}, {1, 4, 0, 3, 2}};
    double worst = 0;
    for (int o = 0; o < 4; o++) {
        hy_segment s[NS];
        for (int i = 0; i < NS; i++) {
            int k = orders[o][i];
            s[i] = (hy_segment){seg[k], (size_t)lens[k], ent[k]};
        }
        CU_ASSERT_EQUAL_FATAL(run(&f, s, NS, q, 12, HY_MODE_FULL, 8, f.lf, NULL, &e), 0);
        CU_ASSERT_EQUAL_FATAL(run(&f, s, NS, q, 12, HY_MODE_PIC, 8, f.lp, NULL, &e), 0);
        worst = fmax(worst, logit_err(&f));
    }
    printf("\n    one linear layer, 4 orders of 5 independently built segments: pic vs full %.1e",
           worst);
    CU_ASSERT(worst <= 1e-5);
    for (int i = 0; i < NS; i++) hy_entry_free(ent[i]), free(seg[i]);
    free(q);
    teardown(&f);
}

/* (b) on a hybrid model: run pic with all misses (entries built inline), then
 * again with those entries as hits. */
static void inline_then_reuse(const char *preset, hy_mode mode, int W, const int *lens, int ns,
                              double tol)
{
    fixture f;
    setup(&f, preset, 2);
    hy_err e = {0};
    int32_t **seg = malloc((size_t)ns * sizeof *seg);
    hy_segment *s = malloc((size_t)ns * sizeof *s);
    hy_entry **built = calloc((size_t)ns, sizeof *built);
    for (int i = 0; i < ns; i++) {
        seg[i] = tokens(lens[i], f.c->vocab, 20 + i);
        s[i] = (hy_segment){seg[i], (size_t)lens[i], NULL};
    }
    int32_t *q = tokens(7, f.c->vocab, 98);
    CU_ASSERT_EQUAL_FATAL(run(&f, s, ns, q, 7, HY_MODE_FULL, W, f.lf, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(run(&f, s, ns, q, 7, mode, W, f.lp, built, &e), 0);
    double first = logit_err(&f);
    int hits = 0;
    for (int i = 0; i < ns; i++) {
        s[i].entry = built[i];
        hits += built[i] != NULL;
    }
    CU_ASSERT_EQUAL_FATAL(run(&f, s, ns, q, 7, mode, W, f.lp, NULL, &e), 0);
    double second = logit_err(&f);
    printf("\n    %s %s W=%d, %d segments (%d cacheable): misses vs full %.1e, reuse vs full %.1e",
           preset, hy_mode_name(mode), W, ns, hits, first, second);
    CU_ASSERT(first <= 1e-5);
    CU_ASSERT(second <= tol);
    for (int i = 0; i < ns; i++) hy_entry_free(built[i]), free(seg[i]);
    free(seg), free(s), free(built), free(q);
    teardown(&f);
}

static void test_inline_entries_reused_equal_full(void)
{
    const int lens[] = {50, 130, 9, 70, 64};
    inline_then_reuse("tiny", HY_MODE_PIC, 8, lens, 5, 1e-4);
    inline_then_reuse("tiny-moe", HY_MODE_PIC, 8, lens, 5, 1e-4);
    inline_then_reuse("tiny", HY_MODE_PIC, 20, lens, 5, 1e-4); /* W > some n */
    inline_then_reuse("tiny", HY_MODE_NOSEAM, 0, lens, 5, 1e-4);
}

/* (d) */
static void test_edge_lengths(void)
{
    const int lens[] = {1, 2, 3, 4, 9, 2000, 5};
    inline_then_reuse("tiny", HY_MODE_PIC, 8, lens, 7, 1e-4);
    inline_then_reuse("tiny", HY_MODE_NOSEAM, 0, lens, 7, 1e-4);

    fixture f;
    setup(&f, "tiny", 3);
    hy_err e = {0};
    int w = -1;
    CU_ASSERT_EQUAL(hy_entry_seam(f.c, 3, 8, &w, &e), HY_EUNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "too short to cache"));
    CU_ASSERT_EQUAL(hy_entry_seam(f.c, 4, 8, &w, &e), HY_OK);
    CU_ASSERT_EQUAL(w, 3);
    CU_ASSERT_EQUAL(hy_entry_seam(f.c, 9, 100, &w, &e), HY_OK);
    CU_ASSERT_EQUAL(w, 8);
    CU_ASSERT_EQUAL(hy_entry_seam(f.c, 2, 0, &w, &e), HY_OK); /* W = 0: whole segment */
    CU_ASSERT_EQUAL(w, 0);
    CU_ASSERT_EQUAL(hy_entry_seam(f.c, 5, -1, &w, &e), HY_EINVAL);
    int32_t *t = tokens(10, f.c->vocab, 4);
    hy_entry *ent = NULL;
    CU_ASSERT_EQUAL(hy_entry_build(f.ex, f.st, t, 3, 8, HY_ENTRY_F32, NULL, &ent, &e),
                    HY_EUNSUPPORTED);
    CU_ASSERT_PTR_NULL(ent);
    hy_segment s = {t, 10, NULL};
    CU_ASSERT_EQUAL(run(&f, &s, 1, t, 0, HY_MODE_PIC, 8, f.lp, NULL, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "query is empty"));
    s.n = 0;
    CU_ASSERT_EQUAL(run(&f, &s, 1, t, 3, HY_MODE_PIC, 8, f.lp, NULL, &e), HY_EINVAL);
    CU_ASSERT_EQUAL(run(&f, &s, 0, t, 3, HY_MODE_PREFIX, 8, f.lp, NULL, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "prefix cache"));
    /* an entry for other tokens is refused, not used */
    hy_state_reset(f.st);
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(f.ex, f.st, t, 10, 8, HY_ENTRY_F32, NULL, &ent, &e), 0);
    int32_t *u = tokens(10, f.c->vocab, 5);
    s = (hy_segment){u, 10, ent};
    CU_ASSERT_EQUAL(run(&f, &s, 1, t, 3, HY_MODE_PIC, 8, f.lp, NULL, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "other tokens"));
    s = (hy_segment){t, 10, ent};
    CU_ASSERT_EQUAL(run(&f, &s, 1, t, 3, HY_MODE_NOSEAM, 8, f.lp, NULL, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "W = 8"));
    hy_entry_free(ent);
    free(t), free(u);
    teardown(&f);
}

/* (c) */
static void test_canonical_k_rotates_to_position(void)
{
    fixture f;
    setup(&f, "tiny", 4);
    hy_err e = {0};
    int32_t *pre = tokens(37, f.c->vocab, 6), *seg = tokens(50, f.c->vocab, 7);
    hy_entry *ent;
    CU_ASSERT_EQUAL_FATAL(hy_exec_prefill(f.ex, f.st, pre, 37, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(f.ex, f.st, seg, 50, 8, HY_ENTRY_F32, NULL, &ent, &e), 0);
    const int KV = f.c->n_kv_heads * f.c->head_dim, hd = f.c->head_dim;
    double worst = 0;
    int checked = 0;
    for (int li = 0; li < f.c->n_layers; li++) {
        if (f.c->layer_kind[li] != HY_LAYER_ATTENTION) continue;
        for (int t = 0; t < ent->nb; t++) {
            const int64_t p = 37 + ent->w + t;
            float k[KV];
            memcpy(k, ent->K[li] + (size_t)t * KV, sizeof k);
            for (int g = 0; g < f.c->n_kv_heads; g++)
                hy_rope_apply(k + g * hd, f.c->rotary_dim, f.m->rope_inv_freq, p);
            worst = fmax(worst, hy_max_abs_diff(k, hy_state_k(f.st, li) + (size_t)p * KV, KV));
            checked++;
        }
    }
    printf("\n    %d canonical keys rotated to their positions vs computed there: %.1e", checked,
           worst);
    CU_ASSERT(checked > 0);
    CU_ASSERT(worst <= 1e-6);
    hy_entry_free(ent);
    free(pre), free(seg);
    teardown(&f);
}

static void test_serialise_and_refuse(void)
{
    fixture f;
    setup(&f, "tiny", 5);
    hy_err e = {0};
    int32_t *seg = tokens(90, f.c->vocab, 8), *q = tokens(5, f.c->vocab, 9);
    hy_entry *ent, *back, *bf;
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(f.ex, f.st, seg, 90, 8, HY_ENTRY_F32, NULL, &ent, &e), 0);
    hy_state_reset(f.st);
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(f.ex, f.st, seg, 90, 8, HY_ENTRY_BF16, NULL, &bf, &e), 0);
    void *buf;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(ent, &buf, &len, &e), 0);
    CU_ASSERT(len >= hy_entry_payload_bytes(ent));
    CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(f.m, buf, len, &back, &e), 0);
    /* the copy composes exactly like the original */
    hy_segment s = {seg, 90, ent};
    CU_ASSERT_EQUAL_FATAL(run(&f, &s, 1, q, 5, HY_MODE_PIC, 8, f.lf, NULL, &e), 0);
    s.entry = back;
    CU_ASSERT_EQUAL_FATAL(run(&f, &s, 1, q, 5, HY_MODE_PIC, 8, f.lp, NULL, &e), 0);
    CU_ASSERT(memcmp(f.lf, f.lp, (size_t)f.c->vocab * 4) == 0);
    s.entry = bf; /* bf16 storage of S: close, not equal */
    CU_ASSERT_EQUAL_FATAL(run(&f, &s, 1, q, 5, HY_MODE_PIC, 8, f.lp, NULL, &e), 0);
    printf("\n    bf16 S storage vs fp32: logits %.1e relative", logit_err(&f));
    CU_ASSERT(logit_err(&f) < 2e-2);
    hy_entry_free(back);

    unsigned char *b = buf;
    hy_entry *bad = NULL;
    /* a flipped payload byte, in the last section */
    b[len - 70] ^= 0x20;
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, len, &bad, &e), HY_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "checksum"));
    b[len - 70] ^= 0x20;
    /* a flipped header byte */
    b[33] ^= 1;
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, len, &bad, &e), HY_EFORMAT);
    b[33] ^= 1;
    /* truncated */
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, len - 64, &bad, &e), HY_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "truncated"));
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, 50, &bad, &e), HY_EFORMAT);
    /* another version */
    b[8] = 9;
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, len, &bad, &e), HY_EUNSUPPORTED);
    b[8] = HY_ENTRY_VERSION;
    CU_ASSERT_PTR_NULL(bad);
    /* a foreign model: same preset, another seed */
    fixture g;
    setup(&g, "tiny", 6);
    CU_ASSERT_EQUAL(hy_entry_deserialize(g.m, b, len, &bad, &e), HY_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "another model"));
    s.entry = ent;
    CU_ASSERT_EQUAL(run(&g, &s, 1, q, 5, HY_MODE_PIC, 8, g.lp, NULL, &e), HY_EINVAL);
    /* the intact buffer still reads */
    CU_ASSERT_EQUAL(hy_entry_deserialize(f.m, b, len, &back, &e), 0);
    hy_entry_free(back);
    /* keys: every field matters */
    uint8_t fp[32], k1[32], k2[32];
    hy_model_fingerprint(f.m, fp);
    hy_entry_key("t1", fp, 8, HY_ENTRY_F32, seg, 90, k1);
    hy_entry_key("t1", fp, 8, HY_ENTRY_F32, seg, 90, k2);
    CU_ASSERT(memcmp(k1, k2, 32) == 0);
    hy_entry_key("t2", fp, 8, HY_ENTRY_F32, seg, 90, k2);
    CU_ASSERT(memcmp(k1, k2, 32) != 0);
    hy_entry_key("t1", fp, 0, HY_ENTRY_F32, seg, 90, k2);
    CU_ASSERT(memcmp(k1, k2, 32) != 0);
    hy_entry_key("t1", fp, 8, HY_ENTRY_BF16, seg, 90, k2);
    CU_ASSERT(memcmp(k1, k2, 32) != 0);
    hy_entry_key("t1", fp, 8, HY_ENTRY_F32, seg, 89, k2);
    CU_ASSERT(memcmp(k1, k2, 32) != 0);
    fp[0] ^= 1;
    hy_entry_key("t1", fp, 8, HY_ENTRY_F32, seg, 90, k2);
    CU_ASSERT(memcmp(k1, k2, 32) != 0);
    teardown(&g);
    free(buf);
    hy_entry_free(ent), hy_entry_free(bf);
    free(seg), free(q);
    teardown(&f);
}

/* naive addition drops T: on decaying layers it is far from full, while pic
 * with the same entries is not. */
static void test_naive_is_wrong(void)
{
    fixture f;
    setup(&f, "tiny-linear", 7);
    hy_err e = {0};
    enum { NS = 4 };
    int32_t *seg[NS];
    hy_entry *ent[NS];
    hy_segment s[NS];
    for (int i = 0; i < NS; i++) {
        seg[i] = tokens(100, f.c->vocab, 30 + i);
        hy_state_reset(f.st);
        CU_ASSERT_EQUAL_FATAL(
            hy_entry_build(f.ex, f.st, seg[i], 100, 8, HY_ENTRY_F32, NULL, &ent[i], &e), 0);
        s[i] = (hy_segment){seg[i], 100, ent[i]};
    }
    int32_t *q = tokens(6, f.c->vocab, 97);
    CU_ASSERT_EQUAL_FATAL(run(&f, s, NS, q, 6, HY_MODE_FULL, 8, f.lf, NULL, &e), 0);
    CU_ASSERT_EQUAL_FATAL(run(&f, s, NS, q, 6, HY_MODE_NAIVE, 8, f.lp, NULL, &e), 0);
    double naive = logit_err(&f);
    CU_ASSERT_EQUAL_FATAL(run(&f, s, NS, q, 6, HY_MODE_PIC, 8, f.lp, NULL, &e), 0);
    double pic = logit_err(&f);
    printf("\n    one linear layer: naive vs full %.2e, pic vs full %.1e", naive, pic);
    CU_ASSERT(naive > 1e-2);
    CU_ASSERT(pic <= 1e-5);
    for (int i = 0; i < NS; i++) hy_entry_free(ent[i]), free(seg[i]);
    free(q);
    teardown(&f);
}

/* prefix reuses only leading segments seen before, and stays exact */
static void test_prefix_mode(void)
{
    fixture f;
    setup(&f, "tiny", 8);
    hy_err e = {0};
    hy_prefix_cache *pc;
    CU_ASSERT_EQUAL_FATAL(hy_prefix_cache_new(64u << 20, &pc, &e), 0);
    int32_t *a = tokens(40, f.c->vocab, 1), *b = tokens(60, f.c->vocab, 2),
            *c = tokens(30, f.c->vocab, 3), *q = tokens(4, f.c->vocab, 4);
    hy_segment s1[3] = {{a, 40, NULL}, {b, 60, NULL}, {c, 30, NULL}};
    hy_segment s2[3] = {{a, 40, NULL}, {c, 30, NULL}, {b, 60, NULL}};
    hy_request rq = {
        .segs = s1, .nsegs = 3, .query = q, .nq = 4, .mode = HY_MODE_PREFIX, .prefix = pc};
    hy_result res = {0};
    CU_ASSERT_EQUAL_FATAL(hy_combine(f.ex, f.st, &rq, f.lp, &res, &e), 0);
    CU_ASSERT_EQUAL(res.prefix_segments, 0);
    CU_ASSERT_EQUAL_FATAL(hy_combine(f.ex, f.st, &rq, f.lp, &res, &e), 0);
    CU_ASSERT_EQUAL(res.prefix_segments, 3);
    CU_ASSERT_EQUAL(res.prefilled, 4);
    rq.segs = s2;
    CU_ASSERT_EQUAL_FATAL(hy_combine(f.ex, f.st, &rq, f.lp, &res, &e), 0);
    CU_ASSERT_EQUAL(res.prefix_segments, 1);
    CU_ASSERT_EQUAL(res.prefilled, 94);
    rq.mode = HY_MODE_FULL;
    CU_ASSERT_EQUAL_FATAL(hy_combine(f.ex, f.st, &rq, f.lf, &res, &e), 0);
    CU_ASSERT(logit_err(&f) <= 1e-5);
    hy_prefix_cache_free(pc);
    free(a), free(b), free(c), free(q);
    teardown(&f);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_pic_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"a_single_linear_layer_any_order_equals_full", test_single_linear_layer_any_order},
        {"b_inline_entries_reused_equal_full", test_inline_entries_reused_equal_full},
        {"c_canonical_k_rotates_to_position", test_canonical_k_rotates_to_position},
        {"d_edge_lengths_and_refusals", test_edge_lengths},
        {"entries_serialise_and_refuse_corruption", test_serialise_and_refuse},
        {"naive_addition_is_wrong", test_naive_is_wrong},
        {"prefix_mode_reuses_leading_segments", test_prefix_mode},
        {NULL, NULL},
    };
    int rc = hy_test_main("pic_invariants", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
