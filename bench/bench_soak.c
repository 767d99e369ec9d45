/*
 * hypic-bench soak: a day of traffic, compressed. The RAG trace of
 * `hypic-bench rag` (bench_trace.h) is replayed for --minutes of wall time
 * (30 by default) against a real hypic-cached whose host tier holds a tenth of
 * the trace's working set, with NVMe behind it, so that the host tier evicts
 * and demotes, and NVMe hits promote, all the time. The question is
 * stability, not speed: after a warm-up
 *   - the daemon's resident memory stays flat (growth < 5 %),
 *   - its file descriptors and transport sessions do not grow,
 *   - no call fails,
 * and the hit rate of each tier (host, NVMe, miss) is what the policy
 * simulator of `hypic-bench policies` predicts for the same requests.
 *
 * The model is the `tiny` preset (--preset changes it): a request costs
 * milliseconds, so thirty minutes on two cores make hundreds of thousands of
 * requests, a million segment lookups, evictions, demotions, promotions,
 * inline builds and connection and session turnover: what a leak needs to
 * show. `small` has realistic entry sizes but serves about one request a
 * second here, too few for a leak per request to show in thirty minutes.
 * The store's paths do not depend on the model's size, only the bytes do.
 *
 * How it runs:
 *   1. the model is generated into a temporary directory ($TMPDIR), the trace
 *      generated (docs/rag.md's generator, --docs documents);
 *   2. a probe daemon builds every distinct document of the trace with Warm
 *      and reports each entry's bytes and tokens (Lookup) and recompute cost
 *      (List); it is stopped and its files removed. The working set is the
 *      sum of the entries' bytes in host pages (the arena's granularity);
 *   3. the daemon under test: host tier --host-frac (0.1) of the working set
 *      with the daemon's default policies (gdsf eviction, tinylfu admission;
 *      --evict and --admit change them), NVMe (gdsf, admit always, write-back)
 *      with room for the whole working set twice, pic.reuse fetch (a stored
 *      segment is always a hit, so hits are the store's to decide, not the
 *      fetch-or-recompute estimate's);
 *   4. --clients (16) threads, each its own connection, send the trace's
 *      requests in order, closed loop (each sends its next request when its
 *      last one is answered: the daemon is kept busy, which is what makes
 *      many requests), mode pic; the trace is replayed from its start again
 *      when it runs out. Each client, to exercise what a day of clients does,
 *      sends every 8th request through a transport session (the state
 *      delivered into its buffer; --state-every), follows every 16th with a
 *      Lookup holding a 50 ms lease on the same segments (--lease-every), and
 *      every 256 requests closes its session and connection and opens new
 *      ones (--reconnect-every); 0 turns one off;
 *   5. after the warm-up (--warmup seconds; default a tenth of the run, at
 *      least one interval) the clients park (every session and connection
 *      closed) and the daemon is measured idle: file descriptors by kind,
 *      transport sessions; then they go on; at the end they stop and the
 *      daemon is measured idle again;
 *   6. every --interval seconds (60) a progress line: requests, errors,
 *      requests/s, latency p50/p99 (client, per request, in the interval),
 *      the daemon's RSS (/proc/PID/status) and open fds (/proc/PID/fd), its
 *      transport sessions (/metrics), and per interval from Stats: hits by
 *      tier, misses, host evictions, demotions, promotions.
 *
 * The verdicts (each PASS or FAIL; a full run exits 1 when one fails, --quick
 * judges only errors and that it ran):
 *   - RSS growth: the median RSS of the last 5 intervals over that of the
 *     first 5 after the warm-up (a third of the intervals each when fewer;
 *     RSS_WINDOW says why), < 5 %;
 *   - fd growth: descriptors other than the NVMe tier's own files (extents
 *     and catalog, which grow with what is stored and RocksDB's compactions:
 *     printed apart), idle at the end minus idle after the warm-up: 0, each
 *     count taken once it has held for a second (the daemon closes a
 *     connection when it reads the client's close), by kind;
 *   - session growth: the same for /metrics' hypic_transport_sessions: 0;
 *   - errors: calls that failed at the clients plus the daemon's non-OK
 *     answers (/metrics' hypic_requests_total): 0;
 *   - hit rate per tier over the requests sent after the warm-up, from the
 *     Prefill outcomes (a hit's tier is where its bytes came from), against
 *     the simulator (hy_bench_policy_replay) replaying the same requests'
 *     segments in the order sent: the host tier's hit rate from a replay at
 *     the host tier's policy and capacity × 0.825 (the mean of the store's
 *     demotion watermarks, 0.75 and 0.9: the host tier's occupancy moves
 *     between them), a hit anywhere from a replay at NVMe's policy and
 *     capacity, NVMe's the difference; each within 0.05.
 *     The replays pin the segments of the last --clients requests, as the
 *     leases of the requests in flight pin them in the store. The simulator
 *     offers every host miss with its victim; the store weighs an NVMe hit
 *     it brings up against the eviction candidate only once the host tier is
 *     past its low watermark (tiers/store.c, host_would_displace), and
 *     admits it unasked below: the prediction with `admit: always` is
 *     printed too, the bound on that side.
 *     Other differences are small: a segment two requests in flight miss at
 *     once is built twice, and the Lookup leases add accesses.
 * Leases are not counted by Stats or /metrics, so they are not measured (a
 * lease that leaked would hold host bytes and show in the host hit rate).
 *
 * The warm-up must outlast the filling of the daemon's fixed-size caches:
 * the NVMe tier persists each entry's hits at most once a second, so its
 * catalog's RocksDB memtables (8 MiB, two) and block cache fill under a
 * steady read load before they turn over (heaptrack, --quick: most of the
 * daemon's heap growth in its first minute is there).
 *
 *   hypic-bench soak [--quick] [--minutes M] [--interval S] [--warmup S] [--clients N]
 *                    [--docs N] [--zipf S] [--k K] [--doc-median L] [--seed N]
 *                    [--host-frac F] [--evict P] [--admit P] [--state-every N]
 *                    [--lease-every N] [--reconnect-every N] [--preset NAME] [--daemon PATH]
 */
#include "bench.h"
#include "bench_soak.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hypic_client.h"

#include "../tests/cached/daemon_fixture.h"

#include <arpa/inet.h>
#include <assert.h>
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

enum {
    MAX_CLIENTS = 256,
    MAX_POINTS = 1200,
    LEASE_MS = 50,
    TRACE_REQUESTS = 20000, /* replayed from the start when the run outlasts it */
};
#define SESSION_BYTES  ((uint64_t)64 << 20)
#define WATERMARK_MEAN 0.825 /* the store's demotion watermarks, 0.75 and 0.9 */
#define HIT_TOLERANCE  0.05
#define RSS_TOLERANCE  0.05
/* The RSS is compared as the median of the first RSS_WINDOW intervals after
 * the warm-up against that of the last RSS_WINDOW: the NVMe catalog's
 * memtables (two of 8 MiB) fill and are dropped in turn, a saw-tooth of
 * several MiB on a daemon of ~90 MiB that one interval's figure against
 * another's would take for growth or hide it. */
#define RSS_WINDOW 5

/* Segment outcomes of Prefill: where a hit's bytes came from, or a miss. */
enum { OUT_HOST, OUT_NVME, OUT_HBM, OUT_MISS, OUT_UNCACHEABLE, OUT_N };

typedef struct opts {
    hy_rag_gen g;
    double minutes, interval, warmup, host_frac;
    int clients;
    /* each client's mix: every state_every-th request delivers its state
     * through the session, every lease_every-th is followed by a Lookup with
     * a lease, every reconnect_every requests a new connection and session;
     * 0: never */
    int state_every, lease_every, reconnect_every;
    bool quick;
    const char *preset, *evict, *admit;
} opts;

/* One interval's figures; NAN (or -1 for counts) when not measured. */
typedef struct point {
    double t;                  /* seconds since the load started, at the interval's end */
    bool warm;                 /* the interval ended inside the warm-up */
    uint64_t requests, errors; /* in the interval (client side) */
    double rps, p50_ms, p99_ms, rss_mb, anon_mb; /* anon: RssAnon, the heap's part */
    long fds;
    double sessions;
    uint64_t hits[3], misses, evictions, demotions, promotions; /* Stats, in the interval */
    double host_mb; /* Stats: the host tier's bytes at the interval's end */
} point;

/* Kinds of descriptor, as /proc/PID/fd's links name them. */
enum { FD_TIER, FD_SOCKET, FD_PIPE, FD_ANON, FD_FILE, FD_KINDS };
static const char *const fd_kind_name[FD_KINDS] = {"tier", "socket", "pipe", "anon_inode", "file"};

/* The daemon idle: descriptors by kind, sessions, RSS. */
typedef struct idle {
    long fds, tier_fds; /* every fd; of them, files under the NVMe tier's directory */
    long kind[FD_KINDS];
    double sessions, leases, rss_mb;
} idle;

/* Cumulative Stats counters. */
typedef struct counters {
    uint64_t hits[3], misses, evictions, demotions, promotions;
    uint64_t host_bytes; /* a gauge */
} counters;

/* What the clients share with the sampler. mu guards everything below it. */
typedef struct shared {
    const opts *o;
    const hy_rag_trace *t;
    int vocab;
    const char *model, *target;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    size_t next;            /* the next request's index (request i is trace[i % n]) */
    size_t warm_end;        /* the first index sent after the warm-up; SIZE_MAX before */
    bool park, stop;        /* park: close everything and wait; stop: return */
    int parked;             /* clients parked */
    double *lat;            /* latencies of the interval, ms, [nlat] */
    size_t nlat, cap;       /* (a request failing adds none) */
    uint64_t done, errors;  /* since the start */
    uint64_t out[2][OUT_N]; /* segment outcomes: [0] warm-up, [1] after it */
    uint64_t recomputed;    /* hits recomputed instead (none with pic.reuse fetch) */
    int said;               /* error messages printed */
} shared;

typedef struct client {
    shared *s;
    int id;
    pthread_t thread;
} client;

/* --- the daemon from outside: /proc and /metrics ------------------------------------ */

/* A field of /proc/PID/status ("VmRSS", "RssAnon") in MiB; NAN when absent. */
static double status_mb(pid_t pid, const char *field)
{
    const long kb = hy_bench_proc_status_kb(pid, field);
    return kb < 0 ? NAN : (double)kb / 1024.0;
}

/* Open descriptors of pid; kind[FD_KINDS] (NULL: not counted): of them, by
 * kind, FD_TIER the files under tier_dir (NULL: none). -1 when /proc cannot
 * be read. */
static long count_fds(pid_t pid, const char *tier_dir, long *kind)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    long n = 0, k[FD_KINDS] = {0};
    const size_t tl = tier_dir ? strlen(tier_dir) : 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char target[PATH_MAX];
        const ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        n++;
        if (len <= 0) continue; /* closed since the listing */
        target[len] = '\0';
        if (tl && strncmp(target, tier_dir, tl) == 0)
            k[FD_TIER]++;
        else if (strncmp(target, "socket:", 7) == 0)
            k[FD_SOCKET]++;
        else if (strncmp(target, "pipe:", 5) == 0)
            k[FD_PIPE]++;
        else if (strncmp(target, "anon_inode:", 11) == 0)
            k[FD_ANON]++;
        else
            k[FD_FILE]++;
    }
    closedir(d);
    if (kind) memcpy(kind, k, sizeof k);
    return n;
}

/* GET path from http ("host:port", numeric IPv4) into a malloc'd string
 * (the body), or NULL. The daemon's HTTP side closes after an HTTP/1.0
 * answer. */
static char *http_get(const char *http, const char *path)
{
    char host[64];
    const char *colon = strrchr(http, ':');
    if (!colon || colon - http >= (long)sizeof host) return NULL;
    snprintf(host, sizeof host, "%.*s", (int)(colon - http), http);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return NULL;
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return NULL;
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char rq[640];
    const int len = snprintf(rq, sizeof rq, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, http);
    size_t n = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    if (!buf || connect(fd, (struct sockaddr *)&a, sizeof a) || send(fd, rq, (size_t)len, 0) != len)
        goto fail;
    for (ssize_t k; (k = recv(fd, buf + n, cap - 1 - n, 0)) != 0;) {
        if (k < 0) goto fail;
        n += (size_t)k;
        if (n == cap - 1) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) goto fail;
            buf = nb;
        }
    }
    close(fd);
    buf[n] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.", 7) != 0 || atoi(buf + 9) != 200 || !body) {
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}

/* From the daemon's /metrics: open transport sessions and the calls it
 * answered with another code than OK. false when it could not be read. */
static bool scrape(const hy_daemon *d, double *sessions, uint64_t *not_ok)
{
    char *m = d->http[0] ? http_get(d->http, "/metrics") : NULL;
    if (!m) return false;
    *sessions = NAN;
    *not_ok = 0;
    for (char *line = m, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strncmp(line, "hypic_transport_sessions ", 25) == 0) *sessions = atof(line + 25);
        if (strncmp(line, "hypic_requests_total{", 21) == 0 && !strstr(line, "code=\"OK\"")) {
            const char *v = strrchr(line, ' ');
            if (v) *not_ok += strtoull(v + 1, NULL, 10);
        }
    }
    free(m);
    return !isnan(*sessions);
}

/* Stats on a connection of its own: the cumulative counters, and whether the
 * daemon is idle (nothing in flight but this call, nothing queued). */
static int stats(const char *target, counters *c, bool *idle_now)
{
    hyc_options o = {.target = target, .deadline_ms = 30000};
    hyc *h = NULL;
    hyc_status st;
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    if (hyc_open(&o, &h, &st) || hyc_stats(h, &q, &r, &st)) {
        fprintf(stderr, "hypic-bench soak: Stats: %s\n", st.msg);
        hyc_close(h);
        return 1;
    }
    memset(c, 0, sizeof *c);
    c->misses = r->misses;
    for (size_t i = 0; i < r->n_tiers; i++) {
        const Hypic__V1__TierStats *t = r->tiers[i];
        const int k = t->tier == HYPIC__V1__TIER__TIER_HOST   ? OUT_HOST
                      : t->tier == HYPIC__V1__TIER__TIER_NVME ? OUT_NVME
                                                              : OUT_HBM;
        c->hits[k] = t->hits;
        if (k == OUT_HOST) {
            c->evictions = t->evictions;
            c->demotions = t->demotions;
            c->promotions = t->promotions;
            c->host_bytes = t->bytes;
        }
    }
    if (idle_now) *idle_now = r->requests_in_flight == 0 && r->queue_depth == 0;
    hyc_free(r);
    hyc_close(h);
    return 0;
}

/* --- the clients -------------------------------------------------------------------- */

static void client_error(shared *s, const char *what, size_t i, const hyc_status *st)
{
    pthread_mutex_lock(&s->mu);
    s->errors++;
    const bool say = s->said++ < 5;
    pthread_mutex_unlock(&s->mu);
    if (say)
        fprintf(stderr, "hypic-bench soak: request %zu: %s: %s: %s\n", i, what,
                hyc_code_name(st->code), st->msg);
}

/* A connection and its session; false (said) when either failed. */
static bool client_connect(shared *s, hyc **c, hyc_session **ss)
{
    hyc_options o = {.target = s->target, .deadline_ms = 60000};
    hyc_status st = {0};
    if (hyc_open(&o, c, &st) || hyc_session_open(*c, NULL, SESSION_BYTES, ss, &st)) {
        client_error(s, "connecting and opening a transport session", SIZE_MAX, &st);
        hyc_close(*c);
        *c = NULL;
        *ss = NULL;
        return false;
    }
    return true;
}

static void client_disconnect(hyc **c, hyc_session **ss)
{
    hyc_session_close(*ss); /* CloseTransport on its own connection */
    hyc_close(*c);
    *ss = NULL;
    *c = NULL;
}

/* A Lookup holding a short lease on the request's segments (the lease table's
 * path: taken, expired, reaped). */
static void lookup_leased(shared *s, hyc *c, const hy_rag_wire *w, size_t i)
{
    Hypic__V1__LookupRequest q = HYPIC__V1__LOOKUP_REQUEST__INIT;
    q.model = (char *)s->model;
    q.n_segments = w->rq.n_segments;
    q.segments = w->rq.segments;
    q.lease_ms = LEASE_MS;
    Hypic__V1__LookupResponse *r = NULL;
    hyc_status st;
    if (hyc_lookup(c, &q, &r, &st)) client_error(s, "Lookup", i, &st);
    hyc_free(r);
}

/* Sends request i; records its latency and segment outcomes. */
static void send_request(shared *s, hyc *c, hyc_session *ss, size_t i, bool after, int nth)
{
    const hy_rag_request *q = &s->t->r[i % s->t->n];
    hy_rag_wire w;
    hyc_status st = {0};
    if (hy_rag_wire_make(&w, q, i, s->vocab, s->model)) {
        st.code = HYC_RESOURCE_EXHAUSTED;
        snprintf(st.msg, sizeof st.msg, "client: out of memory");
        client_error(s, "building the request", i, &st);
        return;
    }
    w.rq.mode = HYPIC__V1__MODE__MODE_PIC;
    Hypic__V1__PrefillResponse *r = NULL;
    const int se = s->o->state_every, le = s->o->lease_every;
    const bool state = se && nth % se == se - 1;
    const double t0 = hy_now_s();
    const int rc =
        state ? hyc_prefill_state(c, ss, 0, &w.rq, &r, &st) : hyc_prefill(c, &w.rq, &r, &st);
    const double ms = (hy_now_s() - t0) * 1e3;
    if (rc) {
        client_error(s, state ? "Prefill (state through a session)" : "Prefill", i, &st);
    } else {
        uint64_t out[OUT_N] = {0}, rec = 0;
        for (size_t j = 0; j < r->n_segments; j++) {
            const Hypic__V1__SegmentOutcome *o = r->segments[j];
            rec += o->recomputed;
            if (o->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT)
                out[o->tier == HYPIC__V1__TIER__TIER_HOST   ? OUT_HOST
                    : o->tier == HYPIC__V1__TIER__TIER_NVME ? OUT_NVME
                                                            : OUT_HBM]++;
            else if (o->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_UNCACHEABLE)
                out[OUT_UNCACHEABLE]++;
            else
                out[OUT_MISS]++;
        }
        pthread_mutex_lock(&s->mu);
        s->done++;
        s->recomputed += rec;
        for (int k = 0; k < OUT_N; k++) s->out[after][k] += out[k];
        if (s->nlat == s->cap) {
            const size_t cap = s->cap ? 2 * s->cap : 4096;
            double *nl = realloc(s->lat, cap * sizeof *nl);
            if (nl) s->lat = nl, s->cap = cap;
        }
        if (s->nlat < s->cap) s->lat[s->nlat++] = ms;
        pthread_mutex_unlock(&s->mu);
    }
    hyc_free(r);
    if (le && nth % le == le - 1) lookup_leased(s, c, &w, i);
    free(w.ids);
}

/* Closed loop until stop; parks (everything closed) while park is set. */
static void *client_main(void *arg)
{
    client *cl = arg;
    shared *s = cl->s;
    hyc *c = NULL;
    hyc_session *ss = NULL;
    /* each client's count starts elsewhere, so that their leases, state
     * deliveries and reconnections are spread over time, not all at once:
     * clients running at one speed would otherwise take their leases in the
     * same instant, a burst of every client's that the tenant's lease budget
     * (limits.lease_bytes_per_tenant) refuses on a small host tier */
    for (int nth = cl->id * 37;; nth++) {
        pthread_mutex_lock(&s->mu);
        if (s->park || s->stop) {
            pthread_mutex_unlock(&s->mu);
            client_disconnect(&c, &ss);
            pthread_mutex_lock(&s->mu);
            s->parked++;
            pthread_cond_broadcast(&s->cv);
            while (s->park && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
            s->parked--;
            if (s->stop) {
                pthread_mutex_unlock(&s->mu);
                return NULL;
            }
        }
        const size_t i = s->next++;
        const bool after = i >= s->warm_end;
        pthread_mutex_unlock(&s->mu);
        const int re = s->o->reconnect_every;
        if (c && re && nth % re == 0) client_disconnect(&c, &ss);
        if (!c && !client_connect(s, &c, &ss)) {
            usleep(100000); /* said and counted; try again with the next request */
            continue;
        }
        send_request(s, c, ss, i, after, nth);
    }
}

/* Sets park (or stop) and waits until every client has closed its
 * connection, then until the daemon is idle. 0, or 1 after saying why. */
static int park_all(shared *s, int nclients, bool stop, client *cl)
{
    pthread_mutex_lock(&s->mu);
    if (stop)
        s->stop = true;
    else
        s->park = true;
    pthread_cond_broadcast(&s->cv);
    if (!stop)
        while (s->parked < nclients) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    if (stop)
        for (int k = 0; k < nclients; k++) pthread_join(cl[k].thread, NULL);
    for (int k = 0; k < 300; k++) { /* 30 s */
        counters c;
        bool idle_now = false;
        if (stats(s->target, &c, &idle_now)) return 1;
        if (idle_now) return 0;
        usleep(100000);
    }
    fprintf(stderr, "hypic-bench soak: the daemon did not go idle within 30 s of the clients "
                    "stopping\n");
    return 1;
}

/* From the daemon's /metrics: the entries Lookup leases hold (NAN when it
 * could not be read). */
static double scrape_leases(const hy_daemon *d)
{
    char *m = d->http[0] ? http_get(d->http, "/metrics") : NULL;
    if (!m) return NAN;
    double v = NAN;
    const char *at = strstr(m, "\nhypic_leases ");
    if (at) v = atof(at + 14);
    free(m);
    return v;
}

static void measure_idle(const hy_daemon *d, const char *tier_dir, idle *out)
{
    uint64_t not_ok;
    /* the clients' leases last 50 ms and the daemon reaps them every 200 ms:
     * idle, every one is gone within a second or a lease is leaking */
    for (int i = 0; i < 30; i++) {
        out->leases = scrape_leases(d);
        if (!(out->leases > 0)) break;
        usleep(100000);
    }
    char real[PATH_MAX]; /* as /proc shows the files: symbolic links resolved */
    const char *dir = realpath(tier_dir, real) ? real : tier_dir;
    /* the connections the clients closed a moment ago may still be open at
     * the daemon (its side closes when it reads their end): counted once the
     * count has held for a second, or after ten */
    long last = -2;
    for (int i = 0, same = 0; i < 40 && same < 4; i++) {
        out->fds = count_fds(d->pid, dir, out->kind);
        same = out->fds == last ? same + 1 : 0;
        last = out->fds;
        usleep(250000);
    }
    out->tier_fds = out->fds >= 0 ? out->kind[FD_TIER] : 0;
    out->rss_mb = status_mb(d->pid, "VmRSS");
    if (!scrape(d, &out->sessions, &not_ok)) out->sessions = NAN;
}

/* --- reporting ---------------------------------------------------------------------- */

static double percentile(double *v, size_t n, double q)
{
    if (!n) return NAN;
    qsort(v, n, sizeof *v, hy_bench_cmp_double);
    const size_t k = (size_t)ceil(q * (double)n);
    return v[k ? k - 1 : 0];
}

static void print_point(const point *p)
{
    const int m = (int)(p->t / 60), sec = (int)fmod(p->t, 60);
    printf("  [%3d:%02d] %8llu req %7.1f/s  err %llu  p50 %7.1f ms  p99 %7.1f ms  rss %7.1f MiB "
           "(anon %.1f)  fds %3ld  sessions ",
           m, sec, (unsigned long long)p->requests, p->rps, (unsigned long long)p->errors,
           p->p50_ms, p->p99_ms, p->rss_mb, p->anon_mb, p->fds);
    if (isnan(p->sessions))
        printf("-");
    else
        printf("%.0f", p->sessions);
    printf("  host %.1f MiB  hits host %llu nvme %llu  misses %llu  evictions %llu demotions %llu "
           "promotions %llu%s\n",
           p->host_mb, (unsigned long long)p->hits[OUT_HOST], (unsigned long long)p->hits[OUT_NVME],
           (unsigned long long)p->misses, (unsigned long long)p->evictions,
           (unsigned long long)p->demotions, (unsigned long long)p->promotions,
           p->warm ? "  (warm-up)" : "");
    fflush(stdout);
}

/* "key":[v,...] of one series; a NAN is null. */
static void json_series(const char *key, const point *p, int n, size_t off, bool u64, bool comma)
{
    printf("%s\"%s\":[", comma ? "," : "", key);
    for (int i = 0; i < n; i++) {
        const char *f = (const char *)&p[i] + off;
        if (u64)
            printf("%s%llu", i ? "," : "", (unsigned long long)*(const uint64_t *)f);
        else if (isnan(*(const double *)f))
            printf("%snull", i ? "," : "");
        else
            printf("%s%.4g", i ? "," : "", *(const double *)f);
    }
    printf("]");
}

/* ,"key":v for a measured figure; nothing for NAN. */
static void json_num(const char *key, double v)
{
    if (!isnan(v)) printf(",\"%s\":%.6g", key, v);
}

static const char *verdict(int v)
{
    return v > 0 ? "PASS" : v == 0 ? "FAIL" : "not judged";
}

/* --- the run ---------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr,
            "usage: hypic-bench soak [--quick] [--minutes M] [--interval S] [--warmup S]\n"
            "         [--clients N] [--docs N] [--zipf S] [--k K] [--doc-median L] [--seed N]\n"
            "         [--host-frac F] [--evict P] [--admit P] [--state-every N]\n"
            "         [--lease-every N] [--reconnect-every N] [--preset NAME] [--daemon PATH]\n");
}

/* Fills o from argv. 0, or 2 after saying what is wrong. */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.g = {.query = 16, .lmin = 32, .lmax = 1024, .zipf = 1.0, .sigma = 0.5},
                .warmup = -1,
                .host_frac = 0.1,
                .preset = "tiny",
                .evict = "gdsf",
                .admit = "tinylfu"};
    double clients = 16, docs = -1, k = 4, seed = 1, median = -1, minutes = -1, interval = -1;
    double state_every = 8, lease_every = 16, reconnect_every = 256;
    const char *daemon = NULL;
    const struct {
        const char *name;
        double *num; /* a number in [lo, hi], or */
        const char **str;
        double lo, hi;
    } k_opts[] = {
        /* clang-format off */
        {"--minutes", &minutes, NULL, 0.1, 1440},
        {"--interval", &interval, NULL, 1, 3600},
        {"--warmup", &o->warmup, NULL, 0, 86400},
        {"--clients", &clients, NULL, 1, MAX_CLIENTS},
        {"--docs", &docs, NULL, 1, 1000000},
        {"--zipf", &o->g.zipf, NULL, 0, 10},
        {"--k", &k, NULL, 1, HY_RAG_MAX_K},
        {"--doc-median", &median, NULL, 1, 65536},
        {"--seed", &seed, NULL, 0, 2147483647},
        {"--host-frac", &o->host_frac, NULL, 0.001, 10},
        {"--state-every", &state_every, NULL, 0, 1e9},
        {"--lease-every", &lease_every, NULL, 0, 1e9},
        {"--reconnect-every", &reconnect_every, NULL, 0, 1e9},
        {"--evict", NULL, &o->evict, 0, 0},
        {"--admit", NULL, &o->admit, 0, 0},
        {"--preset", NULL, &o->preset, 0, 0},
        {"--daemon", NULL, &daemon, 0, 0},
        /* clang-format on */
    };
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            o->quick = true;
            continue;
        }
        size_t j = 0;
        while (j < sizeof k_opts / sizeof *k_opts && strcmp(argv[i], k_opts[j].name)) j++;
        if (j == sizeof k_opts / sizeof *k_opts || i + 1 == argc) {
            fprintf(stderr, "hypic-bench soak: %s '%s'\n",
                    j < sizeof k_opts / sizeof *k_opts ? "a value is missing after"
                                                       : "unknown option",
                    argv[i]);
            usage();
            return 2;
        }
        const char *v = argv[++i];
        if (k_opts[j].str) {
            *k_opts[j].str = v;
            continue;
        }
        char *end;
        const double x = strtod(v, &end);
        if (end == v || *end || !(x >= k_opts[j].lo && x <= k_opts[j].hi)) {
            fprintf(stderr, "hypic-bench soak: %s '%s': a number in [%g, %g]\n", argv[i - 1], v,
                    k_opts[j].lo, k_opts[j].hi);
            return 2;
        }
        *k_opts[j].num = x;
    }
    if (daemon) setenv("HYPIC_CACHED", daemon, 1); /* where the fixture looks first */
    /* --quick: about a minute in all, 20 s of it warm-up, a smaller pool */
    o->minutes = minutes > 0 ? minutes : o->quick ? 1 : 30;
    o->interval = interval > 0 ? interval : o->quick ? 10 : 60;
    o->g.docs = docs > 0 ? (int)docs : o->quick ? 1000 : 2000;
    o->g.median = median > 0 ? median : o->quick ? 96 : 192;
    o->g.k = (int)k;
    o->g.seed_int = (int)seed;
    o->g.seed = (uint64_t)o->g.seed_int;
    o->clients = (int)clients;
    o->state_every = (int)state_every;
    o->lease_every = (int)lease_every;
    o->reconnect_every = (int)reconnect_every;
    if (o->g.k > o->g.docs) {
        fprintf(stderr, "hypic-bench soak: --k must be <= --docs\n");
        return 2;
    }
    const double total = o->minutes * 60;
    if (o->warmup < 0) o->warmup = o->quick ? 20 : HY_MAX(o->interval, 0.1 * total);
    o->warmup = HY_MAX(1, ceil(o->warmup / o->interval - 1e-9)) * o->interval; /* whole intervals */
    if (o->warmup + o->interval > total + 1e-9 || total / o->interval > MAX_POINTS) {
        fprintf(stderr,
                "hypic-bench soak: the run (%.0f s) must hold the warm-up (%.0f s) and at least "
                "one interval (%.0f s) after it, and at most %d intervals\n",
                total, o->warmup, o->interval, MAX_POINTS);
        return 2;
    }
    return 0;
}

/* Sizes the tiers from the probe's figures (bench_soak_size.c) and writes
 * the daemon's configuration. 0, or 1 after saying why. */
static int configure(const opts *o, const seg_info *info, size_t nd, const char *model_dir,
                     soak_setup *u, char *yaml, size_t cap)
{
    if (soak_size(info, nd, o->host_frac, o->evict, o->admit, u)) return 1;
    const uint64_t mib = 1u << 20;
    snprintf(yaml, cap,
             "listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\n"
             "models:\n  - {name: %s, path: \"%s\"}\n"
             "tiers:\n  host: {bytes: %lluM, evict: %s, admit: %s}\n"
             "  nvme: {path: var/nvme, bytes: %lluM, extent_bytes: 16M}\n"
             "pic:\n  reuse: fetch\n"
             "limits:\n  lease_bytes_per_tenant: %lluK\n"
             "transport:\n  sessions_per_tenant: %d\n"
             "log:\n  requests: false\n",
             o->preset, model_dir, (unsigned long long)(u->host_bytes / mib), o->evict, o->admit,
             (unsigned long long)(u->nvme_bytes / mib),
             (unsigned long long)(u->host_bytes / 2 / 1024), 2 * o->clients);
    return 0;
}

/* One interval's end: the clients' figures since the last, Stats' deltas,
 * the daemon's RSS, fds and sessions. */
static int sample(shared *s, const hy_daemon *d, double t, bool warm, counters *prev,
                  uint64_t *prev_done, uint64_t *prev_err, double interval, point *p)
{
    pthread_mutex_lock(&s->mu);
    double *lat = s->lat;
    const size_t nlat = s->nlat;
    const uint64_t done = s->done, errors = s->errors;
    s->lat = NULL, s->nlat = s->cap = 0;
    pthread_mutex_unlock(&s->mu);
    counters c;
    uint64_t not_ok;
    const int rc = stats(s->target, &c, NULL);
    *p = (point){.t = t,
                 .warm = warm,
                 .requests = done - *prev_done,
                 .errors = errors - *prev_err,
                 .host_mb = NAN};
    p->rps = (double)p->requests / interval;
    p->p50_ms = percentile(lat, nlat, 0.50);
    p->p99_ms = percentile(lat, nlat, 0.99);
    free(lat);
    p->rss_mb = status_mb(d->pid, "VmRSS");
    p->anon_mb = status_mb(d->pid, "RssAnon");
    p->fds = count_fds(d->pid, NULL, NULL);
    if (!scrape(d, &p->sessions, &not_ok)) p->sessions = NAN;
    if (!rc) {
        for (int k = 0; k < 3; k++) p->hits[k] = c.hits[k] - prev->hits[k];
        p->misses = c.misses - prev->misses;
        p->evictions = c.evictions - prev->evictions;
        p->demotions = c.demotions - prev->demotions;
        p->promotions = c.promotions - prev->promotions;
        p->host_mb = (double)c.host_bytes / (1 << 20);
        *prev = c;
    }
    *prev_done = done, *prev_err = errors;
    return rc;
}

static void sleep_until(double t)
{
    for (double now; (now = hy_now_s()) < t;) usleep((useconds_t)HY_MIN((t - now) * 1e6, 2e5));
}

/* The run: what its phases share. */
typedef struct soak {
    opts o;
    char tmp[160], model_dir[200], daemon_dir[200], tier_dir[256];
    hy_rag_trace t;
    hy_rag_doc *docs; /* the distinct segments, [nd] */
    size_t nd;
    seg_info *info; /* what the store keeps of each, [nd] */
    soak_setup u;
    int vocab;
    hy_daemon d;
    shared s;
    client cl[MAX_CLIENTS];
    int started; /* client threads running (not joined) */
    point pt[MAX_POINTS];
    int np;
    idle idle0, idle1; /* after the warm-up, at the end */
    uint64_t not_ok;   /* the daemon's answers other than OK, at the end */
    /* the simulator: host, nvme, miss; the host tier at the watermarks and
     * with admission always */
    double pred[3], host_band[2], host_always;
} soak;

/* What the run is judged on. v_*: 1 PASS, 0 FAIL, -1 not judged (unmeasured,
 * or --quick). */
typedef struct verdicts {
    double meas[3], rss0, rss1, rss_growth, sess_growth, lease_growth;
    double rss_first, rss_last; /* the single intervals' figures, for the record */
    int rss_window;             /* intervals in each median */
    long fd_growth;             /* LONG_MIN: unmeasured */
    uint64_t seen, errors;
    int rss, fd, sess, lease, hit, err, ran;
} verdicts;

/* The model, the trace, the probe, the daemon under test. 0, or 1 after
 * saying why. */
static int prepare(soak *k)
{
    const opts *o = &k->o;
    hy_err e = {0};
    hy_model_config mc;
    char yaml[2048];
    printf("generating the '%s' preset in %s ...\n", o->preset, k->model_dir);
    fflush(stdout);
    if (hy_model_init(o->preset, 1, k->model_dir, "F32", &e) ||
        hy_config_load(k->model_dir, &mc, &e)) {
        fprintf(stderr, "hypic-bench soak: generating '%s': %s\n", o->preset, e.msg);
        return 1;
    }
    k->vocab = mc.vocab;
    if (hy_rag_trace_generate(&k->t, &o->g, o->quick ? TRACE_REQUESTS / 5 : TRACE_REQUESTS) ||
        hy_rag_docs(&k->t, &k->docs, &k->nd) ||
        !(k->info = calloc(k->nd ? k->nd : 1, sizeof *k->info))) {
        fprintf(stderr, "hypic-bench soak: out of memory generating the trace\n");
        return 1;
    }
    printf("trace: %zu requests (replayed from the start when they run out), %d documents, "
           "Zipf %.2f, k %d, median %.0f tokens; %zu distinct segments\n",
           k->t.n, o->g.docs, o->g.zipf, o->g.k, o->g.median, k->nd);
    fflush(stdout);
    if (soak_probe(k->tmp, o->preset, k->model_dir, k->vocab, k->docs, k->nd, k->info) ||
        configure(o, k->info, k->nd, k->model_dir, &k->u, yaml, sizeof yaml))
        return 1;
    if (mkdir(k->daemon_dir, 0700) != 0 || hy_daemon_start(&k->d, k->daemon_dir, yaml) != 0) {
        fprintf(stderr, "hypic-bench soak: hypic-cached did not start in %s (%s)\n", k->daemon_dir,
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known: --daemon PATH");
        return 1;
    }
    const soak_setup *u = &k->u;
    printf("hypic-cached (pid %d) on %s, metrics on %s: working set %zu entries, %.1f MiB in host "
           "pages (%zu segments too short to cache); host tier %.0f MiB (%.3f of it, %s/%s), NVMe "
           "%.0f MiB (gdsf/always, write-back), pic.reuse fetch\n",
           (int)k->d.pid, k->d.grpc, k->d.http, u->stored, (double)u->working_set / (1 << 20),
           u->uncacheable, (double)u->host_bytes / (1 << 20),
           (double)u->host_bytes / (double)u->working_set, o->evict, o->admit,
           (double)u->nvme_bytes / (1 << 20));
    printf("%d clients, closed loop, for %.1f min (warm-up %.0f s), a line every %.0f s\n",
           o->clients, o->minutes, o->warmup, o->interval);
    fflush(stdout);
    return 0;
}

/* Parks the clients, measures the daemon idle, and lets them go on,
 * counting the requests from here as after the warm-up. */
static int end_warmup(soak *k)
{
    shared *s = &k->s;
    if (park_all(s, k->o.clients, false, k->cl)) return 1;
    measure_idle(&k->d, k->tier_dir, &k->idle0);
    pthread_mutex_lock(&s->mu);
    s->warm_end = s->next;
    s->park = false;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    printf("  warm-up done: clients parked, daemon idle: %ld fds (%ld on the NVMe tier's files), "
           "%.0f transport sessions, RSS %.1f MiB; measuring from request %zu\n",
           k->idle0.fds, k->idle0.tier_fds, k->idle0.sessions, k->idle0.rss_mb, s->warm_end);
    fflush(stdout);
    return 0;
}

/* The clients for --minutes, a line per interval, the warm-up's end, the
 * stop and the daemon idle again. 0, or 1 after saying why. */
static int load(soak *k)
{
    const opts *o = &k->o;
    shared *s = &k->s;
    s->o = o, s->t = &k->t, s->vocab = k->vocab, s->model = o->preset, s->target = k->d.grpc;
    s->warm_end = SIZE_MAX;
    counters prev;
    uint64_t prev_done = 0, prev_err = 0;
    if (stats(k->d.grpc, &prev, NULL)) return 1;
    for (; k->started < o->clients; k->started++) {
        k->cl[k->started] = (client){.s = s, .id = k->started};
        if (pthread_create(&k->cl[k->started].thread, NULL, client_main, &k->cl[k->started])) {
            fprintf(stderr, "hypic-bench soak: could not start client %d\n", k->started);
            return 1;
        }
    }
    const double t0 = hy_now_s();
    const int intervals = (int)floor(o->minutes * 60 / o->interval + 1e-9);
    for (int i = 1; i <= intervals; i++) {
        sleep_until(t0 + i * o->interval);
        const bool warm = i * o->interval <= o->warmup + 1e-9;
        if (sample(s, &k->d, i * o->interval, warm, &prev, &prev_done, &prev_err, o->interval,
                   &k->pt[k->np]))
            return 1;
        print_point(&k->pt[k->np++]);
        if (warm && (i + 1) * o->interval > o->warmup + 1e-9 && end_warmup(k)) return 1;
    }
    const int stopped = park_all(s, o->clients, true, k->cl);
    k->started = 0; /* joined */
    if (stopped) return 1;
    measure_idle(&k->d, k->tier_dir, &k->idle1);
    double sessions;
    if (!scrape(&k->d, &sessions, &k->not_ok)) {
        fprintf(stderr, "hypic-bench soak: could not read http://%s/metrics\n", k->d.http);
        return 1;
    }
    printf("  stopped: daemon idle: %ld fds (%ld on the NVMe tier's files), %.0f transport "
           "sessions, RSS %.1f MiB\n",
           k->idle1.fds, k->idle1.tier_fds, k->idle1.sessions, k->idle1.rss_mb);
    return 0;
}

/* The simulator on the requests sent, in their order. 0, or 1 after saying why. */
static int prediction(soak *k)
{
    hy_bench_lookup *lk = NULL;
    size_t nl = 0, n_pre = 0;
    if (soak_lookups(&k->t, k->docs, k->nd, k->info, k->s.next, k->s.warm_end, &lk, &nl, &n_pre)) {
        fprintf(stderr, "hypic-bench soak: out of memory building the simulator's trace\n");
        return 1;
    }
    const uint32_t nobj = (uint32_t)k->nd, fly = (uint32_t)k->o.clients;
    const double cap = (double)k->u.host_bytes;
    hy_policy_config hc = k->u.host;
    hc.capacity = (uint64_t)(0.75 * cap);
    k->host_band[0] = soak_predict(lk, nl, n_pre, nobj, &hc, fly);
    hc.capacity = (uint64_t)(0.9 * cap);
    k->host_band[1] = soak_predict(lk, nl, n_pre, nobj, &hc, fly);
    hc.capacity = (uint64_t)(WATERMARK_MEAN * cap);
    const double host = soak_predict(lk, nl, n_pre, nobj, &hc, fly);
    const double any = soak_predict(lk, nl, n_pre, nobj, &k->u.nvme, fly);
    k->pred[0] = host, k->pred[1] = any - host, k->pred[2] = 1 - any;
    hc.admit = HY_ADMIT_ALWAYS; /* what the store's promotions from NVMe amount to */
    k->host_always = soak_predict(lk, nl, n_pre, nobj, &hc, fly);
    free(lk);
    return 0;
}

static void judge(const soak *k, verdicts *v)
{
    const uint64_t *oa = k->s.out[1];
    memset(v, 0, sizeof *v);
    v->seen = oa[OUT_HOST] + oa[OUT_NVME] + oa[OUT_HBM] + oa[OUT_MISS];
    for (int i = 0; i < 3; i++)
        v->meas[i] = v->seen ? (double)oa[i == 2 ? OUT_MISS : i] / (double)v->seen : NAN;
    int first = 0;
    while (first < k->np && k->pt[first].warm) first++;
    const int after = k->np - first;
    v->rss_window = HY_MAX(1, HY_MIN(RSS_WINDOW, after / 3));
    v->rss0 = v->rss1 = v->rss_first = v->rss_last = NAN;
    if (after > 0) {
        double w0[RSS_WINDOW], w1[RSS_WINDOW];
        for (int i = 0; i < v->rss_window; i++)
            w0[i] = k->pt[first + i].rss_mb, w1[i] = k->pt[k->np - v->rss_window + i].rss_mb;
        v->rss0 = percentile(w0, (size_t)v->rss_window, 0.5);
        v->rss1 = percentile(w1, (size_t)v->rss_window, 0.5);
        v->rss_first = k->pt[first].rss_mb;
        v->rss_last = k->pt[k->np - 1].rss_mb;
    }
    v->rss_growth = (v->rss1 - v->rss0) / v->rss0;
    const idle *a = &k->idle0, *b = &k->idle1;
    v->fd_growth =
        a->fds >= 0 && b->fds >= 0 ? (b->fds - b->tier_fds) - (a->fds - a->tier_fds) : LONG_MIN;
    v->sess_growth = b->sessions - a->sessions;
    v->lease_growth = b->leases - a->leases;
    v->errors = k->s.errors + k->not_ok;
    bool hits_ok = true;
    for (int i = 0; i < 3; i++) hits_ok &= fabs(v->meas[i] - k->pred[i]) <= HIT_TOLERANCE;
#define JUDGE(measured, ok) (!(measured) || k->o.quick ? -1 : (ok) ? 1 : 0)
    v->rss = JUDGE(!isnan(v->rss_growth), v->rss_growth < RSS_TOLERANCE);
    v->fd = JUDGE(v->fd_growth != LONG_MIN, v->fd_growth <= 0);
    v->sess = JUDGE(!isnan(v->sess_growth), v->sess_growth <= 0);
    v->lease = JUDGE(!isnan(v->lease_growth), v->lease_growth <= 0);
    v->hit = JUDGE(true, hits_ok);
#undef JUDGE
    v->err = v->errors == 0;
    v->ran = v->seen > 0;
}

static const char *const k_tier[3] = {"host", "nvme", "miss"};

static void print_summary(const soak *k, const verdicts *v, double t_start)
{
    const opts *o = &k->o;
    const idle *a = &k->idle0, *b = &k->idle1;
    printf("\nafter the warm-up: %zu requests sent, %llu segments looked up (and %llu "
           "uncacheable), %llu hits recomputed\n",
           k->s.next - k->s.warm_end, (unsigned long long)v->seen,
           (unsigned long long)k->s.out[1][OUT_UNCACHEABLE], (unsigned long long)k->s.recomputed);
    printf("hit rate per tier (Prefill outcomes) against the simulator (%s/%s at %.3f x the host "
           "tier; gdsf/always at NVMe's capacity for a hit anywhere):\n",
           o->evict, o->admit, WATERMARK_MEAN);
    for (int i = 0; i < 3; i++)
        printf("  %-5s measured %.4f  predicted %.4f\n", k_tier[i], v->meas[i], k->pred[i]);
    printf("  (host predicted at the watermarks: %.4f at 0.75, %.4f at 0.9; with admission always "
           "at %.3f: %.4f)\n",
           k->host_band[0], k->host_band[1], WATERMARK_MEAN, k->host_always);
    printf("%-10s RSS after the warm-up, median of the first %d intervals -> of the last %d: "
           "%.1f -> %.1f MiB, %+.2f %% (< %.0f %%); first interval %.1f, last %.1f MiB\n",
           verdict(v->rss), v->rss_window, v->rss_window, v->rss0, v->rss1, 100 * v->rss_growth,
           100 * RSS_TOLERANCE, v->rss_first, v->rss_last);
    if (v->fd_growth == LONG_MIN)
        printf("%-10s fds: not measured (/proc/%d/fd unreadable)\n", verdict(v->fd), (int)k->d.pid);
    else
        printf("%-10s fds idle, other than the NVMe tier's files: %ld -> %ld (%+ld); the tier's "
               "files %ld -> %ld\n",
               verdict(v->fd), a->fds - a->tier_fds, b->fds - b->tier_fds, v->fd_growth,
               a->tier_fds, b->tier_fds);
    if (v->fd_growth != LONG_MIN) {
        printf("           by kind:");
        for (int i = FD_SOCKET; i < FD_KINDS; i++)
            printf(" %s %ld -> %ld", fd_kind_name[i], a->kind[i], b->kind[i]);
        printf("\n");
    }
    printf("%-10s transport sessions idle: %.0f -> %.0f\n", verdict(v->sess), a->sessions,
           b->sessions);
    printf("%-10s errors: %llu at the clients, %llu answered not OK by the daemon\n",
           verdict(v->err), (unsigned long long)k->s.errors, (unsigned long long)k->not_ok);
    printf("%-10s hit rate per tier within %.2f of the prediction\n", verdict(v->hit),
           HIT_TOLERANCE);
    if (isnan(v->lease_growth))
        printf("%-10s leases: not measured (no hypic_leases in /metrics)\n", verdict(v->lease));
    else
        printf("%-10s Lookup leases idle: %.0f -> %.0f\n", verdict(v->lease), a->leases, b->leases);
    printf("%-10s it ran: %llu requests in all, %.0f s with the probe and set-up\n",
           verdict(v->ran), (unsigned long long)k->s.done, hy_now_s() - t_start);
}

static const char *json_verdict(int v)
{
    return v > 0 ? "true" : v ? "null" : "false";
}

static void print_json(const soak *k, const verdicts *v)
{
    const opts *o = &k->o;
    const soak_setup *u = &k->u;
    printf(
        "{\"bench\":\"soak\",\"preset\":\"%s\",\"quick\":%s,\"minutes\":%.2f,\"interval_s\":%.0f,"
        "\"warmup_s\":%.0f,\"clients\":%d,\"docs\":%d,\"distinct_segments\":%zu,"
        "\"working_set_bytes\":%llu,\"host_bytes\":%llu,\"nvme_bytes\":%llu,"
        "\"host_policy\":\"%s/%s\",\"requests\":%llu,\"requests_after_warmup\":%zu,"
        "\"errors\":%llu,\"client_errors\":%llu,\"daemon_errors\":%llu",
        o->preset, o->quick ? "true" : "false", o->minutes, o->interval, o->warmup, o->clients,
        o->g.docs, k->nd, (unsigned long long)u->working_set, (unsigned long long)u->host_bytes,
        (unsigned long long)u->nvme_bytes, o->evict, o->admit, (unsigned long long)k->s.done,
        k->s.next - k->s.warm_end, (unsigned long long)v->errors, (unsigned long long)k->s.errors,
        (unsigned long long)k->not_ok);
    json_num("rss_mb_after_warmup", v->rss0);
    json_num("rss_mb_last", v->rss1);
    printf(",\"rss_window\":%d", v->rss_window);
    json_num("rss_mb_first_interval", v->rss_first);
    json_num("rss_mb_last_interval", v->rss_last);
    json_num("rss_growth", v->rss_growth);
    if (v->fd_growth != LONG_MIN)
        printf(",\"fd_growth\":%ld,\"fds_idle_after_warmup\":%ld,\"fds_idle_end\":%ld,"
               "\"tier_fd_growth\":%ld",
               v->fd_growth, k->idle0.fds, k->idle1.fds, k->idle1.tier_fds - k->idle0.tier_fds);
    if (v->fd_growth != LONG_MIN) {
        printf(",\"fds_idle_by_kind\":{");
        for (int i = FD_SOCKET; i < FD_KINDS; i++)
            printf("%s\"%s\":[%ld,%ld]", i > FD_SOCKET ? "," : "", fd_kind_name[i],
                   k->idle0.kind[i], k->idle1.kind[i]);
        printf("}");
    }
    json_num("session_growth", v->sess_growth);
    json_num("lease_growth", v->lease_growth);
    for (int which = 0; which < 2; which++) {
        const double *x = which ? k->pred : v->meas;
        printf(",\"%s\":{", which ? "predicted_hit_rate" : "hit_rate");
        for (int i = 0, c = 0; i < 3; i++)
            if (!isnan(x[i])) printf("%s\"%s\":%.4f", c++ ? "," : "", k_tier[i], x[i]);
        printf("}");
    }
    json_num("predicted_host_at_075", k->host_band[0]);
    json_num("predicted_host_at_090", k->host_band[1]);
    json_num("predicted_host_admit_always", k->host_always);
    printf(",\"pass\":{\"rss\":%s,\"fds\":%s,\"sessions\":%s,\"leases\":%s,\"errors\":%s,"
           "\"hit_rate\":%s}",
           json_verdict(v->rss), json_verdict(v->fd), json_verdict(v->sess), json_verdict(v->lease),
           json_verdict(v->err), json_verdict(v->hit));
    const point *pt = k->pt;
    const int np = k->np;
    printf(",\"series\":{");
    json_series("t_s", pt, np, offsetof(point, t), false, false);
    json_series("requests", pt, np, offsetof(point, requests), true, true);
    json_series("errors", pt, np, offsetof(point, errors), true, true);
    json_series("rps", pt, np, offsetof(point, rps), false, true);
    json_series("p50_ms", pt, np, offsetof(point, p50_ms), false, true);
    json_series("p99_ms", pt, np, offsetof(point, p99_ms), false, true);
    json_series("rss_mb", pt, np, offsetof(point, rss_mb), false, true);
    json_series("rss_anon_mb", pt, np, offsetof(point, anon_mb), false, true);
    json_series("host_mb", pt, np, offsetof(point, host_mb), false, true);
    json_series("sessions", pt, np, offsetof(point, sessions), false, true);
    json_series("host_hits", pt, np, offsetof(point, hits[OUT_HOST]), true, true);
    json_series("nvme_hits", pt, np, offsetof(point, hits[OUT_NVME]), true, true);
    json_series("misses", pt, np, offsetof(point, misses), true, true);
    json_series("evictions", pt, np, offsetof(point, evictions), true, true);
    json_series("demotions", pt, np, offsetof(point, demotions), true, true);
    json_series("promotions", pt, np, offsetof(point, promotions), true, true);
    printf(",\"fds\":[");
    for (int i = 0; i < np; i++) printf("%s%ld", i ? "," : "", pt[i].fds);
    printf("]}}\n");
}

/* Stops what runs (clients, then the daemon), frees and removes everything.
 * rc, or 1 when the daemon did not stop cleanly. */
static int finish(soak *k, int rc)
{
    fflush(stdout);
    if (k->started) { /* a failure with the clients running */
        pthread_mutex_lock(&k->s.mu);
        k->s.stop = true;
        pthread_cond_broadcast(&k->s.cv);
        pthread_mutex_unlock(&k->s.mu);
        for (int i = 0; i < k->started; i++) pthread_join(k->cl[i].thread, NULL);
    }
    if (k->d.pid > 0 && !hy_daemon_stop(&k->d)) {
        fprintf(stderr, "hypic-bench soak: hypic-cached did not stop cleanly\n");
        rc = 1;
    }
    free(k->s.lat);
    free(k->info);
    free(k->docs);
    free(k->t.r);
    hy_bench_rmtree(k->tmp);
    return rc;
}

int hy_bench_soak(int argc, char **argv)
{
    setenv("OMP_WAIT_POLICY", "passive", 0);
    static soak k; /* large: the points and the clients */
    memset(&k, 0, sizeof k);
    int rc = parse_args(argc, argv, &k.o);
    if (rc) return rc;
    const double t_start = hy_now_s();
    if (hy_bench_mkdtemp("soak", k.tmp, sizeof k.tmp)) return 1;
    snprintf(k.model_dir, sizeof k.model_dir, "%s/%s", k.tmp, k.o.preset);
    snprintf(k.daemon_dir, sizeof k.daemon_dir, "%s/daemon", k.tmp);
    snprintf(k.tier_dir, sizeof k.tier_dir, "%s/var/nvme", k.daemon_dir);
    k.idle0 = k.idle1 =
        (idle){.fds = -1, .tier_fds = -1, .sessions = NAN, .leases = NAN, .rss_mb = NAN};
    pthread_mutex_init(&k.s.mu, NULL);
    pthread_cond_init(&k.s.cv, NULL);
    if (prepare(&k) || load(&k) || prediction(&k)) return finish(&k, 1);
    verdicts v;
    judge(&k, &v);
    print_summary(&k, &v, t_start);
    print_json(&k, &v);
    rc = v.err && v.ran && v.rss && v.fd && v.sess && v.lease && v.hit ? 0 : 1; /* -1: not judged */
    return finish(&k, rc);
}
