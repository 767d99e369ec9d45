/*
 * hypic-cached killed (SIGKILL) while Warm runs, then restarted on the same
 * NVMe tier (write-through): every entry Warm reported stored is served
 * again, byte-identical to what was read before the kill, and every entry
 * the restarted daemon lists passes verification — nothing half-written is
 * visible. Then a clean stop (SIGTERM) of a write-back daemon: its host-only
 * entries are flushed and served after the restart. Last, a client kept
 * open across a restart on the same port is served again soon after the
 * new daemon is ready, without being opened again.
 */
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <pthread.h>

static char g_tmp[128];

static const char *k_config = "listen: 127.0.0.1:0\n"
                              "http_listen: ''\n"
                              "models: [{name: tiny, path: var/models/tiny}]\n"
                              "tiers:\n"
                              "  host: {bytes: 64M}\n"
                              "  nvme: {path: var/nvme, bytes: 256M, extent_bytes: 16M, "
                              "write_through: %s}\n"
                              "executor: {threads: 2}\n"
                              "log: {requests: false}\n";

/* exact fp32 entries (their sizes known), written through */
static const char *k_config_exact =
    "listen: 127.0.0.1:0\n"
    "http_listen: ''\n"
    "models: [{name: tiny, path: var/models/tiny}]\n"
    "tiers:\n"
    "  host: {bytes: 64M}\n"
    "  nvme: {path: var/nvme, bytes: 256M, extent_bytes: 16M, write_through: true}\n"
    "pic: {tolerance: 0, dtype: f32, t_dtype: f32, kv_dtype: f32}\n"
    "executor: {threads: 2}\n"
    "log: {requests: false}\n";

#define NDOCS 40

typedef struct crash_ctx {
    hy_daemon *d;
    hyc *reader;
    pthread_mutex_t mu;
    int built;
    uint8_t keys[NDOCS][32];
    void *bytes[NDOCS]; /* read back right after Warm reported it */
    size_t n[NDOCS];
} crash_ctx;

static int on_progress(void *arg, const Hypic__V1__WarmProgress *p)
{
    crash_ctx *x = arg;
    if (p->state != HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT || p->index >= NDOCS) return 0;
    hyc_status st;
    void *b = NULL;
    size_t n = 0;
    if (get_entry(x->reader, p->key.data, &b, &n, &st) != 0) return 0; /* the kill came first */
    pthread_mutex_lock(&x->mu);
    memcpy(x->keys[x->built], p->key.data, 32);
    x->bytes[x->built] = b;
    x->n[x->built] = n;
    x->built++;
    pthread_mutex_unlock(&x->mu);
    return 0;
}

static void *warmer(void *arg)
{
    crash_ctx *x = arg;
    hyc *c = connect_as(x->d, NULL);
    static segs s;
    memset(&s, 0, sizeof s);
    for (int i = 0; i < 32; i++) segs_doc(&s, 1000 + i, 500);
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = s.n;
    rq.segments = s.sp;
    hyc_status st;
    hyc_warm(c, &rq, on_progress, x, &st); /* ends UNAVAILABLE at the kill */
    hyc_close(c);
    return NULL;
}

static void check_all_listed_verify(hyc *c, uint64_t *total)
{
    hyc_status st;
    Hypic__V1__ListRequest rq = HYPIC__V1__LIST_REQUEST__INIT;
    rq.page_size = 1000;
    Hypic__V1__ListResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_list(c, &rq, &r, &st), 0);
    *total = r->total;
    for (size_t i = 0; i < r->n_entries; i++) {
        Hypic__V1__InspectResponse *ir = NULL;
        CU_ASSERT_EQUAL(inspect(c, r->entries[i]->key.data, true, &ir, &st), 0);
        if (ir) CU_ASSERT(ir->verified);
        hyc_free(ir);
    }
    hyc_free(r);
}

static void test_sigkill_during_warm(void)
{
    char dir[256], cfg[1024];
    snprintf(dir, sizeof dir, "%s/wt", g_tmp);
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, k_config, "true");
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    crash_ctx x = {.d = &d};
    pthread_mutex_init(&x.mu, NULL);
    x.reader = connect_as(&d, NULL);
    pthread_t t;
    pthread_create(&t, NULL, warmer, &x);
    for (int i = 0; i < 600; i++) { /* until a few entries are in, then kill mid-stream */
        pthread_mutex_lock(&x.mu);
        const int b = x.built;
        pthread_mutex_unlock(&x.mu);
        if (b >= 6) break;
        usleep(20000);
    }
    hy_daemon_stop_with(&d, SIGKILL, 5);
    pthread_join(t, NULL);
    hyc_close(x.reader);
    printf("\n  killed after %d entries reported built\n", x.built);
    CU_ASSERT(x.built >= 6);
    CU_ASSERT(x.built < 32); /* the kill came mid-Warm */

    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    hyc_status st;
    for (int i = 0; i < x.built; i++) {
        void *b = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL(get_entry(c, x.keys[i], &b, &n, &st), 0);
        CU_ASSERT(b && n == x.n[i] && memcmp(b, x.bytes[i], n) == 0);
        free(b);
        free(x.bytes[i]);
    }
    uint64_t total = 0;
    check_all_listed_verify(c, &total);
    CU_ASSERT(total >= (uint64_t)x.built);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
}

static void test_clean_stop_flushes_write_back(void)
{
    char dir[256], cfg[1024];
    snprintf(dir, sizeof dir, "%s/wb", g_tmp);
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, k_config, "false");
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    hyc_status st;
    segs s = {0};
    for (int i = 0; i < 5; i++) segs_doc(&s, 2000 + i, 300);
    warm_out w;
    CU_ASSERT_EQUAL(warm(c, &s, &w, &st), 0);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
    CU_ASSERT(hy_daemon_log_has(&d, "flushed 5 write-back entries"));
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    c = connect_as(&d, NULL);
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(lookup(c, &s, 0, &r, &st), 0);
    CU_ASSERT_EQUAL(r->leading_hits, 5);
    CU_ASSERT_EQUAL(r->segments[0]->tier, HYPIC__V1__TIER__TIER_NVME);
    hyc_free(r);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
}

static bool healthy(hyc *c)
{
    Hypic__V1__HealthRequest rq = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *r = NULL;
    hyc_status st;
    const bool ok = hyc_health(c, &rq, &r, &st) == 0 && r;
    hyc_free(r);
    return ok;
}

/* A client's calls fail fast (UNAVAILABLE) while the daemon is away; its
 * connection is dialled again within 2 s of a refusal (rpc/client.c), so
 * the restarted daemon, which takes longer than that to load its model,
 * serves the kept handle's next call. */
static void test_client_kept_across_restart(void)
{
    char dir[256], cfg[1024];
    snprintf(dir, sizeof dir, "%s/kept", g_tmp);
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, k_config, "true");
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT(healthy(c));
    const char *colon = strrchr(d.grpc, ':');
    CU_ASSERT_FATAL(colon != NULL);
    char port_cfg[1024];
    snprintf(port_cfg, sizeof port_cfg, "listen: 127.0.0.1:%s\n%s", colon + 1,
             strchr(cfg, '\n') + 1);
    hy_daemon_stop_with(&d, SIGKILL, 5);
    CU_ASSERT(!healthy(c)); /* refused: the connection backs off */
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, port_cfg), 0);
    long long t0 = hy_test_now_ms(), t = -1;
    while (hy_test_now_ms() - t0 < 10000) {
        if (healthy(c)) {
            t = hy_test_now_ms() - t0;
            break;
        }
        hy_test_sleep_ms(300); /* sparse calls, as a frontend's between requests */
    }
    printf("\n  the kept client was served %lld ms after the restarted daemon was ready ", t);
    CU_ASSERT(t >= 0 && t < 3000);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
}

/* An entry only the NVMe tier holds is read while the Prefill's pass runs,
 * each layer composed as it lands. One whose bytes on disk go bad past its
 * first checksum chunk (1 MiB) fails after the pass has begun: the request
 * ends UNAVAILABLE naming the segment, the entry is removed, and the daemon
 * serves the next request, which recomputes the segment. */
#define BIG_TOKENS 4600 /* exact fp32: 256 bytes a body token on tiny, over 1 MiB */

static void big_segment(Hypic__V1__Segment *sg, Hypic__V1__Tokens *tk, uint32_t *ids)
{
    for (int i = 0; i < BIG_TOKENS; i++) ids[i] = (uint32_t)((i * 31 + 7) % 250);
    Hypic__V1__Tokens ti = HYPIC__V1__TOKENS__INIT;
    *tk = ti;
    tk->n_ids = BIG_TOKENS;
    tk->ids = ids;
    Hypic__V1__Segment gi = HYPIC__V1__SEGMENT__INIT;
    *sg = gi;
    sg->ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    sg->tokens = tk;
}

static int prefill_big(hyc *c, Hypic__V1__Segment *sg, Hypic__V1__PrefillResponse **out,
                       hyc_status *st)
{
    static uint32_t query[4] = {10, 20, 30, 40};
    Hypic__V1__Segment *sp[1] = {sg};
    Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
    rq.model = (char *)g_svc_model;
    rq.n_segments = 1;
    rq.segments = sp;
    rq.n_query = 4;
    rq.query = query;
    rq.mode = HYPIC__V1__MODE__MODE_PIC;
    return hyc_prefill(c, &rq, out, st);
}

static void test_nvme_entry_failing_mid_stream(void)
{
    char dir[256], cfg[1024];
    snprintf(dir, sizeof dir, "%s/landing", g_tmp);
    mkdir(dir, 0755);
    snprintf(cfg, sizeof cfg, "%s%s", k_config_exact, "");
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    static uint32_t ids[BIG_TOKENS];
    Hypic__V1__Segment sg;
    Hypic__V1__Tokens tk;
    big_segment(&sg, &tk, ids);
    hyc_status st;
    Hypic__V1__PrefillResponse *r = NULL;
    CU_ASSERT_EQUAL_FATAL(prefill_big(c, &sg, &r, &st), 0); /* a miss: built, written through */
    CU_ASSERT_EQUAL_FATAL(r->n_segments, 1);
    uint8_t key[32];
    memcpy(key, r->segments[0]->key.data, 32);
    hyc_free(r);
    void *bytes = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(get_entry(c, key, &bytes, &n, &st), 0);
    CU_ASSERT_FATAL(n > (1u << 20) + 4096);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));

    /* restarted: the host tier is empty, the entry on NVMe alone, read
     * while the pass runs */
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    c = connect_as(&d, NULL);
    CU_ASSERT_EQUAL_FATAL(prefill_big(c, &sg, &r, &st), 0);
    CU_ASSERT_EQUAL(r->segments[0]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->segments[0]->tier, HYPIC__V1__TIER__TIER_NVME);
    printf("\n  a %zu-byte entry from NVMe: the pass began after %.2f ms, waited %.2f ms for "
           "layers; TTFT %.1f ms",
           n, r->timings->fetch_nvme_ms, r->timings->landing_wait_ms, r->timings->ttft_ms);
    hyc_free(r);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));

    /* a byte of a section past the first checksum chunk flipped on disk */
    CU_ASSERT_EQUAL_FATAL(nvme_flip_past(dir, bytes, n, (1u << 20) + 4096), 0);

    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    c = connect_as(&d, NULL);
    const int rc = prefill_big(c, &sg, &r, &st);
    printf("\n  the same with a byte flipped past its first chunk: status %d: %s", rc, st.msg);
    CU_ASSERT_EQUAL(rc, HYC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "segments[0]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "checksum"));
    hyc_free(r);
    r = NULL;
    /* removed: the next request recomputes the segment */
    CU_ASSERT_EQUAL(prefill_big(c, &sg, &r, &st), 0);
    CU_ASSERT(r && r->segments[0]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
    hyc_free(r);
    hyc_close(c);
    free(bytes);
    CU_ASSERT(hy_daemon_stop(&d));
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_service_crash_", g_tmp, sizeof g_tmp)) return 1;
    static const hy_test_case cases[] = {
        {"sigkill_during_warm", test_sigkill_during_warm},
        {"clean_stop_flushes_write_back", test_clean_stop_flushes_write_back},
        {"a client kept across a restart is served again", test_client_kept_across_restart},
        {"an NVMe entry failing mid-stream ends its request cleanly",
         test_nvme_entry_failing_mid_stream},
        {NULL, NULL},
    };
    int rc = hy_test_main("service_crash", cases);
    hy_test_rmtree(g_tmp);
    return rc;
}
