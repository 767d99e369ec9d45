/*
 * Cluster mode: the member's view of the live set, calls to peers, and the
 * background queue that puts built entries to their owners
 * (cluster_internal.h).
 */
#include "cluster_internal.h"
#include "hy_cluster.h"
#include "hypic_client.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PUT_QUEUE_BYTES (512ull << 20) /* entries waiting for their owners, at most */
#define PUT_TRIES       10             /* then the entry is given up (puts_failed) */
#define PUT_BACKOFF_MAX 3.0            /* seconds between tries, at most */
#define PEER_CHUNK      (1u << 20)     /* bytes per PutEntry chunk */
#define PEER_SESSIONS   4              /* transport sessions to a member per tenant, at most */
#define TP_RETRY_S      5.0            /* a session that failed to open: streams this long */

/* An entry on its way to its owners. */
typedef struct put_item {
    char model[HY_CFG_NAME_MAX], tenant[HY_TENANT_MAX];
    hy_key key;
    char tags[HY_MAX_TAGS][HY_TAG_MAX];
    size_t ntags;
    uint8_t *buf;
    size_t len;
    char done[HY_OWNERS_MAX][HY_MEMBER_ID_MAX]; /* owners that have it */
    size_t ndone;
    int tries;
    double next_s; /* hy_now_s: not before */
    struct put_item *next;
} put_item;

typedef struct svc_cluster {
    hy_svc *s;
    char self[HY_MEMBER_ID_MAX];
    char advertise[HY_CFG_ADDR_MAX];
    bool etcd;
    hy_membership *ms;
    pthread_mutex_t mu; /* view, changes, the queue */
    svc_view *view;
    uint64_t view_changes;
    double view_since_s;
    pthread_cond_t cv;
    put_item *head, *tail;
    size_t queued, queued_bytes;
    bool stopping;
    pthread_t putter, handover;
    bool putter_started, handover_started;
    svc_view *handover_from; /* under mu: the set before changes not handed over yet */
    _Atomic uint64_t remote_hits, remote_misses, peer_errors, puts_sent, puts_failed, forwarded;
    _Atomic uint64_t via_transport; /* remote hits delivered through a transport session */
    _Atomic uint64_t handed_over;   /* entries queued for owners that gained them */
} svc_cluster;

static svc_cluster *cl_of(hy_svc *s)
{
    return s->cluster;
}

/* --- views --------------------------------------------------------------------------- */

/* A transport session to a peer, for one tenant (sessions are a tenant's):
 * GetEntry delivers an entry into its buffer over shm, TCP or RDMA — the
 * data plane's transports — instead of gRPC chunks. */
typedef struct peer_tp {
    char tenant[HY_TENANT_MAX];
    hyc *c;
    hyc_session *s;
    bool busy;
    struct peer_tp *next;
} peer_tp;

static void peer_put(svc_peer *p)
{
    if (!p) return;
    const int refs = atomic_fetch_sub(&p->refs, 1);
    assert(refs >= 1 && "a peer is put once for each view that holds it");
    if (refs != 1) return;
    while (p->tps) {
        peer_tp *t = p->tps;
        p->tps = t->next;
        hyc_session_close(t->s);
        hyc_close(t->c);
        free(t);
    }
    pthread_mutex_destroy(&p->tp_mu);
    hy_rpc_client_close(p->cl);
    free(p);
}

void svc_view_put(svc_view *v)
{
    if (!v) return;
    const int refs = atomic_fetch_sub(&v->refs, 1);
    assert(refs >= 1 && "a view is put once for each get");
    if (refs != 1) return;
    for (size_t i = 0; i < v->n; i++) peer_put(v->peers[i]);
    free(v->peers);
    free(v->ids);
    free(v);
}

svc_view *svc_view_get(hy_svc *s)
{
    svc_cluster *c = cl_of(s);
    if (!c) return NULL;
    pthread_mutex_lock(&c->mu);
    svc_view *v = c->view;
    if (v) atomic_fetch_add(&v->refs, 1);
    pthread_mutex_unlock(&c->mu);
    return v;
}

static int cmp_peer(const void *a, const void *b)
{
    return strcmp((*(svc_peer *const *)a)->id, (*(svc_peer *const *)b)->id);
}

/* Replaces the view with members ids[i] at addrs[i]: a peer whose id and
 * address are unchanged keeps its channel. */
static void view_set(svc_cluster *c, const char *const *ids, const char *const *addrs, size_t n)
{
    svc_view *v = calloc(1, sizeof *v);
    if (v) {
        v->peers = calloc(n ? n : 1, sizeof *v->peers);
        v->ids = calloc(n ? n : 1, sizeof *v->ids);
    }
    if (!v || !v->peers || !v->ids) {
        hy_log(HY_LOG_ERROR, "cluster: out of memory for a view of %zu members: the old one stays",
               n);
        if (v) free(v->peers), free(v->ids), free(v);
        return;
    }
    atomic_init(&v->refs, 1);
    pthread_mutex_lock(&c->mu);
    svc_view *old = c->view;
    for (size_t i = 0; i < n; i++) {
        svc_peer *p = NULL;
        for (size_t j = 0; old && j < old->n && !p; j++)
            if (!strcmp(old->peers[j]->id, ids[i]) && !strcmp(old->peers[j]->address, addrs[i]))
                p = old->peers[j];
        if (p) {
            atomic_fetch_add(&p->refs, 1);
        } else if ((p = calloc(1, sizeof *p))) {
            snprintf(p->id, sizeof p->id, "%s", ids[i]);
            snprintf(p->address, sizeof p->address, "%s", addrs[i]);
            p->self = !strcmp(ids[i], c->self);
            atomic_init(&p->refs, 1);
            pthread_mutex_init(&p->tp_mu, NULL);
            hy_err e = {0};
            if (!p->self && svc_peer_open(c->s, addrs[i], &p->cl, &e)) {
                hy_log(HY_LOG_WARN, "cluster: member %s at %s: %s (taken as absent)", ids[i],
                       addrs[i], e.msg);
                pthread_mutex_destroy(&p->tp_mu);
                free(p);
                p = NULL;
            }
        }
        if (p) v->peers[v->n++] = p;
    }
    qsort(v->peers, v->n, sizeof *v->peers, cmp_peer);
    for (size_t i = 0; i < v->n; i++) v->ids[i] = v->peers[i]->id;
    for (size_t i = 1; i < v->n; i++) assert(strcmp(v->ids[i - 1], v->ids[i]) <= 0); /* by id */
    c->view = v;
    c->view_changes++;
    c->view_since_s = hy_now_s();
    /* the hand-over compares with the set before the first change it has not
     * handled yet (changes in a burst: one pass) */
    if (old && c->handover_started && !c->handover_from) {
        c->handover_from = old;
        old = NULL; /* its reference passes to the hand-over */
    }
    pthread_cond_broadcast(&c->cv); /* queued puts: their owners may have changed */
    pthread_mutex_unlock(&c->mu);
    char list[512] = "";
    size_t at = 0;
    for (size_t i = 0; i < v->n && at < sizeof list - 1; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? " " : "", v->ids[i]);
    hy_log(HY_LOG_INFO, "cluster: %zu member(s): %s", v->n, list);
    svc_view_put(old); /* NULL when the hand-over took it */
}

/* A registration's seal: HMAC-SHA-256 under cluster.secret over its id and
 * address, so that whoever can write the membership prefix but has no
 * secret cannot join the members' views (and receive their calls). */
static void registration_mac(const hy_svc *s, const char *id, const char *address, char hex[65])
{
    char msg[400];
    const int n = snprintf(msg, sizeof msg, "hypic registration v1:%s\n%s", id, address);
    uint8_t mac[32];
    hy_hmac_sha256(s->cfg.cluster_secret, strlen(s->cfg.cluster_secret), msg, (size_t)n, mac);
    hy_hex(mac, 32, hex);
}

/* Whether member m's registration carries the seal this member expects
 * (always, without a secret). */
static bool registration_sealed(const hy_svc *s, const hy_member *m)
{
    if (!s->cfg.cluster_secret[0]) return true;
    char want[65];
    registration_mac(s, m->id, m->address, want);
    cJSON *j = m->info ? cJSON_Parse(m->info) : NULL;
    const cJSON *mac = j ? cJSON_GetObjectItemCaseSensitive(j, "mac") : NULL;
    unsigned char d = !(cJSON_IsString(mac) && strlen(mac->valuestring) == 64);
    for (size_t i = 0; !d && i < 64; i++) d |= (unsigned char)(want[i] ^ mac->valuestring[i]);
    cJSON_Delete(j);
    return d == 0;
}

static void on_members(void *ctx, const hy_member *m, size_t n)
{
    const hy_svc *s = ((svc_cluster *)ctx)->s;
    const char **ids = calloc(n ? n : 1, sizeof *ids), **addrs = calloc(n ? n : 1, sizeof *addrs);
    if (!ids || !addrs) {
        free(ids);
        free(addrs);
        hy_log(HY_LOG_ERROR, "cluster: out of memory for a view of %zu members", n);
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!registration_sealed(s, &m[i])) {
            hy_log(HY_LOG_WARN,
                   "cluster: %s at %s is registered without this cluster's seal "
                   "(cluster.secret): not a member",
                   m[i].id, m[i].address);
            continue;
        }
        ids[k] = m[i].id, addrs[k] = m[i].address, k++;
    }
    n = k;
    view_set(ctx, ids, addrs, n);
    free(ids);
    free(addrs);
}

static uint32_t replicas_of(hy_svc *s, const char *tenant)
{
    uint32_t r = s->cfg.cluster_replicas;
    for (int i = 0; i < s->cfg.ntenants; i++)
        if (!strcmp(s->cfg.tenants[i].name, tenant) && s->cfg.tenants[i].replicas)
            r = s->cfg.tenants[i].replicas;
    return r;
}

size_t svc_view_owners(hy_svc *s, const svc_view *v, const char *tenant, const hy_key *k,
                       svc_peer **out, bool *self)
{
    size_t idx[HY_OWNERS_MAX];
    const size_t n = hy_rendezvous_owners(k->b, v->ids, v->n, replicas_of(s, tenant), idx);
    *self = false;
    for (size_t i = 0; i < n; i++) {
        out[i] = v->peers[idx[i]];
        *self |= out[i]->self;
    }
    return n;
}

/* The credential calls to peers carry for tenant: the member credential
 * (svc_member_token), never the tenant's own token; NULL without tokens. */
static const char *token_of(hy_svc *s, const char *tenant, char *buf, size_t cap)
{
    return svc_member_token(s, tenant, buf, cap);
}

/* --- calls to peers ------------------------------------------------------------------ */

/* A free session to p for tenant, opened when there are fewer than
 * PEER_SESSIONS (NULL: none free, or sessions are off or failing: the
 * caller streams). Give it back with tp_release. */
static peer_tp *tp_acquire(hy_svc *s, svc_peer *p, const char *tenant, const char *token)
{
    /* the data plane has no encryption of its own: with TLS, entries come as
     * gRPC chunks over the TLS channel */
    if (!s->cfg.cluster_transport_bytes || s->peer_ca_pem) return NULL;
    pthread_mutex_lock(&p->tp_mu);
    int n = 0;
    peer_tp *t = NULL;
    for (peer_tp *x = p->tps; x && !t; x = x->next)
        if (!strcmp(x->tenant, tenant)) {
            n++;
            if (!x->busy) t = x;
        }
    if (t || n >= PEER_SESSIONS || hy_now_s() < p->tp_off_until) {
        if (t) t->busy = true;
        pthread_mutex_unlock(&p->tp_mu);
        return t;
    }
    pthread_mutex_unlock(&p->tp_mu);
    /* a new one: OpenTransport offers RDMA (with a device), shm (same host), TCP */
    if (!(t = calloc(1, sizeof *t))) return NULL;
    snprintf(t->tenant, sizeof t->tenant, "%s", tenant);
    hyc_options o = {.target = p->address,
                     .token = token,
                     .deadline_ms = s->cfg.cluster_peer_timeout_ms,
                     .max_message = s->cfg.max_message};
    hyc_status st;
    if (hyc_open(&o, &t->c, &st) ||
        hyc_session_open(t->c, NULL, s->cfg.cluster_transport_bytes, &t->s, &st)) {
        hy_log(HY_LOG_WARN,
               "cluster: no transport session to %s (%s): %s; entries come over gRPC for %.0f s",
               p->id, p->address, st.msg, TP_RETRY_S);
        hyc_close(t->c);
        free(t);
        pthread_mutex_lock(&p->tp_mu);
        p->tp_off_until = hy_now_s() + TP_RETRY_S;
        pthread_mutex_unlock(&p->tp_mu);
        return NULL;
    }
    hy_log(HY_LOG_INFO, "cluster: a %s session to %s for tenant '%s' (%llu bytes)",
           hyc_session_kind(t->s), p->id, tenant,
           (unsigned long long)s->cfg.cluster_transport_bytes);
    t->busy = true;
    pthread_mutex_lock(&p->tp_mu);
    t->next = p->tps;
    p->tps = t;
    pthread_mutex_unlock(&p->tp_mu);
    return t;
}

/* Gives t back; broken: the session failed (the peer restarted, ...), so it
 * is closed and dropped. */
static void tp_release(svc_peer *p, peer_tp *t, bool broken)
{
    pthread_mutex_lock(&p->tp_mu);
    if (broken)
        for (peer_tp **x = &p->tps; *x; x = &(*x)->next)
            if (*x == t) {
                *x = t->next;
                break;
            }
    assert(t->busy && "a session given back was taken");
    t->busy = false;
    pthread_mutex_unlock(&p->tp_mu);
    if (broken) {
        hyc_session_close(t->s);
        hyc_close(t->c);
        free(t);
    }
}

/* GetEntry from p into a transport session: HY_OK with the bytes copied out
 * (64-byte aligned), HY_ENOTFOUND when p does not have it, HY_EAGAIN when
 * the session could not be used (the caller streams). */
static int fetch_by_session(hy_svc *s, svc_peer *p, Hypic__V1__GetEntryRequest *q,
                            const char *token, void **buf, size_t *len)
{
    peer_tp *t = tp_acquire(s, p, q->tenant, token);
    if (!t) return HY_EAGAIN;
    Hypic__V1__EntryMeta *meta = NULL;
    hyc_status st;
    int rc = hyc_get_entry_into(t->c, t->s, 0, q, &meta, &st);
    q->transport_session = 0; /* the request may be streamed next */
    q->offset = 0;
    if (rc == HYC_OK && meta->bytes <= hyc_session_capacity(t->s)) {
        void *al = NULL;
        if (posix_memalign(&al, 64, meta->bytes ? meta->bytes : 1) == 0) {
            memcpy(al, hyc_session_buffer(t->s), meta->bytes);
            *buf = al;
            *len = meta->bytes;
        }
        hyc_free(meta);
        tp_release(p, t, false);
        return al ? HY_OK : HY_ENOMEM;
    }
    hyc_free(meta);
    /* NOT_FOUND: a miss; an entry larger than the buffer: streamed; a session
     * the peer no longer knows, or a transfer that failed: dropped */
    tp_release(p, t,
               rc != HYC_NOT_FOUND && rc != HYC_RESOURCE_EXHAUSTED && rc != HYC_OK &&
                   rc != HYC_INVALID_ARGUMENT);
    return rc == HYC_NOT_FOUND ? HY_ENOTFOUND : HY_EAGAIN;
}

/* One owner's GetEntry stream, handed on chunk by chunk (svc_cluster_stream). */
typedef struct stream_ctx {
    svc_stream_fn fn;
    void *ctx;
    uint64_t want, next, max;
    bool started;
    int rc; /* the receiver's, or HY_EFORMAT for a stream out of order */
    hy_err err;
} stream_ctx;

static int on_stream_chunk(void *ctx, const ProtobufCMessage *msg)
{
    stream_ctx *x = ctx;
    const Hypic__V1__EntryChunk *ch = (const void *)msg;
    if (!x->started) {
        if (!ch->meta)
            x->rc = hy_err_set(&x->err, HY_EFORMAT, "the first chunk carries no metadata");
        else if (ch->meta->bytes == 0 || ch->meta->bytes > x->max)
            x->rc = hy_err_set(&x->err, HY_EFORMAT, "meta.bytes = %llu is outside 1..%llu",
                               (unsigned long long)ch->meta->bytes, (unsigned long long)x->max);
        x->want = ch->meta ? ch->meta->bytes : 0;
        x->started = true;
    } else if (ch->meta) {
        x->rc = hy_err_set(&x->err, HY_EFORMAT, "a chunk after the first carries metadata");
    }
    if (!x->rc && ch->placement_case == HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET &&
        ch->offset != x->next)
        x->rc = hy_err_set(&x->err, HY_EFORMAT, "a chunk at %llu where %llu was next",
                           (unsigned long long)ch->offset, (unsigned long long)x->next);
    if (!x->rc && ch->data.len > x->want - x->next)
        x->rc = hy_err_set(&x->err, HY_EFORMAT, "the chunks hold more than meta.bytes = %llu",
                           (unsigned long long)x->want);
    if (!x->rc && (ch->data.len || x->next == 0))
        x->rc = x->fn(x->ctx, x->want, x->next, ch->data.data, ch->data.len, &x->err);
    x->next += ch->data.len;
    return x->rc;
}

/* q (GetEntry, local_only) from peer p, its chunks handed to fn as they
 * come; counted in the cluster's statistics. As svc_cluster_stream. */
static int stream_peer(hy_svc *s, svc_peer *p, const Hypic__V1__GetEntryRequest *q,
                       const char *token, svc_stream_fn fn, void *ctx, hy_err *err)
{
    svc_cluster *c = cl_of(s);
    stream_ctx x = {.fn = fn, .ctx = ctx, .max = s->cfg.max_entry_bytes};
    hy_rpc_status st;
    hy_err e = {0};
    int rc = hy_rpc_client_call(p->cl, hy_rpc_method_named("GetEntry"), &q->base, token,
                                s->cfg.cluster_peer_timeout_ms, on_stream_chunk, &x, &st, &e);
    if (x.rc) { /* the receiver refused, or the stream was not an entry's */
        if (err) {
            *err = x.err;
            err->code = x.rc;
        }
        hy_err_prefix(err, "GetEntry from %s", p->id);
        atomic_fetch_add(&c->peer_errors, 1);
        return x.rc;
    }
    if (!rc && st.code == HY_RPC_OK && x.started && x.next == x.want) {
        atomic_fetch_add(&c->remote_hits, 1);
        return HY_OK;
    }
    if (!rc && st.code == HY_RPC_NOT_FOUND) {
        atomic_fetch_add(&c->remote_misses, 1);
        return hy_err_set(err, HY_ENOTFOUND, "GetEntry from %s: not found", p->id);
    }
    atomic_fetch_add(&c->peer_errors, 1);
    if (rc) return hy_err_set(err, HY_EIO, "GetEntry from %s: %s", p->id, e.msg);
    if (st.code != HY_RPC_OK)
        return hy_err_set(err, HY_EIO, "GetEntry from %s: %s: %s", p->id, hy_rpc_code_name(st.code),
                          st.msg);
    return hy_err_set(err, HY_EIO, "GetEntry from %s: the stream ended after %llu of %llu bytes",
                      p->id, (unsigned long long)x.next, (unsigned long long)x.want);
}

/* A whole entry from a stream: into one 64-byte aligned buffer (an entry is
 * read in place, hy_entry_view). */
typedef struct whole_ctx {
    uint8_t *buf;
    size_t len;
} whole_ctx;

static int on_whole(void *ctx, uint64_t total, uint64_t at, const void *data, size_t len,
                    hy_err *err)
{
    whole_ctx *w = ctx;
    void *b = NULL;
    if (!w->buf && posix_memalign(&b, 64, total ? (size_t)total : 1) != 0)
        return hy_err_set(err, HY_ENOMEM, "out of memory for %llu bytes",
                          (unsigned long long)total);
    if (!w->buf) w->buf = b, w->len = (size_t)total;
    memcpy(w->buf + at, data, len);
    return HY_OK;
}

int svc_cluster_stream(hy_svc *s, const char *member, svc_model *sm, const char *tenant,
                       const hy_key *k, svc_stream_fn fn, void *ctx, hy_err *err)
{
    svc_view *v = svc_view_get(s);
    svc_peer *p = NULL;
    for (size_t i = 0; v && i < v->n && !p; i++)
        if (!strcmp(v->peers[i]->id, member) && !v->peers[i]->self) p = v->peers[i];
    if (!p) {
        svc_view_put(v);
        return hy_err_set(err, HY_ENOTFOUND, "member %s is not in the cluster's view", member);
    }
    Hypic__V1__GetEntryRequest q = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
    q.model = sm->name;
    q.tenant = (char *)tenant;
    q.key = (ProtobufCBinaryData){HY_KEY_BYTES, (uint8_t *)k->b};
    q.local_only = true;
    char tok[HY_CFG_TOKEN_MAX];
    const int rc = stream_peer(s, p, &q, token_of(s, tenant, tok, sizeof tok), fn, ctx, err);
    svc_view_put(v);
    return rc;
}

int svc_cluster_fetch(hy_svc *s, svc_view *v, svc_model *sm, const char *tenant, const hy_key *k,
                      void **buf, size_t *len, char member[HY_MEMBER_ID_MAX], hy_err *err)
{
    svc_cluster *c = cl_of(s);
    svc_peer *own[HY_OWNERS_MAX];
    bool self;
    const size_t n = svc_view_owners(s, v, tenant, k, own, &self);
    char tok[HY_CFG_TOKEN_MAX];
    const char *token = token_of(s, tenant, tok, sizeof tok);
    for (size_t i = 0; i < n; i++) {
        if (own[i]->self) continue;
        Hypic__V1__GetEntryRequest q = HYPIC__V1__GET_ENTRY_REQUEST__INIT;
        q.model = sm->name;
        q.tenant = (char *)tenant;
        q.key = (ProtobufCBinaryData){HY_KEY_BYTES, (uint8_t *)k->b};
        q.local_only = true;
        const int trc = fetch_by_session(s, own[i], &q, token, buf, len);
        if (trc == HY_OK) {
            snprintf(member, HY_MEMBER_ID_MAX, "%s", own[i]->id);
            atomic_fetch_add(&c->remote_hits, 1);
            atomic_fetch_add(&c->via_transport, 1);
            return HY_OK;
        }
        if (trc == HY_ENOMEM) return hy_err_set(err, HY_ENOMEM, "out of memory");
        if (trc == HY_ENOTFOUND) {
            atomic_fetch_add(&c->remote_misses, 1);
            continue;
        }
        whole_ctx w = {0};
        hy_err e = {0};
        const int rc = stream_peer(s, own[i], &q, token, on_whole, &w, &e);
        if (rc == HY_OK) {
            *buf = w.buf, *len = w.len;
            snprintf(member, HY_MEMBER_ID_MAX, "%s", own[i]->id);
            return HY_OK;
        }
        free(w.buf);
        if (rc == HY_ENOMEM) return hy_err_set(err, HY_ENOMEM, "out of memory");
        if (rc != HY_ENOTFOUND)
            hy_log(HY_LOG_DEBUG, "cluster: GetEntry on %s (%s): %s", own[i]->id, own[i]->address,
                   e.msg);
    }
    return hy_err_set(err, HY_ENOTFOUND, "no owner has it");
}

typedef struct lookup_ctx {
    Hypic__V1__SegmentStatus *st;
    size_t n;
} lookup_ctx;

static int on_lookup(void *ctx, const ProtobufCMessage *msg)
{
    lookup_ctx *l = ctx;
    const Hypic__V1__LookupResponse *r = (const void *)msg;
    for (size_t i = 0; i < r->n_segments && i < l->n; i++) {
        l->st[i].hit = r->segments[i]->hit;
        l->st[i].tier = r->segments[i]->tier;
        l->st[i].bytes = r->segments[i]->bytes;
        if (r->segments[i]->hit) l->st[i].tokens = r->segments[i]->tokens;
    }
    return 0;
}

int svc_cluster_lookup(hy_svc *s, svc_peer *p, const char *model, const char *tenant,
                       const hy_key *keys, size_t n, Hypic__V1__SegmentStatus *st, hy_err *err)
{
    svc_cluster *c = cl_of(s);
    Hypic__V1__Segment *sg = calloc(n, sizeof *sg);
    Hypic__V1__Segment **sp = calloc(n, sizeof *sp);
    if (!sg || !sp) {
        free(sg);
        free(sp);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        Hypic__V1__Segment init = HYPIC__V1__SEGMENT__INIT;
        sg[i] = init;
        sg[i].ref_case = HYPIC__V1__SEGMENT__REF_KEY;
        sg[i].key = (ProtobufCBinaryData){HY_KEY_BYTES, (uint8_t *)keys[i].b};
        sp[i] = &sg[i];
    }
    Hypic__V1__LookupRequest q = HYPIC__V1__LOOKUP_REQUEST__INIT;
    q.model = (char *)model;
    q.tenant = (char *)tenant;
    q.n_segments = n;
    q.segments = sp;
    q.local_only = true;
    char tok[HY_CFG_TOKEN_MAX];
    lookup_ctx l = {st, n};
    hy_rpc_status rs;
    int rc = hy_rpc_client_call(p->cl, hy_rpc_method_named("Lookup"), &q.base,
                                token_of(s, tenant, tok, sizeof tok),
                                s->cfg.cluster_peer_timeout_ms, on_lookup, &l, &rs, err);
    free(sg);
    free(sp);
    if (!rc && rs.code != HY_RPC_OK)
        rc = hy_err_set(err, HY_EIO, "Lookup on %s: %s: %s", p->id, hy_rpc_code_name(rs.code),
                        rs.msg);
    if (rc) atomic_fetch_add(&c->peer_errors, 1);
    return rc;
}

static int on_invalidated(void *ctx, const ProtobufCMessage *msg)
{
    *(uint64_t *)ctx += ((const Hypic__V1__InvalidateResponse *)msg)->removed;
    return 0;
}

void svc_cluster_fanout(hy_svc *s, const char *tenant, const char *method,
                        const ProtobufCMessage *q, hy_rpc_code benign,
                        int (*on_reply)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                        char (*unreachable)[HY_MEMBER_ID_MAX], size_t cap, size_t *nun)
{
    *nun = 0;
    svc_view *v = svc_view_get(s);
    if (!v) return;
    svc_cluster_count_forward(s);
    char tok[HY_CFG_TOKEN_MAX];
    const char *token = token_of(s, tenant, tok, sizeof tok);
    for (size_t i = 0; i < v->n; i++) {
        if (v->peers[i]->self) continue;
        hy_rpc_status st;
        hy_err e = {0};
        int rc = hy_rpc_client_call(v->peers[i]->cl, hy_rpc_method_named(method), q, token,
                                    s->cfg.cluster_peer_timeout_ms, on_reply, ctx, &st, &e);
        if (!rc && (st.code == HY_RPC_OK || (benign != HY_RPC_OK && st.code == (int)benign)))
            continue;
        atomic_fetch_add(&cl_of(s)->peer_errors, 1);
        if (*nun < cap) snprintf(unreachable[(*nun)++], HY_MEMBER_ID_MAX, "%s", v->peers[i]->id);
    }
    svc_view_put(v);
}

void svc_cluster_invalidate(hy_svc *s, const char *tenant, const Hypic__V1__InvalidateRequest *q,
                            uint64_t *removed, char (*unreachable)[HY_MEMBER_ID_MAX], size_t cap,
                            size_t *nun)
{
    Hypic__V1__InvalidateRequest fq = *q;
    fq.local_only = true;
    fq.tenant = (char *)tenant;
    svc_cluster_fanout(s, tenant, "Invalidate", &fq.base, HY_RPC_OK, on_invalidated, removed,
                       unreachable, cap, nun);
}

/* PutEntry's stream: the meta with the first piece, local_only set. */
typedef struct put_stream {
    const put_item *it;
    Hypic__V1__EntryMeta meta;
    char *tags[HY_MAX_TAGS];
    Hypic__V1__EntryChunk ch;
    size_t off, chunk;
    bool first;
} put_stream;

static int put_next(void *ctx, const ProtobufCMessage **msg, hy_err *err)
{
    (void)err;
    put_stream *p = ctx;
    if (p->off >= p->it->len) {
        *msg = NULL;
        return 0;
    }
    Hypic__V1__EntryChunk init = HYPIC__V1__ENTRY_CHUNK__INIT;
    p->ch = init;
    if (p->first) {
        p->ch.meta = &p->meta;
        p->ch.local_only = true;
        p->first = false;
    }
    const size_t n = HY_MIN(p->chunk, p->it->len - p->off);
    p->ch.data = (ProtobufCBinaryData){n, p->it->buf + p->off};
    p->off += n;
    *msg = &p->ch.base;
    return 0;
}

static int put_one(hy_svc *s, svc_peer *p, const put_item *it, hy_err *err)
{
    put_stream ps = {.it = it,
                     .chunk = HY_MIN((size_t)PEER_CHUNK, (size_t)s->cfg.max_message / 2),
                     .first = true};
    Hypic__V1__EntryMeta init = HYPIC__V1__ENTRY_META__INIT;
    ps.meta = init;
    ps.meta.model = (char *)it->model;
    ps.meta.tenant = (char *)it->tenant;
    ps.meta.key = (ProtobufCBinaryData){HY_KEY_BYTES, (uint8_t *)it->key.b};
    ps.meta.bytes = it->len;
    for (size_t i = 0; i < it->ntags; i++) ps.tags[i] = (char *)it->tags[i];
    ps.meta.n_tags = it->ntags;
    ps.meta.tags = ps.tags;
    char tok[HY_CFG_TOKEN_MAX];
    hy_rpc_status st;
    int rc = hy_rpc_client_call_stream(
        p->cl, hy_rpc_method_named("PutEntry"), token_of(s, it->tenant, tok, sizeof tok),
        s->cfg.cluster_peer_timeout_ms * 4ll, put_next, &ps, NULL, NULL, &st, err);
    if (!rc && st.code != HY_RPC_OK)
        rc = hy_err_set(err, HY_EIO, "PutEntry on %s (%s): %s: %s", p->id, p->address,
                        hy_rpc_code_name(st.code), st.msg);
    return rc;
}

/* --- the put queue ------------------------------------------------------------------- */

static bool item_done_by(const put_item *it, const char *id)
{
    for (size_t i = 0; i < it->ndone; i++)
        if (!strcmp(it->done[i], id)) return true;
    return false;
}

/* One try: every owner (other than this member) that does not have it yet.
 * True when none is left. */
static bool item_try(hy_svc *s, put_item *it)
{
    svc_cluster *c = cl_of(s);
    svc_view *v = svc_view_get(s);
    if (!v) return true;
    svc_peer *own[HY_OWNERS_MAX];
    bool self;
    const size_t n = svc_view_owners(s, v, it->tenant, &it->key, own, &self);
    bool left = false;
    for (size_t i = 0; i < n; i++) {
        if (own[i]->self || item_done_by(it, own[i]->id)) continue;
        hy_err e = {0};
        if (put_one(s, own[i], it, &e) == HY_OK) {
            if (it->ndone < HY_OWNERS_MAX)
                snprintf(it->done[it->ndone++], HY_MEMBER_ID_MAX, "%s", own[i]->id);
            atomic_fetch_add(&c->puts_sent, 1);
        } else {
            atomic_fetch_add(&c->peer_errors, 1);
            if (it->tries == 0 || it->tries + 1 == PUT_TRIES)
                hy_log(HY_LOG_WARN, "cluster: %s (try %d of %d)", e.msg, it->tries + 1, PUT_TRIES);
            left = true;
        }
    }
    svc_view_put(v);
    return !left;
}

static void item_free(put_item *it)
{
    if (!it) return;
    free(it->buf);
    free(it);
}

static void *putter_main(void *arg)
{
    hy_svc *s = arg;
    svc_cluster *c = cl_of(s);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        if (!c->head && c->stopping) break;
        if (!c->head) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        put_item *it = c->head;
        const double now = hy_now_s();
        if (it->next_s > now && !c->stopping) { /* the head waits: the rest were queued later */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            const long ns = ts.tv_nsec + (long)((it->next_s - now) * 1e9);
            ts.tv_sec += ns / 1000000000L;
            ts.tv_nsec = ns % 1000000000L;
            pthread_cond_timedwait(&c->cv, &c->mu, &ts);
            continue;
        }
        c->head = it->next;
        if (!c->head) c->tail = NULL;
        pthread_mutex_unlock(&c->mu);
        const bool done = item_try(s, it);
        pthread_mutex_lock(&c->mu);
        if (done || ++it->tries >= PUT_TRIES || c->stopping) {
            if (!done) {
                atomic_fetch_add(&c->puts_failed, 1);
                char hex[65];
                hy_key_hex(&it->key, hex);
                hy_log(HY_LOG_WARN,
                       "cluster: entry %.16s… not put to all its owners after %d tries%s", hex,
                       it->tries, c->stopping ? " (stopping)" : "");
            }
            assert(c->queued > 0 && c->queued_bytes >= it->len); /* counted when queued */
            c->queued--;
            c->queued_bytes -= it->len;
            item_free(it);
        } else { /* to the back, later */
            double wait = 0.2;
            for (int i = 1; i < it->tries && wait < PUT_BACKOFF_MAX; i++) wait *= 2;
            it->next_s = hy_now_s() + HY_MIN(wait, PUT_BACKOFF_MAX);
            it->next = NULL;
            if (c->tail)
                c->tail->next = it;
            else
                c->head = it;
            c->tail = it;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* A queue item holding a copy of buf[0..len). NULL when out of memory. */
static put_item *item_new(const char *model, const char *tenant, const hy_key *k,
                          const char *const *tags, size_t ntags, const void *buf, size_t len)
{
    put_item *it = calloc(1, sizeof *it);
    if (!it || !(it->buf = malloc(len ? len : 1))) {
        free(it);
        return NULL;
    }
    snprintf(it->model, sizeof it->model, "%s", model);
    snprintf(it->tenant, sizeof it->tenant, "%s", tenant);
    it->key = *k;
    for (size_t i = 0; i < ntags && i < HY_MAX_TAGS; i++)
        snprintf(it->tags[it->ntags++], HY_TAG_MAX, "%s", tags[i]);
    memcpy(it->buf, buf, len);
    it->len = len;
    return it;
}

/* Queues it for the put thread (which then owns it); a full queue or a
 * stopping cluster drops it (counted as failed). */
static void item_queue(svc_cluster *c, put_item *it)
{
    pthread_mutex_lock(&c->mu);
    if (c->stopping || c->queued_bytes + it->len > PUT_QUEUE_BYTES) {
        pthread_mutex_unlock(&c->mu);
        atomic_fetch_add(&c->puts_failed, 1);
        hy_log(HY_LOG_WARN,
               "cluster: the put queue is full (%zu entries, %zu bytes): an entry of %zu bytes "
               "is not put to its owners",
               c->queued, c->queued_bytes, it->len);
        item_free(it);
        return;
    }
    if (c->tail)
        c->tail->next = it;
    else
        c->head = it;
    c->tail = it;
    c->queued++;
    c->queued_bytes += it->len;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int svc_cluster_put(hy_svc *s, const char *model, const char *tenant, const hy_key *k,
                    char *const *tags, size_t ntags, const void *buf, size_t len, bool wait_one,
                    char member[HY_MEMBER_ID_MAX], hy_err *err)
{
    svc_cluster *c = cl_of(s);
    member[0] = '\0';
    put_item *it = item_new(model, tenant, k, (const char *const *)tags, ntags, buf, len);
    if (!it) return hy_err_set(err, HY_ENOMEM, "out of memory");
    svc_view *v = svc_view_get(s);
    svc_peer *own[HY_OWNERS_MAX];
    bool self;
    const size_t n = v ? svc_view_owners(s, v, tenant, k, own, &self) : 0;
    bool others = false;
    for (size_t i = 0; i < n; i++) others |= !own[i]->self;
    if (n) snprintf(member, HY_MEMBER_ID_MAX, "%s", own[0]->id);
    int rc = HY_OK;
    if (wait_one && others) {
        char tried[512] = "";
        size_t at = 0;
        bool ok = false;
        for (size_t i = 0; i < n && !ok; i++) {
            if (own[i]->self) continue;
            hy_err e = {0};
            ok = put_one(s, own[i], it, &e) == HY_OK;
            if (ok) {
                snprintf(it->done[it->ndone++], HY_MEMBER_ID_MAX, "%s", own[i]->id);
                snprintf(member, HY_MEMBER_ID_MAX, "%s", own[i]->id);
                atomic_fetch_add(&c->puts_sent, 1);
            } else {
                atomic_fetch_add(&c->peer_errors, 1);
                at += (size_t)snprintf(tried + at, at < sizeof tried ? sizeof tried - at : 0,
                                       "%s%s", at ? "; " : "", e.msg);
            }
        }
        if (!ok) rc = hy_err_set(err, HY_EIO, "no owner took the entry: %.400s", tried);
    }
    svc_view_put(v);
    bool more = false; /* owners left for the background */
    for (size_t i = 0; i < n; i++) more |= !own[i]->self && !item_done_by(it, own[i]->id);
    if (!more || rc)
        item_free(it);
    else
        item_queue(c, it);
    return rc;
}

/* --- hand-over ----------------------------------------------------------------------- */

/* After the set changed from `from` to `to`: every entry held here whose
 * owners under `to` include members that were not owners under `from` (nor
 * this one) is queued for them — a newcomer gets the entries it now owns
 * from the members that hold them, a replica that replaced a leaver gets
 * the surviving copy, and an entry this member no longer owns goes to its
 * owner. Owners that were owners before are left alone (they have it), so a
 * change moves only what it must. Reads each entry once (a lease), paced by
 * the put queue (half full: wait). */
/* A batch of the store's metas, copied under its lock by hy_store_scan. */
typedef struct meta_batch {
    hy_meta *m;
    size_t n, cap;
    bool oom;
} meta_batch;

static void batch_add(void *ctx, const hy_meta *m)
{
    meta_batch *b = ctx;
    if (b->n == b->cap) {
        const size_t cap = b->cap ? 2 * b->cap : 256;
        hy_meta *g = realloc(b->m, cap * sizeof *g);
        if (!g) {
            b->oom = true;
            return;
        }
        b->m = g, b->cap = cap;
    }
    b->m[b->n++] = *m;
}

/* Queues entry m for the members that own it in `to` and did not in `from`
 * (none: nothing to do). Returns whether it was queued. */
static bool hand_over_one(hy_svc *s, svc_cluster *c, svc_view *from, svc_view *to, const hy_meta *m)
{
    svc_peer *own_to[HY_OWNERS_MAX], *own_from[HY_OWNERS_MAX];
    bool self_to, self_from;
    const size_t nt = svc_view_owners(s, to, m->tenant, &m->key, own_to, &self_to);
    const size_t nf = svc_view_owners(s, from, m->tenant, &m->key, own_from, &self_from);
    bool target = false;
    for (size_t a = 0; a < nt; a++) {
        bool was = own_to[a]->self;
        for (size_t b = 0; b < nf && !was; b++) was = !strcmp(own_to[a]->id, own_from[b]->id);
        target |= !was;
    }
    const svc_model *sm = svc_model_by_fp(s, m->model);
    if (!target || !sm) return false;
    hy_lease *l;
    hy_err e = {0};
    if (hy_store_acquire(s->store, &m->key, &l, &e)) return false; /* gone meanwhile */
    const char *tags[HY_MAX_TAGS];
    for (uint32_t t = 0; t < m->ntags && t < HY_MAX_TAGS; t++) tags[t] = m->tags[t];
    put_item *it = item_new(sm->name, m->tenant, &m->key, tags, m->ntags, hy_lease_data(l),
                            hy_lease_meta(l)->bytes);
    hy_store_release(s->store, l);
    if (!it) return false;
    for (size_t b = 0; b < nf && it->ndone < HY_OWNERS_MAX; b++) /* they have it */
        snprintf(it->done[it->ndone++], HY_MEMBER_ID_MAX, "%s", own_from[b]->id);
    item_queue(c, it);
    atomic_fetch_add(&c->handed_over, 1);
    return true;
}

/* After a change of the set from `from` to `to`: every entry held here goes
 * to the members that became its owners. The store is walked with a cursor
 * (hy_store_scan), a few buckets at a time, so the walk is linear in the
 * entries, holds the store's lock only per batch, and misses none of those
 * present throughout however the store changes meanwhile. */
static void hand_over(hy_svc *s, svc_view *from, svc_view *to)
{
    svc_cluster *c = cl_of(s);
    meta_batch b = {0};
    uint64_t cursor = 0;
    size_t queued = 0, seen = 0;
    int more;
    do {
        b.n = 0;
        more = hy_store_scan(s->store, &cursor, 64, batch_add, &b);
        if (b.oom) {
            hy_log(HY_LOG_WARN, "cluster: out of memory handing entries over; the rest are "
                                "rebuilt by their new owners when missed");
            break;
        }
        for (size_t i = 0; i < b.n; i++, seen++) queued += hand_over_one(s, c, from, to, &b.m[i]);
        pthread_mutex_lock(&c->mu); /* pace: the queue at most half full */
        while (!c->stopping && c->queued_bytes > PUT_QUEUE_BYTES / 2) {
            pthread_mutex_unlock(&c->mu);
            usleep(20000);
            pthread_mutex_lock(&c->mu);
        }
        const bool stop = c->stopping;
        pthread_mutex_unlock(&c->mu);
        if (stop) break;
    } while (more == HY_EAGAIN);
    free(b.m);
    if (queued)
        hy_log(HY_LOG_INFO, "cluster: %zu of %zu entries handed over to their new owners", queued,
               seen);
}

static void *handover_main(void *arg)
{
    hy_svc *s = arg;
    svc_cluster *c = cl_of(s);
    pthread_mutex_lock(&c->mu);
    while (!c->stopping) {
        if (!c->handover_from) {
            pthread_cond_wait(&c->cv, &c->mu);
            continue;
        }
        svc_view *from = c->handover_from, *to = c->view;
        c->handover_from = NULL;
        atomic_fetch_add(&to->refs, 1);
        pthread_mutex_unlock(&c->mu);
        hand_over(s, from, to);
        svc_view_put(from);
        svc_view_put(to);
        pthread_mutex_lock(&c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* --- start, leave, stop -------------------------------------------------------------- */

/* The JSON a member registers under its key: what clients and peers need to
 * know of it. */
static char *member_info(hy_svc *s, const char *address)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", s->cfg.cluster_id);
    cJSON_AddStringToObject(o, "address", address);
    cJSON_AddStringToObject(o, "version", HY_CACHED_VERSION);
    if (s->cfg.cluster_secret[0]) {
        char mac[65];
        registration_mac(s, s->cfg.cluster_id, address, mac);
        cJSON_AddStringToObject(o, "mac", mac);
    }
    cJSON *tp = cJSON_AddArrayToObject(o, "transports");
    if (tp) {
        cJSON_AddItemToArray(tp, cJSON_CreateString("tcp"));
        if (s->tp_shm_path[0]) cJSON_AddItemToArray(tp, cJSON_CreateString("shm"));
        if (strcmp(s->cfg.tp_rdma, "off")) cJSON_AddItemToArray(tp, cJSON_CreateString("rdma"));
    }
    cJSON *cap = cJSON_AddObjectToObject(o, "capacity_bytes");
    if (cap) {
        cJSON_AddNumberToObject(cap, "hbm", (double)s->cfg.hbm_bytes);
        cJSON_AddNumberToObject(cap, "host", (double)s->cfg.host_bytes);
        cJSON_AddNumberToObject(cap, "nvme", s->cfg.nvme_dir[0] ? (double)s->cfg.nvme_bytes : 0);
    }
    cJSON *ms = cJSON_AddArrayToObject(o, "models");
    for (int i = 0; ms && i < s->nmodels; i++) {
        char fp[65];
        for (int b = 0; b < 32; b++) snprintf(fp + 2 * b, 3, "%02x", s->models[i].fp[b]);
        cJSON *m = cJSON_CreateObject();
        if (!m) continue;
        cJSON_AddStringToObject(m, "name", s->models[i].name);
        cJSON_AddStringToObject(m, "fingerprint", fp);
        cJSON_AddItemToArray(ms, m);
    }
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return txt;
}

int svc_cluster_start(hy_svc *s, const char *bound, hy_err *err)
{
    const hy_cached_config *cfg = &s->cfg;
    if (!cfg->cluster_id[0] && (cfg->ncluster_members || cfg->cluster_etcd[0]))
        return hy_err_set(err, HY_EINVAL,
                          "cluster.id: empty, but %s is set: a member of a cluster needs an id "
                          "(cluster.id, or --cluster-id ID)",
                          cfg->ncluster_members ? "cluster.members" : "cluster.etcd.endpoints");
    if (!cfg->cluster_id[0]) return HY_OK;
    svc_cluster *c = calloc(1, sizeof *c);
    if (!c) return hy_err_set(err, HY_ENOMEM, "out of memory");
    c->s = s;
    snprintf(c->self, sizeof c->self, "%s", cfg->cluster_id);
    snprintf(c->advertise, sizeof c->advertise, "%s",
             cfg->cluster_advertise[0] ? cfg->cluster_advertise : bound);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    s->cluster = c;
    if (!strncmp(c->advertise, "0.0.0.0:", 8) || !strncmp(c->advertise, "[::]:", 5))
        return hy_err_set(err, HY_EINVAL,
                          "cluster.advertise: this member listens on %s, which peers cannot "
                          "dial: set the address they reach it at (--advertise HOST:PORT)",
                          c->advertise);
    if (pthread_create(&c->putter, NULL, putter_main, s))
        return hy_err_set(err, HY_ENOMEM, "cluster: cannot start the put thread");
    c->putter_started = true;
    if (pthread_create(&c->handover, NULL, handover_main, s))
        return hy_err_set(err, HY_ENOMEM, "cluster: cannot start the hand-over thread");
    pthread_mutex_lock(&c->mu);
    c->handover_started = true;
    pthread_mutex_unlock(&c->mu);
    if (!cfg->cluster_etcd[0]) { /* the static set */
        const char *ids[HY_CFG_MAX_MEMBERS], *addrs[HY_CFG_MAX_MEMBERS];
        const int n = cfg->ncluster_members ? cfg->ncluster_members : 1;
        for (int i = 0; i < cfg->ncluster_members; i++)
            ids[i] = cfg->cluster_members[i].id, addrs[i] = cfg->cluster_members[i].address;
        if (!cfg->ncluster_members) ids[0] = c->self, addrs[0] = c->advertise; /* alone */
        view_set(c, ids, addrs, (size_t)n);
        hy_log(HY_LOG_INFO, "cluster: member '%s' (%s), static set, %u replica(s) per entry",
               c->self, c->advertise, cfg->cluster_replicas);
        return HY_OK;
    }
    char eps[sizeof cfg->cluster_etcd];
    snprintf(eps, sizeof eps, "%s", cfg->cluster_etcd);
    const char *ep[32];
    size_t nep = 0;
    for (char *save = NULL, *t = strtok_r(eps, ",", &save); t && nep < 32;
         t = strtok_r(NULL, ",", &save))
        ep[nep++] = t;
    /* etcd over TLS: the PEM files' text (the etcd client copies it) */
    char *pem[3] = {NULL, NULL, NULL};
    const char *files[3] = {cfg->cluster_etcd_tls_ca, cfg->cluster_etcd_tls_cert,
                            cfg->cluster_etcd_tls_key};
    static const char *const keys[3] = {"cluster.etcd.tls_ca", "cluster.etcd.tls_cert",
                                        "cluster.etcd.tls_key"};
    for (int i = 0; i < 3; i++) {
        size_t len;
        if (files[i][0] && hy_read_file(files[i], 1 << 20, &pem[i], &len, err)) {
            hy_err_prefix(err, "%s", keys[i]);
            for (int j = 0; j < i; j++) hy_free(pem[j]);
            return HY_EIO;
        }
    }
    char *info = member_info(s, c->advertise);
    if (!info) {
        for (int i = 0; i < 3; i++) hy_free(pem[i]);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    hy_membership_config mc = {
        .endpoints = ep,
        .nendpoints = nep,
        .prefix = cfg->cluster_etcd_prefix,
        .ttl_s = (int)cfg->cluster_ttl_s,
        .self_id = c->self,
        .self_info = info,
        .on_change = on_members,
        .ctx = c,
        .tls_ca_pem = pem[0],
        .tls_cert_pem = pem[1],
        .tls_key_pem = pem[2],
        .tls_server_name =
            cfg->cluster_etcd_tls_server_name[0] ? cfg->cluster_etcd_tls_server_name : NULL,
        .user = cfg->cluster_etcd_user[0] ? cfg->cluster_etcd_user : NULL,
        .password = cfg->cluster_etcd_user[0] ? cfg->cluster_etcd_password : NULL};
    c->etcd = true;
    int rc = hy_membership_start(&mc, &c->ms, err);
    free(info);
    for (int i = 0; i < 3; i++) hy_free(pem[i]);
    if (rc) {
        hy_err_prefix(err, "cluster: etcd (%s)", cfg->cluster_etcd);
        return rc;
    }
    hy_log(HY_LOG_INFO,
           "cluster: member '%s' (%s) registered in etcd under %s%s (lease %u s; %s%s%s), %u "
           "replica(s) per entry",
           c->self, c->advertise, cfg->cluster_etcd_prefix, c->self, cfg->cluster_ttl_s,
           cfg->cluster_etcd_tls_ca[0] ? "TLS" : "plaintext",
           cfg->cluster_etcd_user[0] ? ", as user " : "", cfg->cluster_etcd_user,
           cfg->cluster_replicas);
    return HY_OK;
}

void svc_cluster_leave(hy_svc *s)
{
    svc_cluster *c = cl_of(s);
    if (!c || !c->ms) return;
    hy_membership_stop(c->ms); /* the lease revoked: peers drop this member now */
    c->ms = NULL;
    hy_log(HY_LOG_INFO, "cluster: left (etcd lease revoked)");
}

void svc_cluster_stop(hy_svc *s)
{
    svc_cluster *c = cl_of(s);
    if (!c) return;
    svc_cluster_leave(s);    /* no view changes from here on */
    if (c->putter_started) { /* what is queued gets about 2 s to reach its owners */
        const double until = hy_now_s() + 2.0;
        pthread_mutex_lock(&c->mu);
        while (c->head && hy_now_s() < until) {
            pthread_mutex_unlock(&c->mu);
            usleep(20000);
            pthread_mutex_lock(&c->mu);
        }
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->cv);
    const bool handover = c->handover_started;
    pthread_mutex_unlock(&c->mu);
    if (handover) pthread_join(c->handover, NULL);
    if (c->putter_started) pthread_join(c->putter, NULL);
    svc_view_put(c->handover_from);
    svc_view_put(c->view);
    pthread_cond_destroy(&c->cv);
    pthread_mutex_destroy(&c->mu);
    free(c);
    s->cluster = NULL;
}

/* --- what it shows ------------------------------------------------------------------- */

void svc_cluster_count_forward(hy_svc *s)
{
    if (cl_of(s)) atomic_fetch_add(&cl_of(s)->forwarded, 1);
}

void svc_cluster_stats(hy_svc *s, svc_cluster_pb *o)
{
    memset(o, 0, sizeof *o);
    svc_cluster *c = cl_of(s);
    Hypic__V1__ClusterStats init = HYPIC__V1__CLUSTER_STATS__INIT;
    o->pb = init;
    if (!c) return;
    o->pb.self = c->self;
    o->pb.membership = c->etcd ? "etcd" : "static";
    o->pb.replicas = s->cfg.cluster_replicas;
    svc_view *v = svc_view_get(s);
    const size_t n = v ? v->n : 0;
    o->m = calloc(n ? n : 1, sizeof *o->m);
    o->mp = calloc(n ? n : 1, sizeof *o->mp);
    for (size_t i = 0; o->m && o->mp && i < n; i++) {
        Hypic__V1__Member mi = HYPIC__V1__MEMBER__INIT;
        o->m[i] = mi;
        o->m[i].id = strdup(v->peers[i]->id);
        o->m[i].address = strdup(v->peers[i]->address);
        o->m[i].self = v->peers[i]->self;
        o->mp[i] = &o->m[i];
        o->pb.n_members++;
    }
    o->pb.members = o->mp;
    svc_view_put(v);
    pthread_mutex_lock(&c->mu);
    o->pb.view_changes = c->view_changes;
    o->pb.view_age_s = hy_now_s() - c->view_since_s;
    o->pb.puts_queued = c->queued;
    pthread_mutex_unlock(&c->mu);
    o->pb.remote_hits = atomic_load(&c->remote_hits);
    o->pb.remote_misses = atomic_load(&c->remote_misses);
    o->pb.peer_errors = atomic_load(&c->peer_errors);
    o->pb.puts_sent = atomic_load(&c->puts_sent);
    o->pb.puts_failed = atomic_load(&c->puts_failed);
    o->pb.forwarded = atomic_load(&c->forwarded);
    o->pb.remote_via_transport = atomic_load(&c->via_transport);
    o->pb.handed_over = atomic_load(&c->handed_over);
}

void svc_cluster_stats_free(svc_cluster_pb *o)
{
    for (size_t i = 0; o->m && i < o->pb.n_members; i++) {
        free(o->m[i].id);
        free(o->m[i].address);
    }
    free(o->m);
    free(o->mp);
}

void svc_cluster_metrics(hy_svc *s, hy_strbuf *b)
{
    svc_cluster_pb o;
    svc_cluster_stats(s, &o);
    if (!cl_of(s)) return;
    static const struct {
        const char *name, *type, *help;
        size_t off;
    } k[] = {
        {"hypic_cluster_view_changes_total", "counter", "Times the live set changed",
         offsetof(Hypic__V1__ClusterStats, view_changes)},
        {"hypic_cluster_remote_hits_total", "counter", "Entries fetched from their owners",
         offsetof(Hypic__V1__ClusterStats, remote_hits)},
        {"hypic_cluster_remote_via_transport_total", "counter",
         "Of the entries fetched from owners, those delivered through a transport session",
         offsetof(Hypic__V1__ClusterStats, remote_via_transport)},
        {"hypic_cluster_remote_misses_total", "counter", "Owners asked that did not have the entry",
         offsetof(Hypic__V1__ClusterStats, remote_misses)},
        {"hypic_cluster_peer_errors_total", "counter",
         "Calls to members that failed (taken as misses, puts retried)",
         offsetof(Hypic__V1__ClusterStats, peer_errors)},
        {"hypic_cluster_puts_total", "counter", "Entries put to their owners",
         offsetof(Hypic__V1__ClusterStats, puts_sent)},
        {"hypic_cluster_puts_failed_total", "counter", "Entries given up after retries",
         offsetof(Hypic__V1__ClusterStats, puts_failed)},
        {"hypic_cluster_forwarded_total", "counter", "Calls passed on to the owners of their keys",
         offsetof(Hypic__V1__ClusterStats, forwarded)},
        {"hypic_cluster_handed_over_total", "counter",
         "Entries held here queued for members that became their owners (hand-over)",
         offsetof(Hypic__V1__ClusterStats, handed_over)},
        {"hypic_cluster_puts_queued", "gauge", "Entries waiting to be put to their owners",
         offsetof(Hypic__V1__ClusterStats, puts_queued)},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        hy_prom_family(b, k[i].name, k[i].type, k[i].help);
        hy_prom_u64(b, k[i].name, NULL, *(const uint64_t *)((const char *)&o.pb + k[i].off));
    }
    hy_prom_family(b, "hypic_cluster_members", "gauge", "Members in this member's view");
    hy_prom_u64(b, "hypic_cluster_members", NULL, o.pb.n_members);
    svc_cluster_stats_free(&o);
}
