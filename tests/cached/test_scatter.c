/*
 * The router and its scatter workers, against real processes: a hypic-cached
 * that spawns two hypic-worker processes (scatter.spawn) and a plain one
 * (no workers) as the reference, both on the tiny preset.
 *
 *   - a cold request: its long misses are built by the workers (outcomes name
 *     them), the short one inline, and the answer is the reference's; the
 *     entries were stored: the same request again is all hits;
 *   - a segment repeated in a request is built once;
 *   - a slow worker (SIGSTOPped): its segments time out and are retried on
 *     the other; the request finishes within the timeout plus the builds;
 *     resumed, it answers probes and takes segments again;
 *   - a worker SIGKILLed while its Build is in progress: the request
 *     completes, no partial entry is stored (every entry of the request
 *     verifies), the daemon starts the worker again and uses it;
 *   - cancellation: a request whose deadline passes while both workers hang
 *     ends DEADLINE_EXCEEDED and the daemon calls its builds off at once
 *     (no segment stays in flight on the workers); a client killed
 *     mid-request does the same; with no worker up, misses are built inline;
 *   - a worker that dies in the middle of its stream (a fake one: the meta
 *     and one piece, then SIGKILL): nothing partial is stored, the segments
 *     are built inline, the failure is counted on the worker;
 *   - hypicctl-visible state: Stats lists the workers, up, with their counts.
 */
#include "h2_raw.h"
#include "hy_rpc.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <math.h>

static char g_tmp[128];
static hy_daemon g_d, g_ref;
static hyc *g_c, *g_r;

#define TIMEOUT_MS 2000

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* A daemon serving one preset of each family (a scatter section goes after
 * it), with 8 RPC threads: it runs with 2 workers and a reference daemon. */
#define SERVED                                                                                     \
    "listen: 127.0.0.1:0\n"                                                                        \
    "http_listen: \"\"\n"                                                                          \
    "models: [{name: tiny, path: var/models/tiny},\n"                                              \
    "         {name: tiny-olmo, path: var/models/tiny-olmo},\n"                                    \
    "         {name: tiny-minimax, path: var/models/tiny-minimax},\n"                              \
    "         {name: tiny-kimi, path: var/models/tiny-kimi},\n"                                    \
    "         {name: tiny-nemotron, path: var/models/tiny-nemotron},\n"                            \
    "         {name: tiny-ling, path: var/models/tiny-ling}]\n"                                    \
    "tiers: {host: {bytes: 256M}}\n"                                                               \
    "executor: {threads: 1}\n"                                                                     \
    "limits: {workers: 8, watchers: 2}\n"                                                          \
    "log: {requests: false}\n"

static const char *k_config = SERVED "scatter: {spawn: 2, min_tokens: 64, timeout_ms: 2000,\n"
                                     "          probe_ms: 100, retries: 2}\n";

static const char *k_ref_config = SERVED;

typedef struct worker_view {
    int n, up;
    char addr[4][64];
    int pid[4];
    bool is_up[4];
    uint32_t in_flight[4];
    uint64_t built[4], failed[4];
} worker_view;

static void workers(worker_view *v)
{
    memset(v, 0, sizeof *v);
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *r = NULL;
    hyc_status st;
    const int rc = hyc_stats(g_c, &q, &r, &st);
    if (rc) printf("\n    Stats: %s", st.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    for (size_t i = 0; i < r->n_workers && i < 4; i++) {
        const Hypic__V1__WorkerStats *w = r->workers[i];
        snprintf(v->addr[i], sizeof v->addr[i], "%s", w->address);
        v->pid[i] = w->pid;
        v->is_up[i] = w->up;
        v->in_flight[i] = w->in_flight;
        v->built[i] = w->segments_built;
        v->failed[i] = w->segments_failed;
        v->up += w->up;
        CU_ASSERT_STRING_EQUAL(w->source, "spawn");
    }
    v->n = (int)r->n_workers;
    hyc_free(r);
}

/* A Prefill in mode pic whose hits are always fetched: under REUSE_AUTO a
 * daemon that has measured a tiny model's passes may find computing a
 * segment cheaper than fetching it (on a loaded machine) and recompute it
 * inline under its true prefix, which is another answer than the
 * composition these tests compare. */
static int pic(hyc *c, segs *s, Hypic__V1__PrefillResponse **r, hyc_status *st)
{
    return prefill_reuse(c, s, HYPIC__V1__MODE__MODE_PIC,
                         HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH, r, st);
}

/* Waits up to s seconds for `up` workers to be up. */
static bool wait_up(int up, double s)
{
    worker_view v;
    for (int i = 0; i < (int)(s * 20); i++) {
        workers(&v);
        if (v.up == up) return true;
        usleep(50000);
    }
    return false;
}

/* The reference's answer to the same request: the segments the workers
 * built are warmed on the reference first (Warm builds from the empty state,
 * as Build does), the others it builds inline as the router did: top token
 * and continuation equal, logits close (the same entries composed in another
 * order of the same fp32 sums). */
static void same_as_reference(segs *s, const Hypic__V1__PrefillResponse *r)
{
    Hypic__V1__PrefillResponse *ref = NULL;
    hyc_status st;
    segs shipped = {0};
    for (size_t i = 0; i < s->n; i++)
        if (r->segments[i]->built_by[0] ||
            r->segments[i]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT) {
            const size_t j = shipped.n++;
            memcpy(shipped.ids[j], s->ids[i], s->tk[i].n_ids * sizeof s->ids[i][0]);
            shipped.tk[j] = s->tk[i];
            shipped.tk[j].ids = shipped.ids[j];
            shipped.sg[j] = s->sg[i];
            shipped.sg[j].tokens = &shipped.tk[j];
            shipped.sp[j] = &shipped.sg[j];
        }
    warm_out w;
    if (shipped.n) CU_ASSERT_EQUAL_FATAL(warm(g_r, &shipped, &w, &st), 0);
    /* the reference composes every shipped entry (pic: fetched, never
     * recomputed, which is another answer) */
    CU_ASSERT_EQUAL_FATAL(pic(g_r, s, &ref, &st), 0);
    for (size_t i = 0; i < s->n; i++) {
        const bool shipped_i = r->segments[i]->built_by[0] ||
                               r->segments[i]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT;
        if (shipped_i && ref->segments[i]->kind != HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT)
            printf("\n    the reference did not compose segment %zu (kind %d, recomputed %d)", i,
                   (int)ref->segments[i]->kind, (int)ref->segments[i]->recomputed);
        CU_ASSERT(!shipped_i ||
                  ref->segments[i]->kind == HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    }
    CU_ASSERT_EQUAL(r->top[0]->token, ref->top[0]->token);
    double worst = 0;
    for (size_t k = 0; k < r->n_top && k < ref->n_top; k++)
        if (r->top[k]->token == ref->top[k]->token)
            worst = fmax(worst, fabs((double)r->top[k]->logit - ref->top[k]->logit));
    if (!(worst < 1e-3)) printf("\n    logits differ from the reference's by %.3g", worst);
    CU_ASSERT(worst < 1e-3);
    CU_ASSERT_EQUAL(r->n_generated, ref->n_generated);
    for (size_t k = 0; k < r->n_generated && k < ref->n_generated; k++)
        CU_ASSERT_EQUAL(r->generated[k], ref->generated[k]);
    hyc_free(ref);
}

static void test_cold_request_on_workers(void)
{
    CU_ASSERT_FATAL(wait_up(2, 10));
    segs s = {0};
    segs_doc(&s, 100, 500);
    segs_doc(&s, 101, 300);
    segs_doc(&s, 102, 200);
    segs_doc(&s, 103, 40); /* under scatter.min_tokens: inline */
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT(r->segments[i]->stored);
    }
    for (int i = 0; i < 3; i++) CU_ASSERT(strncmp(r->segments[i]->built_by, "127.0.0.1:", 10) == 0);
    CU_ASSERT_STRING_EQUAL(r->segments[3]->built_by, "");
    /* LPT on two idle workers: 500 alone, 300 + 200 on the other */
    CU_ASSERT_STRING_NOT_EQUAL(r->segments[0]->built_by, r->segments[1]->built_by);
    CU_ASSERT_STRING_EQUAL(r->segments[1]->built_by, r->segments[2]->built_by);
    CU_ASSERT_EQUAL(r->timings->scattered, 3);
    CU_ASSERT_EQUAL(r->timings->scatter_workers, 2);
    CU_ASSERT_EQUAL(r->timings->scatter_retries, 0);
    printf("\n    cold: ttft %.1f ms, waited %.1f ms for entries, forward %.1f ms",
           r->timings->ttft_ms, r->timings->scatter_wait_ms, r->timings->forward_ms);
    same_as_reference(&s, r);
    hyc_free(r);
    /* the workers' entries were stored: all hits now */
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    CU_ASSERT_EQUAL(r->timings->scattered, 0);
    same_as_reference(&s, r);
    hyc_free(r);
    worker_view v;
    workers(&v);
    CU_ASSERT_EQUAL(v.n, 2);
    CU_ASSERT_EQUAL(v.built[0] + v.built[1], 3);
    CU_ASSERT(v.pid[0] > 0 && v.pid[1] > 0);
}

/* Every family the daemon serves is scattered alike: the workers load the
 * daemon's models, build the long misses of a request to each other family,
 * and the answer is the reference's. */
static void other_family_on_workers(const char *model, int d)
{
    CU_ASSERT_FATAL(wait_up(2, 10));
    g_svc_model = model;
    segs s = {0};
    segs_doc(&s, d, 400);
    segs_doc(&s, d + 1, 300);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT(r->segments[i]->stored);
        CU_ASSERT(strncmp(r->segments[i]->built_by, "127.0.0.1:", 10) == 0);
    }
    CU_ASSERT_EQUAL(r->timings->scattered, 2);
    same_as_reference(&s, r);
    hyc_free(r);
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT);
    same_as_reference(&s, r);
    hyc_free(r);
    g_svc_model = "tiny";
}

static void test_other_family_on_workers(void)
{
    other_family_on_workers("tiny-olmo", 120);
    other_family_on_workers("tiny-minimax", 130);
    other_family_on_workers("tiny-kimi", 140);
    other_family_on_workers("tiny-nemotron", 150);
    other_family_on_workers("tiny-ling", 160);
}

static void test_duplicates_built_once(void)
{
    segs s = {0};
    segs_doc(&s, 110, 300);
    segs_doc(&s, 111, 100);
    segs_doc(&s, 110, 300);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    CU_ASSERT_EQUAL(r->timings->scattered, 2);
    CU_ASSERT(r->segments[0]->built_by[0] != '\0');
    CU_ASSERT_STRING_EQUAL(r->segments[0]->built_by, r->segments[2]->built_by);
    same_as_reference(&s, r);
    hyc_free(r);
}

/* A cold request of two equal segments (documents d and d + 1) is spread
 * over both workers: each is up and taking work. */
static void both_used(int d)
{
    segs s = {0};
    segs_doc(&s, d, 400);
    segs_doc(&s, d + 1, 400);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    CU_ASSERT_EQUAL(r->timings->scatter_workers, 2);
    CU_ASSERT_STRING_NOT_EQUAL(r->segments[0]->built_by, r->segments[1]->built_by);
    hyc_free(r);
}

static void test_slow_worker_times_out(void)
{
    CU_ASSERT_FATAL(wait_up(2, 10));
    worker_view v;
    workers(&v);
    kill(v.pid[0], SIGSTOP);
    segs s = {0};
    segs_doc(&s, 120, 400);
    segs_doc(&s, 121, 350);
    segs_doc(&s, 122, 300);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    const double t0 = now_s();
    const int rc = pic(g_c, &s, &r, &st);
    const double took = now_s() - t0;
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    /* not stalled beyond the timeout: the stopped worker's segments went to
     * the other one once its call timed out (or were seen down first) */
    printf("\n    one worker stopped: %.2f s (timeout %.1f s), %u retried", took, TIMEOUT_MS / 1e3,
           r->timings->scatter_retries);
    CU_ASSERT(took < TIMEOUT_MS / 1e3 + 5);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT_STRING_NOT_EQUAL(r->segments[i]->built_by, v.addr[0]);
    }
    same_as_reference(&s, r);
    hyc_free(r);
    CU_ASSERT(wait_up(1, 5)); /* its probes time out: down */
    kill(v.pid[0], SIGCONT);
    CU_ASSERT_FATAL(wait_up(2, 10)); /* back */
    both_used(123);                  /* and used again */
}

/* Every entry of these outcomes is stored whole: Inspect verifies each
 * section's checksum. */
static void all_verify(hyc *c, const Hypic__V1__PrefillResponse *r, size_t n)
{
    hyc_status st;
    for (size_t i = 0; i < n; i++) {
        Hypic__V1__InspectResponse *ir = NULL;
        CU_ASSERT_EQUAL(inspect(c, r->segments[i]->key.data, true, &ir, &st), 0);
        if (ir) CU_ASSERT(ir->verified);
        hyc_free(ir);
    }
}

static void test_killed_worker(void)
{
    CU_ASSERT_FATAL(wait_up(2, 10));
    worker_view v;
    workers(&v);
    /* stopped, so that its Build is surely in progress when it dies */
    kill(v.pid[1], SIGSTOP);
    pid_t killer = fork();
    if (killer == 0) {
        usleep(300000);
        kill(v.pid[1], SIGKILL);
        _exit(0);
    }
    segs s = {0};
    segs_doc(&s, 130, 450);
    segs_doc(&s, 131, 400);
    segs_doc(&s, 132, 350);
    segs_doc(&s, 133, 300);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(pic(g_c, &s, &r, &st), 0);
    waitpid(killer, NULL, 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT(r->segments[i]->stored);
    }
    same_as_reference(&s, r);
    all_verify(g_c, r, 4); /* nothing partial */
    hyc_free(r);
    /* started again by the daemon, under the same address, and used */
    CU_ASSERT_FATAL(wait_up(2, 20));
    worker_view after;
    workers(&after);
    CU_ASSERT_STRING_EQUAL(after.addr[1], v.addr[1]);
    CU_ASSERT(after.pid[1] > 0 && after.pid[1] != v.pid[1]);
    both_used(134);
}

/* Both workers stopped; returns when no segment is in flight on either
 * (true) or after s seconds (false). */
static bool wait_idle(double s)
{
    worker_view v;
    for (int i = 0; i < (int)(s * 50); i++) {
        workers(&v);
        if (v.in_flight[0] == 0 && v.in_flight[1] == 0) return true;
        usleep(20000);
    }
    return false;
}

static void test_cancellation(void)
{
    CU_ASSERT_FATAL(wait_up(2, 10));
    worker_view v;
    workers(&v);
    kill(v.pid[0], SIGSTOP);
    kill(v.pid[1], SIGSTOP);
    /* a deadline that passes while the workers hang */
    hyc_options o = {.target = g_d.grpc, .deadline_ms = 400};
    hyc *c = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), 0);
    segs s = {0};
    segs_doc(&s, 140, 400);
    segs_doc(&s, 141, 400);
    Hypic__V1__PrefillResponse *r = NULL;
    const int drc = prefill(c, &s, HYPIC__V1__MODE__MODE_PIC, &r, &st);
    CU_ASSERT_EQUAL(drc, HYC_DEADLINE_EXCEEDED);
    if (drc != HYC_DEADLINE_EXCEEDED) { /* what came instead, for the log */
        printf("\n    expected DEADLINE_EXCEEDED, got %s: %s", hyc_code_name(drc), st.msg);
        for (size_t i = 0; r && i < r->n_segments; i++)
            printf("\n    segment %zu: kind %d, built by '%s'", i, (int)r->segments[i]->kind,
                   r->segments[i]->built_by);
        workers(&v);
        printf("\n    workers: pid %d, %d; in flight %u, %u", (int)v.pid[0], (int)v.pid[1],
               v.in_flight[0], v.in_flight[1]);
    }
    hyc_free(r);
    r = NULL;
    hyc_close(c);
    const double t0 = now_s();
    CU_ASSERT(wait_idle(1.0)); /* the builds were called off, not left to time out */
    printf("\n    deadline: builds called off %.0f ms after the client's deadline",
           (now_s() - t0) * 1e3);
    /* The same deadline seen by the server alone (grpc-timeout, no timer of
     * the client's): the status it sends must say DEADLINE_EXCEEDED. With a
     * gRPC client the two race, and the server's CANCELLED won now and then. */
    {
        segs s5 = {0};
        segs_doc(&s5, 147, 400);
        segs_doc(&s5, 148, 400);
        static uint32_t query[8] = {10, 20, 30, 40, 50, 60, 70, 80};
        Hypic__V1__PrefillRequest rq = HYPIC__V1__PREFILL_REQUEST__INIT;
        rq.model = "tiny";
        rq.n_segments = s5.n;
        rq.segments = s5.sp;
        rq.n_query = 8;
        rq.query = query;
        rq.mode = HYPIC__V1__MODE__MODE_PIC;
        const size_t n = hypic__v1__prefill_request__get_packed_size(&rq);
        uint8_t *buf = malloc(n);
        hypic__v1__prefill_request__pack(&rq, buf);
        h2_conn h;
        CU_ASSERT_EQUAL_FATAL(h2_open(&h, g_d.grpc), 0);
        h.timeout_ms = 400;
        h2_stream *hs = h2_call(&h, "/hypic.v1.Cache/Prefill", NULL, 0, buf, n, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(hs);
        h2_pump(&h, 5000, hs);
        CU_ASSERT(hs->closed);
        CU_ASSERT_EQUAL(hs->grpc_status, HY_RPC_DEADLINE_EXCEEDED);
        printf("\n    the server's own deadline: grpc-status %d (%s)", hs->grpc_status,
               hs->grpc_message);
        h2_close(&h);
        free(buf);
        CU_ASSERT(wait_idle(1.0));
    }
    /* a client that goes away mid-request: this program again (a fresh
     * process: gRPC's state does not survive a fork), killed */
    pid_t child = fork();
    if (child == 0) {
        execl("/proc/self/exe", "test_scatter", "--client", g_d.grpc, (char *)NULL);
        _exit(127);
    }
    bool busy = false; /* its segments reach the workers */
    for (int i = 0; i < 100 && !busy; i++) {
        workers(&v);
        busy = v.in_flight[0] + v.in_flight[1] > 0;
        usleep(20000);
    }
    CU_ASSERT(busy);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    CU_ASSERT(wait_idle(1.5));
    /* no worker answers: once the probes see it, misses are built inline */
    CU_ASSERT(wait_up(0, 10));
    segs s4 = {0};
    segs_doc(&s4, 145, 300);
    segs_doc(&s4, 146, 200);
    CU_ASSERT_EQUAL_FATAL(prefill(g_c, &s4, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT_STRING_EQUAL(r->segments[i]->built_by, "");
    }
    CU_ASSERT_EQUAL(r->timings->scattered, 0);
    hyc_free(r);
    kill(v.pid[0], SIGCONT);
    kill(v.pid[1], SIGCONT);
    CU_ASSERT(wait_up(2, 10));
    /* and the daemon serves on */
    segs s3 = {0};
    segs_doc(&s3, 144, 300);
    CU_ASSERT_EQUAL(prefill(g_c, &s3, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    hyc_free(r);
}

/* --- a worker that dies mid-stream ---------------------------------------------- */

/* The fake worker's Build: the meta (an entry of 1 MiB) and one piece of it,
 * then the process kills itself — the stream cut after its first layer. */
static void fake_build(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    static uint8_t piece[65536];
    memset(piece, 0x5a, sizeof piece);
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.model = "tiny";
    meta.bytes = 1 << 20;
    Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
    ch.meta = &meta;
    ch.placement_case = HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET;
    ch.offset = 65536;
    ch.data = (ProtobufCBinaryData){sizeof piece, piece};
    hy_rpc_call_send(c, &ch.base, NULL);
    usleep(200000); /* the piece is on its way */
    raise(SIGKILL);
}

static void fake_health(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    Hypic__V1__HealthResponse r = HYPIC__V1__HEALTH_RESPONSE__INIT;
    r.status = HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* The fake worker's process: serves Health and Build on a loopback port it
 * writes to port_file, until it kills itself or its parent dies. */
static int fake_worker_main(const char *port_file)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    hy_rpc_handler h[16] = {0};
    for (size_t i = 0; i < hy_rpc_method_count; i++) {
        if (strcmp(hy_rpc_methods[i].name, "Build") == 0) h[i] = fake_build;
        if (strcmp(hy_rpc_methods[i].name, "Health") == 0) h[i] = fake_health;
    }
    hy_rpc_server_config cfg = {.address = "127.0.0.1:0", .workers = 2};
    hy_rpc_server *srv;
    hy_err e = {0};
    if (hy_rpc_server_start(&cfg, h, NULL, &srv, &e)) return 1;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f) return 1;
    fprintf(f, "%d\n", hy_rpc_server_port(srv));
    fclose(f);
    rename(tmp, port_file);
    for (;;) pause();
}

static void test_worker_dies_mid_stream(void)
{
    char port_file[200];
    snprintf(port_file, sizeof port_file, "%s/fake.port", g_tmp);
    pid_t fake = fork();
    if (fake == 0) {
        execl("/proc/self/exe", "test_scatter", "--fake-worker", port_file, (char *)NULL);
        _exit(127);
    }
    int port = 0;
    for (int i = 0; i < 100 && !port; i++) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            if (fscanf(f, "%d", &port) != 1) port = 0;
            fclose(f);
        }
        if (!port) usleep(50000);
    }
    CU_ASSERT_FATAL(port > 0);
    char dir[200], cfg[1024];
    snprintf(dir, sizeof dir, "%.120s/with-fake", g_tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0700), 0);
    snprintf(cfg, sizeof cfg,
             "%sscatter: {workers: [{address: \"127.0.0.1:%d\"}], min_tokens: 64, "
             "probe_ms: 100, retries: 1}\n",
             k_ref_config, port);
    hy_daemon d;
    CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&d, dir, cfg), 0);
    hyc *c = connect_as(&d, NULL);
    segs s = {0};
    segs_doc(&s, 150, 300);
    segs_doc(&s, 151, 200);
    Hypic__V1__PrefillResponse *r = NULL;
    hyc_status st;
    /* the one worker dies in the middle of its first stream: the request
     * completes, its segments built inline */
    CU_ASSERT_EQUAL_FATAL(prefill(c, &s, HYPIC__V1__MODE__MODE_PIC, &r, &st), 0);
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(fake, &status, 0), fake);
    CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(r->segments[i]->kind, HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS);
        CU_ASSERT_STRING_EQUAL(r->segments[i]->built_by, "");
        CU_ASSERT(r->segments[i]->stored);
    }
    CU_ASSERT(r->timings->scattered >= 1);
    /* nothing partial stored: exactly the two entries built inline, whole */
    uint64_t total = 0;
    CU_ASSERT_EQUAL(list_total(c, &total, &st), 0);
    CU_ASSERT_EQUAL(total, 2);
    all_verify(c, r, 2);
    hyc_free(r);
    Hypic__V1__StatsRequest q = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *sr = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_stats(c, &q, &sr, &st), 0);
    CU_ASSERT_EQUAL_FATAL(sr->n_workers, 1);
    CU_ASSERT_EQUAL(sr->workers[0]->segments_failed, 1);
    CU_ASSERT_EQUAL(sr->workers[0]->segments_built, 0);
    printf("\n    the worker's last error: %s", sr->workers[0]->last_error);
    hyc_free(sr);
    hyc_close(c);
    CU_ASSERT(hy_daemon_stop(&d));
}

/* The client of test_cancellation's second half, in its own process. */
static int client_main(const char *target)
{
    hyc_options o = {.target = target, .deadline_ms = 60000};
    hyc *c = NULL;
    hyc_status st;
    Hypic__V1__PrefillResponse *r = NULL;
    segs *s = calloc(1, sizeof *s);
    segs_doc(s, 142, 400);
    segs_doc(s, 143, 400);
    if (hyc_open(&o, &c, &st) == 0) prefill(c, s, HYPIC__V1__MODE__MODE_PIC, &r, &st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--client") == 0) return client_main(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--fake-worker") == 0) return fake_worker_main(argv[2]);
    if (hy_test_mkdtemp("hy_test_scatter_", g_tmp, sizeof g_tmp)) return 1;
    char d1[200], d2[200];
    snprintf(d1, sizeof d1, "%s/router", g_tmp);
    snprintf(d2, sizeof d2, "%s/reference", g_tmp);
    if (mkdir(d1, 0700) || mkdir(d2, 0700) || hy_daemon_start(&g_ref, d2, k_ref_config)) {
        hy_test_rmtree(g_tmp);
        return 1;
    }
    if (hy_daemon_start(&g_d, d1, k_config)) {
        hy_daemon_stop(&g_ref);
        hy_test_rmtree(g_tmp);
        return 1;
    }
    g_c = connect_as(&g_d, NULL);
    g_r = connect_as(&g_ref, NULL);
    static const hy_test_case cases[] = {
        {"a cold request built on two workers, the reference's answer",
         test_cold_request_on_workers},
        {"another family's cold request built on the workers", test_other_family_on_workers},
        {"a repeated segment is built once", test_duplicates_built_once},
        {"a slow worker times out, its segments retried; resumed, used again",
         test_slow_worker_times_out},
        {"a worker killed mid-build: the request completes, the worker restarts",
         test_killed_worker},
        {"cancelled requests call their builds off; no worker up: inline", test_cancellation},
        {"a worker killed mid-stream: nothing partial stored, the request completes",
         test_worker_dies_mid_stream},
        {NULL, NULL},
    };
    int rc = hy_test_main("scatter", cases);
    hyc_close(g_c);
    hyc_close(g_r);
    if (!hy_daemon_stop(&g_d) || !hy_daemon_stop(&g_ref)) {
        fprintf(stderr, "a daemon did not stop cleanly on SIGTERM\n");
        rc = 1;
    }
    hy_test_rmtree(g_tmp);
    return rc;
}
