/*
 * hypic-bench million: the store at 10^3 ... 10^6 small entries, host and
 * NVMe, through a real hypic-cached (a child process on loopback, the tests'
 * fixture; libhypic-client). One store grows stage by stage; at each stage N
 * it measures
 *   - index memory: the daemon's RSS over its RSS before the first put
 *     (the host arena is populated at open, so it is in both), per entry;
 *   - Lookup: single-segment Lookup RPCs of random stored segments, p50/p99,
 *     and of segments never stored (misses), against a Health RPC (the
 *     round trip of a call that touches no store: the floor);
 *   - List: every page from the first to the last at the largest page the
 *     daemon allows (limits.page_size), the total and the cost of each page;
 *   - eviction: PutEntry/s while the host tier is full, so that every put
 *     evicts a host copy, against the device's rate of 4 KiB writes each
 *     followed by fdatasync in the same directory (a put to NVMe is one
 *     flush: docs/store-format.md#durability-order);
 *   - open: SIGKILL, then the time to ready (RocksDB recovery, the journal's
 *     replay, the catalog scan), then a clean stop and the time to ready
 *     again, each against the same start with an empty store;
 *   - hand-over: the daemon restarted as the only member of a cluster (etcd,
 *     Debian's etcd-server, on loopback), a second, empty member joins, and
 *     the first hands the newcomer its share (rendezvous hashing: about
 *     half) through the members' put queue: the time from the newcomer's
 *     start until it holds every entry handed to it, entries per second, the
 *     share moved. The newcomer is then killed and removed, the daemon
 *     stopped once the view has shrunk back (nothing left to hand over) and
 *     started alone again for the next stage. Without etcd it is skipped,
 *     saying so.
 * and fits each figure's growth between stages as a log-log slope:
 * constant (< 0.1), log (< 0.5), linear (< 1.2), superlinear.
 *
 * What an entry is: one real entry of the generated `tiny` preset, built
 * once in-process from an 8-token segment in the daemon's representation
 * (τ = 0.03, bf16), then re-serialised per stored segment with the segment's
 * own 8 tokens put in place of the first (every checksum recomputed by
 * hy_entry_serialize). The daemon validates each one in full (PutEntry
 * deserialises it: header, sections, checksums, token ids against the
 * vocabulary) and derives its key from its tokens, so each is a distinct,
 * valid entry of its own key, of a few KB like a short segment's — only its
 * state is not the one its tokens would build, which no figure here reads:
 * the store keeps payloads as opaque bytes, and index memory, Lookup, List,
 * eviction and open depend on the entries' count and size, not on their
 * values. Building 10^6 real entries would take the model hours for nothing.
 * NVMe is written through (tiers.nvme.write_through), so a SIGKILL loses no
 * entry and every stage's store holds exactly N entries.
 *
 *   hypic-bench million [--max N] [--quick] [--out DIR] [--daemon PATH]
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hy_tiers.h"
#include "hypic_client.h"
#include "model_internal.h" /* hy_entry's tokens, re-keyed per segment */

#include "../tests/cached/daemon_fixture.h"
#include "../tests/etcd_fixture.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { SEG = 8, PUTTERS = 2, LOOKUPS = 2000, MISSES = 500, MAX_STAGES = 8, PAGE = 1000, TTL_S = 2 };

/* The tokens of segment i: its number in base 250 in the first four (ids
 * 3..252 of tiny's 259), then a tail that says stored (miss false) or never
 * stored (miss true). */
static void tokens_of(uint64_t i, bool miss, uint32_t out[SEG])
{
    for (int j = 0; j < 4; j++, i /= 250) out[j] = 3 + (uint32_t)(i % 250);
    for (int j = 4; j < SEG; j++) out[j] = (miss ? 200u : 100u) + (uint32_t)j;
}

/* One stage's figures; a NAN is a figure not measured (its key is left out). */
typedef struct stage {
    long n;
    double rss_per_entry, lookup_p50_us, lookup_p99_us, miss_p50_us;
    double list_total_s, list_first_ms, list_last_ms, list_p50_ms, list_p99_ms;
    long list_pages;
    double put_per_s, evict_per_s, open_kill_s, open_clean_s, stop_clean_s;
    double handover_s, handover_per_s, handover_share; /* NAN: not measured */
} stage;

typedef struct bench {
    char tmp[160], model_dir[192], dir[200], yaml[1200];
    char dir2[200], yaml2[1400]; /* the joining member's */
    hy_test_etcd etcd;           /* pid 0: no hand-over measured */
    hy_daemon d, d2;
    hyc *c;
    hy_bench_model bm;
    void *proto;            /* the entry's serialised bytes as built */
    size_t proto_len;       /* its bytes */
    long stored;            /* segments 0 .. stored-1 are in the store */
    double open_empty;      /* seconds to ready with an empty store */
    double empty_lookup_us; /* Lookup p50 in the empty store: the RPC's own cost */
} bench;

static double now_s(void)
{
    return hy_now_s();
}

static double pct(double *v, size_t n, double p)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, hy_bench_cmp_double);
    return v[(size_t)(p * (double)(n - 1))];
}

/* (Re)starts the daemon on b->dir with configuration yaml and connects;
 * *secs: fork to ready. */
static int daemon_up(bench *b, const char *yaml, double *secs)
{
    const double t0 = now_s();
    if (hy_daemon_start(&b->d, b->dir, yaml) != 0) {
        fprintf(stderr, "hypic-bench million: hypic-cached did not start (%s)\n",
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known");
        return 1;
    }
    if (secs) *secs = now_s() - t0;
    hyc_options o = {.target = b->d.grpc, .deadline_ms = 600000};
    hyc_status st;
    if (hyc_open(&o, &b->c, &st)) {
        fprintf(stderr, "hypic-bench million: connecting to %s: %s\n", b->d.grpc, st.msg);
        return 1;
    }
    return 0;
}

static void daemon_down_kill(bench *b)
{
    hyc_close(b->c);
    b->c = NULL;
    hy_daemon_stop_with(&b->d, SIGKILL, 10);
}

/* A clean stop (SIGTERM, drain, flush); *secs: how long it took. */
static int daemon_down(bench *b, double *secs)
{
    hyc_close(b->c);
    b->c = NULL;
    const double t0 = now_s();
    const int st = hy_daemon_stop_with(&b->d, SIGTERM, 120);
    if (secs) *secs = now_s() - t0;
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "hypic-bench million: hypic-cached did not stop cleanly; its log:\n");
        hy_daemon_print_log_tail(&b->d, 20);
        return 1;
    }
    return 0;
}

/* --- filling: PutEntry from PUTTERS threads, each its own connection --------------------- */

typedef struct putter {
    bench *b;
    long from, to; /* segments [from, to) with stride PUTTERS */
    int rc;
    char why[600];
} putter;

static void *put_run(void *arg)
{
    putter *p = arg;
    bench *b = p->b;
    hy_err e = {0};
    hy_entry *ent = NULL;
    hyc *c = NULL;
    hyc_status st;
    hyc_options o = {.target = b->d.grpc, .deadline_ms = 60000};
    p->rc = 1;
    if (hy_entry_deserialize(b->bm.m, b->proto, b->proto_len, &ent, &e)) {
        snprintf(p->why, sizeof p->why, "deserialising the prototype entry: %s", e.msg);
        return NULL;
    }
    if (hyc_open(&o, &c, &st)) {
        snprintf(p->why, sizeof p->why, "connecting: %s", st.msg);
        goto out;
    }
    for (long i = p->from; i < p->to; i += PUTTERS) {
        uint32_t t[SEG];
        tokens_of((uint64_t)i, false, t);
        for (int j = 0; j < SEG; j++) ent->tokens[j] = (int32_t)t[j];
        void *buf;
        size_t len;
        if (hy_entry_serialize(ent, &buf, &len, &e)) {
            snprintf(p->why, sizeof p->why, "serialising segment %ld: %s", i, e.msg);
            goto out;
        }
        Hypic__V1__EntryMeta m = HYPIC__V1__ENTRY_META__INIT;
        m.model = "tiny";
        Hypic__V1__PutEntryResponse *r = NULL;
        const int rc = hyc_put_entry(c, &m, buf, len, 0, &r, &st);
        free(buf);
        if (rc) {
            snprintf(p->why, sizeof p->why, "PutEntry of segment %ld: %s", i, st.msg);
            goto out;
        }
        hyc_free(r);
    }
    p->rc = 0;
out:
    hyc_close(c);
    hy_entry_free(ent);
    return NULL;
}

static int stats_of(bench *b, uint64_t *entries, uint64_t *host_entries, uint64_t *evictions)
{
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    hyc_status st;
    if (hyc_stats(b->c, &q, &r, &st)) {
        fprintf(stderr, "hypic-bench million: Stats: %s\n", st.msg);
        return 1;
    }
    *entries = r->entries;
    *host_entries = *evictions = 0;
    for (size_t i = 0; i < r->n_tiers; i++)
        if (r->tiers[i]->tier == HYPIC__V1__TIER__TIER_HOST) {
            *host_entries = r->tiers[i]->entries;
            *evictions = r->tiers[i]->evictions;
        }
    hyc_free(r);
    return 0;
}

/* Puts segments [b->stored, n) in batches of a tenth of the stage (at least
 * 1000), each timed; fills s->put_per_s (all of them) and s->evict_per_s
 * (the batches during which the host tier evicted at least once per put;
 * NAN when none did). */
static int fill(bench *b, long n, stage *s)
{
    uint64_t e1 = 0, h1, ev0, ev1;
    if (stats_of(b, &e1, &h1, &ev0)) return 1;
    double t_all = 0, t_ev = 0;
    long n_ev = 0;
    const long first = b->stored;
    while (b->stored < n) {
        const long from = b->stored, to = HY_MIN(n, from + HY_MAX((n - first) / 10, 1000));
        putter p[PUTTERS];
        pthread_t th[PUTTERS];
        int started = 0;
        const double t0 = now_s();
        for (int k = 0; k < PUTTERS; k++) {
            p[k] = (putter){.b = b, .from = from + k, .to = to};
            if (pthread_create(&th[k], NULL, put_run, &p[k]) != 0) break;
            started++;
        }
        for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
        const double dt = now_s() - t0;
        if (started < PUTTERS) {
            fprintf(stderr, "hypic-bench million: could not start the putting threads\n");
            return 1;
        }
        for (int k = 0; k < PUTTERS; k++)
            if (p[k].rc) {
                fprintf(stderr, "hypic-bench million: %s\n", p[k].why);
                return 1;
            }
        if (stats_of(b, &e1, &h1, &ev1)) return 1;
        t_all += dt;
        if (ev1 - ev0 >= (uint64_t)(to - from)) { /* every put of the batch evicted */
            t_ev += dt;
            n_ev += to - from;
        }
        ev0 = ev1;
        b->stored = to;
    }
    if (e1 != (uint64_t)n) {
        fprintf(stderr, "hypic-bench million: the store holds %llu entries after %ld puts\n",
                (unsigned long long)e1, n);
        return 1;
    }
    s->put_per_s = t_all > 0 ? (double)(n - first) / t_all : NAN;
    s->evict_per_s = n_ev ? (double)n_ev / t_ev : NAN;
    return 0;
}

/* --- Lookup, List -------------------------------------------------------------------- */

static double lookup_once(bench *b, uint64_t i, bool miss, int *hit)
{
    uint32_t t[SEG];
    tokens_of(i, miss, t);
    Hypic__V1__Tokens tk;
    Hypic__V1__Segment sg;
    hy_bench_token_segment(&tk, &sg, t, SEG);
    Hypic__V1__Segment *sp = &sg;
    Hypic__V1__LookupRequest q = HYPIC__V1__LOOKUP_REQUEST__INIT;
    q.model = "tiny";
    q.n_segments = 1;
    q.segments = &sp;
    Hypic__V1__LookupResponse *r = NULL;
    hyc_status st;
    const double t0 = now_s();
    if (hyc_lookup(b->c, &q, &r, &st)) {
        fprintf(stderr, "hypic-bench million: Lookup of segment %llu: %s\n", (unsigned long long)i,
                st.msg);
        return NAN;
    }
    const double us = (now_s() - t0) * 1e6;
    *hit = r->n_segments == 1 && r->segments[0]->hit;
    hyc_free(r);
    return us;
}

static int lookups(bench *b, stage *s, hy_rng *rng)
{
    double v[LOOKUPS], h[MISSES];
    for (int k = 0; k < LOOKUPS; k++) {
        int hit = 0;
        const uint64_t i = hy_rng_next(rng) % (uint64_t)b->stored;
        if (isnan(v[k] = lookup_once(b, i, false, &hit))) return 1;
        if (!hit) {
            fprintf(stderr, "hypic-bench million: stored segment %llu missed in a Lookup\n",
                    (unsigned long long)i);
            return 1;
        }
    }
    for (int k = 0; k < MISSES; k++) {
        int hit = 1;
        if (isnan(h[k] = lookup_once(b, hy_rng_next(rng) % 1000000000ull, true, &hit))) return 1;
        if (hit) {
            fprintf(stderr, "hypic-bench million: a segment never stored hit in a Lookup\n");
            return 1;
        }
    }
    s->lookup_p50_us = pct(v, LOOKUPS, 0.5);
    s->lookup_p99_us = pct(v, LOOKUPS, 0.99);
    s->miss_p50_us = pct(h, MISSES, 0.5);
    return 0;
}

/* Every page, first to last. A refusal (the daemon's limit on entries a List
 * may match) is printed and leaves the figures unmeasured, not the run failed. */
static int list_all(bench *b, stage *s)
{
    const long want = (b->stored + PAGE - 1) / PAGE;
    double *ms = calloc((size_t)want + 1, sizeof *ms);
    if (!ms) return 1;
    char token[160] = "";
    long pages = 0, seen = 0;
    const double t0 = now_s();
    for (;;) {
        Hypic__V1__ListRequest q = HYPIC__V1__LIST_REQUEST__INIT;
        q.page_size = PAGE;
        q.page_token = token;
        Hypic__V1__ListResponse *r = NULL;
        hyc_status st;
        const double p0 = now_s();
        if (hyc_list(b->c, &q, &r, &st)) {
            printf("  List page %ld at %ld entries not measured: %s\n", pages + 1, b->stored,
                   st.msg);
            free(ms);
            return st.code == HYC_RESOURCE_EXHAUSTED ? 0 : 1;
        }
        if (pages <= want) ms[pages] = (now_s() - p0) * 1e3;
        pages++;
        seen += (long)r->n_entries;
        snprintf(token, sizeof token, "%s", r->next_page_token);
        hyc_free(r);
        if (!token[0]) break;
        if (pages > want) {
            fprintf(stderr, "hypic-bench million: List gave more than %ld pages\n", want);
            free(ms);
            return 1;
        }
    }
    s->list_total_s = now_s() - t0;
    if (seen != b->stored) {
        fprintf(stderr, "hypic-bench million: List paged through %ld entries of %ld\n", seen,
                b->stored);
        free(ms);
        return 1;
    }
    s->list_pages = pages;
    s->list_first_ms = ms[0];
    s->list_last_ms = ms[pages - 1];
    s->list_p50_ms = pct(ms, (size_t)pages, 0.5);
    s->list_p99_ms = pct(ms, (size_t)pages, 0.99);
    free(ms);
    return 0;
}

/* Rate of 4 KiB O_DIRECT writes each followed by fdatasync in dir: the device's
 * limit for puts that each flush once. NAN (saying why) when it cannot be had. */
static double sync_writes_per_s(const char *dir)
{
    char path[256];
    snprintf(path, sizeof path, "%s/sync-probe", dir);
    const int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0600);
    void *p = NULL;
    double r = NAN;
    if (fd < 0 || posix_memalign(&p, 4096, 4096)) {
        printf("  (the device's sync write rate not measured: cannot open %s with O_DIRECT)\n",
               path);
    } else {
        memset(p, 1, 4096);
        const int reps = 300;
        const double t0 = now_s();
        int k = 0;
        for (; k < reps; k++)
            if (pwrite(fd, p, 4096, (off_t)(k % 64) * 4096) != 4096 || fdatasync(fd)) break;
        if (k == reps) r = reps / (now_s() - t0);
    }
    free(p);
    if (fd >= 0) close(fd);
    unlink(path);
    return r;
}

/* --- hand-over ------------------------------------------------------------------------- */

/* The configuration of cluster member id: the daemon's, in a cluster under
 * /million/ in b's etcd. */
static void member_yaml(const bench *b, const char *id, char *out, size_t cap)
{
    snprintf(out, cap,
             "%scluster: {id: %s, etcd: {endpoints: \"%s\", prefix: /million/, ttl_s: %d}}\n",
             b->yaml, id, b->etcd.endpoint, TTL_S);
}

/* The hand-over of a joining member's share (see the top of the file); the
 * daemon is up alone again after it. 0, or 1 after saying why. */
static int handover(bench *b, long n, stage *s)
{
    if (b->etcd.pid <= 0) return 0;
    char y1[sizeof b->yaml + 200];
    member_yaml(b, "m1", y1, sizeof y1);
    member_yaml(b, "m2", b->yaml2, sizeof b->yaml2);
    if (daemon_down(b, NULL) || daemon_up(b, y1, NULL)) return 1;
    hy_bench_member a = {0}, z = {0}; /* the daemon's, the newcomer's */
    for (int i = 0; i < 100 && !(hy_bench_member_stats(b->d.grpc, &a) && a.members == 1); i++)
        usleep(50000);
    if (a.members != 1 || a.entries != (uint64_t)n) {
        fprintf(stderr,
                "hypic-bench million: as a cluster member the daemon sees %d members and "
                "%llu entries (expected 1 and %ld)\n",
                a.members, (unsigned long long)a.entries, n);
        return 1;
    }
    const uint64_t h0 = a.handed;
    if (mkdir(b->dir2, 0700) != 0) {
        fprintf(stderr, "hypic-bench million: cannot make %s: %s\n", b->dir2, strerror(errno));
        return 1;
    }
    const double t0 = now_s();
    if (hy_daemon_start(&b->d2, b->dir2, b->yaml2) != 0) {
        fprintf(stderr, "hypic-bench million: the joining member did not start\n");
        return 1;
    }
    /* done once the first member's count of entries handed over and the
     * newcomer's entries have both held still for 2 s, the queue empty */
    const double limit = 120 + (double)n / 500;
    double changed = now_s();
    uint64_t last_h = UINT64_MAX, last_e2 = UINT64_MAX;
    bool done = false;
    while (!done && now_s() - t0 < limit) {
        usleep(100000);
        if (!hy_bench_member_stats(b->d.grpc, &a) || !hy_bench_member_stats(b->d2.grpc, &z))
            continue;
        if (a.handed != last_h || z.entries != last_e2)
            last_h = a.handed, last_e2 = z.entries, changed = now_s();
        done = a.members == 2 && a.queued == 0 && a.handed > h0 && now_s() - changed >= 2;
    }
    const uint64_t handed = a.handed - h0;
    if (!done || z.entries != handed) {
        fprintf(stderr,
                "hypic-bench million: hand-over %s after %.0f s: %llu entries handed over, "
                "the newcomer holds %llu, %llu still queued\n",
                done ? "incomplete" : "still going", now_s() - t0, (unsigned long long)handed,
                (unsigned long long)z.entries, (unsigned long long)a.queued);
        return 1;
    }
    s->handover_s = changed - t0;
    s->handover_per_s = (double)handed / s->handover_s;
    s->handover_share = (double)handed / (double)n;
    /* the newcomer killed and removed; the daemon alone again once its view
     * has shrunk back (so that its stop has nothing to hand over) */
    hy_daemon_stop_with(&b->d2, SIGKILL, 10);
    hy_bench_rmtree(b->dir2);
    for (int i = 0; i < 40 * TTL_S; i++) {
        if (hy_bench_member_stats(b->d.grpc, &a) && a.members == 1) break;
        usleep(100000);
    }
    if (daemon_down(b, NULL) || daemon_up(b, b->yaml, NULL)) return 1;
    printf("  hand-over: a member joining takes %llu entries (%.3f of them) in %.2f s, %.0f a "
           "second\n",
           (unsigned long long)handed, s->handover_share, s->handover_s, s->handover_per_s);
    fflush(stdout);
    return 0;
}

/* --- growth ---------------------------------------------------------------------------- */

static double slope(const stage *a, const stage *b, size_t off)
{
    const double ya = *(const double *)((const char *)a + off);
    const double yb = *(const double *)((const char *)b + off);
    if (!(ya > 0) || !(yb > 0)) return NAN;
    return log(yb / ya) / log((double)b->n / (double)a->n);
}

static const char *growth(double k)
{
    return isnan(k)  ? "-"
           : k < 0.1 ? "constant"
           : k < 0.5 ? "log"
           : k < 1.2 ? "linear"
                     : "SUPERLINEAR";
}

typedef struct figure {
    const char *name, *unit, *expect, *file;
    size_t off;
} figure;

static const figure k_figs[] = {
    {"index memory per entry", "B", "constant", "rss_per_entry", offsetof(stage, rss_per_entry)},
    {"Lookup p50 (hit)", "us", "log", "lookup_p50", offsetof(stage, lookup_p50_us)},
    {"Lookup p99 (hit)", "us", "log", "lookup_p99", offsetof(stage, lookup_p99_us)},
    {"Lookup p50 (miss)", "us", "log", "lookup_miss_p50", offsetof(stage, miss_p50_us)},
    {"List, every page", "s", "linear", "list_total", offsetof(stage, list_total_s)},
    {"List, first page", "ms", "log", "list_first", offsetof(stage, list_first_ms)},
    {"List, last page", "ms", "log", "list_last", offsetof(stage, list_last_ms)},
    {"List, page p99", "ms", "log", "list_p99", offsetof(stage, list_p99_ms)},
    {"puts/s, host evicting", "1/s", "constant", "evictions", offsetof(stage, evict_per_s)},
    {"open after SIGKILL", "s", "linear", "open_kill", offsetof(stage, open_kill_s)},
    {"open after clean stop", "s", "linear", "open_clean", offsetof(stage, open_clean_s)},
    {"clean stop", "s", "constant", "stop_clean", offsetof(stage, stop_clean_s)},
    {"hand-over to a joining member", "s", "linear", "handover", offsetof(stage, handover_s)},
    {"hand-over rate", "entries/s", "constant", "handover_rate", offsetof(stage, handover_per_s)},
};
enum { NFIGS = sizeof k_figs / sizeof *k_figs };

static double fig(const stage *s, int f)
{
    return *(const double *)((const char *)s + k_figs[f].off);
}

static void print_tables(const stage *st, int ns)
{
    for (int f = 0; f < NFIGS; f++) {
        printf("\n%s (%s; expected %s in N)\n", k_figs[f].name, k_figs[f].unit, k_figs[f].expect);
        printf("  %9s %12s %8s  %s\n", "N", "value", "slope", "growth from the previous stage");
        for (int i = 0; i < ns; i++) {
            const double k = i ? slope(&st[i - 1], &st[i], k_figs[f].off) : NAN;
            if (isnan(fig(&st[i], f)))
                printf("  %9ld %12s\n", st[i].n, "-");
            else
                printf("  %9ld %12.3f %8.2f  %s\n", st[i].n, fig(&st[i], f), k, i ? growth(k) : "");
        }
    }
}

static void plots(const char *out, const stage *st, int ns)
{
    if (mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "hypic-bench million: cannot make %s: %s\n", out, strerror(errno));
        return;
    }
    for (int f = 0; f < NFIGS; f++) {
        char path[512], script[1024];
        snprintf(path, sizeof path, "%s/million_%s.dat", out, k_figs[f].file);
        FILE *d = fopen(path, "w");
        if (!d) {
            fprintf(stderr, "hypic-bench million: cannot write %s\n", path);
            continue;
        }
        for (int i = 0; i < ns; i++)
            if (!isnan(fig(&st[i], f))) fprintf(d, "%ld %.6g\n", st[i].n, fig(&st[i], f));
        fclose(d);
        snprintf(script, sizeof script,
                 "set terminal pngcairo size 640,400\nset output 'million_%s.png'\n"
                 "set title 'hypic-bench million: %s'\nset xlabel 'entries'\n"
                 "set ylabel '%s'\nset logscale xy\nset key left top\n"
                 "plot 'million_%s.dat' u 1:2 w lp lw 2 pt 7 t '%s (expected %s)'\n",
                 k_figs[f].file, k_figs[f].name, k_figs[f].unit, k_figs[f].file, k_figs[f].name,
                 k_figs[f].expect);
        char gp[64];
        snprintf(gp, sizeof gp, "million_%s.gp", k_figs[f].file);
        hy_bench_gnuplot(out, gp, script);
    }
}

/* "key":value for a measured figure (leading comma), nothing for NAN. */
static int jnum(char *out, size_t cap, const char *key, double v)
{
    return isnan(v) ? 0 : snprintf(out, cap, ",\"%s\":%.6g", key, v);
}

static void print_json(const stage *st, int ns, long max_n, double sync_rate, double open_empty,
                       double empty_lookup_us)
{
    char j[4096];
    int at = snprintf(j, sizeof j, "{\"bench\":\"million\",\"max_entries\":%ld", max_n);
    const stage *last = &st[ns - 1];
    at += jnum(j + at, sizeof j - (size_t)at, "rss_bytes_per_entry", last->rss_per_entry);
    at += jnum(j + at, sizeof j - (size_t)at, "meta_bytes_in_index", (double)sizeof(hy_meta));
    static const struct {
        const char *name;
        size_t off;
    } groups[] = {{"rss_bytes_per_entry_at", offsetof(stage, rss_per_entry)},
                  {"lookup_p50_us", offsetof(stage, lookup_p50_us)},
                  {"lookup_p99_us", offsetof(stage, lookup_p99_us)},
                  {"lookup_miss_p50_us", offsetof(stage, miss_p50_us)},
                  {"list_page_p50_ms", offsetof(stage, list_p50_ms)},
                  {"list_total_s", offsetof(stage, list_total_s)},
                  {"open_s_kill_at", offsetof(stage, open_kill_s)},
                  {"open_s_clean_at", offsetof(stage, open_clean_s)},
                  {"handover_s_at", offsetof(stage, handover_s)},
                  {"handover_entries_per_s_at", offsetof(stage, handover_per_s)}};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        char part[512] = "";
        int pl = 0;
        for (int i = 0; i < ns; i++) {
            const double v = *(const double *)((const char *)&st[i] + groups[g].off);
            if (!isnan(v))
                pl += snprintf(part + pl, sizeof part - (size_t)pl, "%s\"n%ld\":%.6g",
                               pl ? "," : "", st[i].n, v);
        }
        if (pl) at += snprintf(j + at, sizeof j - (size_t)at, ",\"%s\":{%s}", groups[g].name, part);
    }
    at += jnum(j + at, sizeof j - (size_t)at, "list_pages",
               last->list_pages > 0 ? (double)last->list_pages : NAN);
    at += jnum(j + at, sizeof j - (size_t)at, "list_page_ms_first", last->list_first_ms);
    at += jnum(j + at, sizeof j - (size_t)at, "list_page_ms_last", last->list_last_ms);
    at += jnum(j + at, sizeof j - (size_t)at, "list_page_p99_ms", last->list_p99_ms);
    at += jnum(j + at, sizeof j - (size_t)at, "puts_per_s", last->put_per_s);
    at += jnum(j + at, sizeof j - (size_t)at, "evictions_per_s", last->evict_per_s);
    at += jnum(j + at, sizeof j - (size_t)at, "sync_writes_per_s", sync_rate);
    at += jnum(j + at, sizeof j - (size_t)at, "open_s_empty", open_empty);
    at += jnum(j + at, sizeof j - (size_t)at, "lookup_empty_store_p50_us", empty_lookup_us);
    at += jnum(j + at, sizeof j - (size_t)at, "open_s_clean", last->open_clean_s);
    at += jnum(j + at, sizeof j - (size_t)at, "open_s_kill", last->open_kill_s);
    at += jnum(j + at, sizeof j - (size_t)at, "stop_s_clean", last->stop_clean_s);
    at += jnum(j + at, sizeof j - (size_t)at, "handover_s", last->handover_s);
    at += jnum(j + at, sizeof j - (size_t)at, "handover_entries_per_s", last->handover_per_s);
    at += jnum(j + at, sizeof j - (size_t)at, "handover_share", last->handover_share);
    snprintf(j + at, sizeof j - (size_t)at, "}");
    printf("%s\n", j);
}

/* --- the run --------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: hypic-bench million [--max N] [--quick] [--out DIR] [--daemon PATH]\n");
}

/* The prototype entry: segment 0's, built by the tiny model in the daemon's
 * default representation (pic.tolerance 0.03, every part bf16-allowed). */
static int make_prototype(bench *b)
{
    hy_err e = {0};
    if (hy_bench_open(&b->bm, b->model_dir)) return 1;
    uint32_t t[SEG];
    int32_t ids[SEG];
    tokens_of(0, false, t);
    for (int j = 0; j < SEG; j++) ids[j] = (int32_t)t[j];
    const hy_entry_repr repr = {
        .s = HY_ENTRY_BF16, .t = HY_ENTRY_BF16, .kv = HY_ENTRY_BF16, .tol = 0.03f};
    hy_entry *ent = NULL;
    if (hy_entry_build(b->bm.ex, b->bm.st, ids, SEG, HY_SEAM_DEFAULT, repr, NULL, &ent, &e) ||
        hy_entry_serialize(ent, &b->proto, &b->proto_len, &e)) {
        fprintf(stderr, "hypic-bench million: building the prototype entry: %s\n", e.msg);
        hy_entry_free(ent);
        return 1;
    }
    hy_entry_free(ent);
    return 0;
}

static int run_stage(bench *b, long n, long rss0_kb, stage *s, hy_rng *rng)
{
    memset(s, 0, sizeof *s);
    for (size_t f = 0; f < NFIGS; f++) *(double *)((char *)s + k_figs[f].off) = NAN;
    s->list_p50_ms = s->put_per_s = s->handover_share = NAN;
    s->n = n;
    printf("stage %ld: putting %ld entries ...\n", n, n - b->stored);
    fflush(stdout);
    if (fill(b, n, s)) return 1;
    const long kb = hy_bench_proc_status_kb(b->d.pid, "VmRSS");
    if (kb > 0 && rss0_kb > 0) s->rss_per_entry = (double)(kb - rss0_kb) * 1024.0 / (double)n;
    printf("  %.0f puts/s; RSS %ld KiB (%+ld KiB); Lookups ...\n", s->put_per_s, kb, kb - rss0_kb);
    fflush(stdout);
    if (lookups(b, s, rng)) return 1;
    printf("  Lookup p50 %.0f us, p99 %.0f us (a miss %.0f us); List, every page ...\n",
           s->lookup_p50_us, s->lookup_p99_us, s->miss_p50_us);
    fflush(stdout);
    if (list_all(b, s)) return 1;
    daemon_down_kill(b);
    if (daemon_up(b, b->yaml, &s->open_kill_s)) return 1;
    uint64_t entries, host, ev;
    if (stats_of(b, &entries, &host, &ev)) return 1;
    if (entries != (uint64_t)n) {
        fprintf(stderr, "hypic-bench million: %llu entries after SIGKILL and open, of %ld put\n",
                (unsigned long long)entries, n);
        return 1;
    }
    if (daemon_down(b, &s->stop_clean_s) || daemon_up(b, b->yaml, &s->open_clean_s)) return 1;
    if (stats_of(b, &entries, &host, &ev)) return 1;
    if (entries != (uint64_t)n) {
        fprintf(stderr, "hypic-bench million: %llu entries after a clean stop and open, of %ld\n",
                (unsigned long long)entries, n);
        return 1;
    }
    printf(
        "  List %ld pages in %.2f s; open after SIGKILL %.2f s, clean stop %.2f s, open %.2f s\n",
        s->list_pages, s->list_total_s, s->open_kill_s, s->stop_clean_s, s->open_clean_s);
    fflush(stdout);
    return handover(b, n, s);
}

int hy_bench_million(int argc, char **argv)
{
    long max_n = 1000000;
    const char *out = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max_n = atol(argv[++i]);
        else if (!strcmp(argv[i], "--quick"))
            max_n = 10000;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--daemon") && i + 1 < argc)
            setenv("HYPIC_CACHED", argv[++i], 1);
        else {
            usage();
            return 2;
        }
    }
    if (max_n < 1000 || max_n > 100000000) {
        fprintf(stderr, "hypic-bench million: --max must be in 1000..100000000\n");
        return 2;
    }
    static bench b; /* the daemon's and the model's handles */
    memset(&b, 0, sizeof b);
    if (hy_bench_mkdtemp("million", b.tmp, sizeof b.tmp)) return 1;
    snprintf(b.model_dir, sizeof b.model_dir, "%s/tiny", b.tmp);
    snprintf(b.dir, sizeof b.dir, "%s/daemon", b.tmp);
    snprintf(b.dir2, sizeof b.dir2, "%s/joining", b.tmp);
    stage st[MAX_STAGES];
    int ns = 0, rc = 1;
    double sync_rate = NAN;
    hy_err e = {0};
    if (hy_model_init("tiny", 1, b.model_dir, "F32", &e)) {
        fprintf(stderr, "hypic-bench million: generating tiny in %s: %s\n", b.model_dir, e.msg);
        goto out;
    }
    if (make_prototype(&b)) goto out;
    /* The host tier holds a few thousand entries (each takes whole pages of
     * its arena), so every stage past the first puts into a full one; NVMe
     * has room for every entry with its page padding, twice over. */
    const uint64_t pages = (b.proto_len + HY_PAGE - 1) / HY_PAGE;
    const unsigned host_mib = max_n <= 10000 ? 8 : 64;
    const uint64_t nvme_mib = 256 + (uint64_t)max_n * pages * HY_PAGE * 2 / (1u << 20);
    snprintf(b.yaml, sizeof b.yaml,
             "listen: 127.0.0.1:0\n"
             "http_listen: \"\"\n"
             "models:\n"
             "  - {name: tiny, path: \"%s\"}\n"
             "tiers:\n"
             "  host: {bytes: %uM}\n"
             "  nvme: {path: var/nvme, bytes: %lluM, extent_bytes: 64M, write_through: true}\n"
             "transport:\n"
             "  shm_socket: \"off\"\n" /* none left under $TMPDIR by the SIGKILLs */
             "limits:\n"
             "  page_size: %d\n"
             "log:\n"
             "  requests: false\n",
             b.model_dir, host_mib, (unsigned long long)nvme_mib, PAGE);
    printf("an entry: tiny's entry of an %d-token segment, %zu bytes (%llu pages); host tier %u "
           "MiB (about %llu entries), NVMe written through\n",
           SEG, b.proto_len, (unsigned long long)pages, host_mib,
           (unsigned long long)((uint64_t)host_mib * (1u << 20) / (pages * HY_PAGE)));
    if (mkdir(b.dir, 0700) != 0) {
        fprintf(stderr, "hypic-bench million: cannot make %s: %s\n", b.dir, strerror(errno));
        goto out;
    }
    if (daemon_up(&b, b.yaml, &b.open_empty)) goto out;
    sync_rate = sync_writes_per_s(b.dir);
    uint64_t en, hn, ev;
    if (stats_of(&b, &en, &hn, &ev)) goto out; /* the first call's allocations before RSS */
    {
        double v[MISSES];
        int hit = 0;
        for (int k = 0; k < MISSES; k++)
            if (isnan(v[k] = lookup_once(&b, (uint64_t)k, true, &hit))) goto out;
        b.empty_lookup_us = pct(v, MISSES, 0.5);
    }
    const long rss0 = hy_bench_proc_status_kb(b.d.pid, "VmRSS");
    if (access(HY_TEST_ETCD_BIN, X_OK) != 0)
        printf("hand-over: not measured, %s is not installed (Debian's etcd-server; make deps)\n",
               HY_TEST_ETCD_BIN);
    else if (hy_test_etcd_start(&b.etcd) != 0)
        printf("hand-over: not measured, etcd did not start\n");
    printf("hypic-cached ready in %.2f s with an empty store (times to ready are polled every "
           "0.1 s by the fixture), RSS %ld KiB, a Lookup %.0f us; the device: %.0f 4 KiB "
           "writes + fdatasync per second\n",
           b.open_empty, rss0, b.empty_lookup_us, sync_rate);
    hy_rng rng;
    hy_rng_seed(&rng, 42);
    for (long n = 1000; ns < MAX_STAGES; n *= 10) {
        if (n > max_n) n = max_n;
        if (run_stage(&b, n, rss0, &st[ns], &rng)) goto out;
        ns++;
        if (n == max_n) break;
    }
    print_tables(st, ns);
    printf("\nlimits: index memory at least a key and a location per entry (48 B; the store keeps "
           "a hy_meta of %zu B per entry, plus the catalog's caches); a Lookup at least the same "
           "Lookup in the empty store (%.0f us); evicting puts at most the device's sync write "
           "rate (%.0f/s: a "
           "put to NVMe flushes once); opening at least the empty store's %.2f s\n",
           sizeof(hy_meta), b.empty_lookup_us, sync_rate, b.open_empty);
    if (out) plots(out, st, ns);
    print_json(st, ns, max_n, sync_rate, b.open_empty, b.empty_lookup_us);
    rc = 0;
out:
    if (b.c) hyc_close(b.c);
    if (b.d2.pid > 0) hy_daemon_stop_with(&b.d2, SIGKILL, 10);
    if (b.d.pid > 0) hy_daemon_stop_with(&b.d, SIGTERM, 60);
    if (b.etcd.pid > 0) hy_test_etcd_stop(&b.etcd);
    hy_bench_close(&b.bm);
    free(b.proto);
    hy_bench_rmtree(b.tmp);
    return rc;
}
