/*
 * hypic.v1 over gRPC on loopback (rpc/server.c, rpc/client.c): a server on a
 * free port with test handlers, and the client library against it. Unary,
 * server-streaming and client-streaming calls arrive with their request and
 * metadata; a handler's status and message reach the client; an unknown
 * method or one without a handler is UNIMPLEMENTED, bytes that are not the
 * request type INVALID_ARGUMENT, an oversize message RESOURCE_EXHAUSTED, a
 * handler that forgets its status INTERNAL, a slow call DEADLINE_EXCEEDED;
 * several client threads at once; and the server keeps serving after every
 * one of those. A second server cannot bind the same port. The same handlers
 * called in-process (hy_rpc_call_local) get a decoded copy of the request,
 * the authorization given, no deadline and no request stream; their
 * responses reach the caller decoded again, their statuses as on the wire.
 */
#include "hy_rpc.h"
#include "rpc_fixture.h"
#include "test_util.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


/* Health: SERVING, and the request's authorization metadata as a "model". */
static void h_health(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    char auth[128];
    char *models[1] = {(char *)"none"};
    if (hy_rpc_call_metadata(c, "authorization", auth, sizeof auth)) models[0] = auth;
    Hypic__V1__HealthResponse r = HYPIC__V1__HEALTH_RESPONSE__INIT;
    r.status = HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING;
    r.version = "test";
    r.n_models = 1;
    r.models = models;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* Warm: one progress message per segment, in order. */
static void h_warm(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__WarmRequest *w = (const Hypic__V1__WarmRequest *)req;
    for (size_t i = 0; i < w->n_segments; i++) {
        Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
        p.index = (uint32_t)i;
        p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
        if (hy_rpc_call_send(c, &p.base, NULL)) return; /* finished INTERNAL for us */
    }
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

/* What the last PutEntry handler saw: its chunks, their bytes, how its
 * stream ended (HY_ENOTFOUND: a clean end; HY_EIO: cut short), and 1 in
 * g_put_done once it has finished. */
static _Atomic int g_put_chunks, g_put_end_rc, g_put_done;
static _Atomic long long g_put_bytes;
/* meta.tokens that makes the handler refuse the stream after its first
 * chunk, without reading the rest. */
#define PUT_REFUSE_TOKENS 999u

/* PutEntry: counts the chunks and their bytes; placed = HOST when the bytes
 * add up to meta.bytes of the first chunk. */
static void h_put(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    uint64_t want = 0, got = 0;
    int chunks = 0;
    ProtobufCMessage *m;
    hy_err e = {0};
    int rc;
    while ((rc = hy_rpc_call_recv(c, &m, &e)) == HY_OK) {
        const Hypic__V1__EntryChunk *ch = (const Hypic__V1__EntryChunk *)m;
        bool refuse = chunks == 0 && ch->meta && ch->meta->tokens == PUT_REFUSE_TOKENS;
        if (chunks++ == 0 && ch->meta) want = ch->meta->bytes;
        got += ch->data.len;
        protobuf_c_message_free_unpacked(m, NULL);
        if (refuse) {
            g_put_chunks = chunks;
            g_put_bytes = (long long)got;
            g_put_end_rc = HY_OK;
            hy_rpc_call_finish(c, HY_RPC_FAILED_PRECONDITION, "meta.tokens: refused");
            g_put_done = 1;
            return;
        }
    }
    g_put_chunks = chunks;
    g_put_bytes = (long long)got;
    g_put_end_rc = rc;
    if (rc != HY_ENOTFOUND) {
        hy_rpc_call_finish(c, HY_RPC_INVALID_ARGUMENT, e.msg);
        g_put_done = 1;
        return;
    }
    Hypic__V1__PutEntryResponse r = HYPIC__V1__PUT_ENTRY_RESPONSE__INIT;
    r.placed = chunks > 0 && got == want ? HYPIC__V1__TIER__TIER_HOST : HYPIC__V1__TIER__TIER_NONE;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
    g_put_done = 1;
}

static void h_lookup_not_found(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    hy_rpc_call_finish(c, HY_RPC_NOT_FOUND, "segments[0]: no such entry");
}

static void h_stats_forgets(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)c, (void)req; /* returns without a status */
}

/* Watch: sleeps past the client's deadline, then reports what it saw. */
static _Atomic int g_slow_done;
static _Atomic long long g_slow_ms_left;

static void h_watch_slow(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app, (void)req;
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    g_slow_ms_left = hy_rpc_call_ms_left(c);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
    g_slow_done = 1;
}


typedef struct collected {
    int n;
    char first_model[128];
    uint32_t index[8];
    int placed;
} collected;

static int on_health(void *ctx, const ProtobufCMessage *m)
{
    collected *k = ctx;
    const Hypic__V1__HealthResponse *r = (const Hypic__V1__HealthResponse *)m;
    if (k->n++ == 0 && r->n_models == 1)
        snprintf(k->first_model, sizeof k->first_model, "%s", r->models[0]);
    return 0;
}

static int on_progress(void *ctx, const ProtobufCMessage *m)
{
    collected *k = ctx;
    if (k->n < 8) k->index[k->n] = ((const Hypic__V1__WarmProgress *)m)->index;
    k->n++;
    return 0;
}

static int on_put(void *ctx, const void *b, size_t n)
{
    collected *k = ctx;
    Hypic__V1__PutEntryResponse *r = hypic__v1__put_entry_response__unpack(NULL, n, b);
    if (!r) return HY_EFORMAT;
    k->placed = r->placed;
    k->n++;
    hypic__v1__put_entry_response__free_unpacked(r, NULL);
    return 0;
}

static int health(const char *token, collected *k, hy_rpc_status *st)
{
    Hypic__V1__HealthRequest req = HYPIC__V1__HEALTH_REQUEST__INIT;
    hy_err e = {0};
    memset(k, 0, sizeof *k);
    return hy_rpc_client_call(g_cl, method("Health"), &req.base, token, 5000, on_health, k, st, &e);
}

static void test_unary_with_metadata(void)
{
    collected k;
    hy_rpc_status st;
    CU_ASSERT_EQUAL_FATAL(health("s3cret", &k, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(k.n, 1);
    CU_ASSERT_STRING_EQUAL(k.first_model, "Bearer s3cret");
    CU_ASSERT_EQUAL(health(NULL, &k, &st), HY_OK);
    CU_ASSERT_STRING_EQUAL(k.first_model, "none");
}

static void test_server_stream_in_order(void)
{
    Hypic__V1__Segment segs[5], *ps[5];
    for (int i = 0; i < 5; i++) {
        hypic__v1__segment__init(&segs[i]);
        ps[i] = &segs[i];
    }
    Hypic__V1__WarmRequest req = HYPIC__V1__WARM_REQUEST__INIT;
    req.model = "tiny";
    req.n_segments = 5;
    req.segments = ps;
    collected k = {0};
    hy_rpc_status st;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(
        hy_rpc_client_call(g_cl, method("Warm"), &req.base, NULL, 5000, on_progress, &k, &st, &e),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL_FATAL(k.n, 5);
    for (int i = 0; i < 5; i++) CU_ASSERT_EQUAL(k.index[i], (uint32_t)i);
}

static void test_client_stream(void)
{
    uint8_t data[1000];
    memset(data, 7, sizeof data);
    Hypic__V1__EntryMeta meta = HYPIC__V1__ENTRY_META__INIT;
    meta.bytes = sizeof data;
    Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
    ch.meta = &meta;
    ch.data.len = sizeof data;
    ch.data.data = data;
    uint8_t buf[2048];
    size_t n = hypic__v1__entry_chunk__pack(&ch, buf);
    collected k = {0};
    hy_rpc_status st;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_client_call_raw(g_cl, method("PutEntry")->path, buf, n, NULL, 5000,
                                                 on_put, &k, &st, &e),
                          HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(k.n, 1);
    CU_ASSERT_EQUAL(k.placed, HYPIC__V1__TIER__TIER_HOST);
}

/* A PutEntry stream: meta with the first chunk, then data[0..n) in pieces
 * of `piece` bytes; after `fail_after` messages (-1: never) it fails, as a
 * producer whose file read fails would. */
typedef struct chunker {
    Hypic__V1__EntryMeta meta;
    Hypic__V1__EntryChunk ch;
    const uint8_t *data;
    size_t n, off, piece;
    int fail_after, produced;
} chunker;

static int next_chunk(void *ctx, const ProtobufCMessage **msg, hy_err *err)
{
    chunker *k = ctx;
    if (k->produced == k->fail_after) return hy_err_set(err, HY_EIO, "entry.bin: read failed");
    if (k->produced > 0 && k->off >= k->n) {
        *msg = NULL;
        return HY_OK;
    }
    hypic__v1__entry_chunk__init(&k->ch);
    if (k->produced == 0) k->ch.meta = &k->meta;
    size_t len = HY_MIN(k->piece, k->n - k->off);
    k->ch.data.data = (uint8_t *)k->data + k->off;
    k->ch.data.len = len;
    k->off += len;
    k->produced++;
    *msg = &k->ch.base;
    return HY_OK;
}

static int on_put_msg(void *ctx, const ProtobufCMessage *m)
{
    collected *k = ctx;
    k->placed = ((const Hypic__V1__PutEntryResponse *)m)->placed;
    k->n++;
    return 0;
}

static int put_stream(chunker *k, collected *got, hy_rpc_status *st, hy_err *e)
{
    g_put_done = 0;
    g_put_chunks = -1;
    g_put_bytes = -1;
    g_put_end_rc = 1;
    memset(got, 0, sizeof *got);
    return hy_rpc_client_call_stream(g_cl, method("PutEntry"), NULL, 5000, next_chunk, k,
                                     on_put_msg, got, st, e);
}

/* Until the PutEntry handler has finished (it may run a little after the
 * client has its status). */
static void wait_put_done(void)
{
    for (int i = 0; i < 500 && !g_put_done; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CU_ASSERT_FATAL(g_put_done);
}

static void test_stream_call(void)
{
    size_t n = 100000;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 31);
    chunker k = {.data = data, .n = n, .piece = 7000, .fail_after = -1};
    hypic__v1__entry_meta__init(&k.meta);
    k.meta.bytes = n;
    collected got;
    hy_rpc_status st;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(put_stream(&k, &got, &st, &e), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(got.n, 1);
    CU_ASSERT_EQUAL(got.placed, HYPIC__V1__TIER__TIER_HOST);
    wait_put_done();
    CU_ASSERT_EQUAL(g_put_chunks, 15); /* ceil(100000 / 7000), each its own message */
    CU_ASSERT_EQUAL(g_put_bytes, (long long)n);
    CU_ASSERT_EQUAL(g_put_end_rc, HY_ENOTFOUND); /* a clean end of the stream */

    /* a stream of one message without data */
    chunker k0 = {.data = data, .n = 0, .piece = 7000, .fail_after = -1};
    hypic__v1__entry_meta__init(&k0.meta);
    CU_ASSERT_EQUAL_FATAL(put_stream(&k0, &got, &st, &e), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(got.placed, HYPIC__V1__TIER__TIER_HOST);
    wait_put_done();
    CU_ASSERT_EQUAL(g_put_chunks, 1);
    free(data);
}

/* A producer that fails midway: the call is cancelled, so the server's read
 * fails (HY_EIO) instead of seeing the end of a shorter stream, and the
 * producer's error comes back. */
static void test_stream_abandoned(void)
{
    uint8_t data[4000] = {1};
    chunker k = {.data = data, .n = sizeof data, .piece = 1000, .fail_after = 3};
    hypic__v1__entry_meta__init(&k.meta);
    k.meta.bytes = sizeof data;
    collected got;
    hy_rpc_status st;
    hy_err e = {0};
    CU_ASSERT_EQUAL(put_stream(&k, &got, &st, &e), HY_EIO);
    CU_ASSERT(strstr(e.msg, "abandoned") != NULL);
    CU_ASSERT(strstr(e.msg, "entry.bin: read failed") != NULL);
    CU_ASSERT_EQUAL(st.code, HY_RPC_CANCELLED);
    CU_ASSERT_EQUAL(got.n, 0);
    wait_put_done();
    CU_ASSERT_EQUAL(g_put_end_rc, HY_EIO);
    CU_ASSERT(g_put_chunks <= 3);

    /* failing before the first message: the server sees no clean end either */
    chunker k0 = {.data = data, .n = sizeof data, .piece = 1000, .fail_after = 0};
    hypic__v1__entry_meta__init(&k0.meta);
    CU_ASSERT_EQUAL(put_stream(&k0, &got, &st, &e), HY_EIO);
    CU_ASSERT_EQUAL(st.code, HY_RPC_CANCELLED);
    /* its handler, if the server started one, may still be finishing: let it
     * end before the next test reads the counters it writes (seen under ASan) */
    for (int i = 0; i < 200 && !g_put_done; i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (g_put_done) CU_ASSERT_NOT_EQUAL(g_put_end_rc, HY_ENOTFOUND); /* never a clean end */

    collected h; /* and the server still serves */
    CU_ASSERT_EQUAL(health("after-stream", &h, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
}

/* A server that refuses the stream after its first message: the client stops
 * producing (sends fail) and gets the server's status, well before its
 * deadline, though the stream (1 MiB in 16 KiB messages) is many times the
 * transport's flow-control window. */
static void test_stream_refused_early(void)
{
    size_t n = 1 << 20;
    uint8_t *data = calloc(1, n);
    chunker k = {.data = data, .n = n, .piece = 16 << 10, .fail_after = -1};
    hypic__v1__entry_meta__init(&k.meta);
    k.meta.bytes = n;
    k.meta.tokens = PUT_REFUSE_TOKENS;
    collected got;
    hy_rpc_status st;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(put_stream(&k, &got, &st, &e), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_FAILED_PRECONDITION);
    CU_ASSERT_STRING_EQUAL(st.msg, "meta.tokens: refused");
    CU_ASSERT_EQUAL(got.n, 0);
    wait_put_done();
    CU_ASSERT_EQUAL(g_put_chunks, 1);
    free(data);
}

/* ---- TLS ---- */

static char *fixture(const char *name)
{
    char path[512], *text = NULL;
    size_t len;
    hy_err e = {0};
    snprintf(path, sizeof path, "%s/tls/%s", HY_FIXTURES_DIR, name);
    if (hy_read_file(path, 1 << 20, &text, &len, &e)) fprintf(stderr, "%s\n", e.msg);
    return text;
}

/* Health over a fresh channel to target: its status code (HY_RPC_UNKNOWN
 * when no call could be made). */
static int tls_health(const char *target, const char *root_pem, const char *server_name, char *msg,
                      size_t cap)
{
    hy_rpc_client_options o = {.target = target,
                               .max_message = 1 << 20,
                               .tls_root_pem = root_pem,
                               .tls_server_name = server_name};
    hy_rpc_client *cl;
    hy_err e = {0};
    if (hy_rpc_client_open_ex(&o, &cl, &e)) {
        snprintf(msg, cap, "%s", e.msg);
        return HY_RPC_UNKNOWN;
    }
    Hypic__V1__HealthRequest req = HYPIC__V1__HEALTH_REQUEST__INIT;
    collected k = {0};
    hy_rpc_status st = {0};
    int rc = hy_rpc_client_call(cl, method("Health"), &req.base, "tls-token", 5000, on_health, &k,
                                &st, &e);
    hy_rpc_client_close(cl);
    snprintf(msg, cap, "%s", rc ? e.msg : st.msg);
    if (rc) return HY_RPC_UNKNOWN;
    if (st.code == HY_RPC_OK && strcmp(k.first_model, "Bearer tls-token") != 0) return -1;
    return st.code;
}

/* A TLS server (the committed test certificate for localhost and
 * 127.0.0.1): a client trusting its CA is served, by address and by name,
 * with its token; one trusting another CA, one that expects another name,
 * and a plaintext one are not. */
static void test_tls(void)
{
    char *cert = fixture("server.pem"), *key = fixture("server.key");
    char *ca = fixture("ca.pem"), *other = fixture("other-ca.pem");
    CU_ASSERT_FATAL(cert && key && ca && other);
    hy_rpc_server_config cfg = {.address = "127.0.0.1:0",
                                .workers = 2,
                                .max_message = 64 << 10,
                                .tls_cert_pem = cert,
                                .tls_key_pem = key};
    hy_rpc_server *srv;
    hy_err e = {0};
    CU_ASSERT_EQUAL_FATAL(hy_rpc_server_start(&cfg, g_handlers, NULL, &srv, &e), HY_OK);
    char ip[64], name[64], msg[512];
    snprintf(ip, sizeof ip, "127.0.0.1:%d", hy_rpc_server_port(srv));
    snprintf(name, sizeof name, "localhost:%d", hy_rpc_server_port(srv));

    CU_ASSERT_EQUAL(tls_health(ip, ca, NULL, msg, sizeof msg), HY_RPC_OK);
    CU_ASSERT_EQUAL(tls_health(name, ca, NULL, msg, sizeof msg), HY_RPC_OK);
    CU_ASSERT_EQUAL(tls_health(ip, ca, "localhost", msg, sizeof msg), HY_RPC_OK);
    CU_ASSERT_EQUAL(tls_health(ip, other, NULL, msg, sizeof msg), HY_RPC_UNAVAILABLE);
    CU_ASSERT_EQUAL(tls_health(ip, ca, "not-this-server.example", msg, sizeof msg),
                    HY_RPC_UNAVAILABLE);
    CU_ASSERT_EQUAL(tls_health(ip, NULL, NULL, msg, sizeof msg), HY_RPC_UNAVAILABLE);
    /* and the plaintext server refuses a TLS client */
    CU_ASSERT_EQUAL(tls_health(g_target, ca, NULL, msg, sizeof msg), HY_RPC_UNAVAILABLE);

    hy_rpc_server_stop(srv);
    hy_free(cert);
    hy_free(key);
    hy_free(ca);
    hy_free(other);
}

static void raw_status(const char *path, const void *b, size_t n, int64_t deadline_ms,
                       hy_rpc_status *st)
{
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_rpc_client_call_raw(g_cl, path, b, n, NULL, deadline_ms, NULL, NULL, st, &e),
                    HY_OK);
}

static void test_statuses(void)
{
    hy_rpc_status st;
    Hypic__V1__LookupRequest lr = HYPIC__V1__LOOKUP_REQUEST__INIT;
    hy_err e = {0};
    CU_ASSERT_EQUAL(
        hy_rpc_client_call(g_cl, method("Lookup"), &lr.base, NULL, 5000, NULL, NULL, &st, &e),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_NOT_FOUND);
    CU_ASSERT_STRING_EQUAL(st.msg, "segments[0]: no such entry");

    raw_status("/hypic.v1.Cache/NoSuchMethod", "", 0, 5000, &st);
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNIMPLEMENTED);
    CU_ASSERT(strstr(st.msg, "/hypic.v1.Cache/NoSuchMethod") != NULL);
    raw_status(method("Inspect")->path, "", 0, 5000, &st); /* no handler */
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNIMPLEMENTED);

    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0x01};
    raw_status(method("Health")->path, garbage, sizeof garbage, 5000, &st);
    CU_ASSERT_EQUAL(st.code, HY_RPC_INVALID_ARGUMENT);
    CU_ASSERT(strstr(st.msg, "hypic.v1.HealthRequest") != NULL);

    Hypic__V1__StatsRequest sr = HYPIC__V1__STATS_REQUEST__INIT;
    CU_ASSERT_EQUAL(
        hy_rpc_client_call(g_cl, method("Stats"), &sr.base, NULL, 5000, NULL, NULL, &st, &e),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_INTERNAL);

    /* over the server's 64 KiB limit: gRPC refuses it on the wire */
    size_t big = 100000;
    uint8_t *b = calloc(1, big);
    raw_status(method("Health")->path, b, big, 5000, &st);
    CU_ASSERT_EQUAL(st.code, HY_RPC_RESOURCE_EXHAUSTED);
    free(b);

    Hypic__V1__WatchRequest wr = HYPIC__V1__WATCH_REQUEST__INIT;
    CU_ASSERT_EQUAL(
        hy_rpc_client_call(g_cl, method("Watch"), &wr.base, NULL, 50, NULL, NULL, &st, &e), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_DEADLINE_EXCEEDED);
    for (int i = 0; i < 200 && !g_slow_done; i++) { /* the handler, 300 ms later */
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CU_ASSERT(g_slow_done);
    CU_ASSERT(g_slow_ms_left < 0); /* it could see that the client's 50 ms were over */

    collected k; /* and the server still serves */
    CU_ASSERT_EQUAL(health("after", &k, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_STRING_EQUAL(k.first_model, "Bearer after");
}

static void *client_thread(void *arg)
{
    int *ok = arg;
    char token[32];
    snprintf(token, sizeof token, "t%d", *ok);
    *ok = 0;
    for (int i = 0; i < 25; i++) {
        collected k;
        hy_rpc_status st;
        char want[40];
        snprintf(want, sizeof want, "Bearer %s", token);
        if (health(token, &k, &st) == HY_OK && st.code == HY_RPC_OK &&
            strcmp(k.first_model, want) == 0)
            (*ok)++;
    }
    return NULL;
}

static void test_concurrent_clients(void)
{
    pthread_t t[4];
    int ok[4];
    for (int i = 0; i < 4; i++) {
        ok[i] = i;
        pthread_create(&t[i], NULL, client_thread, &ok[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        CU_ASSERT_EQUAL(ok[i], 25);
    }
}

static void test_port_in_use(void)
{
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", hy_rpc_server_port(g_srv));
    hy_rpc_server_config cfg = {.address = addr, .workers = 1};
    hy_rpc_server *s2;
    hy_err e = {0};
    CU_ASSERT_EQUAL(hy_rpc_server_start(&cfg, g_handlers, NULL, &s2, &e), HY_EIO);
    CU_ASSERT(s2 == NULL);
    CU_ASSERT(strstr(e.msg, addr) != NULL);
    hy_rpc_server_stop(s2); /* (NULL when refused: a no-op) */
}

/* --- in-process calls (hy_rpc_call_local) ------------------------------------- */

/* What the probe handler saw of its call. */
static struct {
    int ran;
    const ProtobufCMessage *req;
    char model[64];
    long long ms_left;
    int recv_rc;
    bool has_other_md;
} g_probe;

/* Lookup: records what a local call offers a handler, answers one response
 * naming the segments it received, and finishes OK. */
static void h_probe(void *app, hy_rpc_call *c, const ProtobufCMessage *req)
{
    (void)app;
    const Hypic__V1__LookupRequest *q = (const Hypic__V1__LookupRequest *)req;
    g_probe.ran++;
    g_probe.req = req;
    snprintf(g_probe.model, sizeof g_probe.model, "%s", q->model);
    g_probe.ms_left = (long long)hy_rpc_call_ms_left(c);
    ProtobufCMessage *m = NULL;
    g_probe.recv_rc = hy_rpc_call_recv(c, &m, NULL);
    char buf[64];
    g_probe.has_other_md = hy_rpc_call_metadata(c, "x-other", buf, sizeof buf) != NULL;
    Hypic__V1__SegmentStatus ss = HYPIC__V1__SEGMENT_STATUS__INIT;
    Hypic__V1__SegmentStatus *ps[1] = {&ss};
    ss.tokens = (uint32_t)q->n_segments;
    Hypic__V1__LookupResponse r = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    r.n_segments = 1;
    r.segments = ps;
    r.leading_tokens = 77;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
}

static int on_lookup(void *ctx, const ProtobufCMessage *m)
{
    collected *k = ctx;
    const Hypic__V1__LookupResponse *r = (const Hypic__V1__LookupResponse *)m;
    k->n++;
    k->placed = r->n_segments == 1 ? (int)(r->segments[0]->tokens * 1000 + r->leading_tokens) : -1;
    return 0;
}

/* Stops the stream after the first message with a code of its own. */
static int on_progress_stop(void *ctx, const ProtobufCMessage *m)
{
    on_progress(ctx, m);
    return 42;
}

static void test_local_unary(void)
{
    Hypic__V1__Segment segs[3], *ps[3];
    for (int i = 0; i < 3; i++) {
        hypic__v1__segment__init(&segs[i]);
        ps[i] = &segs[i];
    }
    Hypic__V1__LookupRequest req = HYPIC__V1__LOOKUP_REQUEST__INIT;
    req.model = "tiny";
    req.n_segments = 3;
    req.segments = ps;
    collected k = {0};
    hy_rpc_status st = {.code = -1};
    memset(&g_probe, 0, sizeof g_probe);
    CU_ASSERT_EQUAL(hy_rpc_call_local(method("Lookup"), &req.base, h_probe, NULL, on_lookup, &k,
                                      "Bearer s3cret", &st),
                    HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_STRING_EQUAL(st.msg, "");
    CU_ASSERT_EQUAL(g_probe.ran, 1);
    /* the handler got a decoded copy, not the caller's message */
    CU_ASSERT(g_probe.req != NULL && g_probe.req != &req.base);
    CU_ASSERT_STRING_EQUAL(g_probe.model, "tiny");
    CU_ASSERT_EQUAL(g_probe.ms_left, (long long)INT64_MAX);
    CU_ASSERT_EQUAL(g_probe.recv_rc, HY_EINVAL);
    CU_ASSERT_FALSE(g_probe.has_other_md);
    CU_ASSERT_EQUAL(k.n, 1);
    CU_ASSERT_EQUAL(k.placed, 3 * 1000 + 77); /* the response, decoded again */

    /* the authorization metadata, as given or absent */
    Hypic__V1__HealthRequest hr = HYPIC__V1__HEALTH_REQUEST__INIT;
    memset(&k, 0, sizeof k);
    CU_ASSERT_EQUAL(hy_rpc_call_local(method("Health"), &hr.base, h_health, NULL, on_health, &k,
                                      "Bearer s3cret", &st),
                    HY_OK);
    CU_ASSERT_STRING_EQUAL(k.first_model, "Bearer s3cret");
    memset(&k, 0, sizeof k);
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Health"), &hr.base, h_health, NULL, on_health, &k, NULL, &st),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL(k.n, 1);
    CU_ASSERT_STRING_EQUAL(k.first_model, "none");
}

static void test_local_stream_and_statuses(void)
{
    Hypic__V1__Segment segs[4], *ps[4];
    for (int i = 0; i < 4; i++) {
        hypic__v1__segment__init(&segs[i]);
        ps[i] = &segs[i];
    }
    Hypic__V1__WarmRequest wr = HYPIC__V1__WARM_REQUEST__INIT;
    wr.n_segments = 4;
    wr.segments = ps;
    collected k = {0};
    hy_rpc_status st;
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Warm"), &wr.base, h_warm, NULL, on_progress, &k, NULL, &st),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_OK);
    CU_ASSERT_EQUAL_FATAL(k.n, 4);
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(k.index[i], (uint32_t)i);

    /* a caller that stops the stream: the handler's next send fails (it
     * returns without a status: INTERNAL) and the caller's code comes back */
    memset(&k, 0, sizeof k);
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Warm"), &wr.base, h_warm, NULL, on_progress_stop, &k, NULL, &st),
        42);
    CU_ASSERT_EQUAL(k.n, 1);
    CU_ASSERT_EQUAL(st.code, HY_RPC_INTERNAL);

    Hypic__V1__LookupRequest lr = HYPIC__V1__LOOKUP_REQUEST__INIT;
    CU_ASSERT_EQUAL(hy_rpc_call_local(method("Lookup"), &lr.base, h_lookup_not_found, NULL, NULL,
                                      NULL, NULL, &st),
                    HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_NOT_FOUND);
    CU_ASSERT_STRING_EQUAL(st.msg, "segments[0]: no such entry");

    Hypic__V1__StatsRequest sr = HYPIC__V1__STATS_REQUEST__INIT;
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Stats"), &sr.base, h_stats_forgets, NULL, NULL, NULL, NULL, &st),
        HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_INTERNAL);
    CU_ASSERT(strstr(st.msg, "without a status") != NULL);

    /* client streaming: refused before the handler runs; no handler: the same */
    Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
    g_put_done = 0;
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("PutEntry"), &ch.base, h_put, NULL, NULL, NULL, NULL, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNIMPLEMENTED);
    CU_ASSERT_EQUAL(g_put_done, 0);
    Hypic__V1__InspectRequest ir = HYPIC__V1__INSPECT_REQUEST__INIT;
    CU_ASSERT_EQUAL(
        hy_rpc_call_local(method("Inspect"), &ir.base, NULL, NULL, NULL, NULL, NULL, &st), HY_OK);
    CU_ASSERT_EQUAL(st.code, HY_RPC_UNIMPLEMENTED);
}

int main(void)
{
    set_handler("Health", h_health);
    set_handler("Warm", h_warm);
    set_handler("PutEntry", h_put);
    set_handler("Lookup", h_lookup_not_found);
    set_handler("Stats", h_stats_forgets);
    set_handler("Watch", h_watch_slow);
    if (rpc_fixture_start("test_transport", 3)) return 1;
    static const hy_test_case cases[] = {
        {"unary_with_metadata", test_unary_with_metadata},
        {"server_stream_in_order", test_server_stream_in_order},
        {"client_stream", test_client_stream},
        {"stream_call", test_stream_call},
        {"stream_abandoned", test_stream_abandoned},
        {"stream_refused_early", test_stream_refused_early},
        {"tls", test_tls},
        {"statuses_and_bad_input", test_statuses},
        {"concurrent_clients", test_concurrent_clients},
        {"port_in_use", test_port_in_use},
        {"local_unary", test_local_unary},
        {"local_stream_and_statuses", test_local_stream_and_statuses},
        {NULL, NULL},
    };
    int rc = hy_test_main("rpc_transport", cases);
    rpc_fixture_stop();
    return rc;
}
