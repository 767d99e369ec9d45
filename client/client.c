/*
 * libhypic-client over the rpc transport (hy_rpc.h): each hyc_* call packs
 * its request, makes one blocking gRPC call with the connection's token and
 * deadline, and turns what came back into a response the caller owns and a
 * status.
 *
 * Unary responses are decoded here (not by the transport, which frees what
 * it decodes after its callback) so that the caller keeps them. The entry
 * streams are checked as they arrive: GetEntry's chunks must start with the
 * metadata and add up to exactly meta.bytes; PutEntry's are cut from the
 * caller's buffer without copying. Everything that goes wrong on this side
 * of the wire is INTERNAL "client: ..." (INVALID_ARGUMENT "client: ..." for
 * refused arguments), so a status always says which side failed.
 */
#include "hypic_client.h"

#include "client_internal.h"
#include "hy_rpc.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HYC_MAX_MESSAGE_DEFAULT ((size_t)64 << 20)
#define HYC_CHUNK_DEFAULT       ((size_t)1 << 20)
#define HYC_META_ROOM           ((size_t)64 << 10) /* bytes of a chunk left for its metadata */
#define HYC_CA_FILE_MAX         ((size_t)1 << 20)

int status_set(hyc_status *st, int code, const char *fmt, ...)
{
    st->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->msg, sizeof st->msg, fmt, ap);
    va_end(ap);
    return code;
}

int status_ok(hyc_status *st)
{
    st->code = HYC_OK;
    st->msg[0] = '\0';
    return HYC_OK;
}

/* The transport's method entry for name; the names are hypic.proto's, so a
 * miss is a broken build. */
const hy_rpc_method *method(const char *name)
{
    const hy_rpc_method *m = hy_rpc_method_named(name);
    if (!m) abort();
    return m;
}

/* The PEM text of `what`'s file into *out, which must hold marker: gRPC
 * takes any text and fails each call later with a message that does not
 * name the file ("empty address list"). Non-zero (INVALID_ARGUMENT in st)
 * when it cannot be read or holds no such block. */
static int read_pem(const char *what, const char *file, const char *noun, const char *marker,
                    char **out, hyc_status *st)
{
    hy_err e = {0};
    size_t len;
    if (hy_read_file(file, HYC_CA_FILE_MAX, out, &len, &e))
        return status_set(st, HYC_INVALID_ARGUMENT, "client: TLS %s file: %s", what, e.msg);
    if (strstr(*out, marker)) return 0;
    hy_free(*out);
    *out = NULL;
    return status_set(st, HYC_INVALID_ARGUMENT, "client: TLS %s file %s: no PEM %s in it (%s)",
                      what, file, noun, marker);
}

int read_tls(const char *who, const char *ca_file, const char *cert_file, const char *key_file,
             char *pem[3], hyc_status *st)
{
    char what[64];
    pem[0] = pem[1] = pem[2] = NULL;
    snprintf(what, sizeof what, "%sCA", who);
    int rc =
        ca_file ? read_pem(what, ca_file, "certificate", "-----BEGIN CERTIFICATE-----", &pem[0], st)
                : 0;
    if (!rc && cert_file) {
        snprintf(what, sizeof what, "%sclient certificate", who);
        rc = read_pem(what, cert_file, "block", "-----BEGIN ", &pem[1], st);
    }
    if (!rc && cert_file) {
        snprintf(what, sizeof what, "%sclient key", who);
        rc = read_pem(what, key_file, "block", "-----BEGIN ", &pem[2], st);
    }
    if (rc)
        for (int i = 0; i < 3; i++) hy_free(pem[i]), pem[i] = NULL;
    return rc;
}

int hyc_open(const hyc_options *o, hyc **out, hyc_status *st)
{
    *out = NULL;
    if (!o || !o->target || !o->target[0])
        return status_set(st, HYC_INVALID_ARGUMENT, "client: no target address");
    hyc *c = calloc(1, sizeof *c);
    if (!c) return status_set(st, HYC_INTERNAL, "client: out of memory");
    c->deadline_ms = o->deadline_ms;
    hyci_target_host(o->target, c->host, sizeof c->host);
    c->max_message = o->max_message ? o->max_message : HYC_MAX_MESSAGE_DEFAULT;
    if (o->token && !(c->token = strdup(o->token))) {
        free(c);
        return status_set(st, HYC_INTERNAL, "client: out of memory");
    }
    /* TLS: the CA, and for mutual TLS this client's certificate and key */
    if (!o->tls_cert_file != !o->tls_key_file || (o->tls_cert_file && !o->tls_ca_file)) {
        hyc_close(c);
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: a TLS client certificate needs tls_cert_file, tls_key_file "
                          "and tls_ca_file");
    }
    char *pem[3];
    if (read_tls("", o->tls_ca_file, o->tls_cert_file, o->tls_key_file, pem, st)) {
        hyc_close(c);
        return st->code;
    }
    hy_err e = {0};
    hy_rpc_client_options ro = {.target = o->target,
                                .max_message = c->max_message,
                                .tls_root_pem = pem[0],
                                .tls_server_name = o->tls_server_name,
                                .tls_cert_pem = pem[1],
                                .tls_key_pem = pem[2],
                                .wait_for_ready = o->wait_for_ready,
                                .connect_timeout_ms = o->connect_timeout_ms,
                                /* each hyc a connection: a frontend's threads,
                                 * each with its handle, are read in parallel */
                                .own_connection = true};
    int rc = hy_rpc_client_open_ex(&ro, &c->rpc, &e);
    for (int i = 0; i < 3; i++) hy_free(pem[i]);
    if (rc) {
        hyc_close(c);
        return status_set(st, HYC_INVALID_ARGUMENT, "client: %s", e.msg);
    }
    *out = c;
    return status_ok(st);
}

void hyc_close(hyc *c)
{
    if (!c) return;
    hy_rpc_client_close(c->rpc);
    free(c->token);
    free(c);
}

void hyc_free(void *msg)
{
    if (msg) protobuf_c_message_free_unpacked(msg, NULL);
}

const char *hyc_code_name(int code)
{
    const char *n = hy_rpc_code_name(code);
    return n ? n : "UNKNOWN_CODE";
}

/* The status of a call the transport made: the server's when the call
 * completed (rc 0), INTERNAL "client: ..." otherwise. */
int call_status(int rc, const hy_rpc_status *rs, const hy_err *e, hyc_status *st)
{
    if (rc) return status_set(st, HYC_INTERNAL, "client: %s", e->msg[0] ? e->msg : hy_strerror(rc));
    st->code = rs->code;
    snprintf(st->msg, sizeof st->msg, "%s", rs->msg);
    return st->code;
}

/* ---- unary calls ---- */

typedef struct unary_ctx {
    const ProtobufCMessageDescriptor *d;
    size_t max;
    ProtobufCMessage *msg;
    hy_err err;
} unary_ctx;

static int on_unary(void *ctx, const void *b, size_t n)
{
    unary_ctx *u = ctx;
    if (u->msg) return hy_err_set(&u->err, HY_EFORMAT, "%s: a second response", u->d->name);
    return hy_rpc_unpack(u->d, b, n, u->max, &u->msg, &u->err);
}

int unary(hyc *c, const char *name, const ProtobufCMessage *rq, void **out, hyc_status *st)
{
    *out = NULL;
    const hy_rpc_method *m = method(name);
    if (!rq) return status_set(st, HYC_INVALID_ARGUMENT, "client: %s: no request", name);
    assert(rq->descriptor == m->request);
    size_t n = protobuf_c_message_get_packed_size(rq);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return status_set(st, HYC_INTERNAL, "client: out of memory");
    protobuf_c_message_pack(rq, b);
    unary_ctx u = {.d = m->response, .max = c->max_message};
    hy_rpc_status rs;
    hy_err e = {0};
    int rc = hy_rpc_client_call_raw(c->rpc, m->path, b, n, c->token, c->deadline_ms, on_unary, &u,
                                    &rs, &e);
    free(b);
    if (rc && u.err.msg[0]) e = u.err; /* the response that did not decode */
    if (call_status(rc, &rs, &e, st) != HYC_OK) {
        if (u.msg) protobuf_c_message_free_unpacked(u.msg, NULL);
        return st->code;
    }
    if (!u.msg)
        return status_set(st, HYC_INTERNAL, "client: %s: the server sent no response", name);
    *out = u.msg;
    return HYC_OK;
}

int hyc_lookup(hyc *c, const Hypic__V1__LookupRequest *rq, Hypic__V1__LookupResponse **out,
               hyc_status *st)
{
    return unary(c, "Lookup", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_prefill(hyc *c, const Hypic__V1__PrefillRequest *rq, Hypic__V1__PrefillResponse **out,
                hyc_status *st)
{
    return unary(c, "Prefill", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_invalidate(hyc *c, const Hypic__V1__InvalidateRequest *rq,
                   Hypic__V1__InvalidateResponse **out, hyc_status *st)
{
    return unary(c, "Invalidate", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_pin(hyc *c, const Hypic__V1__PinRequest *rq, Hypic__V1__PinResponse **out, hyc_status *st)
{
    return unary(c, "Pin", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_unpin(hyc *c, const Hypic__V1__UnpinRequest *rq, Hypic__V1__UnpinResponse **out,
              hyc_status *st)
{
    return unary(c, "Unpin", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_list(hyc *c, const Hypic__V1__ListRequest *rq, Hypic__V1__ListResponse **out,
             hyc_status *st)
{
    return unary(c, "List", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_inspect(hyc *c, const Hypic__V1__InspectRequest *rq, Hypic__V1__InspectResponse **out,
                hyc_status *st)
{
    return unary(c, "Inspect", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_stats(hyc *c, const Hypic__V1__StatsRequest *rq, Hypic__V1__StatsResponse **out,
              hyc_status *st)
{
    return unary(c, "Stats", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_get_policy(hyc *c, const Hypic__V1__GetPolicyRequest *rq, Hypic__V1__Policy **out,
                   hyc_status *st)
{
    return unary(c, "GetPolicy", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_set_policy(hyc *c, const Hypic__V1__SetPolicyRequest *rq, Hypic__V1__Policy **out,
                   hyc_status *st)
{
    return unary(c, "SetPolicy", rq ? &rq->base : NULL, (void **)out, st);
}

int hyc_health(hyc *c, const Hypic__V1__HealthRequest *rq, Hypic__V1__HealthResponse **out,
               hyc_status *st)
{
    return unary(c, "Health", rq ? &rq->base : NULL, (void **)out, st);
}

/* ---- server streams ---- */

/* A server stream's messages, each handed to the caller's on; `stopped`
 * tells a refusal by on from one by the transport (a message that did not
 * decode). */
typedef struct stream_ctx {
    int (*on)(void *ctx, const ProtobufCMessage *msg);
    void *ctx;
    bool stopped;
} stream_ctx;

static int on_stream(void *arg, const ProtobufCMessage *msg)
{
    stream_ctx *s = arg;
    if (!s->on || s->on(s->ctx, msg) == 0) return 0;
    s->stopped = true;
    return HY_EINVAL; /* any non-zero: the transport cancels the call */
}

static int server_stream(hyc *c, const char *name, const ProtobufCMessage *rq,
                         int (*on)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                         hyc_status *st)
{
    const hy_rpc_method *m = method(name);
    if (!rq) return status_set(st, HYC_INVALID_ARGUMENT, "client: %s: no request", name);
    assert(rq->descriptor == m->request);
    stream_ctx s = {on, ctx, false};
    hy_rpc_status rs;
    hy_err e = {0};
    int rc = hy_rpc_client_call(c->rpc, m, rq, c->token, c->deadline_ms, on_stream, &s, &rs, &e);
    if (s.stopped) return status_set(st, HYC_CANCELLED, "client: stopped by the callback");
    return call_status(rc, &rs, &e, st);
}

/* The caller's typed callback behind the transport's generic one. */
typedef struct warm_cb {
    int (*on)(void *ctx, const Hypic__V1__WarmProgress *p);
    void *ctx;
} warm_cb;

static int on_warm(void *arg, const ProtobufCMessage *msg)
{
    warm_cb *w = arg;
    return w->on ? w->on(w->ctx, (const Hypic__V1__WarmProgress *)msg) : 0;
}

int hyc_warm(hyc *c, const Hypic__V1__WarmRequest *rq,
             int (*on)(void *ctx, const Hypic__V1__WarmProgress *p), void *ctx, hyc_status *st)
{
    warm_cb w = {on, ctx};
    return server_stream(c, "Warm", rq ? &rq->base : NULL, on_warm, &w, st);
}

typedef struct watch_cb {
    int (*on)(void *ctx, const Hypic__V1__WatchEvent *e);
    void *ctx;
} watch_cb;

static int on_watch(void *arg, const ProtobufCMessage *msg)
{
    watch_cb *w = arg;
    return w->on ? w->on(w->ctx, (const Hypic__V1__WatchEvent *)msg) : 0;
}

int hyc_watch(hyc *c, const Hypic__V1__WatchRequest *rq,
              int (*on)(void *ctx, const Hypic__V1__WatchEvent *e), void *ctx, hyc_status *st)
{
    watch_cb w = {on, ctx};
    return server_stream(c, "Watch", rq ? &rq->base : NULL, on_watch, &w, st);
}

/* ---- GetEntry: chunks into one buffer ---- */

typedef struct get_ctx {
    Hypic__V1__EntryMeta *meta; /* our own copy of the first chunk's */
    hy_chunks asm_;             /* the bytes, in order or at their offsets (Build) */
    char why[400];              /* non-empty: the chunks broke the stream's rules */
} get_ctx;

/* A copy of m that outlives the chunk it came in. */
static Hypic__V1__EntryMeta *meta_copy(const Hypic__V1__EntryMeta *m)
{
    size_t n = hypic__v1__entry_meta__get_packed_size(m);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return NULL;
    hypic__v1__entry_meta__pack(m, b);
    Hypic__V1__EntryMeta *copy = hypic__v1__entry_meta__unpack(NULL, n, b);
    free(b);
    return copy;
}

static int on_chunk(void *arg, const ProtobufCMessage *msg)
{
    get_ctx *g = arg;
    const Hypic__V1__EntryChunk *ch = (const Hypic__V1__EntryChunk *)msg;
    int rc = hy_chunks_add(&g->asm_, ch);
    if (rc) {
        snprintf(g->why, sizeof g->why, "%s", g->asm_.why);
        return rc;
    }
    if (ch->meta && !(g->meta = meta_copy(ch->meta))) {
        snprintf(g->why, sizeof g->why, "out of memory");
        return HY_ENOMEM;
    }
    return 0;
}

/* A stream of EntryChunk (GetEntry, Build): the metadata and the bytes
 * reassembled, checked as hyc_get_entry says. */
static int entry_stream(hyc *c, const char *name, const ProtobufCMessage *rq,
                        Hypic__V1__EntryMeta **meta, void **bytes, size_t *n, hyc_status *st)
{
    *meta = NULL;
    *bytes = NULL;
    *n = 0;
    if (!rq) return status_set(st, HYC_INVALID_ARGUMENT, "client: %s: no request", name);
    get_ctx g = {0};
    hy_rpc_status rs;
    hy_err e = {0};
    int rc = hy_rpc_client_call(c->rpc, method(name), rq, c->token, c->deadline_ms, on_chunk, &g,
                                &rs, &e);
    if (g.why[0]) {
        status_set(st, HYC_INTERNAL, "client: %s: %s", name, g.why);
    } else if (call_status(rc, &rs, &e, st) == HYC_OK) {
        if (!g.meta)
            status_set(st, HYC_INTERNAL, "client: %s: the server sent no chunk", name);
        else if (!hy_chunks_complete(&g.asm_))
            status_set(st, HYC_INTERNAL,
                       "client: %s: the chunks hold %llu bytes, meta.bytes says %llu", name,
                       (unsigned long long)g.asm_.got, (unsigned long long)g.meta->bytes);
    }
    if (st->code != HYC_OK) {
        hyc_free(g.meta);
        hy_chunks_free(&g.asm_);
        return st->code;
    }
    if (!(*bytes = hy_chunks_take(&g.asm_, n))) {
        hyc_free(g.meta);
        return status_set(st, HYC_INTERNAL, "client: out of memory");
    }
    *meta = g.meta;
    return HYC_OK;
}

int hyc_get_entry(hyc *c, const Hypic__V1__GetEntryRequest *rq, Hypic__V1__EntryMeta **meta,
                  void **bytes, size_t *n, hyc_status *st)
{
    return entry_stream(c, "GetEntry", rq ? &rq->base : NULL, meta, bytes, n, st);
}

int hyc_build(hyc *c, const Hypic__V1__BuildRequest *rq, Hypic__V1__EntryMeta **meta, void **bytes,
              size_t *n, hyc_status *st)
{
    return entry_stream(c, "Build", rq ? &rq->base : NULL, meta, bytes, n, st);
}

/* ---- PutEntry: the caller's bytes in chunks ---- */

typedef struct put_ctx {
    Hypic__V1__EntryMeta meta; /* the caller's, with bytes = n */
    Hypic__V1__EntryChunk ch;
    const uint8_t *data;
    size_t n, off, chunk;
    bool first_sent;
} put_ctx;

static int next_chunk(void *ctx, const ProtobufCMessage **msg, hy_err *err)
{
    (void)err;
    put_ctx *p = ctx;
    if (p->first_sent && p->off >= p->n) {
        *msg = NULL;
        return HY_OK;
    }
    hypic__v1__entry_chunk__init(&p->ch);
    if (!p->first_sent) p->ch.meta = &p->meta;
    size_t len = HY_MIN(p->chunk, p->n - p->off);
    p->ch.data.data = (uint8_t *)p->data + p->off; /* (protobuf-c's field is not const) */
    p->ch.data.len = len;
    p->off += len;
    p->first_sent = true;
    *msg = &p->ch.base;
    return HY_OK;
}

static int on_put(void *ctx, const ProtobufCMessage *msg)
{
    unary_ctx *u = ctx;
    if (u->msg) return hy_err_set(&u->err, HY_EFORMAT, "PutEntry: a second response");
    /* the transport frees msg after this: keep a copy */
    size_t n = protobuf_c_message_get_packed_size(msg);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return hy_err_set(&u->err, HY_ENOMEM, "out of memory");
    protobuf_c_message_pack(msg, b);
    int rc = hy_rpc_unpack(u->d, b, n, u->max, &u->msg, &u->err);
    free(b);
    return rc;
}

int hyc_put_entry(hyc *c, const Hypic__V1__EntryMeta *meta, const void *bytes, size_t n,
                  size_t chunk, Hypic__V1__PutEntryResponse **out, hyc_status *st)
{
    *out = NULL;
    if (!meta || (!bytes && n))
        return status_set(st, HYC_INVALID_ARGUMENT, "client: PutEntry: no %s",
                          meta ? "bytes" : "metadata");
    if (!chunk) chunk = HYC_CHUNK_DEFAULT;
    size_t limit = c->max_message > HYC_META_ROOM ? c->max_message - HYC_META_ROOM : 0;
    if (chunk > limit)
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: PutEntry: chunk = %zu bytes, over max_message - 64 KiB = %zu",
                          chunk, limit);
    put_ctx p = {.meta = *meta, .data = bytes, .n = n, .chunk = chunk};
    p.meta.bytes = n;
    size_t meta_bytes = hypic__v1__entry_meta__get_packed_size(&p.meta);
    if (meta_bytes > HYC_META_ROOM)
        return status_set(st, HYC_INVALID_ARGUMENT,
                          "client: PutEntry: the metadata packs to %zu bytes, over 64 KiB",
                          meta_bytes);
    const hy_rpc_method *m = method("PutEntry");
    unary_ctx u = {.d = m->response, .max = c->max_message};
    hy_rpc_status rs;
    hy_err e = {0};
    int rc = hy_rpc_client_call_stream(c->rpc, m, c->token, c->deadline_ms, next_chunk, &p, on_put,
                                       &u, &rs, &e);
    if (rc && u.err.msg[0]) e = u.err;
    if (call_status(rc, &rs, &e, st) != HYC_OK) {
        if (u.msg) protobuf_c_message_free_unpacked(u.msg, NULL);
        return st->code;
    }
    if (!u.msg)
        return status_set(st, HYC_INTERNAL, "client: PutEntry: the server sent no response");
    *out = (Hypic__V1__PutEntryResponse *)u.msg;
    return HYC_OK;
}

void hyci_target_host(const char *target, char *host, size_t cap)
{
    const char *colon = strrchr(target, ':');
    size_t n = colon ? (size_t)(colon - target) : strlen(target);
    if (n >= 2 && target[0] == '[' && target[n - 1] == ']') target++, n -= 2;
    if (n >= cap) n = cap - 1;
    memcpy(host, target, n);
    host[n] = '\0';
}
