/*
 * libhypic-client against a scripted hypic.v1 server on loopback (the rpc
 * transport's server with test handlers, no daemon): what the client itself
 * promises. Responses the caller owns; the server's status and message as
 * they were sent; GetEntry's chunks reassembled byte-exact and refused
 * (INTERNAL "client: ...") when they break the stream's rules; PutEntry cut
 * into chunks of the asked size with the metadata first and meta.bytes set;
 * a stream callback that stops ends the call (the server sees the client
 * go); a response that does not decode; no server (UNAVAILABLE); a deadline;
 * options refused before anything is sent; TLS through a CA file.
 */
#include "hy_rpc.h"
#include "hypic_client.h"
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

static hy_rpc_server *g_srv;
static hyc *g_c;
static char g_target[64];
static hy_rpc_handler g_handlers[16];

static const hy_rpc_method *method(const char *name)
{
    return hy_rpc_method_named(name);
}

/* ---- the scripted server ---- */

/* Health: SERVING, version = the request's authorization metadata. */
static void h_health(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    char auth[128] = "none";
    hy_rpc_call_metadata(c, "authorization", auth, sizeof auth);
    Hypic__V1__HealthResponse r = HYPIC__V1__HEALTH_RESPONSE__INIT;
    r.status = HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
    r.version = auth;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* Lookup: NOT_FOUND naming the first segment when there is one; otherwise
 * sleeps 300 ms (for deadlines), then OK with one segment status. */
static void h_lookup(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__LookupRequest *rq = (const Hypic__V1__LookupRequest *)req;
    if (rq->n_segments) {
        hy_rpc_call_finish(c, HY_RPC_NOT_FOUND, "segments[0]: no such entry");
        return;
    }
    hy_test_sleep_ms(300);
    Hypic__V1__SegmentStatus s = HYPIC__V1__SEGMENT_STATUS__INIT;
    Hypic__V1__SegmentStatus *ps = &s;
    s.tokens = 42;
    Hypic__V1__LookupResponse r = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    r.n_segments = 1;
    r.segments = &ps;
    r.leading_tokens = 42;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* Stats: answers with bytes that are not a StatsResponse (a Tokens message
 * whose field 1 is length-delimited where StatsResponse's field 1 is a
 * sub-message holding garbage). */
static void h_stats_garbage(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    Hypic__V1__Segment s = HYPIC__V1__SEGMENT__INIT;
    s.ref_case = HYPIC__V1__SEGMENT__REF_KEY;
    static uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    s.key.data = junk;
    s.key.len = sizeof junk;
    /* Segment field 2 (key) has wire type 2; StatsResponse field 2 (entries) is a varint */
    hy_rpc_call_send(c, &s.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* GetEntry: the entry's bytes are 0..n-1 mod 251, in chunks of 1000; the
 * request's key[0] picks a script: 0 honest, 1 one byte short of meta.bytes,
 * 2 one byte over, 3 no metadata on the first chunk, 4 metadata on the
 * second too, 5 NOT_FOUND, 6 the chunks placed at their offsets, last one
 * first (as Build streams: the header last), 7 as 6 with the second chunk
 * sent twice (an overlap). key[1..4]: n, little-endian. */
static void h_get(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__GetEntryRequest *rq = (const Hypic__V1__GetEntryRequest *)req;
    int script = rq->key.len >= 5 ? rq->key.data[0] : 0;
    uint32_t n = rq->key.len >= 5
                     ? (uint32_t)rq->key.data[1] | (uint32_t)rq->key.data[2] << 8 |
                           (uint32_t)rq->key.data[3] << 16 | (uint32_t)rq->key.data[4] << 24
                     : 0;
    if (script == 5) {
        hy_rpc_call_finish(c, HY_RPC_NOT_FOUND, "key: no such entry");
        return;
    }
    uint32_t sent_n = script == 1 ? n - 1 : script == 2 ? n + 1 : n;
    uint8_t *data = malloc(sent_n + 1);
    for (uint32_t i = 0; i < sent_n; i++) data[i] = (uint8_t)(i % 251);
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.key = rq->key;
    meta.model = "tiny";
    meta.tokens = 7;
    meta.bytes = n;
    if (script == 6 || script == 7) { /* backwards, each at its offset */
        const uint32_t pieces = (n + 999) / 1000;
        for (uint32_t k = 0; k < pieces; k++) {
            const uint32_t p = pieces - 1 - k, lo = p * 1000;
            Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
            if (k == 0) ch.meta = &meta;
            ch.placement_case = HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET;
            ch.offset = lo;
            ch.data.data = data + lo;
            ch.data.len = n - lo < 1000 ? n - lo : 1000;
            if (hy_rpc_call_send(c, &ch.base, NULL)) break;
            if (script == 7 && k == 1 && hy_rpc_call_send(c, &ch.base, NULL)) break;
        }
        free(data);
        hy_rpc_call_finish(c, HY_RPC_OK, NULL);
        return;
    }
    uint32_t off = 0;
    int k = 0;
    do {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if ((k == 0 && script != 3) || (k == 1 && script == 4)) ch.meta = &meta;
        uint32_t len = sent_n - off < 1000 ? sent_n - off : 1000;
        ch.data.data = data + off;
        ch.data.len = len;
        off += len;
        k++;
        if (hy_rpc_call_send(c, &ch.base, NULL)) break;
    } while (off < sent_n || (script == 4 && k < 2));
    free(data);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* What the last PutEntry handler saw. */
static struct {
    int chunks, meta_chunks;
    bool meta_first;
    uint64_t meta_bytes, got;
    bool bytes_ok;
    char model[32];
} g_put;

/* PutEntry: checks the bytes are i % 253, placed HOST. */
static void h_put(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    memset(&g_put, 0, sizeof g_put);
    g_put.bytes_ok = true;
    ProtobufCMessage *m;
    hy_err e = {0};
    int rc;
    while ((rc = hy_rpc_call_recv(c, &m, &e)) == HY_OK) {
        const Hypic__V1__EntryChunk *ch = (const Hypic__V1__EntryChunk *)m;
        if (ch->meta) {
            g_put.meta_chunks++;
            g_put.meta_first = g_put.chunks == 0;
            g_put.meta_bytes = ch->meta->bytes;
            snprintf(g_put.model, sizeof g_put.model, "%s", ch->meta->model);
        }
        for (size_t i = 0; i < ch->data.len; i++)
            if (ch->data.data[i] != (uint8_t)((g_put.got + i) % 253)) g_put.bytes_ok = false;
        g_put.got += ch->data.len;
        g_put.chunks++;
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (rc != HY_ENOTFOUND) {
        hy_rpc_call_finish(c, HY_RPC_INVALID_ARGUMENT, e.msg);
        return;
    }
    uint8_t key[32] = {9};
    Hypic__V1__PutEntryResponse r = HYPIC__V1__PUT_ENTRY_RESPONSE__INIT;
    r.key.data = key;
    r.key.len = sizeof key;
    r.placed = HYPIC__V1__TIER__TIER_HOST;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* Warm and Watch: send messages until the client goes (or 1000 of them),
 * then record how many were sent and whether a send failed. */
static atomic_int g_stream_sent, g_stream_client_gone, g_stream_done;

static void stream_until_gone(hy_rpc_call *c, bool warm)
{
    g_stream_sent = 0;
    g_stream_client_gone = 0;
    for (int i = 0; i < 1000; i++) {
        int rc;
        if (warm) {
            Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
            p.index = (uint32_t)i;
            p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
            rc = hy_rpc_call_send(c, &p.base, NULL);
        } else {
            Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
            meta.tokens = (uint32_t)i;
            Hypic__V1__WatchEvent ev = HYPIC__V1__WATCH_EVENT__INIT;
            ev.kind = HYPIC__V1__WATCH_EVENT__KIND__KIND_STORED;
            ev.meta = &meta;
            rc = hy_rpc_call_send(c, &ev.base, NULL);
        }
        if (rc) {
            g_stream_client_gone = 1;
            break;
        }
        g_stream_sent++;
        hy_test_sleep_ms(2);
    }
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
    g_stream_done = 1;
}

static void h_warm(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__WarmRequest *rq = (const Hypic__V1__WarmRequest *)req;
    if (rq->n_segments == 0) { /* a short, complete stream */
        for (uint32_t i = 0; i < 3; i++) {
            Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
            p.index = i;
            hy_rpc_call_send(c, &p.base, NULL);
        }
        hy_rpc_call_finish(c, HY_RPC_OK, NULL);
        return;
    }
    stream_until_gone(c, true);
}

static void h_watch(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    stream_until_gone(c, false);
}

/* ---- the cases ---- */

static void test_unary_and_statuses(void)
{
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_health(g_c, &hr, &h, &st), HYC_OK);
    CU_ASSERT_EQUAL(st.code, HYC_OK);
    CU_ASSERT_STRING_EQUAL(st.msg, "");
    CU_ASSERT_FATAL(h != NULL);
    CU_ASSERT_EQUAL(h->status, HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING);
    CU_ASSERT_STRING_EQUAL(h->version, "Bearer tok-1"); /* the connection's token was sent */
    hyc_free(h);

    Hypic__V1__Segment seg = HYPIC__V1__SEGMENT__INIT, *ps = &seg;
    Hypic__V1__LookupRequest lr = HYPIC__V1__LOOKUP_REQUEST__INIT;
    lr.n_segments = 1;
    lr.segments = &ps;
    Hypic__V1__LookupResponse *l = (Hypic__V1__LookupResponse *)1;
    CU_ASSERT_EQUAL(hyc_lookup(g_c, &lr, &l, &st), HYC_NOT_FOUND);
    CU_ASSERT_EQUAL(st.code, HYC_NOT_FOUND);
    CU_ASSERT_STRING_EQUAL(st.msg, "segments[0]: no such entry");
    CU_ASSERT(l == NULL);
    CU_ASSERT_EQUAL(hyc_lookup(g_c, NULL, &l, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strncmp(st.msg, "client: ", 8) == 0);

    /* no handler: the server's UNIMPLEMENTED */
    Hypic__V1__InspectRequest ir = HYPIC__V1__INSPECT_REQUEST__INIT;
    Hypic__V1__InspectResponse *i = NULL;
    CU_ASSERT_EQUAL(hyc_inspect(g_c, &ir, &i, &st), HYC_UNIMPLEMENTED);
    CU_ASSERT(i == NULL);

    CU_ASSERT_STRING_EQUAL(hyc_code_name(0), "OK");
    CU_ASSERT_STRING_EQUAL(hyc_code_name(5), "NOT_FOUND");
    CU_ASSERT_STRING_EQUAL(hyc_code_name(14), "UNAVAILABLE");
    CU_ASSERT_STRING_EQUAL(hyc_code_name(16), "UNAUTHENTICATED");
    CU_ASSERT_STRING_EQUAL(hyc_code_name(17), "UNKNOWN_CODE");
    CU_ASSERT_STRING_EQUAL(hyc_code_name(-1), "UNKNOWN_CODE");
}

static void test_undecodable_response(void)
{
    Hypic__V1__StatsRequest sr = HYPIC__V1__STATS_REQUEST__INIT;
    Hypic__V1__StatsResponse *s = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL(hyc_stats(g_c, &sr, &s, &st), HYC_INTERNAL);
    CU_ASSERT(strncmp(st.msg, "client: ", 8) == 0);
    CU_ASSERT(strstr(st.msg, "hypic.v1.StatsResponse") != NULL);
    CU_ASSERT(s == NULL);
}

static void test_deadline_and_no_server(void)
{
    hyc_options o = {.target = g_target, .deadline_ms = 50};
    hyc *c;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), HYC_OK);
    Hypic__V1__LookupRequest lr = HYPIC__V1__LOOKUP_REQUEST__INIT; /* the slow one */
    Hypic__V1__LookupResponse *l = NULL;
    CU_ASSERT_EQUAL(hyc_lookup(c, &lr, &l, &st), HYC_DEADLINE_EXCEEDED);
    CU_ASSERT(l == NULL);
    hyc_close(c);
    o.deadline_ms = 5000; /* and without a deadline problem the same call answers */
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), HYC_OK);
    CU_ASSERT_EQUAL(hyc_lookup(c, &lr, &l, &st), HYC_OK);
    CU_ASSERT(l && l->n_segments == 1 && l->segments[0]->tokens == 42);
    hyc_free(l);
    hyc_close(c);

    /* a port nothing listens on: the one this server had before it was
     * moved is not known, so use a fresh one we bound and closed */
    hy_rpc_server_config cfg = {.address = "127.0.0.1:0", .workers = 1};
    hy_rpc_server *tmp;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_server_start(&cfg, g_handlers, NULL, &tmp, &e), HY_OK);
    char dead[64];
    snprintf(dead, sizeof dead, "127.0.0.1:%d", hy_rpc_server_port(tmp));
    hy_rpc_server_stop(tmp);
    hyc_options d = {.target = dead, .deadline_ms = 5000};
    CU_ASSERT_EQUAL_FATAL(hyc_open(&d, &c, &st), HYC_OK); /* nothing is sent yet */
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    CU_ASSERT_EQUAL(hyc_health(c, &hr, &h, &st), HYC_UNAVAILABLE);
    CU_ASSERT(h == NULL);
    hyc_close(c);
}

/* A loopback port nothing listens on (bound, then closed). */
static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) ||
        getsockname(s, (struct sockaddr *)&a, &l))
        return -1;
    close(s);
    return ntohs(a.sin_port);
}

/* The scripted server on a given port. */
static hy_rpc_server *server_on(int port)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    hy_rpc_server_config cfg = {.address = addr, .workers = 1};
    hy_rpc_server *s = NULL;
    hy_err e = {0};
    if (hy_rpc_server_start(&cfg, g_handlers, NULL, &s, &e)) fprintf(stderr, "%s\n", e.msg);
    return s;
}

typedef struct late_server {
    int port;
    long delay_ms;
    hy_rpc_server *srv;
} late_server;

static void *start_late(void *arg)
{
    late_server *l = arg;
    hy_test_sleep_ms(l->delay_ms);
    l->srv = server_on(l->port);
    return NULL;
}

/* A server that is not listening yet when a call dials, one that starts
 * listening after a call's dial was refused, one that goes and comes back:
 * each call is served within its deadline once the server listens. Before,
 * a refused dial failed the call, and the handle then failed every call at
 * once with that first failure's message until gRPC's reconnection backoff
 * ran out (1-2 s here; for 20 s in test_load once, when the next attempt
 * hung: see connect_hangs). */
static void test_server_late(void)
{
    const int port = free_port();
    CU_ASSERT_FATAL(port > 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    hyc_options o = {.target = target, .deadline_ms = 5000};
    hyc *c;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), HYC_OK);
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    /* nobody there: UNAVAILABLE with the dial's reason, well before the deadline */
    long long t0 = hy_test_now_ms();
    CU_ASSERT_EQUAL(hyc_health(c, &hr, &h, &st), HYC_UNAVAILABLE);
    CU_ASSERT(hy_test_now_ms() - t0 < 2500);
    CU_ASSERT(strstr(st.msg, "refused") != NULL);
    /* the server starts listening 300 ms into the call */
    late_server l = {.port = port, .delay_ms = 300};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, start_late, &l), 0);
    t0 = hy_test_now_ms();
    int code = hyc_health(c, &hr, &h, &st);
    pthread_join(th, NULL);
    if (code != HYC_OK) printf("\n  late server: %s: %s", hyc_code_name(code), st.msg);
    CU_ASSERT_EQUAL(code, HYC_OK);
    CU_ASSERT(hy_test_now_ms() - t0 < 2500);
    hyc_free(h);
    h = NULL;
    hy_rpc_server *srv = l.srv;
    CU_ASSERT_FATAL(srv != NULL);
    for (int round = 0; round < 3; round++) { /* it goes, then comes back */
        hy_rpc_server_stop(srv);
        CU_ASSERT_NOT_EQUAL(hyc_health(c, &hr, &h, &st), HYC_OK);
        CU_ASSERT(h == NULL);
        srv = server_on(port);
        CU_ASSERT_FATAL(srv != NULL);
        t0 = hy_test_now_ms();
        code = hyc_health(c, &hr, &h, &st);
        if (code != HYC_OK) printf("\n  round %d: %s: %s", round, hyc_code_name(code), st.msg);
        CU_ASSERT_EQUAL(code, HYC_OK);
        CU_ASSERT(hy_test_now_ms() - t0 < 2500);
        hyc_free(h);
        h = NULL;
    }
    hy_rpc_server_stop(srv);
    hyc_close(c);
}

/* A connection attempt that hangs — the peer's kernel took the TCP
 * connection and nobody answers the HTTP/2 handshake — holds the handle
 * for at most the connect timeout (5 s), not gRPC's 20 s: once the real
 * server listens on the port, the handle is served again within it. */
static void test_connect_hangs(void)
{
    const int port = free_port();
    CU_ASSERT_FATAL(port > 0);
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    CU_ASSERT_FATAL(bind(ls, (struct sockaddr *)&a, sizeof a) == 0 && listen(ls, 8) == 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", port);
    hyc_options o = {.target = target, .deadline_ms = 300};
    hyc *c;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), HYC_OK);
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    Hypic__V1__HealthResponse *h = NULL;
    CU_ASSERT_EQUAL(hyc_health(c, &hr, &h, &st), HYC_DEADLINE_EXCEEDED); /* no handshake */
    int held = accept(ls, NULL, NULL); /* kept open and silent; the port is free again */
    CU_ASSERT(held >= 0);
    close(ls);
    hy_rpc_server *srv = server_on(port);
    CU_ASSERT_FATAL(srv != NULL);
    const long long t0 = hy_test_now_ms();
    int code = -1, calls = 0;
    while (code != HYC_OK && hy_test_now_ms() - t0 < 25000) {
        code = hyc_health(c, &hr, &h, &st);
        calls++;
        if (code != HYC_OK) hy_test_sleep_ms(50);
    }
    const long long waited = hy_test_now_ms() - t0;
    printf("\n  served %lld ms after the server started (%d calls)", waited, calls);
    CU_ASSERT_EQUAL(code, HYC_OK);
    CU_ASSERT(waited < 9000);
    hyc_free(h);
    hyc_close(c);
    if (held >= 0) close(held);
    hy_rpc_server_stop(srv);
}

static uint8_t *get_key(uint8_t key[32], int script, uint32_t n)
{
    memset(key, 0, 32);
    key[0] = (uint8_t)script;
    key[1] = (uint8_t)n, key[2] = (uint8_t)(n >> 8), key[3] = (uint8_t)(n >> 16);
    key[4] = (uint8_t)(n >> 24);
    return key;
}

static int get(int script, uint32_t n, Hypic__V1__EntryMeta **meta, void **bytes, size_t *len,
               hyc_status *st)
{
    uint8_t key[32];
    Hypic__V1__GetEntryRequest rq = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    rq.key.data = get_key(key, script, n);
    rq.key.len = 32;
    return hyc_get_entry(g_c, &rq, meta, bytes, len, st);
}

static void test_get_entry(void)
{
    Hypic__V1__EntryMeta *meta = NULL;
    void *bytes = NULL;
    size_t n = 0;
    hyc_status st;
    const uint32_t sizes[] = {0, 1, 999, 1000, 1001, 123457};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        CU_ASSERT_EQUAL_FATAL(get(0, sizes[s], &meta, &bytes, &n, &st), HYC_OK);
        CU_ASSERT_EQUAL(n, sizes[s]);
        CU_ASSERT(bytes != NULL);
        CU_ASSERT_EQUAL(meta->bytes, sizes[s]);
        CU_ASSERT_EQUAL(meta->tokens, 7);
        CU_ASSERT_STRING_EQUAL(meta->model, "tiny");
        bool same = true;
        for (size_t i = 0; i < n; i++) same = same && ((uint8_t *)bytes)[i] == (uint8_t)(i % 251);
        CU_ASSERT(same);
        hyc_free(meta);
        free(bytes);
    }
    static const char *const why[] = {NULL, "meta.bytes says", "more than meta.bytes",
                                      "first chunk carries no metadata",
                                      "after the first carries metadata"};
    for (int script = 1; script <= 4; script++) {
        meta = (void *)1, bytes = (void *)1, n = 1;
        CU_ASSERT_EQUAL(get(script, 5000, &meta, &bytes, &n, &st), HYC_INTERNAL);
        CU_ASSERT(strncmp(st.msg, "client: ", 8) == 0);
        CU_ASSERT(strstr(st.msg, why[script]) != NULL);
        CU_ASSERT(meta == NULL && bytes == NULL && n == 0);
    }
    /* pieces at their offsets, out of order: reassembled; an overlap refused */
    CU_ASSERT_EQUAL_FATAL(get(6, 4500, &meta, &bytes, &n, &st), HYC_OK);
    CU_ASSERT_EQUAL(n, 4500);
    bool same = true;
    for (size_t i = 0; i < n; i++) same = same && ((uint8_t *)bytes)[i] == (uint8_t)(i % 251);
    CU_ASSERT(same);
    hyc_free(meta);
    free(bytes);
    CU_ASSERT_EQUAL(get(7, 4500, &meta, &bytes, &n, &st), HYC_INTERNAL);
    CU_ASSERT(strstr(st.msg, "overlaps bytes already received") != NULL);
    CU_ASSERT(meta == NULL && bytes == NULL && n == 0);
    CU_ASSERT_EQUAL(get(5, 10, &meta, &bytes, &n, &st), HYC_NOT_FOUND);
    CU_ASSERT_STRING_EQUAL(st.msg, "key: no such entry");
    CU_ASSERT(meta == NULL && bytes == NULL);
}

static void test_put_entry(void)
{
    size_t n = 3500000;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i % 253);
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.model = "tiny";
    meta.bytes = 12345; /* wrong: the client sends n */
    Hypic__V1__PutEntryResponse *r = NULL;
    hyc_status st;
    CU_ASSERT_EQUAL_FATAL(hyc_put_entry(g_c, &meta, data, n, 0, &r, &st), HYC_OK);
    CU_ASSERT_EQUAL(r->placed, HYPIC__V1__TIER__TIER_HOST);
    CU_ASSERT_EQUAL(r->key.len, 32);
    hyc_free(r);
    CU_ASSERT_EQUAL(g_put.chunks, 4); /* 1 MiB default chunks */
    CU_ASSERT_EQUAL(g_put.meta_chunks, 1);
    CU_ASSERT(g_put.meta_first);
    CU_ASSERT_EQUAL(g_put.meta_bytes, n);
    CU_ASSERT_EQUAL(g_put.got, n);
    CU_ASSERT(g_put.bytes_ok);
    CU_ASSERT_STRING_EQUAL(g_put.model, "tiny");

    CU_ASSERT_EQUAL_FATAL(hyc_put_entry(g_c, &meta, data, 10000, 3000, &r, &st), HYC_OK);
    hyc_free(r);
    CU_ASSERT_EQUAL(g_put.chunks, 4); /* 3000 3000 3000 1000 */
    CU_ASSERT_EQUAL(g_put.got, 10000);
    CU_ASSERT(g_put.bytes_ok);

    CU_ASSERT_EQUAL_FATAL(hyc_put_entry(g_c, &meta, NULL, 0, 0, &r, &st), HYC_OK);
    hyc_free(r);
    CU_ASSERT_EQUAL(g_put.chunks, 1); /* the metadata alone */
    CU_ASSERT_EQUAL(g_put.meta_bytes, 0);

    /* refused before sending: a chunk with no room left for the metadata */
    g_put.chunks = -1;
    r = (void *)1;
    CU_ASSERT_EQUAL(hyc_put_entry(g_c, &meta, data, n, (64u << 20), &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strncmp(st.msg, "client: ", 8) == 0);
    CU_ASSERT(r == NULL);
    CU_ASSERT_EQUAL(hyc_put_entry(g_c, NULL, data, n, 0, &r, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(g_put.chunks, -1); /* the server saw neither */
    free(data);
}

typedef struct count_ctx {
    int n, stop_at;
    uint32_t last;
} count_ctx;

static int on_progress(void *ctx, const Hypic__V1__WarmProgress *p)
{
    count_ctx *k = ctx;
    k->last = p->index;
    return ++k->n == k->stop_at;
}

static int on_event(void *ctx, const Hypic__V1__WatchEvent *e)
{
    count_ctx *k = ctx;
    k->last = e->meta ? e->meta->tokens : 9999;
    return ++k->n == k->stop_at;
}

static void wait_stream_done(void)
{
    for (int i = 0; i < 500 && !g_stream_done; i++) hy_test_sleep_ms(10);
    CU_ASSERT_FATAL(g_stream_done);
}

static void test_streams_stop(void)
{
    hyc_status st;
    Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
    count_ctx k = {.stop_at = -1};
    CU_ASSERT_EQUAL(hyc_warm(g_c, &wr, on_progress, &k, &st), HYC_OK); /* 3, then OK */
    CU_ASSERT_EQUAL(k.n, 3);
    CU_ASSERT_EQUAL(k.last, 2);
    CU_ASSERT_EQUAL(hyc_warm(g_c, &wr, NULL, NULL, &st), HYC_OK);

    Hypic__V1__Segment seg = HYPIC__V1__SEGMENT__INIT, *ps = &seg;
    wr.n_segments = 1;
    wr.segments = &ps;
    g_stream_done = 0;
    k = (count_ctx){.stop_at = 5};
    CU_ASSERT_EQUAL(hyc_warm(g_c, &wr, on_progress, &k, &st), HYC_CANCELLED);
    CU_ASSERT_STRING_EQUAL(st.msg, "client: stopped by the callback");
    CU_ASSERT_EQUAL(k.n, 5);
    wait_stream_done();
    CU_ASSERT(g_stream_client_gone); /* the server saw the client go ... */
    CU_ASSERT(g_stream_sent < 1000); /* ... long before the end */

    Hypic__V1__WatchRequest wq = HYPIC__V1__WATCH_REQUEST__INIT;
    g_stream_done = 0;
    k = (count_ctx){.stop_at = 3};
    CU_ASSERT_EQUAL(hyc_watch(g_c, &wq, on_event, &k, &st), HYC_CANCELLED);
    CU_ASSERT_EQUAL(k.n, 3);
    CU_ASSERT_EQUAL(k.last, 2);
    wait_stream_done();
    CU_ASSERT(g_stream_client_gone);
}

static void test_open_options(void)
{
    hyc *c = (hyc *)1;
    hyc_status st;
    hyc_options none = {0};
    CU_ASSERT_EQUAL(hyc_open(&none, &c, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(c == NULL);
    hyc_options bad = {.target = g_target, .tls_ca_file = "/nonexistent/ca.pem"};
    CU_ASSERT_EQUAL(hyc_open(&bad, &c, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "/nonexistent/ca.pem") != NULL);
    CU_ASSERT(c == NULL);
    char key[512]; /* a file that is not a certificate: the server's key */
    snprintf(key, sizeof key, "%s/tls/server.key", HY_FIXTURES_DIR);
    bad.tls_ca_file = key;
    CU_ASSERT_EQUAL(hyc_open(&bad, &c, &st), HYC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "no PEM certificate") != NULL);
    CU_ASSERT(c == NULL);
    hyc_close(NULL);
    hyc_free(NULL);
}

/* TLS with the committed test certificate: the CA file is trusted, another
 * CA's is not. */
static void test_tls(void)
{
    char path[512], *cert = NULL, *key = NULL;
    size_t len;
    hy_err e = {0};
    snprintf(path, sizeof path, "%s/tls/server.pem", HY_FIXTURES_DIR);
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1 << 20, &cert, &len, &e), HY_OK);
    snprintf(path, sizeof path, "%s/tls/server.key", HY_FIXTURES_DIR);
    CU_ASSERT_EQUAL_FATAL(hy_read_file(path, 1 << 20, &key, &len, &e), HY_OK);
    hy_rpc_server_config cfg = {
        .address = "127.0.0.1:0", .workers = 2, .tls_cert_pem = cert, .tls_key_pem = key};
    hy_rpc_server *srv;
    CU_ASSERT_EQUAL_FATAL(hy_rpc_server_start(&cfg, g_handlers, NULL, &srv, &e), HY_OK);
    char target[64], ca[512], other[512];
    snprintf(target, sizeof target, "127.0.0.1:%d", hy_rpc_server_port(srv));
    snprintf(ca, sizeof ca, "%s/tls/ca.pem", HY_FIXTURES_DIR);
    snprintf(other, sizeof other, "%s/tls/other-ca.pem", HY_FIXTURES_DIR);
    const struct {
        const char *ca_file;
        int want;
    } cases[] = {{ca, HYC_OK}, {other, HYC_UNAVAILABLE}, {NULL, HYC_UNAVAILABLE}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        hyc_options o = {.target = target,
                         .token = "tls-tok",
                         .deadline_ms = 5000,
                         .tls_ca_file = cases[i].ca_file};
        hyc *c;
        hyc_status st;
        CU_ASSERT_EQUAL_FATAL(hyc_open(&o, &c, &st), HYC_OK);
        Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
        Hypic__V1__HealthResponse *h = NULL;
        CU_ASSERT_EQUAL(hyc_health(c, &hr, &h, &st), cases[i].want);
        if (h) CU_ASSERT_STRING_EQUAL(h->version, "Bearer tls-tok");
        hyc_free(h);
        hyc_close(c);
    }
    hy_rpc_server_stop(srv);
    hy_free(cert);
    hy_free(key);
}

/* Several threads on one connection at once. */
static void *health_loop(void *arg)
{
    int *ok = arg;
    for (int i = 0; i < 50; i++) {
        Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
        Hypic__V1__HealthResponse *h = NULL;
        hyc_status st;
        if (hyc_health(g_c, &hr, &h, &st) == HYC_OK && strcmp(h->version, "Bearer tok-1") == 0)
            (*ok)++;
        hyc_free(h);
    }
    return NULL;
}

static void test_threads(void)
{
    pthread_t t[4];
    int ok[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, health_loop, &ok[i]);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(ok[i], 50);
    }
}

int main(void)
{
    g_handlers[method("Health") - hy_rpc_methods] = h_health;
    g_handlers[method("Lookup") - hy_rpc_methods] = h_lookup;
    g_handlers[method("Stats") - hy_rpc_methods] = h_stats_garbage;
    g_handlers[method("GetEntry") - hy_rpc_methods] = h_get;
    g_handlers[method("PutEntry") - hy_rpc_methods] = h_put;
    g_handlers[method("Warm") - hy_rpc_methods] = h_warm;
    g_handlers[method("Watch") - hy_rpc_methods] = h_watch;
    hy_rpc_server_config cfg = {.address = "127.0.0.1:0", .workers = 4, .max_message = 8 << 20};
    hy_err e = {0};
    if (hy_rpc_server_start(&cfg, g_handlers, NULL, &g_srv, &e)) {
        fprintf(stderr, "test_client: %s\n", e.msg);
        return 1;
    }
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", hy_rpc_server_port(g_srv));
    hyc_options o = {.target = g_target, .token = "tok-1", .deadline_ms = 10000};
    hyc_status st;
    if (hyc_open(&o, &g_c, &st)) {
        fprintf(stderr, "test_client: %s\n", st.msg);
        hy_rpc_server_stop(g_srv);
        return 1;
    }
    static const hy_test_case cases[] = {
        {"unary_and_statuses", test_unary_and_statuses},
        {"undecodable_response", test_undecodable_response},
        {"deadline_and_no_server", test_deadline_and_no_server},
        {"server_late", test_server_late},
        {"connect_hangs", test_connect_hangs},
        {"get_entry", test_get_entry},
        {"put_entry", test_put_entry},
        {"streams_stop", test_streams_stop},
        {"open_options", test_open_options},
        {"tls", test_tls},
        {"threads", test_threads},
        {NULL, NULL},
    };
    int rc = hy_test_main("client", cases);
    hyc_close(g_c);
    hy_rpc_server_stop(g_srv);
    return rc;
}
