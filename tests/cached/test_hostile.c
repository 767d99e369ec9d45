/*
 * hypic-cached against a hostile client on the same host: two tenants with
 * tokens, the daemon on loopback, and each attack a client could make with
 * the access it has — a shared-memory session whose file it truncates or
 * makes huge and sparse, calls that send their headers and never a message,
 * a large request with no token, sessions dropped without CloseTransport, a
 * NUL inside the authorization value (over raw HTTP/2, which no gRPC library
 * sends) and inside every string field of every request. After each the
 * daemon must still be serving, and the entries stored before any of them
 * must read back byte for byte.
 */
#include "etcd_fixture.h" /* hy_test_etcd_free_port */
#include "h2_raw.h"
#include "hy_common.h"
#include "hy_rpc.h"
#include "hy_transport.h"
#include "service_fixture.h"
#include "test_util.h"

#include <CUnit/Basic.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/un.h>

static char g_tmp[128];
static hy_daemon g_d;
static hyc *g_alice, *g_bob, *g_anon;

#define ALICE "alice-token-0123456789"
#define BOB   "bob-token-0123456789ab"
#define CAROL "carol-token-0123456789"

#define WORKERS 4
#define IDLE_MS 1500
#define NDOCS   3

static const char *k_config =
    "listen: 127.0.0.1:0\n"
    "http_listen: ''\n"
    "models: [{name: tiny, path: var/models/tiny}]\n"
    "tiers: {host: {bytes: 64M}}\n"
    "executor: {threads: 1}\n"
    /* exact entries: the quota and lease caps below are sized by their bytes */
    "pic: {tolerance: 0, dtype: f32, t_dtype: f32, kv_dtype: f32}\n"
    "tenants:\n"
    "  list:\n"
    "    - {name: alice, token: " ALICE ", admin: true}\n"
    "    - {name: bob, token: " BOB "}\n"
    "    - {name: carol, token: " CAROL ", quota: 430000}\n"
    "limits: {workers: 4, watchers: 3, watchers_per_tenant: 1, idle_ms: 1500}\n"
    "transport: {max_sessions: 8, sessions_per_tenant: 6}\n"
    "log: {requests: false}\n";

/* The entries stored before the attacks, and their bytes. */
static uint8_t g_keys[NDOCS][32];
static void *g_bytes[NDOCS];
static size_t g_nbytes[NDOCS];

/* --- the daemon's state --------------------------------------------------------- */

/* A line of /proc/<pid>/status ("VmHWM:"), in KiB; -1 when absent. */
static long proc_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) v = atol(line + strlen(field));
    if (f) fclose(f);
    return v;
}

/* Resets the daemon's peak RSS (VmHWM) to its current RSS. */
static void reset_peak(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)pid);
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("5", f);
    fclose(f);
}

static int start_daemon(void);

/* The daemon is alive and serving, and every entry stored before reads back
 * byte for byte. A daemon that died is started again (the case failed), so
 * that every later case is still judged on its own. */
static void check_serving(const char *after)
{
    int st;
    const bool alive = waitpid(g_d.pid, &st, WNOHANG) == 0;
    CU_ASSERT(alive);
    if (!alive) {
        fprintf(stderr, "after %s: the daemon exited (status 0x%x); starting it again\n", after,
                st);
        g_d.pid = 0;
        CU_ASSERT_FATAL(start_daemon() == 0);
        return;
    }
    hyc_status hs;
    CU_ASSERT_EQUAL(health(g_anon, &hs), 0);
    for (int i = 0; i < NDOCS; i++) {
        void *b = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL(get_entry(g_alice, g_keys[i], &b, &n, &hs), 0);
        CU_ASSERT(n == g_nbytes[i] && b && !memcmp(b, g_bytes[i], n));
        free(b);
    }
}

/* --- transport sessions by hand ------------------------------------------------ */

/* OpenTransport for one offer of kind and capacity as the caller of c. */
static int open_session(hyc *c, Hypic__V1__Transport kind, uint64_t capacity,
                        Hypic__V1__OpenTransportResponse **out, hyc_status *st)
{
    Hypic__V1__TransportOffer o = HYPIC__V1__TRANSPORT_OFFER__INIT, *op = &o;
    o.kind = kind;
    o.capacity = capacity;
    Hypic__V1__OpenTransportRequest rq = HYPIC__V1__OPEN_TRANSPORT_REQUEST__INIT;
    rq.n_offers = 1;
    rq.offers = &op;
    *out = NULL;
    return hyc_open_transport(c, &rq, out, st);
}

/* The attach: HELLO (with memfd passed when >= 0) on fd, then the ACK's
 * status (0: attached). -1 when the daemon closed without an ACK. */
static int attach(int fd, const Hypic__V1__OpenTransportResponse *r, int memfd)
{
    uint8_t hello[HY_TP_FRAME_BYTES], ack[HY_TP_FRAME_BYTES];
    hy_tp_hello_pack(r->session, r->secret.data, hello);
    struct iovec iov = {hello, sizeof hello};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (memfd >= 0) {
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &memfd, sizeof(int));
    }
    if (sendmsg(fd, &m, MSG_NOSIGNAL) != (ssize_t)sizeof hello) return -1;
    if (recv(fd, ack, sizeof ack, MSG_WAITALL) != (ssize_t)sizeof ack) return -1;
    hy_tp_frame f;
    hy_err e = {0};
    if (hy_tp_frame_unpack(ack, &f, &e) || f.type != HY_TP_ACK) return -1;
    return (int)(int64_t)f.length;
}

static int connect_unix(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int connect_tcp(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A memfd of n bytes, sealed against shrinking and growing when seal. */
static int make_memfd(uint64_t n, bool seal)
{
    int fd = memfd_create("hostile", seal ? MFD_ALLOW_SEALING : 0);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_FATAL(ftruncate(fd, (off_t)n) == 0);
    if (seal) CU_ASSERT_FATAL(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0);
    return fd;
}

/* GetEntry of doc 0 into session id (the reply carries the delivery, no
 * chunks): the status code. */
static int get_into(uint64_t id)
{
    Hypic__V1__GetEntryRequest rq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    rq.model = "tiny";
    rq.key = (ProtobufCBinaryData){32, g_keys[0]};
    rq.transport_session = id;
    hy_rpc_client *cl;
    hy_err e = {0};
    hy_rpc_status st = {0};
    if (hy_rpc_client_open(g_d.grpc, 0, &cl, &e)) return -1;
    int rc = hy_rpc_client_call(cl, hy_rpc_method_named("GetEntry"), &rq.base, ALICE, 10000, NULL,
                                NULL, &st, &e);
    hy_rpc_client_close(cl);
    if (rc || st.code)
        fprintf(stderr, "  GetEntry into session %llu: %s %s\n", (unsigned long long)id,
                hy_rpc_code_name(st.code), rc ? e.msg : st.msg);
    return rc ? rc : st.code;
}

static void close_session(hyc *c, uint64_t id)
{
    Hypic__V1__CloseTransportRequest rq = HYPIC__V1__CLOSE_TRANSPORT_REQUEST__INIT;
    rq.session = id;
    Hypic__V1__CloseTransportResponse *r = NULL;
    hyc_status st;
    hyc_close_transport(c, &rq, &r, &st);
    hyc_free(r);
}

/* --- the cases ----------------------------------------------------------------- */

/* A client that truncates its memfd after attaching made the daemon's next
 * copy into it SIGBUS: only a memfd sealed at exactly the session's size is
 * taken now. */
static void test_shm_truncated(void)
{
    const uint64_t cap = 1 << 20;
    Hypic__V1__OpenTransportResponse *r;
    hyc_status st;
    /* unsealed: refused at the attach; truncating it afterwards harms nobody */
    CU_ASSERT_EQUAL_FATAL(open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_SHM, cap, &r, &st),
                          0);
    int mfd = make_memfd(cap, false);
    int fd = connect_unix(r->shm_socket);
    CU_ASSERT_FATAL(fd >= 0);
    const int ack = attach(fd, r, mfd);
    CU_ASSERT_NOT_EQUAL(ack, 0);
    CU_ASSERT(ftruncate(mfd, 0) == 0);
    CU_ASSERT_NOT_EQUAL(get_into(r->session), 0); /* no such session: never attached */
    close(fd);
    close(mfd);
    hyc_free(r);
    check_serving("a truncated memfd");
    /* sealed, but not the session's size */
    CU_ASSERT_EQUAL_FATAL(open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_SHM, cap, &r, &st),
                          0);
    mfd = make_memfd(2 * cap, true);
    fd = connect_unix(r->shm_socket);
    CU_ASSERT_NOT_EQUAL(attach(fd, r, mfd), 0);
    close(fd);
    close(mfd);
    hyc_free(r);
    /* sealed at its size: attached, and the entry lands in it */
    CU_ASSERT_EQUAL_FATAL(open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_SHM, cap, &r, &st),
                          0);
    mfd = make_memfd(cap, true);
    fd = connect_unix(r->shm_socket);
    CU_ASSERT_EQUAL(attach(fd, r, mfd), 0);
    uint8_t *map = mmap(NULL, cap, PROT_READ, MAP_SHARED, mfd, 0);
    CU_ASSERT_FATAL(map != MAP_FAILED);
    CU_ASSERT_EQUAL(get_into(r->session), 0);
    CU_ASSERT(!memcmp(map, g_bytes[0], g_nbytes[0]));
    munmap(map, cap);
    close_session(g_alice, r->session);
    close(fd);
    close(mfd);
    hyc_free(r);
    check_serving("a sealed memfd");
}

/* A sparse 2 GiB memfd costs its client nothing: the daemon's mapping of it
 * must not cost the daemon 2 GiB of resident memory either. */
static void test_shm_sparse_huge(void)
{
    const uint64_t cap = 2ull << 30;
    Hypic__V1__OpenTransportResponse *r;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_SHM, cap, &r, &st),
                          0);
    const long before = proc_kib(g_d.pid, "RssShmem:");
    int mfd = make_memfd(cap, true);
    int fd = connect_unix(r->shm_socket);
    CU_ASSERT_EQUAL(attach(fd, r, mfd), 0);
    CU_ASSERT_EQUAL(get_into(r->session), 0);
    const long after = proc_kib(g_d.pid, "RssShmem:");
    fprintf(stderr, "  RssShmem %ld -> %ld KiB after attaching a sparse 2 GiB memfd\n", before,
            after);
    CU_ASSERT(after - before < 64 * 1024);
    close_session(g_alice, r->session);
    close(fd);
    close(mfd);
    hyc_free(r);
    check_serving("a sparse huge memfd");
}

/* Calls that send their headers and never a message: without a token they
 * are refused from the headers alone; with one they hold at most the
 * tenant's in-flight limit (below the workers) and end after limits.idle_ms.
 * Health answers within 100 ms throughout, and another tenant is served. */
static void test_header_only_calls(void)
{
    h2_conn anon, al;
    CU_ASSERT_EQUAL_FATAL(h2_open(&anon, g_d.grpc), 0);
    CU_ASSERT_EQUAL_FATAL(h2_open(&al, g_d.grpc), 0);
    static const char bearer[] = "Bearer " ALICE;
    for (int i = 0; i < 2 * WORKERS; i++) {
        CU_ASSERT_PTR_NOT_NULL(h2_call(&anon, "/hypic.v1.Cache/Lookup", NULL, 0, NULL, 0, true));
        CU_ASSERT_PTR_NOT_NULL(
            h2_call(&al, "/hypic.v1.Cache/Lookup", bearer, sizeof bearer - 1, NULL, 0, true));
    }
    h2_pump(&anon, 300, NULL);
    h2_pump(&al, 300, NULL);
    long long t0 = hy_test_now_ms();
    hyc_status st;
    CU_ASSERT_EQUAL(health(g_anon, &st), 0);
    const long long health_ms = hy_test_now_ms() - t0;
    fprintf(stderr, "  Health in %lld ms beside %d header-only calls\n", health_ms, 4 * WORKERS);
    CU_ASSERT(health_ms < 100);
    segs s = {0};
    segs_doc(&s, 1, 300);
    Hypic__V1__LookupResponse *lr = NULL;
    CU_ASSERT_EQUAL(lookup(g_bob, &s, 0, &lr, &st), 0); /* bob still finds a worker */
    hyc_free(lr);
    int unauth = 0;
    for (int i = 0; i < anon.n; i++) unauth += anon.st[i].closed && anon.st[i].grpc_status == 16;
    CU_ASSERT_EQUAL(unauth, 2 * WORKERS);
    /* alice's: over her limit at once, the rest when idle_ms has passed */
    t0 = hy_test_now_ms();
    for (int i = 0; i < al.n; i++) h2_pump(&al, IDLE_MS + 2000, &al.st[i]);
    int exhausted = 0, idled = 0;
    for (int i = 0; i < al.n; i++) {
        exhausted += al.st[i].grpc_status == 8;
        idled += al.st[i].grpc_status == 4;
    }
    fprintf(stderr, "  alice's header-only calls: %d refused over her limit, %d ended idle\n",
            exhausted, idled);
    CU_ASSERT_EQUAL(idled, WORKERS - 1);
    CU_ASSERT_EQUAL(exhausted + idled, 2 * WORKERS);
    h2_close(&anon);
    h2_close(&al);
    check_serving("header-only calls");
}

/* n bytes of a LookupRequest made of empty segments (2 bytes each). */
static uint8_t *empty_segments(size_t n)
{
    uint8_t *b = malloc(n);
    for (size_t i = 0; i + 1 < n; i += 2) b[i] = 0x12, b[i + 1] = 0;
    return b;
}

/* One raw call of method name with body b[0..n) as token. */
static int raw_call(const char *name, const void *b, size_t n, const char *token, int64_t ms,
                    hy_rpc_status *st)
{
    hy_rpc_client *cl;
    hy_err e = {0};
    if (hy_rpc_client_open(g_d.grpc, 80u << 20, &cl, &e)) return -1;
    int rc = hy_rpc_client_call_raw(cl, hy_rpc_method_named(name)->path, b, n, token, ms, NULL,
                                    NULL, st, &e);
    hy_rpc_client_close(cl);
    return rc;
}

/* A 48 MiB request of empty segments with no token: refused from its
 * headers; the daemon's peak memory grows by less than the message. */
static void test_unauthenticated_large(void)
{
    const size_t n = 48u << 20;
    uint8_t *b = empty_segments(n);
    reset_peak(g_d.pid);
    const long before = proc_kib(g_d.pid, "VmHWM:");
    hy_rpc_status st;
    CU_ASSERT_EQUAL(raw_call("Lookup", b, n, NULL, 20000, &st), 0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNAUTHENTICATED);
    const long after = proc_kib(g_d.pid, "VmHWM:");
    fprintf(stderr, "  peak RSS %ld -> %ld KiB over a 48 MiB unauthenticated Lookup (%s)\n", before,
            after, hy_rpc_code_name(st.code));
    CU_ASSERT(after - before < (long)(n >> 10));
    free(b);
    check_serving("a large unauthenticated request");
}

/* Authenticated, a request is bounded by its method's own limit (a Lookup by
 * the segments and tokens a request may have), and decoding by a budget. */
static void test_authenticated_oversize(void)
{
    hy_rpc_status st;
    uint8_t *b = empty_segments(4u << 20);
    CU_ASSERT_EQUAL(raw_call("Lookup", b, 4u << 20, ALICE, 20000, &st), 0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_RESOURCE_EXHAUSTED);
    fprintf(stderr, "  4 MiB Lookup: %s %s\n", hy_rpc_code_name(st.code), st.msg);
    CU_ASSERT_EQUAL(raw_call("Health", b, 1u << 20, NULL, 20000, &st), 0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_RESOURCE_EXHAUSTED); /* a small method's limit */
    /* under the Lookup limit, but 700 000 segments decoded would take ~60 MiB */
    CU_ASSERT_EQUAL(raw_call("Lookup", b, 1400000, ALICE, 20000, &st), 0);
    CU_ASSERT_EQUAL(st.code, HY_RPC_RESOURCE_EXHAUSTED);
    fprintf(stderr, "  1.4 MB Lookup of empty segments: %s %s\n", hy_rpc_code_name(st.code),
            st.msg);
    free(b);
    check_serving("oversized requests");
}

/* Sessions whose client dropped its sockets without CloseTransport end with
 * their connection: another tenant opens one within a second. A tenant has
 * a cap of its own, below the daemon's. */
static void test_dropped_sessions(void)
{
    hyc_status st;
    Hypic__V1__OpenTransportResponse *r;
    int fds[6];
    for (int i = 0; i < 6; i++) {
        CU_ASSERT_EQUAL_FATAL(
            open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_TCP, 1 << 20, &r, &st), 0);
        fds[i] = connect_tcp((int)r->tcp_port);
        CU_ASSERT_EQUAL(attach(fds[i], r, -1), 0);
        hyc_free(r);
    }
    r = NULL;
    CU_ASSERT_EQUAL(open_session(g_alice, HYPIC__V1__TRANSPORT__TRANSPORT_TCP, 1 << 20, &r, &st),
                    HYC_RESOURCE_EXHAUSTED); /* transport.sessions_per_tenant */
    hyc_free(r);
    for (int i = 0; i < 6; i++) close(fds[i]); /* gone, without CloseTransport */
    hy_test_sleep_ms(200);
    const long long t0 = hy_test_now_ms();
    uint64_t ids[3];
    int opened = 0;
    for (int i = 0; i < 3; i++) {
        r = NULL;
        if (open_session(g_bob, HYPIC__V1__TRANSPORT__TRANSPORT_TCP, 1 << 20, &r, &st) == 0)
            ids[opened++] = r->session;
        else
            fprintf(stderr, "  bob's session %d: %s\n", i, st.msg);
        hyc_free(r);
    }
    fprintf(stderr, "  bob opened %d of 3 sessions in %lld ms after alice dropped 6\n", opened,
            hy_test_now_ms() - t0);
    CU_ASSERT_EQUAL(opened, 3);
    CU_ASSERT(hy_test_now_ms() - t0 < 1000);
    for (int i = 0; i < opened; i++) close_session(g_bob, ids[i]);
    check_serving("dropped sessions");
}

/* A NUL in the authorization value, over raw HTTP/2: the token is compared
 * over the bytes that came, which are not alice's token. */
static void test_nul_in_authorization(void)
{
    static const char v1[] = "Bearer " ALICE "\0junk", v2[] = "Bearer " ALICE "\0" BOB;
    const struct {
        const char *v;
        size_t n;
    } vals[] = {{v1, sizeof v1 - 1}, {v2, sizeof v2 - 1}};
    /* a ListRequest: empty */
    for (size_t i = 0; i < 2; i++) {
        h2_conn c;
        CU_ASSERT_EQUAL_FATAL(h2_open(&c, g_d.grpc), 0);
        h2_stream *s = h2_call(&c, "/hypic.v1.Cache/List", vals[i].v, vals[i].n, NULL, 0, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        h2_pump(&c, 5000, s);
        fprintf(stderr, "  authorization with a NUL: grpc-status %d (%s)\n", s->grpc_status,
                s->grpc_message);
        CU_ASSERT(s->closed);
        CU_ASSERT_EQUAL(s->grpc_status, HY_RPC_UNAUTHENTICATED);
        h2_close(&c);
    }
    /* the same path with the plain value works: the test would see a refusal
     * of everything otherwise */
    h2_conn c;
    CU_ASSERT_EQUAL_FATAL(h2_open(&c, g_d.grpc), 0);
    h2_stream *s = h2_call(&c, "/hypic.v1.Cache/List", v1, strlen(v1), NULL, 0, false);
    h2_pump(&c, 5000, s);
    CU_ASSERT_EQUAL(s->grpc_status, HY_RPC_OK);
    h2_close(&c);
    check_serving("a NUL in the authorization value");
}

/* Concurrent PutEntry calls of one tenant at its quota (4 entries of 300
 * tokens fit in 430 000 bytes): never more stored than the quota allows. */
typedef struct put_arg {
    void *bytes;
    size_t n;
    int code;
    char msg[512]; /* the status message of a call that failed */
    double s;      /* how long the call took */
} put_arg;

static void *put_one(void *arg)
{
    put_arg *a = arg;
    /* Sixteen connections dialled at once: gRPC fails a fail-fast call whose
     * first dial is refused (1 run in about 10 here under ctest -j, "failed to
     * connect to all addresses", and the errno it prints is not the dial's),
     * so these wait for the connection; the quota is what is tested here. */
    hyc_options o = {.target = g_d.grpc, .token = CAROL, .deadline_ms = 60000,
                     .wait_for_ready = true};
    hyc *c = NULL;
    hyc_status ost;
    if (hyc_open(&o, &c, &ost)) fprintf(stderr, "hyc_open: %s\n", ost.msg);
    Hypic__V1__PutEntryResponse *r = NULL;
    hyc_status st;
    const double t0 = hy_now_s();
    a->code = put_entry(c, a->bytes, a->n, &r, &st);
    a->s = hy_now_s() - t0;
    if (a->code) snprintf(a->msg, sizeof a->msg, "%s", st.msg);
    hyc_free(r);
    hyc_close(c);
    return NULL;
}

static void invalidate_all(hyc *c)
{
    Hypic__V1__InvalidateRequest rq = HYPIC__V1__INVALIDATE_REQUEST__INIT;
    rq.target_case = HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT;
    rq.all_of_tenant = true;
    Hypic__V1__InvalidateResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL(hyc_invalidate(c, &rq, &r, &st), 0);
    hyc_free(r);
}

static void test_quota_concurrent_puts(void)
{
    enum { N = 16 };
    hyc *carol = connect_as(&g_d, CAROL);
    put_arg a[N] = {{0}};
    hyc_status st;
    for (int round = 0; round < N / 4; round++) { /* 4 at a time fit her quota */
        segs s = {0};
        for (int i = 0; i < 4; i++) segs_doc(&s, 200 + round * 4 + i, 300);
        warm_out w;
        CU_ASSERT_EQUAL_FATAL(warm(carol, &s, &w, &st), 0);
        for (int i = 0; i < 4; i++) {
            put_arg *p = &a[round * 4 + i];
            CU_ASSERT_EQUAL_FATAL(get_entry(carol, w.keys[i], &p->bytes, &p->n, &st), 0);
        }
        invalidate_all(carol);
    }
    pthread_t t[N];
    for (int i = 0; i < N; i++) pthread_create(&t[i], NULL, put_one, &a[i]);
    int ok = 0, over = 0;
    double slowest = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        ok += a[i].code == 0;
        over += a[i].code == HYC_RESOURCE_EXHAUSTED;
        if (a[i].code && a[i].code != HYC_RESOURCE_EXHAUSTED) /* neither stored nor over */
            fprintf(stderr, "  put %d: status %d: %s\n", i, a[i].code, a[i].msg);
        if (a[i].s > slowest) slowest = a[i].s;
        free(a[i].bytes);
    }
    /* a refusal reaches its client at once, not at the client's deadline
     * (60 s): a status sent while the client still sends once left it
     * waiting there in about half the runs */
    fprintf(stderr, "  the slowest of the 16 puts took %.3f s\n", slowest);
    CU_ASSERT(slowest < 5.0);
    Hypic__V1__ListRequest lr = HYPIC__V1__LIST_REQUEST__INIT;
    Hypic__V1__ListResponse *l = NULL;
    CU_ASSERT_EQUAL(hyc_list(carol, &lr, &l, &st), 0);
    uint64_t bytes = 0;
    for (size_t i = 0; l && i < l->n_entries; i++) bytes += l->entries[i]->bytes;
    fprintf(stderr, "  16 concurrent PutEntry at the quota: %d stored, %d refused, %llu bytes\n",
            ok, over, (unsigned long long)bytes);
    CU_ASSERT(l && l->total == (uint64_t)ok);
    CU_ASSERT(ok <= 4);
    CU_ASSERT(bytes <= 430000);
    CU_ASSERT_EQUAL(ok + over, N);
    hyc_free(l);
    invalidate_all(carol);
    hyc_close(carol);
    check_serving("concurrent puts at the quota");
}

/* Lookup leases and Watch streams are capped per tenant: alice pinning all
 * she can (a quarter of the 64 MiB host tier) or holding her Watch leaves
 * bob his. */
static void test_leases_and_watchers_per_tenant(void)
{
    segs s = {0};
    for (int i = 0; i < NDOCS; i++) segs_key(&s, g_keys[i]);
    hyc_status st;
    int granted = 0, refused = 0;
    for (int i = 0; i < 80 && !refused; i++) {
        Hypic__V1__LookupResponse *r = NULL;
        const int rc = lookup(g_alice, &s, 3000, &r, &st);
        granted += rc == 0 && r && r->lease_id;
        refused += rc == HYC_RESOURCE_EXHAUSTED;
        hyc_free(r);
    }
    fprintf(stderr, "  alice: %d lease sets of %d entries granted, then %s\n", granted, NDOCS,
            refused ? st.msg : "no refusal");
    CU_ASSERT_EQUAL(refused, 1);
    CU_ASSERT(granted > 10 && granted < 80);
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL(lookup(g_bob, &s, 3000, &r, &st), 0); /* bob's own cap: untouched */
    hyc_free(r);
    /* Watch: one per tenant here */
    h2_conn c;
    CU_ASSERT_EQUAL_FATAL(h2_open(&c, g_d.grpc), 0);
    static const char ba[] = "Bearer " ALICE, bb[] = "Bearer " BOB;
    h2_stream *w1 = h2_call(&c, "/hypic.v1.Cache/Watch", ba, sizeof ba - 1, NULL, 0, false);
    h2_pump(&c, 300, NULL);
    h2_stream *w2 = h2_call(&c, "/hypic.v1.Cache/Watch", ba, sizeof ba - 1, NULL, 0, false);
    h2_stream *w3 = h2_call(&c, "/hypic.v1.Cache/Watch", bb, sizeof bb - 1, NULL, 0, false);
    h2_pump(&c, 500, w2);
    h2_pump(&c, 200, NULL);
    CU_ASSERT(!w1->closed);
    CU_ASSERT(w2->closed && w2->grpc_status == HY_RPC_RESOURCE_EXHAUSTED);
    CU_ASSERT(!w3->closed);
    fprintf(stderr, "  alice's second Watch: %d (%s); bob's first %s\n", w2->grpc_status,
            w2->grpc_message, w3->closed ? "closed" : "open");
    h2_close(&c);
    hy_test_sleep_ms(3100); /* alice's leases expire */
    r = NULL;
    CU_ASSERT_EQUAL(lookup(g_alice, &s, 3000, &r, &st), 0);
    hyc_free(r);
    check_serving("leases and Watch streams per tenant");
}

/* --- members ------------------------------------------------------------------- */

#define SECRET "members-secret-0123456789abcdefghijklmn"

/* A member credential as a member would make it, under secret. */
static void member_token(const char *secret, const char *tenant, char *out, size_t cap)
{
    char msg[128], hex[65];
    const int n = snprintf(msg, sizeof msg, "hypic member v1:%s", tenant);
    uint8_t mac[32];
    hy_hmac_sha256(secret, strlen(secret), msg, (size_t)n, mac);
    hy_hex(mac, 32, hex);
    snprintf(out, cap, "member:%s:%s", tenant, hex);
}

/* A TLS client trusting the fixture authority ca (a file of tests/fixtures/tls),
 * presenting the certificate cert (and its key) when not NULL. */
static hyc *connect_tls_as(const char *target, const char *token, const char *ca, const char *cert)
{
    char caf[300], cf[300], kf[300];
    snprintf(caf, sizeof caf, "%s/tls/%s", HY_FIXTURES_DIR, ca);
    snprintf(cf, sizeof cf, "%s/tls/%s.pem", HY_FIXTURES_DIR, cert ? cert : "");
    snprintf(kf, sizeof kf, "%s/tls/%s.key", HY_FIXTURES_DIR, cert ? cert : "");
    hyc_options o = {.target = target,
                     .token = token,
                     .deadline_ms = 60000,
                     .tls_ca_file = caf,
                     .tls_cert_file = cert ? cf : NULL,
                     .tls_key_file = cert ? kf : NULL};
    hyc *c = NULL;
    hyc_status st;
    if (hyc_open(&o, &c, &st)) fprintf(stderr, "hyc_open: %s\n", st.msg);
    return c;
}

static hyc *connect_tls(const char *target, const char *token)
{
    return connect_tls_as(target, token, "ca.pem", NULL);
}

/* Two members m1, m2 on loopback ports, tenant alice, the member secret,
 * each with the line tls[i] (tls: {...}) and cluster.tls_ca = ca (a file of
 * tests/fixtures/tls). */
static void start_members(hy_daemon m[2], int port[2], const char *const tls[2], const char *ca)
{
    port[0] = hy_test_etcd_free_port(), port[1] = hy_test_etcd_free_port();
    while (port[1] == port[0]) port[1] = hy_test_etcd_free_port();
    for (int i = 0; i < 2; i++) {
        char dir[200], cfg[2400];
        snprintf(dir, sizeof dir, "%.180s/m%d", g_tmp, i + 1);
        mkdir(dir, 0700);
        snprintf(cfg, sizeof cfg,
                 "listen: 127.0.0.1:%d\n"
                 "http_listen: ''\n"
                 "models: [{name: tiny, path: %s/var/models/tiny}]\n"
                 "tiers: {host: {bytes: 64M}}\n"
                 "executor: {threads: 1}\n"
                 "tenants:\n"
                 "  list:\n"
                 "    - {name: alice, token: " ALICE "}\n"
                 "%s"
                 "cluster:\n"
                 "  id: m%d\n"
                 "  secret: " SECRET "\n"
                 "  tls_ca: %s/tls/%s\n"
                 "  members: [{id: m1, address: '127.0.0.1:%d'}, {id: m2, address: "
                 "'127.0.0.1:%d'}]\n"
                 "log: {requests: false}\n",
                 port[i], g_tmp, tls[i], i + 1, HY_FIXTURES_DIR, ca, port[0], port[1]);
        CU_ASSERT_EQUAL_FATAL(hy_daemon_start(&m[i], dir, cfg), 0);
    }
}

/* Warms 8 documents through a1 (on m1) and waits for those m2 owns to be
 * listed through a2 (on m2): how many it owns, and how many landed. */
static void warm_and_land(hyc *a1, hyc *a2, const int port[2], int first_doc, int *on_m2,
                          int *landed, uint8_t keys[8][32])
{
    segs d = {0};
    for (int i = 0; i < 8; i++) segs_doc(&d, first_doc + i, 300);
    warm_out w;
    hyc_status st;
    *on_m2 = *landed = 0;
    CU_ASSERT_EQUAL_FATAL(warm(a1, &d, &w, &st), 0);
    /* which of them m2 owns (r = 1), by the rule the members use */
    char list[200];
    snprintf(list, sizeof list, "m1=127.0.0.1:%d,m2=127.0.0.1:%d", port[0], port[1]);
    hyc_cluster_options co = {.members = list, .client = {.deadline_ms = 20000}};
    hyc_cluster *cl = NULL;
    CU_ASSERT_EQUAL_FATAL(hyc_cluster_open(&co, &cl, &st), 0);
    for (int i = 0; i < 8; i++) {
        char own[1][64];
        hyc_cluster_owners(cl, w.keys[i], own, 1);
        *on_m2 += !strcmp(own[0], "m2");
        memcpy(keys[i], w.keys[i], 32);
    }
    hyc_cluster_close(cl);
    for (int t = 0; t < 200 && *landed < *on_m2; t++) { /* the puts to m2 are in the background */
        Hypic__V1__ListRequest lr = HYPIC__V1__LIST_REQUEST__INIT;
        Hypic__V1__ListResponse *l = NULL;
        *landed = hyc_list(a2, &lr, &l, &st) == 0 ? (int)l->total : -1;
        hyc_free(l);
        if (*landed < *on_m2) usleep(20000);
    }
}

/* Two members serving TLS, calling each other over TLS with the member
 * credential: a Warm on one puts the other's entries to it. A tenant may not
 * ask for one member's store alone (local_only), and a credential made with
 * another secret is refused. */
static void test_tls_members(void)
{
    const char *fx = HY_FIXTURES_DIR;
    char tls[400];
    snprintf(tls, sizeof tls, "tls: {cert: %s/tls/server.pem, key: %s/tls/server.key}\n", fx, fx);
    const char *const both[2] = {tls, tls};
    hy_daemon m[2];
    int port[2];
    start_members(m, port, both, "ca.pem");
    hyc *a1 = connect_tls(m[0].grpc, ALICE), *a2 = connect_tls(m[1].grpc, ALICE);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a2);
    int on_m2, landed;
    uint8_t keys[8][32];
    warm_and_land(a1, a2, port, 300, &on_m2, &landed, keys);
    fprintf(stderr, "  warmed 8 on m1 over TLS: %d owned by m2, %d landed there\n", on_m2, landed);
    CU_ASSERT(on_m2 > 0);
    CU_ASSERT_EQUAL(landed, on_m2);
    /* local_only: members only */
    segs k = {0};
    for (int i = 0; i < 8; i++) segs_key(&k, keys[i]);
    hyc_status st;
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = k.n;
    rq.segments = k.sp;
    rq.local_only = true;
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(a2, &rq, &r, &st), HYC_PERMISSION_DENIED);
    hyc_free(r);
    char good[200], bad[200];
    member_token(SECRET, "alice", good, sizeof good);
    member_token("another-secret-0123456789abcdefghijklmn", "alice", bad, sizeof bad);
    hyc *mg = connect_tls(m[1].grpc, good), *mb = connect_tls(m[1].grpc, bad);
    r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(mg, &rq, &r, &st), 0);
    CU_ASSERT(r && (int)r->leading_hits <= on_m2);
    hyc_free(r);
    r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(mb, &rq, &r, &st), HYC_UNAUTHENTICATED);
    fprintf(stderr, "  a member credential of another secret: %s\n", st.msg);
    hyc_free(r);
    /* a member credential is no admin's */
    Hypic__V1__SetPolicyRequest sp = HYPIC__V1__SET_POLICY_REQUEST__INIT;
    Hypic__V1__Policy pol = HYPIC__V1__POLICY__INIT;
    pol.tier = HYPIC__V1__TIER__TIER_HOST;
    pol.evict = "lru";
    sp.policy = &pol;
    Hypic__V1__Policy *pr = NULL;
    CU_ASSERT_EQUAL(hyc_set_policy(mg, &sp, &pr, &st), HYC_PERMISSION_DENIED);
    hyc_free(pr);
    hyc_close(mg);
    hyc_close(mb);
    hyc_close(a1);
    hyc_close(a2);
    for (int i = 0; i < 2; i++) CU_ASSERT(hy_daemon_stop(&m[i]));
    check_serving("TLS members");
}

/* Mutual TLS (tls.client_ca): the members present their certificates to
 * each other, so a Warm on m1 still lands on m2, which asks every connection
 * for one (tls.require_client_cert). On m1, which only asks: a tenant is
 * served without a certificate, the member credential is not (a stolen
 * credential alone is not a member), and a certificate of another authority
 * is refused at the handshake. */
static void test_mtls_members(void)
{
    const char *fx = HY_FIXTURES_DIR;
    char t1[600], t2[600];
    snprintf(t1, sizeof t1,
             "tls: {cert: %s/tls/member.pem, key: %s/tls/member.key, "
             "client_ca: %s/tls/members-ca.pem}\n",
             fx, fx, fx);
    snprintf(t2, sizeof t2,
             "tls: {cert: %s/tls/member.pem, key: %s/tls/member.key, "
             "client_ca: %s/tls/members-ca.pem, require_client_cert: true}\n",
             fx, fx, fx);
    const char *const tls[2] = {t1, t2};
    hy_daemon m[2];
    int port[2];
    start_members(m, port, tls, "members-ca.pem");
    hyc_status st;
    /* m2 serves no connection without a certificate of the members' authority */
    hyc *bare = connect_tls_as(m[1].grpc, ALICE, "members-ca.pem", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bare);
    Hypic__V1__ListRequest lr = HYPIC__V1__LIST_REQUEST__INIT;
    Hypic__V1__ListResponse *l = NULL;
    CU_ASSERT_EQUAL(hyc_list(bare, &lr, &l, &st), HYC_UNAVAILABLE);
    fprintf(stderr, "  m2 (require_client_cert), no certificate: %s\n", st.msg);
    hyc_free(l);
    hyc_close(bare);
    hyc *a1 = connect_tls_as(m[0].grpc, ALICE, "members-ca.pem", NULL);
    hyc *a2 = connect_tls_as(m[1].grpc, ALICE, "members-ca.pem", "member");
    CU_ASSERT_PTR_NOT_NULL_FATAL(a1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a2);
    int on_m2, landed;
    uint8_t keys[8][32];
    warm_and_land(a1, a2, port, 320, &on_m2, &landed, keys);
    fprintf(stderr, "  warmed 8 on m1 over mutual TLS: %d owned by m2, %d landed there\n", on_m2,
            landed);
    CU_ASSERT(on_m2 > 0);
    CU_ASSERT_EQUAL(landed, on_m2);
    /* the member credential on m1: with the members' certificate only */
    segs k = {0};
    for (int i = 0; i < 8; i++) segs_key(&k, keys[i]);
    Hypic__V1__LookupRequest rq = HYPIC__V1__LOOKUP_REQUEST__INIT;
    rq.model = "tiny";
    rq.n_segments = k.n;
    rq.segments = k.sp;
    rq.local_only = true;
    char good[200];
    member_token(SECRET, "alice", good, sizeof good);
    hyc *nocert = connect_tls_as(m[0].grpc, good, "members-ca.pem", NULL);
    hyc *cert = connect_tls_as(m[0].grpc, good, "members-ca.pem", "member");
    hyc *stranger = connect_tls_as(m[0].grpc, good, "members-ca.pem", "stranger");
    Hypic__V1__LookupResponse *r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(nocert, &rq, &r, &st), HYC_UNAUTHENTICATED);
    CU_ASSERT_PTR_NOT_NULL(strstr(st.msg, "mutual TLS"));
    fprintf(stderr, "  the member credential without a certificate: %s\n", st.msg);
    hyc_free(r);
    r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(cert, &rq, &r, &st), 0);
    hyc_free(r);
    r = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(stranger, &rq, &r, &st), HYC_UNAVAILABLE);
    fprintf(stderr, "  a certificate of another authority: %s\n", st.msg);
    hyc_free(r);
    /* a tenant on m1 needs none */
    l = NULL;
    CU_ASSERT_EQUAL(hyc_list(a1, &lr, &l, &st), 0);
    hyc_free(l);
    hyc_close(nocert);
    hyc_close(cert);
    hyc_close(stranger);
    hyc_close(a1);
    hyc_close(a2);
    for (int i = 0; i < 2; i++) CU_ASSERT(hy_daemon_stop(&m[i]));
    check_serving("mutual TLS members");
}

/* A member whose etcd serves TLS with auth on: it registers as the user the
 * configuration names (password from a file), and its registration can be
 * read by that user; with a wrong password it does not start, and says why. */
/* A client that follows the member set in et (TLS, auth on) as a user that
 * may only read the prefix: it sees the member at addr; a wrong password
 * and plaintext are refused, and the message says why. */
static void cluster_client_over_tls(hy_test_etcd *et, const char *ca, const char *addr)
{
    const char *steps[] = {
        "role add reader", "role grant-permission reader --prefix=true read /hypic/members/",
        "user add reader --new-user-password=reader-password-2", "user grant-role reader reader"};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        CU_ASSERT_FATAL(hy_test_etcdctl(et, steps[i]) == 0);
    for (int t = 0; t < 3; t++) {
        hyc_cluster_options o = {.etcd = et->endpoint,
                                 .etcd_tls_ca_file = t == 2 ? NULL : ca,
                                 .etcd_user = "reader",
                                 .etcd_password = t == 1 ? "wrong" : "reader-password-2",
                                 .client = {.token = ALICE, .deadline_ms = 5000}};
        hyc_cluster *cl = NULL;
        hyc_status st = {0};
        const int rc = hyc_cluster_open(&o, &cl, &st);
        if (t == 0) {
            CU_ASSERT_FATAL(rc == HYC_OK);
            char ids[4][64], addrs[4][256];
            const size_t n = hyc_cluster_members(cl, ids, addrs, 4);
            CU_ASSERT(n == 1 && !strcmp(ids[0], "m1") && !strcmp(addrs[0], addr));
            fprintf(stderr,
                    "  a client follows the set over TLS as read-only user reader: %zu member(s)\n",
                    n);
            hyc_cluster_close(cl);
            continue;
        }
        CU_ASSERT(rc != HYC_OK && cl == NULL);
        fprintf(stderr, "  %s: %s\n", t == 1 ? "wrong password" : "plaintext", st.msg);
        if (t == 1) {
            CU_ASSERT(rc == HYC_INVALID_ARGUMENT);
            CU_ASSERT(strstr(st.msg, "user 'reader'") != NULL);
            CU_ASSERT(strstr(st.msg, "authentication failed") != NULL);
        } else {
            CU_ASSERT(rc == HYC_UNAVAILABLE);
        }
    }
}

static void test_etcd_tls_user(void)
{
    const char *fx = HY_FIXTURES_DIR "/tls";
    char cert[300], key[300], ca[300];
    snprintf(cert, sizeof cert, "%s/server.pem", fx);
    snprintf(key, sizeof key, "%s/server.key", fx);
    snprintf(ca, sizeof ca, "%s/ca.pem", fx);
    hy_test_etcd et;
    CU_ASSERT_FATAL(hy_test_etcd_start_tls(&et, cert, key, ca) == 0);
    const int arc = hy_test_etcd_auth(&et, "hypic", "hypic-etcd-password-1", "/hypic/");
    if (arc == 77) {
        fprintf(stderr,
                "  SKIPPED: etcdctl not installed (deploy/debian-packages.txt: etcd-client)\n");
        hy_test_etcd_stop(&et);
        return;
    }
    CU_ASSERT_FATAL(arc == 0);
    for (int wrong = 0; wrong < 2; wrong++) {
        char dir[200], pw[240], cfg[2400];
        snprintf(dir, sizeof dir, "%.180s/etcd-m%d", g_tmp, wrong);
        mkdir(dir, 0700);
        snprintf(pw, sizeof pw, "%s/etcd.password", dir);
        FILE *f = fopen(pw, "w");
        CU_ASSERT_FATAL(f != NULL);
        fputs(wrong ? "not-the-password\n" : "hypic-etcd-password-1\n", f);
        fclose(f);
        snprintf(cfg, sizeof cfg,
                 "listen: 127.0.0.1:0\n"
                 "http_listen: ''\n"
                 "models: [{name: tiny, path: %s/var/models/tiny}]\n"
                 "tiers: {host: {bytes: 64M}}\n"
                 "executor: {threads: 1}\n"
                 "tenants: {list: [{name: alice, token: " ALICE "}]}\n"
                 "cluster:\n"
                 "  id: m1\n"
                 "  secret: " SECRET "\n"
                 "  etcd:\n"
                 "    endpoints: %s\n"
                 "    prefix: /hypic/members/\n"
                 "    tls_ca: %s\n"
                 "    user: hypic\n"
                 "    password_file: %s\n"
                 "log: {requests: false}\n",
                 g_tmp, et.endpoint, ca, pw);
        hy_daemon d;
        const int rc = hy_daemon_start(&d, dir, cfg);
        if (wrong) {
            CU_ASSERT(rc != 0);
            CU_ASSERT(hy_daemon_log_has(&d, "Authenticate as user 'hypic'"));
            CU_ASSERT(hy_daemon_log_has(&d, "authentication failed"));
            if (rc == 0) hy_daemon_stop(&d);
            continue;
        }
        CU_ASSERT_FATAL(rc == 0);
        CU_ASSERT(hy_daemon_log_has(&d, "(lease 10 s; TLS, as user hypic)"));
        hy_etcd *c = hy_test_etcd_client(&et, 2000);
        CU_ASSERT_FATAL(c != NULL);
        hy_etcd_kv *kvs = NULL;
        size_t n = 0;
        hy_err e = {0};
        CU_ASSERT(hy_etcd_range_prefix(c, "/hypic/members/", &kvs, &n, NULL, &e) == 0);
        CU_ASSERT(n == 1 && kvs && !strcmp(kvs[0].key, "/hypic/members/m1"));
        fprintf(stderr, "  registered over TLS as etcd user hypic: %s\n", n ? kvs[0].key : "-");
        hy_etcd_kvs_free(kvs, n);
        hy_etcd_close(c);
        cluster_client_over_tls(&et, ca, d.grpc);
        CU_ASSERT(hy_daemon_stop(&d));
    }
    hy_test_etcd_stop(&et);
    check_serving("etcd over TLS with a user");
}

/* --- a NUL in every string field of every request --------------------------- */

typedef struct probe {
    uint8_t b[256];
    size_t n;
    char path[160];
} probe;

static size_t put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* Every string field reachable from d (3 levels deep), each as a message
 * holding only that field, "a\0b", and its path as the daemon names it. */
static int collect(const ProtobufCMessageDescriptor *d, int depth, probe *out, int cap)
{
    int n = 0;
    for (unsigned i = 0; i < d->n_fields && n < cap; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        char name[80];
        snprintf(name, sizeof name, "%s%s", f->name,
                 f->label == PROTOBUF_C_LABEL_REPEATED ? "[0]" : "");
        if (f->type == PROTOBUF_C_TYPE_STRING) {
            probe *p = &out[n++];
            p->n = put_varint(p->b, (uint64_t)f->id << 3 | 2);
            p->b[p->n++] = 3;
            memcpy(p->b + p->n, "a\0b", 3);
            p->n += 3;
            snprintf(p->path, sizeof p->path, "%s", name);
        } else if (f->type == PROTOBUF_C_TYPE_MESSAGE && depth < 3) {
            probe sub[32];
            const int k = collect(f->descriptor, depth + 1, sub, 32);
            for (int j = 0; j < k && n < cap; j++) {
                probe *p = &out[n++];
                p->n = put_varint(p->b, (uint64_t)f->id << 3 | 2);
                p->n += put_varint(p->b + p->n, sub[j].n);
                memcpy(p->b + p->n, sub[j].b, sub[j].n);
                p->n += sub[j].n;
                snprintf(p->path, sizeof p->path, "%s.%s", name, sub[j].path);
            }
        }
    }
    return n;
}

static void test_nul_in_string_fields(void)
{
    int probes = 0, refused = 0;
    for (size_t m = 0; m < hy_rpc_method_count; m++) {
        probe p[64];
        const int k = collect(hy_rpc_methods[m].request, 0, p, 64);
        for (int i = 0; i < k; i++) {
            hy_rpc_status st = {0};
            CU_ASSERT_EQUAL(raw_call(hy_rpc_methods[m].name, p[i].b, p[i].n, ALICE, 3000, &st), 0);
            const bool ok = st.code == HY_RPC_INVALID_ARGUMENT && strstr(st.msg, p[i].path);
            if (!ok)
                fprintf(stderr, "  %s %s: %s %s\n", hy_rpc_methods[m].name, p[i].path,
                        hy_rpc_code_name(st.code), st.msg);
            probes++;
            refused += ok;
        }
    }
    fprintf(stderr, "  %d of %d string fields holding a NUL refused, naming the field\n", refused,
            probes);
    CU_ASSERT(probes > 20);
    CU_ASSERT_EQUAL(refused, probes);
    check_serving("NULs in string fields");
}

/* Starts the daemon, connects the clients and stores the entries the cases
 * check afterwards. */
static int start_daemon(void)
{
    hyc_close(g_alice);
    hyc_close(g_bob);
    hyc_close(g_anon);
    if (hy_daemon_start(&g_d, g_tmp, k_config)) return -1;
    g_alice = connect_as(&g_d, ALICE);
    g_bob = connect_as(&g_d, BOB);
    g_anon = connect_as(&g_d, NULL);
    segs s = {0};
    for (int i = 0; i < NDOCS; i++) segs_doc(&s, 100 + i, 300);
    warm_out w;
    hyc_status st;
    int rc = warm(g_alice, &s, &w, &st);
    for (int i = 0; !rc && i < NDOCS; i++) {
        memcpy(g_keys[i], w.keys[i], 32);
        free(g_bytes[i]);
        g_bytes[i] = NULL;
        rc = get_entry(g_alice, g_keys[i], &g_bytes[i], &g_nbytes[i], &st);
    }
    if (rc) fprintf(stderr, "test_hostile: setting up: %s\n", st.msg);
    return rc;
}

int main(void)
{
    if (!hy_daemon_bin()) {
        fprintf(stderr, "test_hostile: HYPIC_CACHED is not set\n");
        return 1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/hy-hostile-XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    if (start_daemon()) {
        hy_daemon_stop(&g_d);
        return 1;
    }
    static const hy_test_case cases[] = {
        {"shm: a truncated or unsealed memfd", test_shm_truncated},
        {"shm: a sparse 2 GiB memfd", test_shm_sparse_huge},
        {"header-only calls", test_header_only_calls},
        {"a 48 MiB request without a token", test_unauthenticated_large},
        {"requests over their method's limit", test_authenticated_oversize},
        {"sessions dropped without CloseTransport", test_dropped_sessions},
        {"a NUL in the authorization value", test_nul_in_authorization},
        {"a NUL in every string field", test_nul_in_string_fields},
        {"concurrent puts at the quota", test_quota_concurrent_puts},
        {"leases and Watch streams per tenant", test_leases_and_watchers_per_tenant},
        {"TLS members call each other as members", test_tls_members},
        {"mutual TLS: members present certificates", test_mtls_members},
        {"etcd over TLS, as a user of its own", test_etcd_tls_user},
        {NULL, NULL},
    };
    int failed = hy_test_main("hostile clients", cases);
    hyc_close(g_alice);
    hyc_close(g_bob);
    hyc_close(g_anon);
    if (!hy_daemon_stop(&g_d)) failed++;
    for (int i = 0; i < NDOCS; i++) free(g_bytes[i]);
    hy_test_rmtree(g_tmp);
    return failed;
}
