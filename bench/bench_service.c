/*
 * hypic-bench service: what the service's RPC path costs. Lookup and Prefill
 * (mode pic) on the `tiny` preset, every segment a hit (warmed first), on two
 * paths in the same run:
 *   - service: hypic-cached started by the bench as a child process on
 *     loopback (tests/cached/daemon_fixture.h, the tests' fixture), called
 *     through libhypic-client, each client thread with a channel (and a connection) of its own;
 *   - in-process: svc_open on the same configuration in this process and
 *     hy_rpc_call_local into svc_front_door: the same handler code and the
 *     same (de)serialisation of request and response, without gRPC and the
 *     network.
 * With one client (closed loop) the two paths alternate call by call on the
 * same request, so the drift of a shared machine falls on both alike. The
 * RPC's cost on Prefill, rpc_overhead_p50_ms, is the p50 of each service
 * call's time outside its handler (its latency minus the handler's own
 * timings.total_ms, the same call's two figures). The service's p50 minus
 * the in-process p50 (service_minus_inproc_p50_ms) is reported beside it but
 * is no overhead: the handler itself runs in two processes there, whose
 * times differ by more than the RPC costs (a Zen 4 EPYC ran it 1 ms faster
 * in the daemon, which made that difference -1 ms). With 16 clients each
 * path runs alone for the duration.
 *
 * The physical limit next to the figures: this machine's cores, shared by the
 * client threads, the daemon's workers and gRPC's own threads. A Lookup is
 * bounded by what a call costs in CPU rather than by its handler, so the CPU
 * time client side (getrusage) and daemon side (/proc/PID/stat) per call over
 * the 16-client window is reported with the calls/s it allows at most (cores
 * / CPU per call), next to calls/s per core. A Prefill's time is split into
 * the handler's own (timings.total_ms, measured inside the handler on both
 * paths) and the rest: transport, (de)serialisation, waiting for a worker.
 *
 *   hypic-bench service [--quick] [--duration S] [--segments N] [--daemon PATH]
 *
 * --duration: seconds each measured phase runs (six phases); --segments:
 * segments per request (256 tokens each); --daemon: the hypic-cached binary
 * (default: $HYPIC_CACHED, else the one this build made). The configuration
 * turns the per-request log line off (log.requests: false) on both paths:
 * the figures are the RPC path's, not stderr's.
 */
#include "bench.h"
#include "bench_trace.h"
#include "hy_common.h"
#include "hy_rpc.h"
#include "hypic_client.h"
#include "service_internal.h"

#include "../tests/cached/daemon_fixture.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

enum { SEG_TOKENS = 256, QUERY = 16, MAX_SEGMENTS = 64, CLIENTS = 16, VOCAB_FIRST = 3 };

typedef enum path { SERVICE = 0, INPROC = 1 } path;
typedef enum rpc { LOOKUP = 0, PREFILL = 1 } rpc;
static const char *const k_path[] = {"service", "in-process"};

/* What every client shares: the segments (token ids), the running service,
 * the in-process one, and the stop flag of the phase running. */
typedef struct bench {
    int nseg, vocab;
    uint32_t *tok[MAX_SEGMENTS]; /* [SEG_TOKENS] each */
    hy_daemon d;
    hy_svc *svc;
    const hy_rpc_method *m[2];
    hy_rpc_handler h[2];
    _Atomic bool stop, measuring;
} bench;

/* Latencies of one path, in seconds, with what the handler reported. */
typedef struct samples {
    /* handler: Prefill's timings.total_ms in s, server: its timings.server_ms
     * (the front door's part too; 0 in-process); both 0 for Lookup */
    double *v, *handler, *server;
    size_t n, cap;
} samples;

static int samples_add(samples *s, double v, double handler, double server)
{
    if (s->n == s->cap) {
        const size_t cap = s->cap ? 2 * s->cap : 4096;
        double *nv = realloc(s->v, cap * sizeof *nv);
        if (nv) s->v = nv;
        double *nh = nv ? realloc(s->handler, cap * sizeof *nh) : NULL;
        if (nh) s->handler = nh;
        double *ns = nh ? realloc(s->server, cap * sizeof *ns) : NULL;
        if (!ns) return HY_ENOMEM;
        s->server = ns;
        s->cap = cap;
    }
    s->v[s->n] = v;
    s->handler[s->n] = handler;
    s->server[s->n++] = server;
    return HY_OK;
}

static void samples_free(samples *s)
{
    free(s->v);
    free(s->handler);
    free(s->server);
    memset(s, 0, sizeof *s);
}

/* The q-quantile (nearest rank) of v[0..n), sorting v; 0 when empty. */
static double quantile(double *v, size_t n, double q)
{
    if (!n) return 0;
    qsort(v, n, sizeof *v, hy_bench_cmp_double);
    size_t i = (size_t)(q * (double)n);
    return v[i < n ? i : n - 1];
}

static double sum(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i];
    return s;
}

/* --- one call on either path ------------------------------------------------------ */

/* A request's parts, owned by the client thread that sends it. */
typedef struct request {
    Hypic__V1__Tokens tok[MAX_SEGMENTS];
    Hypic__V1__Segment seg[MAX_SEGMENTS], *ps[MAX_SEGMENTS];
    uint32_t query[QUERY];
    Hypic__V1__LookupRequest lookup;
    Hypic__V1__PrefillRequest prefill;
} request;

/* Request number i of a client: every segment, in an order that turns with
 * i (the keys are the same, the request bytes are not), and its query. */
static void request_make(request *r, const bench *b, hy_rng *rng, uint64_t i)
{
    for (int s = 0; s < b->nseg; s++) {
        const int d = (int)((i + (uint64_t)s) % (uint64_t)b->nseg);
        hy_bench_token_segment(&r->tok[s], &r->seg[s], b->tok[d], SEG_TOKENS);
        r->ps[s] = &r->seg[s];
    }
    for (int q = 0; q < QUERY; q++)
        r->query[q] =
            VOCAB_FIRST + (uint32_t)(hy_rng_next(rng) % (uint64_t)(b->vocab - VOCAB_FIRST));
    hypic__v1__lookup_request__init(&r->lookup);
    r->lookup.model = "tiny";
    r->lookup.n_segments = (size_t)b->nseg;
    r->lookup.segments = r->ps;
    hypic__v1__prefill_request__init(&r->prefill);
    r->prefill.model = "tiny";
    r->prefill.n_segments = (size_t)b->nseg;
    r->prefill.segments = r->ps;
    r->prefill.n_query = QUERY;
    r->prefill.query = r->query;
    r->prefill.mode = HYPIC__V1__MODE__MODE_PIC;
}

/* What a response must say for the call to count: every segment a hit. */
typedef struct outcome {
    int nseg;
    bool all_hit;
    double handler_s; /* Prefill: timings.total_ms */
    double server_s;  /* Prefill: timings.server_ms */
} outcome;

static bool lookup_all_hit(const Hypic__V1__LookupResponse *r, int nseg)
{
    return r->leading_hits == (uint32_t)nseg;
}

static bool prefill_all_hit(const Hypic__V1__PrefillResponse *r, int nseg)
{
    if (r->n_segments != (size_t)nseg || !r->n_top) return false;
    for (size_t i = 0; i < r->n_segments; i++)
        if (r->segments[i]->kind != HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT) return false;
    return true;
}

static int on_lookup(void *ctx, const ProtobufCMessage *m)
{
    outcome *o = ctx;
    o->all_hit = lookup_all_hit((const Hypic__V1__LookupResponse *)m, o->nseg);
    return 0;
}

static int on_prefill(void *ctx, const ProtobufCMessage *m)
{
    outcome *o = ctx;
    const Hypic__V1__PrefillResponse *r = (const Hypic__V1__PrefillResponse *)m;
    o->all_hit = prefill_all_hit(r, o->nseg);
    o->handler_s = r->timings ? r->timings->total_ms * 1e-3 : 0;
    o->server_s = r->timings ? r->timings->server_ms * 1e-3 : 0;
    return 0;
}

/* One call of `which` on path p: 0 with its latency (and the handler's own
 * time for Prefill), or 1 with why it does not count in why. */
static int call_one(bench *b, path p, rpc which, hyc *cl, request *r, double *lat, double *handler,
                    double *server, char *why, size_t cap)
{
    outcome o = {.nseg = b->nseg};
    int code;
    char msg[512] = "";
    const uint64_t t0 = hy_now_ns();
    if (p == SERVICE) {
        hyc_status st;
        if (which == LOOKUP) {
            Hypic__V1__LookupResponse *resp = NULL;
            code = hyc_lookup(cl, &r->lookup, &resp, &st);
            if (resp) o.all_hit = lookup_all_hit(resp, b->nseg);
            hyc_free(resp);
        } else {
            Hypic__V1__PrefillResponse *resp = NULL;
            code = hyc_prefill(cl, &r->prefill, &resp, &st);
            if (resp) {
                o.all_hit = prefill_all_hit(resp, b->nseg);
                o.handler_s = resp->timings ? resp->timings->total_ms * 1e-3 : 0;
                o.server_s = resp->timings ? resp->timings->server_ms * 1e-3 : 0;
            }
            hyc_free(resp);
        }
        snprintf(msg, sizeof msg, "%s", st.msg);
    } else {
        hy_rpc_status st;
        const ProtobufCMessage *req = which == LOOKUP ? &r->lookup.base : &r->prefill.base;
        int rc = hy_rpc_call_local(b->m[which], req, b->h[which], b->svc,
                                   which == LOOKUP ? on_lookup : on_prefill, &o, NULL, &st);
        code = rc ? HY_RPC_INTERNAL : st.code;
        snprintf(msg, sizeof msg, "%s", rc ? hy_strerror(rc) : st.msg);
    }
    *lat = (double)(hy_now_ns() - t0) * 1e-9;
    *handler = o.handler_s;
    *server = o.server_s;
    if (code != HY_RPC_OK) {
        snprintf(why, cap, "%s %s: status %d: %s", k_path[p], b->m[which]->name, code, msg);
        return 1;
    }
    if (!o.all_hit) {
        snprintf(why, cap, "%s %s: not every segment was a hit", k_path[p], b->m[which]->name);
        return 1;
    }
    return 0;
}

/* --- a phase: clients in closed loop until the stop flag ---------------------------- */

typedef struct client {
    bench *b;
    rpc which;
    bool paired; /* one client: service and in-process calls alternate */
    path p;      /* otherwise the path it calls */
    int id;
    hyc *cl;
    samples s[2]; /* per path */
    uint64_t errors;
    char why[600];
    pthread_t thread;
} client;

static void *client_main(void *arg)
{
    client *c = arg;
    bench *b = c->b;
    request *r = malloc(sizeof *r);
    if (!r) {
        c->errors++;
        snprintf(c->why, sizeof c->why, "out of memory");
        return NULL;
    }
    hy_rng rng;
    hy_rng_seed(&rng, 1000 + (uint64_t)c->id);
    for (uint64_t i = 0; !atomic_load(&b->stop); i++) {
        request_make(r, b, &rng, i);
        for (int k = 0; k < (c->paired ? 2 : 1); k++) {
            /* paired: the order alternates, so neither path always runs second */
            const path p = c->paired ? (path)((i + (uint64_t)k) % 2) : c->p;
            double lat, handler, server;
            char why[600];
            if (call_one(b, p, c->which, c->cl, r, &lat, &handler, &server, why, sizeof why)) {
                if (!c->errors++) snprintf(c->why, sizeof c->why, "%s", why);
            } else if (atomic_load(&b->measuring) && samples_add(&c->s[p], lat, handler, server)) {
                c->errors++;
                snprintf(c->why, sizeof c->why, "out of memory");
            }
        }
    }
    free(r);
    return NULL;
}

/* CPU seconds used by this process and by the daemon, in user space and in
 * the kernel, and their context switches. */
typedef struct cpu {
    double self_user, self_sys, daemon_user, daemon_sys;
    long long self_cs, daemon_cs;
} cpu;

/* The daemon's user and system CPU seconds (0 when unreadable). */
static void daemon_cpu(pid_t pid, double *user, double *sys)
{
    *user = *sys = 0;
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the name may hold spaces */
    unsigned long long ut = 0, st = 0;
    /* after ")": state(3) ... utime(14) stime(15) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return;
    *user = (double)ut / (double)sysconf(_SC_CLK_TCK);
    *sys = (double)st / (double)sysconf(_SC_CLK_TCK);
}

/* Voluntary and involuntary context switches of every thread of pid. */
static long long daemon_switches(pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    DIR *d = opendir(dir);
    if (!d) return 0;
    long long total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char path[128], line[256];
        snprintf(path, sizeof path, "%s/%.32s/status", dir, de->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        long long v;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "voluntary_ctxt_switches: %lld", &v) == 1 ||
                sscanf(line, "nonvoluntary_ctxt_switches: %lld", &v) == 1)
                total += v;
        fclose(f);
    }
    closedir(d);
    return total;
}

static cpu cpu_now(const bench *b)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    cpu c = {
        .self_user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
        .self_sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6,
        .self_cs = ru.ru_nvcsw + ru.ru_nivcsw,
    };
    if (b->d.pid > 0) {
        daemon_cpu(b->d.pid, &c.daemon_user, &c.daemon_sys);
        c.daemon_cs = daemon_switches(b->d.pid);
    }
    return c;
}

/* What a phase measured, per path. */
typedef struct result {
    size_t calls;
    double qps, p50, p99, mean;
    double handler_p50, outside_p50; /* Prefill: the handler's own time; the rest of each call */
    double door_p50, wire_p50;       /* the rest: the front door's part; beyond the daemon */
    cpu cpu;                         /* used over the measured window */
} result;

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs nclients clients of `which` (paired: one client on both paths; else
 * every client on path p) for warmup_s unmeasured, then duration_s measured.
 * out[path] is filled for the paths that ran. 0, or 1 after printing the
 * first error (a benchmark that saw an error measured nothing). */
static int phase(bench *b, rpc which, bool paired, path p, int nclients, double warmup_s,
                 double duration_s, result out[2])
{
    client *cs = calloc((size_t)nclients, sizeof *cs);
    if (!cs) return 1;
    int rc = 0, started = 0;
    atomic_store(&b->stop, false);
    atomic_store(&b->measuring, false);
    for (int i = 0; i < nclients && !rc; i++) {
        cs[i] = (client){.b = b, .which = which, .paired = paired, .p = p, .id = i};
        if (paired || p == SERVICE) {
            hyc_options o = {.target = b->d.grpc, .deadline_ms = 30000};
            hyc_status st;
            if (hyc_open(&o, &cs[i].cl, &st)) {
                fprintf(stderr, "hypic-bench service: %s\n", st.msg);
                rc = 1;
                break;
            }
        }
        if (pthread_create(&cs[i].thread, NULL, client_main, &cs[i])) {
            fprintf(stderr, "hypic-bench service: cannot start a client thread\n");
            rc = 1;
            break;
        }
        started++;
    }
    cpu c0 = {0}, c1 = {0};
    double t0 = 0, t1 = 0;
    if (!rc) {
        sleep_s(warmup_s);
        c0 = cpu_now(b);
        t0 = hy_now_s();
        atomic_store(&b->measuring, true);
        sleep_s(duration_s);
        atomic_store(&b->measuring, false);
        t1 = hy_now_s();
        c1 = cpu_now(b);
    }
    atomic_store(&b->stop, true);
    for (int i = 0; i < started; i++) pthread_join(cs[i].thread, NULL);
    samples all[2] = {0};
    for (int i = 0; i < nclients; i++) {
        if (cs[i].errors && !rc) {
            fprintf(stderr, "hypic-bench service: %llu failed call(s); the first: %s\n",
                    (unsigned long long)cs[i].errors, cs[i].why);
            rc = 1;
        }
        for (int k = 0; k < 2; k++)
            for (size_t j = 0; j < cs[i].s[k].n && !rc; j++)
                if (samples_add(&all[k], cs[i].s[k].v[j], cs[i].s[k].handler[j],
                                cs[i].s[k].server[j]))
                    rc = 1;
        samples_free(&cs[i].s[0]);
        samples_free(&cs[i].s[1]);
        hyc_close(cs[i].cl);
    }
    free(cs);
    for (int k = 0; k < 2 && !rc; k++) {
        if (!paired && k != (int)p) continue;
        samples *s = &all[k];
        result *o = &out[k];
        memset(o, 0, sizeof *o);
        o->calls = s->n;
        const double busy = sum(s->v, s->n);
        /* paired: one client's closed-loop rate on this path alone (its own
         * calls' time); otherwise calls over the window */
        o->qps = paired ? (busy > 0 ? (double)s->n / busy : 0) : (double)s->n / (t1 - t0);
        o->mean = s->n ? busy / (double)s->n : 0;
        double *outside = malloc((s->n ? s->n : 1) * sizeof *outside);
        if (!outside) {
            rc = 1;
            break;
        }
        for (size_t j = 0; j < s->n; j++) outside[j] = s->v[j] - s->handler[j];
        o->outside_p50 = quantile(outside, s->n, 0.5);
        /* the front door's part (in the daemon, around the handler) and the
         * rest (transport, gRPC's queue, the client's wake-up) */
        for (size_t j = 0; j < s->n; j++)
            outside[j] = s->server[j] > 0 ? s->server[j] - s->handler[j] : 0;
        o->door_p50 = quantile(outside, s->n, 0.5);
        for (size_t j = 0; j < s->n; j++)
            outside[j] = s->server[j] > 0 ? s->v[j] - s->server[j] : 0;
        o->wire_p50 = quantile(outside, s->n, 0.5);
        free(outside);
        o->handler_p50 = quantile(s->handler, s->n, 0.5);
        o->p50 = quantile(s->v, s->n, 0.5);
        o->p99 = quantile(s->v, s->n, 0.99);
        o->cpu = (cpu){.self_user = c1.self_user - c0.self_user,
                       .self_sys = c1.self_sys - c0.self_sys,
                       .daemon_user = c1.daemon_user - c0.daemon_user,
                       .daemon_sys = c1.daemon_sys - c0.daemon_sys,
                       .self_cs = c1.self_cs - c0.self_cs,
                       .daemon_cs = c1.daemon_cs - c0.daemon_cs};
        if (!o->calls) {
            fprintf(stderr, "hypic-bench service: no %s call completed in %.1f s\n", k_path[k],
                    duration_s);
            rc = 1;
        }
    }
    samples_free(&all[0]);
    samples_free(&all[1]);
    return rc;
}

/* --- setup ------------------------------------------------------------------------- */

static int on_warm(void *ctx, const Hypic__V1__WarmProgress *p)
{
    int *bad = ctx;
    if (p->state != HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT &&
        p->state != HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED)
        (*bad)++;
    return 0;
}

static int on_warm_local(void *ctx, const ProtobufCMessage *m)
{
    return on_warm(ctx, (const Hypic__V1__WarmProgress *)m);
}

/* Builds and stores every segment on both paths (Warm), so that every
 * segment of every request is a hit. */
static int warm(bench *b)
{
    request *r = calloc(1, sizeof *r);
    hy_rng rng;
    hy_rng_seed(&rng, 7);
    if (!r) return 1;
    request_make(r, b, &rng, 0);
    Hypic__V1__WarmRequest w = HYPIC__V1__WARM_REQUEST__INIT;
    w.model = "tiny";
    w.n_segments = (size_t)b->nseg;
    w.segments = r->ps;
    int bad = 0, rc = 1;
    hyc *cl = NULL;
    hyc_options o = {.target = b->d.grpc, .deadline_ms = 120000};
    hyc_status st;
    hy_rpc_status rs;
    const hy_rpc_method *mw = NULL;
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(hy_rpc_methods[i].name, "Warm") == 0) mw = &hy_rpc_methods[i];
    if (hyc_open(&o, &cl, &st) || hyc_warm(cl, &w, on_warm, &bad, &st)) {
        fprintf(stderr, "hypic-bench service: Warm: %s\n", st.msg);
    } else if (hy_rpc_call_local(mw, &w.base, svc_front_door, b->svc, on_warm_local, &bad, NULL,
                                 &rs) ||
               rs.code != HY_RPC_OK) {
        fprintf(stderr, "hypic-bench service: in-process Warm: %s\n", rs.msg);
    } else if (bad) {
        fprintf(stderr, "hypic-bench service: Warm: %d segment(s) neither built nor cached\n", bad);
    } else {
        rc = 0;
    }
    hyc_close(cl);
    free(r);
    return rc;
}

static void usage(void)
{
    fprintf(stderr, "usage: hypic-bench service [--quick] [--duration S] [--segments N] "
                    "[--daemon PATH]\n");
}

/* The daemon's configuration (the in-process service parses the same text). */
static void config_text(char *out, size_t cap, const char *model_dir)
{
    snprintf(out, cap,
             "listen: 127.0.0.1:0\n"
             "http_listen: \"\"\n"
             "models:\n"
             "  - {name: tiny, path: \"%s\"}\n"
             "tiers:\n"
             "  host: {bytes: 256M}\n"
             "log:\n"
             "  requests: false\n",
             model_dir);
}

static void print_result(const char *what, const result *r, bool us)
{
    const double k = us ? 1e6 : 1e3;
    printf("  %-32s %9.0f calls/s   p50 %8.*f %s   p99 %8.*f %s   (%zu calls)\n", what, r->qps,
           us ? 0 : 3, r->p50 * k, us ? "us" : "ms", us ? 0 : 3, r->p99 * k, us ? "us" : "ms",
           r->calls);
}

int hy_bench_service(int argc, char **argv)
{
    /* The in-process service waits for OpenMP as the daemon does (it sets
     * passive itself), so the two paths compare the same handler; set before
     * this process's first parallel region, which reads it. */
    setenv("OMP_WAIT_POLICY", "passive", 0);
    double duration = 5;
    int nseg = 8;
    bool quick = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (strcmp(argv[i], "--duration") == 0 && i + 1 < argc) {
            duration = strtod(argv[++i], NULL);
        } else if (strcmp(argv[i], "--segments") == 0 && i + 1 < argc) {
            nseg = (int)strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--daemon") == 0 && i + 1 < argc) {
            setenv("HYPIC_CACHED", argv[++i], 1); /* where the fixture looks first */
        } else {
            usage();
            return 2;
        }
    }
    if (quick) duration = 0.5, nseg = 2;
    if (!(duration > 0 && duration <= 3600) || nseg < 1 || nseg > MAX_SEGMENTS) {
        fprintf(stderr,
                "hypic-bench service: --duration must be in (0, 3600] s and --segments "
                "in 1..%d\n",
                MAX_SEGMENTS);
        return 2;
    }
    const double warmup = duration < 2 ? duration / 4 : 0.5;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    static bench b; /* large: not on the stack */
    static hy_svc svc;
    static hy_cached_config cfg;
    memset(&b, 0, sizeof b);
    b.nseg = nseg;
    b.svc = &svc;
    for (int k = 0; k < 2; k++) {
        const char *name = k == LOOKUP ? "Lookup" : "Prefill";
        for (size_t i = 0; i < hy_rpc_method_count; i++)
            if (strcmp(hy_rpc_methods[i].name, name) == 0) {
                b.m[k] = &hy_rpc_methods[i];
                b.h[k] = svc_front_door;
            }
    }

    /* the model, the daemon's directory and its configuration */
    char tmp[160], model_dir[192], daemon_dir[192];
    if (hy_bench_mkdtemp("service", tmp, sizeof tmp)) return 1;
    snprintf(model_dir, sizeof model_dir, "%s/tiny", tmp);
    snprintf(daemon_dir, sizeof daemon_dir, "%s/daemon", tmp);
    int rc = 1;
    bool svc_opened = false;
    hy_err e = {0};
    char yaml[1024];
    config_text(yaml, sizeof yaml, model_dir);
    printf("generating the 'tiny' preset in %s ...\n", model_dir);
    fflush(stdout);
    if (hy_model_init("tiny", 1, model_dir, "F32", &e) ||
        hy_cached_config_parse(yaml, strlen(yaml), "(hypic-bench service)", &cfg, &e)) {
        fprintf(stderr, "hypic-bench service: %s\n", e.msg);
        goto out;
    }
    if (mkdir(daemon_dir, 0700) != 0 || hy_daemon_start(&b.d, daemon_dir, yaml) != 0) {
        fprintf(stderr,
                "hypic-bench service: hypic-cached did not start (%s; --daemon PATH or "
                "HYPIC_CACHED name the binary)\n",
                hy_daemon_bin() ? hy_daemon_bin() : "no binary known");
        goto out;
    }
    svc_opened = true; /* svc_close undoes a partial svc_open too */
    if (svc_open(&svc, &cfg, &e)) {
        fprintf(stderr, "hypic-bench service: in-process: %s\n", e.msg);
        goto out;
    }
    b.vocab = svc.models[0].c->vocab;
    hy_rng rng;
    hy_rng_seed(&rng, 1);
    for (int s = 0; s < nseg; s++) {
        b.tok[s] = malloc(SEG_TOKENS * sizeof *b.tok[s]);
        if (!b.tok[s]) goto out;
        for (int t = 0; t < SEG_TOKENS; t++)
            b.tok[s][t] =
                VOCAB_FIRST + (uint32_t)(hy_rng_next(&rng) % (uint64_t)(b.vocab - VOCAB_FIRST));
    }
    printf("hypic-cached (pid %d) on %s; in-process service opened; %d core(s); "
           "OMP_WAIT_POLICY=%s\n",
           (int)b.d.pid, b.d.grpc, (int)cores,
           getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "(unset)");
    printf("warming %d segments of %d tokens on both ...\n", nseg, SEG_TOKENS);
    fflush(stdout);
    if (warm(&b)) goto out;

    /* the six phases */
    result lk1[2], lk16s[2], lk16i[2], pf1[2], pf16s[2], pf16i[2];
    printf("measuring: %.1f s per phase (+%.1f s unmeasured warm-up), %d segments per request, "
           "query of %d tokens, mode pic\n",
           duration, warmup, nseg, QUERY);
    fflush(stdout);
    if (phase(&b, LOOKUP, true, SERVICE, 1, warmup, duration, lk1) ||
        phase(&b, LOOKUP, false, SERVICE, CLIENTS, warmup, duration, lk16s) ||
        phase(&b, LOOKUP, false, INPROC, CLIENTS, warmup, duration, lk16i) ||
        phase(&b, PREFILL, true, SERVICE, 1, warmup, duration, pf1) ||
        phase(&b, PREFILL, false, SERVICE, CLIENTS, warmup, duration, pf16s) ||
        phase(&b, PREFILL, false, INPROC, CLIENTS, warmup, duration, pf16i))
        goto out;

    /* Lookup's CPU per call over the 16-client windows: service (both
     * processes) against in-process */
    const result *ls = &lk16s[SERVICE], *li = &lk16i[INPROC];
    const double per = 1e6 / (double)ls->calls; /* s over the window -> us per call */
    const double cli_us = (ls->cpu.self_user + ls->cpu.self_sys) * per;
    const double dmn_us = (ls->cpu.daemon_user + ls->cpu.daemon_sys) * per;
    const double inp_us = (li->cpu.self_user + li->cpu.self_sys) * 1e6 / (double)li->calls;
    const double cpu_bound_qps = (double)cores * 1e6 / (cli_us + dmn_us);
    /* the RPC's cost: outside the handler, from the same calls */
    const double overhead_ms = pf1[SERVICE].outside_p50 * 1e3;
    const double minus_inproc_ms = (pf1[SERVICE].p50 - pf1[INPROC].p50) * 1e3;

    printf("\n Lookup (%d segments, all hits)\n", nseg);
    print_result("service, 1 client", &lk1[SERVICE], true);
    print_result("in-process, 1 client", &lk1[INPROC], true);
    print_result("service, 16 clients", ls, true);
    print_result("in-process, 16 clients", li, true);
    printf(" Prefill (%d segments, all hits, pic)\n", nseg);
    print_result("service, 1 client", &pf1[SERVICE], false);
    print_result("in-process, 1 client", &pf1[INPROC], false);
    print_result("service, 16 clients", &pf16s[SERVICE], false);
    print_result("in-process, 16 clients", &pf16i[INPROC], false);

    printf("\nRPC overhead on Prefill, 1 client: p50 %.3f ms outside the handler (each call's "
           "latency minus the handler's own time, timings.total_ms; target < 0.5 ms).\n"
           "  Of it: the front door's own (timings.server_ms - total_ms: token, receipt, "
           "decoding) %.3f ms;\n"
           "  beyond the daemon's handling (loopback, gRPC's queues, the waiting threads' "
           "wake-ups, the client's own packing and decoding) %.3f ms.\n"
           "  In-process, the same handlers called without gRPC: %.3f ms outside the handler.\n"
           "Beside it, not an overhead: the service's p50 %.3f ms and the in-process p50 %.3f ms "
           "of the same requests\n"
           "  differ by %+.3f ms, mostly as the handler's own p50 does in the two processes "
           "(%.3f ms in the daemon, %.3f ms in-process).\n",
           overhead_ms, pf1[SERVICE].door_p50 * 1e3, pf1[SERVICE].wire_p50 * 1e3,
           pf1[INPROC].outside_p50 * 1e3, pf1[SERVICE].p50 * 1e3, pf1[INPROC].p50 * 1e3,
           minus_inproc_ms, pf1[SERVICE].handler_p50 * 1e3, pf1[INPROC].handler_p50 * 1e3);
    printf("Lookup, 16 clients: %.0f calls/s (target >= 20000), %.0f calls/s per core on %ld "
           "core(s) shared by the clients and the daemon.\n",
           ls->qps, ls->qps / (double)cores, cores);
    printf("  CPU per call: %.1f us in the clients (%.1f user, %.1f kernel) + %.1f us in the "
           "daemon (%.1f user, %.1f kernel) = %.1f us,\n"
           "  so these cores carry at most %.0f calls/s (they were %.0f %% busy);\n"
           "  the same Lookup in-process costs %.1f us of CPU (%.0f calls/s on 16 threads): the "
           "rest, %.1f us, is gRPC and loopback.\n",
           cli_us, ls->cpu.self_user * per, ls->cpu.self_sys * per, dmn_us,
           ls->cpu.daemon_user * per, ls->cpu.daemon_sys * per, cli_us + dmn_us, cpu_bound_qps,
           (cli_us + dmn_us) * ls->qps / 1e6 / (double)cores * 100, inp_us, li->qps,
           cli_us + dmn_us - inp_us);
    printf("  context switches per call: %.1f in the clients, %.1f in the daemon.\n",
           (double)ls->cpu.self_cs * per * 1e-6, (double)ls->cpu.daemon_cs * per * 1e-6);
    printf("{\"bench\":\"service\",\"segments\":%d,\"segment_tokens\":%d,\"duration_s\":%.1f,"
           "\"cores\":%ld,\"lookup_qps_1\":%.1f,\"lookup_qps_16\":%.1f,"
           "\"lookup_qps_16_per_core\":%.1f,\"lookup_p50_us\":%.1f,\"lookup_p99_us\":%.1f,"
           "\"lookup_p50_us_16\":%.1f,\"lookup_p99_us_16\":%.1f,"
           "\"inproc_lookup_qps_1\":%.1f,\"inproc_lookup_qps_16\":%.1f,"
           "\"inproc_lookup_p50_us\":%.2f,"
           "\"lookup_cpu_us_per_call\":{\"client\":%.2f,\"client_kernel\":%.2f,"
           "\"daemon\":%.2f,\"daemon_kernel\":%.2f,\"inproc\":%.2f},"
           "\"lookup_cpu_bound_qps\":%.1f,"
           "\"prefill_qps_1\":%.2f,\"prefill_qps_16\":%.2f,\"prefill_p50_ms\":%.4f,"
           "\"prefill_p99_ms\":%.4f,\"prefill_p50_ms_16\":%.4f,\"prefill_p99_ms_16\":%.4f,"
           "\"inproc_prefill_qps_16\":%.2f,\"inproc_prefill_p50_ms\":%.4f,"
           "\"inproc_prefill_p99_ms\":%.4f,"
           "\"prefill_handler_p50_ms\":{\"service\":%.4f,\"inproc\":%.4f},"
           "\"prefill_outside_handler_p50_ms\":{\"service\":%.4f,\"inproc\":%.4f},"
           "\"prefill_front_door_p50_ms\":%.4f,\"prefill_beyond_daemon_p50_ms\":%.4f,"
           "\"rpc_overhead_p50_ms\":%.4f,\"service_minus_inproc_p50_ms\":%.4f}\n",
           nseg, SEG_TOKENS, duration, cores, lk1[SERVICE].qps, ls->qps, ls->qps / (double)cores,
           lk1[SERVICE].p50 * 1e6, lk1[SERVICE].p99 * 1e6, ls->p50 * 1e6, ls->p99 * 1e6,
           lk1[INPROC].qps, li->qps, lk1[INPROC].p50 * 1e6, cli_us, ls->cpu.self_sys * per, dmn_us,
           ls->cpu.daemon_sys * per, inp_us, cpu_bound_qps, pf1[SERVICE].qps, pf16s[SERVICE].qps,
           pf1[SERVICE].p50 * 1e3, pf1[SERVICE].p99 * 1e3, pf16s[SERVICE].p50 * 1e3,
           pf16s[SERVICE].p99 * 1e3, pf16i[INPROC].qps, pf1[INPROC].p50 * 1e3,
           pf1[INPROC].p99 * 1e3, pf1[SERVICE].handler_p50 * 1e3, pf1[INPROC].handler_p50 * 1e3,
           pf1[SERVICE].outside_p50 * 1e3, pf1[INPROC].outside_p50 * 1e3,
           pf1[SERVICE].door_p50 * 1e3, pf1[SERVICE].wire_p50 * 1e3, overhead_ms, minus_inproc_ms);
    rc = 0;
out:
    fflush(stdout);
    if (b.d.pid > 0 && !hy_daemon_stop(&b.d)) {
        fprintf(stderr, "hypic-bench service: hypic-cached did not stop cleanly; its log:\n");
        char cmd[sizeof b.d.log + 32];
        snprintf(cmd, sizeof cmd, "tail -n 20 '%s' >&2", b.d.log);
        if (system(cmd)) { /* the log is best effort */
        }
        rc = 1;
    }
    if (svc_opened) svc_close(&svc);
    for (int s = 0; s < nseg; s++) free(b.tok[s]);
    hy_bench_rmtree(tmp);
    return rc;
}
