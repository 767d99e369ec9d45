/*
 * The RPCs of hypic.v1 over the service's state (service_internal.h).
 *
 * Every call goes through the front door (run(), below): refused
 * UNAVAILABLE while draining, authenticated before its body is read
 * (svc_enter: the tenant comes from the bearer token, never from the body),
 * counted in flight for its tenant, its request received within its method's
 * limit, answered by its method's function, finished with the status that
 * function returns, logged as one line and counted in the metrics.
 *
 * Isolation. Keys are derived with the caller's tenant, so a tenant's
 * segments never name another's entries; a key given in a request (Lookup,
 * Prefill, GetEntry, Inspect, Invalidate) is only "visible" when its entry
 * belongs to the caller's tenant, and an invisible key gets exactly the
 * answer of an absent one (a miss, NOT_FOUND, 0 removed). Listing, Watch and
 * Stats are filtered to the caller's tenant (Stats in full for admins).
 */
#include "cluster_internal.h"
#include "handlers_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- shared checks and conversions ---------------------------------------------- */

hy_rpc_code h_fail(rq *r, hy_rpc_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, sizeof r->msg, fmt, ap);
    va_end(ap);
    return code;
}

/* A library error as a status: bad input INVALID_ARGUMENT, limits
 * RESOURCE_EXHAUSTED, cancelled work CANCELLED, or DEADLINE_EXCEEDED when
 * what called it off was the call's deadline (the status a client's own
 * timer would give: the two must not depend on which comes first), the
 * rest INTERNAL. */
hy_rpc_code h_from_err(rq *r, int rc, const hy_err *e)
{
    const bool late = rc == HY_ECANCELED && r->call && hy_rpc_call_ms_left(r->call) <= 0;
    hy_rpc_code code = rc == HY_EINVAL || rc == HY_EFORMAT  ? HY_RPC_INVALID_ARGUMENT
                       : rc == HY_ERANGE || rc == HY_ENOMEM ? HY_RPC_RESOURCE_EXHAUSTED
                       : rc == HY_ENOTFOUND                 ? HY_RPC_NOT_FOUND
                       : late                               ? HY_RPC_DEADLINE_EXCEEDED
                       : rc == HY_ECANCELED                 ? HY_RPC_CANCELLED
                                                            : HY_RPC_INTERNAL;
    return h_fail(r, code, "%s", e->msg[0] ? e->msg : hy_strerror(rc));
}

/* --- shared checks -------------------------------------------------------------- */

hy_rpc_code h_check_tenant(rq *r, const char *tenant)
{
    if (tenant && tenant[0] && strcmp(tenant, r->who.tenant) != 0)
        return h_fail(r, HY_RPC_PERMISSION_DENIED,
                      "field 'tenant': '%.64s' is not the tenant the bearer token authenticates",
                      tenant);
    return HY_RPC_OK;
}

hy_rpc_code h_need_member(rq *r, bool local_only)
{
    if (!local_only || r->who.member) return HY_RPC_OK;
    return h_fail(r, HY_RPC_PERMISSION_DENIED,
                  "field 'local_only': only another member may ask for this member's store "
                  "alone (it calls with the member credential of cluster.secret)");
}

hy_rpc_code h_need_model(rq *r, const char *name, svc_model **out)
{
    *out = NULL;
    if (!name || !name[0]) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'model' is empty");
    snprintf(r->model, sizeof r->model, "%s", name);
    *out = svc_model_find(r->s, name);
    if (*out) return HY_RPC_OK;
    char served[256] = "";
    for (int i = 0; i < r->s->nmodels; i++)
        snprintf(served + strlen(served), sizeof served - strlen(served), "%s%s", i ? ", " : "",
                 r->s->models[i].name);
    return h_fail(r, HY_RPC_NOT_FOUND, "field 'model': '%.64s' is not served here (served: %s)",
                  name, served);
}

hy_rpc_code h_seam_of(rq *r, bool has, uint32_t seam, int *W)
{
    *W = r->s->cfg.seam;
    if (!has) return HY_RPC_OK;
    if (seam > MAX_SEAM)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'seam': %u is over the limit of %d", seam,
                      MAX_SEAM);
    *W = (int)seam;
    return HY_RPC_OK;
}

hy_rpc_code h_dtype_of(rq *r, Hypic__V1__StateDtype d, hy_entry_dtype *out)
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
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'dtype': %d is not a StateDtype", (int)d);
    }
}

hy_rpc_code h_keyed_fields(rq *r, const char *tenant, const char *model, bool has_seam,
                           uint32_t seam, Hypic__V1__StateDtype dtype, svc_model **sm, int *W,
                           hy_entry_repr *rp)
{
    hy_rpc_code c;
    const hy_cached_config *cf = &r->s->cfg;
    *rp = (hy_entry_repr){.t = cf->t_dtype, .kv = cf->kv_dtype, .tol = cf->tolerance};
    if ((c = h_check_tenant(r, tenant)) || (c = h_need_model(r, model, sm)) ||
        (c = h_seam_of(r, has_seam, seam, W)) || (c = h_dtype_of(r, dtype, &rp->s)))
        return c;
    return HY_RPC_OK;
}

hy_rpc_code h_repr_of(rq *r, const Hypic__V1__Representation *pb, hy_entry_repr *rp)
{
    if (!pb) return HY_RPC_OK;
    hy_rpc_code c;
    hy_entry_repr v = *rp;
    if (!(pb->tolerance >= 0.0f && pb->tolerance <= 1.0f))
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'repr.tolerance': %g is outside [0, 1]",
                      (double)pb->tolerance);
    v.tol = pb->tolerance;
    if ((c = h_dtype_of(r, pb->t_dtype, &v.t)) || (c = h_dtype_of(r, pb->kv_dtype, &v.kv)))
        return c;
    if (pb->t_dtype == HYPIC__V1__STATE_DTYPE__STATE_DTYPE_UNSPECIFIED) v.t = r->s->cfg.t_dtype;
    if (pb->kv_dtype == HYPIC__V1__STATE_DTYPE__STATE_DTYPE_UNSPECIFIED) v.kv = r->s->cfg.kv_dtype;
    *rp = v;
    return HY_RPC_OK;
}

void h_repr_to_pb(hy_entry_repr rp, Hypic__V1__Representation *pb)
{
    hypic__v1__representation__init(pb);
    pb->tolerance = rp.tol;
    pb->t_dtype = rp.t == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                        : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
    pb->kv_dtype = rp.kv == HY_ENTRY_BF16 ? HYPIC__V1__STATE_DTYPE__STATE_DTYPE_BF16
                                          : HYPIC__V1__STATE_DTYPE__STATE_DTYPE_F32;
}

hy_rpc_code h_key_of(rq *r, const char *field, ProtobufCBinaryData b, hy_key *k)
{
    if (b.len != HY_KEY_BYTES)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field '%s': a key is %d bytes, not %zu", field,
                      HY_KEY_BYTES, b.len);
    memcpy(k->b, b.data, HY_KEY_BYTES);
    return HY_RPC_OK;
}

Hypic__V1__Tier h_pb_tier(hy_tier_id t)
{
    return t == HY_TIER_HBM    ? HYPIC__V1__TIER__TIER_HBM
           : t == HY_TIER_HOST ? HYPIC__V1__TIER__TIER_HOST
           : t == HY_TIER_NVME ? HYPIC__V1__TIER__TIER_NVME
                               : HYPIC__V1__TIER__TIER_NONE;
}

hy_tier_id h_fastest(unsigned mask)
{
    return mask & (1u << HY_TIER_HBM)    ? HY_TIER_HBM
           : mask & (1u << HY_TIER_HOST) ? HY_TIER_HOST
           : mask & (1u << HY_TIER_NVME) ? HY_TIER_NVME
                                         : HY_TIER_NONE;
}

/* Whether key names an entry of the caller's tenant (and of model sm when
 * not NULL): what every method that takes a key asks first. */
bool h_visible(rq *r, const svc_model *sm, const hy_key *k, hy_meta *m, unsigned *mask)
{
    hy_meta tmp;
    if (!m) m = &tmp;
    if (hy_store_peek(r->s->store, k, m, mask) != HY_OK) return false;
    if (strcmp(m->tenant, r->who.tenant) != 0) return false;
    return !sm || memcmp(m->model, sm->fp, 32) == 0;
}

void h_seg_drop(rq *r, seg *sg)
{
    hy_entry_free(sg->entry); /* first: a view reads the lease's bytes */
    sg->entry = NULL;
    if (sg->lease) hy_store_release(r->s->store, sg->lease);
    sg->lease = NULL;
    free(sg->rbuf);
    sg->rbuf = NULL;
}

void h_segs_free(rq *r, seg *sg, size_t n)
{
    for (size_t i = 0; sg && i < n; i++) {
        free(sg[i].tok);
        h_seg_drop(r, &sg[i]);
    }
    free(sg);
}

/* Checks count, sizes and ids of a request's segments (and its query) and
 * copies their tokens; a segment given by key keeps by_key (its tokens come
 * from its entry later, when the method needs them). */
hy_rpc_code h_segs_parse(rq *r, svc_model *sm, Hypic__V1__Segment **in, size_t n,
                         size_t extra_tokens, bool keys_allowed, seg **out)
{
    *out = NULL;
    const hy_cached_config *cfg = &r->s->cfg;
    r->segs = (int)n;
    if (n == 0) return h_fail(r, HY_RPC_INVALID_ARGUMENT, "field 'segments' is empty");
    if (n > cfg->max_segments)
        return h_fail(r, HY_RPC_INVALID_ARGUMENT,
                      "field 'segments': %zu segments, over the limit of %u (limits.max_segments)",
                      n, cfg->max_segments);
    seg *sg = calloc(n, sizeof *sg);
    if (!sg) return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
    uint64_t total = extra_tokens;
    for (size_t i = 0; i < n; i++) {
        const Hypic__V1__Segment *g = in[i];
        sg[i].tags = g->tags;
        sg[i].ntags = g->n_tags;
        hy_rpc_code c = HY_RPC_OK;
        if (g->n_tags > HY_MAX_TAGS) {
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                       "segments[%zu].tags: %zu tags, over the limit of %d", i, g->n_tags,
                       HY_MAX_TAGS);
        }
        for (size_t t = 0; !c && t < g->n_tags; t++)
            if (!g->tags[t][0] || strlen(g->tags[t]) >= HY_TAG_MAX)
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                           "segments[%zu].tags[%zu]: empty or over %d bytes", i, t, HY_TAG_MAX - 1);
        if (!c && g->ref_case == HYPIC__V1__SEGMENT__REF_KEY) {
            if (!keys_allowed)
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                           "segments[%zu]: given by key, but this method needs its tokens", i);
            else if (!(c = h_key_of(r, "segments[].key", g->key, &sg[i].key)))
                sg[i].by_key = true;
        } else if (!c && g->ref_case == HYPIC__V1__SEGMENT__REF_TOKENS) {
            const Hypic__V1__Tokens *tk = g->tokens;
            if (!tk || tk->n_ids == 0) {
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "segments[%zu]: no tokens", i);
            } else if ((total += tk->n_ids) > cfg->max_tokens) {
                c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                           "the request has over %llu tokens (limits.max_tokens)",
                           (unsigned long long)cfg->max_tokens);
            } else if (!(sg[i].tok = malloc(tk->n_ids * sizeof(int32_t)))) {
                c = h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
            } else {
                sg[i].n = tk->n_ids;
                for (size_t t = 0; t < tk->n_ids && !c; t++) {
                    if (tk->ids[t] >= (uint32_t)sm->c->vocab)
                        c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                                   "segments[%zu].tokens.ids[%zu]: %u is outside the vocabulary "
                                   "of model '%s' (0..%d)",
                                   i, t, tk->ids[t], sm->name, sm->c->vocab - 1);
                    sg[i].tok[t] = (int32_t)tk->ids[t];
                }
            }
        } else if (!c) {
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT, "segments[%zu]: neither tokens nor key", i);
        }
        if (!c && i + 1 == n && total > cfg->max_tokens) /* e.g. a long query after keys */
            c = h_fail(r, HY_RPC_INVALID_ARGUMENT,
                       "the request has over %llu tokens (limits.max_tokens)",
                       (unsigned long long)cfg->max_tokens);
        if (c) {
            h_segs_free(r, sg, n);
            return c;
        }
    }
    *out = sg;
    return HY_RPC_OK;
}

/* Fills the tokens of segments given by key from their entries. */
hy_rpc_code h_segs_resolve_keys(rq *r, svc_model *sm, seg *sg, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!sg[i].by_key) continue;
        uint64_t bytes;
        hy_err e = {0};
        int rc = fetch_entry(r, sm, &sg[i].key, &sg[i], &bytes, &e);
        if (rc == HY_ENOTFOUND)
            return h_fail(r, HY_RPC_NOT_FOUND,
                          "segments[%zu]: its key is not cached (a segment given by key must be a "
                          "hit; send its tokens instead)",
                          i);
        if (rc) return h_from_err(r, rc, &e);
        const int32_t *t;
        sg[i].n = (size_t)hy_entry_tokens(sg[i].entry, &t);
        if (!(sg[i].tok = malloc(sg[i].n * sizeof *t)))
            return h_fail(r, HY_RPC_RESOURCE_EXHAUSTED, "out of memory");
        memcpy(sg[i].tok, t, sg[i].n * sizeof *t);
    }
    return HY_RPC_OK;
}

void h_meta_to_pb(hy_svc *s, hy_meta *m, unsigned mask, pb_meta *o)
{
    Hypic__V1__EntryMeta init = HYPIC__V1__ENTRY_META__INIT;
    o->pb = init;
    o->pb.key = (ProtobufCBinaryData){HY_KEY_BYTES, m->key.b};
    const svc_model *sm = svc_model_by_fp(s, m->model);
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
    o->pb.pinned_until_unix_ns = m->pinned_until_ns;
    size_t nt = 0;
    static const hy_tier_id order[3] = {HY_TIER_HBM, HY_TIER_HOST, HY_TIER_NVME};
    for (int i = 0; i < 3; i++)
        if (mask & (1u << order[i])) o->tiers[nt++] = h_pb_tier(order[i]);
    o->pb.n_tiers = nt;
    o->pb.tiers = o->tiers;
}

hy_rpc_code h_send(rq *r, const ProtobufCMessage *m)
{
    hy_err e = {0};
    if (hy_rpc_call_send(r->call, m, &e))
        return h_fail(r, HY_RPC_CANCELLED, "the client went away: %s", e.msg);
    return HY_RPC_OK;
}

void h_set_threads(hy_svc *s)
{
    omp_set_num_threads(s->cfg.exec_threads);
}

/* --- the front door ----------------------------------------------------------------
 *
 * Every call comes in through run(), which reads its method's row below and
 * does, in this order, everything a call goes through before its method's
 * function sees it: refused while draining (but Health), authenticated from
 * the call's metadata, over the token's exact bytes (svc_enter), checked for
 * the role its method needs, counted in flight for its tenant, and only then
 * its request received, within the method's own message limit and decoded
 * under an allocation budget with every string checked for NUL bytes
 * (hy_rpc_call_request). A call refused before that point has its body never
 * read: an unauthenticated client costs the daemon its headers. After the
 * function: the status, one log line, the metrics. */

typedef hy_rpc_code (*method_fn)(rq *r, const ProtobufCMessage *req);

typedef enum door_who {
    WHO_ANYONE = 0, /* no token needed (Health) */
    WHO_TENANT,     /* any tenant's token */
    WHO_ADMIN,      /* an admin tenant's token (tenants.list[].admin) */
} door_who;

typedef enum door_limit {
    LIMIT_SMALL = 0, /* a request of a few fields: 64 KiB */
    LIMIT_REQUEST,   /* segments of tokens: sized from limits.max_segments and max_tokens */
    LIMIT_MESSAGE,   /* PutEntry's chunks: limits.max_message */
} door_limit;

enum {
    ON_WORKER = 1 << 0,      /* served by hypic-worker too (svc_handlers gives it these only) */
    WHILE_DRAINING = 1 << 1, /* answered while the daemon drains */
    DEDICATED = 1 << 2,      /* a gRPC worker of its own, so that it never waits behind the
                              * others (svc_dedicated_methods: the probes) */
};

typedef struct door {
    const char *name; /* the method's, in hy_rpc_methods' order (svc_doors_check) */
    method_fn fn;
    door_who who;
    door_limit limit;
    unsigned flags; /* ON_WORKER, WHILE_DRAINING, DEDICATED */
} door;

/* The method table: a method of hypic.v1 is one row here. */
static const door k_doors[] = {
    {"Lookup", do_lookup, WHO_TENANT, LIMIT_REQUEST, 0},
    {"Warm", do_warm, WHO_TENANT, LIMIT_REQUEST, 0},
    {"Prefill", do_prefill, WHO_TENANT, LIMIT_REQUEST, 0},
    {"GetEntry", do_get_entry, WHO_TENANT, LIMIT_SMALL, 0},
    {"PutEntry", do_put_entry, WHO_TENANT, LIMIT_MESSAGE, 0},
    {"Invalidate", do_invalidate, WHO_TENANT, LIMIT_SMALL, 0},
    {"List", do_list, WHO_TENANT, LIMIT_SMALL, 0},
    {"Inspect", do_inspect, WHO_TENANT, LIMIT_SMALL, 0},
    {"Watch", do_watch, WHO_TENANT, LIMIT_SMALL, 0},
    {"Stats", do_stats, WHO_TENANT, LIMIT_SMALL, ON_WORKER},
    {"GetPolicy", do_get_policy, WHO_TENANT, LIMIT_SMALL, 0},
    {"SetPolicy", do_set_policy, WHO_ADMIN, LIMIT_SMALL, 0},
    {"Health", do_health, WHO_ANYONE, LIMIT_SMALL, ON_WORKER | WHILE_DRAINING | DEDICATED},
    {"OpenTransport", do_open_transport, WHO_TENANT, LIMIT_SMALL, 0},
    {"CloseTransport", do_close_transport, WHO_TENANT, LIMIT_SMALL, 0},
    {"Build", do_build, WHO_TENANT, LIMIT_REQUEST, ON_WORKER},
    {"Pin", do_pin, WHO_TENANT, LIMIT_SMALL, 0},
    {"Unpin", do_unpin, WHO_TENANT, LIMIT_SMALL, 0},
};
#define NDOORS (sizeof k_doors / sizeof k_doors[0])
_Static_assert(NDOORS == SVC_METHODS, "SVC_METHODS counts the rows of k_doors");

int svc_doors_check(hy_err *err)
{
    if (NDOORS != hy_rpc_method_count)
        return hy_err_set(err, HY_EINVAL, "internal: %zu doors for %zu methods", NDOORS,
                          hy_rpc_method_count);
    for (size_t i = 0; i < hy_rpc_method_count; i++)
        if (strcmp(k_doors[i].name, hy_rpc_methods[i].name) != 0)
            return hy_err_set(err, HY_EINVAL, "internal: door %zu is %s, the method %s", i,
                              k_doors[i].name, hy_rpc_methods[i].name);
    return HY_OK;
}

void svc_handlers(hy_rpc_handler out[SVC_METHODS], bool worker)
{
    for (size_t i = 0; i < NDOORS; i++)
        out[i] = !worker || (k_doors[i].flags & ON_WORKER) ? svc_front_door : NULL;
}

void svc_dedicated_methods(const char *out[SVC_METHODS + 1])
{
    size_t n = 0;
    for (size_t i = 0; i < NDOORS; i++)
        if (k_doors[i].flags & DEDICATED) out[n++] = k_doors[i].name;
    out[n] = NULL;
}

size_t svc_request_limit(const hy_cached_config *cfg)
{
    /* every token a 5-byte varint, every segment with all its tags at their
     * longest and its framing, and room for the other fields */
    const uint64_t seg = (uint64_t)HY_MAX_TAGS * (HY_TAG_MAX + 3) + 64;
    const uint64_t n = cfg->max_tokens * 5 + (uint64_t)cfg->max_segments * seg + (64u << 10);
    return n < cfg->max_message ? (size_t)n : cfg->max_message;
}

size_t svc_method_limit(const hy_svc *s, size_t idx)
{
    switch (k_doors[idx].limit) {
    case LIMIT_REQUEST:
        return svc_request_limit(&s->cfg);
    case LIMIT_MESSAGE:
        return s->cfg.max_message;
    default:
        return SVC_SMALL_REQUEST;
    }
}

static const char *code_name(int c)
{
    const char *n = hy_rpc_code_name(c);
    return n ? n : "?";
}

/* Everything before the method's function (see above); HY_RPC_OK with
 * *entered when the caller was counted in flight, *req its request. */
static hy_rpc_code admit(rq *r, const door *d, size_t idx, bool *entered,
                         const ProtobufCMessage **req)
{
    hy_svc *s = r->s;
    *entered = false;
    if (s->draining && !(d->flags & WHILE_DRAINING))
        return h_fail(r, HY_RPC_UNAVAILABLE, "the server is shutting down");
    if (d->who != WHO_ANYONE) {
        hy_rpc_code c = svc_enter(s, r->call, &r->who, r->msg, sizeof r->msg);
        if (c) return c;
        *entered = true;
        if (d->who == WHO_ADMIN && !r->who.admin)
            return h_fail(r, HY_RPC_PERMISSION_DENIED,
                          "tenant '%s' may not call %s (tenants.list[].admin)", r->who.tenant,
                          d->name);
    }
    if (hy_rpc_methods[idx].shape == HY_RPC_CLIENT_STREAM) return HY_RPC_OK; /* recv'd by fn */
    hy_err e = {0};
    int rc = hy_rpc_call_request(r->call, svc_method_limit(s, idx), req, &e);
    if (rc) return h_fail(r, hy_rpc_recv_code(r->call, rc), "%s", e.msg);
    return HY_RPC_OK;
}

static void run(void *app, hy_rpc_call *call, size_t idx)
{
    hy_svc *s = app;
    assert(idx < NDOORS); /* svc_front_door checked the method is one of hy_rpc_methods */
    const door *d = &k_doors[idx];
    const double t0 = hy_now_s();
    rq r = {.s = s, .call = call, .mode = "", .t_door = t0};
    bool entered;
    const ProtobufCMessage *req = NULL;
    atomic_fetch_add(&s->in_flight, 1);
    hy_rpc_code c = admit(&r, d, idx, &entered, &req);
    if (!c) {
        svc_lease_reap(s, false);
        c = d->fn(&r, req);
    }
    if (entered) svc_leave(s, &r.who);
    if (hy_rpc_call_idled(call) && c != HY_RPC_DEADLINE_EXCEEDED) /* the client stalled */
        c = h_fail(&r, HY_RPC_DEADLINE_EXCEEDED,
                   "the client made no progress for %u ms "
                   "(limits.idle_ms)",
                   s->cfg.idle_ms);
    /* counted, and out of the in-flight count, before the reply leaves: a
     * client that has its answer finds its call in hypic_requests_total and
     * never still in flight (Stats, hypicctl status) */
    atomic_fetch_add(&s->met.calls[idx][c < SVC_CODES ? c : HY_RPC_UNKNOWN], 1);
    atomic_fetch_sub(&s->in_flight, 1);
    hy_rpc_call_finish(call, c, c ? r.msg : NULL);
    const double dt = hy_now_s() - t0;
    hy_hist_observe(&s->met.latency[idx], dt);
    if (s->cfg.log_requests || c != HY_RPC_OK)
        hy_log(c == HY_RPC_OK ? HY_LOG_INFO : HY_LOG_WARN,
               "rpc method=%s tenant=%s model=%s mode=%s status=%s segments=%d hits=%d misses=%d "
               "computed=%lld ttft_ms=%.3f ms=%.3f%s%s%s",
               hy_rpc_methods[idx].name, r.who.tenant[0] ? r.who.tenant : "-",
               r.model[0] ? r.model : "-", r.mode[0] ? r.mode : "-", code_name(c), r.segs, r.hits,
               r.misses, (long long)r.computed, r.ttft_ms, dt * 1e3, c ? " error=\"" : "",
               c ? r.msg : "", c ? "\"" : "");
}

void svc_front_door(void *app, hy_rpc_call *call, const ProtobufCMessage *req)
{
    (void)req; /* received in admit, within the method's limit */
    const hy_rpc_method *m = hy_rpc_call_method(call);
    if (m < hy_rpc_methods || m >= hy_rpc_methods + hy_rpc_method_count) {
        hy_rpc_call_finish(call, HY_RPC_UNIMPLEMENTED, "not a method of hypic.v1");
        return;
    }
    run(app, call, (size_t)(m - hy_rpc_methods));
}
