/*
 * Cancelling a call (rpc/client.c's hy_rpc_cancel, rpc/server.c's
 * hy_rpc_call_cancelled), on loopback against a server on a free port.
 * A handle fired from another thread ends a unary call and a server stream
 * blocked on its next message at once, CANCELLED "by the caller", and the
 * handler polling hy_rpc_call_cancelled sees it; so does a handler whose
 * client's deadline passed, or whose client process went away (exited or
 * was killed). A call that nobody cancels never reads as cancelled, through
 * its sends and after its status. A handle fired before the call stops it
 * before it reaches the server. A local call (hy_rpc_call_local) reads as
 * cancelled once its caller refused a message, and not before.
 *
 * The client process that goes away is this program again, run with
 * `--child <mode> <target>` in a forked child (exec'd at once: gRPC's
 * threads do not survive a fork, and a fresh process starts its own).
 */
#include "hy_rpc.h"
#include "rpc_fixture.h"
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* What the server's handlers saw, under mu; cv is signalled when ran or done
 * grows. One call at a time: each test resets it and waits for its handler
 * to end before the next. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ran, done;        /* handlers started, handlers ended */
    long long waited_ms;  /* waiting handler: its start to cancelled turning true; -1 never */
    bool still_cancelled; /* waiting handler: cancelled read again afterwards */
    int checks;           /* normal handlers: how many times cancelled was read */
    bool any_cancelled;   /* normal handlers: whether any of those read true */
    bool after_finish;    /* normal handlers: cancelled read after the status */
} g_rec = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static bool rec_wait(const int *counter, int want, long timeout_ms);
static int rec_get(const int *counter);

/* Starts a test's record, once the last test's handler has ended (it may
 * still be waiting when that test failed: its 10 s bound). */
static void rec_reset(void)
{
    rec_wait(&g_rec.done, rec_get(&g_rec.ran), 11000);
    pthread_mutex_lock(&g_rec.mu);
    g_rec.ran = g_rec.done = g_rec.checks = 0;
    g_rec.waited_ms = -1;
    g_rec.still_cancelled = g_rec.any_cancelled = g_rec.after_finish = false;
    pthread_mutex_unlock(&g_rec.mu);
}

static void rec_bump(int *counter)
{
    pthread_mutex_lock(&g_rec.mu);
    (*counter)++;
    pthread_cond_broadcast(&g_rec.cv);
    pthread_mutex_unlock(&g_rec.mu);
}

static int rec_get(const int *counter)
{
    pthread_mutex_lock(&g_rec.mu);
    int v = *counter;
    pthread_mutex_unlock(&g_rec.mu);
    return v;
}

/* Waits up to timeout_ms for *counter (g_rec.ran or g_rec.done) to reach
 * want; whether it did. */
static bool rec_wait(const int *counter, int want, long timeout_ms)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&g_rec.mu);
    while (*counter < want)
        if (pthread_cond_timedwait(&g_rec.cv, &g_rec.mu, &dl)) break;
    bool ok = *counter >= want;
    pthread_mutex_unlock(&g_rec.mu);
    return ok;
}

/* ---- handlers ---- */

/* Lookup (unary) and Watch (server stream; it sends one event first, so the
 * client then waits for the next): polls hy_rpc_call_cancelled every 5 ms
 * for at most 10 s, as a handler waiting for other work would, and records
 * when it turned true. */
static void h_wait(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    if (hy_rpc_call_method(c)->shape == HY_RPC_SERVER_STREAM) {
        Hypic__V1__WatchEvent ev = HYPIC__V1__WATCH_EVENT__INIT;
        ev.kind = HYPIC__V1__WATCH_EVENT__KIND__KIND_HEARTBEAT;
        hy_rpc_call_send(c, &ev.base, NULL);
    }
    rec_bump(&g_rec.ran);
    const long long t0 = hy_test_now_ms();
    long long waited = -1;
    while (hy_test_now_ms() - t0 < 10000) {
        if (hy_rpc_call_cancelled(c)) {
            waited = hy_test_now_ms() - t0;
            break;
        }
        hy_test_sleep_ms(5);
    }
    const bool still = hy_rpc_call_cancelled(c);
    /* Past the deadline, say so: this status can reach the client before its
     * own deadline timer fires (seen under ASan, with another test running),
     * and the client must see DEADLINE_EXCEEDED either way. */
    hy_rpc_call_finish(c, hy_rpc_call_ms_left(c) < 0 ? HY_RPC_DEADLINE_EXCEEDED : HY_RPC_CANCELLED,
                       "gave up waiting");
    pthread_mutex_lock(&g_rec.mu);
    g_rec.waited_ms = waited;
    g_rec.still_cancelled = still;
    pthread_mutex_unlock(&g_rec.mu);
    rec_bump(&g_rec.done);
}

/* Reads hy_rpc_call_cancelled into the record. */
static void check(hy_rpc_call *c)
{
    bool v = hy_rpc_call_cancelled(c);
    pthread_mutex_lock(&g_rec.mu);
    g_rec.checks++;
    g_rec.any_cancelled |= v;
    pthread_mutex_unlock(&g_rec.mu);
}

/* Ends a call OK and records whether it counted as cancelled after that. */
static void finish_recorded(hy_rpc_call *c)
{
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
    bool after = hy_rpc_call_cancelled(c);
    pthread_mutex_lock(&g_rec.mu);
    g_rec.after_finish = after;
    pthread_mutex_unlock(&g_rec.mu);
    rec_bump(&g_rec.done);
}

/* Health (unary), nobody cancels: cancelled read before and after the send,
 * and after the status. */
static void h_health(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    rec_bump(&g_rec.ran);
    check(c);
    Hypic__V1__HealthResponse r = HYPIC__V1__HEALTH_RESPONSE__INIT;
    r.status = HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
    r.version = "test";
    hy_rpc_call_send(c, &r.base, NULL);
    check(c);
    finish_recorded(c);
}

/* Warm (server stream), nobody cancels: one progress message per segment,
 * cancelled read before the first and after each. */
static void h_warm(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__WarmRequest *w = (const Hypic__V1__WarmRequest *)req;
    rec_bump(&g_rec.ran);
    check(c);
    for (size_t i = 0; i < w->n_segments; i++) {
        Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
        p.index = (uint32_t)i;
        p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
        hy_rpc_call_send(c, &p.base, NULL);
        check(c);
    }
    finish_recorded(c);
}

static int on_count(void *ctx, const ProtobufCMessage *m)
{
    (void)m;
    (*(int *)ctx)++;
    return 0;
}

/* ---- a handle fired while the call runs ---- */

typedef struct firer {
    hy_rpc_cancel *h;
    long long fired_at;
} firer;

/* 200 ms after the handler started, fires the handle (twice: idempotent). */
static void *fire_later(void *arg)
{
    firer *f = arg;
    rec_wait(&g_rec.ran, 1, 5000);
    hy_test_sleep_ms(200);
    f->fired_at = hy_test_now_ms();
    hy_rpc_cancel_fire(f->h);
    hy_rpc_cancel_fire(f->h);
    return NULL;
}

static void fire_during(const char *name, const ProtobufCMessage *req, int want_msgs)
{
    rec_reset();
    hy_rpc_cancel *h;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_cancel_new(&h, &e), HY_OK);
    CU_ASSERT_FALSE(hy_rpc_cancel_fired(h));
    firer f = {.h = h, .fired_at = -1};
    pthread_t t;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, fire_later, &f), 0);
    hy_rpc_status st = {0};
    int n = 0;
    int rc = hy_rpc_client_call_ex(g_cl, method(name), req, NULL, 10000, h, on_count, &n, &st, &e);
    const long long returned = hy_test_now_ms();
    pthread_join(t, NULL);
    CU_ASSERT_EQUAL(rc, HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_CANCELLED);
    CU_ASSERT(strstr(st.msg, "cancelled by the caller") != NULL);
    CU_ASSERT_EQUAL(n, want_msgs);
    CU_ASSERT(hy_rpc_cancel_fired(h));
    CU_ASSERT(f.fired_at > 0);
    CU_ASSERT(returned - f.fired_at < 1000); /* at once, not at the 10 s deadline */
    /* the handler saw its call cancelled, after the fire (200 ms in) */
    CU_ASSERT_FATAL(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT(g_rec.waited_ms >= 150);
    CU_ASSERT(g_rec.waited_ms < 1500);
    CU_ASSERT(g_rec.still_cancelled);
    hy_rpc_cancel_free(h);
}

static void test_fire_unary(void)
{
    Hypic__V1__LookupRequest req = HYPIC__V1__LOOKUP_REQUEST__INIT;
    fire_during("Lookup", &req.base, 0);
}

/* The client is blocked waiting for the stream's second message. */
static void test_fire_server_stream(void)
{
    Hypic__V1__WatchRequest req = HYPIC__V1__WATCH_REQUEST__INIT;
    fire_during("Watch", &req.base, 1);
}

/* ---- the client's deadline passes ---- */

static void test_deadline_passes(void)
{
    rec_reset();
    Hypic__V1__LookupRequest req = HYPIC__V1__LOOKUP_REQUEST__INIT;
    hy_rpc_status st = {0};
    hy_err e = {0};
    const long long t0 = hy_test_now_ms();
    CU_ASSERT_EQUAL(
        hy_rpc_client_call(g_cl, method("Lookup"), &req.base, NULL, 300, NULL, NULL, &st, &e),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_DEADLINE_EXCEEDED);
    CU_ASSERT(hy_test_now_ms() - t0 < 2000);
    CU_ASSERT_FATAL(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT(g_rec.waited_ms >= 200); /* not before the deadline */
    CU_ASSERT(g_rec.waited_ms < 1500);
    CU_ASSERT(g_rec.still_cancelled);
}

/* ---- the client process goes away ---- */

/* In the child: a Watch call without a deadline (the handler waits until it
 * sees the client gone); in mode "exit" the process _exits 200 ms after the
 * call began, in mode "kill" it waits for the parent's SIGKILL. */
static void *exit_later(void *arg)
{
    (void)arg;
    hy_test_sleep_ms(200);
    _exit(0);
}

static int child_main(const char *mode, const char *target)
{
    hy_rpc_client *cl;
    hy_err e = {0};
    if (hy_rpc_client_open(target, 1 << 20, &cl, &e)) return 2;
    pthread_t t;
    if (strcmp(mode, "exit") == 0 && pthread_create(&t, NULL, exit_later, NULL)) return 3;
    Hypic__V1__WatchRequest req = HYPIC__V1__WATCH_REQUEST__INIT;
    hy_rpc_status st;
    hy_rpc_client_call(cl, method("Watch"), &req.base, NULL, 0, NULL, NULL, &st, &e);
    _exit(4); /* the call should not have returned */
}

/* Runs this program as a client in mode, lets the handler start, and makes
 * the client go: its own _exit ("exit") or SIGKILL 200 ms in ("kill"). */
static void client_goes(const char *mode)
{
    rec_reset();
    char *argv[] = {(char *)"test_cancel", (char *)"--child", (char *)mode, g_target, NULL};
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    bool ran = rec_wait(&g_rec.ran, 1, 5000);
    CU_ASSERT(ran);
    if (strcmp(mode, "kill") == 0) {
        hy_test_sleep_ms(200);
        kill(pid, SIGKILL);
    }
    int status = 0;
    pid_t got = 0;
    for (int i = 0; i < 500 && got == 0; i++) { /* bounded: 5 s */
        got = waitpid(pid, &status, WNOHANG);
        if (got == 0) hy_test_sleep_ms(10);
    }
    if (got == 0) { /* still there: the test fails, but leaves no process behind */
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CU_ASSERT_EQUAL(got, pid);
    const bool killed = strcmp(mode, "kill") == 0;
    CU_ASSERT(killed ? WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL
                     : WIFEXITED(status) && WEXITSTATUS(status) == 0);
    if (!ran) return;
    CU_ASSERT_FATAL(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT(g_rec.waited_ms >= 150);
    CU_ASSERT(g_rec.waited_ms < 2000); /* seen soon after, not at the handler's 10 s */
    CU_ASSERT(g_rec.still_cancelled);
}

static void test_client_process_killed(void)
{
    client_goes("kill");
}

static void test_client_process_exits(void)
{
    client_goes("exit");
}

/* ---- nobody cancels ---- */

static void test_normal_calls(void)
{
    hy_rpc_cancel *h;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_cancel_new(&h, &e), HY_OK);

    rec_reset();
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    hy_rpc_status st = {0};
    int n = 0;
    CU_ASSERT_EQUAL(hy_rpc_client_call_ex(g_cl, method("Health"), &hr.base, NULL, 5000, h, on_count,
                                          &n, &st, &e),
                    HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_STRING_EQUAL(st.msg, "");
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_FATAL(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT_EQUAL(g_rec.checks, 2);
    CU_ASSERT_FALSE(g_rec.any_cancelled);
    CU_ASSERT_FALSE(g_rec.after_finish);

    rec_reset();
    Hypic__V1__Segment segs[3], *ps[3];
    for (int i = 0; i < 3; i++) {
        hypic__v1__segment__init(&segs[i]);
        ps[i] = &segs[i];
    }
    Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
    wr.n_segments = 3;
    wr.segments = ps;
    n = 0;
    CU_ASSERT_EQUAL(
        hy_rpc_client_call_ex(g_cl, method("Warm"), &wr.base, NULL, 5000, h, on_count, &n, &st, &e),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_FATAL(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT_EQUAL(g_rec.checks, 4);
    CU_ASSERT_FALSE(g_rec.any_cancelled);
    CU_ASSERT_FALSE(g_rec.after_finish);

    /* the handle never fired; firing it with no call under it is harmless */
    CU_ASSERT_FALSE(hy_rpc_cancel_fired(h));
    hy_rpc_cancel_fire(h);
    CU_ASSERT(hy_rpc_cancel_fired(h));
    hy_rpc_cancel_free(h);
}

/* ---- a handle fired before the call ---- */

static void test_fired_before(void)
{
    rec_reset();
    hy_rpc_cancel *h;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_cancel_new(&h, &e), HY_OK);
    hy_rpc_cancel_fire(h);
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    for (int i = 0; i < 2; i++) { /* every call started under it */
        hy_rpc_status st = {0};
        int n = 0;
        CU_ASSERT_EQUAL(hy_rpc_client_call_ex(g_cl, method("Health"), &hr.base, NULL, 5000, h,
                                              on_count, &n, &st, &e),
                        HY_OK);
        CU_ASSERT_EQUAL(st.code, HY_RPC_CANCELLED);
        CU_ASSERT(strstr(st.msg, "cancelled by the caller") != NULL);
        CU_ASSERT_EQUAL(n, 0);
    }
    hy_rpc_cancel_free(h);
    hy_test_sleep_ms(200); /* a request that had left would have reached the handler by now */
    CU_ASSERT_EQUAL(rec_get(&g_rec.ran), 0);

    /* the same call without the handle does reach it */
    hy_rpc_status st = {0};
    CU_ASSERT_EQUAL(hy_rpc_client_call_ex(g_cl, method("Health"), &hr.base, NULL, 5000, NULL, NULL,
                                          NULL, &st, &e),
                    HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT(rec_wait(&g_rec.done, 1, 5000));
    CU_ASSERT_EQUAL(rec_get(&g_rec.ran), 1);
}

/* ---- local calls ---- */

/* What h_local saw: cancelled before any send, then each send's result and
 * cancelled after it. */
static struct {
    bool before;
    int send_rc[3];
    bool after[3];
} g_local;

/* Warm, in-process: three progress messages whatever happens to them. */
static void h_local(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    g_local.before = hy_rpc_call_cancelled(c);
    for (int i = 0; i < 3; i++) {
        Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
        p.index = (uint32_t)i;
        g_local.send_rc[i] = hy_rpc_call_send(c, &p.base, NULL);
        g_local.after[i] = hy_rpc_call_cancelled(c);
    }
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* The opposite of what h_local should record (want_after: cancelled after
 * each send), so a handler that did not run fails every check. */
static void local_reset(bool want_after)
{
    g_local.before = true;
    for (int i = 0; i < 3; i++) {
        g_local.send_rc[i] = 1;
        g_local.after[i] = !want_after;
    }
}

static int on_refuse(void *ctx, const ProtobufCMessage *m)
{
    (void)m;
    (*(int *)ctx)++;
    return 42;
}

static void test_local(void)
{
    Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
    hy_rpc_status st;
    int n = 0;
    local_reset(false);
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Warm"), &wr.base, h_local, NULL, on_count, &n, NULL, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_FALSE(g_local.before);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(g_local.send_rc[i], HY_OK);
        CU_ASSERT_FALSE(g_local.after[i]);
    }

    /* the caller refuses the first message: cancelled from then on */
    n = 0;
    local_reset(true);
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Warm"), &wr.base, h_local, NULL, on_refuse, &n, NULL, &st), 42);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_FALSE(g_local.before);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(g_local.send_rc[i], HY_EIO);
        CU_ASSERT(g_local.after[i]);
    }
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--child") == 0) return child_main(argv[2], argv[3]);
    set_handler("Lookup", h_wait);
    set_handler("Watch", h_wait);
    set_handler("Health", h_health);
    set_handler("Warm", h_warm);
    if (rpc_fixture_start("test_cancel", 2)) return 1;
    static const hy_test_case cases[] = {
        {"fire_unary", test_fire_unary},
        {"fire_server_stream", test_fire_server_stream},
        {"deadline_passes", test_deadline_passes},
        {"client_process_killed", test_client_process_killed},
        {"client_process_exits", test_client_process_exits},
        {"normal_calls", test_normal_calls},
        {"fired_before", test_fired_before},
        {"local", test_local},
        {NULL, NULL},
    };
    int rc = hy_test_main("rpc_cancel", cases);
    rpc_fixture_stop();
    return rc;
}
