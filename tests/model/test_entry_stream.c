/*
 * An entry built and serialised layer by layer (hy_entry_build_streamed,
 * hy_entry_serialize_layer, hy_entry_serialize_finish): what a scatter
 * worker streams while it builds. Each layer is reported once, in order;
 * its bytes, written when it is reported, are already the final ones; the
 * spans are disjoint, 64-byte aligned, inside the entry and together with
 * the header's cover it; and the whole equals hy_entry_serialize of the
 * same segment built by hy_entry_build, byte for byte, and decodes. For f32
 * and bf16 storage, W = 8 and 0, on tiny (attention and linear layers) and
 * with a segment longer than the executor's step (every layer then reported
 * in the last step only).
 */
#include "hy_model.h"
#include "random_tokens.h"
#include "test_util.h"
#include "tiny_model.h"

#include <string.h>

static char g_tmp[64];
static hy_model *g_m;

typedef struct stream {
    unsigned char *buf; /* the bytes as streamed */
    size_t total;
    int next; /* the layer expected next */
    size_t lo[64], hi[64];
    unsigned char *snap[64]; /* layer l's span as it was when reported */
    bool out_of_order;
} stream;

static void on_layer(void *ctx, const hy_entry *e, int layer)
{
    stream *s = ctx;
    if (layer != s->next || layer >= 64) {
        s->out_of_order = true;
        return;
    }
    s->next++;
    CU_ASSERT_EQUAL(hy_entry_serialize_layer(e, s->buf, layer, &s->lo[layer], &s->hi[layer]),
                    HY_OK);
    const size_t n = s->hi[layer] - s->lo[layer];
    s->snap[layer] = malloc(n ? n : 1);
    memcpy(s->snap[layer], s->buf + s->lo[layer], n);
}

static void check(int max_batch, size_t n, int W, hy_entry_repr rp)
{
    const hy_entry_dtype dt = rp.s;
    hy_err e = {0};
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_m, max_batch, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_m, &st, &e), 0);
    const hy_model_config *c = hy_model_cfg(g_m);
    int32_t *tok = tokens((int)n, c->vocab, 1000 + n);

    /* the reference: built whole, serialised whole */
    hy_entry *ref = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_entry_build(ex, st, tok, n, W, rp, NULL, &ref, &e), 0);
    void *want;
    size_t want_n;
    CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(ref, &want, &want_n, &e), 0);

    /* streamed */
    hy_state_reset(st);
    stream s = {.total = want_n};
    s.buf = calloc(1, want_n);
    hy_entry *got = NULL;
    CU_ASSERT_EQUAL_FATAL(hy_entry_build_streamed(ex, st, tok, n, W, rp, on_layer, &s, &got, &e),
                          0);
    CU_ASSERT_FALSE(s.out_of_order);
    CU_ASSERT_EQUAL(s.next, c->n_layers);
    CU_ASSERT_EQUAL(hy_entry_serialized_bytes(got), want_n);
    size_t hdr_hi = 0;
    CU_ASSERT_EQUAL(hy_entry_serialize_finish(got, s.buf, &hdr_hi), HY_OK);
    /* spans: the header's first, then each layer's after the previous one */
    size_t prev = hdr_hi;
    for (int l = 0; l < s.next; l++) {
        CU_ASSERT(s.lo[l] >= prev && s.lo[l] % 64 == 0 && s.hi[l] > s.lo[l]);
        CU_ASSERT(s.hi[l] <= want_n);
        prev = s.hi[l];
        /* the bytes it had when reported are the final ones */
        CU_ASSERT(memcmp(s.snap[l], (unsigned char *)want + s.lo[l], s.hi[l] - s.lo[l]) == 0);
        free(s.snap[l]);
    }
    CU_ASSERT_EQUAL(prev, want_n); /* nothing after the last layer */
    CU_ASSERT(memcmp(s.buf, want, want_n) == 0);
    hy_entry *back = NULL;
    CU_ASSERT_EQUAL(hy_entry_deserialize(g_m, s.buf, want_n, &back, &e), 0);
    printf(
        "\n    max_batch %4d, %4zu tokens, W %d, %s, tol %g: %d layers streamed, %zu bytes equal",
        max_batch, n, W, dt == HY_ENTRY_BF16 ? "bf16" : "f32", (double)rp.tol, s.next, want_n);
    hy_entry_free(back);
    hy_entry_free(got);
    hy_entry_free(ref);
    free(want);
    free(s.buf);
    free(tok);
    hy_state_free(st);
    hy_exec_free(ex);
}

static void test_streamed_equals_whole(void)
{
    check(0, 120, 8, hy_entry_exact(HY_ENTRY_F32));
    check(0, 120, 8, hy_entry_exact(HY_ENTRY_BF16));
    check(0, 57, 0, hy_entry_exact(HY_ENTRY_F32));
}

static void test_longer_than_a_step(void)
{
    check(16, 70, 8, hy_entry_exact(HY_ENTRY_F32)); /* five steps: layers final in the last */
    check(16, 70, 8, hy_entry_exact(HY_ENTRY_BF16));
}

/* Heads whose forms are chosen as each layer is stored: the layer's bytes
 * are final when it is reported all the same (its offset follows from the
 * layers before it), though the total is known only at the end. */
static void test_compact_forms_stream_too(void)
{
    const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.02f};
    check(0, 120, 8, rp);
    check(16, 70, 8, rp);
}

/* An entry built inline by a request's pass under defer_builds comes back
 * unfinished and finishes (hy_entry_finish) to the bytes of the same entry
 * finished inside the call; the logits are the same; freeing one never
 * finished leaks nothing (the sanitizer's run checks). */
static void test_deferred_inline_build(void)
{
    const hy_model_config *c = hy_model_cfg(g_m);
    hy_err e = {0};
    hy_exec *ex;
    hy_state *st;
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_m, 0, &ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_m, &st, &e), 0);
    const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.03f};
    int32_t *a = tokens(90, c->vocab, 31), *b = tokens(120, c->vocab, 32),
            *q = tokens(4, c->vocab, 33);
    hy_segment sg[2] = {{a, 90, NULL}, {b, 120, NULL}};
    float *l0 = malloc((size_t)c->vocab * sizeof *l0), *l1 = malloc((size_t)c->vocab * sizeof *l1);
    hy_entry *now[2] = {0}, *later[2] = {0};
    hy_request rq = {
        .segs = sg, .nsegs = 2, .query = q, .nq = 4, .mode = HY_MODE_PIC, .W = 8, .repr = rp};
    hy_result res = {.built = now};
    CU_ASSERT_EQUAL_FATAL(hy_combine(ex, st, &rq, l0, &res, &e), 0);
    rq.defer_builds = true;
    res = (hy_result){.built = later};
    CU_ASSERT_EQUAL_FATAL(hy_combine(ex, st, &rq, l1, &res, &e), 0);
    CU_ASSERT(memcmp(l0, l1, (size_t)c->vocab * sizeof *l0) == 0);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_FATAL(now[i] && later[i]);
        CU_ASSERT_EQUAL(hy_entry_finish(later[i], &e), 0);
        CU_ASSERT_EQUAL(hy_entry_finish(later[i], &e), 0); /* once is enough */
        void *x, *y;
        size_t nx, ny;
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(now[i], &x, &nx, &e), 0);
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(later[i], &y, &ny, &e), 0);
        CU_ASSERT(nx == ny && memcmp(x, y, nx) == 0);
        free(x), free(y);
        hy_entry_free(now[i]), hy_entry_free(later[i]);
    }
    /* built and dropped unfinished */
    res = (hy_result){.built = later};
    CU_ASSERT_EQUAL_FATAL(hy_combine(ex, st, &rq, l1, &res, &e), 0);
    for (int i = 0; i < 2; i++) hy_entry_free(later[i]);
    free(a), free(b), free(q), free(l0), free(l1);
    hy_state_free(st);
    hy_exec_free(ex);
}

int main(void)
{
    if (tiny_model_open("hy_test_entry_stream_", g_tmp, sizeof g_tmp, &g_m)) return 1;
    static const hy_test_case cases[] = {
        {"streamed layer by layer equals the whole, byte for byte", test_streamed_equals_whole},
        {"a segment longer than the executor's step", test_longer_than_a_step},
        {"compact head forms and bf16 K/V stream layer by layer too",
         test_compact_forms_stream_too},
        {"an inline build finished after the pass is the same entry", test_deferred_inline_build},
        {NULL, NULL},
    };
    return tiny_model_main("entry_stream", cases, g_m, g_tmp);
}
