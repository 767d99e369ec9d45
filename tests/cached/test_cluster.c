/*
 * Cluster mode against real processes: etcd (Debian's
 * etcd-server, tests/etcd_fixture.h) and hypic-cached members on loopback
 * ports they pick, registered in etcd under leases of 2 s.
 *
 *   - three members: documents warmed through one land on their owners by
 *     rendezvous hashing (the client computes the same owners), and any
 *     member answers for any key;
 *   - a fourth member joins: exactly the keys it now owns move to it (about
 *     a quarter), handed over by the members that held them (nothing is
 *     built again), and no other key moves;
 *   - Prefill load through the cluster client while one of the four is
 *     SIGKILLed: no request fails; the dead member leaves every view once
 *     its lease expires; its entries are misses, rebuilt onto their new
 *     owners, and then hits again;
 *   - a static member list (no etcd) routes the same way;
 *   - a Prefill's hits held by the other member are streamed from it
 *     (GetEntry, sent as they pass its NVMe checksums) while the pass
 *     runs: the same logits as where they are local; one that fails on
 *     the owner mid-stream ends the request UNAVAILABLE naming the
 *     segment and the member, and the retry computes it;
 *   - an owner that lies (a fake member: another key's entry, a size other
 *     than its Lookup's, chunks out of order) costs a miss, never a wrong
 *     answer; one whose stream stops short ends its request UNAVAILABLE
 *     naming it, and the daemon goes on serving.
 *
 * Every process started is stopped, also when a check fails (the fixtures'
 * PDEATHSIG and exit hooks).
 */
#include "etcd_fixture.h"
#include "hy_rpc.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#define NDOCS   32
#define DOC_LEN 48
#define TTL_S   2

static char g_tmp[128];
static hy_test_etcd g_etcd;
static hy_daemon g_node[4];
static hyc_cluster *g_cl;
static uint8_t g_keys[NDOCS][32];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A member called name, listening on port (0: any), with `cluster` (its
YAML mapping) and `more` (further YAML: the tiers, pic), started into *d. */
static int member_start_ex(hy_daemon *d, const char *name, int port, const char *cluster,
                           const char *more)
{
    char dir[200], cfg[2000];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, name);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg,
             "listen: 127.0.0.1:%d\n"
             "http_listen: \"\"\n"
             "models: [{name: tiny, path: %s/models/tiny}]\n"
             "executor: {threads: 1}\n"
             "limits: {workers: 8, watchers: 2}\n" /* 3 members at once: not 3 x 32 RPC threads */
             "log: {requests: false}\n"
             "cluster: %s\n"
             "%s",
             port, g_tmp, cluster, more);
    return hy_daemon_start(d, dir, cfg);
}

static int member_start(hy_daemon *d, const char *name, int port, const char *cluster)
{
    return member_start_ex(d, name, port, cluster, "tiers: {host: {bytes: 64M}}\n");
}

/* Member n<i+1>, registered in etcd. */
static int start_member(int i)
{
    char name[16], cluster[300];
    snprintf(name, sizeof name, "n%d", i + 1);
    snprintf(cluster, sizeof cluster,
             "{id: %s, peer_timeout_ms: 2000, etcd: {endpoints: \"%s\", ttl_s: %d}}", name,
             g_etcd.endpoint, TTL_S);
    return member_start(&g_node[i], name, 0, cluster);
}

/* The index of member id "n<k>". */
static int node_of(const char *id)
{
    return id[1] - '1';
}

/* All documents, as one request's segments. */
static void all_docs(segs *s)
{
    memset(s, 0, sizeof *s);
    for (int d = 0; d < NDOCS; d++) segs_doc(s, d, DOC_LEN);
}

/* Waits until the cluster client sees n members; the seconds it took, or -1. */
static double wait_members(hyc_cluster *c, size_t n, double timeout_s)
{
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        if (hyc_cluster_members(c, NULL, NULL, 0) == n) return now_s() - t0;
        usleep(10000);
    }
    return -1;
}

/* Member i's cluster section (its Stats): the members in its view, the
 * entries in its put queue, the entries it fetched from owners through a
 * transport session. False when it does not answer. */
static bool member_stats_ex(int i, int *members, uint64_t *queued, uint64_t *via)
{
    hyc *c = connect_as(&g_node[i], NULL);
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    hyc_status st;
    const bool ok = c && !hyc_stats(c, &q, &r, &st) && r->cluster;
    if (ok) {
        *members = (int)r->cluster->n_members;
        *queued = r->cluster->puts_queued;
        *via = r->cluster->remote_via_transport;
    }
    hyc_free(r);
    hyc_close(c);
    return ok;
}

static bool member_stats(int i, int *members, uint64_t *queued)
{
    uint64_t via;
    return member_stats_ex(i, members, queued, &via);
}

/* The members member i sees, or -1. */
static int daemon_view(int i)
{
    int n;
    uint64_t q;
    return member_stats(i, &n, &q) ? n : -1;
}

/* Warm every document through member i: how many were built and how many
 * were cached already; the keys into g_keys. */
static int warm_all(int i, int *built, int *cached)
{
    segs s;
    all_docs(&s);
    hyc *c = connect_as(&g_node[i], NULL);
    warm_out w;
    hyc_status st;
    int rc = warm(c, &s, &w, &st);
    if (rc) printf("\n  Warm: %s\n", st.msg);
    hyc_close(c);
    *built = *cached = 0;
    for (int d = 0; d < NDOCS && !rc; d++) {
        *built += w.states[d] == HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
        *cached += w.states[d] == HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED;
        memcpy(g_keys[d], w.keys[d], 32);
    }
    return rc;
}

/* Whether key is in member i's own store (Lookup, local_only). */
static bool held_by(int i, const uint8_t *key)
{
    hyc *c = connect_as(&g_node[i], NULL);
    segs s = {0};
    segs_key(&s, key);
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = 1;
    rq.segments = s.sp;
    rq.local_only = true;
    Hypic__V1__LookupResponse *r = NULL;
    hyc_status st;
    bool hit = !hyc_lookup(c, &rq, &r, &st) && r->segments[0]->hit;
    hyc_free(r);
    hyc_close(c);
    return hit;
}

/* The put queues drained on the live members (entries reached their owners). */
static void wait_puts(void)
{
    for (int t = 0; t < 500; t++) {
        bool idle = true;
        for (int i = 0; i < 4; i++) {
            int n;
            uint64_t queued;
            if (g_node[i].pid > 0 && member_stats(i, &n, &queued) && queued) idle = false;
        }
        if (idle) return;
        usleep(20000);
    }
}

static void test_three_members_place_by_owner(void)
{
    hyc_cluster_options o = {.etcd = g_etcd.endpoint, .client = {.deadline_ms = 20000}};
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_open(&o, &g_cl, &st), 0);
    CU_ASSERT_FATAL(wait_members(g_cl, 3, 10) >= 0);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(daemon_view(i), 3);
    int built, cached;
    CU_ASSERT_EQUAL_FATAL(warm_all(0, &built, &cached), 0);
    CU_ASSERT_EQUAL(built, NDOCS);
    wait_puts();
    int per[3] = {0};
    for (int d = 0; d < NDOCS; d++) {
        char own[1][64];
        CU_ASSERT_EQUAL_FATAL(hyc_cluster_owners(g_cl, g_keys[d], own, 1), 1);
        const int o_i = node_of(own[0]);
        CU_ASSERT_FATAL(o_i >= 0 && o_i < 3);
        per[o_i]++;
        for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(held_by(i, g_keys[d]), i == o_i);
        /* straight to the owner, and through any member */
        Hypic__V1__GetEntryRequest gq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
        gq.model = "tiny";
        gq.key = (ProtobufCBinaryData){32, g_keys[d]};
        Hypic__V1__EntryMeta *m = NULL;
        void *b = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL(hyc_cluster_get_entry(g_cl, &gq, &m, &b, &n, &st), 0);
        hyc_free(m);
        free(b);
        hyc *c = connect_as(&g_node[(o_i + 1) % 3], NULL);
        CU_ASSERT_EQUAL(get_entry(c, g_keys[d], &b, &n, &st), 0);
        free(b);
        hyc_close(c);
    }
    /* the members that fetched from owners did it through transport sessions (shm here) */
    uint64_t via = 0;
    for (int i = 0; i < 3; i++) {
        int n;
        uint64_t q, v = 0;
        member_stats_ex(i, &n, &q, &v);
        via += v;
    }
    printf("\n  32 keys over 3 members: %d %d %d; %llu fetched through transport sessions\n",
           per[0], per[1], per[2], (unsigned long long)via);
    CU_ASSERT(via >= NDOCS); /* each key once through a member that is not its owner */
    for (int i = 0; i < 3; i++) CU_ASSERT(per[i] > 0);
    /* a second warm through another member: all cached, wherever they live */
    CU_ASSERT_EQUAL(warm_all(1, &built, &cached), 0);
    CU_ASSERT_EQUAL(cached, NDOCS);
}

typedef struct load {
    _Atomic bool stop;
    _Atomic int sent, failed, hits, segs;
    int seed;
} load;

static void *load_main(void *arg)
{
    load *l = arg;
    unsigned x = (unsigned)l->seed;
    while (!atomic_load(&l->stop)) {
        segs s = {0};
        for (int k = 0; k < 3; k++) {
            x = x * 1103515245u + 12345u;
            segs_doc(&s, (int)((x >> 8) % NDOCS), DOC_LEN);
        }
        static uint32_t query[4] = {11, 22, 33, 44};
        Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
        rq.model = "tiny";
        rq.n_segments = s.n;
        rq.segments = s.sp;
        rq.n_query = 4;
        rq.query = query;
        Hypic__V1__PrefillResponse *r = NULL;
        hyc_status st;
        atomic_fetch_add(&l->sent, 1);
        if (hyc_cluster_prefill(g_cl, &rq, &r, &st)) {
            atomic_fetch_add(&l->failed, 1);
            printf("\n  Prefill failed: %s %s\n", hyc_code_name(st.code), st.msg);
        } else {
            for (size_t i = 0; i < r->n_segments; i++)
                atomic_fetch_add(&l->hits, r->segments[i]->kind ==
                                               HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
            atomic_fetch_add(&l->segs, (int)r->n_segments);
        }
        hyc_free(r);
    }
    return NULL;
}

static void test_kill_a_member_under_load(void)
{
    CU_ASSERT_FATAL(g_cl != NULL);
    char own[1][64];
    int lost = 0; /* n2's keys */
    for (int d = 0; d < NDOCS; d++) {
        hyc_cluster_owners(g_cl, g_keys[d], own, 1);
        lost += !strcmp(own[0], "n2");
    }
    load l[2] = {{.seed = 1}, {.seed = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, load_main, &l[i]);
    usleep(800000);
    const double t_kill = now_s();
    hy_daemon_stop_with(&g_node[1], SIGKILL, 5); /* n2: no goodbye, its lease runs out */
    const double client_s = wait_members(g_cl, 3, TTL_S + 5);
    double daemons_s = -1;
    while (now_s() - t_kill < TTL_S + 5 && daemons_s < 0)
        if (daemon_view(0) == 3 && daemon_view(2) == 3 && daemon_view(3) == 3)
            daemons_s = now_s() - t_kill;
        else
            usleep(20000);
    usleep(1500000); /* load on the three that are left */
    for (int i = 0; i < 2; i++) {
        atomic_store(&l[i].stop, true);
        pthread_join(th[i], NULL);
    }
    const int sent = l[0].sent + l[1].sent, failed = l[0].failed + l[1].failed;
    printf("\n  %d Prefills, %d failed; n2 gone from the client's view after %.2f s, from the "
           "members' after %.2f s (lease %d s); n2 owned %d of %d keys\n",
           sent, failed, client_s, daemons_s, TTL_S, lost, NDOCS);
    CU_ASSERT(sent > 10);
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT(client_s >= 0 && client_s < TTL_S + 3);
    CU_ASSERT(daemons_s >= 0 && daemons_s < TTL_S + 3);
    /* n2's entries are misses now, built again onto their new owners; the rest still hits */
    wait_puts();
    int built, cached;
    CU_ASSERT_EQUAL_FATAL(warm_all(0, &built, &cached), 0);
    /* (the load above may have rebuilt some of them already) */
    CU_ASSERT(built <= lost);
    CU_ASSERT_EQUAL(built + cached, NDOCS);
    wait_puts();
    CU_ASSERT_EQUAL(warm_all(2, &built, &cached), 0);
    CU_ASSERT_EQUAL(cached, NDOCS); /* the hit rate has recovered */
    for (int d = 0; d < NDOCS; d++) {
        hyc_cluster_owners(g_cl, g_keys[d], own, 1);
        CU_ASSERT(strcmp(own[0], "n2") != 0);
        CU_ASSERT(held_by(node_of(own[0]), g_keys[d]));
    }
}

static void test_a_fourth_member_joins(void)
{
    CU_ASSERT_FATAL(g_cl != NULL);
    char before[NDOCS][1][64];
    for (int d = 0; d < NDOCS; d++) hyc_cluster_owners(g_cl, g_keys[d], before[d], 1);
    CU_ASSERT_EQUAL_FATAL(start_member(3), 0);
    CU_ASSERT_FATAL(wait_members(g_cl, 4, 5) >= 0);
    for (int t = 0; t < 200 && (daemon_view(0) != 4 || daemon_view(1) != 4 || daemon_view(2) != 4);
         t++)
        usleep(20000);
    int moved = 0, moved_elsewhere = 0;
    for (int d = 0; d < NDOCS; d++) {
        char own[1][64];
        hyc_cluster_owners(g_cl, g_keys[d], own, 1);
        if (strcmp(own[0], before[d][0])) {
            moved++;
            moved_elsewhere += strcmp(own[0], "n4") != 0;
        }
    }
    /* the members that hold the keys n4 now owns hand them over: each lands on n4, and
     * no key n4 does not own does */
    bool all = false;
    for (int t = 0; t < 500 && !all; t++) {
        all = true;
        for (int d = 0; d < NDOCS && all; d++)
            if (strcmp(before[d][0], "n4")) { /* (never: n4 is new) */
                char own[1][64];
                hyc_cluster_owners(g_cl, g_keys[d], own, 1);
                if (!strcmp(own[0], "n4")) all = held_by(3, g_keys[d]);
            }
        if (!all) usleep(20000);
    }
    int on_n4 = 0;
    for (int d = 0; d < NDOCS; d++) on_n4 += held_by(3, g_keys[d]);
    /* through n4 now: every key is there or on its owner, nothing is built again */
    int built, cached;
    CU_ASSERT_EQUAL_FATAL(warm_all(3, &built, &cached), 0);
    printf("\n  n4 joined: %d of %d keys moved to it (ideal 1/4: %.1f), %d elsewhere; %d handed "
           "over to it; the warm pass through it rebuilt %d\n",
           moved, NDOCS, NDOCS / 4.0, moved_elsewhere, on_n4, built);
    CU_ASSERT(all);
    CU_ASSERT_EQUAL(moved_elsewhere, 0); /* no other key moves */
    CU_ASSERT_EQUAL(on_n4, moved);       /* exactly the moved keys came to n4 */
    CU_ASSERT_EQUAL(built, 0);           /* handed over, not rebuilt */
    CU_ASSERT_EQUAL(cached, NDOCS);
    CU_ASSERT(moved >= NDOCS / 8 && moved <= NDOCS / 2);
}

/* Until a Lookup by key of keys[0..n) through the cluster client finds
 * every one, each answered by its owner (the puts to owners other than the
 * member that built them are in the background); false after 4 s. */
static bool on_owners(hyc_cluster *cl, uint8_t (*keys)[32], int n)
{
    segs k = {0};
    for (int i = 0; i < n; i++) segs_key(&k, keys[i]);
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = k.n;
    rq.segments = k.sp;
    for (int t = 0; t < 200; t++) {
        Hypic__V1__LookupResponse *r = NULL;
        hyc_status st;
        bool all = !hyc_cluster_lookup(cl, &rq, &r, &st) && r->leading_hits == (uint32_t)n;
        for (size_t i = 0; all && i < r->n_segments; i++) {
            char own[1][64];
            hyc_cluster_owners(cl, keys[i], own, 1);
            all = !strcmp(r->segments[i]->member, own[0]);
        }
        hyc_free(r);
        if (all) return true;
        usleep(20000);
    }
    return false;
}

static void test_static_members(void)
{
    /* s1, s2 on fixed free ports: a static list names addresses up front */
    int p1 = hy_test_etcd_free_port(), p2 = hy_test_etcd_free_port();
    while (p2 == p1) p2 = hy_test_etcd_free_port();
    char members[300];
    snprintf(members, sizeof members,
             "{id: s1, address: \"127.0.0.1:%d\"}, {id: s2, address: \"127.0.0.1:%d\"}", p1, p2);
    hy_daemon s[2];
    for (int i = 0; i < 2; i++) {
        char name[8], cluster[400];
        snprintf(name, sizeof name, "s%d", i + 1);
        snprintf(cluster, sizeof cluster, "{id: %s, members: [%s]}", name, members);
        CU_ASSERT_EQUAL_FATAL(member_start(&s[i], name, i ? p2 : p1, cluster), 0);
    }
    char list[200];
    snprintf(list, sizeof list, "s1=127.0.0.1:%d,s2=127.0.0.1:%d", p1, p2);
    hyc_cluster_options o = {.members = list, .client = {.deadline_ms = 20000}};
    hyc_cluster *cl = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_open(&o, &cl, &st), 0);
    CU_ASSERT_EQUAL(hyc_cluster_members(cl, NULL, NULL, 0), 2);
    segs d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 8; i++) segs_doc(&d, 100 + i, DOC_LEN);
    hyc *c1 = connect_as(&s[0], NULL);
    warm_out w;
    CU_ASSERT_EQUAL_FATAL(warm(c1, &d, &w, &st), 0);
    hyc_close(c1);
    /* Lookup by key through the cluster client: every one a hit, answered by its owner */
    CU_ASSERT(on_owners(cl, w.keys, 8));
    /* a put through the cluster client lands on the owner */
    void *b = NULL;
    size_t n = 0;
    Hypic__V1__GetEntryRequest gq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    gq.model = "tiny";
    gq.key = (ProtobufCBinaryData){32, w.keys[0]};
    Hypic__V1__EntryMeta *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_get_entry(cl, &gq, &m, &b, &n, &st), 0);
    hyc_free(m);
    char own[1][64];
    hyc_cluster_owners(cl, w.keys[0], own, 1);
    hyc *oc = hyc_cluster_member(cl, own[0]);
    uint64_t removed;
    CU_ASSERT_EQUAL(invalidate_key(oc, w.keys[0], &removed, &st), 0);
    CU_ASSERT_EQUAL(removed, 1);
    Hypic__V1__EntryMeta pm = HYPIC__V1__ENTRY_META__INIT;
    pm.model = "tiny";
    pm.key = (ProtobufCBinaryData){32, w.keys[0]};
    Hypic__V1__PutEntryResponse *pr = NULL;
    CU_ASSERT_EQUAL(hyc_cluster_put_entry(cl, &pm, b, n, &pr, &st), 0);
    if (pr) CU_ASSERT_STRING_EQUAL(pr->member, own[0]);
    hyc_free(pr);
    free(b);
    /* Pin and Unpin through one member reach the entries the other holds */
    c1 = connect_as(&s[0], NULL);
    for (int k = 0; k < 8; k++) {
        Hypic__V1__PinRequest pq = HYPIC__V1__PIN_REQUEST__INIT;
        pq.target_case = HYPIC__V1__PIN_REQUEST__TARGET_KEY;
        pq.key = (ProtobufCBinaryData){32, w.keys[k]};
        Hypic__V1__PinResponse *pin = NULL;
        CU_ASSERT_EQUAL(hyc_pin(c1, &pq, &pin, &st), 0);
        if (pin) CU_ASSERT(pin->pinned >= 1 && pin->n_unreachable == 0);
        hyc_free(pin);
        hyc_cluster_owners(cl, w.keys[k], own, 1);
        Hypic__V1__InspectResponse *ir = NULL;
        CU_ASSERT_EQUAL(inspect(hyc_cluster_member(cl, own[0]), w.keys[k], false, &ir, &st), 0);
        if (ir) CU_ASSERT_EQUAL(ir->meta->pinned_until_unix_ns, UINT64_MAX);
        hyc_free(ir);
    }
    Hypic__V1__UnpinRequest uq = HYPIC__V1__UNPIN_REQUEST__INIT;
    uq.target_case = HYPIC__V1__UNPIN_REQUEST__TARGET_ALL_OF_TENANT;
    uq.all_of_tenant = true;
    Hypic__V1__UnpinResponse *ur = NULL;
    CU_ASSERT_EQUAL(hyc_unpin(c1, &uq, &ur, &st), 0);
    if (ur) CU_ASSERT(ur->unpinned >= 8 && ur->n_unreachable == 0);
    hyc_free(ur);
    hyc_close(c1);
    hyc_cluster_owners(cl, w.keys[1], own, 1);
    Hypic__V1__InspectResponse *ir = NULL;
    CU_ASSERT_EQUAL(inspect(hyc_cluster_member(cl, own[0]), w.keys[1], false, &ir, &st), 0);
    if (ir) CU_ASSERT_EQUAL(ir->meta->pinned_until_unix_ns, 0);
    hyc_free(ir);
    hyc_cluster_close(cl);
    for (int i = 0; i < 2; i++) CU_ASSERT(hy_daemon_stop(&s[i]));
}

/* Two static members whose entries are exact fp32 (a long segment's over
 * 1 MiB), written through to NVMe. */
static const char *k_streamed =
    "tiers:\n"
    "  host: {bytes: 64M}\n"
    "  nvme: {path: var/nvme, bytes: 256M, extent_bytes: 16M, write_through: true}\n"
    "pic: {tolerance: 0, dtype: f32, t_dtype: f32, kv_dtype: f32}\n";
#define LONG_TOKENS 4600

static int pair_start(hy_daemon u[2], const int port[2])
{
    char members[300];
    snprintf(members, sizeof members,
             "{id: u1, address: \"127.0.0.1:%d\"}, {id: u2, address: \"127.0.0.1:%d\"}", port[0],
             port[1]);
    for (int i = 0; i < 2; i++) {
        char name[16], cluster[400];
        snprintf(name, sizeof name, "u%d", i + 1);
        snprintf(cluster, sizeof cluster, "{id: %s, peer_timeout_ms: 5000, members: [%s]}", name,
                 members);
        if (member_start_ex(&u[i], name, port[i], cluster, k_streamed)) return -1;
    }
    return 0;
}

static void test_remote_hits_streamed(void)
{
    int port[2] = {hy_test_etcd_free_port(), hy_test_etcd_free_port()};
    while (port[1] == port[0]) port[1] = hy_test_etcd_free_port();
    hy_daemon u[2];
    CU_ASSERT_EQUAL_FATAL(pair_start(u, port), 0);
    char list[200];
    snprintf(list, sizeof list, "u1=127.0.0.1:%d,u2=127.0.0.1:%d", port[0], port[1]);
    hyc_cluster_options o = {.members = list, .client = {.deadline_ms = 60000}};
    hyc_cluster *cl = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_open(&o, &cl, &st), 0);
    /* four short documents and a long one owned by u2 (the first of a few
     * candidates that is) */
    static uint32_t ids[LONG_TOKENS];
    segs d;
    warm_out w;
    int owned = -1;
    hyc *c1 = connect_as(&u[0], NULL);
    for (int cand = 0; cand < 16 && owned < 0; cand++) {
        memset(&d, 0, sizeof d);
        for (int i = 0; i < 4; i++) segs_doc(&d, 300 + i, DOC_LEN);
        segs_doc(&d, 400 + cand, 8);
        for (int t = 0; t < LONG_TOKENS; t++) ids[t] = (uint32_t)(3 + (t * 31 + 7 * cand) % 250);
        d.tk[4].ids = ids, d.tk[4].n_ids = LONG_TOKENS;
        CU_ASSERT_EQUAL_FATAL(warm(c1, &d, &w, &st), 0);
        char own[1][64];
        hyc_cluster_owners(cl, w.keys[4], own, 1);
        if (!strcmp(own[0], "u2")) owned = cand;
    }
    CU_ASSERT_FATAL(owned >= 0);
    /* every entry on its owner (the puts to u2 are in the background) */
    CU_ASSERT_FATAL(on_owners(cl, w.keys, 5));
    hyc *c2 = connect_as(&u[1], NULL);
    void *big = NULL;
    size_t nbig = 0;
    Hypic__V1__GetEntryRequest gq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    gq.model = "tiny";
    gq.key = (ProtobufCBinaryData){32, w.keys[4]};
    gq.local_only = true;
    Hypic__V1__EntryMeta *gm = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_get_entry(c2, &gq, &gm, &big, &nbig, &st), 0);
    hyc_free(gm);
    CU_ASSERT_FATAL(nbig > (1u << 20) + 4096);
    hyc_close(c1), hyc_close(c2);
    /* restarted: every entry on its owner's NVMe tier alone */
    for (int i = 0; i < 2; i++) CU_ASSERT_FATAL(hy_daemon_stop(&u[i]));
    CU_ASSERT_EQUAL_FATAL(pair_start(u, port), 0);
    Hypic__V1__PrefillResponse *r[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        hyc *c = connect_as(&u[i], NULL);
        CU_ASSERT_EQUAL_FATAL(prefill_reuse(c, &d, HYPIC__V1__MODE__MODE_PIC,
                                            HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &r[i],
                                            &st),
                              0);
        hyc_close(c);
        int remote = 0;
        for (size_t s = 0; s < r[i]->n_segments; s++) {
            const Hypic__V1__SegmentOutcome *oc = r[i]->segments[s];
            CU_ASSERT_EQUAL(oc->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
            char own[1][64];
            hyc_cluster_owners(cl, w.keys[s], own, 1);
            CU_ASSERT_STRING_EQUAL(oc->member, own[0]);
            remote += strcmp(own[0], i ? "u2" : "u1") != 0;
        }
        printf("\n  through u%d: %d of 5 hits from the other member (the long one %s): "
               "fetch %.2f ms remote, %.2f ms NVMe; the pass waited %.2f ms for layers",
               i + 1, remote, i ? "local" : "remote", r[i]->timings->fetch_remote_ms,
               r[i]->timings->fetch_nvme_ms, r[i]->timings->landing_wait_ms);
        if (i == 0) CU_ASSERT(remote >= 1 && r[i]->timings->fetch_remote_ms > 0);
    }
    /* the same entries composed: the same logits, wherever they came from */
    CU_ASSERT_EQUAL_FATAL(r[0]->n_top, r[1]->n_top);
    for (size_t t = 0; t < r[0]->n_top; t++) {
        CU_ASSERT_EQUAL(r[0]->top[t]->token, r[1]->top[t]->token);
        CU_ASSERT_EQUAL(r[0]->top[t]->logit, r[1]->top[t]->logit);
    }
    hyc_free(r[0]), hyc_free(r[1]);

    /* u2's copy of the long entry goes bad past its first checksum chunk */
    for (int i = 0; i < 2; i++) CU_ASSERT_FATAL(hy_daemon_stop(&u[i]));
    char dir[256];
    snprintf(dir, sizeof dir, "%s/u2", g_tmp);
    CU_ASSERT_EQUAL_FATAL(nvme_flip_past(dir, big, nbig, (1u << 20) + 4096), 0);
    free(big);
    CU_ASSERT_EQUAL_FATAL(pair_start(u, port), 0);
    hyc *c = connect_as(&u[0], NULL);
    Hypic__V1__PrefillResponse *bad = NULL;
    const int rc = prefill_reuse(c, &d, HYPIC__V1__MODE__MODE_PIC,
                                 HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &bad, &st);
    printf("\n  the long entry failing on u2 mid-stream: status %d: %s", rc, st.msg);
    CU_ASSERT_EQUAL(rc, HYC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "segments[4]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "member u2"));
    hyc_free(bad);
    bad = NULL;
    /* u2 dropped it: the retry computes the segment, every other one a hit */
    CU_ASSERT_EQUAL(prefill_reuse(c, &d, HYPIC__V1__MODE__MODE_PIC,
                                  HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &bad, &st),
                    0);
    if (bad) {
        for (size_t s = 0; s < bad->n_segments; s++)
            CU_ASSERT_EQUAL(bad->segments[s]->kind,
                            s == 4 ? HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS
                                   : HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    }
    hyc_free(bad);
    CU_ASSERT_EQUAL(health(c, &st), 0);
    hyc_close(c);
    hyc_cluster_close(cl);
    for (int i = 0; i < 2; i++) CU_ASSERT(hy_daemon_stop(&u[i]));
}

/* --- an owner that lies ------------------------------------------------------------- */

enum { LIE_NONE, LIE_OTHER_KEY, LIE_SIZE, LIE_ORDER, LIE_SHORT };
static struct {
    _Atomic int how;
    const uint8_t *right, *other; /* the entry of the key asked for; another's */
    size_t n_right, n_other;
} g_lie;

static void lie_lookup(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__LookupRequest *q = (const void *)req;
    Hypic__V1__SegmentStatus st[8], *sp[8];
    Hypic__V1__LookupResponse r = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    for (size_t i = 0; i < q->n_segments && i < 8; i++) {
        Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
        st[i] = init;
        st[i].key = q->segments[i]->key;
        st[i].hit = true; /* whatever is asked */
        st[i].tier = HYPIC__V1__TIER__TIER_HOST;
        st[i].bytes = g_lie.n_right;
        st[i].member = "f";
        sp[i] = &st[i];
        r.n_segments++;
    }
    r.segments = sp;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

static void lie_get(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    const int how = g_lie.how;
    const uint8_t *b = how == LIE_OTHER_KEY ? g_lie.other : g_lie.right;
    const size_t n = how == LIE_OTHER_KEY ? g_lie.n_other : g_lie.n_right;
    const size_t end = how == LIE_SHORT ? n / 2 : n, piece = 4096;
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.model = "tiny";
    meta.bytes = how == LIE_SIZE ? n + 4096 : n;
    for (size_t off = 0; off < end; off += piece) {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if (off == 0) ch.meta = &meta;
        if (how == LIE_ORDER) { /* the second piece first */
            ch.placement_case = HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET;
            ch.offset = off ^ piece;
        }
        const size_t from = how == LIE_ORDER ? (size_t)(off ^ piece) : off;
        ch.data = (ProtobufCBinaryData){HY_MIN(piece, n - HY_MIN(from, n)), (uint8_t *)b + from};
        if (hy_rpc_call_send(c, &ch.base, NULL)) break;
    }
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

static void test_a_lying_owner(void)
{
    hy_rpc_handler h[64] = {0};
    for (size_t i = 0; i < hy_rpc_method_count && i < 64; i++) {
        if (!strcmp(hy_rpc_methods[i].name, "Lookup")) h[i] = lie_lookup;
        if (!strcmp(hy_rpc_methods[i].name, "GetEntry")) h[i] = lie_get;
    }
    hy_rpc_server_config sc = {.address = "127.0.0.1:0", .workers = 4, .max_message = 8 << 20};
    hy_rpc_server *fake = NULL;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_server_start(&sc, h, NULL, &fake, &e), 0);
    /* a member on its own builds the entries the fake will serve */
    char dir[200], cfg[1200];
    snprintf(dir, sizeof dir, "%s/solo", g_tmp);
    mkdir(dir, 0700);
    snprintf(cfg, sizeof cfg,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\nmodels: [{name: tiny, path: "
             "%s/models/tiny}]\ntiers: {host: {bytes: 64M}}\nexecutor: {threads: 1}\n"
             "log: {requests: false}\n",
             g_tmp);
    hy_daemon solo, v;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&solo, dir, cfg), 0);
    int pv = hy_test_etcd_free_port();
    char members[300], cluster[400];
    snprintf(members, sizeof members,
             "{id: v1, address: \"127.0.0.1:%d\"}, {id: f, address: \"127.0.0.1:%d\"}", pv,
             hy_rpc_server_port(fake));
    snprintf(cluster, sizeof cluster, "{id: v1, peer_timeout_ms: 3000, members: [%s]}", members);
    CU_ASSERT_EQUAL_FATAL(member_start(&v, "v1", pv, cluster), 0);
    char list[200];
    snprintf(list, sizeof list, "v1=127.0.0.1:%d,f=127.0.0.1:%d", pv, hy_rpc_server_port(fake));
    hyc_cluster_options o = {.members = list};
    hyc_cluster *cl = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_open(&o, &cl, &st), 0);
    /* two documents the fake owns, their entries built by the solo member */
    hyc *cs = connect_as(&solo, NULL);
    segs d[2];
    void *bytes[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    int found = 0;
    for (int cand = 0; cand < 64 && found < 2; cand++) {
        memset(&d[found], 0, sizeof d[found]);
        segs_doc(&d[found], 600 + cand, DOC_LEN);
        warm_out w;
        CU_ASSERT_EQUAL_FATAL(warm(cs, &d[found], &w, &st), 0);
        char own[1][64];
        hyc_cluster_owners(cl, w.keys[0], own, 1);
        if (strcmp(own[0], "f") != 0) continue;
        CU_ASSERT_EQUAL_FATAL(get_entry(cs, w.keys[0], &bytes[found], &n[found], &st), 0);
        found++;
    }
    CU_ASSERT_FATAL(found == 2);
    printf("\n  entries of %zu and %zu bytes", n[0], n[1]);
    CU_ASSERT_FATAL(n[0] > 4 * 4096 && n[0] != n[1] + 4096);
    g_lie.right = bytes[0], g_lie.n_right = n[0];
    g_lie.other = bytes[1], g_lie.n_other = n[1];
    hyc *c = connect_as(&v, NULL);
    static const struct {
        int how;
        const char *what;
        int kind;
    } cases[] = {
        {LIE_NONE, "the right entry", HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT},
        {LIE_OTHER_KEY, "another key's entry", HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS},
        {LIE_SIZE, "a size other than its Lookup's", HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS},
        {LIE_ORDER, "chunks out of order", HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS},
    };
    float logit = 0;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        g_lie.how = cases[k].how;
        Hypic__V1__PrefillResponse *r = NULL;
        const int rc = prefill_reuse(c, &d[0], HYPIC__V1__MODE__MODE_PIC,
                                     HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &r, &st);
        CU_ASSERT_EQUAL(rc, 0);
        if (rc) {
            printf("\n  %s: %s", cases[k].what, st.msg);
            continue;
        }
        printf("\n  the owner sends %s: the segment %s", cases[k].what,
               r->segments[0]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT ? "hit"
                                                                                  : "missed");
        CU_ASSERT_EQUAL(r->segments[0]->kind, cases[k].kind);
        /* a miss computes what the hit composed: the same first token */
        if (k == 0) logit = r->top[0]->logit;
        if (k > 0) CU_ASSERT(fabsf(r->top[0]->logit - logit) < 0.05f * (1 + fabsf(logit)));
        hyc_free(r);
    }
    /* the stream stops short after the entry opened: the request fails
     * naming the member; the daemon goes on */
    g_lie.how = LIE_SHORT;
    Hypic__V1__PrefillResponse *r = NULL;
    const int rc = prefill_reuse(c, &d[0], HYPIC__V1__MODE__MODE_PIC,
                                 HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, &r, &st);
    printf("\n  the owner's stream stops short: status %d: %s", rc, st.msg);
    CU_ASSERT_EQUAL(rc, HYC_UNAVAILABLE);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "member f"));
    hyc_free(r);
    CU_ASSERT_EQUAL(health(c, &st), 0);
    hyc_close(c), hyc_close(cs);
    hyc_cluster_close(cl);
    CU_ASSERT(hy_daemon_stop(&v));
    CU_ASSERT(hy_daemon_stop(&solo));
    hy_rpc_server_stop(fake);
    free(bytes[0]), free(bytes[1]);
}

int main(void)
{
    if (hy_test_mkdtemp("hy_test_cluster_", g_tmp, sizeof g_tmp)) return 1;
    if (hy_test_etcd_start(&g_etcd)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    int started = 0;
    while (started < 3 && start_member(started) == 0) started++;
    int rc = 1;
    if (started == 3) {
        static const hy_test_case cases[] = {
            {"three members: entries on their owners, any member answers",
             test_three_members_place_by_owner},
            {"a fourth member joins: only the keys it now owns move, handed over",
             test_a_fourth_member_joins},
            {"a member SIGKILLed under load: 0 failures, its keys rebuilt elsewhere",
             test_kill_a_member_under_load},
            {"a static member list routes the same way", test_static_members},
            {"hits on the other member streamed while the pass runs; one failing mid-stream",
             test_remote_hits_streamed},
            {"an owner that lies costs a miss; one whose stream stops short, its request",
             test_a_lying_owner},
            {NULL, NULL},
        };
        rc = hy_test_main("cluster", cases);
    }
    hyc_cluster_close(g_cl);
    for (int i = 0; i < 4; i++)
        if (g_node[i].pid > 0 && !hy_daemon_stop(&g_node[i])) {
            fprintf(stderr, "member n%d did not stop cleanly on SIGTERM (above: how)\n", i + 1);
            rc = 1;
        }
    hy_test_etcd_stop(&g_etcd);
    hy_test_rmtree(g_tmp);
    return rc;
}
