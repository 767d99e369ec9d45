/*
 * Tenant isolation in hypic-cached: with tokens configured, a tenant never
 * reads, lists, inspects, invalidates or learns the existence of another
 * tenant's entries — across every method that touches entries — and the
 * tenant of a call is its token's, never the body's.
 */
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <pthread.h>

static char g_tmp[128];
static hy_daemon g_d;
static hyc *g_alice, *g_bob;
static uint8_t g_akey[32]; /* alice's document 0 */

#define ALICE "alice-token-0123456789"
#define BOB   "bob-token-0123456789ab"

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: ''\n"
                              "models: [{name: tiny, path: var/models/tiny}]\n"
                              "tiers: {host: {bytes: 64M}}\n"
                              "executor: {threads: 2}\n"
                              "tenants:\n"
                              "  list:\n"
                              "    - {name: alice, token: " ALICE ", admin: true}\n"
                              "    - {name: bob, token: " BOB ", quota: 512K}\n"
                              "log: {requests: false}\n";

static void test_authentication(void)
{
    hyc_status st;
    hyc *none = connect_as(&g_d, NULL), *wrong = connect_as(&g_d, "not-a-token-of-this-server");
    uint64_t total;
    CU_ASSERT_EQUAL(list_total(none, &total, &st), HYC_UNAUTHENTICATED);
    CU_ASSERT_EQUAL(list_total(wrong, &total, &st), HYC_UNAUTHENTICATED);
    char wrong_msg[sizeof st.msg];
    snprintf(wrong_msg, sizeof wrong_msg, "%s", st.msg);
    /* every wrong token gets the same answer: a long one's tells no bound */
    static const size_t lens[] = {200, 254, 255, 256, 281, 1000};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        char tok[1001];
        memset(tok, 'x', lens[i]);
        tok[lens[i]] = '\0';
        hyc *longer = connect_as(&g_d, tok);
        CU_ASSERT_EQUAL(list_total(longer, &total, &st), HYC_UNAUTHENTICATED);
        if (strcmp(st.msg, wrong_msg) != 0)
            printf("\n  a %zu-character token: '%s', a short wrong one: '%s'", lens[i], st.msg,
                   wrong_msg);
        CU_ASSERT_STRING_EQUAL(st.msg, wrong_msg);
        hyc_close(longer);
    }
    /* Health answers anyone: it names no entry */
    CU_ASSERT_EQUAL(health(none, &st), 0);
    hyc_close(none);
    hyc_close(wrong);
    /* a body naming another tenant */
    Hypic__V1__ListRequest rq = HYPIC__V1__LIST_REQUEST__INIT;
    rq.tenant = "alice";
    Hypic__V1__ListResponse *r = NULL;
    CU_ASSERT_EQUAL(hyc_list(g_bob, &rq, &r, &st), HYC_PERMISSION_DENIED);
    rq.tenant = "bob";
    CU_ASSERT_EQUAL(hyc_list(g_bob, &rq, &r, &st), HYC_OK);
    hyc_free(r);
}

static void test_reads_are_isolated(void)
{
    hyc_status st;
    segs s = {0};
    segs_doc(&s, 0, 300);
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(g_alice, &s, &w, &st), 0);
    CU_ASSERT_EQUAL(w.states[0], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
    memcpy(g_akey, w.keys[0], 32);
    /* the same tokens are another key for bob, and a miss */
    Hypic__V1__LookupResponse *lr = NULL;
    CU_ASSERT_EQUAL_FATAL(lookup(g_bob, &s, 0, &lr, &st), 0);
    CU_ASSERT(!lr->segments[0]->hit);
    CU_ASSERT(memcmp(lr->segments[0]->key.data, g_akey, 32) != 0);
    hyc_free(lr);
    /* alice's key named by bob: a miss, exactly like an absent key */
    segs k = {0};
    segs_key(&k, g_akey);
    CU_ASSERT_EQUAL_FATAL(lookup(g_bob, &k, 0, &lr, &st), 0);
    CU_ASSERT(!lr->segments[0]->hit);
    CU_ASSERT_EQUAL(lr->segments[0]->bytes, 0);
    hyc_free(lr);
    CU_ASSERT_EQUAL_FATAL(lookup(g_alice, &k, 0, &lr, &st), 0);
    CU_ASSERT(lr->segments[0]->hit);
    hyc_free(lr);
    void *b = NULL;
    size_t n = 0;
    uint8_t absent[32] = {7};
    char msg_absent[512];
    CU_ASSERT_EQUAL(get_entry(g_bob, absent, &b, &n, &st), HYC_NOT_FOUND);
    snprintf(msg_absent, sizeof msg_absent, "%s", st.msg);
    CU_ASSERT_EQUAL(get_entry(g_bob, g_akey, &b, &n, &st), HYC_NOT_FOUND);
    CU_ASSERT_STRING_EQUAL(st.msg, msg_absent); /* never a hint */
    Hypic__V1__InspectResponse *ir = NULL;
    CU_ASSERT_EQUAL(inspect(g_bob, g_akey, false, &ir, &st), HYC_NOT_FOUND);
    CU_ASSERT_EQUAL(inspect(g_alice, g_akey, false, &ir, &st), HYC_OK);
    hyc_free(ir);
    /* Prefill with alice's key as a segment */
    Hypic__V1__PrefillResponse *pr = NULL;
    CU_ASSERT_EQUAL(prefill(g_bob, &k, HYPIC__V1__MODE__MODE_PIC, &pr, &st), HYC_NOT_FOUND);
    /* bob's own prefill of the same tokens builds his own entry */
    CU_ASSERT_EQUAL_FATAL(prefill(g_bob, &s, HYPIC__V1__MODE__MODE_PIC, &pr, &st), HYC_OK);
    CU_ASSERT_EQUAL(pr->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
    hyc_free(pr);
    uint64_t ta = 0, tb = 0;
    CU_ASSERT_EQUAL(list_total(g_alice, &ta, &st), 0);
    CU_ASSERT_EQUAL(list_total(g_bob, &tb, &st), 0);
    CU_ASSERT_EQUAL(ta, 1);
    CU_ASSERT_EQUAL(tb, 1);
}

static void test_changes_are_isolated(void)
{
    hyc_status st;
    uint64_t removed = 9;
    CU_ASSERT_EQUAL(invalidate_key(g_bob, g_akey, &removed, &st), 0);
    CU_ASSERT_EQUAL(removed, 0);
    Hypic__V1__InvalidateRequest iv = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    Hypic__V1__InvalidateResponse *ir = NULL;
    iv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG;
    iv.tag = "doc-0"; /* both tenants' entries carry it */
    CU_ASSERT_EQUAL(hyc_invalidate(g_bob, &iv, &ir, &st), 0);
    CU_ASSERT(ir && ir->removed == 1); /* bob's own */
    hyc_free(ir);
    iv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL;
    iv.model = "tiny";
    CU_ASSERT_EQUAL(hyc_invalidate(g_bob, &iv, &ir, &st), 0);
    hyc_free(ir);
    iv.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT;
    iv.all_of_tenant = 1;
    CU_ASSERT_EQUAL(hyc_invalidate(g_bob, &iv, &ir, &st), 0);
    hyc_free(ir);
    void *b = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(g_alice, g_akey, &b, &n, &st), 0); /* untouched */
    /* bob puts alice's bytes: stored under bob's key, within bob's quota */
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL(put_entry(g_bob, b, n, &pr, &st), HYC_OK);
    if (pr) CU_ASSERT(memcmp(pr->key.data, g_akey, 32) != 0);
    hyc_free(pr);
    Hypic__V1__EntryMeta m = HYPIC__V1__ENTRY_META__INIT;
    m.model = "tiny";
    m.bytes = n;
    m.tenant = "alice";
    CU_ASSERT_EQUAL(hyc_put_entry(g_bob, &m, b, n, 0, &pr, &st), HYC_PERMISSION_DENIED);
    free(b);
    /* stats: bob sees his own entries only; policies are alice's (admin) to set */
    Hypic__V1__StatsRequest sq = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *sr = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_bob, &sq, &sr, &st), 0);
    CU_ASSERT_EQUAL(sr->entries, 1);
    CU_ASSERT_EQUAL(sr->misses, 0); /* store-wide counters are not a tenant's */
    hyc_free(sr);
    CU_ASSERT_EQUAL_FATAL(hyc_stats(g_alice, &sq, &sr, &st), 0);
    CU_ASSERT_EQUAL(sr->entries, 2);
    hyc_free(sr);
    Hypic__V1__Policy p = HYPIC__V1__POLICY__INIT;
    p.tier = HYPIC__V1__TIER__TIER_HOST;
    p.evict = "lru";
    p.admit = "always";
    Hypic__V1__SetPolicyRequest sp = HYPIC__V1__SET_POLICY_REQUEST__INIT;
    sp.policy = &p;
    Hypic__V1__Policy *out = NULL;
    CU_ASSERT_EQUAL(hyc_set_policy(g_bob, &sp, &out, &st), HYC_PERMISSION_DENIED);
    CU_ASSERT_EQUAL(hyc_set_policy(g_alice, &sp, &out, &st), HYC_OK);
    hyc_free(out);
}

static void test_quota(void)
{
    hyc_status st;
    segs s = {0};
    for (int i = 0; i < 12; i++) segs_doc(&s, 50 + i, 500); /* ~70 KB each: over 512K in all */
    warm_out w;
    CU_ASSERT_EQUAL(warm(g_bob, &s, &w, &st), 0);
    int failed = 0;
    for (int i = 0; i < 12; i++)
        failed += w.states[i] == HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED;
    CU_ASSERT(failed > 0);                          /* bob's quota of 512K */
    CU_ASSERT_EQUAL(warm(g_alice, &s, &w, &st), 0); /* alice has none */
    for (int i = 0; i < 12; i++)
        CU_ASSERT_EQUAL(w.states[i], HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT);
}

typedef struct seen {
    int events, foreign;
} seen;

static int on_ev(void *ctx, const Hypic__V1__WatchEvent *e)
{
    seen *s = ctx;
    s->events++;
    if (strcmp(e->meta->tenant, "bob") != 0) s->foreign++;
    return s->events >= 1;
}

static void *bob_watch(void *arg)
{
    hyc_options o = {.target = g_d.grpc, .token = BOB, .deadline_ms = 3000};
    hyc *c;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) return NULL;
    Hypic__V1__WatchRequest rq = HYPIC__V1__WATCH_REQUEST__INIT;
    hyc_watch(c, &rq, on_ev, arg, &st);
    hyc_close(c);
    return NULL;
}

static void test_watch_is_isolated(void)
{
    seen s = {0};
    pthread_t t;
    pthread_create(&t, NULL, bob_watch, &s);
    usleep(300000);
    hyc_status st;
    segs d = {0};
    segs_doc(&d, 77, 100);
    warm_out w;
    CU_ASSERT_EQUAL(warm(g_alice, &d, &w, &st), 0); /* alice's: bob must not see it */
    pthread_join(t, NULL);                          /* ends at its 3 s deadline */
    CU_ASSERT_EQUAL(s.foreign, 0);
    CU_ASSERT_EQUAL(s.events, 0);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_isolation_", g_tmp, sizeof g_tmp)) return 1;
    if (hy_daemon_start(&g_d, g_tmp, k_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_alice = connect_as(&g_d, ALICE);
    g_bob = connect_as(&g_d, BOB);
    static const hy_test_case cases[] = {
        {"authentication", test_authentication},
        {"reads_are_isolated", test_reads_are_isolated},
        {"changes_are_isolated", test_changes_are_isolated},
        {"quota_per_tenant", test_quota},
        {"watch_is_isolated", test_watch_is_isolated},
        {NULL, NULL},
    };
    int rc = hy_test_main("isolation", cases);
    hyc_close(g_alice);
    hyc_close(g_bob);
    if (!hy_daemon_stop(&g_d)) rc = 1;
    hy_test_rmtree(g_tmp);
    return rc;
}
