/*
 * Lookup, Warm and Prefill: the methods that hash segments into their keys,
 * build entries and run the model (handlers_internal.h).
 */
#include "cluster_internal.h"
#include "handlers_internal.h"
#include "land_internal.h"
#include "put_internal.h"
#include "router_internal.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* --- Lookup --------------------------------------------------------------------- */

/* Cluster mode: the segments this member does not have, asked of their
 * owners — first each one's best owner (one Lookup per member, its keys
 * together), then the next owner for what is still missing (r > 1). A
 * member that does not answer leaves its segments misses. Returns the view
 * used (NULL on one node), to be put once the response is sent. */
static svc_view *lookup_on_owners(rq *r, svc_model *sm, const seg *sg, const hy_key *key,
                                  Hypic__V1__SegmentStatus *st, size_t n)
{
    svc_view *v = svc_view_get(r->s);
    if (!v) return NULL;
    svc_peer *(*own)[HY_OWNERS_MAX] = calloc(n, sizeof *own);
    size_t *nown = calloc(n, sizeof *nown), *idx = calloc(n, sizeof *idx);
    hy_key *keys = calloc(n, sizeof *keys);
    Hypic__V1__SegmentStatus *got = calloc(n, sizeof *got);
    if (!own || !nown || !idx || !keys || !got) goto out;
    bool self;
    for (size_t i = 0; i < n; i++)
        if (!st[i].hit) nown[i] = svc_view_owners(r->s, v, r->who.tenant, &key[i], own[i], &self);
    for (size_t rank = 0; rank < HY_OWNERS_MAX; rank++) {
        bool any = false;
        for (size_t i = 0; i < n; i++) { /* a member with segments at this rank, then its batch */
            if (st[i].hit || rank >= nown[i] || !own[i][rank] || own[i][rank]->self) continue;
            svc_peer *p = own[i][rank];
            size_t k = 0;
            for (size_t j = i; j < n; j++)
                if (!st[j].hit && rank < nown[j] && own[j][rank] == p) {
                    idx[k] = j;
                    keys[k++] = key[j];
                    own[j][rank] = NULL; /* asked */
                }
            for (size_t j = 0; j < k; j++) {
                Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
                got[j] = init;
            }
            hy_err e = {0};
            svc_cluster_count_forward(r->s);
            if (svc_cluster_lookup(r->s, p, sm->name, r->who.tenant, keys, k, got, &e)) {
                hy_log(HY_LOG_DEBUG, "cluster: %s (its segments taken as misses)", e.msg);
                continue;
            }
            for (size_t j = 0; j < k; j++) {
                if (!got[j].hit) continue;
                Hypic__V1__SegmentStatus *o = &st[idx[j]];
                o->hit = true;
                o->tier = got[j].tier;
                o->bytes = got[j].bytes;
                if (sg[idx[j]].by_key) o->tokens = got[j].tokens;
                o->member = p->id; /* the view outlives the response: sent before it is put */
            }
            any = true;
        }
        if (!any && rank > 0) break;
    }
out:
    free(own);
    free(nown);
    free(idx);
    free(keys);
    free(got);
    return v; /* the caller's, until the response is sent: member names point into it */
}

hy_rpc_code do_lookup(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__LookupRequest *q = (const void *)req;
    svc_model *sm;
    hy_rpc_code c;
    int W;
    hy_entry_repr rp;
    seg *sg = NULL;
    if ((c = h_keyed_fields(r, q->tenant, q->model,
                            q->seam_opt_case == HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM, q->seam,
                            q->dtype, &sm, &W, &rp)) ||
        (c = h_need_member(r, q->local_only)) ||
        (c = h_segs_parse(r, sm, q->segments, q->n_segments, 0, true, &sg)))
        return c;
    if (q->lease_ms > r->s->cfg.max_lease_ms) {
        h_segs_free(r, sg, q->n_segments);
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'lease_ms': %u is over the limit of %u",
                      q->lease_ms, r->s->cfg.max_lease_ms);
    }
    const size_t n = q->n_segments;
    Hypic__V1__SegmentStatus *st = calloc(n, sizeof *st);
    Hypic__V1__SegmentStatus **sp = calloc(n, sizeof *sp);
    hy_lease **leases = q->lease_ms ? calloc(n, sizeof *leases) : NULL;
    size_t nleases = 0;
    svc_view *held = NULL;
    Hypic__V1__LookupResponse resp = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    if (!st || !sp || (q->lease_ms && !leases)) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
        st[i] = init;
        sp[i] = &st[i];
        if (!sg[i].by_key)
            hy_entry_key(r->who.tenant, sm->fp, W, rp, sg[i].tok, sg[i].n, sg[i].key.b);
        st[i].key = (ProtobufCBinaryData){HY_KEY_BYTES, sg[i].key.b};
        hy_meta m;
        unsigned mask = 0;
        bool hit = h_visible(r, sm, &sg[i].key, &m, &mask);
        if (hit && leases) {
            hy_err e = {0};
            hit = hy_store_acquire(r->s->store, &sg[i].key, &leases[nleases], &e) == HY_OK;
            if (hit) nleases++;
        }
        st[i].hit = hit;
        st[i].tier = hit ? h_pb_tier(h_fastest(mask)) : HYPIC__V1__TIER__TIER_NONE;
        st[i].bytes = hit ? m.bytes : 0;
        st[i].tokens = sg[i].by_key ? (hit ? m.tokens : 0) : (uint32_t)sg[i].n;
        if (hit) st[i].member = (char *)r->s->cfg.cluster_id;
    }
    if (r->s->cluster && !q->local_only) {
        hy_key *keys = malloc(n * sizeof *keys);
        for (size_t i = 0; keys && i < n; i++) keys[i] = sg[i].key;
        if (keys) held = lookup_on_owners(r, sm, sg, keys, st, n);
        free(keys);
    }
    bool leading = true;
    for (size_t i = 0; i < n; i++) {
        leading &= st[i].hit;
        if (leading) resp.leading_hits++, resp.leading_tokens += st[i].tokens;
        r->hits += st[i].hit;
        r->misses += !st[i].hit;
    }
    resp.n_segments = n;
    resp.segments = sp;
    if (leases && nleases) {
        char why[256];
        resp.lease_id =
            svc_lease_add(r->s, r->who.tenant, leases, nleases, q->lease_ms, why, sizeof why);
        leases = NULL; /* the lease table owns them, or they are released */
        if (!resp.lease_id) {
            c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "field 'lease_ms': %s", why);
            goto out;
        }
    }
    c = h_send(r, &resp.base);
out:
    if (leases) {
        for (size_t i = 0; i < nleases; i++) hy_store_release(r->s->store, leases[i]);
        free(leases);
    }
    svc_view_put(held);
    free(st);
    free(sp);
    h_segs_free(r, sg, q->n_segments);
    return c;
}

/* --- Warm ----------------------------------------------------------------------- */

/* Cluster mode: whether an owner other than this member holds key k (its
 * size into *bytes, its id into member). */
static bool h_on_owners(rq *r, svc_model *sm, const hy_key *k, uint64_t *bytes,
                        char member[HY_MEMBER_ID_MAX])
{
    svc_view *v = svc_view_get(r->s);
    if (!v) return false;
    svc_peer *own[HY_OWNERS_MAX];
    bool self, hit = false;
    const size_t n = svc_view_owners(r->s, v, r->who.tenant, k, own, &self);
    for (size_t i = 0; i < n && !hit; i++) {
        if (own[i]->self) continue;
        Hypic__V1__SegmentStatus st = HYPIC__V1__SEGMENT_STATUS__INIT;
        hy_err e = {0};
        if (svc_cluster_lookup(r->s, own[i], sm->name, r->who.tenant, k, 1, &st, &e) == HY_OK &&
            st.hit) {
            hit = true;
            *bytes = st.bytes;
            snprintf(member, HY_MEMBER_ID_MAX, "%s", own[i]->id);
        }
    }
    svc_view_put(v);
    return hit;
}

hy_rpc_code do_warm(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__WarmRequest *q = (const void *)req;
    svc_model *sm;
    hy_rpc_code c;
    int W;
    hy_entry_repr rp;
    seg *sg = NULL;
    if ((c = h_keyed_fields(r, q->tenant, q->model,
                            q->seam_opt_case == HYPIC__V1__WARM_REQUEST__SEAM_OPT_SEAM, q->seam,
                            q->dtype, &sm, &W, &rp)) ||
        (c = h_segs_parse(r, sm, q->segments, q->n_segments, 0, false, &sg)))
        return c;
    h_set_threads(r->s);
    for (size_t i = 0; i < q->n_segments && !c; i++) {
        const double t0 = hy_now_s();
        Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
        p.index = (uint32_t)i;
        hy_entry_key(r->who.tenant, sm->fp, W, rp, sg[i].tok, sg[i].n, sg[i].key.b);
        p.key = (ProtobufCBinaryData){HY_KEY_BYTES, sg[i].key.b};
        hy_meta m;
        int w;
        hy_err e = {0};
        if (hy_rpc_call_ms_left(r->call) <= 0) {
            c = h_fail(r, HY_RPC_DEADLINE_EXCEEDED, "the deadline passed after %zu of %zu segments",
                       i, q->n_segments);
            break;
        }
        char member[HY_MEMBER_ID_MAX] = "";
        uint64_t held = 0;
        if (h_visible(r, sm, &sg[i].key, &m, NULL) ||
            h_on_owners(r, sm, &sg[i].key, &held, member)) {
            p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED;
            p.bytes = member[0] ? held : m.bytes;
            if (!member[0]) snprintf(member, sizeof member, "%s", r->s->cfg.cluster_id);
            r->hits++;
        } else if (hy_entry_seam(sm->c, sg[i].n, W, &w, &e) != HY_OK) {
            p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_UNCACHEABLE;
            p.error = e.msg;
        } else {
            svc_exec *x;
            if ((c = svc_exec_take(r->s, sm, r->call, &x, r->msg, sizeof r->msg))) break;
            hy_state_reset(x->st);
            hy_entry *ent = NULL;
            int rc = hy_entry_build(x->ex, x->st, sg[i].tok, sg[i].n, W, rp, NULL, &ent, &e);
            svc_exec_give(r->s, sm, x);
            hy_tier_id placed = HY_TIER_NONE;
            uint64_t bytes = 0;
            if (!rc)
                rc = put_entry(r->s, sm, r->who.tenant, &sg[i].key, ent, sg[i].tags, sg[i].ntags,
                               &placed, &bytes, member, &e);
            hy_entry_free(ent);
            r->computed += (int64_t)sg[i].n;
            r->misses++;
            if (rc) {
                p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED;
                p.error = e.msg;
            } else {
                /* another member's to admit: sent to it */
                const bool away = member[0] && strcmp(member, r->s->cfg.cluster_id) != 0;
                p.state = placed == HY_TIER_NONE && !away
                              ? HYPIC__V1__WARM_PROGRESS__STATE__STATE_NOT_ADMITTED
                              : HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
                p.tier = h_pb_tier(placed);
                p.bytes = bytes;
            }
        }
        p.ms = (hy_now_s() - t0) * 1e3;
        p.member = member;
        c = h_send(r, &p.base);
    }
    h_segs_free(r, sg, q->n_segments);
    return c;
}

/* --- Build ---------------------------------------------------------------------- */

/* A Build's stream while its entry is built: each layer's sections leave as
 * soon as the executor has finished that layer (hy_entry_build_streamed),
 * placed at their offsets in the serialised form, so a layer's transfer
 * overlaps the next layers' compute; the header, with every checksum, last.
 * The first chunk carries the metadata. */
typedef struct build_stream {
    rq *r;
    svc_model *sm;
    seg *sg;
    int W;
    hy_entry_repr rp;
    uint8_t *buf; /* the serialised entry, filled layer by layer */
    size_t total, chunk;
    pb_meta pm;
    hy_meta m;
    bool sent_meta;
    hy_rpc_code c; /* the first send that failed: the rest are skipped */
    int layers_sent;
    int next_layer; /* after the last layer sent: the rest leave at the end */
} build_stream;

static void build_send(build_stream *b, size_t lo, size_t hi)
{
    for (size_t off = lo; off < hi && !b->c; off += b->chunk) {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if (!b->sent_meta) ch.meta = &b->pm.pb;
        b->sent_meta = true;
        ch.placement_case = HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET;
        ch.offset = off;
        ch.data = (ProtobufCBinaryData){HY_MIN(b->chunk, hi - off), b->buf + off};
        b->c = h_send(b->r, &ch.base);
    }
}

/* The stream's buffer and metadata, once the entry's size is known: at its
 * first layer when its forms follow from its shapes, else when it is done. */
static bool build_start(build_stream *b, const hy_entry *e)
{
    if (b->buf) return true;
    b->total = hy_entry_serialized_bytes(e);
    if (!b->total || !(b->buf = calloc(1, b->total))) {
        b->c = h_fail(b->r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory for the entry");
        return false;
    }
    hy_meta *m = &b->m;
    memset(m, 0, sizeof *m);
    hy_entry_key(b->r->who.tenant, b->sm->fp, b->W, b->rp, b->sg->tok, b->sg->n, m->key.b);
    snprintf(m->tenant, sizeof m->tenant, "%s", b->r->who.tenant);
    memcpy(m->model, b->sm->fp, 32);
    for (size_t i = 0; i < b->sg->ntags && i < HY_MAX_TAGS; i++)
        snprintf(m->tags[m->ntags++], HY_TAG_MAX, "%s", b->sg->tags[i]);
    m->tokens = (uint32_t)b->sg->n;
    m->flops = hy_config_prefill_flops(b->sm->c, 0, hy_entry_body_tokens(e));
    m->bytes = b->total;
    m->created_ns = hy_wall_ns();
    h_meta_to_pb(b->r->s, m, 0, &b->pm);
    return true;
}

/* A layer is final: its sections leave now when the entry's size is known
 * already; an entry whose heads' forms are chosen as it is built (a
 * tolerance) leaves whole at the end. */
static void build_layer(void *ctx, const hy_entry *e, int layer)
{
    build_stream *b = ctx;
    if (b->c) return; /* the caller is gone: build on, send nothing */
    if (!hy_entry_size_known(e) || !build_start(b, e)) return;
    size_t lo, hi;
    if (hy_entry_serialize_layer(e, b->buf, layer, &lo, &hi)) {
        b->c = h_fail(b->r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory serialising the entry");
        return;
    }
    build_send(b, lo, hi);
    b->layers_sent++;
    b->next_layer = layer + 1;
}

/* The rest of the entry once it is built: every layer not sent yet, then
 * the header and the tokens. */
static void build_finish(build_stream *b, const hy_entry *e)
{
    if (b->c || !build_start(b, e)) return;
    size_t lo, hi;
    for (int l = b->next_layer; l < hy_entry_layers(e) && !b->c; l++) {
        if (hy_entry_serialize_layer(e, b->buf, l, &lo, &hi)) {
            b->c = h_fail(b->r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory serialising the entry");
            return;
        }
        build_send(b, lo, hi);
    }
    if (!b->c && hy_entry_serialize_finish(e, b->buf, &hi))
        b->c = h_fail(b->r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory serialising the entry");
    if (!b->c) build_send(b, 0, hi); /* the header and the tokens, last */
}

/* One segment built from the empty state, as Warm builds it, and streamed
 * back unstored: a scatter worker's job. The bytes are checked by whoever
 * stores them. */
hy_rpc_code do_build(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__BuildRequest *q = (const void *)req;
    svc_model *sm;
    hy_rpc_code c;
    int W, w;
    hy_entry_repr rp;
    seg *sg = NULL;
    if ((c = h_keyed_fields(r, q->tenant, q->model,
                            q->seam_opt_case == HYPIC__V1__BUILD_REQUEST__SEAM_OPT_SEAM, q->seam,
                            q->dtype, &sm, &W, &rp)) ||
        (c = h_repr_of(r, q->repr, &rp)))
        return c;
    if (!q->tokens || q->tokens->n_ids == 0)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tokens' is empty: a segment to build");
    Hypic__V1__Segment one = HYPIC__V1__SEGMENT__INIT, *onep = &one;
    one.ref_case = HYPIC__V1__SEGMENT__REF_TOKENS;
    one.tokens = q->tokens;
    one.n_tags = q->n_tags;
    one.tags = q->tags;
    if ((c = h_segs_parse(r, sm, &onep, 1, 0, false, &sg))) return c;
    hy_err e = {0};
    if (hy_entry_seam(sm->c, sg[0].n, W, &w, &e) != HY_OK) {
        c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tokens': %s", e.msg);
        h_segs_free(r, sg, 1);
        return c;
    }
    svc_exec *x;
    if ((c = svc_exec_take(r->s, sm, r->call, &x, r->msg, sizeof r->msg))) {
        h_segs_free(r, sg, 1);
        return c;
    }
    build_stream b = {.r = r,
                      .sm = sm,
                      .sg = &sg[0],
                      .W = W,
                      .rp = rp,
                      .chunk = HY_MIN((size_t)CHUNK_BYTES, (size_t)r->s->cfg.max_message / 2)};
    h_set_threads(r->s);
    hy_state_reset(x->st);
    hy_entry *ent = NULL;
    int rc =
        hy_entry_build_streamed(x->ex, x->st, sg[0].tok, sg[0].n, W, rp, build_layer, &b, &ent, &e);
    svc_exec_give(r->s, sm, x);
    r->computed = (int64_t)sg[0].n;
    r->misses = 1;
    if (!rc) build_finish(&b, ent);
    hy_entry_free(ent);
    if (rc)
        c = h_from_err(r, rc, &e);
    else
        c = b.c;
    if (!rc) atomic_fetch_add(&r->s->met.entries_built, 1);
    free(b.buf);
    h_segs_free(r, sg, 1);
    return c;
}

/* --- Prefill --------------------------------------------------------------------- */

/* Whether representation r is the exact one (tolerance 0, T and K/V fp32). */
static bool exact(hy_entry_repr r)
{
    return r.tol == 0.0f && r.t == HY_ENTRY_F32 && r.kv == HY_ENTRY_F32;
}

/* Whether an entry stored as have serves a request for want: the same, or
 * the exact entry of want's S dtype (nothing approximated beyond it). */
static bool repr_serves(hy_entry_repr have, hy_entry_repr want)
{
    return hy_entry_repr_eq(have, want) || (exact(have) && have.s == want.s);
}

/* A Prefill as it goes: parse → look up → fetch / scatter → run → store →
 * reply, each a function below over this. */
typedef struct prefill {
    const Hypic__V1__PrefillRequest *q;
    svc_model *sm;
    hy_mode mode;
    int W, Wm; /* the request's seam, and that of the entries its mode uses */
    hy_entry_repr rp;
    uint32_t top_k;
    bool reuse; /* the pic family: entries looked up, built, composed */
    seg *sg;
    size_t n;
    hy_key *keys;                      /* [n] under the mode's W and the representation */
    hy_segment *hs;                    /* [n] the combiner's segments, hits' entries set */
    hy_tier_id *from;                  /* [n] where each hit came from */
    hy_entry **built;                  /* [n] misses built inline */
    char (*members)[HY_MEMBER_ID_MAX]; /* [n] owners a built entry was put to */
    int32_t *query;
    sc_seg_in *si; /* scatter: the job's segments and their outcomes */
    sc_outcome *so;
    sc_job *job;
    hy_result res;
    float *logits;
    hy_token_prob *top; /* [top_k] */
    int32_t *gen;       /* [max_new_tokens] */
    size_t ngen;
    h_delivery dl;
    Hypic__V1__Timings tm;
    double t_start;
    land_batch *land;    /* hits read from NVMe or an owner while the pass runs */
    size_t *land_seg;    /* [n] the segment of each */
    bool *landing;       /* [n] a hit queued there */
    double land_open_s;  /* the wait for every one of them to open, before the pass */
    cost_policy pol;     /* fetch or recompute hits */
    bool *recomputed;    /* [n] a hit recomputed by choice (its entry left as it is) */
    char (*why)[160];    /* [n] the choice, for the outcome */
    double *fest, *cest; /* [n] its estimates: fetching, computing (s) */
} prefill;

static hy_rpc_code prefill_mode(rq *r, Hypic__V1__Mode m, hy_mode *out)
{
    switch ((int)m) {
    case HYPIC__V1__MODE__MODE_UNSPECIFIED:
    case HYPIC__V1__MODE__MODE_PIC:
        *out = HY_MODE_PIC;
        return HY_RPC_OK;
    case HYPIC__V1__MODE__MODE_FULL:
        *out = HY_MODE_FULL;
        return HY_RPC_OK;
    case HYPIC__V1__MODE__MODE_PREFIX:
        *out = HY_MODE_PREFIX;
        return HY_RPC_OK;
    case HYPIC__V1__MODE__MODE_NOSEAM:
        *out = HY_MODE_NOSEAM;
        return HY_RPC_OK;
    case HYPIC__V1__MODE__MODE_NAIVE:
        *out = HY_MODE_NAIVE;
        return HY_RPC_OK;
    default:
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'mode': %d is not a Mode", (int)m);
    }
}

/* The request's fields, every one checked before any work; then its
 * segments parsed and those named by key resolved. */
static hy_rpc_code prefill_parse(rq *r, prefill *p)
{
    const Hypic__V1__PrefillRequest *q = p->q;
    hy_svc *s = r->s;
    hy_rpc_code c;
    if ((c = h_keyed_fields(r, q->tenant, q->model,
                            q->seam_opt_case == HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM, q->seam,
                            q->dtype, &p->sm, &p->W, &p->rp)) ||
        (c = prefill_mode(r, q->mode, &p->mode)))
        return c;
    r->mode = hy_mode_name(p->mode);
    const int V = p->sm->c->vocab;
    p->top_k = q->top_k ? q->top_k : s->cfg.top_k;
    if (p->top_k > s->cfg.max_top_k || p->top_k > (uint32_t)V)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'top_k': %u is over the limit of %u",
                      q->top_k, HY_MIN(s->cfg.max_top_k, (uint32_t)V));
    if (q->max_new_tokens > s->cfg.max_new_tokens)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'max_new_tokens': %u is over the limit of %u (limits.max_new_tokens)",
                      q->max_new_tokens, s->cfg.max_new_tokens);
    if (q->n_query == 0)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'query' is empty: at least one token, whose logits answer");
    for (size_t t = 0; t < q->n_query; t++)
        if (q->query[t] >= (uint32_t)V)
            return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                          "field 'query[%zu]': %u is outside the vocabulary of model '%s' (0..%d)",
                          t, q->query[t], p->sm->name, V - 1);
    if (q->return_state && q->transport_session == 0)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'transport_session' is 0: return_state needs a session "
                      "(OpenTransport)");
    if ((c = h_segs_parse(r, p->sm, q->segments, q->n_segments, q->n_query, true, &p->sg)))
        return c;
    p->n = q->n_segments;
    p->Wm = p->mode == HY_MODE_NOSEAM ? 0 : p->W;
    p->reuse = p->mode == HY_MODE_PIC || p->mode == HY_MODE_NOSEAM || p->mode == HY_MODE_NAIVE;
    if ((c = h_segs_resolve_keys(r, p->sm, p->sg, p->n))) return c;
    if (q->return_state) { /* refused before any work: a session that is not there, too small */
        int64_t tokens = (int64_t)q->n_query;
        for (size_t i = 0; i < p->n; i++) tokens += (int64_t)p->sg[i].n;
        if ((c = h_state_fits(r, p->sm, q->transport_session, q->state_offset, tokens))) return c;
    }
    const size_t n = p->n, nk = p->top_k ? p->top_k : 1;
    p->from = calloc(n, sizeof *p->from), p->hs = calloc(n, sizeof *p->hs);
    p->built = calloc(n, sizeof *p->built), p->keys = calloc(n, sizeof *p->keys);
    p->members = calloc(n, sizeof *p->members);
    p->recomputed = calloc(n, sizeof *p->recomputed), p->why = calloc(n, sizeof *p->why);
    p->fest = calloc(n, sizeof *p->fest), p->cest = calloc(n, sizeof *p->cest);
    p->landing = calloc(n, sizeof *p->landing);
    p->query = malloc(q->n_query * sizeof *p->query);
    p->logits = malloc((size_t)V * sizeof *p->logits);
    p->top = calloc(nk, sizeof *p->top);
    p->gen = calloc(q->max_new_tokens ? q->max_new_tokens : 1, sizeof *p->gen);
    if (!p->from || !p->hs || !p->built || !p->keys || !p->members || !p->query || !p->logits ||
        !p->top || !p->gen || !p->recomputed || !p->why || !p->fest || !p->cest || !p->landing)
        return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t t = 0; t < q->n_query; t++) p->query[t] = (int32_t)q->query[t];
    switch ((int)q->reuse) {
    case HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_DEFAULT:
        p->pol = !strcmp(s->cfg.pic_reuse, "fetch")       ? COST_FETCH
                 : !strcmp(s->cfg.pic_reuse, "recompute") ? COST_RECOMPUTE
                                                          : COST_AUTO;
        break;
    case HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_AUTO:
        p->pol = COST_AUTO;
        break;
    case HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_FETCH:
        p->pol = COST_FETCH;
        break;
    case HYPIC__V1__PREFILL_REQUEST__REUSE__REUSE_RECOMPUTE:
        p->pol = COST_RECOMPUTE;
        break;
    default:
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'reuse': %d is not a Reuse",
                      (int)q->reuse);
    }
    return HY_RPC_OK;
}

/* What becomes of segment i when its entry under key k is stored here
 * (visible to the caller; one store look-up) or, remote, held by member:
 * recomputed rather than fetched — the request's policy, or the estimates
 * (cost_recompute), the choice and why kept for its outcome —, or, held by
 * the NVMe tier alone or by an owner, queued to be read while the pass
 * runs. PREFILL_FETCH: fetched now (fetch_here), also when it is not
 * here. */
typedef enum { PREFILL_FETCH, PREFILL_RECOMPUTE, PREFILL_LAND } prefill_route;

static prefill_route prefill_route_of(rq *r, prefill *p, size_t i, const hy_key *k,
                                      const char *member, uint64_t remote_bytes)
{
    hy_store *st = r->s->store;
    uint64_t bytes = remote_bytes;
    unsigned mask = 0;
    if (!member && !land_peek(st, p->sm->fp, r->who.tenant, k, &bytes, &mask)) return PREFILL_FETCH;
    const cost_source src = member                                            ? COST_FROM_REMOTE
                            : mask & (1u << HY_TIER_HOST | 1u << HY_TIER_HBM) ? COST_FROM_HOST
                                                                              : COST_FROM_NVME;
    int w;
    hy_err ignored = {0};
    const size_t n = p->sg[i].n;
    const uint64_t tokens =
        hy_entry_seam(p->sm->c, n, p->Wm, &w, &ignored) == HY_OK ? n - (size_t)w : n;
    p->recomputed[i] = cost_recompute(p->sm->costs, p->pol, src, bytes, tokens, &p->fest[i],
                                      &p->cest[i], p->why[i], sizeof p->why[i]);
    if (p->recomputed[i]) return PREFILL_RECOMPUTE;
    if (src == COST_FROM_HOST) return PREFILL_FETCH;
    if (!p->land) {
        if (land_new(st, p->sm->m, p->sm->fp, r->who.tenant, p->n, &p->land)) return PREFILL_FETCH;
        if (!(p->land_seg = calloc(p->n, sizeof *p->land_seg))) return PREFILL_FETCH;
    }
    seg *g = &p->sg[i];
    const size_t j = member ? land_add_remote(p->land, r->s, member, k, bytes, &g->entry, &g->rbuf)
                            : land_add(p->land, k, bytes, &g->entry, &g->lease);
    p->land_seg[j] = i;
    p->landing[i] = true;
    if (member) snprintf(g->member, sizeof g->member, "%s", member);
    g->from = member ? HY_TIER_NONE : HY_TIER_NVME;
    return PREFILL_LAND;
}

/* The exact key of segment i: its entry serves any representation. */
static void exact_key(rq *r, prefill *p, size_t i, hy_key *k)
{
    hy_entry_key(r->who.tenant, p->sm->fp, p->Wm, hy_entry_exact(p->rp.s), p->sg[i].tok, p->sg[i].n,
                 k->b);
}

/* Cluster mode: the segments with no entry here, asked of their owners
 * (one Lookup per member, lookup_on_owners) under this representation's
 * key and then the exact one; each hit there routed as one here is. */
static void prefill_lookup_owners(rq *r, prefill *p)
{
    const size_t n = p->n;
    Hypic__V1__SegmentStatus *st = calloc(n, sizeof *st);
    hy_key *keys = calloc(n, sizeof *keys);
    bool *found = calloc(n, sizeof *found), *asked = calloc(n, sizeof *asked);
    for (int pass = 0; st && keys && found && asked && pass < (exact(p->rp) ? 1 : 2); pass++) {
        bool any = false;
        for (size_t i = 0; i < n; i++) {
            Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
            st[i] = init;
            st[i].hit = p->hs[i].entry || p->recomputed[i] || p->landing[i] || found[i];
            if (pass)
                exact_key(r, p, i, &keys[i]);
            else
                keys[i] = p->keys[i];
            any |= !st[i].hit;
        }
        if (!any) break;
        for (size_t i = 0; i < n; i++) asked[i] = !st[i].hit;
        svc_view *v = lookup_on_owners(r, p->sm, p->sg, keys, st, n);
        for (size_t i = 0; i < n; i++) {
            if (!asked[i] || !st[i].hit || !st[i].member) continue;
            found[i] = true;
            if (prefill_route_of(r, p, i, &keys[i], st[i].member, st[i].bytes) == PREFILL_LAND)
                p->keys[i] = keys[i];
        }
        svc_view_put(v);
    }
    free(st), free(keys), free(found), free(asked);
}

/* Each segment's key, and for the pic family its entry from wherever it is:
 * one named by key already, else this representation's, else the exact one
 * — from this member's tiers, then (cluster mode) from their owners. */
static hy_rpc_code prefill_lookup(rq *r, prefill *p)
{
    double t0 = hy_now_s();
    for (size_t i = 0; i < p->n; i++) {
        p->from[i] = HY_TIER_NONE;
        p->hs[i] = (hy_segment){p->sg[i].tok, p->sg[i].n, NULL};
        hy_entry_key(r->who.tenant, p->sm->fp, p->Wm, p->rp, p->sg[i].tok, p->sg[i].n,
                     p->keys[i].b);
    }
    Hypic__V1__Timings *tm = &p->tm;
    tm->lookup_ms = (hy_now_s() - t0) * 1e3;
    for (size_t i = 0; p->reuse && i < p->n; i++) {
        seg *g = &p->sg[i];
        /* an entry already fetched for its key, of this mode's W, that serves
         * this representation */
        if (g->entry && hy_entry_seam_setting(g->entry) == p->Wm &&
            repr_serves(hy_entry_repr_of(g->entry), p->rp)) {
            p->hs[i].entry = g->entry;
            p->from[i] = g->from;
            continue;
        }
        h_seg_drop(r, g); /* named by key, but built under another W or representation */
        t0 = hy_now_s();
        hy_err e = {0};
        uint64_t bytes;
        if (prefill_route_of(r, p, i, &p->keys[i], NULL, 0) != PREFILL_FETCH) continue;
        int rc = fetch_here(r, p->sm, &p->keys[i], g, &bytes, &e);
        if (rc == HY_ENOTFOUND && !exact(p->rp)) {
            /* the exact entry of the segment serves too: one stored before
             * compact forms (version 1), or under tolerance 0 */
            hy_key ek;
            exact_key(r, p, i, &ek);
            const prefill_route how = prefill_route_of(r, p, i, &ek, NULL, 0);
            if (how == PREFILL_LAND) p->keys[i] = ek;
            if (how != PREFILL_FETCH) continue;
            rc = fetch_here(r, p->sm, &ek, g, &bytes, &e);
            if (rc == HY_OK) p->keys[i] = ek;
        }
        p->from[i] = g->from;
        const double ms = (hy_now_s() - t0) * 1e3;
        if (rc == HY_ENOTFOUND) {
            p->from[i] = HY_TIER_NONE;
            tm->lookup_ms += ms;
            continue;
        }
        if (rc) return h_from_err(r, rc, &e);
        p->hs[i].entry = g->entry;
        /* what it cost, for the next choices */
        cost_fetched(p->sm->costs, p->from[i] == HY_TIER_NVME ? COST_FROM_NVME : COST_FROM_HOST,
                     bytes, ms / 1e3);
        if (p->from[i] == HY_TIER_HBM)
            tm->fetch_hbm_ms += ms;
        else if (p->from[i] == HY_TIER_NVME)
            tm->fetch_nvme_ms += ms;
        else
            tm->fetch_host_ms += ms;
    }
    if (p->reuse && r->s->cluster) {
        t0 = hy_now_s();
        prefill_lookup_owners(r, p);
        tm->fetch_remote_ms += (hy_now_s() - t0) * 1e3;
    }
    if (land_count(p->land) == 0) return HY_RPC_OK;
    /* the hits on NVMe and on owners: read at once, each in layer order; the
     * pass starts when every one's header and tokens are in */
    land_go(p->land);
    const double t_go = hy_now_s();
    for (size_t j = 0; j < land_count(p->land); j++) {
        t0 = hy_now_s();
        const size_t i = p->land_seg[j];
        p->hs[i].entry = land_opened(p->land, j);
        const bool remote = land_source(p->land, j) == COST_FROM_REMOTE;
        p->from[i] = p->hs[i].entry && !remote ? HY_TIER_NVME : HY_TIER_NONE;
        if (!p->hs[i].entry) p->sg[i].member[0] = '\0';
        *(remote ? &tm->fetch_remote_ms : &tm->fetch_nvme_ms) += (hy_now_s() - t0) * 1e3;
    }
    p->land_open_s = hy_now_s() - t_go;
    return HY_RPC_OK;
}

/* Misses long enough go to the scatter workers, which build them while this
 * request waits for an executor and composes what came before. */
static hy_rpc_code prefill_scatter(rq *r, prefill *p)
{
    hy_svc *s = r->s;
    if (!p->reuse || !s->router) return HY_RPC_OK;
    p->si = calloc(p->n, sizeof *p->si);
    p->so = calloc(p->n, sizeof *p->so);
    if (!p->si || !p->so) return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        int w;
        hy_err ignored = {0};
        p->si[i] =
            (sc_seg_in){.tok = p->sg[i].tok,
                        .n = p->sg[i].n,
                        .key = p->keys[i],
                        .tags = p->sg[i].tags,
                        .ntags = p->sg[i].ntags,
                        .ship = !p->hs[i].entry && !p->recomputed[i] &&
                                p->sg[i].n >= s->cfg.scatter_min_tokens &&
                                hy_entry_seam(p->sm->c, p->sg[i].n, p->Wm, &w, &ignored) == HY_OK};
    }
    hy_err je = {0};
    if (sc_job_start(s, p->sm, r->who.tenant, p->Wm, p->rp, p->si, p->n, &p->job, &je))
        hy_log(HY_LOG_WARN, "scatter: the request's misses are built inline: %s", je.msg);
    return HY_RPC_OK;
}

/* The forward pass over the request on an executor, the state delivered
 * when asked, the first token's candidates and the greedy continuation. */
static hy_rpc_code prefill_run(rq *r, prefill *p)
{
    hy_svc *s = r->s;
    const Hypic__V1__PrefillRequest *q = p->q;
    Hypic__V1__Timings *tm = &p->tm;
    hy_rpc_code c;
    svc_exec *x;
    if ((c = svc_exec_take(s, p->sm, r->call, &x, r->msg, sizeof r->msg))) return c;
    svc_prefix *pfx = NULL;
    hy_err e = {0};
    int rc = p->mode == HY_MODE_PREFIX ? svc_prefix_get(s, p->sm, r->who.tenant, &pfx, &e) : HY_OK;
    const hy_request hr = {.segs = p->hs,
                           .nsegs = p->n,
                           .query = p->query,
                           .nq = q->n_query,
                           .mode = p->mode,
                           .W = p->W,
                           .repr = p->rp,
                           .prefix = pfx ? pfx->pc : NULL,
                           /* compaction after the first token: prefill_store */
                           .defer_builds = true};
    p->res = (hy_result){.built = p->built};
    h_set_threads(s);
    sc_await_ctx ac = {.job = p->job, .call = r->call, .hits = p->hs};
    if (!rc && p->job)
        rc = hy_combine_stream(x->ex, x->st, &hr, sc_await, &ac, p->logits, &p->res, &e);
    else if (!rc)
        rc = hy_combine(x->ex, x->st, &hr, p->logits, &p->res, &e);
    svc_prefix_put(pfx);
    land_wait(p->land); /* every read over: the entries whole or failed */
    size_t bad;
    hy_err le;
    if (rc && land_failed(p->land, &bad, &le)) {
        svc_exec_give(s, p->sm, x);
        char where[96];
        const bool remote = land_source(p->land, bad) == COST_FROM_REMOTE;
        return h_fail(r, HY_RPC_UNAVAILABLE,
                      "segments[%zu]: its entry failed while it was read from %s, after the "
                      "request had begun to use it; %s: %s",
                      p->land_seg[bad], land_where(p->land, bad, where, sizeof where),
                      remote ? "a retry asks its owners again, or computes the segment"
                             : "it was removed, and a retry computes the segment",
                      le.msg);
    }
    tm->landing_wait_ms = p->res.arrival_s * 1e3;
    if (!rc) { /* what the reads and the pass cost, for the next choices */
        /* a read overlapped with the pass costs the request what the pass
         * waited for it: for every entry to open, then for layers — shared
         * by the sources in proportion to their bytes */
        uint64_t b[COST_FROM_COUNT] = {0}, total = 0;
        double sec;
        for (cost_source src = COST_FROM_NVME; src <= COST_FROM_REMOTE; src++)
            if (land_read(p->land, src, &b[src], &sec)) total += b[src];
        const double waited = p->land_open_s + p->res.arrival_s;
        for (cost_source src = COST_FROM_NVME; total && src <= COST_FROM_REMOTE; src++)
            if (b[src])
                cost_fetched(p->sm->costs, src, b[src], waited * (double)b[src] / (double)total);
        if (p->mode != HY_MODE_PREFIX)
            cost_computed(p->sm->costs, (uint64_t)p->res.prefilled,
                          p->res.forward_s - p->res.compose_s - p->res.arrival_s);
    }
    if (p->job) { /* its entries are composed (and stored): over */
        sc_summary sum;
        sc_job_end(p->job, p->so, &sum);
        p->job = NULL;
        tm->scattered = sum.scattered;
        tm->scatter_workers = sum.workers;
        tm->scatter_retries = sum.retries;
        tm->scatter_makespan_ms = sum.makespan_s * 1e3;
        tm->scatter_wait_ms = p->res.wait_s * 1e3;
    }
    const double t_first = hy_now_s();
    tm->ttft_ms = (t_first - p->t_start) * 1e3;
    tm->prefix_restore_ms = p->res.restore_s * 1e3;
    tm->forward_ms = p->res.forward_s * 1e3;
    tm->compose_ms = p->res.compose_s * 1e3;
    /* the quality watch, drawn and copied before the decode reuses the logits */
    if (!rc) svc_shadow_offer(s, p->sm, &hr, p->res.hits, p->logits);
    /* the state after the query, before any continuation, to the client */
    if (!rc && q->return_state &&
        (c = h_deliver_state(r, p->sm, x->st, q->transport_session, q->state_offset, &p->dl))) {
        svc_exec_give(s, p->sm, x);
        return c;
    }
    if (!rc) {
        hy_top_k(p->logits, p->sm->c->vocab, (int)p->top_k, p->top);
        rc = hy_exec_greedy(x->ex, x->st, p->logits, q->max_new_tokens, p->gen, &p->ngen, &e);
        tm->decode_ms = (hy_now_s() - t_first) * 1e3;
        r->computed = p->res.prefilled + (int64_t)(p->ngen ? p->ngen - 1 : 0);
    }
    svc_exec_give(s, p->sm, x);
    return rc ? h_from_err(r, rc, &e) : HY_RPC_OK;
}

/* Each segment's outcome; misses built inline go to the store, subject to
 * admission. */
static void prefill_store(rq *r, prefill *p, Hypic__V1__SegmentOutcome *oc)
{
    hy_svc *s = r->s;
    const double t0 = hy_now_s();
    for (size_t i = 0; i < p->n; i++) {
        Hypic__V1__SegmentOutcome init = HYPIC__V1__SEGMENT_OUTCOME__INIT;
        oc[i] = init;
        oc[i].key = (ProtobufCBinaryData){HY_KEY_BYTES, p->keys[i].b};
        oc[i].why = p->why[i];
        oc[i].fetch_ms_est = p->fest[i] * 1e3;
        oc[i].compute_ms_est = p->cest[i] * 1e3;
        if (p->mode == HY_MODE_PREFIX && (int)i < p->res.prefix_segments) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_PREFIX;
            r->hits++;
        } else if (p->recomputed[i]) { /* its entry stays as it is: not stored again */
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            oc[i].recomputed = true;
            hy_entry_free(p->built[i]);
            p->built[i] = NULL;
            r->misses++;
        } else if (p->hs[i].entry) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT;
            oc[i].tier = h_pb_tier(p->from[i]);
            oc[i].member = p->sg[i].member[0] ? p->sg[i].member : (char *)s->cfg.cluster_id;
            r->hits++;
        } else if (p->so && p->so[i].built) { /* a scatter worker's entry, stored as it came */
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            oc[i].stored = p->so[i].stored;
            oc[i].tier = h_pb_tier(p->so[i].tier);
            oc[i].built_by = p->so[i].by;
            r->misses++;
        } else if (p->built[i]) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            hy_tier_id placed = HY_TIER_NONE;
            hy_err se = {0};
            if (hy_entry_finish(p->built[i], &se) ||
                put_entry(s, p->sm, r->who.tenant, &p->keys[i], p->built[i], p->sg[i].tags,
                          p->sg[i].ntags, &placed, NULL, p->members[i], &se))
                hy_log(HY_LOG_WARN, "storing an entry built inline: %s", se.msg);
            oc[i].stored = placed != HY_TIER_NONE;
            oc[i].tier = h_pb_tier(placed);
            oc[i].member = p->members[i];
            r->misses++;
        } else {
            oc[i].kind = p->reuse ? HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_UNCACHEABLE
                                  : HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            if (p->reuse) atomic_fetch_add(&s->met.segments_uncacheable, 1);
            r->misses += !p->reuse;
        }
    }
    p->tm.store_ms = (hy_now_s() - t0) * 1e3;
}

static hy_rpc_code prefill_reply(rq *r, prefill *p)
{
    hy_svc *s = r->s;
    const size_t n = p->n, nk = p->top_k ? p->top_k : 1;
    Hypic__V1__SegmentOutcome *oc = calloc(n ? n : 1, sizeof *oc);
    Hypic__V1__SegmentOutcome **ocp = calloc(n ? n : 1, sizeof *ocp);
    Hypic__V1__TokenProb *tp = calloc(nk, sizeof *tp);
    Hypic__V1__TokenProb **tpp = calloc(nk, sizeof *tpp);
    uint32_t *gen = calloc(p->ngen ? p->ngen : 1, sizeof *gen);
    hy_rpc_code c = HY_RPC_OK;
    if (!oc || !ocp || !tp || !tpp || !gen) {
        c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    prefill_store(r, p, oc);
    for (size_t i = 0; i < n; i++) ocp[i] = &oc[i];
    for (uint32_t k = 0; k < p->top_k; k++) {
        Hypic__V1__TokenProb init = HYPIC__V1__TOKEN_PROB__INIT;
        tp[k] = init;
        tp[k].token = (uint32_t)p->top[k].token;
        tp[k].logit = p->top[k].logit;
        tp[k].prob = p->top[k].prob;
        tpp[k] = &tp[k];
    }
    for (size_t t = 0; t < p->ngen; t++) gen[t] = (uint32_t)p->gen[t];
    Hypic__V1__Timings *tm = &p->tm;
    tm->total_ms = (hy_now_s() - p->t_start) * 1e3;
    r->ttft_ms = tm->ttft_ms;
    hy_hist_observe(&s->met.ttft[p->mode], tm->ttft_ms / 1e3);
    atomic_fetch_add(&s->met.tokens_computed, (uint64_t)r->computed);
    atomic_fetch_add(&s->met.segments_hit, (uint64_t)r->hits);
    atomic_fetch_add(&s->met.segments_missed, (uint64_t)r->misses);
    Hypic__V1__PrefillResponse resp = HYPIC__V1__PREFILL_RESPONSE__INIT;
    resp.n_top = p->top_k;
    resp.top = tpp;
    resp.n_generated = p->ngen;
    resp.generated = gen;
    resp.n_segments = n;
    resp.segments = ocp;
    resp.tokens_computed = (uint64_t)r->computed;
    resp.timings = tm;
    if (p->q->return_state) resp.state = &p->dl.d;
    tm->server_ms = (hy_now_s() - r->t_door) * 1e3;
    c = h_send(r, &resp.base);
out:
    free(oc), free(ocp), free(tp), free(tpp), free(gen);
    return c;
}

static void prefill_free(rq *r, prefill *p)
{
    land_free(p->land); /* first: its reads set the segments' entries and leases */
    free(p->land_seg);
    sc_job_end(p->job, NULL, NULL); /* a request that failed before composing */
    free(p->si), free(p->so);
    h_delivery_free(&p->dl);
    for (size_t i = 0; p->built && i < p->n; i++) hy_entry_free(p->built[i]);
    free(p->from), free(p->hs), free(p->built), free(p->keys), free(p->members);
    free(p->query), free(p->logits), free(p->top), free(p->gen);
    free(p->recomputed), free(p->why), free(p->fest), free(p->cest), free(p->landing);
    if (p->sg) h_segs_free(r, p->sg, p->n);
}

hy_rpc_code do_prefill(rq *r, const ProtobufCMessage *req)
{
    prefill p = {.q = (const void *)req, .t_start = hy_now_s()};
    Hypic__V1__Timings init = HYPIC__V1__TIMINGS__INIT;
    p.tm = init;
    hy_rpc_code c;
    if (!(c = prefill_parse(r, &p)) && !(c = prefill_lookup(r, &p)) &&
        !(c = prefill_scatter(r, &p)) && !(c = prefill_run(r, &p)))
        c = prefill_reply(r, &p);
    prefill_free(r, &p);
    return c;
}
