/*
 * hypic-bench cluster: cluster mode on loopback (docs/deploy.md#cluster-mode).
 * etcd (Debian's etcd-server) and hypic-cached members of one executor
 * thread each, all on this machine; measured in one run:
 *
 *   Lookup and Prefill QPS through the cluster client on clusters of 1, 2
 *   and 3 members, all up at once (under their own etcd prefixes) and
 *   measured in alternation, ROUNDS rounds, the median of each — this
 *   machine's speed drifts by a fifth over minutes, and alternation spreads
 *   that over all three. Every member shares this machine's cores, so more
 *   members do not add compute: the ratios to one member are the cost of
 *   routing and fan-out (a member asks the owners of the segments it does
 *   not hold, over gRPC), not scaling;
 *
 *   keys moved when a fourth member joins the 3-member cluster: the stored
 *   entries the members hand over to the newcomer (and those a warm pass
 *   through it still has to build: none when the hand-over is complete) and
 *   the owners the client computes for 100 000 random keys before and after,
 *   against the ideal 1/4 (rendezvous hashing moves only the newcomer's
 *   share);
 *
 *   a member of the four SIGKILLed under Prefill load: failed requests (the
 *   client goes to the next member), the time until it is gone from the
 *   client's view and from every member's (its etcd lease must run out: the
 *   limit), keys moved (only its own, ideal 1/4); and a member stopped with
 *   SIGTERM, which revokes its lease: gone at once.
 */
#include "bench.h"
#include "bench_trace.h"
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

#define MODEL    "bench"
#define NDOCS    256
#define DOC_LEN  64
#define PER_REQ  4 /* documents per request */
#define CLIENTS  4
#define TTL_S    2
#define NRANDOM  100000
#define MEMBERS  4 /* of the largest cluster, after the join */
#define NCLUSTER 3 /* of 1, 2 and 3 members */
#define ROUNDS   3

/* One cluster: its members (ids "<name><k>"), under prefix /<name>/. */
typedef struct cluster_run {
    char name[4], prefix[16];
    hy_daemon node[MEMBERS];
    hyc_cluster *cl;
    double lookup[ROUNDS], prefill[ROUNDS];
} cluster_run;

typedef struct bench {
    char root[96], model_dir[PATH_MAX];
    hy_test_etcd etcd;
    cluster_run c[NCLUSTER];
    uint32_t doc[NDOCS][DOC_LEN];
    uint8_t key[NDOCS][32];
    int vocab;
    double phase_s;
} bench;

static double now_s(void)
{
    return (double)hy_now_ns() / 1e9;
}

static void member_id(const cluster_run *c, int i, char *id, size_t cap)
{
    snprintf(id, cap, "%s%d", c->name, i + 1);
}

/* Member i of cluster c, registered in etcd under the cluster's prefix. */
static int member_up(bench *b, cluster_run *c, int i)
{
    char id[16], dir[200], cfg[PATH_MAX + 1024];
    member_id(c, i, id, sizeof id);
    snprintf(dir, sizeof dir, "%s/%s", b->root, id);
    if (mkdir(dir, 0700)) return 1;
    snprintf(cfg, sizeof cfg,
             "listen: 127.0.0.1:0\nhttp_listen: \"\"\n"
             "models: [{name: " MODEL ", path: %s}]\n"
             "tiers: {host: {bytes: 512M, admit: always}}\n"
             "executor: {threads: 1}\n"
             "limits: {queue: 256, in_flight_per_tenant: 256}\n"
             "log: {requests: false}\n"
             "cluster: {id: %s, etcd: {endpoints: \"%s\", prefix: %s, ttl_s: %d}}\n",
             b->model_dir, id, b->etcd.endpoint, c->prefix, TTL_S);
    return hy_daemon_start(&c->node[i], dir, cfg);
}

static bool wait_members(cluster_run *c, size_t n, double timeout_s, double *took)
{
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        if (hyc_cluster_members(c->cl, NULL, NULL, 0) == n) {
            if (took) *took = now_s() - t0;
            return true;
        }
        usleep(2000);
    }
    return false;
}

/* Member i's cluster section: the members in its view and the entries in
 * its put queue; false when it does not answer. */
static bool member_stats(cluster_run *c, int i, int *members, uint64_t *queued)
{
    hy_bench_member m;
    if (!hy_bench_member_stats(c->node[i].grpc, &m)) return false;
    *members = m.members, *queued = m.queued;
    return true;
}

/* Entries the live members of c have handed over so far, once that number
 * has held still for 1 s with every put queue empty (30 s at most). */
static uint64_t handed_settled(cluster_run *c)
{
    uint64_t last = UINT64_MAX;
    double since = now_s();
    const double t0 = now_s();
    while (now_s() - t0 < 30) {
        uint64_t sum = 0, queued = 0;
        for (int i = 0; i < MEMBERS; i++) {
            hy_bench_member m;
            if (c->node[i].pid > 0 && hy_bench_member_stats(c->node[i].grpc, &m))
                sum += m.handed, queued += m.queued;
        }
        if (sum != last || queued) last = sum, since = now_s();
        if (now_s() - since >= 1.0) break;
        usleep(50000);
    }
    return last;
}

/* Until every live member of c sees n members; false after timeout_s. */
static bool wait_views(cluster_run *c, int n, double timeout_s)
{
    const double t0 = now_s();
    while (now_s() - t0 < timeout_s) {
        bool all = true;
        for (int i = 0; i < MEMBERS && all; i++) {
            int seen = -1;
            uint64_t q;
            if (c->node[i].pid > 0) all = member_stats(c, i, &seen, &q) && seen == n;
        }
        if (all) return true;
        usleep(5000);
    }
    return false;
}

/* Entries still queued for their owners on any member of c: wait them out. */
static void wait_puts(cluster_run *c)
{
    for (int t = 0; t < 1000; t++) {
        bool idle = true;
        for (int i = 0; i < MEMBERS && idle; i++) {
            int n;
            uint64_t queued;
            if (c->node[i].pid > 0 && member_stats(c, i, &n, &queued) && queued) idle = false;
        }
        if (idle) return;
        usleep(10000);
    }
}

/* Document d as a segment of tokens (into the caller's messages). */
static void doc_segment(bench *b, int d, Hypic__V1__Tokens *tk, Hypic__V1__Segment *sg,
                        Hypic__V1__Segment **sp)
{
    hy_bench_token_segment(tk, sg, b->doc[d], DOC_LEN);
    *sp = sg;
}

/* Warm every document through member i of c; how many were built. */
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

static int warm_all(bench *b, cluster_run *c, int i, warm_count *w)
{
    Hypic__V1__Tokens tk[NDOCS];
    Hypic__V1__Segment sg[NDOCS], *sp[NDOCS];
    for (int d = 0; d < NDOCS; d++) doc_segment(b, d, &tk[d], &sg[d], &sp[d]);
    Hypic__V1__WarmRequest rq = HYPIC__V1__WARM_REQUEST__INIT;
    rq.model = MODEL;
    rq.n_segments = NDOCS;
    rq.segments = sp;
    char id[16];
    member_id(c, i, id, sizeof id);
    hyc *h = hyc_cluster_member(c->cl, id);
    memset(w, 0, sizeof *w);
    w->keys = b->key;
    hyc_status st;
    if (!h || hyc_warm(h, &rq, on_warm, w, &st)) {
        fprintf(stderr, "cluster: Warm through %s: %s\n", id, h ? st.msg : "not in the set");
        return 1;
    }
    return w->failed ? 1 : 0;
}

/* --- load ---------------------------------------------------------------------------- */

typedef struct loader {
    bench *b;
    hyc_cluster *cl;
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
            rc = hyc_cluster_prefill(l->cl, &rq, &r, &st);
            hyc_free(r);
        } else {
            Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
            rq.model = MODEL;
            rq.n_segments = PER_REQ;
            rq.segments = sp;
            Hypic__V1__LookupResponse *r = NULL;
            rc = hyc_cluster_lookup(l->cl, &rq, &r, &st);
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

static void load_start(run *r, bench *b, hyc_cluster *cl, bool prefill)
{
    atomic_init(&r->stop, false);
    r->t0 = now_s();
    for (int i = 0; i < CLIENTS; i++) {
        r->l[i] = (loader){
            .b = b, .cl = cl, .prefill = prefill, .stop = &r->stop, .seed = 7u + (unsigned)i};
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

static double measure(bench *b, hyc_cluster *cl, bool prefill, long *failed)
{
    run r;
    load_start(&r, b, cl, prefill);
    usleep((useconds_t)(b->phase_s * 1e6));
    return load_stop(&r, failed);
}

static double median3(const double *v)
{
    const double a = v[0], b = v[1], c = v[2];
    return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

/* --- placement over many keys -------------------------------------------------------- */

/* The owners the client computes now for NRANDOM keys of seed, into own. */
static void owners_now(hyc_cluster *cl, uint64_t seed, char (*own)[64])
{
    hy_rng g;
    hy_rng_seed(&g, seed);
    for (int i = 0; i < NRANDOM; i++) {
        uint8_t k[32];
        for (int j = 0; j < 32; j++) k[j] = (uint8_t)(hy_rng_uniform(&g) * 256);
        hyc_cluster_owners(cl, k, &own[i], 1);
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
    b->phase_s = 1.5;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--model") == 0)
            given = argv[++i];
        else if (strcmp(argv[i], "--quick") == 0)
            b->phase_s = 0.3;
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
    for (int k = 0; k < NCLUSTER; k++) {
        snprintf(b->c[k].name, sizeof b->c[k].name, "%c", 'a' + k);
        snprintf(b->c[k].prefix, sizeof b->c[k].prefix, "/%c/", 'a' + k);
    }

    int rc = 1;
    double lookup_qps[NCLUSTER] = {0}, prefill_qps[NCLUSTER] = {0};
    long failed_kill = -1, failed_load = 0;
    double moved_join = -1, moved_join_rand = -1, moved_leave_rand = -1, view_client_ms = -1,
           view_members_ms = -1, graceful_ms = -1;
    int rebuilt_join = -1, moved_join_keys = -1, handed_join = -1;
    bool elsewhere_join = true, elsewhere_leave = true;
    char(*before)[64] = calloc(NRANDOM, 64), (*after)[64] = calloc(NRANDOM, 64);
    cluster_run *big = &b->c[NCLUSTER - 1]; /* 3 members, then the join and the kill */
    warm_count w;
    if (!before || !after || hy_test_etcd_start(&b->etcd)) goto out;
    printf("cluster: etcd %s (lease TTL %d s), model %s, %d documents of %d tokens, requests of "
           "%d documents, %d client threads; clusters of 1, 2, 3 members measured in turn, %d "
           "rounds of %.1f s per phase, medians; every member on this machine's cores\n",
           b->etcd.endpoint, TTL_S, given ? given : "tiny (preset)", NDOCS, DOC_LEN, PER_REQ,
           CLIENTS, ROUNDS, b->phase_s);
    /* clusters of 1, 2, 3 members, each warmed through its first member */
    for (int k = 0; k < NCLUSTER; k++) {
        cluster_run *c = &b->c[k];
        for (int i = 0; i <= k; i++)
            if (member_up(b, c, i)) goto out;
        hyc_cluster_options o = {
            .etcd = b->etcd.endpoint, .prefix = c->prefix, .client = {.deadline_ms = 30000}};
        hyc_status st;
        if (hyc_cluster_open(&o, &c->cl, &st)) {
            fprintf(stderr, "cluster: %s\n", st.msg);
            goto out;
        }
        if (!wait_members(c, (size_t)k + 1, 10, NULL) || !wait_views(c, k + 1, 10)) {
            fprintf(stderr, "cluster: the views did not reach %d members\n", k + 1);
            goto out;
        }
        if (warm_all(b, c, 0, &w)) goto out;
        wait_puts(c);
    }
    for (int r = 0; r < ROUNDS; r++)
        for (int k = 0; k < NCLUSTER; k++) {
            long f1 = 0, f2 = 0;
            b->c[k].lookup[r] = measure(b, b->c[k].cl, false, &f1);
            b->c[k].prefill[r] = measure(b, b->c[k].cl, true, &f2);
            failed_load += f1 + f2;
        }
    for (int k = 0; k < NCLUSTER; k++) {
        lookup_qps[k] = median3(b->c[k].lookup);
        prefill_qps[k] = median3(b->c[k].prefill);
        printf("  %d member(s): Lookup %.0f/s (%.0f %.0f %.0f), Prefill %.0f/s (%.0f %.0f %.0f)\n",
               k + 1, lookup_qps[k], b->c[k].lookup[0], b->c[k].lookup[1], b->c[k].lookup[2],
               prefill_qps[k], b->c[k].prefill[0], b->c[k].prefill[1], b->c[k].prefill[2]);
    }
    /* the other clusters go, so that the rest runs alone */
    for (int k = 0; k < NCLUSTER - 1; k++) {
        hyc_cluster_close(b->c[k].cl);
        b->c[k].cl = NULL;
        for (int i = 0; i < MEMBERS; i++)
            if (b->c[k].node[i].pid > 0) hy_daemon_stop(&b->c[k].node[i]);
    }
    /* a fourth joins the 3-member cluster */
    const uint64_t handed0 = handed_settled(big);
    owners_now(big->cl, 99, before);
    char own_before[NDOCS][1][64];
    for (int d = 0; d < NDOCS; d++) hyc_cluster_owners(big->cl, b->key[d], own_before[d], 1);
    if (member_up(b, big, 3) || !wait_members(big, 4, 10, NULL) || !wait_views(big, 4, 10))
        goto out;
    owners_now(big->cl, 99, after);
    moved_join_rand = moved_fraction(before, after, "c4", &elsewhere_join);
    moved_join_keys = 0;
    for (int d = 0; d < NDOCS; d++) {
        char own[1][64];
        hyc_cluster_owners(big->cl, b->key[d], own, 1);
        moved_join_keys += strcmp(own[0], own_before[d][0]) != 0;
    }
    /* the members hand the newcomer what it now owns; a warm pass through it then
     * finds everything (what it owns: there; the rest: on its owner) */
    handed_join = (int)(handed_settled(big) - handed0);
    moved_join = (double)handed_join / NDOCS;
    if (warm_all(b, big, 3, &w)) goto out;
    rebuilt_join = w.built;
    wait_puts(big);
    printf("  a 4th member joins the 3: %d of %d stored entries handed over to it (%.3f; the "
           "client's owners moved %d), %d built again; %.4f of %d random keys moved (ideal "
           "0.25)%s\n",
           handed_join, NDOCS, moved_join, moved_join_keys, rebuilt_join, moved_join_rand, NRANDOM,
           elsewhere_join ? "; SOME MOVED ELSEWHERE" : ", all to it");
    /* c2 SIGKILLed under Prefill load */
    owners_now(big->cl, 99, before);
    run r;
    load_start(&r, b, big->cl, true);
    usleep(500000);
    const double t_kill = now_s();
    hy_daemon_stop_with(&big->node[1], SIGKILL, 5);
    double took = -1;
    if (wait_members(big, 3, TTL_S + 10, &took)) view_client_ms = took * 1e3;
    if (wait_views(big, 3, TTL_S + 10)) view_members_ms = (now_s() - t_kill) * 1e3;
    usleep(500000);
    load_stop(&r, &failed_kill);
    owners_now(big->cl, 99, after);
    moved_leave_rand = moved_fraction(before, after, "c2", &elsewhere_leave);
    printf("  c2 SIGKILLed under Prefill load: %ld failed; gone from the client's view after %.0f "
           "ms, from every member's after %.0f ms (the lease's TTL: %d s, renewed every %.2f s); "
           "%.4f of the random keys moved (ideal 0.25)%s\n",
           failed_kill, view_client_ms, view_members_ms, TTL_S, TTL_S / 3.0, moved_leave_rand,
           elsewhere_leave ? "; SOME NOT c2's" : ", only c2's");
    /* c4 stopped cleanly: its lease revoked as its drain begins */
    const double t_term = now_s();
    kill(big->node[3].pid, SIGTERM);
    if (wait_members(big, 2, 10, NULL)) graceful_ms = (now_s() - t_term) * 1e3;
    hy_daemon_stop(&big->node[3]);
    printf("  c4 stopped with SIGTERM (lease revoked): gone from the client's view %.1f ms after "
           "the signal\n",
           graceful_ms);
    rc = 0;
out:
    for (int k = 0; k < NCLUSTER; k++) {
        hyc_cluster_close(b->c[k].cl);
        for (int i = 0; i < MEMBERS; i++)
            if (b->c[k].node[i].pid > 0) hy_daemon_stop(&b->c[k].node[i]);
    }
    hy_test_etcd_stop(&b->etcd);
    if (getenv("HYPIC_BENCH_KEEP")) /* the members' logs, to read after a failure */
        fprintf(stderr, "cluster: kept %s (HYPIC_BENCH_KEEP)\n", b->root);
    else
        hy_bench_rmtree(b->root);
    free(before);
    free(after);
    if (rc) return 1;
    printf("  Lookup QPS 2/1 members %.3f, 3/1 %.3f; Prefill 2/1 %.3f, 3/1 %.3f (one machine: "
           "routing and fan-out overhead, not scaling); %ld of the load's requests failed\n",
           lookup_qps[1] / lookup_qps[0], lookup_qps[2] / lookup_qps[0],
           prefill_qps[1] / prefill_qps[0], prefill_qps[2] / prefill_qps[0], failed_load);
    printf("{\"bench\":\"cluster\",\"documents\":%d,\"lease_ttl_s\":%d,\"rounds\":%d,"
           "\"lookup_qps\":{\"n1\":%.1f,\"n2\":%.1f,\"n3\":%.1f},"
           "\"prefill_qps\":{\"n1\":%.1f,\"n2\":%.1f,\"n3\":%.1f},"
           "\"lookup_qps_ratio\":{\"n2\":%.4f,\"n3\":%.4f},"
           "\"prefill_qps_ratio\":{\"n2\":%.4f,\"n3\":%.4f},\"failed_requests_load\":%ld,"
           "\"keys_moved_on_join\":%.4f,\"ideal_moved_on_join\":0.25,\"rebuilt_on_join\":%d,"
           "\"keys_moved_on_join_random\":%.4f,\"moved_elsewhere_on_join\":%s,"
           "\"keys_moved_on_leave_random\":%.4f,\"ideal_moved_on_leave\":0.25,"
           "\"moved_elsewhere_on_leave\":%s,"
           "\"failed_requests_on_kill\":%ld,\"view_convergence_ms\":%.1f,"
           "\"view_convergence_client_ms\":%.1f,\"view_convergence_members_ms\":%.1f,"
           "\"view_convergence_graceful_ms\":%.1f}\n",
           NDOCS, TTL_S, ROUNDS, lookup_qps[0], lookup_qps[1], lookup_qps[2], prefill_qps[0],
           prefill_qps[1], prefill_qps[2], lookup_qps[1] / lookup_qps[0],
           lookup_qps[2] / lookup_qps[0], prefill_qps[1] / prefill_qps[0],
           prefill_qps[2] / prefill_qps[0], failed_load, moved_join, rebuilt_join, moved_join_rand,
           elsewhere_join ? "true" : "false", moved_leave_rand, elsewhere_leave ? "true" : "false",
           failed_kill, HY_MAX(view_client_ms, view_members_ms), view_client_ms, view_members_ms,
           graceful_ms);
    return 0;
}
