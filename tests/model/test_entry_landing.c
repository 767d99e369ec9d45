/*
 * Entries composed while their bytes land (hy_entry_view_open): a reader
 * thread copies each entry's layers into the buffer one by one, slowly,
 * while hy_combine runs a pic request over them. The pass waits per layer
 * and gives the logits of the same request over entries whole, bit for bit;
 * the open needs the header, the table and the tokens first and says how
 * many bytes it takes; a section that fails its checksum on the way, or a
 * read that fails, ends the request with an error naming the layer, and the
 * state is reset (nothing of the pass stays) — the next request runs.
 */
#include "hy_model.h"
#include "random_tokens.h"
#include "test_util.h"
#include "tiny_model.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char g_tmp[64];
static hy_model *g_m;

enum { NSEG = 3, SEGLEN = 90, NQ = 5 };

typedef struct feed {
    const unsigned char *src; /* the serialised entry */
    unsigned char *dst;       /* where it lands, 64-byte aligned */
    size_t len;
    hy_entry *e;       /* opened over dst */
    int corrupt_layer; /* flip a byte of this layer's span on the way (-1: none) */
    bool fail_read;    /* stop at that layer as a failed read instead */
    int rc;            /* hy_entry_view_landed's, at the end */
} feed;

static void *feeder(void *arg)
{
    feed *f = arg;
    const hy_model_config *c = hy_model_cfg(g_m);
    size_t upto = 0;
    f->rc = HY_OK;
    for (int l = 0; l < c->n_layers; l++) {
        size_t lo, hi;
        hy_entry_layer_span(f->e, l, &lo, &hi);
        if (hi == 0) continue; /* a layer without sections */
        if (l == f->corrupt_layer && f->fail_read) {
            hy_entry_view_fail(f->e, HY_EIO, "read failed: injected");
            return NULL;
        }
        memcpy(f->dst + upto, f->src + upto, hi - upto);
        if (l == f->corrupt_layer) f->dst[lo + (hi - lo) / 2] ^= 0x40;
        upto = hi;
        nanosleep(&(struct timespec){0, 2000000}, NULL); /* 2 ms a layer: the pass waits */
        const int rc = hy_entry_view_landed(f->e, upto, &(hy_err){0});
        if (rc) {
            f->rc = rc;
            return NULL;
        }
    }
    memcpy(f->dst + upto, f->src + upto, f->len - upto);
    f->rc = hy_entry_view_landed(f->e, f->len, &(hy_err){0});
    return NULL;
}

typedef struct fixture {
    hy_exec *ex;
    hy_state *st;
    int32_t *tok[NSEG], *query;
    void *ser[NSEG];
    size_t len[NSEG];
    float *want; /* logits over the entries whole */
} fixture;

static void setup(fixture *x)
{
    hy_err e = {0};
    const hy_model_config *c = hy_model_cfg(g_m);
    CU_ASSERT_EQUAL_FATAL(hy_exec_new(g_m, 0, &x->ex, &e), 0);
    CU_ASSERT_EQUAL_FATAL(hy_state_new(g_m, &x->st, &e), 0);
    const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.03f};
    hy_segment sg[NSEG];
    hy_entry *whole[NSEG];
    for (int i = 0; i < NSEG; i++) {
        x->tok[i] = tokens(SEGLEN, c->vocab, 500 + i);
        hy_entry *b;
        hy_state_reset(x->st);
        CU_ASSERT_EQUAL_FATAL(hy_entry_build(x->ex, x->st, x->tok[i], SEGLEN, 8, rp, NULL, &b, &e),
                              0);
        CU_ASSERT_EQUAL_FATAL(hy_entry_serialize(b, &x->ser[i], &x->len[i], &e), 0);
        hy_entry_free(b);
        CU_ASSERT_EQUAL_FATAL(hy_entry_deserialize(g_m, x->ser[i], x->len[i], &whole[i], &e), 0);
        sg[i] = (hy_segment){x->tok[i], SEGLEN, whole[i]};
    }
    x->query = tokens(NQ, c->vocab, 77);
    x->want = malloc((size_t)c->vocab * sizeof *x->want);
    const hy_request rq = {sg, NSEG, x->query, NQ, HY_MODE_PIC, 8, rp, NULL, false};
    hy_result res = {0};
    CU_ASSERT_EQUAL_FATAL(hy_combine(x->ex, x->st, &rq, x->want, &res, &e), 0);
    CU_ASSERT_EQUAL(res.hits, NSEG);
    for (int i = 0; i < NSEG; i++) hy_entry_free(whole[i]);
}

static void teardown(fixture *x)
{
    for (int i = 0; i < NSEG; i++) free(x->tok[i]), free(x->ser[i]);
    free(x->query), free(x->want);
    hy_state_free(x->st);
    hy_exec_free(x->ex);
}

/* One request over entries landing; seg `bad` (−1: none) is corrupted or
 * fails at layer `layer`. Returns hy_combine's code; logits into got. */
static int run_landing(fixture *x, int bad, int layer, bool fail_read, float *got, hy_err *e,
                       double *arrival_s)
{
    const hy_entry_repr rp = {HY_ENTRY_BF16, HY_ENTRY_BF16, HY_ENTRY_BF16, 0.03f};
    feed f[NSEG];
    pthread_t th[NSEG];
    hy_segment sg[NSEG];
    for (int i = 0; i < NSEG; i++) {
        f[i] = (feed){.src = x->ser[i], .len = x->len[i], .corrupt_layer = -1};
        f[i].dst = aligned_alloc(64, (x->len[i] + 63) / 64 * 64);
        memset(f[i].dst, 0xee, x->len[i]);
        if (i == bad) f[i].corrupt_layer = layer, f[i].fail_read = fail_read;
        size_t need = 0;
        hy_err oe = {0};
        /* nothing landed yet: the header's bytes are needed */
        CU_ASSERT_EQUAL(hy_entry_view_open(g_m, f[i].dst, x->len[i], 0, &need, &f[i].e, &oe),
                        HY_EAGAIN);
        CU_ASSERT(need > 0 && need < x->len[i]);
        /* the bytes it asks for, until it opens */
        size_t avail = 0;
        int rc;
        while ((rc = hy_entry_view_open(g_m, f[i].dst, x->len[i], avail, &need, &f[i].e, &oe)) ==
               HY_EAGAIN) {
            CU_ASSERT_FATAL(need > avail);
            memcpy(f[i].dst + avail, (const unsigned char *)x->ser[i] + avail, need - avail);
            avail = need;
        }
        CU_ASSERT_EQUAL_FATAL(rc, HY_OK);
        CU_ASSERT_FALSE(hy_entry_whole(f[i].e));
        sg[i] = (hy_segment){x->tok[i], SEGLEN, f[i].e};
    }
    for (int i = 0; i < NSEG; i++) pthread_create(&th[i], NULL, feeder, &f[i]);
    const hy_request rq = {sg, NSEG, x->query, NQ, HY_MODE_PIC, 8, rp, NULL, false};
    hy_result res = {0};
    const int rc = hy_combine(x->ex, x->st, &rq, got, &res, e);
    *arrival_s = res.arrival_s;
    for (int i = 0; i < NSEG; i++) {
        pthread_join(th[i], NULL);
        if (i != bad) {
            CU_ASSERT_EQUAL(f[i].rc, HY_OK);
            CU_ASSERT(hy_entry_whole(f[i].e));
        }
        hy_entry_free(f[i].e);
        free(f[i].dst);
    }
    return rc;
}

static void test_landing_equals_whole(void)
{
    fixture x;
    setup(&x);
    const int V = hy_model_cfg(g_m)->vocab;
    float *got = malloc((size_t)V * sizeof *got);
    hy_err e = {0};
    double waited;
    CU_ASSERT_EQUAL(run_landing(&x, -1, -1, false, got, &e, &waited), HY_OK);
    CU_ASSERT(memcmp(got, x.want, (size_t)V * sizeof *got) == 0);
    CU_ASSERT(waited > 0.0); /* the layers came slower than the pass */
    printf("\n    %d entries landing 2 ms a layer: logits equal to the whole entries' bit for bit; "
           "the pass waited %.1f ms for layers",
           NSEG, waited * 1e3);
    free(got);
    teardown(&x);
}

static void failing(bool fail_read)
{
    fixture x;
    setup(&x);
    const hy_model_config *c = hy_model_cfg(g_m);
    float *got = malloc((size_t)c->vocab * sizeof *got);
    const int layer = c->n_layers - 1; /* the last: every layer before it composed already */
    hy_err e = {0};
    double waited;
    const int rc = run_landing(&x, 1, layer, fail_read, got, &e, &waited);
    CU_ASSERT_EQUAL(rc, fail_read ? HY_EIO : HY_EFORMAT);
    char want[32];
    snprintf(want, sizeof want, "layer %d", layer);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, fail_read ? "injected" : "fails its checksum"));
    CU_ASSERT_EQUAL(hy_state_pos(x.st), 0); /* nothing of the pass stays */
    printf("\n    %s at layer %d of segment 1: %s", fail_read ? "a failed read" : "a flipped byte",
           layer, e.msg);
    /* the executor and the state serve the next request as before */
    CU_ASSERT_EQUAL(run_landing(&x, -1, -1, false, got, &e, &waited), HY_OK);
    CU_ASSERT(memcmp(got, x.want, (size_t)c->vocab * sizeof *got) == 0);
    free(got);
    teardown(&x);
}

static void test_checksum_fails_mid_stream(void)
{
    failing(false);
}

static void test_read_fails_mid_stream(void)
{
    failing(true);
}

int main(void)
{
    if (tiny_model_open("hy_test_entry_landing_", g_tmp, sizeof g_tmp, &g_m)) return 1;
    static const hy_test_case cases[] = {
        {"entries landing layer by layer give the whole entries' logits",
         test_landing_equals_whole},
        {"a section failing its checksum mid-stream ends the request cleanly",
         test_checksum_fails_mid_stream},
        {"a read failing mid-stream ends the request cleanly", test_read_fails_mid_stream},
        {NULL, NULL},
    };
    return tiny_model_main("entries composed as they land", cases, g_m, g_tmp);
}
