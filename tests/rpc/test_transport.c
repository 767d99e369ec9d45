/*
 * hypic.v1 over gRPC on loopback (rpc/server.c, rpc/client.c): a server on a
 * free port with test handlers, and the client library against it. Unary,
 * server-streaming and client-streaming calls arrive with their request and
 * metadata; a handler's status and message reach the client; an unknown
 * method or one without a handler is UNIMPLEMENTED, bytes that are not the
 * request type INVALID_ARGUMENT, an oversize message RESOURCE_EXHAUSTED, a
 * handler that forgets its status INTERNAL, a slow call DEADLINE_EXCEEDED;
 * several client threads at once; and the server keeps serving after every
 * one of those. A second server cannot bind the same port.
 */
#include "hy_rpc.h"
#include "test_util.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static hy_rpc_server *g_srv;
static hy_rpc_client *g_cl;
static char g_target[64];

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
        if (chunks++ == 0 && ch->meta) want = ch->meta->bytes;
        got += ch->data.len;
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (rc != HY_ENOTFOUND) {
        hy_rpc_call_finish(c, HY_RPC_INVALID_ARGUMENT, e.msg);
        return;
    }
    Hypic__V1__PutEntryResponse r = HYPIC__V1__PUT_ENTRY_RESPONSE__INIT;
    r.placed = chunks > 0 && got == want ? HYPIC__V1__TIER__TIER_HOST : HYPIC__V1__TIER__TIER_NONE;
    hy_rpc_call_send(c, &r.base, NULL);
    hy_rpc_call_finish(c, HY_RPC_OK, NULL);
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

static hy_rpc_handler g_handlers[16];

static const hy_rpc_method *method(const char *name)
{
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(hy_rpc_methods[i].name, name) == 0) return &hy_rpc_methods[i];
    return NULL;
}

static void set_handler(const char *name, hy_rpc_handler h)
{
    g_handlers[method(name) - hy_rpc_methods] = h;
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

int main(void)
{
    set_handler("Health", h_health);
    set_handler("Warm", h_warm);
    set_handler("PutEntry", h_put);
    set_handler("Lookup", h_lookup_not_found);
    set_handler("Stats", h_stats_forgets);
    set_handler("Watch", h_watch_slow);
    hy_rpc_server_config cfg = {.address = "127.0.0.1:0", .workers = 3, .max_message = 64 << 10};
    hy_err e = {0};
    if (hy_rpc_server_start(&cfg, g_handlers, NULL, &g_srv, &e)) {
        fprintf(stderr, "test_transport: %s\n", e.msg);
        return 1;
    }
    snprintf(g_target, sizeof g_target, "127.0.0.1:%d", hy_rpc_server_port(g_srv));
    if (hy_rpc_client_open(g_target, 1 << 20, &g_cl, &e)) {
        fprintf(stderr, "test_transport: %s\n", e.msg);
        hy_rpc_server_stop(g_srv);
        return 1;
    }
    static const hy_test_case cases[] = {
        {"unary_with_metadata", test_unary_with_metadata},
        {"server_stream_in_order", test_server_stream_in_order},
        {"client_stream", test_client_stream},
        {"statuses_and_bad_input", test_statuses},
        {"concurrent_clients", test_concurrent_clients},
        {"port_in_use", test_port_in_use},
        {NULL, NULL},
    };
    int rc = hy_test_main("rpc_transport", cases);
    hy_rpc_client_close(g_cl);
    hy_rpc_server_stop(g_srv);
    return rc;
}
