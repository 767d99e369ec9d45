/*
 * The methods over stored entries — GetEntry, PutEntry, Invalidate, List,
 * Inspect, Watch — and Stats, the policies and Health (handlers_internal.h).
 */
#include "cluster_internal.h"
#include "handlers_internal.h"
#include "put_internal.h"
#include "router_internal.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- GetEntry / PutEntry ---------------------------------------------------------- */

/* GetEntry's chunks: 256 KiB (a caller composing an entry as it arrives
 * gets its layers at that grain), or half the largest message. */
#define GET_CHUNK_BYTES (256u << 10)
static size_t get_chunk(const rq *r)
{
    return HY_MIN((size_t)GET_CHUNK_BYTES, (size_t)r->s->cfg.max_message / 2);
}

/* Sends bytes data[from..n) as GetEntry answers (the first `from` sent
 * already): through the client's transport session (the meta in the one
 * reply), or in chunks, the meta in the first. */
static hy_rpc_code send_entry(rq *r, const Hypic__V1__GetEntryRequest *q, pb_meta *pm,
                              const uint8_t *data, uint64_t n, uint64_t from)
{
    hy_rpc_code c = HY_RPC_OK;
    if (q->transport_session) { /* the bytes through the client's session, meta here */
        Hypic__V1__Delivery d;
        if ((c = h_deliver_bytes(r, q->transport_session, q->offset, data, n, &d))) return c;
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        ch.meta = &pm->pb;
        ch.delivery = &d;
        return h_send(r, &ch.base);
    }
    const size_t chunk = get_chunk(r);
    for (uint64_t off = from; off < n && !c; off += chunk) {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if (off == 0) ch.meta = &pm->pb;
        ch.data =
            (ProtobufCBinaryData){(size_t)HY_MIN((uint64_t)chunk, n - off), (uint8_t *)data + off};
        c = h_send(r, &ch.base);
    }
    return c;
}

/* A GetEntry in chunks of an entry landing from NVMe: each whole chunk
 * sent once the tier's checksums have passed it. */
typedef struct streamed_get {
    rq *r;
    pb_meta *pm; /* filled before the first chunk goes */
    uint64_t n, sent;
    size_t chunk;
    hy_rpc_code c; /* a send that failed: the caller is gone */
} streamed_get;

static int on_get_landed(void *ctx, const void *data, uint64_t verified, uint64_t landed,
                         hy_err *err)
{
    (void)landed;
    streamed_get *g = ctx;
    while (!g->c && verified - g->sent >= g->chunk) {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if (g->sent == 0) ch.meta = &g->pm->pb;
        ch.data = (ProtobufCBinaryData){g->chunk, (uint8_t *)data + g->sent};
        g->c = h_send(g->r, &ch.base);
        g->sent += g->chunk;
    }
    return g->c ? hy_err_set(err, HY_EIO, "the caller is gone") : HY_OK;
}

/* Cluster mode, the key not here: from its owners, verified (the bytes are
 * the entry of this key for this tenant), or NOT_FOUND. */
static hy_rpc_code get_from_owners(rq *r, const Hypic__V1__GetEntryRequest *q, svc_model *sm,
                                   const hy_key *k)
{
    seg g = {0};
    uint64_t bytes = 0;
    hy_err e = {0};
    svc_cluster_count_forward(r->s);
    if (fetch_entry(r, sm, k, &g, &bytes, &e) != HY_OK || !g.rbuf) {
        h_seg_drop(r, &g);
        return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached (asked its owners too)");
    }
    hy_meta m;
    memset(&m, 0, sizeof m);
    m.key = *k;
    snprintf(m.tenant, sizeof m.tenant, "%s", r->who.tenant);
    memcpy(m.model, sm->fp, 32);
    const int32_t *tok;
    m.tokens = (uint32_t)hy_entry_tokens(g.entry, &tok);
    m.bytes = bytes;
    pb_meta pm;
    h_meta_to_pb(r->s, &m, 0, &pm);
    hy_rpc_code c = send_entry(r, q, &pm, g.rbuf, bytes, 0);
    h_seg_drop(r, &g);
    return c;
}

hy_rpc_code do_get_entry(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__GetEntryRequest *q = (const void *)req;
    svc_model *sm;
    hy_key k;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = h_need_member(r, q->local_only)) ||
        (c = h_need_model(r, q->model, &sm)) || (c = h_key_of(r, "key", q->key, &k)))
        return c;
    if (!h_visible(r, sm, &k, NULL, NULL)) {
        if (r->s->cluster && !q->local_only) return get_from_owners(r, q, sm, &k);
        return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    }
    hy_lease *l = NULL;
    hy_err e = {0};
    hy_meta m;
    unsigned mask = 0;
    if (hy_store_peek(r->s->store, &k, &m, &mask) != HY_OK)
        return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    pb_meta pm;
    h_meta_to_pb(r->s, &m, mask, &pm);
    /* in chunks, an entry read from NVMe goes out as its bytes pass the
     * tier's checksums: the caller composes its first layers meanwhile */
    streamed_get sg = {.r = r, .pm = &pm, .n = m.bytes, .chunk = get_chunk(r)};
    int rc = q->transport_session
                 ? hy_store_acquire(r->s->store, &k, &l, &e)
                 : hy_store_acquire_landing(r->s->store, &k, on_get_landed, &sg, &l, &e);
    if (sg.sent && (rc || hy_lease_meta(l)->bytes != sg.n)) { /* part of it out already */
        if (l) hy_store_release(r->s->store, l);
        return sg.c ? sg.c
                    : h_fail(r, HY_RPC_DATA_LOSS,
                             "the entry failed while it was read from the NVMe tier, after %llu "
                             "of its %llu bytes were sent: %s",
                             (unsigned long long)sg.sent, (unsigned long long)sg.n,
                             rc ? e.msg : "it was replaced meanwhile");
    }
    /* HY_EFORMAT: its only copy (NVMe) failed its checksums and was dropped */
    if (rc == HY_ENOTFOUND || rc == HY_EFORMAT) {
        if (l) hy_store_release(r->s->store, l);
        return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    }
    if (rc) {
        if (l) hy_store_release(r->s->store, l);
        return sg.c ? sg.c : h_from_err(r, rc, &e);
    }
    if (!sg.sent) { /* what was leased (replaced since the peek?) */
        m = *hy_lease_meta(l);
        h_meta_to_pb(r->s, &m, mask, &pm);
    }
    c = send_entry(r, q, &pm, hy_lease_data(l), m.bytes, sg.sent);
    hy_store_release(r->s->store, l);
    return c;
}

hy_rpc_code do_put_entry(rq *r, const ProtobufCMessage *req)
{
    (void)req; /* a client stream: read below */
    hy_svc *s = r->s;
    hy_rpc_code c = HY_RPC_OK;
    uint8_t *buf = NULL;
    uint64_t got = 0, want = 0;
    hy_meta m;
    memset(&m, 0, sizeof m);
    svc_model *sm = NULL;
    bool have_key = false, local_only = false;
    hy_key given;
    for (size_t i = 0;; i++) {
        ProtobufCMessage *msg;
        hy_err e = {0};
        int rc = hy_rpc_call_recv(r->call, &msg, &e);
        if (rc == HY_ENOTFOUND) break; /* the end of the stream */
        if (rc == HY_EFORMAT || rc == HY_ENOMEM || rc == HY_ERANGE) {
            c = h_fail(r, hy_rpc_recv_code(r->call, rc), "chunk %zu: %s%s", i, e.msg,
                       rc == HY_ENOMEM ? ": nothing was stored" : "");
            break;
        }
        if (rc) {
            c = h_fail(r, HY_RPC_CANCELLED,
                       "the stream was cut short after %llu bytes: nothing "
                       "was stored",
                       (unsigned long long)got);
            break;
        }
        const Hypic__V1__EntryChunk *ch = (const void *)msg;
        if (i == 0) {
            const Hypic__V1__EntryMeta *pm = ch->meta;
            if (!pm) {
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "chunk 0 has no 'meta'");
            } else if ((c = h_check_tenant(r, pm->tenant)) ||
                       (c = h_need_model(r, pm->model, &sm))) {
            } else if (pm->bytes == 0 || pm->bytes > s->cfg.max_entry_bytes) {
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                           "field 'meta.bytes': %llu is 0 or over the limit of %llu "
                           "(limits.max_entry_bytes)",
                           (unsigned long long)pm->bytes,
                           (unsigned long long)s->cfg.max_entry_bytes);
            } else if (pm->n_tags > HY_MAX_TAGS) {
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'meta.tags': over %d tags",
                           HY_MAX_TAGS);
            } else if (pm->key.len && (c = h_key_of(r, "meta.key", pm->key, &given))) {
            } else if ((c = h_need_member(r, ch->local_only))) {
            } else if (!s->cluster && hy_store_quota_room(s->store, r->who.tenant, pm->bytes, &e)) {
                /* before its bytes are gathered: a tenant at its quota cannot make the
                 * daemon hold limits.max_entry_bytes per stream for nothing */
                c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "%s", e.msg);
            } else if (!(buf = malloc(pm->bytes))) {
                c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory for %llu bytes",
                           (unsigned long long)pm->bytes);
            } else {
                have_key = pm->key.len != 0;
                local_only = ch->local_only;
                want = pm->bytes;
                for (size_t t = 0; t < pm->n_tags && !c; t++) {
                    if (!pm->tags[t][0] || strlen(pm->tags[t]) >= HY_TAG_MAX)
                        c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                                   "field 'meta.tags[%zu]': empty or over %d bytes", t,
                                   HY_TAG_MAX - 1);
                    else
                        snprintf(m.tags[m.ntags++], HY_TAG_MAX, "%s", pm->tags[t]);
                }
            }
        } else if (ch->meta) {
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "chunk %zu carries 'meta': only the first may",
                       i);
        }
        if (!c && ch->data.len > want - got)
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "chunk %zu: the chunks exceed meta.bytes (%llu)",
                       i, (unsigned long long)want);
        if (!c) {
            memcpy(buf + got, ch->data.data, ch->data.len);
            got += ch->data.len;
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        if (c) break;
    }
    if (!c && !sm) c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "the stream had no chunk");
    if (!c && got != want)
        c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                   "the stream ended after %llu of meta.bytes = %llu bytes: nothing was stored",
                   (unsigned long long)got, (unsigned long long)want);
    /* validated in full before anything is stored */
    hy_entry *ent = NULL;
    hy_err e = {0};
    if (!c) {
        int rc = hy_entry_deserialize(sm->m, buf, got, &ent, &e);
        if (rc == HY_ENOMEM) /* no room to look: not the bytes' fault */
            c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "no memory to validate the entry: %s", e.msg);
        else if (rc)
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "the entry failed validation: %s", e.msg);
    }
    hy_key k;
    hy_tier_id placed = HY_TIER_NONE;
    char member[HY_MEMBER_ID_MAX] = "";
    if (!c) {
        const int32_t *tok;
        const size_t n = (size_t)hy_entry_tokens(ent, &tok);
        hy_entry_key(r->who.tenant, sm->fp, hy_entry_seam_setting(ent), hy_entry_repr_of(ent), tok,
                     n, k.b);
        if (have_key && memcmp(k.b, given.b, HY_KEY_BYTES) != 0)
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                       "field 'meta.key' is not the key of the entry's tokens for your tenant");
    }
    if (!c) {                   /* where it belongs: here, or with its owners (one of them now) */
        hy_meta given_tags = m; /* put_meta starts from nothing */
        char *tags[HY_MAX_TAGS];
        for (uint32_t t = 0; t < given_tags.ntags; t++) tags[t] = given_tags.tags[t];
        put_meta(sm, r->who.tenant, &k, ent, got, tags, given_tags.ntags, &m);
        int rc = put_bytes(s, sm, &m, buf, true, local_only, &placed, member, &e);
        if (rc == HY_EIO && s->cluster)
            c = h_fail(r, HY_RPC_UNAVAILABLE, "%s", e.msg);
        else if (rc)
            c = h_from_err(r, rc, &e);
    }
    hy_entry_free(ent);
    free(buf);
    if (c) return c;
    Hypic__V1__PutEntryResponse resp = HYPIC__V1__PUT_ENTRY_RESPONSE__INIT;
    resp.key = (ProtobufCBinaryData){HY_KEY_BYTES, k.b};
    resp.placed = h_pb_tier(placed);
    resp.member = member;
    return h_send(r, &resp.base);
}

/* --- Invalidate, List, Inspect ------------------------------------------------------ */

hy_rpc_code do_invalidate(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__InvalidateRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = h_need_member(r, q->local_only))) return c;
    hy_store_filter f = {.tenant = r->who.tenant};
    hy_key k;
    switch (q->target_case) {
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_KEY:
        if ((c = h_key_of(r, "key", q->key, &k))) return c;
        f.key = &k;
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG:
        if (!q->tag[0]) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tag' is empty");
        f.tag = q->tag;
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT:
        if (!q->all_of_tenant)
            return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'all_of_tenant' is false");
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL: {
        svc_model *sm;
        if ((c = h_need_model(r, q->model, &sm))) return c;
        f.model = sm->fp;
        break;
    }
    default:
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "no target: set one of 'key', 'tag', 'all_of_tenant', 'model'");
    }
    size_t removed = 0;
    hy_err e = {0};
    int rc = hy_store_invalidate(r->s->store, &f, &removed, &e);
    if (rc) return h_from_err(r, rc, &e);
    Hypic__V1__InvalidateResponse resp = HYPIC__V1__INVALIDATE_RESPONSE__INIT;
    uint64_t total = removed;
    char unreach[HY_CFG_MAX_MEMBERS][HY_MEMBER_ID_MAX];
    char *up[HY_CFG_MAX_MEMBERS];
    size_t nun = 0;
    if (r->s->cluster && !q->local_only) /* the entries are spread over the members */
        svc_cluster_invalidate(r->s, r->who.tenant, q, &total, unreach, HY_CFG_MAX_MEMBERS, &nun);
    for (size_t i = 0; i < nun; i++) up[i] = unreach[i];
    resp.removed = total;
    resp.n_unreachable = nun;
    resp.unreachable = up;
    return h_send(r, &resp.base);
}

/* --- Pin, Unpin ---------------------------------------------------------------------- */

static int on_pinned(void *ctx, const ProtobufCMessage *msg)
{
    const Hypic__V1__PinResponse *p = (const void *)msg;
    uint64_t *sum = ctx;
    sum[0] += p->pinned, sum[1] += p->bytes;
    return 0;
}

static int on_unpinned(void *ctx, const ProtobufCMessage *msg)
{
    const Hypic__V1__UnpinResponse *p = (const void *)msg;
    uint64_t *sum = ctx;
    sum[0] += p->unpinned, sum[1] += p->bytes;
    return 0;
}

/* A pin's longest time: a hundred years, far from the clock's end. */
#define PIN_TTL_MAX_MS (100ull * 366 * 86400 * 1000)

hy_rpc_code do_pin(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__PinRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = h_need_member(r, q->local_only))) return c;
    hy_store_filter f = {.tenant = r->who.tenant};
    hy_key k;
    switch (q->target_case) {
    case HYPIC__V1__PIN_REQUEST__TARGET_KEY:
        if ((c = h_key_of(r, "key", q->key, &k))) return c;
        f.key = &k;
        break;
    case HYPIC__V1__PIN_REQUEST__TARGET_TAG:
        if (!q->tag[0]) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tag' is empty");
        f.tag = q->tag;
        break;
    default:
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "no target: set one of 'key', 'tag'");
    }
    if (q->ttl_ms > PIN_TTL_MAX_MS)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'ttl_ms': %llu is more than a hundred years (0 pins until unpinned)",
                      (unsigned long long)q->ttl_ms);
    const uint64_t until = q->ttl_ms ? hy_wall_ns() + q->ttl_ms * 1000000ull : HY_PIN_FOREVER;
    const uint64_t cap = svc_pin_cap(r->s);
    size_t n = 0;
    uint64_t bytes = 0;
    hy_err e = {0};
    int rc = hy_store_pin(r->s->store, &f, until, cap, &n, &bytes, &e);
    const bool fan = r->s->cluster && !q->local_only; /* the entries are spread over the members */
    if (rc && !(rc == HY_ENOTFOUND && fan)) return h_from_err(r, rc, &e);
    uint64_t sum[2] = {n, bytes};
    char unreach[HY_CFG_MAX_MEMBERS][HY_MEMBER_ID_MAX];
    char *up[HY_CFG_MAX_MEMBERS];
    size_t nun = 0;
    if (fan) {
        Hypic__V1__PinRequest fq = *q;
        fq.local_only = true;
        fq.tenant = r->who.tenant;
        fq.ttl_ms = q->ttl_ms;
        svc_cluster_fanout(r->s, r->who.tenant, "Pin", &fq.base, HY_RPC_NOT_FOUND, on_pinned, sum,
                           unreach, HY_CFG_MAX_MEMBERS, &nun);
        if (sum[0] == 0 && nun == 0) return h_from_err(r, rc, &e);
    }
    for (size_t i = 0; i < nun; i++) up[i] = unreach[i];
    Hypic__V1__PinResponse resp = HYPIC__V1__PIN_RESPONSE__INIT;
    resp.pinned = sum[0];
    resp.bytes = sum[1];
    resp.until_unix_ns = until;
    resp.tenant_pinned_bytes = hy_store_pinned_bytes(r->s->store, r->who.tenant, NULL);
    resp.tenant_pin_cap = cap;
    resp.n_unreachable = nun;
    resp.unreachable = up;
    return h_send(r, &resp.base);
}

hy_rpc_code do_unpin(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__UnpinRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant)) || (c = h_need_member(r, q->local_only))) return c;
    hy_store_filter f = {.tenant = r->who.tenant};
    hy_key k;
    switch (q->target_case) {
    case HYPIC__V1__UNPIN_REQUEST__TARGET_KEY:
        if ((c = h_key_of(r, "key", q->key, &k))) return c;
        f.key = &k;
        break;
    case HYPIC__V1__UNPIN_REQUEST__TARGET_TAG:
        if (!q->tag[0]) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tag' is empty");
        f.tag = q->tag;
        break;
    case HYPIC__V1__UNPIN_REQUEST__TARGET_ALL_OF_TENANT:
        if (!q->all_of_tenant)
            return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'all_of_tenant' is false");
        break;
    default:
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "no target: set one of 'key', 'tag', 'all_of_tenant'");
    }
    size_t n = 0;
    uint64_t bytes = 0;
    hy_err e = {0};
    int rc = hy_store_unpin(r->s->store, &f, &n, &bytes, &e);
    if (rc) return h_from_err(r, rc, &e);
    uint64_t sum[2] = {n, bytes};
    char unreach[HY_CFG_MAX_MEMBERS][HY_MEMBER_ID_MAX];
    char *up[HY_CFG_MAX_MEMBERS];
    size_t nun = 0;
    if (r->s->cluster && !q->local_only) {
        Hypic__V1__UnpinRequest fq = *q;
        fq.local_only = true;
        fq.tenant = r->who.tenant;
        svc_cluster_fanout(r->s, r->who.tenant, "Unpin", &fq.base, HY_RPC_OK, on_unpinned, sum,
                           unreach, HY_CFG_MAX_MEMBERS, &nun);
    }
    for (size_t i = 0; i < nun; i++) up[i] = unreach[i];
    Hypic__V1__UnpinResponse resp = HYPIC__V1__UNPIN_RESPONSE__INIT;
    resp.unpinned = sum[0];
    resp.bytes = sum[1];
    resp.n_unreachable = nun;
    resp.unreachable = up;
    return h_send(r, &resp.base);
}

static hy_tier_id tier_from_pb(Hypic__V1__Tier t)
{
    return t == HYPIC__V1__TIER__TIER_HBM    ? HY_TIER_HBM
           : t == HYPIC__V1__TIER__TIER_HOST ? HY_TIER_HOST
           : t == HYPIC__V1__TIER__TIER_NVME ? HY_TIER_NVME
                                             : HY_TIER_NONE;
}

typedef struct listed {
    hy_meta m;
    unsigned mask;
} listed;

static int g_sort; /* qsort has no context argument; List sorts under its own lock */
static pthread_mutex_t g_sort_mu = PTHREAD_MUTEX_INITIALIZER;

static int cmp_listed(const void *a, const void *b)
{
    const hy_meta *x = &((const listed *)a)->m, *y = &((const listed *)b)->m;
    int d = 0;
    switch (g_sort) {
    case HYPIC__V1__LIST_REQUEST__SORT__SORT_BYTES:
        d = (x->bytes > y->bytes) - (x->bytes < y->bytes);
        break;
    case HYPIC__V1__LIST_REQUEST__SORT__SORT_HITS:
        d = (x->hits > y->hits) - (x->hits < y->hits);
        break;
    case HYPIC__V1__LIST_REQUEST__SORT__SORT_AGE: /* oldest first */
        d = (x->created_ns > y->created_ns) - (x->created_ns < y->created_ns);
        break;
    default:
        break;
    }
    return d ? d : memcmp(x->key.b, y->key.b, HY_KEY_BYTES);
}

/* A page in key order, ascending (the default): it goes on from the last
 * key of the page before, carried in the token with the total counted for
 * the first page ("k", 64 hex digits, ".", the total), so that each page
 * costs O(log n + page) wherever it lies (hy_store_list_after) and any
 * number of entries can be paged through. */
static hy_rpc_code list_by_key(rq *r, const Hypic__V1__ListRequest *q, const hy_store_filter *f,
                               uint32_t page)
{
    hy_key after;
    unsigned long long total = 0;
    const char *t = q->page_token;
    if (t[0]) {
        char hex[65], *end;
        snprintf(hex, sizeof hex, "%.64s", t + 1);
        errno = 0;
        if (t[0] != 'k' || strlen(t) < 67 || t[65] != '.' || hy_key_parse(hex, &after) ||
            !isdigit((unsigned char)t[66]) || (total = strtoull(t + 66, &end, 10), *end || errno))
            return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                          "field 'page_token': not a token this server gave");
    } else {
        size_t n, k;
        hy_err e = {0};
        int rc = hy_store_list(r->s->store, f, 0, NULL, 0, &n, &k, &e);
        if (rc) return h_from_err(r, rc, &e);
        total = k;
    }
    /* one more than the page: whether a next page exists */
    hy_meta *ms = malloc(((size_t)page + 1) * sizeof *ms);
    pb_meta *pm = calloc((size_t)page + 1, sizeof *pm);
    Hypic__V1__EntryMeta **pp = calloc((size_t)page + 1, sizeof *pp);
    hy_rpc_code c;
    if (!ms || !pm || !pp) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    size_t n = 0, cnt = 0;
    hy_store_list_after(r->s->store, f, t[0] ? &after : NULL, ms, (size_t)page + 1, &n);
    for (size_t i = 0; i < n && i < page; i++) {
        unsigned mask = 0;
        if (hy_store_tiers_of(r->s->store, &ms[i].key, &mask)) continue; /* gone meanwhile */
        h_meta_to_pb(r->s, &ms[i], mask, &pm[cnt]);
        pp[cnt] = &pm[cnt].pb;
        cnt++;
    }
    char next[80] = "", hex[65];
    if (n > page) {
        hy_key_hex(&ms[page - 1].key, hex);
        snprintf(next, sizeof next, "k%s.%llu", hex, total);
    }
    Hypic__V1__ListResponse resp = HYPIC__V1__LIST_RESPONSE__INIT;
    resp.n_entries = cnt;
    resp.entries = pp;
    resp.next_page_token = next;
    resp.total = total;
    c = h_send(r, &resp.base);
out:
    free(ms);
    free(pm);
    free(pp);
    return c;
}

hy_rpc_code do_list(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__ListRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = h_check_tenant(r, q->tenant))) return c;
    hy_store_filter f = {.tenant = r->who.tenant, .tag = q->tag[0] ? q->tag : NULL};
    if (q->model[0]) {
        svc_model *sm;
        if ((c = h_need_model(r, q->model, &sm))) return c;
        f.model = sm->fp;
    }
    if ((int)q->sort < 0 || q->sort > HYPIC__V1__LIST_REQUEST__SORT__SORT_AGE)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'sort': %d is not a Sort", (int)q->sort);
    const hy_tier_id tier = tier_from_pb(q->tier);
    if (q->tier != HYPIC__V1__TIER__TIER_NONE && tier == HY_TIER_NONE)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tier': %d is not a Tier", (int)q->tier);
    const uint32_t page = q->page_size ? q->page_size : HY_MIN(100u, r->s->cfg.page_size);
    if (page > r->s->cfg.page_size)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'page_size': %u is over the limit of %u (limits.page_size)", page,
                      r->s->cfg.page_size);
    if (q->sort == HYPIC__V1__LIST_REQUEST__SORT__SORT_KEY && !q->descending &&
        q->tier == HYPIC__V1__TIER__TIER_NONE)
        return list_by_key(r, q, &f, page);
    size_t offset = 0;
    if (q->page_token[0]) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(q->page_token, &end, 10);
        /* digits only: strtoull would take "-1" (as a huge number) and " 5" */
        if (*end || end == q->page_token || !isdigit((unsigned char)q->page_token[0]) || errno)
            return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                          "field 'page_token': not a token this server gave");
        offset = (size_t)v;
    }
    /* every match, then filter by tier, sort and slice */
    hy_err e = {0};
    size_t n = 0, total = 0;
    int rc = hy_store_list(r->s->store, &f, 0, NULL, 0, &n, &total, &e);
    if (rc) return h_from_err(r, rc, &e);
    if (total > LIST_SORT_MAX)
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                      "%zu entries match: over %d cannot be listed at once; filter by tag or model",
                      total, LIST_SORT_MAX);
    hy_meta *all = malloc((total ? total : 1) * sizeof *all);
    listed *ls = malloc((total ? total : 1) * sizeof *ls);
    Hypic__V1__ListResponse resp = HYPIC__V1__LIST_RESPONSE__INIT;
    pb_meta *pm = NULL;
    Hypic__V1__EntryMeta **pp = NULL;
    if (!all || !ls) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    if ((rc = hy_store_list(r->s->store, &f, 0, all, total, &n, NULL, &e))) {
        c = h_from_err(r, rc, &e);
        goto out;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned mask = 0;
        if (hy_store_tiers_of(r->s->store, &all[i].key, &mask)) continue; /* gone meanwhile */
        if (tier != HY_TIER_NONE && !(mask & (1u << tier))) continue;
        ls[m].m = all[i];
        ls[m++].mask = mask;
    }
    pthread_mutex_lock(&g_sort_mu);
    g_sort = q->sort;
    qsort(ls, m, sizeof *ls, cmp_listed);
    pthread_mutex_unlock(&g_sort_mu);
    if (q->descending)
        for (size_t i = 0; i < m / 2; i++) {
            listed t = ls[i];
            ls[i] = ls[m - 1 - i];
            ls[m - 1 - i] = t;
        }
    const size_t from = HY_MIN(offset, m), cnt = HY_MIN((size_t)page, m - from);
    pm = calloc(cnt ? cnt : 1, sizeof *pm);
    pp = calloc(cnt ? cnt : 1, sizeof *pp);
    if (!pm || !pp) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < cnt; i++) {
        h_meta_to_pb(r->s, &ls[from + i].m, ls[from + i].mask, &pm[i]);
        pp[i] = &pm[i].pb;
    }
    char next[32] = "";
    if (from + cnt < m) snprintf(next, sizeof next, "%zu", from + cnt);
    resp.n_entries = cnt;
    resp.entries = pp;
    resp.next_page_token = next;
    resp.total = m;
    c = h_send(r, &resp.base);
out:
    free(all);
    free(ls);
    free(pm);
    free(pp);
    return c;
}

hy_rpc_code do_inspect(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__InspectRequest *q = (const void *)req;
    hy_rpc_code c;
    hy_key k;
    if ((c = h_check_tenant(r, q->tenant)) || (c = h_key_of(r, "key", q->key, &k))) return c;
    hy_meta m;
    unsigned mask;
    if (!h_visible(r, NULL, &k, &m, &mask)) return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    const svc_model *sm = svc_model_by_fp(r->s, m.model);
    if (!sm)
        return h_fail(r, HY_RPC_FAILED_PRECONDITION,
                      "the entry is of a model this server no longer serves");
    hy_lease *l;
    hy_err e = {0};
    int rc = hy_store_acquire(r->s->store, &k, &l, &e);
    /* HY_EFORMAT: its only copy (NVMe) failed its checksums and was dropped */
    if (rc == HY_ENOTFOUND || rc == HY_EFORMAT)
        return h_fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    if (rc) return h_from_err(r, rc, &e);
    hy_entry *ent = NULL;
    rc = hy_entry_deserialize(sm->m, hy_lease_data(l), hy_lease_meta(l)->bytes, &ent, &e);
    hy_store_release(r->s->store, l);
    if (rc == HY_ENOMEM) return h_from_err(r, rc, &e); /* no room to look: not the bytes' fault */
    if (rc) /* reported, not removed: an operator is looking at it */
        return h_fail(r, HY_RPC_DATA_LOSS, "the entry's bytes fail validation: %s", e.msg);
    hy_entry_section secs[1 + 3 * HY_MAX_LAYERS];
    const size_t ns = hy_entry_sections(ent, secs, sizeof secs / sizeof *secs);
    Hypic__V1__Section *sp = calloc(ns ? ns : 1, sizeof *sp);
    Hypic__V1__Section **spp = calloc(ns ? ns : 1, sizeof *spp);
    if (!sp || !spp) {
        free(sp);
        free(spp);
        hy_entry_free(ent);
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    }
    for (size_t i = 0; i < ns; i++) {
        Hypic__V1__Section init = HYPIC__V1__SECTION__INIT;
        sp[i] = init;
        sp[i].name = (char *)secs[i].name;
        sp[i].layer = secs[i].layer;
        sp[i].bytes = secs[i].bytes;
        sp[i].checksum_ok = q->verify; /* decoding checked every section's checksum */
        spp[i] = &sp[i];
    }
    pb_meta pm;
    h_meta_to_pb(r->s, &m, mask, &pm);
    Hypic__V1__InspectResponse resp = HYPIC__V1__INSPECT_RESPONSE__INIT;
    resp.meta = &pm.pb;
    resp.seam = (uint32_t)hy_entry_seam_setting(ent);
    resp.seam_tokens = (uint32_t)hy_entry_seam_width(ent);
    resp.body_tokens = (uint32_t)hy_entry_body_tokens(ent);
    resp.dtype = hy_entry_dtype_of(ent) == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                                         : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    resp.format_version = (uint32_t)hy_entry_version(ent);
    Hypic__V1__Representation rpb;
    h_repr_to_pb(hy_entry_repr_of(ent), &rpb);
    resp.repr = &rpb;
    resp.n_sections = ns;
    resp.sections = spp;
    resp.verified = q->verify;
    c = h_send(r, &resp.base);
    free(sp);
    free(spp);
    hy_entry_free(ent);
    return c;
}

/* --- Watch ----------------------------------------------------------------------------- */

hy_rpc_code do_watch(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__WatchRequest *q = (const void *)req;
    hy_svc *s = r->s;
    svc_hub *h = &s->hub;
    hy_rpc_code c;
    svc_model *sm = NULL;
    if ((c = h_check_tenant(r, q->tenant))) return c;
    if (q->model[0] && (c = h_need_model(r, q->model, &sm))) return c;
    if (!svc_watch_enter(s, &r->who))
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                      "tenant '%s' has %u Watch streams open, its limit "
                      "(limits.watchers_per_tenant)",
                      r->who.tenant, s->cfg.watchers_per_tenant);
    svc_lock(&h->mu);
    if ((uint32_t)h->watchers >= s->cfg.watchers) {
        svc_unlock(&h->mu);
        svc_watch_leave(s, &r->who);
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                      "%d Watch streams are open, the limit (limits.watchers)", h->watchers);
    }
    h->watchers++;
    uint64_t seq = h->next;
    svc_event *batch = malloc(64 * sizeof *batch);
    double last_sent = hy_now_s();
    while (!c && batch) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1; /* wake up to notice draining and the deadline */
        while (h->next == seq && !s->draining && !h->closing && hy_rpc_call_ms_left(r->call) > 0)
            if (pthread_cond_timedwait(&h->cv, &h->mu, &until)) break;
        if (s->draining || h->closing) {
            c = h_fail(r, HY_RPC_UNAVAILABLE, "the server is shutting down");
            break;
        }
        if (hy_rpc_call_ms_left(r->call) <= 0) {
            c = h_fail(r, HY_RPC_DEADLINE_EXCEEDED, "the Watch deadline passed");
            break;
        }
        if (h->next - seq > SVC_HUB_RING) {
            c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                       "this watcher fell more than %d events behind; watch again", SVC_HUB_RING);
            break;
        }
        size_t nb = 0;
        while (seq < h->next && nb < 64) batch[nb++] = h->ring[seq++ % SVC_HUB_RING];
        svc_unlock(&h->mu);
        /* A heartbeat after a quiet spell: a client that went away is only
         * noticed when a send fails, and it must not hold a worker and a
         * watcher slot until its tenant's next event. */
        if (hy_now_s() - last_sent >= SVC_WATCH_HEARTBEAT_S) {
            Hypic__V1__WatchEvent hb = HYPIC__V1__WATCH_EVENT__INIT;
            hb.kind = HYPIC__V1__WATCH_EVENT__KIND__KIND_HEARTBEAT;
            c = h_send(r, &hb.base);
            last_sent = hy_now_s();
        }
        for (size_t i = 0; i < nb && !c; i++) {
            svc_event *ev = &batch[i];
            if (strcmp(ev->meta.tenant, r->who.tenant) != 0) continue;
            if (sm && memcmp(ev->meta.model, sm->fp, 32) != 0) continue;
            pb_meta pm;
            h_meta_to_pb(s, &ev->meta, 0, &pm);
            Hypic__V1__WatchEvent we = HYPIC__V1__WATCH_EVENT__INIT;
            we.kind = ev->kind == HY_STORE_STORED ? HYPIC__V1__WATCH_EVENT__KIND__KIND_STORED
                                                  : HYPIC__V1__WATCH_EVENT__KIND__KIND_REMOVED;
            we.meta = &pm.pb;
            we.reason = ev->kind == HY_STORE_REMOVED ? ev->reason : "";
            c = h_send(r, &we.base);
            last_sent = hy_now_s();
        }
        svc_lock(&h->mu);
    }
    assert(h->watchers > 0); /* this stream's, counted when it opened */
    h->watchers--;
    svc_unlock(&h->mu);
    svc_watch_leave(s, &r->who);
    free(batch);
    if (!batch && !c) c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return c;
}

/* --- Stats, policies, health --------------------------------------------------------- */

hy_rpc_code do_stats(rq *r, const ProtobufCMessage *req)
{
    (void)req;
    hy_svc *s = r->s;
    hy_store_stats st;
    hy_store_stats_get(s->store, &st);
    Hypic__V1__TierStats ts[3], *tsp[3];
    static const hy_tier_id order[3] = {HY_TIER_HBM, HY_TIER_HOST, HY_TIER_NVME};
    for (int i = 0; i < 3; i++) {
        Hypic__V1__TierStats init = HYPIC__V1__TIER_STATS__INIT;
        ts[i] = init;
        tsp[i] = &ts[i];
        ts[i].tier = h_pb_tier(order[i]);
    }
    ts[0].present = st.hbm_present;
    ts[0].why_absent = st.hbm_present ? "" : st.hbm_why;
    ts[0].capacity = st.hbm_capacity;
    ts[1].present = true;
    ts[1].capacity = st.host_capacity ? st.host_capacity : st.arena.capacity;
    ts[2].present = s->cfg.nvme_dir[0] != '\0';
    ts[2].why_absent = ts[2].present ? "" : "no tiers.nvme.path in the configuration";
    ts[2].capacity = s->cfg.nvme_dir[0] ? s->cfg.nvme_bytes : 0;
    Hypic__V1__StatsResponse resp = HYPIC__V1__STATS_RESPONSE__INIT;
    h_tp_stats tps;
    h_transport_stats(s, &tps);
    if (r->who.admin) resp.transport = &tps.pb; /* every tenant's sessions */
    if (r->who.admin) {                         /* the whole store */
        ts[0].entries = st.hbm_entries, ts[0].bytes = st.hbm_bytes, ts[0].hits = st.hits_hbm;
        ts[0].evictions = st.hbm_evictions, ts[0].promotions = st.hbm_promotions;
        ts[0].demotions = st.hbm_demotions;
        ts[1].entries = st.host_entries, ts[1].bytes = st.host_bytes, ts[1].hits = st.hits_host;
        ts[1].evictions = st.evictions, ts[1].promotions = st.promotions;
        ts[1].demotions = st.demotions;
        ts[2].entries = st.nvme_entries, ts[2].bytes = st.nvme.live_bytes;
        ts[2].hits = st.hits_nvme;
        resp.entries = st.entries;
        resp.misses = st.misses;
        resp.puts = st.puts;
        resp.puts_dropped = st.puts_dropped;
        resp.expired = st.expired;
        resp.invalidated = st.invalidated;
        resp.checksum_failures = st.checksum_failures;
        /* the calls besides this one: an idle daemon answers 0 (the gauge,
         * hypic_requests_in_flight, counts every call inside a handler) */
        const int others = atomic_load(&s->in_flight) - 1;
        resp.requests_in_flight = others > 0 ? (uint64_t)others : 0;
        resp.queue_depth = (uint64_t)atomic_load(&s->queued);
    } else { /* a tenant sees its own entries and nothing of others' */
        hy_store_filter f = {.tenant = r->who.tenant};
        size_t n = 0, total = 0;
        hy_err e = {0};
        hy_store_list(s->store, &f, 0, NULL, 0, &n, &total, &e);
        resp.entries = total;
        ts[1].bytes = hy_store_tenant_bytes(s->store, r->who.tenant);
    }
    for (int i = 0; i < 3; i++) /* what a GiB, and the capacity, hold at the mean size now */
        if (ts[i].entries && ts[i].bytes) {
            const double mean = (double)ts[i].bytes / (double)ts[i].entries;
            ts[i].entries_per_gib = (double)(1ull << 30) / mean;
            ts[i].capacity_entries = (uint64_t)((double)ts[i].capacity / mean);
        }
    /* entries built since the start, by representation (admins) */
    svc_repr_row rows[SVC_REPRS];
    int nrows = 0;
    if (r->who.admin) {
        pthread_mutex_lock(&s->reprs.mu);
        nrows = s->reprs.n;
        memcpy(rows, s->reprs.row, sizeof rows);
        pthread_mutex_unlock(&s->reprs.mu);
    }
    Hypic__V1__ReprStats rs[SVC_REPRS], *rsp[SVC_REPRS];
    Hypic__V1__Representation rpb[SVC_REPRS];
    Hypic__V1__FormCount fc[SVC_REPRS][2][HY_FORM_COUNT], *fcp[SVC_REPRS][2][HY_FORM_COUNT];
    for (int i = 0; i < nrows; i++) {
        Hypic__V1__ReprStats init = HYPIC__V1__REPR_STATS__INIT;
        rs[i] = init;
        rsp[i] = &rs[i];
        h_repr_to_pb(rows[i].repr, &rpb[i]);
        rs[i].repr = &rpb[i];
        rs[i].dtype = rows[i].repr.s == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                                      : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
        rs[i].entries = rows[i].entries, rs[i].bytes = rows[i].bytes;
        rs[i].body_tokens = rows[i].body_tokens;
        for (int part = 0; part < 2; part++) {
            size_t k = 0;
            for (int f = 0; f < HY_FORM_COUNT; f++) {
                const uint64_t h = part ? rows[i].s_heads[f] : rows[i].t_heads[f];
                if (!h) continue;
                Hypic__V1__FormCount fi = HYPIC__V1__FORM_COUNT__INIT;
                fc[i][part][k] = fi;
                fc[i][part][k].form = (char *)hy_entry_form_name((hy_entry_form)f);
                fc[i][part][k].heads = h;
                fcp[i][part][k] = &fc[i][part][k];
                k++;
            }
            if (part)
                rs[i].n_s_heads = k, rs[i].s_heads = fcp[i][1];
            else
                rs[i].n_t_heads = k, rs[i].t_heads = fcp[i][0];
        }
    }
    resp.n_reprs = (size_t)nrows;
    resp.reprs = rsp;
    /* the quality watch (admins) */
    svc_shadow_row sh[HY_CFG_MAX_MODELS * HY_MODE_COUNT];
    const size_t nsh = r->who.admin ? svc_shadow_rows(s, sh, sizeof sh / sizeof sh[0]) : 0;
    Hypic__V1__ShadowStats shs[HY_CFG_MAX_MODELS * HY_MODE_COUNT],
        *shp[HY_CFG_MAX_MODELS * HY_MODE_COUNT];
    for (size_t i = 0; i < nsh; i++) {
        Hypic__V1__ShadowStats init = HYPIC__V1__SHADOW_STATS__INIT;
        shs[i] = init;
        shp[i] = &shs[i];
        shs[i].model = s->models[sh[i].model].name;
        shs[i].mode = (Hypic__V1__Mode)(sh[i].mode + 1);
        shs[i].compared = sh[i].compared;
        shs[i].kl_mean = sh[i].compared ? sh[i].kl_sum / (double)sh[i].compared : 0;
        shs[i].kl_max = sh[i].kl_max;
        shs[i].top1_agreement =
            sh[i].compared ? (double)sh[i].top1_agree / (double)sh[i].compared : 0;
        shs[i].over_threshold = sh[i].over_threshold;
        shs[i].dropped = sh[i].dropped;
        shs[i].failed = sh[i].failed;
        shs[i].seconds = sh[i].seconds;
    }
    resp.n_shadow = nsh;
    resp.shadow = shp;
    Hypic__V1__WorkerStats **ws = NULL;
    size_t nws = 0;
    if (r->who.admin) svc_router_stats(s, &ws, &nws); /* the scatter workers */
    resp.n_workers = nws;
    resp.workers = ws;
    svc_cluster_pb cs;
    svc_cluster_stats(s, &cs); /* the members' view: ids and addresses, no tenant's data */
    if (s->cluster) resp.cluster = &cs.pb;
    resp.n_tiers = 3;
    resp.tiers = tsp;
    hy_rpc_code c = h_send(r, &resp.base);
    svc_cluster_stats_free(&cs);
    svc_router_stats_free(ws, nws);
    return c;
}

static hy_rpc_code policy_reply(rq *r, hy_tier_id t)
{
    hy_policy_config p;
    hy_err e = {0};
    if (hy_store_get_policy(r->s->store, t, &p, &e))
        return h_fail(r, HY_RPC_FAILED_PRECONDITION, "this server has no %s tier",
                      t == HY_TIER_HBM    ? "hbm"
                      : t == HY_TIER_NVME ? "NVMe"
                                          : "host");
    Hypic__V1__Policy resp = HYPIC__V1__POLICY__INIT;
    resp.tier = h_pb_tier(t);
    resp.evict = (char *)hy_evict_name(p.evict);
    resp.admit = (char *)hy_admit_name(p.admit);
    resp.min_tokens = p.min_tokens;
    return h_send(r, &resp.base);
}

hy_rpc_code do_get_policy(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__GetPolicyRequest *q = (const void *)req;
    const hy_tier_id t = tier_from_pb(q->tier);
    if (t == HY_TIER_NONE)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tier': name a tier (HBM, HOST or NVME)");
    return policy_reply(r, t);
}

hy_rpc_code do_set_policy(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__SetPolicyRequest *q = (const void *)req;
    if (!q->policy) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'policy' is missing");
    const hy_tier_id t = tier_from_pb(q->policy->tier);
    if (t == HY_TIER_NONE)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'policy.tier': name a tier (HBM, HOST or NVME)");
    char admit[48];
    snprintf(admit, sizeof admit, "%s", q->policy->admit);
    if (strcmp(admit, "min-tokens") == 0)
        snprintf(admit, sizeof admit, "min-tokens %u", q->policy->min_tokens);
    hy_policy_config p;
    hy_err e = {0};
    if (hy_policy_parse(q->policy->evict, admit, &p, &e))
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'policy': %s", e.msg);
    if (hy_store_set_policy(r->s->store, t, &p, &e))
        return h_fail(r, HY_RPC_FAILED_PRECONDITION, "%s", e.msg);
    hy_log(HY_LOG_INFO, "policy of tier %s set to %s/%s by tenant '%s'",
           t == HY_TIER_HBM    ? "hbm"
           : t == HY_TIER_NVME ? "nvme"
                               : "host",
           hy_evict_name(p.evict), hy_admit_name(p.admit), r->who.tenant);
    return policy_reply(r, t);
}

hy_rpc_code do_health(rq *r, const ProtobufCMessage *req)
{
    (void)req;
    hy_svc *s = r->s;
    char *names[HY_CFG_MAX_MODELS], *formats[HY_CFG_MAX_MODELS];
    uint64_t wbytes[HY_CFG_MAX_MODELS];
    for (int i = 0; i < s->nmodels; i++) {
        names[i] = s->models[i].name;
        formats[i] = (char *)hy_model_weights_name(s->models[i].m);
        wbytes[i] = s->models[i].wbytes;
    }
    Hypic__V1__HealthResponse resp = HYPIC__V1__HEALTH_RESPONSE__INIT;
    resp.status = s->ready && !s->draining ? HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING
                                           : HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_NOT_SERVING;
    resp.version = HY_CACHED_VERSION;
    resp.n_models = (size_t)s->nmodels;
    resp.models = names;
    resp.n_model_weights = resp.n_model_weight_bytes = (size_t)s->nmodels;
    resp.model_weights = formats;
    resp.model_weight_bytes = wbytes;
    return h_send(r, &resp.base);
}
