/*
 * A scatter worker (hypic-worker) and the Build RPC, against real processes: a
 * worker builds a segment's entry and streams it back unstored; the daemon
 * (hypic-cached, the same preset model) accepts those bytes with PutEntry
 * under the key the worker named — the key the daemon itself derives — and
 * a Prefill then reuses them. Build streams each layer's sections at their
 * offsets as they are built and the header last. The worker answers only
 * Build, Health and Stats; bad Build requests get their precise statuses while it keeps
 * serving; the daemon serves Build too.
 */
#include "hy_rpc.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>

static char g_tmp[128];
static hy_daemon g_cache, g_worker;
static hyc *g_c, *g_w;

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: \"\"\n"
                              "models: [{name: tiny, path: var/models/tiny}]\n"
                              "tiers: {host: {bytes: 64M}}\n"
                              "executor: {threads: 1}\n"
                              "log: {requests: false}\n";

static int build(hyc *c, segs *s, size_t i, Hypic__V1__EntryMeta **meta, void **bytes, size_t *n,
                 hyc_status *st)
{
    Hypic__V1__BuildRequest rq = HYPIC__V1__BUILD_REQUEST__INIT;
    rq.model = "tiny";
    rq.tokens = &s->tk[i];
    rq.n_tags = 1;
    rq.tags = s->tags[i];
    return hyc_build(c, &rq, meta, bytes, n, st);
}

static void test_build_put_prefill(void)
{
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 0, 300);
    segs_doc(&s, 1, 120);
    Hypic__V1__EntryMeta *meta[2] = {NULL, NULL};
    void *bytes[2] = {NULL, NULL};
    size_t n[2];
    for (int i = 0; i < 2; i++) {
        int rc = build(g_w, &s, (size_t)i, &meta[i], &bytes[i], &n[i], &st);
        if (rc) printf("\n  Build: %s\n", st.msg);
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(meta[i]->bytes, n[i]);
        CU_ASSERT_EQUAL(meta[i]->tokens, s.tk[i].n_ids);
        CU_ASSERT_EQUAL(meta[i]->key.len, 32);
        CU_ASSERT(meta[i]->flops > 0);
        CU_ASSERT(meta[i]->n_tags == 1 && strcmp(meta[i]->tags[0], s.tags[i][0]) == 0);
        CU_ASSERT_STRING_EQUAL(meta[i]->model, "tiny");
    }
    /* the worker stored nothing */
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *sr = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_w, &sq, &sr, &st), 0);
    CU_ASSERT_EQUAL(sr->entries, 0);
    hyc_free(sr);
    /* the daemon takes the bytes: under the key the worker named */
    for (int i = 0; i < 2; i++) {
        Hypic__V1__PutEntryResponse *pr = NULL;
        CU_ASSERT_EQUAL_FATAL(hyc_put_entry(g_c, meta[i], bytes[i], n[i], 0, &pr, &st), 0);
        CU_ASSERT(pr->key.len == 32 && memcmp(pr->key.data, meta[i]->key.data, 32) == 0);
        CU_ASSERT_EQUAL(pr->placed, HYPIC__V1__TIER__TIER_HOST);
        hyc_free(pr);
    }
    /* and a prefill reuses them: both hits */
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(prefill(g_c, &s, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    CU_ASSERT_EQUAL(r->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->segments[1]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    hyc_free(r);
    /* the daemon serves Build as well: the same key and size */
    Hypic__V1__EntryMeta *m2 = NULL;
    void *b2 = NULL;
    size_t n2;
    CU_ASSERT_EQUAL_FATAL(build(g_c, &s, 0, &m2, &b2, &n2, &st), 0);
    CU_ASSERT(memcmp(m2->key.data, meta[0]->key.data, 32) == 0 && n2 == n[0]);
    hyc_free(m2);
    free(b2);
    for (int i = 0; i < 2; i++) {
        hyc_free(meta[i]);
        free(bytes[i]);
    }
}

/* Build's chunks as they come: every one at its offset, the layers in
 * order and the header (offset 0) last, covering meta.bytes once. */
typedef struct chunk_log {
    int n;
    uint64_t off[4096], len[4096], bytes;
    bool placed;
} chunk_log;

static int log_chunk(void *ctx, const ProtobufCMessage *msg)
{
    chunk_log *l = ctx;
    const Hypic__V1__EntryChunk *ch = (const void *)msg;
    if (ch->meta) l->bytes = ch->meta->bytes;
    if (l->n < 4096) {
        l->placed &= ch->placement_case == HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET;
        l->off[l->n] = ch->offset;
        l->len[l->n++] = ch->data.len;
    }
    return 0;
}

static void test_build_streams_layers(void)
{
    segs s = {0};
    segs_doc(&s, 3, 500);
    Hypic__V1__BuildRequest rq = HYPIC__V1__BUILD_REQUEST__INIT;
    rq.model = "tiny";
    rq.tokens = &s.tk[0];
    hy_rpc_client *cl;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_client_open(g_worker.grpc, 0, &cl, &e), 0);
    const hy_rpc_method *m = NULL;
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(hy_rpc_methods[i].name, "Build") == 0) m = &hy_rpc_methods[i];
    static chunk_log l;
    memset(&l, 0, sizeof l);
    l.placed = true;
    hy_rpc_status st;
    CU_ASSERT_EQUAL_FATAL(hy_rpc_client_call(cl, m, &rq.base, NULL, 30000, log_chunk, &l, &st, &e),
                          0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    hy_rpc_client_close(cl);
    CU_ASSERT(l.placed);
    CU_ASSERT(l.n >= 5); /* tiny: 4 layers, then the header */
    CU_ASSERT_EQUAL(l.off[l.n - 1], 0);
    uint64_t sum = 0;
    for (int i = 0; i < l.n; i++) sum += l.len[i];
    for (int i = 1; i < l.n - 1; i++) CU_ASSERT(l.off[i] > l.off[i - 1]);
    CU_ASSERT(l.n < 2 || l.off[0] > 0); /* a layer first, not the header */
    CU_ASSERT_EQUAL(sum, l.bytes);
    printf("\n    %d chunks, the header last, %llu bytes", l.n, (unsigned long long)l.bytes);
}

/* A daemon finding this worker by its listed address, and one finding it by
 * a DNS name (localhost): each lists it up, with its source, and has a cold
 * request's long segment built on it. */
static void discovered(const char *how, const char *source)
{
    char dir[200], cfg[1024];
    snprintf(dir, sizeof dir, "%.120s/by-%.16s", g_tmp, source);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
    snprintf(cfg, sizeof cfg, "%sscatter: {%s, min_tokens: 64, probe_ms: 100}\n", k_config, how);
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    hyc_status st;
    bool up = false;
    for (int i = 0; i < 100 && !up; i++) {
        Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
        Hypic__V1__StatsResponse *r = NULL;
        CU_ASSERT_EQUAL_FATAL(hyc_stats(c, &q, &r, &st), 0);
        for (size_t k = 0; k < r->n_workers; k++) {
            CU_ASSERT_STRING_EQUAL(r->workers[k]->source, source);
            up |= r->workers[k]->up && strcmp(r->workers[k]->address, g_worker.grpc) == 0;
        }
        hyc_free(r);
        if (!up) usleep(50000);
    }
    CU_ASSERT_FATAL(up);
    segs s = {0};
    segs_doc(&s, 20 + (int)strlen(source), 300);
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(prefill(c, &s, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    CU_ASSERT_STRING_EQUAL(r->segments[0]->built_by, g_worker.grpc);
    printf("\n    %s: built by %s", source, r->segments[0]->built_by);
    hyc_free(r);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
}

static void test_discovery(void)
{
    char how[400];
    snprintf(how, sizeof how, "workers: [{address: \"%s\"}]", g_worker.grpc);
    discovered(how, "config");
    const char *port = strrchr(g_worker.grpc, ':');
    CU_ASSERT_FATAL(port != NULL);
    snprintf(how, sizeof how, "dns: \"localhost%s\"", port);
    discovered(how, "dns");
}

static void test_worker_refusals(void)
{
    hyc_status st;
    /* only Build, Health and Stats */
    segs s = {0};
    segs_doc(&s, 2, 100);
    Hypic__V1__LookupResponse *lr = NULL;
    CU_ASSERT_EQUAL(lookup(g_w, &s, 0, &lr, &st), HYC_UNIMPLEMENTED);
    Hypic__V1__PrefillResponse *pr = NULL;
    CU_ASSERT_EQUAL(prefill(g_w, &s, HYPIC__V1__MODE__MODE_FULL, &pr, &st), HYC_UNIMPLEMENTED);
    CU_ASSERT_EQUAL(health(g_w, &st), 0);
    /* bad Builds, each with its status; the worker goes on */
    Hypic__V1__EntryMeta *m = NULL;
    void *b = NULL;
    size_t n;
    Hypic__V1__BuildRequest rq = HYPIC__V1__BUILD_REQUEST__INIT;
    rq.model = "tiny";
    CU_ASSERT_EQUAL(hyc_build(g_w, &rq, &m, &b, &n, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "'tokens' is empty") != NULL);
    uint32_t three[3] = {10, 11, 12}, bad[5] = {10, 11, 12, 13, 999};
    Hypic__V1__Tokens tk = HYPIC__V1__TOKENS__INIT;
    tk.n_ids = 3, tk.ids = three;
    rq.tokens = &tk;
    CU_ASSERT_EQUAL(hyc_build(g_w, &rq, &m, &b, &n, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "field 'tokens'") != NULL);
    tk.n_ids = 5, tk.ids = bad;
    CU_ASSERT_EQUAL(hyc_build(g_w, &rq, &m, &b, &n, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "999") != NULL);
    rq.model = "nope";
    CU_ASSERT_EQUAL(hyc_build(g_w, &rq, &m, &b, &n, &st), HYC_NOT_FOUND);
    CU_ASSERT_EQUAL(health(g_w, &st), 0);
}

int main(void)
{
    const char *worker = getenv("HYPIC_WORKER");
    if (!worker) {
        fprintf(stderr, "set HYPIC_WORKER to the hypic-worker binary\n");
        return 1;
    }
    if (hy_test_mkdtemp("hy_test_worker_", g_tmp, sizeof g_tmp)) return 1;
    char dc[200], dw[200];
    snprintf(dc, sizeof dc, "%s/cache", g_tmp);
    snprintf(dw, sizeof dw, "%s/worker", g_tmp);
    if (mkdir(dc, 0700) || mkdir(dw, 0700) || hy_daemon_start(&g_cache, dc, k_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    if (hy_daemon_start_as(&g_worker, worker, dw, k_config)) {
        hy_daemon_stop(&g_cache);
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_c = connect_as(&g_cache, NULL);
    g_w = connect_as(&g_worker, NULL);
    static const hy_test_case cases[] = {
        {"Build on the worker, PutEntry into the daemon, Prefill hits", test_build_put_prefill},
        {"Build streams each layer as it is built, the header last", test_build_streams_layers},
        {"a daemon finds the worker listed, or by a DNS name", test_discovery},
        {"the worker's refusals", test_worker_refusals},
        {NULL, NULL},
    };
    int rc = hy_test_main("worker", cases);
    hyc_close(g_c);
    hyc_close(g_w);
    if (!hy_daemon_stop(&g_worker) || !hy_daemon_stop(&g_cache)) {
        fprintf(stderr, "a process did not stop cleanly on SIGTERM\n");
        rc = 1;
    }
    hy_test_rmtree(g_tmp);
    return rc;
}
