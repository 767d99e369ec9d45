/*
 * hypic-bench cluster: cluster mode on loopback (docs/deploy.md#cluster-mode).
 * etcd (Debian's etcd-server) and hypic-cached members of one executor
 * thread each, all on this machine; measured in one run:
 *
 *   Lookup and Prefill QPS through the cluster client with 1, 2 and 3
 *   members (closed loop, CLIENTS threads). Every member shares this
 *   machine's cores, so more members do not add compute: the ratios to one
 *   member are the cost of routing and fan-out (a member asks the owners of
 *   the segments it does not hold, over gRPC), not scaling;
 *
 *   keys moved when a fourth member joins: the stored entries that became
 *   misses (built again through the newcomer) and the owners the client
 *   computes for 100 000 random keys before and after, against the ideal
 *   1/4 (rendezvous hashing moves only the newcomer's share);
 *
 *   a member SIGKILLed under Prefill load: failed requests (the client goes
 *   to the next member), the time until it is gone from the client's view
 *   and from every member's (its etcd lease of TTL seconds must run out:
 *   the limit), keys moved (only its own, ideal 1/4); and a member stopped
 *   with SIGTERM, which revokes its lease: gone at once.
 */
#include "bench.h"
#include "hy_cluster.h"
#include "hy_common.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"
#include "../tests/etcd_fixture.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MODEL   "bench"
#define NDOCS   256
#define DOC_LEN 64
#define PER_REQ 4 /* documents per request */
#define CLIENTS 4
#define TTL_S   2
#define NRANDOM 100000
#define MEMBERS 4

typedef struct bench {
    char root[96], model_dir[PATH_MAX];
    hy_test_etcd etcd;
    hy_daemon node[MEMBERS];
    hyc_cluster *cl;
    uint32_t doc[NDOCS][DOC_LEN];
    uint8_t key[NDOCS][32];
    int vocab;
    double phase_s;
} bench;

static double now_s(void)
{
    return (double)hy_now_ns() / 1e9;
}

static int member_up(bench *b, int i)
{
    char dir[200], cfg[PATH_MAX + 1024];
    snprintf(dir, sizeof dir, "%s/n%d", b->root, i + 1);
    if (mkdir(dir, 0700)) return 1;
    snprintf(cfg, sizeof cfg,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
             "models: [{name: " MODEL ", path: %s}]\n"
             "tiers: {host: {bytes: 512M, admit: always}}\n"
             "executor: {threads: 1}\n"
             "limits: {queue: 256, in_flight_per_tenant: 256}\n"
             "log: {requests: false}\n"
             "cluster: {id: n%d, etcd: {endpoints: \"%s\", ttl_s: %d}}\n",
             b->model_dir, i + 1, b->etcd.endpoint, TTL_S);
    return hy_daemon_start(&b->node[i], dir, cfg);
}

static bool wait_members(bench *b, size_t n, double timeout_s, double *took)
{
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        if (hyc_cluster_members(b->cl, NULL, NULL, 0) == n) {
            if (took) *took = now_s() - t0;
            return true;
        }
        usleep(2000);
    }
    return false;
}

/* Member i's cluster section (its Stats): the members in its view and the
entries in its put queue; false when it does not answer. */
static bool member_stats(bench *b, int i, int *members, uint64_t *queued)
{
    hyc_options o = {.target = b->node[i].grpc, .deadline_ms = 2000};
    hyc *c;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) return false;
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    const bool ok = !hyc_stats(c, &q, &r, &st) && r->cluster;
    if (ok) *members = (int)r->cluster->n_members, *queued = r->cluster->puts_queued;
    hyc_free(r);
    hyc_close(c);
    return ok;
}

static int member_view(bench *b, int i)
{
    int n;
    uint64_t q;
    return member_stats(b, i, &n, &q) ? n : -1;
}

/* Until every live member sees n members; false after timeout_s. */
static bool wait_views(bench *b, int n, double timeout_s)
{
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        bool all = true;
        for (int i = 0; i < MEMBERS && all; i++)
            if (b->node[i].pid > 0) all = member_view(b, i) == n;
        if (all) return true;
        usleep(5000);
    }
    return false;
}

/* Document d as a segment of tokens (into the caller's messages). */
static void doc_segment(bench *b, int d, Hypic__V1__Tokens *tk, Hypic__V1__Segment *sg,
                        Hypic__V1__Segment **sp)
{
    Hypic__V1__Tokens ti = HYPIC__V1__TOKENS__INIT;
    *tk = ti;
    tk->n_ids = DOC_LEN;
    tk->ids = b->doc[d];
    Hypic__V1__Segment si = HYPIC__V1__SEGMENT__INIT;
    *sg = si;
    sg->ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    sg->tokens = tk;
    *sp = sg;
}

/* Warm every document through member i; how many were built. */
typedef struct warm_count {
    int built, cached, failed;
    uint8_t (*keys)[32];
} warm_count;

static int on_warm(void *ctx, const Hypic__V1__WarmProgress *p)
{
    warm_count *w = ctx;
    w->built += p->state == HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
    w->cached += p->state == HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED;
    w->failed += p->state == HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED;
    if (p->index < NDOCS && p->key.len == 32) memcpy(w->keys[p->index], p->key.data, 32);
    return 0;
}

static int warm_all(bench *b, int i, warm_count *w)
{
    Hypic__V1__Tokens tk[NDOCS];
    Hypic__V1__Segment sg[NDOCS], *sp[NDOCS];
    for (int d = 0; d < NDOCS; d++) doc_segment(b, d, &tk[d], &sg[d], &sp[d]);
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = MODEL;
    rq.n_segments = NDOCS;
    rq.segments = sp;
    char id[16];
    snprintf(id, sizeof id, "n%d", i + 1);
    hyc *c = hyc_cluster_member(b->cl, id);
    memset(w, 0, sizeof *w);
    w->keys = b->key;
    hyc_status st;
    if (!c || hyc_warm(c, &rq, on_warm, w, &st)) {
        fprintf(stderr, "cluster: Warm through %s: %s\n", id, c ? st.msg : "not in the set");
        return 1;
    }
    return w->failed ? 1 : 0;
}

/* Entries still queued for their owners on any member: wait them out. */
static void wait_puts(bench *b)
{
    for (int t = 0; t < 1000; t++) {
        bool idle = true;
        for (int i = 0; i < MEMBERS && idle; i++) {
            int n;
            uint64_t queued;
            if (b->node[i].pid > 0 && member_stats(b, i, &n, &queued) && queued) idle = false;
        }
        if (idle) return;
        usleep(10000);
    }
}

/* --- load ---------------------------------------------------------------------------- */

typedef struct loader {
    bench *b;
    bool prefill;
    _Atomic bool *stop;
    unsigned seed;
    long done, failed;
} loader;

static void *load_main(void *arg)
{
    loader *l = arg;
    static uint32_t query[8] = {11, 22, 33, 44, 55, 66, 77, 88};
    while (!atomic_load(l->stop)) {
        Hypic__V1__Tokens tk[PER_REQ];
        Hypic__V1__Segment sg[PER_REQ], *sp[PER_REQ];
        for (int k = 0; k < PER_REQ; k++) {
            l->seed = l->seed * 1103515245u + 12345u;
            doc_segment(l->b, (int)((l->seed >> 8) % NDOCS), &tk[k], &sg[k], &sp[k]);
        }
        hyc_status st;
        int rc;
        if (l->prefill) {
            Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
            rq.model = MODEL;
            rq.n_segments = PER_REQ;
            rq.segments = sp;
            rq.n_query = 8;
            rq.query = query;
            Hypic__V1__PrefillResponse *r = NULL;
            rc = hyc_cluster_prefill(l->b->cl, &rq, &r, &st);
            hyc_free(r);
        } else {
            Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
            rq.model = MODEL;
            rq.n_segments = PER_REQ;
            rq.segments = sp;
            Hypic__V1__LookupResponse *r = NULL;
            rc = hyc_cluster_lookup(l->b->cl, &rq, &r, &st);
            hyc_free(r);
        }
        l->done++;
        if (rc) {
            l->failed++;
            if (l->failed <= 3) fprintf(stderr, "cluster: a request failed: %s\n", st.msg);
        }
    }
    return NULL;
}

typedef struct run {
    _Atomic bool stop;
    loader l[CLIENTS];
    pthread_t th[CLIENTS];
    double t0;
} run;

static void load_start(run *r, bench *b, bool prefill)
{
    atomic_init(&r->stop, false);
    r->t0 = now_s();
    for (int i = 0; i < CLIENTS; i++) {
        r->l[i] = (loader){.b = b, .prefill = prefill, .stop = &r->stop, .seed = 7u + (unsigned)i};
        pthread_create(&r->th[i], NULL, load_main, &r->l[i]);
    }
}

/* Stops the load: requests per second; *failed the failures. */
static double load_stop(run *r, long *failed)
{
    atomic_store(&r->stop, true);
    long done = 0, bad = 0;
    for (int i = 0; i < CLIENTS; i++) {
        pthread_join(r->th[i], NULL);
        done += r->l[i].done;
        bad += r->l[i].failed;
    }
    if (failed) *failed = bad;
    return (double)done / (now_s() - r->t0);
}

static double measure(bench *b, bool prefill, long *failed)
{
    run r;
    load_start(&r, b, prefill);
    usleep((useconds_t)(b->phase_s * 1e6));
    return load_stop(&r, failed);
}

/* --- placement over many keys -------------------------------------------------------- */

/* The owners the client computes now for NRANDOM keys of seed, into own. */
static void owners_now(bench *b, uint64_t seed, char (*own)[64])
{
    hy_rng g;
    hy_rng_seed(&g, seed);
    for (int i = 0; i < NRANDOM; i++) {
        uint8_t k[32];
        for (int j = 0; j < 32; j++) k[j] = (uint8_t)(hy_rng_uniform(&g) * 256);
        hyc_cluster_owners(b->cl, k, &own[i], 1);
    }
}

static double moved_fraction(char (*a)[64], char (*b)[64], const char *only, bool *elsewhere)
{
    int moved = 0;
    *elsewhere = false;
    for (int i = 0; i < NRANDOM; i++)
        if (strcmp(a[i], b[i])) {
            moved++;
            /* a join moves keys to the newcomer only; a leave, the leaver's only */
            if (only && strcmp(b[i], only) && strcmp(a[i], only)) *elsewhere = true;
        }
    return (double)moved / NRANDOM;
}

static int usage(void)
{
    fprintf(stderr, "usage: hypic-bench cluster [--model DIR] [--quick]\n"
                    "  needs etcd (Debian's etcd-server); --quick: 0.5 s per phase\n");
    return 2;
}

int hy_bench_cluster(int argc, char **argv)
{
    static bench B;
    bench *b = &B;
    const char *given = NULL;
    b->phase_s = 3.0;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            given = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            b->phase_s = 0.5;
        else
            return usage();
    }
    if (access(HY_TEST_ETCD_BIN, X_OK) != 0) {
        fprintf(stderr, "cluster: %s is not installed (Debian's etcd-server; make deps)\n",
                HY_TEST_ETCD_BIN);
        return 1;
    }
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(b->root, sizeof b->root, "%.40s/hypic-bench-cluster-XXXXXX", tmp);
    if (!mkdtemp(b->root)) return 1;
    hy_err e = {0};
    if (given && !realpath(given, b->model_dir)) {
        fprintf(stderr, "cluster: --model %s: %s\n", given, strerror(errno));
        hy_bench_rmtree(b->root);
        return 1;
    }
    if (!given) snprintf(b->model_dir, sizeof b->model_dir, "%.96s/tiny", b->root);
    if (!given && hy_model_init("tiny", 1, b->model_dir, "F32", &e)) {
        fprintf(stderr, "cluster: %s\n", e.msg);
        hy_bench_rmtree(b->root);
        return 1;
    }
    hy_model *mdl;
    if (hy_model_open(&mdl, b->model_dir, &e)) {
        fprintf(stderr, "cluster: %s\n", e.msg);
        hy_bench_rmtree(b->root);
        return 1;
    }
    b->vocab = hy_model_cfg(mdl)->vocab;
    hy_model_close(mdl);
    hy_rng g;
    hy_rng_seed(&g, 5);
    for (int d = 0; d < NDOCS; d++)
        for (int t = 0; t < DOC_LEN; t++)
            b->doc[d][t] = 3 + (uint32_t)(hy_rng_uniform(&g) * (b->vocab - 3));

    int rc = 1;
    double lookup_qps[4] = {0}, prefill_qps[4] = {0};
    long failed_kill = -1;
    double moved_join = -1, moved_join_rand = -1, moved_leave_rand = -1, view_client_ms = -1,
           view_members_ms = -1, graceful_ms = -1;
    int rebuilt_join = -1, moved_join_keys = -1;
    bool elsewhere_join = true, elsewhere_leave = true;
    char(*before)[64] = calloc(NRANDOM, 64), (*after)[64] = calloc(NRANDOM, 64);
    warm_count w;
    if (!before || !after || hy_test_etcd_start(&b->etcd)) goto out;
    printf("cluster: etcd %s (lease TTL %d s), model %s, %d documents of %d tokens, requests of "
           "%d documents, %d client threads, %.1f s per phase; every member on this machine's "
           "cores\n",
           b->etcd.endpoint, TTL_S, given ? given : "tiny (preset)", NDOCS, DOC_LEN, PER_REQ,
           CLIENTS, b->phase_s);
    /* 1, 2, 3 members */
    for (int n = 1; n <= 3; n++) {
        if (member_up(b, n - 1)) goto out;
        if (!b->cl) {
            hyc_cluster_options o = {.etcd = b->etcd.endpoint, .client = {.deadline_ms = 30000}};
            hyc_status st;
            if (hyc_cluster_open(&o, &b->cl, &st)) {
                fprintf(stderr, "cluster: %s\n", st.msg);
                goto out;
            }
        }
        if (!wait_members(b, (size_t)n, 10, NULL) || !wait_views(b, n, 10)) {
            fprintf(stderr, "cluster: the views did not reach %d members\n", n);
            goto out;
        }
        if (warm_all(b, n - 1, &w)) goto out; /* through the newcomer: what it owns is a miss */
        wait_puts(b);
        long f1 = 0, f2 = 0;
        lookup_qps[n] = measure(b, false, &f1);
        prefill_qps[n] = measure(b, true, &f2);
        printf("  %d member(s): Lookup %.0f/s, Prefill %.0f/s (%ld, %ld failed); %d of %d entries "
               "built on the newcomer\n",
               n, lookup_qps[n], prefill_qps[n], f1, f2, w.built, NDOCS);
    }
    /* a fourth joins */
    owners_now(b, 99, before);
    char own_before[NDOCS][1][64];
    for (int d = 0; d < NDOCS; d++) hyc_cluster_owners(b->cl, b->key[d], own_before[d], 1);
    if (member_up(b, 3) || !wait_members(b, 4, 10, NULL) || !wait_views(b, 4, 10)) goto out;
    owners_now(b, 99, after);
    moved_join_rand = moved_fraction(before, after, "n4", &elsewhere_join);
    moved_join_keys = 0;
    for (int d = 0; d < NDOCS; d++) {
        char own[1][64];
        hyc_cluster_owners(b->cl, b->key[d], own, 1);
        moved_join_keys += strcmp(own[0], own_before[d][0]) != 0;
    }
    if (warm_all(b, 3, &w)) goto out; /* through the newcomer: what it owns is a miss */
    rebuilt_join = w.built;
    moved_join = (double)rebuilt_join / NDOCS;
    wait_puts(b);
    printf("  a 4th member joins: %d of %d stored entries rebuilt on it (%.3f; the client's owners "
           "moved %d), %.4f of %d random keys moved (ideal 0.25)%s\n",
           rebuilt_join, NDOCS, moved_join, moved_join_keys, moved_join_rand, NRANDOM,
           elsewhere_join ? "; SOME MOVED ELSEWHERE" : ", all to it");
    /* n2 SIGKILLed under Prefill load */
    owners_now(b, 99, before);
    run r;
    load_start(&r, b, true);
    usleep(500000);
    const double t_kill = now_s();
    hy_daemon_stop_with(&b->node[1], SIGKILL, 5);
    double took = -1;
    if (wait_members(b, 3, TTL_S + 10, &took)) view_client_ms = took * 1e3;
    if (wait_views(b, 3, TTL_S + 10)) view_members_ms = (now_s() - t_kill) * 1e3;
    usleep(500000);
    load_stop(&r, &failed_kill);
    owners_now(b, 99, after);
    moved_leave_rand = moved_fraction(before, after, "n2", &elsewhere_leave);
    printf("  n2 SIGKILLed under Prefill load: %ld failed; gone from the client's view after %.0f "
           "ms, from every member's after %.0f ms (the lease's TTL: %d s); %.4f of the random "
           "keys moved (ideal 0.25)%s\n",
           failed_kill, view_client_ms, view_members_ms, TTL_S, moved_leave_rand,
           elsewhere_leave ? "; SOME NOT n2's" : ", only n2's");
    /* n4 stopped cleanly: its lease revoked */
    const double t_term = now_s();
    hy_daemon_stop(&b->node[3]);
    if (wait_members(b, 2, 10, NULL)) graceful_ms = (now_s() - t_term) * 1e3;
    printf("  n4 stopped with SIGTERM (drain, lease revoked): gone from the client's view %.0f ms "
           "after the signal\n",
           graceful_ms);
    rc = 0;
out:
    hyc_cluster_close(b->cl);
    for (int i = 0; i < MEMBERS; i++)
        if (b->node[i].pid > 0) hy_daemon_stop(&b->node[i]);
    hy_test_etcd_stop(&b->etcd);
    if (getenv("HYPIC_BENCH_KEEP")) /* the members' logs, to read after a failure */
        fprintf(stderr, "cluster: kept %s (HYPIC_BENCH_KEEP)\n", b->root);
    else
        hy_bench_rmtree(b->root);
    free(before);
    free(after);
    if (rc) return 1;
    printf("  Lookup QPS 2/1 members %.3f, 3/1 %.3f; Prefill 2/1 %.3f, 3/1 %.3f (one machine: "
           "routing and fan-out overhead, not scaling)\n",
           lookup_qps[2] / lookup_qps[1], lookup_qps[3] / lookup_qps[1],
           prefill_qps[2] / prefill_qps[1], prefill_qps[3] / prefill_qps[1]);
    printf("{\"bench\":\"cluster\",\"documents\":%d,\"lease_ttl_s\":%d,"
           "\"lookup_qps\":{\"n1\":%.1f,\"n2\":%.1f,\"n3\":%.1f},"
           "\"prefill_qps\":{\"n1\":%.1f,\"n2\":%.1f,\"n3\":%.1f},"
           "\"lookup_qps_ratio\":{\"n2\":%.4f,\"n3\":%.4f},"
           "\"prefill_qps_ratio\":{\"n2\":%.4f,\"n3\":%.4f},"
           "\"keys_moved_on_join\":%.4f,\"ideal_moved_on_join\":0.25,"
           "\"keys_moved_on_join_random\":%.4f,\"moved_elsewhere_on_join\":%s,"
           "\"keys_moved_on_leave_random\":%.4f,\"ideal_moved_on_leave\":0.25,"
           "\"moved_elsewhere_on_leave\":%s,"
           "\"failed_requests_on_kill\":%ld,\"view_convergence_ms\":%.1f,"
           "\"view_convergence_client_ms\":%.1f,\"view_convergence_members_ms\":%.1f,"
           "\"view_convergence_graceful_ms\":%.1f}\n",
           NDOCS, TTL_S, lookup_qps[1], lookup_qps[2], lookup_qps[3], prefill_qps[1],
           prefill_qps[2], prefill_qps[3], lookup_qps[2] / lookup_qps[1],
           lookup_qps[3] / lookup_qps[1], prefill_qps[2] / prefill_qps[1],
           prefill_qps[3] / prefill_qps[1], moved_join, moved_join_rand,
           elsewhere_join ? "true" : "false", moved_leave_rand, elsewhere_leave ? "true" : "false",
           failed_kill, HY_MAX(view_client_ms, view_members_ms), view_client_ms, view_members_ms,
           graceful_ms);
    return 0;
}
