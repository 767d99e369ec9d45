/*
 * hypic-cached end to end: every RPC through libhypic-client against a real
 * daemon on loopback, then bad input of every kind, each answered with its
 * precise status while the daemon keeps serving and what it stored stays
 * intact.
 */
#include "hy_rpc.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <pthread.h>

static char g_tmp[128];
static hy_daemon g_d;
static hyc *g_c;

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: 127.0.0.1:0\n"
                              "models: [{name: tiny, path: var/models/tiny}]\n"
                              "tiers: {host: {bytes: 64M}}\n"
                              "executor: {threads: 2}\n"
                              "limits: {max_message: 1M, max_segments: 16, max_top_k: 20, "
                              "max_new_tokens: 8}\n"
                              "log: {requests: false}\n";

/* --- every RPC ---------------------------------------------------------------- */

static uint8_t g_key0[32]; /* document 0's key, warmed first */

static void test_health_warm_lookup(void)
{
    hyc_status st;
    CU_ASSERT_EQUAL(health(g_c, &st), 0);
    segs s = {0};
    segs_doc(&s, 0, 300);
    segs_doc(&s, 1, 200);
    segs_doc(&s, 2, 3); /* too short for a body: K - 1 = 3 */
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(g_c, &s, &w, &st), 0);
    CU_ASSERT_EQUAL(w.n, 3);
    CU_ASSERT_EQUAL(w.states[0], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    CU_ASSERT_EQUAL(w.states[1], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    CU_ASSERT_EQUAL(w.states[2], HYPIC__V1__WARM_PROGRESS__STATE__STATE_UNCACHEABLE);
    memcpy(g_key0, w.keys[0], 32);
    CU_ASSERT_EQUAL(warm(g_c, &s, &w, &st), 0);
    CU_ASSERT_EQUAL(w.states[0], HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED);

    segs l = {0};
    segs_doc(&l, 0, 300);
    segs_doc(&l, 1, 200);
    segs_doc(&l, 5, 100); /* never warmed */
    segs_key(&l, g_key0);
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(lookup(g_c, &l, 500, &r, &st), 0);
    CU_ASSERT_EQUAL(r->n_segments, 4);
    CU_ASSERT(r->segments[0]->hit && r->segments[1]->hit && !r->segments[2]->hit);
    CU_ASSERT(r->segments[3]->hit);
    CU_ASSERT_EQUAL(memcmp(r->segments[3]->key.data, g_key0, 32), 0);
    CU_ASSERT_EQUAL(memcmp(r->segments[0]->key.data, g_key0, 32), 0);
    CU_ASSERT_EQUAL(r->segments[0]->tier, HYPIC__V1__TIER__TIER_HOST);
    CU_ASSERT_EQUAL(r->leading_hits, 2);
    CU_ASSERT_EQUAL(r->leading_tokens, 500);
    CU_ASSERT(r->lease_id != 0);
    CU_ASSERT(r->segments[0]->bytes > 0);
    hyc_free(r);
}

static void test_prefill_every_mode(void)
{
    hyc_status st;
    const int modes[] = {HYPIC__V1__MODE__MODE_FULL, HYPIC__V1__MODE__MODE_PREFIX,
                         HYPIC__V1__MODE__MODE_PIC, HYPIC__V1__MODE__MODE_NOSEAM,
                         HYPIC__V1__MODE__MODE_NAIVE};
    for (int m = 0; m < 5; m++)
        for (int rep = 0; rep < 2; rep++) {
            segs s = {0};
            segs_doc(&s, 1, 200);
            segs_doc(&s, 0, 300);
            segs_doc(&s, 6, 50);
            Hypic__V1__PrefillResponse *r = NULL;
            CU_ASSERT_EQUAL_FATAL(prefill(g_c, &s, modes[m], &r, &st), 0);
            CU_ASSERT_EQUAL(r->n_top, 5);
            CU_ASSERT_EQUAL(r->n_generated, 4);
            CU_ASSERT_EQUAL(r->generated[0], r->top[0]->token);
            for (size_t k = 1; k < r->n_top; k++) CU_ASSERT(r->top[k - 1]->prob >= r->top[k]->prob);
            CU_ASSERT_EQUAL(r->n_segments, 3);
            CU_ASSERT_PTR_NOT_NULL_FATAL(r->timings);
            CU_ASSERT(r->timings->ttft_ms > 0 && r->timings->total_ms >= r->timings->ttft_ms);
            const Hypic__V1__SegmentOutcome *o0 = r->segments[0];
            switch (modes[m]) {
            case HYPIC__V1__MODE__MODE_FULL:
                CU_ASSERT_EQUAL(r->tokens_computed, 558 + 3);
                CU_ASSERT_EQUAL(o0->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
                break;
            case HYPIC__V1__MODE__MODE_PREFIX:
                if (rep) { /* the same leading segments again: one checkpoint restored */
                    CU_ASSERT_EQUAL(o0->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_PREFIX);
                    CU_ASSERT_EQUAL(r->tokens_computed, 8 + 3);
                }
                break;
            case HYPIC__V1__MODE__MODE_PIC:
            case HYPIC__V1__MODE__MODE_NAIVE:
                /* warmed: hits, seams of 8 recomputed; document 6 is built on the first pass */
                CU_ASSERT_EQUAL(o0->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
                CU_ASSERT_EQUAL(o0->tier, HYPIC__V1__TIER__TIER_HOST);
                if (rep || modes[m] == HYPIC__V1__MODE__MODE_NAIVE) {
                    CU_ASSERT_EQUAL(r->segments[2]->kind,
                                    HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
                    CU_ASSERT_EQUAL(r->tokens_computed, 3 * 8 + 8 + 3);
                } else {
                    CU_ASSERT_EQUAL(r->segments[2]->kind,
                                    HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
                    CU_ASSERT(r->segments[2]->stored);
                }
                break;
            case HYPIC__V1__MODE__MODE_NOSEAM: /* W = 0 entries: built on the first pass */
                if (rep) CU_ASSERT_EQUAL(r->tokens_computed, 8 + 3);
                break;
            }
            hyc_free(r);
        }
}

/* An entry stored by the build before compact head forms (format version 1,
 * tests/fixtures/entry-v1) is put, inspected as version 1 and served to a
 * Prefill under the daemon's default representation, which is not exact:
 * the exact entry of a segment serves any representation of its S dtype. */
static void test_version1_entry_served(void)
{
    char path[512], *f = NULL;
    size_t len = 0;
    hy_err e = {0};
    snprintf(path, sizeof path, "%s/entry-v1/entry-v1-tiny-bf16.bin", HY_FIXTURES_DIR);
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1 << 20, &f, &len, &e), HY_OK);
    hyc_status st;
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL_FATAL(put_entry(g_c, f + 32, len - 32, &pr, &st), 0);
    uint8_t key[32];
    memcpy(key, pr->key.data, 32);
    hyc_free(pr);
    Hypic__V1__InspectResponse *ir = NULL;
    CU_ASSERT_EQUAL_FATAL(inspect(g_c, key, true, &ir, &st), 0);
    CU_ASSERT_EQUAL(ir->format_version, 1);
    CU_ASSERT(ir->repr && ir->repr->tolerance == 0.0f);
    hyc_free(ir);
    segs s = {0};
    segs_doc(&s, 0, 40);
    for (uint32_t i = 0; i < 40; i++) s.ids[0][i] = (i * 37 + 11) % 259; /* the fixture's */
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(prefill(g_c, &s, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    CU_ASSERT_EQUAL(r->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT(r->segments[0]->key.len == 32 && memcmp(r->segments[0]->key.data, key, 32) == 0);
    hyc_free(r);
    hy_free(f);
}

/* A hit is fetched or recomputed by the request's policy; recomputed, it is
 * a miss that says so and why, its stored entry left as it was (not stored
 * again); in auto, once this daemon has measured both, each hit states the
 * two estimates it compared. */
static void test_fetch_or_recompute(void)
{
    segs s = {0};
    for (int i = 0; i < 3; i++) segs_doc(&s, 700 + i, 300);
    hyc_status st;
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(g_c, &s, &w, &st), 0);
    uint64_t before = 0, after = 0;
    CU_ASSERT_EQUAL(list_total(g_c, &before, &st), 0);
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(prefill_reuse(g_c, &s, HYPIC__V1__MODE__MODE_PIC,
                                        HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_RECOMPUTE, &r,
                                        &st),
                          0);
    for (size_t i = 0; i < 3; i++) {
        const Hypic__V1__SegmentOutcome *o = r->segments[i];
        CU_ASSERT_EQUAL(o->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT_TRUE(o->recomputed);
        CU_ASSERT_FALSE(o->stored);
        CU_ASSERT_PTR_NOT_NULL(strstr(o->why, "recompute"));
    }
    printf("\n  recompute: #0 %s", r->segments[0]->why);
    hyc_free(r);
    CU_ASSERT_EQUAL(list_total(g_c, &after, &st), 0);
    CU_ASSERT_EQUAL(after, before);
    CU_ASSERT_EQUAL_FATAL(prefill_reuse(g_c, &s, HYPIC__V1__MODE__MODE_PIC,
                                        HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &r, &st),
                          0);
    for (size_t i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
        CU_ASSERT_FALSE(r->segments[i]->recomputed);
        CU_ASSERT_PTR_NOT_NULL(strstr(r->segments[i]->why, "fetched"));
    }
    hyc_free(r);
    /* auto, after enough of both were measured: the estimates compared */
    enum { MEASURED = 4 }; /* samples of each before the estimates (PL_MIN_SAMPLES) */
    for (int k = 0; k < MEASURED; k++) {
        CU_ASSERT_EQUAL_FATAL(prefill_reuse(g_c, &s, HYPIC__V1__MODE__MODE_PIC,
                                            HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_AUTO, &r, &st),
                              0);
        if (k + 1 < MEASURED) hyc_free(r);
    }
    const Hypic__V1__SegmentOutcome *o = r->segments[1];
    printf("\n  auto: #1 %s", o->why);
    CU_ASSERT(o->fetch_ms_est > 0 && o->compute_ms_est > 0);
    CU_ASSERT_EQUAL(o->recomputed, o->compute_ms_est < o->fetch_ms_est);
    CU_ASSERT_EQUAL(o->kind, o->recomputed ? HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS
                                           : HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    hyc_free(r);
    /* a value outside the enum is refused, naming the field */
    CU_ASSERT_EQUAL(prefill_reuse(g_c, &s, HYPIC__V1__MODE__MODE_PIC, 9, &r, &st),
                    HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "reuse"));
}

static void test_entries_get_put_inspect(void)
{
    hyc_status st;
    void *b = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(g_c, g_key0, &b, &n, &st), 0);
    CU_ASSERT(n > 1000);
    /* put back: validated, same key, placed */
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL(put_entry(g_c, b, n, &pr, &st), 0);
    if (pr) {
        CU_ASSERT_EQUAL(memcmp(pr->key.data, g_key0, 32), 0);
        CU_ASSERT_EQUAL(pr->placed, HYPIC__V1__TIER__TIER_HOST);
    }
    hyc_free(pr);
    void *b2 = NULL;
    size_t n2 = 0;
    CU_ASSERT_EQUAL(get_entry(g_c, g_key0, &b2, &n2, &st), 0);
    CU_ASSERT(n2 == n && memcmp(b, b2, n) == 0);
    free(b2);
    /* inspect */
    Hypic__V1__InspectResponse *ir = NULL;
    CU_ASSERT_EQUAL_FATAL(inspect(g_c, g_key0, true, &ir, &st), 0);
    CU_ASSERT_EQUAL(ir->seam, 8);
    CU_ASSERT_EQUAL(ir->seam_tokens, 8);
    CU_ASSERT_EQUAL(ir->body_tokens, 292);
    CU_ASSERT_EQUAL(ir->meta->tokens, 300);
    CU_ASSERT_EQUAL(ir->meta->bytes, n);
    CU_ASSERT_STRING_EQUAL(ir->meta->tenant, "default");
    CU_ASSERT_STRING_EQUAL(ir->meta->model, "tiny");
    CU_ASSERT_EQUAL(ir->n_sections, 1 + 3 * 3 + 2); /* tokens; 3 linear layers; 1 attention */
    CU_ASSERT(ir->verified);
    for (size_t i = 0; i < ir->n_sections; i++) CU_ASSERT(ir->sections[i]->checksum_ok);
    hyc_free(ir);
    free(b);
}

static void test_list_invalidate_stats_policy(void)
{
    hyc_status st;
    uint64_t total = 0;
    CU_ASSERT_EQUAL(list_total(g_c, &total, &st), 0);
    CU_ASSERT(total >= 3);
    /* paging: one entry per page, sorted by bytes, descending */
    Hypic__V1__ListRequest rq = HYPIC__V1__LIST_REQUEST__INIT;
    rq.sort = HYPIC__V1__LIST_REQUEST__SORT__SORT_BYTES;
    rq.descending = 1;
    rq.page_size = 1;
    uint64_t seen = 0, last = UINT64_MAX;
    char token[32] = "";
    do {
        rq.page_token = token;
        Hypic__V1__ListResponse *r = NULL;
        CU_ASSERT_EQUAL_FATAL(hyc_list(g_c, &rq, &r, &st), 0);
        CU_ASSERT_EQUAL(r->n_entries, 1);
        CU_ASSERT(r->entries[0]->bytes <= last);
        last = r->entries[0]->bytes;
        snprintf(token, sizeof token, "%s", r->next_page_token);
        seen++;
        hyc_free(r);
    } while (token[0] && seen < 100);
    CU_ASSERT_EQUAL(seen, total);
    /* a token this server never gives */
    const char *bad_tokens[] = {"-1", " 1", "1x", "99999999999999999999999"};
    for (int i = 0; i < 4; i++) {
        rq.page_token = (char *)bad_tokens[i];
        Hypic__V1__ListResponse *r = NULL;
        CU_ASSERT_EQUAL(hyc_list(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
        CU_ASSERT(strstr(st.msg, "page_token") != NULL);
    }
    /* the default order pages on from the last key (each page O(log n + page), any count):
     * every entry once, ascending, the first page's total on every page */
    Hypic__V1__ListRequest kq = HYPIC__V1__LIST_REQUEST__INIT;
    kq.page_size = 1;
    uint8_t prev[32] = {0};
    char ktoken[160] = "";
    seen = 0;
    do {
        kq.page_token = ktoken;
        Hypic__V1__ListResponse *r = NULL;
        CU_ASSERT_EQUAL_FATAL(hyc_list(g_c, &kq, &r, &st), 0);
        CU_ASSERT_EQUAL_FATAL(r->n_entries, 1);
        CU_ASSERT_EQUAL(r->total, total);
        CU_ASSERT(!seen || memcmp(prev, r->entries[0]->key.data, 32) < 0);
        memcpy(prev, r->entries[0]->key.data, 32);
        snprintf(ktoken, sizeof ktoken, "%s", r->next_page_token);
        seen++;
        hyc_free(r);
    } while (ktoken[0] && seen < 100);
    CU_ASSERT_EQUAL(seen, total);
    const char *bad_keys[] = {
        "7", "kzz.1", "k0000000000000000000000000000000000000000000000000000000000000000.",
        "k0000000000000000000000000000000000000000000000000000000000000000.1x"};
    for (int i = 0; i < 4; i++) {
        kq.page_token = (char *)bad_keys[i];
        Hypic__V1__ListResponse *r = NULL;
        CU_ASSERT_EQUAL(hyc_list(g_c, &kq, &r, &st), HYC_INVALID_ARGUMENT);
        CU_ASSERT(strstr(st.msg, "page_token") != NULL);
    }
    /* by tag */
    Hypic__V1__InvalidateRequest iv = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    iv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG;
    iv.tag = "doc-1";
    Hypic__V1__InvalidateResponse *ir = NULL;
    CU_ASSERT_EQUAL(hyc_invalidate(g_c, &iv, &ir, &st), 0);
    CU_ASSERT(ir && ir->removed >= 1); /* W = 8 and W = 0 (noseam) entries of document 1 */
    hyc_free(ir);
    segs s = {0};
    segs_doc(&s, 1, 200);
    Hypic__V1__LookupResponse *lr = NULL;
    CU_ASSERT_EQUAL(lookup(g_c, &s, 0, &lr, &st), 0);
    CU_ASSERT(lr && !lr->segments[0]->hit);
    hyc_free(lr);
    /* stats: the open-access tenant is an admin and sees the whole store */
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *sr = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_c, &sq, &sr, &st), 0);
    CU_ASSERT(sr->entries >= 2 && sr->n_tiers == 3);
    CU_ASSERT(sr->invalidated >= 1);
    /* nothing else runs: the Stats call itself is not counted in flight */
    CU_ASSERT_EQUAL(sr->requests_in_flight, 0);
    hyc_free(sr);
    /* policies */
    Hypic__V1__Policy p = HYPIC__V1__POLICY__INIT;
    p.tier = HYPIC__V1__TIER__TIER_HOST;
    p.evict = "lru";
    p.admit = "always";
    Hypic__V1__SetPolicyRequest sp = HYPIC__V1__SET_POLICY_REQUEST__INIT;
    sp.policy = &p;
    Hypic__V1__Policy *out = NULL;
    CU_ASSERT_EQUAL(hyc_set_policy(g_c, &sp, &out, &st), 0);
    hyc_free(out);
    Hypic__V1__GetPolicyRequest gp = HYPIC__V1__GET_POLICY_REQUEST__INIT;
    gp.tier = HYPIC__V1__TIER__TIER_HOST;
    out = NULL;
    CU_ASSERT_EQUAL(hyc_get_policy(g_c, &gp, &out, &st), 0);
    CU_ASSERT(out && strcmp(out->evict, "lru") == 0 && strcmp(out->admit, "always") == 0);
    hyc_free(out);
    p.evict = "nope";
    CU_ASSERT_EQUAL(hyc_set_policy(g_c, &sp, &out, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "nope"));
    gp.tier = HYPIC__V1__TIER__TIER_NVME; /* this daemon has none */
    CU_ASSERT_EQUAL(hyc_get_policy(g_c, &gp, &out, &st), HYC_FAILED_PRECONDITION);
}

typedef struct watch_ctx {
    int stored, removed;
    char reason[32];
} watch_ctx;

static int on_event(void *ctx, const Hypic__V1__WatchEvent *e)
{
    watch_ctx *w = ctx;
    if (e->kind == HYPIC__V1__WATCH_EVENT__KIND__KIND_STORED) w->stored++;
    if (e->kind == HYPIC__V1__WATCH_EVENT__KIND__KIND_REMOVED) {
        w->removed++;
        snprintf(w->reason, sizeof w->reason, "%s", e->reason);
    }
    return w->removed > 0; /* enough: end the stream */
}

static void *watcher(void *arg)
{
    watch_ctx *w = arg;
    hyc_options o = {.target = g_d.grpc, .deadline_ms = 20000};
    hyc *c;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) return NULL;
    Hypic__V1__WatchRequest rq = HYPIC__V1__WATCH_REQUEST__INIT;
    hyc_watch(c, &rq, on_event, w, &st);
    hyc_close(c);
    return NULL;
}

/* A call's reply reaches the client only once the daemon no longer counts it
 * in flight: Stats right after any answered call says 0 on an idle daemon
 * (it said 1 now and then, the finished call still counted while its reply
 * was already out, which made hypicctl status print "load 1" on an idle one). */
static void test_stats_after_call(void)
{
    hyc_status st = {0};
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    int busy = 0;
    for (int i = 0; i < 2000; i++) {
        CU_ASSERT_EQUAL_FATAL(health(g_c, &st), 0);
        Hypic__V1__StatsResponse *sr = NULL;
        CU_ASSERT_EQUAL_FATAL(hyc_stats(g_c, &sq, &sr, &st), 0);
        busy += sr->requests_in_flight != 0;
        hyc_free(sr);
    }
    CU_ASSERT_EQUAL(busy, 0);
    if (busy) fprintf(stderr, "\n  %d of 2000 Stats counted a finished call in flight\n", busy);
}

static void test_watch(void)
{
    watch_ctx w = {0};
    pthread_t t;
    pthread_create(&t, NULL, watcher, &w);
    usleep(300000); /* subscribed */
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 9, 100);
    warm_out wo;
    CU_ASSERT_EQUAL(warm(g_c, &s, &wo, &st), 0);
    uint64_t removed;
    CU_ASSERT_EQUAL(invalidate_key(g_c, wo.keys[0], &removed, &st), 0);
    CU_ASSERT_EQUAL(removed, 1);
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(w.stored, 1);
    CU_ASSERT_EQUAL(w.removed, 1);
    CU_ASSERT_STRING_EQUAL(w.reason, "invalidated");
}

static int count_heartbeats(void *ctx, const Hypic__V1__WatchEvent *e)
{
    if (e->kind == HYPIC__V1__WATCH_EVENT__KIND__KIND_HEARTBEAT) ++*(int *)ctx;
    return 0;
}

/* A quiet Watch stream still sends: a heartbeat after 5 s without events. */
static void test_watch_heartbeat(void)
{
    hyc_options o = {.target = g_d.grpc, .deadline_ms = 6500};
    hyc *c;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), 0);
    Hypic__V1__WatchRequest rq = HYPIC__V1__WATCH_REQUEST__INIT;
    int beats = 0;
    CU_ASSERT_EQUAL(hyc_watch(c, &rq, count_heartbeats, &beats, &st), HYC_DEADLINE_EXCEEDED);
    CU_ASSERT_EQUAL(beats, 1);
    hyc_close(c);
}

/* --- bad input ------------------------------------------------------------------ */

static hy_rpc_client *raw_client(void)
{
    hy_rpc_client *rc = NULL;
    hy_err e = {0};
    hy_rpc_client_open(g_d.grpc, 4u << 20, &rc, &e);
    return rc;
}

static void test_garbage_and_oversize(void)
{
    hy_rpc_client *rc = raw_client();
    CU_ASSERT_PTR_NOT_NULL_FATAL(rc);
    hy_rpc_status st;
    hy_err e = {0};
    const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x99};
    CU_ASSERT_EQUAL(hy_rpc_client_call_raw(rc, "/hypic.v1.Cache/Prefill", garbage, sizeof garbage,
                                           NULL, 5000, NULL, NULL, &st, &e),
                    0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_INVALID_ARGUMENT);
    size_t big = 2u << 20; /* over limits.max_message (1M) */
    uint8_t *b = calloc(1, big);
    b[0] = 0x0a; /* field 1 (model), length-delimited, 2 MiB - 5 bytes long */
    b[1] = 0xfb, b[2] = 0xff, b[3] = 0x7f;
    CU_ASSERT_EQUAL(hy_rpc_client_call_raw(rc, "/hypic.v1.Cache/Lookup", b, big, NULL, 5000, NULL,
                                           NULL, &st, &e),
                    0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_RESOURCE_EXHAUSTED);
    free(b);
    CU_ASSERT_EQUAL(
        hy_rpc_client_call_raw(rc, "/hypic.v1.Cache/Nope", "", 0, NULL, 5000, NULL, NULL, &st, &e),
        0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNIMPLEMENTED);
    hy_rpc_client_close(rc);
}

static void test_bad_fields(void)
{
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 0, 300);
    Hypic__V1__PrefillResponse *r = NULL;
    static uint32_t q[1] = {5};
    Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
    rq.model = "nope";
    rq.n_segments = s.n;
    rq.segments = s.sp;
    rq.n_query = 1;
    rq.query = q;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_NOT_FOUND);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "'model'"));
    rq.model = "tiny";
    s.ids[0][17] = 259; /* the vocabulary is 0..258 */
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "ids[17]"));
    s.ids[0][17] = 5;
    q[0] = 1000;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "query"));
    q[0] = 5;
    rq.n_query = 0;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    rq.n_query = 1;
    rq.n_segments = 0;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "segments"));
    segs many = {0};
    for (int i = 0; i < 17; i++) segs_doc(&many, 100 + i, 10);
    rq.n_segments = many.n;
    rq.segments = many.sp;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "limits.max_segments"));
    rq.n_segments = s.n;
    rq.segments = s.sp;
    rq.seam_opt_case = HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM;
    rq.seam = 65;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "'seam'"));
    rq.seam = 8;
    rq.top_k = 21;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "'top_k'"));
    rq.top_k = 3;
    rq.mode = (Hypic__V1__Mode)42;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_INVALID_ARGUMENT);
    rq.mode = HYPIC__V1__MODE__MODE_PIC;
    CU_ASSERT_EQUAL(hyc_prefill(g_c, &rq, &r, &st), HYC_OK);
    hyc_free(r);
    /* a key that is not 32 bytes; a key not cached */
    uint8_t k[33] = {0};
    Hypic__V1__GetEntryRequest g = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    g.model = "tiny";
    g.key = (ProtobufCBinaryData){33, k};
    Hypic__V1__EntryMeta *m = NULL;
    void *b;
    size_t n;
    CU_ASSERT_EQUAL(hyc_get_entry(g_c, &g, &m, &b, &n, &st), HYC_INVALID_ARGUMENT);
    g.key.len = 32;
    CU_ASSERT_EQUAL(hyc_get_entry(g_c, &g, &m, &b, &n, &st), HYC_NOT_FOUND);
    Hypic__V1__InvalidateRequest iv = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    Hypic__V1__InvalidateResponse *ivr = NULL;
    CU_ASSERT_EQUAL(hyc_invalidate(g_c, &iv, &ivr, &st), HYC_INVALID_ARGUMENT);
}

/* A PutEntry stream that sends two chunks of an entry, then fails (the
 * call is cancelled midway) or ends (cleanly, short of meta.bytes). */
typedef struct feed {
    int i;
    bool fail;
    Hypic__V1__EntryChunk ch;
    Hypic__V1__EntryMeta m;
    const uint8_t *b;
} feed;

static int stream_next(void *ctx, const ProtobufCMessage **msg, hy_err *err)
{
    feed *f = ctx;
    if (f->i == 2 && f->fail) return hy_err_set(err, HY_EIO, "the client gives up");
    if (f->i == 2) {
        *msg = NULL; /* the end of the stream */
        return 0;
    }
    f->ch.meta = f->i == 0 ? &f->m : NULL;
    f->ch.data = (ProtobufCBinaryData){1024, (uint8_t *)f->b + 1024 * f->i};
    f->i++;
    *msg = &f->ch.base;
    return 0;
}

static void test_bad_put_entry(void)
{
    hyc_status st;
    void *b = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(g_c, g_key0, &b, &n, &st), 0);
    uint64_t before = 0;
    list_total(g_c, &before, &st);
    /* one byte changed in a section: its checksum fails */
    uint8_t *bad = malloc(n);
    memcpy(bad, b, n);
    bad[n - 100] ^= 0x40;
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL(put_entry(g_c, bad, n, &pr, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "validation"));
    /* a key that is not the hash of the entry's tokens */
    Hypic__V1__EntryMeta m = HYPIC__V1__ENTRY_META__INIT;
    m.model = "tiny";
    m.bytes = n;
    uint8_t wrong[32] = {1};
    m.key = (ProtobufCBinaryData){32, wrong};
    CU_ASSERT_EQUAL(hyc_put_entry(g_c, &m, b, n, 4096, &pr, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "meta.key"));
    /* a stream abandoned midway (the client cancels): nothing stored */
    hy_rpc_client *rc = raw_client();
    feed f = {0};
    Hypic__V1__EntryChunk cinit = HYPIC__V1__ENTRY_CHUNK__INIT;
    f.ch = cinit;
    Hypic__V1__EntryMeta minit = HYPIC__V1__ENTRY_META__INIT;
    f.m = minit;
    f.m.model = "tiny";
    f.m.bytes = n;
    f.b = b;
    f.fail = true;
    hy_rpc_status rs;
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_rpc_client_call_stream(rc, &hy_rpc_methods[4], NULL, 5000, stream_next, &f,
                                              NULL, NULL, &rs, &e),
                    HY_EIO);
    /* a stream that ends short of meta.bytes: refused, nothing stored */
    f.i = 0;
    f.fail = false;
    CU_ASSERT_EQUAL(hy_rpc_client_call_stream(rc, &hy_rpc_methods[4], NULL, 5000, stream_next, &f,
                                              NULL, NULL, &rs, &e),
                    0);
    CU_ASSERT_EQUAL(rs.code, HY_RPC_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(rs.msg, "nothing was stored"));
    hy_rpc_client_close(rc);
    uint64_t after = 0;
    list_total(g_c, &after, &st);
    CU_ASSERT_EQUAL(after, before);
    /* the original is intact */
    void *b2 = NULL;
    size_t n2 = 0;
    CU_ASSERT_EQUAL(get_entry(g_c, g_key0, &b2, &n2, &st), 0);
    CU_ASSERT(n2 == n && memcmp(b2, b, n) == 0);
    free(b2);
    free(bad);
    free(b);
}

static int stop_after_one(void *ctx, const Hypic__V1__WarmProgress *p)
{
    (void)p;
    return ++*(int *)ctx >= 1; /* disconnect */
}

static void test_client_leaves_during_warm(void)
{
    hyc_status st;
    segs s = {0};
    for (int i = 0; i < 8; i++) segs_doc(&s, 200 + i, 400);
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = s.n;
    rq.segments = s.sp;
    int got = 0;
    hyc_warm(g_c, &rq, stop_after_one, &got, &st);
    CU_ASSERT_EQUAL(got, 1);
    CU_ASSERT_EQUAL(health(g_c, &st), 0); /* still serving */
    /* every entry the daemon has is whole */
    warm_out w;
    CU_ASSERT_EQUAL(warm(g_c, &s, &w, &st), 0);
    for (int i = 0; i < 8; i++) {
        Hypic__V1__InspectResponse *ir = NULL;
        CU_ASSERT_EQUAL(inspect(g_c, w.keys[i], true, &ir, &st), 0);
        hyc_free(ir);
    }
}

static void test_metrics_and_drain(void)
{
    /* the HTTP port counts what happened */
    char cmd[600];
    snprintf(cmd, sizeof cmd,
             "curl -sf http://%s/metrics | grep -q 'hypic_requests_total{method=\"Prefill\","
             "code=\"INVALID_ARGUMENT\"}'",
             g_d.http);
    CU_ASSERT_EQUAL(system(cmd), 0);
    /* calls refused before any handler are counted too */
    snprintf(cmd, sizeof cmd,
             "curl -sf http://%s/metrics | grep -q 'hypic_requests_total{method=\"(unknown)\","
             "code=\"UNIMPLEMENTED\"} 1'",
             g_d.http);
    CU_ASSERT_EQUAL(system(cmd), 0);
    CU_ASSERT(hy_daemon_log_has(&g_d, "refused before any handler"));
    snprintf(cmd, sizeof cmd, "curl -sf http://%s/readyz >/dev/null", g_d.http);
    CU_ASSERT_EQUAL(system(cmd), 0);
    CU_ASSERT(hy_daemon_log_has(&g_d, "status=INVALID_ARGUMENT"));
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_service_", g_tmp, sizeof g_tmp)) return 1;
    if (hy_daemon_start(&g_d, g_tmp, k_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_c = connect_as(&g_d, NULL);
    static const hy_test_case cases[] = {
        {"health_warm_lookup", test_health_warm_lookup},
        {"prefill_every_mode", test_prefill_every_mode},
        {"entries_get_put_inspect", test_entries_get_put_inspect},
        {"a version-1 entry is served", test_version1_entry_served},
        {"fetch or recompute, per hit", test_fetch_or_recompute},
        {"list_invalidate_stats_policy", test_list_invalidate_stats_policy},
        {"stats right after a call", test_stats_after_call},
        {"watch", test_watch},
        {"watch_heartbeat", test_watch_heartbeat},
        {"bad_garbage_and_oversize", test_garbage_and_oversize},
        {"bad_fields", test_bad_fields},
        {"bad_put_entry", test_bad_put_entry},
        {"client_leaves_during_warm", test_client_leaves_during_warm},
        {"metrics", test_metrics_and_drain},
        {NULL, NULL},
    };
    int rc = hy_test_main("service", cases);
    hyc_close(g_c);
    if (!hy_daemon_stop(&g_d)) {
        fprintf(stderr, "hypic-cached did not stop cleanly on SIGTERM\n");
        rc = 1;
    }
    hy_test_rmtree(g_tmp);
    return rc;
}
