/*
 * The RPCs of hypic.v1 over the service's state (service_internal.h).
 *
 * Every call goes through run(): refused UNAVAILABLE while draining,
 * authenticated (svc_enter: the tenant comes from the bearer token, never
 * from the body), counted in flight for its tenant, answered by its method's
 * function, finished with the status that function returns, logged as one
 * line and counted in the metrics.
 *
 * Isolation. Keys are derived with the caller's tenant, so a tenant's
 * segments never name another's entries; a key given in a request (Lookup,
 * Prefill, GetEntry, Inspect, Invalidate) is only "visible" when its entry
 * belongs to the caller's tenant, and an invisible key gets exactly the
 * answer of an absent one (a miss, NOT_FOUND, 0 removed). Listing, Watch and
 * Stats are filtered to the caller's tenant (Stats in full for admins).
 */
#include "service_internal.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SEAM      64
#define CHUNK_BYTES   (1u << 20)
#define LIST_SORT_MAX 200000

typedef struct rq {
    hy_svc *s;
    hy_rpc_call *call;
    svc_caller who;
    char msg[512];
    /* for the request's log line */
    const char *model;
    const char *mode;
    int segs, hits, misses;
    int64_t computed;
    double ttft_ms;
} rq;

static hy_rpc_code fail(rq *r, hy_rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static hy_rpc_code fail(rq *r, hy_rpc_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return code;
}

/* A library error as a status: bad input INVALID_ARGUMENT, limits
 * RESOURCE_EXHAUSTED, the rest INTERNAL. */
static hy_rpc_code from_err(rq *r, int rc, const hy_err *e)
{
    hy_rpc_code code = rc == HY_EINVAL || rc == HY_EFORMAT  ? HY_RPC_INVALID_ARGUMENT
                       : rc == HY_ERANGE || rc == HY_ENOMEM ? HY_RPC_RESOURCE_EXHAUSTED
                       : rc == HY_ENOTFOUND                 ? HY_RPC_NOT_FOUND
                                                            : HY_RPC_INTERNAL;
    return fail(r, code, "%s", e->msg[0] ? e->msg : hy_strerror(rc));
}

/* --- shared checks -------------------------------------------------------------- */

static hy_rpc_code check_tenant(rq *r, const char *tenant)
{
    if (tenant && tenant[0] && strcmp(tenant, r->who.tenant) != 0)
        return fail(r, HY_RPC_PERMISSION_DENIED,
                    "field 'tenant': '%.64s' is not the tenant the bearer token authenticates",
                    tenant);
    return HY_RPC_OK;
}

static hy_rpc_code need_model(rq *r, const char *name, svc_model **out)
{
    *out = NULL;
    if (!name || !name[0]) return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'model' is empty");
    r->model = name;
    *out = svc_model_find(r->s, name);
    if (*out) return HY_RPC_OK;
    char served[256] = "";
    for (int i = 0; i < r->s->nmodels; i++)
        snprintf(served + strlen(served), sizeof served - strlen(served), "%s%s", i ? ", " : "",
                 r->s->models[i].name);
    return fail(r, HY_RPC_NOT_FOUND, "field 'model': '%.64s' is not served here (served: %s)", name,
                served);
}

static hy_rpc_code seam_of(rq *r, bool has, uint32_t seam, int *W)
{
    *W = r->s->cfg.seam;
    if (!has) return HY_RPC_OK;
    if (seam > MAX_SEAM)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'seam': %u is over the limit of %d", seam,
                    MAX_SEAM);
    *W = (int)seam;
    return HY_RPC_OK;
}

static hy_rpc_code dtype_of(rq *r, Hypic__V1__StateDtype d, hy_entry_dtype *out)
{
    switch ((int)d) {
    case HYPIC__V1__STATE_DTYPE__STATE_DTYPE_UNSPECIFIED:
        *out = r->s->cfg.dtype;
        return HY_RPC_OK;
    case HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32:
        *out = HY_ENTRY_F32;
        return HY_RPC_OK;
    case HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16:
        *out = HY_ENTRY_BF16;
        return HY_RPC_OK;
    default:
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'dtype': %d is not a StateDtype", (int)d);
    }
}

static hy_rpc_code key_of(rq *r, const char *field, ProtobufCBinaryData b, hy_key *k)
{
    if (b.len != HY_KEY_BYTES)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field '%s': a key is %d bytes, not %zu", field,
                    HY_KEY_BYTES, b.len);
    memcpy(k->b, b.data, HY_KEY_BYTES);
    return HY_RPC_OK;
}

static Hypic__V1__Tier pb_tier(hy_tier_id t)
{
    return t == HY_TIER_HBM    ? HYPIC__V1__TIER__TIER_HBM
           : t == HY_TIER_HOST ? HYPIC__V1__TIER__TIER_HOST
           : t == HY_TIER_NVME ? HYPIC__V1__TIER__TIER_NVME
                               : HYPIC__V1__TIER__TIER_NONE;
}

static hy_tier_id fastest(unsigned mask)
{
    return mask & (1u << HY_TIER_HBM)    ? HY_TIER_HBM
           : mask & (1u << HY_TIER_HOST) ? HY_TIER_HOST
           : mask & (1u << HY_TIER_NVME) ? HY_TIER_NVME
                                         : HY_TIER_NONE;
}

/* Whether key names an entry of the caller's tenant (and of model sm when
 * not NULL): what every method that takes a key asks first. */
static bool visible(rq *r, const svc_model *sm, const hy_key *k, hy_meta *m, unsigned *mask)
{
    hy_meta tmp;
    if (!m) m = &tmp;
    if (hy_store_peek(r->s->store, k, m, mask) != HY_OK) return false;
    if (strcmp(m->tenant, r->who.tenant) != 0) return false;
    return !sm || memcmp(m->model, sm->fp, 32) == 0;
}

static const svc_model *model_by_fp(hy_svc *s, const uint8_t fp[32])
{
    for (int i = 0; i < s->nmodels; i++)
        if (memcmp(s->models[i].fp, fp, 32) == 0) return &s->models[i];
    return NULL;
}

/* The segments of a request, resolved: token ids checked against the
 * vocabulary and copied as int32, or the entry a key names. */
typedef struct seg {
    int32_t *tok;
    size_t n;
    hy_key key;      /* under the request's W and dtype (or as given) */
    bool by_key;     /* the request gave the key */
    hy_entry *entry; /* a reused entry (pic family), or the one a key named */
    hy_tier_id from; /* where that entry's bytes came from */
    char **tags;
    size_t ntags;
} seg;

static void segs_free(seg *sg, size_t n)
{
    for (size_t i = 0; sg && i < n; i++) {
        free(sg[i].tok);
        hy_entry_free(sg[i].entry);
    }
    free(sg);
}

/* Checks count, sizes and ids of a request's segments (and its query) and
 * copies their tokens; a segment given by key keeps by_key (its tokens come
 * from its entry later, when the method needs them). */
static hy_rpc_code segs_parse(rq *r, svc_model *sm, Hypic__V1__Segment **in, size_t n,
                              size_t extra_tokens, bool keys_allowed, seg **out)
{
    *out = NULL;
    const hy_cached_config *cfg = &r->s->cfg;
    r->segs = (int)n;
    if (n == 0) return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'segments' is empty");
    if (n > cfg->max_segments)
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "field 'segments': %zu segments, over the limit of %u (limits.max_segments)", n,
                    cfg->max_segments);
    seg *sg = calloc(n, sizeof *sg);
    if (!sg) return fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    uint64_t total = extra_tokens;
    for (size_t i = 0; i < n; i++) {
        const Hypic__V1__Segment *g = in[i];
        sg[i].tags = g->tags;
        sg[i].ntags = g->n_tags;
        hy_rpc_code c = HY_RPC_OK;
        if (g->n_tags > HY_MAX_TAGS) {
            c = fail(r, HY_RPC_INVALID_ARGUMENT,
                     "segments[%zu].tags: %zu tags, over the limit of %d", i, g->n_tags,
                     HY_MAX_TAGS);
        }
        for (size_t t = 0; !c && t < g->n_tags; t++)
            if (!g->tags[t][0] || strlen(g->tags[t]) >= HY_TAG_MAX)
                c = fail(r, HY_RPC_INVALID_ARGUMENT,
                         "segments[%zu].tags[%zu]: empty or over %d bytes", i, t, HY_TAG_MAX - 1);
        if (!c && g->ref_case == HYPIC__V1__SEGMENT__REF_KEY) {
            if (!keys_allowed)
                c = fail(r, HY_RPC_INVALID_ARGUMENT,
                         "segments[%zu]: given by key, but this method needs its tokens", i);
            else if (!(c = key_of(r, "segments[].key", g->key, &sg[i].key)))
                sg[i].by_key = true;
        } else if (!c && g->ref_case == HYPIC__V1__SEGMENT__REF_TOKENS) {
            const Hypic__V1__Tokens *tk = g->tokens;
            if (!tk || tk->n_ids == 0) {
                c = fail(r, HY_RPC_INVALID_ARGUMENT, "segments[%zu]: no tokens", i);
            } else if ((total += tk->n_ids) > cfg->max_tokens) {
                c = fail(r, HY_RPC_INVALID_ARGUMENT,
                         "the request has over %llu tokens (limits.max_tokens)",
                         (unsigned long long)cfg->max_tokens);
            } else if (!(sg[i].tok = malloc(tk->n_ids * sizeof(int32_t)))) {
                c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
            } else {
                sg[i].n = tk->n_ids;
                for (size_t t = 0; t < tk->n_ids && !c; t++) {
                    if (tk->ids[t] >= (uint32_t)sm->c->vocab)
                        c = fail(r, HY_RPC_INVALID_ARGUMENT,
                                 "segments[%zu].tokens.ids[%zu]: %u is outside the vocabulary "
                                 "of model '%s' (0..%d)",
                                 i, t, tk->ids[t], sm->name, sm->c->vocab - 1);
                    sg[i].tok[t] = (int32_t)tk->ids[t];
                }
            }
        } else if (!c) {
            c = fail(r, HY_RPC_INVALID_ARGUMENT, "segments[%zu]: neither tokens nor key", i);
        }
        if (!c && i + 1 == n && total > cfg->max_tokens) /* e.g. a long query after keys */
            c = fail(r, HY_RPC_INVALID_ARGUMENT,
                     "the request has over %llu tokens (limits.max_tokens)",
                     (unsigned long long)cfg->max_tokens);
        if (c) {
            segs_free(sg, n);
            return c;
        }
    }
    *out = sg;
    return HY_RPC_OK;
}

/* Leases the entry under key (visible to the caller, of model sm) and decodes
 * it. HY_ENOTFOUND on a miss; a stored entry that fails to decode (a wrong
 * byte is worse than a miss) is removed and reported as a miss. *from: the
 * tier it came from; *bytes its size. */
static int fetch_entry(rq *r, svc_model *sm, const hy_key *k, hy_entry **out, hy_tier_id *from,
                       uint64_t *bytes, hy_err *err)
{
    *out = NULL;
    hy_lease *l;
    int rc = hy_store_acquire(r->s->store, k, &l, err);
    if (rc == HY_EFORMAT) return HY_ENOTFOUND; /* its NVMe copy failed its checksums: dropped */
    if (rc) return rc;
    const hy_meta *m = hy_lease_meta(l);
    if (strcmp(m->tenant, r->who.tenant) != 0 || memcmp(m->model, sm->fp, 32) != 0) {
        hy_store_release(r->s->store, l);
        return HY_ENOTFOUND;
    }
    *from = hy_lease_tier(l);
    *bytes = m->bytes;
    rc = hy_entry_deserialize(sm->m, hy_lease_data(l), m->bytes, out, err);
    hy_store_release(r->s->store, l);
    if (rc == HY_EFORMAT || rc == HY_EINVAL) {
        char hex[65];
        hy_key_hex(k, hex);
        hy_log(HY_LOG_ERROR, "entry %s failed to decode, removing it: %s", hex, err->msg);
        hy_store_filter f = {.key = k};
        size_t gone;
        hy_err ignored = {0};
        hy_store_invalidate(r->s->store, &f, &gone, &ignored);
        return HY_ENOTFOUND;
    }
    return rc;
}

/* Fills the tokens of segments given by key from their entries. */
static hy_rpc_code segs_resolve_keys(rq *r, svc_model *sm, seg *sg, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!sg[i].by_key) continue;
        uint64_t bytes;
        hy_err e = {0};
        int rc = fetch_entry(r, sm, &sg[i].key, &sg[i].entry, &sg[i].from, &bytes, &e);
        if (rc == HY_ENOTFOUND)
            return fail(r, HY_RPC_NOT_FOUND,
                        "segments[%zu]: its key is not cached (a segment given by key must be a "
                        "hit; send its tokens instead)",
                        i);
        if (rc) return from_err(r, rc, &e);
        const int32_t *t;
        sg[i].n = (size_t)hy_entry_tokens(sg[i].entry, &t);
        if (!(sg[i].tok = malloc(sg[i].n * sizeof *t)))
            return fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        memcpy(sg[i].tok, t, sg[i].n * sizeof *t);
    }
    return HY_RPC_OK;
}

/* An EntryMeta message over a hy_meta (pointers into m and the holder). */
typedef struct pb_meta {
    Hypic__V1__EntryMeta pb;
    char *tags[HY_MAX_TAGS];
    Hypic__V1__Tier tiers[3];
} pb_meta;

static void meta_to_pb(hy_svc *s, hy_meta *m, unsigned mask, pb_meta *o)
{
    Hypic__V1__EntryMeta init = HYPIC__V1__ENTRY_META__INIT;
    o->pb = init;
    o->pb.key = (ProtobufCBinaryData){HY_KEY_BYTES, m->key.b};
    const svc_model *sm = model_by_fp(s, m->model);
    o->pb.model = sm ? (char *)sm->name : "";
    o->pb.model_fingerprint = (ProtobufCBinaryData){32, m->model};
    o->pb.tenant = m->tenant;
    for (uint32_t i = 0; i < m->ntags && i < HY_MAX_TAGS; i++) o->tags[i] = m->tags[i];
    o->pb.n_tags = m->ntags;
    o->pb.tags = o->tags;
    o->pb.tokens = m->tokens;
    o->pb.flops = m->flops;
    o->pb.bytes = m->bytes;
    o->pb.created_unix_ns = m->created_ns;
    o->pb.last_access_unix_ns = m->last_access_ns;
    o->pb.expires_unix_ns = m->expires_ns;
    o->pb.hits = m->hits;
    size_t nt = 0;
    static const hy_tier_id order[3] = {HY_TIER_HBM, HY_TIER_HOST, HY_TIER_NVME};
    for (int i = 0; i < 3; i++)
        if (mask & (1u << order[i])) o->tiers[nt++] = pb_tier(order[i]);
    o->pb.n_tiers = nt;
    o->pb.tiers = o->tiers;
}

static hy_rpc_code send(rq *r, const ProtobufCMessage *m)
{
    hy_err e = {0};
    if (hy_rpc_call_send(r->call, m, &e))
        return fail(r, HY_RPC_CANCELLED, "the client went away: %s", e.msg);
    return HY_RPC_OK;
}

static void set_threads(hy_svc *s)
{
    omp_set_num_threads(s->cfg.exec_threads);
}

/* --- Lookup --------------------------------------------------------------------- */

static hy_rpc_code do_lookup(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__LookupRequest *q = (const void *)req;
    svc_model *sm;
    hy_rpc_code c;
    int W;
    hy_entry_dtype dt = HY_ENTRY_F32;
    seg *sg = NULL;
    if ((c = check_tenant(r, q->tenant)) || (c = need_model(r, q->model, &sm)) ||
        (c = seam_of(r, q->seam_opt_case == HYPIC__V1__LOOKUP_REQUEST__SEAM_OPT_SEAM, q->seam,
                     &W)) ||
        (c = dtype_of(r, q->dtype, &dt)) ||
        (c = segs_parse(r, sm, q->segments, q->n_segments, 0, true, &sg)))
        return c;
    if (q->lease_ms > r->s->cfg.max_lease_ms) {
        segs_free(sg, q->n_segments);
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'lease_ms': %u is over the limit of %u",
                    q->lease_ms, r->s->cfg.max_lease_ms);
    }
    const size_t n = q->n_segments;
    Hypic__V1__SegmentStatus *st = calloc(n, sizeof *st);
    Hypic__V1__SegmentStatus **sp = calloc(n, sizeof *sp);
    hy_lease **leases = q->lease_ms ? calloc(n, sizeof *leases) : NULL;
    size_t nleases = 0;
    Hypic__V1__LookupResponse resp = HYPIC__V1__LOOKUP_RESPONSE__INIT;
    if (!st || !sp || (q->lease_ms && !leases)) {
        c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    bool leading = true;
    for (size_t i = 0; i < n; i++) {
        Hypic__V1__SegmentStatus init = HYPIC__V1__SEGMENT_STATUS__INIT;
        st[i] = init;
        sp[i] = &st[i];
        if (!sg[i].by_key)
            hy_entry_key(r->who.tenant, sm->fp, W, dt, sg[i].tok, sg[i].n, sg[i].key.b);
        st[i].key = (ProtobufCBinaryData){HY_KEY_BYTES, sg[i].key.b};
        hy_meta m;
        unsigned mask = 0;
        bool hit = visible(r, sm, &sg[i].key, &m, &mask);
        if (hit && leases) {
            hy_err e = {0};
            hit = hy_store_acquire(r->s->store, &sg[i].key, &leases[nleases], &e) == HY_OK;
            if (hit) nleases++;
        }
        st[i].hit = hit;
        st[i].tier = hit ? pb_tier(fastest(mask)) : HYPIC__V1__TIER__TIER_NONE;
        st[i].bytes = hit ? m.bytes : 0;
        st[i].tokens = sg[i].by_key ? (hit ? m.tokens : 0) : (uint32_t)sg[i].n;
        leading &= hit;
        if (leading) resp.leading_hits++, resp.leading_tokens += st[i].tokens;
        r->hits += hit;
        r->misses += !hit;
    }
    resp.n_segments = n;
    resp.segments = sp;
    if (leases && nleases) {
        resp.lease_id = svc_lease_add(r->s, leases, nleases, q->lease_ms);
        leases = NULL; /* the lease table owns them */
    }
    c = send(r, &resp.base);
out:
    if (leases) {
        for (size_t i = 0; i < nleases; i++) hy_store_release(r->s->store, leases[i]);
        free(leases);
    }
    free(st);
    free(sp);
    segs_free(sg, q->n_segments);
    return c;
}

/* --- Warm ----------------------------------------------------------------------- */

static hy_rpc_code do_warm(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__WarmRequest *q = (const void *)req;
    svc_model *sm;
    hy_rpc_code c;
    int W;
    hy_entry_dtype dt = HY_ENTRY_F32;
    seg *sg = NULL;
    if ((c = check_tenant(r, q->tenant)) || (c = need_model(r, q->model, &sm)) ||
        (c = seam_of(r, q->seam_opt_case == HYPIC__V1__WARM_REQUEST__SEAM_OPT_SEAM, q->seam, &W)) ||
        (c = dtype_of(r, q->dtype, &dt)) ||
        (c = segs_parse(r, sm, q->segments, q->n_segments, 0, false, &sg)))
        return c;
    set_threads(r->s);
    for (size_t i = 0; i < q->n_segments && !c; i++) {
        const double t0 = hy_now_s();
        Hypic__V1__WarmProgress p = HYPIC__V1__WARM_PROGRESS__INIT;
        p.index = (uint32_t)i;
        hy_entry_key(r->who.tenant, sm->fp, W, dt, sg[i].tok, sg[i].n, sg[i].key.b);
        p.key = (ProtobufCBinaryData){HY_KEY_BYTES, sg[i].key.b};
        hy_meta m;
        int w;
        hy_err e = {0};
        if (hy_rpc_call_ms_left(r->call) <= 0) {
            c = fail(r, HY_RPC_DEADLINE_EXCEEDED, "the deadline passed after %zu of %zu segments",
                     i, q->n_segments);
            break;
        }
        if (visible(r, sm, &sg[i].key, &m, NULL)) {
            p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_CACHED;
            p.bytes = m.bytes;
            r->hits++;
        } else if (hy_entry_seam(sm->c, sg[i].n, W, &w, &e) != HY_OK) {
            p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_UNCACHEABLE;
            p.error = e.msg;
        } else {
            svc_exec *x;
            if ((c = svc_exec_take(r->s, sm, r->call, &x, r->msg, sizeof r->msg))) break;
            hy_state_reset(x->st);
            hy_entry *ent = NULL;
            int rc = hy_entry_build(x->ex, x->st, sg[i].tok, sg[i].n, W, dt, NULL, &ent, &e);
            svc_exec_give(r->s, sm, x);
            hy_tier_id placed = HY_TIER_NONE;
            uint64_t bytes = 0;
            if (!rc)
                rc = svc_store_entry(r->s, sm, r->who.tenant, &sg[i].key, ent, sg[i].tags,
                                     sg[i].ntags, &placed, &bytes, &e);
            hy_entry_free(ent);
            r->computed += (int64_t)sg[i].n;
            r->misses++;
            if (rc) {
                p.state = HYPIC__V1__WARM_PROGRESS__STATE__STATE_FAILED;
                p.error = e.msg;
            } else {
                p.state = placed == HY_TIER_NONE
                              ? HYPIC__V1__WARM_PROGRESS__STATE__STATE_NOT_ADMITTED
                              : HYPIC__V1__WARM_PROGRESS__STATE__STATE_BUILT;
                p.tier = pb_tier(placed);
                p.bytes = bytes;
            }
        }
        p.ms = (hy_now_s() - t0) * 1e3;
        c = send(r, &p.base);
    }
    segs_free(sg, q->n_segments);
    return c;
}

/* --- Prefill --------------------------------------------------------------------- */

static int cmp_prob(const void *a, const void *b)
{
    const Hypic__V1__TokenProb *x = a, *y = b;
    return (x->logit < y->logit) - (x->logit > y->logit);
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static hy_rpc_code do_prefill(rq *r, const ProtobufCMessage *req)
{
    const double t_start = hy_now_s();
    const Hypic__V1__PrefillRequest *q = (const void *)req;
    hy_svc *s = r->s;
    svc_model *sm;
    hy_rpc_code c;
    int W;
    hy_entry_dtype dt = HY_ENTRY_F32;
    seg *sg = NULL;
    if ((c = check_tenant(r, q->tenant)) || (c = need_model(r, q->model, &sm)) ||
        (c = seam_of(r, q->seam_opt_case == HYPIC__V1__PREFILL_REQUEST__SEAM_OPT_SEAM, q->seam,
                     &W)) ||
        (c = dtype_of(r, q->dtype, &dt)))
        return c;
    hy_mode mode;
    switch ((int)q->mode) {
    case HYPIC__V1__MODE__MODE_UNSPECIFIED:
    case HYPIC__V1__MODE__MODE_PIC:
        mode = HY_MODE_PIC;
        break;
    case HYPIC__V1__MODE__MODE_FULL:
        mode = HY_MODE_FULL;
        break;
    case HYPIC__V1__MODE__MODE_PREFIX:
        mode = HY_MODE_PREFIX;
        break;
    case HYPIC__V1__MODE__MODE_NOSEAM:
        mode = HY_MODE_NOSEAM;
        break;
    case HYPIC__V1__MODE__MODE_NAIVE:
        mode = HY_MODE_NAIVE;
        break;
    default:
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'mode': %d is not a Mode", (int)q->mode);
    }
    r->mode = hy_mode_name(mode);
    const int V = sm->c->vocab;
    const uint32_t top_k = q->top_k ? q->top_k : s->cfg.top_k;
    if (top_k > s->cfg.max_top_k || top_k > (uint32_t)V)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'top_k': %u is over the limit of %u",
                    q->top_k, HY_MIN(s->cfg.max_top_k, (uint32_t)V));
    if (q->max_new_tokens > s->cfg.max_new_tokens)
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "field 'max_new_tokens': %u is over the limit of %u (limits.max_new_tokens)",
                    q->max_new_tokens, s->cfg.max_new_tokens);
    if (q->n_query == 0)
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "field 'query' is empty: at least one token, whose logits answer");
    for (size_t t = 0; t < q->n_query; t++)
        if (q->query[t] >= (uint32_t)V)
            return fail(r, HY_RPC_INVALID_ARGUMENT,
                        "field 'query[%zu]': %u is outside the vocabulary of model '%s' (0..%d)", t,
                        q->query[t], sm->name, V - 1);
    if ((c = segs_parse(r, sm, q->segments, q->n_segments, q->n_query, true, &sg))) return c;
    const size_t n = q->n_segments;
    Hypic__V1__Timings tm = HYPIC__V1__TIMINGS__INIT;
    const int Wm = mode == HY_MODE_NOSEAM ? 0 : W; /* the W of the entries this mode uses */

    /* lookup and fetch */
    double t0 = hy_now_s();
    if ((c = segs_resolve_keys(r, sm, sg, n))) goto out_segs;
    const bool reuse = mode == HY_MODE_PIC || mode == HY_MODE_NOSEAM || mode == HY_MODE_NAIVE;
    hy_tier_id *from = calloc(n, sizeof *from);
    hy_segment *hs = calloc(n, sizeof *hs);
    hy_entry **built = calloc(n, sizeof *built);
    int32_t *query = malloc(q->n_query * sizeof *query);
    float *logits = malloc((size_t)V * sizeof *logits);
    Hypic__V1__TokenProb *tp = calloc((size_t)V, sizeof *tp);
    Hypic__V1__TokenProb **tpp = calloc(top_k ? top_k : 1, sizeof *tpp);
    uint32_t *gen = calloc(q->max_new_tokens ? q->max_new_tokens : 1, sizeof *gen);
    Hypic__V1__SegmentOutcome *oc = calloc(n, sizeof *oc);
    Hypic__V1__SegmentOutcome **ocp = calloc(n, sizeof *ocp);
    hy_key *keys = calloc(n, sizeof *keys);
    if (!from || !hs || !built || !query || !logits || !tp || !tpp || !gen || !oc || !ocp ||
        !keys) {
        c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t t = 0; t < q->n_query; t++) query[t] = (int32_t)q->query[t];
    for (size_t i = 0; i < n; i++) {
        from[i] = HY_TIER_NONE;
        hs[i] = (hy_segment){sg[i].tok, sg[i].n, NULL};
        hy_entry_key(r->who.tenant, sm->fp, Wm, dt, sg[i].tok, sg[i].n, keys[i].b);
    }
    tm.lookup_ms = (hy_now_s() - t0) * 1e3;
    for (size_t i = 0; reuse && i < n; i++) {
        /* an entry already fetched for its key, of this mode's W and dtype */
        if (sg[i].entry && hy_entry_seam_setting(sg[i].entry) == Wm &&
            hy_entry_dtype_of(sg[i].entry) == dt) {
            hs[i].entry = sg[i].entry;
            from[i] = sg[i].from;
            continue;
        }
        hy_entry_free(sg[i].entry); /* named by key, but built under another W or dtype */
        sg[i].entry = NULL;
        t0 = hy_now_s();
        hy_err e = {0};
        uint64_t bytes;
        int rc = fetch_entry(r, sm, &keys[i], &sg[i].entry, &from[i], &bytes, &e);
        const double ms = (hy_now_s() - t0) * 1e3;
        if (rc == HY_ENOTFOUND) {
            from[i] = HY_TIER_NONE;
            tm.lookup_ms += ms;
            continue;
        }
        if (rc) {
            c = from_err(r, rc, &e);
            goto out;
        }
        hs[i].entry = sg[i].entry;
        if (from[i] == HY_TIER_HBM)
            tm.fetch_hbm_ms += ms;
        else if (from[i] == HY_TIER_NVME)
            tm.fetch_nvme_ms += ms;
        else
            tm.fetch_host_ms += ms;
    }

    /* the forward pass */
    svc_exec *x;
    if ((c = svc_exec_take(s, sm, r->call, &x, r->msg, sizeof r->msg))) goto out;
    svc_prefix *pfx = NULL;
    hy_err e = {0};
    int rc = mode == HY_MODE_PREFIX ? svc_prefix_get(s, sm, r->who.tenant, &pfx, &e) : HY_OK;
    hy_request hr = {.segs = hs,
                     .nsegs = n,
                     .query = query,
                     .nq = q->n_query,
                     .mode = mode,
                     .W = W,
                     .dtype = dt,
                     .prefix = pfx ? pfx->pc : NULL};
    hy_result res = {.built = built};
    set_threads(s);
    if (!rc) rc = hy_combine(x->ex, x->st, &hr, logits, &res, &e);
    svc_prefix_put(pfx);
    const double t_first = hy_now_s();
    tm.ttft_ms = (t_first - t_start) * 1e3;
    tm.prefix_restore_ms = res.restore_s * 1e3;
    tm.seams_ms = res.seam_s * 1e3;
    tm.compose_ms = res.compose_s * 1e3;
    tm.misses_ms = res.segments_s * 1e3;
    tm.query_ms = res.query_s * 1e3;
    /* the first token's candidates, then the greedy continuation */
    size_t ngen = 0;
    if (!rc) {
        float mx = logits[argmax(logits, V)];
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)(logits[v] - mx));
        for (int v = 0; v < V; v++) {
            Hypic__V1__TokenProb init = HYPIC__V1__TOKEN_PROB__INIT;
            tp[v] = init;
            tp[v].token = (uint32_t)v;
            tp[v].logit = logits[v];
            tp[v].prob = (float)(exp((double)(logits[v] - mx)) / z);
        }
        if (q->max_new_tokens) gen[ngen++] = (uint32_t)argmax(logits, V);
        while (!rc && ngen < q->max_new_tokens) {
            rc = hy_exec_decode(x->ex, x->st, (int32_t)gen[ngen - 1], logits, &e);
            if (!rc) gen[ngen++] = (uint32_t)argmax(logits, V);
        }
        tm.decode_ms = (hy_now_s() - t_first) * 1e3;
        r->computed = res.prefilled + (int64_t)(ngen ? ngen - 1 : 0);
    }
    svc_exec_give(s, sm, x);
    if (rc) {
        c = from_err(r, rc, &e);
        goto out;
    }
    qsort(tp, (size_t)V, sizeof *tp, cmp_prob);
    for (uint32_t k = 0; k < top_k; k++) tpp[k] = &tp[k];

    /* misses built inline go to the store, subject to admission */
    t0 = hy_now_s();
    for (size_t i = 0; i < n; i++) {
        Hypic__V1__SegmentOutcome init = HYPIC__V1__SEGMENT_OUTCOME__INIT;
        oc[i] = init;
        ocp[i] = &oc[i];
        oc[i].key = (ProtobufCBinaryData){HY_KEY_BYTES, keys[i].b};
        if (mode == HY_MODE_PREFIX && (int)i < res.prefix_segments) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_PREFIX;
            r->hits++;
        } else if (hs[i].entry) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_HIT;
            oc[i].tier = pb_tier(from[i]);
            r->hits++;
        } else if (built[i]) {
            oc[i].kind = HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            hy_tier_id placed = HY_TIER_NONE;
            hy_err se = {0};
            if (svc_store_entry(s, sm, r->who.tenant, &keys[i], built[i], sg[i].tags, sg[i].ntags,
                                &placed, NULL, &se))
                hy_log(HY_LOG_WARN, "storing an entry built inline: %s", se.msg);
            oc[i].stored = placed != HY_TIER_NONE;
            oc[i].tier = pb_tier(placed);
            r->misses++;
        } else {
            oc[i].kind = reuse ? HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_UNCACHEABLE
                               : HYPIC__V1__SEGMENT_OUTCOME__KIND__KIND_MISS;
            if (reuse) atomic_fetch_add(&s->met.segments_uncacheable, 1);
            r->misses += !reuse;
        }
    }
    tm.store_ms = (hy_now_s() - t0) * 1e3;
    tm.total_ms = (hy_now_s() - t_start) * 1e3;
    r->ttft_ms = tm.ttft_ms;
    hy_hist_observe(&s->met.ttft[mode], tm.ttft_ms / 1e3);
    atomic_fetch_add(&s->met.tokens_computed, (uint64_t)r->computed);
    atomic_fetch_add(&s->met.segments_hit, (uint64_t)r->hits);
    atomic_fetch_add(&s->met.segments_missed, (uint64_t)r->misses);

    Hypic__V1__PrefillResponse resp = HYPIC__V1__PREFILL_RESPONSE__INIT;
    resp.n_top = top_k;
    resp.top = tpp;
    resp.n_generated = ngen;
    resp.generated = gen;
    resp.n_segments = n;
    resp.segments = ocp;
    resp.tokens_computed = (uint64_t)r->computed;
    resp.timings = &tm;
    c = send(r, &resp.base);
out:
    for (size_t i = 0; built && i < n; i++) hy_entry_free(built[i]);
    free(from);
    free(hs);
    free(built);
    free(query);
    free(logits);
    free(tp);
    free(tpp);
    free(gen);
    free(oc);
    free(ocp);
    free(keys);
out_segs:
    segs_free(sg, n);
    return c;
}

/* --- GetEntry / PutEntry ---------------------------------------------------------- */

static hy_rpc_code do_get_entry(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__GetEntryRequest *q = (const void *)req;
    svc_model *sm;
    hy_key k;
    hy_rpc_code c;
    if ((c = check_tenant(r, q->tenant)) || (c = need_model(r, q->model, &sm)) ||
        (c = key_of(r, "key", q->key, &k)))
        return c;
    if (!visible(r, sm, &k, NULL, NULL)) return fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    hy_lease *l;
    hy_err e = {0};
    int rc = hy_store_acquire(r->s->store, &k, &l, &e);
    if (rc == HY_ENOTFOUND) return fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    if (rc) return from_err(r, rc, &e);
    hy_meta m = *hy_lease_meta(l);
    unsigned mask = 0;
    hy_store_tiers_of(r->s->store, &k, &mask);
    pb_meta pm;
    meta_to_pb(r->s, &m, mask, &pm);
    const uint8_t *data = hy_lease_data(l);
    const size_t chunk = HY_MIN((size_t)CHUNK_BYTES, (size_t)r->s->cfg.max_message / 2);
    for (uint64_t off = 0; off < m.bytes && !c; off += chunk) {
        Hypic__V1__EntryChunk ch = HYPIC__V1__ENTRY_CHUNK__INIT;
        if (off == 0) ch.meta = &pm.pb;
        ch.data = (ProtobufCBinaryData){(size_t)HY_MIN((uint64_t)chunk, m.bytes - off),
                                        (uint8_t *)data + off};
        c = send(r, &ch.base);
    }
    hy_store_release(r->s->store, l);
    return c;
}

static hy_rpc_code do_put_entry(rq *r, const ProtobufCMessage *req)
{
    (void)req; /* a client stream: read below */
    hy_svc *s = r->s;
    hy_rpc_code c = HY_RPC_OK;
    uint8_t *buf = NULL;
    uint64_t got = 0, want = 0;
    hy_meta m;
    memset(&m, 0, sizeof m);
    svc_model *sm = NULL;
    bool have_key = false;
    hy_key given;
    for (size_t i = 0;; i++) {
        ProtobufCMessage *msg;
        hy_err e = {0};
        int rc = hy_rpc_call_recv(r->call, &msg, &e);
        if (rc == HY_ENOTFOUND) break; /* the end of the stream */
        if (rc == HY_EFORMAT) {
            c = fail(r, HY_RPC_INVALID_ARGUMENT, "chunk %zu: %s", i, e.msg);
            break;
        }
        if (rc) {
            c = fail(r, HY_RPC_CANCELLED,
                     "the stream was cut short after %llu bytes: nothing "
                     "was stored",
                     (unsigned long long)got);
            break;
        }
        const Hypic__V1__EntryChunk *ch = (const void *)msg;
        if (i == 0) {
            const Hypic__V1__EntryMeta *pm = ch->meta;
            if (!pm) {
                c = fail(r, HY_RPC_INVALID_ARGUMENT, "chunk 0 has no 'meta'");
            } else if ((c = check_tenant(r, pm->tenant)) || (c = need_model(r, pm->model, &sm))) {
            } else if (pm->bytes == 0 || pm->bytes > s->cfg.max_entry_bytes) {
                c = fail(r, HY_RPC_INVALID_ARGUMENT,
                         "field 'meta.bytes': %llu is 0 or over the limit of %llu "
                         "(limits.max_entry_bytes)",
                         (unsigned long long)pm->bytes, (unsigned long long)s->cfg.max_entry_bytes);
            } else if (pm->n_tags > HY_MAX_TAGS) {
                c = fail(r, HY_RPC_INVALID_ARGUMENT, "field 'meta.tags': over %d tags",
                         HY_MAX_TAGS);
            } else if (pm->key.len && (c = key_of(r, "meta.key", pm->key, &given))) {
            } else if (!(buf = malloc(pm->bytes))) {
                c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory for %llu bytes",
                         (unsigned long long)pm->bytes);
            } else {
                have_key = pm->key.len != 0;
                want = pm->bytes;
                for (size_t t = 0; t < pm->n_tags && !c; t++) {
                    if (!pm->tags[t][0] || strlen(pm->tags[t]) >= HY_TAG_MAX)
                        c = fail(r, HY_RPC_INVALID_ARGUMENT,
                                 "field 'meta.tags[%zu]': empty or over %d bytes", t,
                                 HY_TAG_MAX - 1);
                    else
                        snprintf(m.tags[m.ntags++], HY_TAG_MAX, "%s", pm->tags[t]);
                }
            }
        } else if (ch->meta) {
            c = fail(r, HY_RPC_INVALID_ARGUMENT, "chunk %zu carries 'meta': only the first may", i);
        }
        if (!c && ch->data.len > want - got)
            c = fail(r, HY_RPC_INVALID_ARGUMENT, "chunk %zu: the chunks exceed meta.bytes (%llu)",
                     i, (unsigned long long)want);
        if (!c) {
            memcpy(buf + got, ch->data.data, ch->data.len);
            got += ch->data.len;
        }
        protobuf_c_message_free_unpacked(msg, NULL);
        if (c) break;
    }
    if (!c && !sm) c = fail(r, HY_RPC_INVALID_ARGUMENT, "the stream had no chunk");
    if (!c && got != want)
        c = fail(r, HY_RPC_INVALID_ARGUMENT,
                 "the stream ended after %llu of meta.bytes = %llu bytes: nothing was stored",
                 (unsigned long long)got, (unsigned long long)want);
    /* validated in full before anything is stored */
    hy_entry *ent = NULL;
    hy_err e = {0};
    if (!c) {
        int rc = hy_entry_deserialize(sm->m, buf, got, &ent, &e);
        if (rc) c = fail(r, HY_RPC_INVALID_ARGUMENT, "the entry failed validation: %s", e.msg);
    }
    hy_key k;
    if (!c) {
        const int32_t *tok;
        const size_t n = (size_t)hy_entry_tokens(ent, &tok);
        hy_entry_key(r->who.tenant, sm->fp, hy_entry_seam_setting(ent), hy_entry_dtype_of(ent), tok,
                     n, k.b);
        if (have_key && memcmp(k.b, given.b, HY_KEY_BYTES) != 0)
            c = fail(r, HY_RPC_INVALID_ARGUMENT,
                     "field 'meta.key' is not the key of the entry's tokens for your tenant");
        m.key = k;
        snprintf(m.tenant, sizeof m.tenant, "%s", r->who.tenant);
        memcpy(m.model, sm->fp, 32);
        m.tokens = (uint32_t)n;
        m.flops = hy_config_prefill_flops(sm->c, 0, hy_entry_body_tokens(ent));
        m.bytes = got;
    }
    hy_tier_id placed = HY_TIER_NONE;
    if (!c) {
        hy_put *p;
        void *dst;
        int rc = hy_store_reserve(s->store, &m, &p, &dst, &e);
        if (!rc) {
            memcpy(dst, buf, got);
            rc = hy_store_commit(s->store, p, &placed, &e);
        }
        if (rc) c = from_err(r, rc, &e);
    }
    hy_entry_free(ent);
    free(buf);
    if (c) return c;
    Hypic__V1__PutEntryResponse resp = HYPIC__V1__PUT_ENTRY_RESPONSE__INIT;
    resp.key = (ProtobufCBinaryData){HY_KEY_BYTES, k.b};
    resp.placed = pb_tier(placed);
    return send(r, &resp.base);
}

/* --- Invalidate, List, Inspect ------------------------------------------------------ */

static hy_rpc_code do_invalidate(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__InvalidateRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = check_tenant(r, q->tenant))) return c;
    hy_store_filter f = {.tenant = r->who.tenant};
    hy_key k;
    switch (q->target_case) {
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_KEY:
        if ((c = key_of(r, "key", q->key, &k))) return c;
        f.key = &k;
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_TAG:
        if (!q->tag[0]) return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tag' is empty");
        f.tag = q->tag;
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_ALL_OF_TENANT:
        if (!q->all_of_tenant)
            return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'all_of_tenant' is false");
        break;
    case HYPIC__V1__INVALIDATE_REQUEST__TARGET_MODEL: {
        svc_model *sm;
        if ((c = need_model(r, q->model, &sm))) return c;
        f.model = sm->fp;
        break;
    }
    default:
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "no target: set one of 'key', 'tag', 'all_of_tenant', 'model'");
    }
    size_t removed = 0;
    hy_err e = {0};
    int rc = hy_store_invalidate(r->s->store, &f, &removed, &e);
    if (rc) return from_err(r, rc, &e);
    Hypic__V1__InvalidateResponse resp = HYPIC__V1__INVALIDATE_RESPONSE__INIT;
    resp.removed = removed;
    return send(r, &resp.base);
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

static hy_rpc_code do_list(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__ListRequest *q = (const void *)req;
    hy_rpc_code c;
    if ((c = check_tenant(r, q->tenant))) return c;
    hy_store_filter f = {.tenant = r->who.tenant, .tag = q->tag[0] ? q->tag : NULL};
    if (q->model[0]) {
        svc_model *sm;
        if ((c = need_model(r, q->model, &sm))) return c;
        f.model = sm->fp;
    }
    if ((int)q->sort < 0 || q->sort > HYPIC__V1__LIST_REQUEST__SORT__SORT_AGE)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'sort': %d is not a Sort", (int)q->sort);
    const hy_tier_id tier = tier_from_pb(q->tier);
    if (q->tier != HYPIC__V1__TIER__TIER_NONE && tier == HY_TIER_NONE)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tier': %d is not a Tier", (int)q->tier);
    const uint32_t page = q->page_size ? q->page_size : HY_MIN(100u, r->s->cfg.page_size);
    if (page > r->s->cfg.page_size)
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "field 'page_size': %u is over the limit of %u (limits.page_size)", page,
                    r->s->cfg.page_size);
    size_t offset = 0;
    if (q->page_token[0]) {
        char *end;
        unsigned long long v = strtoull(q->page_token, &end, 10);
        if (*end || end == q->page_token)
            return fail(r, HY_RPC_INVALID_ARGUMENT,
                        "field 'page_token': not a token this server gave");
        offset = (size_t)v;
    }
    /* every match, then filter by tier, sort and slice */
    hy_err e = {0};
    size_t n = 0, total = 0;
    int rc = hy_store_list(r->s->store, &f, 0, NULL, 0, &n, &total, &e);
    if (rc) return from_err(r, rc, &e);
    if (total > LIST_SORT_MAX)
        return fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                    "%zu entries match: over %d cannot be listed at once; filter by tag or model",
                    total, LIST_SORT_MAX);
    hy_meta *all = malloc((total ? total : 1) * sizeof *all);
    listed *ls = malloc((total ? total : 1) * sizeof *ls);
    Hypic__V1__ListResponse resp = HYPIC__V1__LIST_RESPONSE__INIT;
    pb_meta *pm = NULL;
    Hypic__V1__EntryMeta **pp = NULL;
    if (!all || !ls) {
        c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    if ((rc = hy_store_list(r->s->store, &f, 0, all, total, &n, NULL, &e))) {
        c = from_err(r, rc, &e);
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
        c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < cnt; i++) {
        meta_to_pb(r->s, &ls[from + i].m, ls[from + i].mask, &pm[i]);
        pp[i] = &pm[i].pb;
    }
    char next[32] = "";
    if (from + cnt < m) snprintf(next, sizeof next, "%zu", from + cnt);
    resp.n_entries = cnt;
    resp.entries = pp;
    resp.next_page_token = next;
    resp.total = m;
    c = send(r, &resp.base);
out:
    free(all);
    free(ls);
    free(pm);
    free(pp);
    return c;
}

static hy_rpc_code do_inspect(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__InspectRequest *q = (const void *)req;
    hy_rpc_code c;
    hy_key k;
    if ((c = check_tenant(r, q->tenant)) || (c = key_of(r, "key", q->key, &k))) return c;
    hy_meta m;
    unsigned mask;
    if (!visible(r, NULL, &k, &m, &mask)) return fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    const svc_model *sm = model_by_fp(r->s, m.model);
    if (!sm)
        return fail(r, HY_RPC_FAILED_PRECONDITION,
                    "the entry is of a model this server no longer serves");
    hy_lease *l;
    hy_err e = {0};
    int rc = hy_store_acquire(r->s->store, &k, &l, &e);
    if (rc == HY_ENOTFOUND) return fail(r, HY_RPC_NOT_FOUND, "key is not cached");
    if (rc) return from_err(r, rc, &e);
    hy_entry *ent = NULL;
    rc = hy_entry_deserialize(sm->m, hy_lease_data(l), hy_lease_meta(l)->bytes, &ent, &e);
    hy_store_release(r->s->store, l);
    if (rc) /* reported, not removed: an operator is looking at it */
        return fail(r, HY_RPC_DATA_LOSS, "the entry's bytes fail validation: %s", e.msg);
    hy_entry_section secs[1 + 3 * HY_MAX_LAYERS];
    const size_t ns = hy_entry_sections(ent, secs, sizeof secs / sizeof *secs);
    Hypic__V1__Section *sp = calloc(ns ? ns : 1, sizeof *sp);
    Hypic__V1__Section **spp = calloc(ns ? ns : 1, sizeof *spp);
    if (!sp || !spp) {
        free(sp);
        free(spp);
        hy_entry_free(ent);
        return fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
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
    meta_to_pb(r->s, &m, mask, &pm);
    Hypic__V1__InspectResponse resp = HYPIC__V1__INSPECT_RESPONSE__INIT;
    resp.meta = &pm.pb;
    resp.seam = (uint32_t)hy_entry_seam_setting(ent);
    resp.seam_tokens = (uint32_t)hy_entry_seam_width(ent);
    resp.body_tokens = (uint32_t)hy_entry_body_tokens(ent);
    resp.dtype = hy_entry_dtype_of(ent) == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                                         : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    resp.format_version = HY_ENTRY_VERSION;
    resp.n_sections = ns;
    resp.sections = spp;
    resp.verified = q->verify;
    c = send(r, &resp.base);
    free(sp);
    free(spp);
    hy_entry_free(ent);
    return c;
}

/* --- Watch ----------------------------------------------------------------------------- */

static hy_rpc_code do_watch(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__WatchRequest *q = (const void *)req;
    hy_svc *s = r->s;
    svc_hub *h = &s->hub;
    hy_rpc_code c;
    svc_model *sm = NULL;
    if ((c = check_tenant(r, q->tenant))) return c;
    if (q->model[0] && (c = need_model(r, q->model, &sm))) return c;
    pthread_mutex_lock(&h->mu);
    if ((uint32_t)h->watchers >= s->cfg.watchers) {
        pthread_mutex_unlock(&h->mu);
        return fail(r, HY_RPC_RESOURCE_EXHAUSTED,
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
            c = fail(r, HY_RPC_UNAVAILABLE, "the server is shutting down");
            break;
        }
        if (hy_rpc_call_ms_left(r->call) <= 0) {
            c = fail(r, HY_RPC_DEADLINE_EXCEEDED, "the Watch deadline passed");
            break;
        }
        if (h->next - seq > SVC_HUB_RING) {
            c = fail(r, HY_RPC_RESOURCE_EXHAUSTED,
                     "this watcher fell more than %d events behind; watch again", SVC_HUB_RING);
            break;
        }
        size_t nb = 0;
        while (seq < h->next && nb < 64) batch[nb++] = h->ring[seq++ % SVC_HUB_RING];
        pthread_mutex_unlock(&h->mu);
        /* A heartbeat after a quiet spell: a client that went away is only
         * noticed when a send fails, and it must not hold a worker and a
         * watcher slot until its tenant's next event. */
        if (hy_now_s() - last_sent >= SVC_WATCH_HEARTBEAT_S) {
            Hypic__V1__WatchEvent hb = HYPIC__V1__WATCH_EVENT__INIT;
            hb.kind = HYPIC__V1__WATCH_EVENT__KIND__KIND_HEARTBEAT;
            c = send(r, &hb.base);
            last_sent = hy_now_s();
        }
        for (size_t i = 0; i < nb && !c; i++) {
            svc_event *ev = &batch[i];
            if (strcmp(ev->meta.tenant, r->who.tenant) != 0) continue;
            if (sm && memcmp(ev->meta.model, sm->fp, 32) != 0) continue;
            pb_meta pm;
            meta_to_pb(s, &ev->meta, 0, &pm);
            Hypic__V1__WatchEvent we = HYPIC__V1__WATCH_EVENT__INIT;
            we.kind = ev->kind == HY_STORE_STORED ? HYPIC__V1__WATCH_EVENT__KIND__KIND_STORED
                                                  : HYPIC__V1__WATCH_EVENT__KIND__KIND_REMOVED;
            we.meta = &pm.pb;
            we.reason = ev->kind == HY_STORE_REMOVED ? ev->reason : "";
            c = send(r, &we.base);
            last_sent = hy_now_s();
        }
        pthread_mutex_lock(&h->mu);
    }
    h->watchers--;
    pthread_mutex_unlock(&h->mu);
    free(batch);
    if (!batch && !c) c = fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    return c;
}

/* --- Stats, policies, health --------------------------------------------------------- */

static hy_rpc_code do_stats(rq *r, const ProtobufCMessage *req)
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
        ts[i].tier = pb_tier(order[i]);
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
    if (r->who.admin) { /* the whole store */
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
        resp.requests_in_flight = (uint64_t)atomic_load(&s->in_flight);
        resp.queue_depth = (uint64_t)atomic_load(&s->queued);
    } else { /* a tenant sees its own entries and nothing of others' */
        hy_store_filter f = {.tenant = r->who.tenant};
        size_t n = 0, total = 0;
        hy_err e = {0};
        hy_store_list(s->store, &f, 0, NULL, 0, &n, &total, &e);
        resp.entries = total;
        ts[1].bytes = hy_store_tenant_bytes(s->store, r->who.tenant);
    }
    resp.n_tiers = 3;
    resp.tiers = tsp;
    return send(r, &resp.base);
}

static hy_rpc_code policy_reply(rq *r, hy_tier_id t)
{
    hy_policy_config p;
    hy_err e = {0};
    if (hy_store_get_policy(r->s->store, t, &p, &e))
        return fail(r, HY_RPC_FAILED_PRECONDITION, "this server has no %s tier",
                    t == HY_TIER_HBM    ? "hbm"
                    : t == HY_TIER_NVME ? "NVMe"
                                        : "host");
    Hypic__V1__Policy resp = HYPIC__V1__POLICY__INIT;
    resp.tier = pb_tier(t);
    resp.evict = (char *)hy_evict_name(p.evict);
    resp.admit = (char *)hy_admit_name(p.admit);
    resp.min_tokens = p.min_tokens;
    return send(r, &resp.base);
}

static hy_rpc_code do_get_policy(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__GetPolicyRequest *q = (const void *)req;
    const hy_tier_id t = tier_from_pb(q->tier);
    if (t == HY_TIER_NONE)
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'tier': name a tier (HBM, HOST or NVME)");
    return policy_reply(r, t);
}

static hy_rpc_code do_set_policy(rq *r, const ProtobufCMessage *req)
{
    const Hypic__V1__SetPolicyRequest *q = (const void *)req;
    if (!r->who.admin)
        return fail(r, HY_RPC_PERMISSION_DENIED,
                    "tenant '%s' may not change policies (tenants.list[].admin)", r->who.tenant);
    if (!q->policy) return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'policy' is missing");
    const hy_tier_id t = tier_from_pb(q->policy->tier);
    if (t == HY_TIER_NONE)
        return fail(r, HY_RPC_INVALID_ARGUMENT,
                    "field 'policy.tier': name a tier (HBM, HOST or NVME)");
    char admit[48];
    snprintf(admit, sizeof admit, "%s", q->policy->admit);
    if (strcmp(admit, "min-tokens") == 0)
        snprintf(admit, sizeof admit, "min-tokens %u", q->policy->min_tokens);
    hy_policy_config p;
    hy_err e = {0};
    if (hy_policy_parse(q->policy->evict, admit, &p, &e))
        return fail(r, HY_RPC_INVALID_ARGUMENT, "field 'policy': %s", e.msg);
    if (hy_store_set_policy(r->s->store, t, &p, &e))
        return fail(r, HY_RPC_FAILED_PRECONDITION, "%s", e.msg);
    hy_log(HY_LOG_INFO, "policy of tier %s set to %s/%s by tenant '%s'",
           t == HY_TIER_HBM    ? "hbm"
           : t == HY_TIER_NVME ? "nvme"
                               : "host",
           hy_evict_name(p.evict), hy_admit_name(p.admit), r->who.tenant);
    return policy_reply(r, t);
}

static hy_rpc_code do_health(rq *r, const ProtobufCMessage *req)
{
    (void)req;
    hy_svc *s = r->s;
    char *names[HY_CFG_MAX_MODELS];
    for (int i = 0; i < s->nmodels; i++) names[i] = s->models[i].name;
    Hypic__V1__HealthResponse resp = HYPIC__V1__HEALTH_RESPONSE__INIT;
    resp.status = s->ready && !s->draining ? HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_SERVING
                                           : HYPIC__V1__HEALTH_RESPONSE__STATUS__STATUS_NOT_SERVING;
    resp.version = HY_CACHED_VERSION;
    resp.n_models = (size_t)s->nmodels;
    resp.models = names;
    return send(r, &resp.base);
}

/* --- dispatch ---------------------------------------------------------------------- */

typedef hy_rpc_code (*method_fn)(rq *r, const ProtobufCMessage *req);

static const char *code_name(int c)
{
    static const char *names[SVC_CODES] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
    return c >= 0 && c < SVC_CODES ? names[c] : "?";
}

static void run(void *app, hy_rpc_call *call, const ProtobufCMessage *req, int idx, method_fn fn,
                bool needs_auth)
{
    hy_svc *s = app;
    const double t0 = hy_now_s();
    rq r = {.s = s, .call = call, .model = "", .mode = ""};
    hy_rpc_code c = HY_RPC_OK;
    bool entered = false;
    atomic_fetch_add(&s->in_flight, 1);
    if (s->draining && fn != do_health) {
        c = fail(&r, HY_RPC_UNAVAILABLE, "the server is shutting down");
    } else if (needs_auth) {
        c = svc_enter(s, call, &r.who, r.msg, sizeof r.msg);
        entered = c == HY_RPC_OK;
    }
    if (!c) {
        svc_lease_reap(s, false);
        c = fn(&r, req);
    }
    if (entered) svc_leave(s, &r.who);
    hy_rpc_call_finish(call, c, c ? r.msg : NULL);
    const double dt = hy_now_s() - t0;
    atomic_fetch_add(&s->met.calls[idx][c < SVC_CODES ? c : HY_RPC_UNKNOWN], 1);
    hy_hist_observe(&s->met.latency[idx], dt);
    atomic_fetch_sub(&s->in_flight, 1);
    if (s->cfg.log_requests || c != HY_RPC_OK)
        hy_log(c == HY_RPC_OK ? HY_LOG_INFO : HY_LOG_WARN,
               "rpc method=%s tenant=%s model=%s mode=%s status=%s segments=%d hits=%d misses=%d "
               "computed=%lld ttft_ms=%.3f ms=%.3f%s%s%s",
               hy_rpc_methods[idx].name, r.who.tenant[0] ? r.who.tenant : "-",
               r.model[0] ? r.model : "-", r.mode[0] ? r.mode : "-", code_name(c), r.segs, r.hits,
               r.misses, (long long)r.computed, r.ttft_ms, dt * 1e3, c ? " error=\"" : "",
               c ? r.msg : "", c ? "\"" : "");
}

#define HANDLER(NAME, IDX, FN, AUTH)                                                               \
    static void NAME(void *app, hy_rpc_call *call, const ProtobufCMessage *req)                    \
    {                                                                                              \
        run(app, call, req, IDX, FN, AUTH);                                                        \
    }
HANDLER(h_lookup, 0, do_lookup, true)
HANDLER(h_warm, 1, do_warm, true)
HANDLER(h_prefill, 2, do_prefill, true)
HANDLER(h_get_entry, 3, do_get_entry, true)
HANDLER(h_put_entry, 4, do_put_entry, true)
HANDLER(h_invalidate, 5, do_invalidate, true)
HANDLER(h_list, 6, do_list, true)
HANDLER(h_inspect, 7, do_inspect, true)
HANDLER(h_watch, 8, do_watch, true)
HANDLER(h_stats, 9, do_stats, true)
HANDLER(h_get_policy, 10, do_get_policy, true)
HANDLER(h_set_policy, 11, do_set_policy, true)
HANDLER(h_health, 12, do_health, false)

/* In hy_rpc_methods' order (hypic.proto's). */
const hy_rpc_handler svc_handlers[] = {
    h_lookup,  h_warm,  h_prefill, h_get_entry,  h_put_entry,  h_invalidate, h_list,
    h_inspect, h_watch, h_stats,   h_get_policy, h_set_policy, h_health};
