/*
 * The etcd v3 client: etcd's gRPC methods called through hy_rpc_client, which
 * takes any gRPC path. A method that is not hypic.v1's goes out as [metadata,
 * the request, close from the client] and its responses are read until the
 * status, so:
 *
 *  - KV and Lease unary methods are plain calls;
 *  - LeaseKeepAlive (a bidi stream in etcd) is one call per renewal: etcd
 *    reads the request, answers it, then sees the half-close and ends the
 *    call cleanly (its loop answers each request before reading the next);
 *  - Watch (bidi too) is one long call: the create request, the half-close,
 *    then WatchResponses until the call is cancelled. etcd 3.4's watch server
 *    lets its receive loop end quietly on the client's half-close and keeps
 *    the stream (and its watches) alive until the call's context ends, so a
 *    half-closed Watch goes on delivering events (tests/cluster/test_etcd.c
 *    checks this against a real etcd). Without a request stream we cannot
 *    cancel one watch of many or ask for progress: one call, one watch.
 *
 * Endpoints are tried in order from the one that answered last; UNAVAILABLE
 * (nothing listening, connection lost) moves to the next. Any other status is
 * etcd's answer and is returned as it is.
 */
#include "hy_cluster.h"

#include "etcd.pb-c.h"
#include "hy_rpc.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* hy_rpc_shape has no bidi stream: LeaseKeepAlive and Watch are called the
 * way we use them, one request and the responses that follow. The shape is
 * only read for hypic.v1's own methods anyway. */
#define M(nm, svc, sh, req, resp)                                                                  \
    {                                                                                              \
        .name = #nm, .path = "/etcdserverpb." svc "/" #nm, .shape = sh,                            \
        .request = &etcdserverpb__##req##__descriptor,                                             \
        .response = &etcdserverpb__##resp##__descriptor,                                           \
    }
static const hy_rpc_method m_range = M(Range, "KV", HY_RPC_UNARY, range_request, range_response);
static const hy_rpc_method m_put = M(Put, "KV", HY_RPC_UNARY, put_request, put_response);
static const hy_rpc_method m_delete_range =
    M(DeleteRange, "KV", HY_RPC_UNARY, delete_range_request, delete_range_response);
static const hy_rpc_method m_lease_grant =
    M(LeaseGrant, "Lease", HY_RPC_UNARY, lease_grant_request, lease_grant_response);
static const hy_rpc_method m_lease_revoke =
    M(LeaseRevoke, "Lease", HY_RPC_UNARY, lease_revoke_request, lease_revoke_response);
static const hy_rpc_method m_lease_keepalive =
    M(LeaseKeepAlive, "Lease", HY_RPC_SERVER_STREAM, lease_keep_alive_request,
      lease_keep_alive_response);
static const hy_rpc_method m_watch =
    M(Watch, "Watch", HY_RPC_SERVER_STREAM, watch_request, watch_response);
static const hy_rpc_method m_authenticate =
    M(Authenticate, "Auth", HY_RPC_UNARY, authenticate_request, authenticate_response);
#undef M

#define MAX_ENDPOINTS 16
/* Responses larger than this are refused (a range of a huge prefix). */
#define MAX_MESSAGE (64u << 20)

#define TOKEN_MAX 512 /* etcd's simple tokens are 16 letters and a counter; JWTs ~ 300 */

struct hy_etcd {
    size_t n;
    char *endpoint[MAX_ENDPOINTS];
    hy_rpc_client *cl[MAX_ENDPOINTS];
    int64_t timeout_ms;
    _Atomic size_t cur; /* the endpoint that answered last */
    /* etcd's auth: the user, and each endpoint's token (a simple token is
     * only known to the etcd member that issued it); under mu */
    char *user, *password;
    pthread_mutex_t mu;
    char token[MAX_ENDPOINTS][TOKEN_MAX];
};

int hy_etcd_open(const char *const *endpoints, size_t n, int64_t timeout_ms, hy_etcd **out,
                 hy_err *err)
{
    hy_etcd_options o = {.endpoints = endpoints, .n = n, .timeout_ms = timeout_ms};
    return hy_etcd_open_ex(&o, out, err);
}

int hy_etcd_open_ex(const hy_etcd_options *o, hy_etcd **out, hy_err *err)
{
    const char *const *endpoints = o->endpoints;
    const size_t n = o->n;
    const int64_t timeout_ms = o->timeout_ms;
    *out = NULL;
    if (!o->tls_cert_pem != !o->tls_key_pem || (o->tls_cert_pem && !o->tls_ca_pem))
        return hy_err_set(err, HY_EINVAL,
                          "etcd: a client certificate needs its key and TLS (the CA)");
    if (o->password && !o->user)
        return hy_err_set(err, HY_EINVAL, "etcd: a password without a user");
    if (n == 0 || n > MAX_ENDPOINTS)
        return hy_err_set(err, HY_EINVAL, "etcd: %zu endpoints (need 1 to %d)", n, MAX_ENDPOINTS);
    if (timeout_ms <= 0)
        return hy_err_set(err, HY_EINVAL, "etcd: timeout_ms %" PRId64 " (need > 0)", timeout_ms);
    hy_etcd *e = calloc(1, sizeof *e);
    if (!e) return hy_err_set(err, HY_ENOMEM, "etcd: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    e->timeout_ms = timeout_ms;
    if (o->user &&
        (!(e->user = strdup(o->user)) || !(e->password = strdup(o->password ? o->password : "")))) {
        hy_etcd_close(e);
        return hy_err_set(err, HY_ENOMEM, "etcd: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (!endpoints[i] || !endpoints[i][0]) {
            hy_etcd_close(e);
            return hy_err_set(err, HY_EINVAL, "etcd: endpoint %zu is empty", i);
        }
        e->endpoint[i] = strdup(endpoints[i]);
        e->n = i + 1;
        if (!e->endpoint[i]) {
            hy_etcd_close(e);
            return hy_err_set(err, HY_ENOMEM, "etcd: out of memory");
        }
        hy_rpc_client_options ro = {.target = endpoints[i],
                                    .max_message = MAX_MESSAGE,
                                    .tls_root_pem = o->tls_ca_pem,
                                    .tls_server_name = o->tls_server_name,
                                    .tls_cert_pem = o->tls_cert_pem,
                                    .tls_key_pem = o->tls_key_pem,
                                    .token_key = "token"};
        int rc = hy_rpc_client_open_ex(&ro, &e->cl[i], err);
        if (rc) {
            hy_err_prefix(err, "etcd endpoint %s", endpoints[i]);
            hy_etcd_close(e);
            return rc;
        }
    }
    *out = e;
    return 0;
}

void hy_etcd_close(hy_etcd *e)
{
    if (!e) return;
    for (size_t i = 0; i < e->n; i++) {
        hy_rpc_client_close(e->cl[i]);
        free(e->endpoint[i]);
    }
    if (e->password) memset(e->password, 0, strlen(e->password));
    free(e->user);
    free(e->password);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

static int code_to_hy(int code)
{
    switch (code) {
    case HY_RPC_NOT_FOUND:
        return HY_ENOTFOUND;
    case HY_RPC_INVALID_ARGUMENT:
    case HY_RPC_FAILED_PRECONDITION:
    case 11 /* OUT_OF_RANGE */:
        return HY_EINVAL;
    case HY_RPC_DEADLINE_EXCEEDED:
        return HY_EAGAIN;
    case HY_RPC_CANCELLED:
        return HY_ECANCELED;
    default:
        return HY_EIO;
    }
}

/* One call of m with req on e's endpoints, from the one that answered last:
 * UNAVAILABLE moves to the next. deadline_ms 0: none. *used (may be NULL)
 * gets the index of the endpoint whose status is returned. committed (may be
 * NULL) turns true once a call must not be repeated elsewhere (a watch that
 * has delivered: a second one would deliver again); UNAVAILABLE then ends the
 * call like any other status. 0 when a call completed OK; otherwise the error names the
 * endpoint(s), the method and etcd's (or gRPC's) message. */
static int take_token(void *ctx, const ProtobufCMessage *msg)
{
    const Etcdserverpb__AuthenticateResponse *r = (const void *)msg;
    snprintf(ctx, TOKEN_MAX, "%s", r->token ? r->token : "");
    return 0;
}

/* Endpoint k's token into tok (TOKEN_MAX), asking it for one when it has
 * none or `stale` is the one it has (etcd said it is no longer valid): 0,
 * HY_EAGAIN when the endpoint is UNAVAILABLE (*st says why), or the error. */
static int token_of(hy_etcd *e, size_t k, const char *stale, char *tok, hy_rpc_status *st,
                    hy_err *err)
{
    pthread_mutex_lock(&e->mu);
    if (stale && !strcmp(e->token[k], stale)) e->token[k][0] = '\0';
    snprintf(tok, TOKEN_MAX, "%s", e->token[k]);
    pthread_mutex_unlock(&e->mu);
    if (tok[0]) return 0;
    Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
    req.name = e->user;
    req.password = e->password;
    hy_err cerr = {0};
    int rc = hy_rpc_client_call(e->cl[k], &m_authenticate, &req.base, NULL, e->timeout_ms,
                                take_token, tok, st, &cerr);
    if (rc) return hy_err_set(err, rc, "etcd %s Authenticate: %s", e->endpoint[k], cerr.msg);
    if (st->code == HY_RPC_UNAVAILABLE) return HY_EAGAIN;
    if (st->code != HY_RPC_OK)
        return hy_err_set(err, st->code == HY_RPC_INVALID_ARGUMENT ? HY_EINVAL : HY_EIO,
                          "etcd %s Authenticate as user '%s': %s: %s", e->endpoint[k], e->user,
                          hy_rpc_code_name(st->code) ? hy_rpc_code_name(st->code) : "status",
                          st->msg);
    if (!tok[0])
        return hy_err_set(err, HY_EIO,
                          "etcd %s Authenticate as user '%s': no token came (is auth enabled?)",
                          e->endpoint[k], e->user);
    pthread_mutex_lock(&e->mu);
    snprintf(e->token[k], TOKEN_MAX, "%s", tok);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

static int etcd_call(hy_etcd *e, const hy_rpc_method *m, const ProtobufCMessage *req,
                     int64_t deadline_ms, hy_rpc_cancel *cancel,
                     int (*on_msg)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                     const bool *committed, hy_err *err)
{
    char tried[400] = "";
    assert(e->n > 0 && e->n <= MAX_ENDPOINTS); /* hy_etcd_open_ex refuses other counts */
    size_t start = atomic_load(&e->cur) % e->n;
    for (size_t i = 0; i < e->n; i++) {
        size_t k = (start + i) % e->n;
        hy_rpc_status st;
        hy_err cerr = {0};
        char tok[TOKEN_MAX] = "";
        int rc = 0;
        for (int again = 0; again < 2; again++) {
            if (e->user) {
                rc = token_of(e, k, again ? tok : NULL, tok, &st, err);
                if (rc == HY_EAGAIN) break; /* UNAVAILABLE: the next endpoint */
                if (rc) return rc;
            }
            rc = hy_rpc_client_call_ex(e->cl[k], m, req, e->user ? tok : NULL, deadline_ms, cancel,
                                       on_msg, ctx, &st, &cerr);
            /* a token etcd no longer knows (it restarted, or the token's TTL
             * passed): one new one, unless the call delivered already */
            if (rc || !e->user || st.code != HY_RPC_UNAUTHENTICATED || (committed && *committed))
                break;
        }
        if (rc == HY_EAGAIN) rc = 0;
        if (rc) return hy_err_set(err, rc, "etcd %s %s: %s", e->endpoint[k], m->name, cerr.msg);
        if (st.code == HY_RPC_UNAVAILABLE && !(committed && *committed)) {
            size_t l = strlen(tried);
            snprintf(tried + l, sizeof tried - l, "%s%s (%.160s)", l ? "; " : "", e->endpoint[k],
                     st.msg);
            continue;
        }
        if (st.code != HY_RPC_OK) {
            const char *name = hy_rpc_code_name(st.code);
            return hy_err_set(err, code_to_hy(st.code), "etcd %s %s: %s: %s", e->endpoint[k],
                              m->name, name ? name : "status", st.msg);
        }
        atomic_store(&e->cur, k);
        return 0;
    }
    return hy_err_set(err, HY_EIO, "etcd %s: no endpoint answered: %s", m->name, tried);
}

/* The key with the next prefix after p[0..n): every key starting with p is
 * in [p, end). p all 0xff bytes: "\0", etcd's "every key from p on". *end is
 * malloc'd (n bytes at most, 1 at least). */
static int prefix_end(const char *p, size_t n, uint8_t **end, size_t *len)
{
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return HY_ENOMEM;
    memcpy(b, p, n);
    size_t k = n;
    while (k > 0 && b[k - 1] == 0xff) k--;
    if (k == 0) {
        b[0] = 0;
        *len = 1;
    } else {
        b[k - 1]++;
        *len = k;
    }
    *end = b;
    return 0;
}

static ProtobufCBinaryData bytes_of(const void *p, size_t n)
{
    return (ProtobufCBinaryData){.len = n, .data = (uint8_t *)p};
}

/* ---- KV ---- */

/* The on_msg of calls whose answer carries nothing we need (Put,
 * DeleteRange, LeaseRevoke): the status is the answer. */
static int ignore_response(void *ctx, const ProtobufCMessage *msg)
{
    (void)ctx, (void)msg;
    return 0;
}

int hy_etcd_put(hy_etcd *e, const char *key, const void *val, size_t n, int64_t lease, hy_err *err)
{
    if (!key || !key[0]) return hy_err_set(err, HY_EINVAL, "etcd Put: empty key");
    Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
    req.key = bytes_of(key, strlen(key));
    req.value = bytes_of(val, n);
    req.lease = lease;
    int rc = etcd_call(e, &m_put, &req.base, e->timeout_ms, NULL, ignore_response, NULL, NULL, err);
    if (rc) hy_err_prefix(err, "key %s", key);
    return rc;
}

int hy_etcd_delete(hy_etcd *e, const char *key, hy_err *err)
{
    if (!key || !key[0]) return hy_err_set(err, HY_EINVAL, "etcd DeleteRange: empty key");
    Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
    req.key = bytes_of(key, strlen(key));
    int rc = etcd_call(e, &m_delete_range, &req.base, e->timeout_ms, NULL, ignore_response, NULL,
                       NULL, err);
    if (rc) hy_err_prefix(err, "key %s", key);
    return rc;
}

typedef struct range_out {
    hy_etcd_kv *kvs;
    size_t n;
    int64_t revision;
    bool got;
} range_out;

/* A NUL-terminated copy of b. */
static char *dup_bytes(ProtobufCBinaryData b)
{
    char *s = malloc(b.len + 1);
    if (!s) return NULL;
    if (b.len) memcpy(s, b.data, b.len);
    s[b.len] = '\0';
    return s;
}

static int take_range(void *ctx, const ProtobufCMessage *msg)
{
    range_out *o = ctx;
    const Etcdserverpb__RangeResponse *r = (const Etcdserverpb__RangeResponse *)msg;
    o->got = true;
    o->revision = r->header ? r->header->revision : 0;
    if (r->n_kvs == 0) return 0;
    o->kvs = calloc(r->n_kvs, sizeof *o->kvs);
    if (!o->kvs) return HY_ENOMEM;
    for (size_t i = 0; i < r->n_kvs; i++) {
        const Etcdserverpb__KeyValue *kv = r->kvs[i];
        hy_etcd_kv *k = &o->kvs[o->n++];
        k->key = dup_bytes(kv->key);
        k->value = (uint8_t *)dup_bytes(kv->value);
        if (!k->key || !k->value) return HY_ENOMEM;
        k->value_len = kv->value.len;
        k->mod_revision = kv->mod_revision;
        k->lease = kv->lease;
    }
    return 0;
}

int hy_etcd_range_prefix(hy_etcd *e, const char *prefix, hy_etcd_kv **kvs, size_t *n,
                         int64_t *revision, hy_err *err)
{
    *kvs = NULL;
    *n = 0;
    if (!prefix || !prefix[0]) return hy_err_set(err, HY_EINVAL, "etcd Range: empty prefix");
    Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
    size_t plen = strlen(prefix);
    uint8_t *end;
    size_t elen;
    if (prefix_end(prefix, plen, &end, &elen))
        return hy_err_set(err, HY_ENOMEM, "etcd Range: out of memory");
    req.key = bytes_of(prefix, plen);
    req.range_end = bytes_of(end, elen);
    range_out o = {0};
    int rc = etcd_call(e, &m_range, &req.base, e->timeout_ms, NULL, take_range, &o, NULL, err);
    free(end);
    if (!rc && !o.got) rc = hy_err_set(err, HY_EIO, "etcd Range: no response came");
    if (rc) {
        hy_err_prefix(err, "prefix %s", prefix);
        hy_etcd_kvs_free(o.kvs, o.n);
        return rc;
    }
    *kvs = o.kvs;
    *n = o.n;
    if (revision) *revision = o.revision;
    return 0;
}

void hy_etcd_kvs_free(hy_etcd_kv *kvs, size_t n)
{
    if (!kvs) return;
    for (size_t i = 0; i < n; i++) {
        free(kvs[i].key);
        free(kvs[i].value);
    }
    free(kvs);
}

/* ---- Lease ---- */

typedef struct lease_out {
    int64_t id, ttl;
    bool got;
    char error[200];
} lease_out;

static int take_grant(void *ctx, const ProtobufCMessage *msg)
{
    lease_out *o = ctx;
    const Etcdserverpb__LeaseGrantResponse *r = (const Etcdserverpb__LeaseGrantResponse *)msg;
    o->got = true;
    o->id = r->id;
    o->ttl = r->ttl;
    snprintf(o->error, sizeof o->error, "%s", r->error ? r->error : "");
    return 0;
}

int hy_etcd_lease_grant(hy_etcd *e, int64_t ttl_s, int64_t *id, int64_t *ttl, hy_err *err)
{
    if (ttl_s <= 0)
        return hy_err_set(err, HY_EINVAL, "etcd LeaseGrant: ttl %" PRId64 " s (need > 0)", ttl_s);
    Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
    req.ttl = ttl_s;
    lease_out o = {0};
    int rc =
        etcd_call(e, &m_lease_grant, &req.base, e->timeout_ms, NULL, take_grant, &o, NULL, err);
    if (rc) return rc;
    if (!o.got || o.error[0] || o.id == 0)
        return hy_err_set(err, HY_EIO, "etcd LeaseGrant: no lease granted (%s)",
                          o.error[0] ? o.error : "empty answer");
    *id = o.id;
    if (ttl) *ttl = o.ttl;
    return 0;
}

static int take_keepalive(void *ctx, const ProtobufCMessage *msg)
{
    lease_out *o = ctx;
    const Etcdserverpb__LeaseKeepAliveResponse *r =
        (const Etcdserverpb__LeaseKeepAliveResponse *)msg;
    o->got = true;
    o->id = r->id;
    o->ttl = r->ttl;
    return 0;
}

int hy_etcd_lease_keepalive(hy_etcd *e, int64_t id, int64_t *ttl, hy_err *err)
{
    Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
    req.id = id;
    lease_out o = {0};
    int rc = etcd_call(e, &m_lease_keepalive, &req.base, e->timeout_ms, NULL, take_keepalive, &o,
                       NULL, err);
    if (rc) return rc;
    if (!o.got)
        return hy_err_set(err, HY_EIO, "etcd LeaseKeepAlive: lease %" PRIx64 ": no answer came",
                          (uint64_t)id);
    /* etcd answers a lease it does not know with TTL 0, not an error */
    if (o.ttl <= 0)
        return hy_err_set(err, HY_ENOTFOUND, "etcd LeaseKeepAlive: lease %" PRIx64 " not found",
                          (uint64_t)id);
    if (ttl) *ttl = o.ttl;
    return 0;
}

int hy_etcd_lease_revoke(hy_etcd *e, int64_t id, hy_err *err)
{
    Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
    req.id = id;
    int rc = etcd_call(e, &m_lease_revoke, &req.base, e->timeout_ms, NULL, ignore_response, NULL,
                       NULL, err);
    if (rc) hy_err_prefix(err, "lease %" PRIx64, (uint64_t)id);
    return rc;
}

/* ---- Watch ---- */

enum { W_STARTING = 0, W_RUNNING = 1, W_FAILED = 2 };

struct hy_etcd_watch {
    hy_etcd *e;
    Etcdserverpb__WatchCreateRequest create;
    Etcdserverpb__WatchRequest req;
    char *prefix;
    uint8_t *end;
    hy_etcd_watch_fn fn;
    void *ctx;
    hy_rpc_cancel *cancel;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state;         /* W_* (under mu) */
    hy_err start_err;  /* why it failed, for W_FAILED */
    char why[512];     /* why etcd ended the watch (its cancel_reason) */
    _Atomic bool stop; /* hy_etcd_watch_stop began */
    bool created;      /* etcd confirmed it (the watch thread's own) */
};

static void watch_set_state(hy_etcd_watch *w, int state)
{
    pthread_mutex_lock(&w->mu);
    /* a watch leaves W_STARTING once: running (etcd confirmed it) or failed */
    assert(w->state == W_STARTING || w->state == state);
    w->state = state;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* The code an on_msg returns to end the call because etcd ended the watch. */
#define WATCH_ENDED HY_ECANCELED

static int watch_on_msg(void *ctx, const ProtobufCMessage *msg)
{
    hy_etcd_watch *w = ctx;
    const Etcdserverpb__WatchResponse *r = (const Etcdserverpb__WatchResponse *)msg;
    if (r->canceled) {
        snprintf(w->why, sizeof w->why, "etcd ended the watch of %s: %s%s", w->prefix,
                 r->cancel_reason && r->cancel_reason[0] ? r->cancel_reason : "no reason given",
                 r->compact_revision ? " (start revision compacted)" : "");
        return WATCH_ENDED;
    }
    if (r->created) {
        w->created = true;
        watch_set_state(w, W_RUNNING);
        if (r->n_events == 0) return 0;
    }
    int64_t rev = r->header ? r->header->revision : 0;
    hy_etcd_event stackev[16];
    hy_etcd_event *ev = r->n_events <= 16 ? stackev : calloc(r->n_events, sizeof *ev);
    char **bufs = calloc(r->n_events ? r->n_events : 1, sizeof *bufs);
    if (!ev || !bufs) {
        if (ev != stackev) free(ev);
        free(bufs);
        snprintf(w->why, sizeof w->why, "watch of %s: out of memory", w->prefix);
        return HY_ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < r->n_events; i++) {
        const Etcdserverpb__Event *x = r->events[i];
        const Etcdserverpb__KeyValue *kv = x->kv;
        size_t kl = kv ? kv->key.len : 0, vl = kv ? kv->value.len : 0;
        char *b = bufs[i] = malloc(kl + vl + 2);
        if (!b) {
            snprintf(w->why, sizeof w->why, "watch of %s: out of memory", w->prefix);
            rc = HY_ENOMEM;
            break;
        }
        if (kl) memcpy(b, kv->key.data, kl);
        b[kl] = '\0';
        if (vl) memcpy(b + kl + 1, kv->value.data, vl);
        b[kl + 1 + vl] = '\0';
        ev[i] = (hy_etcd_event){
            .type =
                x->type == ETCDSERVERPB__EVENT__EVENT_TYPE__DELETE ? HY_ETCD_DELETE : HY_ETCD_PUT,
            .key = b,
            .value = (const uint8_t *)b + kl + 1,
            .value_len = vl,
            .mod_revision = kv ? kv->mod_revision : 0,
            .lease = kv ? kv->lease : 0,
        };
    }
    if (!rc && !atomic_load(&w->stop)) w->fn(w->ctx, true, ev, r->n_events, rev, NULL);
    for (size_t i = 0; i < r->n_events; i++) free(bufs[i]);
    free(bufs);
    if (ev != stackev) free(ev);
    return rc;
}

static void *watch_main(void *arg)
{
    hy_etcd_watch *w = arg;
    hy_err err = {0};
    /* No deadline: the call lasts until it is cancelled or breaks. */
    int rc =
        etcd_call(w->e, &m_watch, &w->req.base, 0, w->cancel, watch_on_msg, w, &w->created, &err);
    pthread_mutex_lock(&w->mu);
    bool was_running = w->state == W_RUNNING;
    pthread_mutex_unlock(&w->mu);
    if (!was_running) {
        /* refused, or no endpoint answered, before etcd confirmed it */
        if (!rc)
            hy_err_set(&err, HY_EIO,
                       "etcd Watch of %s: the call ended before etcd "
                       "confirmed the watch",
                       w->prefix);
        if (w->why[0]) hy_err_set(&err, HY_EINVAL, "%s", w->why);
        w->start_err = err;
        watch_set_state(w, W_FAILED);
        return NULL;
    }
    if (atomic_load(&w->stop)) return NULL;
    char why[600];
    if (w->why[0])
        snprintf(why, sizeof why, "%s", w->why);
    else if (rc)
        snprintf(why, sizeof why, "%s", err.msg);
    else
        snprintf(why, sizeof why, "etcd Watch of %s: the stream ended", w->prefix);
    w->fn(w->ctx, false, NULL, 0, 0, why);
    return NULL;
}

static void watch_free(hy_etcd_watch *w)
{
    hy_rpc_cancel_free(w->cancel);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->prefix);
    free(w->end);
    free(w);
}

int hy_etcd_watch_start(hy_etcd *e, const char *prefix, int64_t start_revision, hy_etcd_watch_fn fn,
                        void *ctx, hy_etcd_watch **out, hy_err *err)
{
    *out = NULL;
    if (!prefix || !prefix[0]) return hy_err_set(err, HY_EINVAL, "etcd Watch: empty prefix");
    hy_etcd_watch *w = calloc(1, sizeof *w);
    if (!w) return hy_err_set(err, HY_ENOMEM, "etcd Watch: out of memory");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->e = e;
    w->fn = fn;
    w->ctx = ctx;
    size_t plen = strlen(prefix), elen = 0;
    w->prefix = strdup(prefix);
    if (!w->prefix || prefix_end(prefix, plen, &w->end, &elen) ||
        hy_rpc_cancel_new(&w->cancel, NULL)) {
        watch_free(w);
        return hy_err_set(err, HY_ENOMEM, "etcd Watch: out of memory");
    }
    etcdserverpb__watch_create_request__init(&w->create);
    w->create.key = bytes_of(w->prefix, plen);
    w->create.range_end = bytes_of(w->end, elen);
    w->create.start_revision = start_revision;
    etcdserverpb__watch_request__init(&w->req);
    w->req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    w->req.create_request = &w->create;
    if (pthread_create(&w->thread, NULL, watch_main, w)) {
        watch_free(w);
        return hy_err_set(err, HY_EIO, "etcd Watch of %s: cannot start its thread", prefix);
    }
    /* Wait for etcd's "created", at most the client's timeout. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += e->timeout_ms / 1000;
    until.tv_nsec += (e->timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&w->mu);
    int wrc = 0;
    while (w->state == W_STARTING && wrc != ETIMEDOUT)
        wrc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    int state = w->state;
    pthread_mutex_unlock(&w->mu);
    if (state == W_RUNNING) {
        *out = w;
        return 0;
    }
    atomic_store(&w->stop, true);
    hy_rpc_cancel_fire(w->cancel);
    pthread_join(w->thread, NULL);
    int rc;
    if (state == W_FAILED && w->start_err.code) {
        rc = w->start_err.code;
        if (err) *err = w->start_err;
    } else {
        rc = hy_err_set(err, HY_EAGAIN, "etcd Watch of %s: not confirmed within %" PRId64 " ms",
                        prefix, e->timeout_ms);
    }
    watch_free(w);
    return rc;
}

void hy_etcd_watch_stop(hy_etcd_watch *w)
{
    if (!w) return;
    atomic_store(&w->stop, true);
    hy_rpc_cancel_fire(w->cancel);
    pthread_join(w->thread, NULL);
    watch_free(w);
}
