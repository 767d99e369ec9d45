/*
 * Private to the handlers (handlers*.c): a call's context, the checks every
 * method shares, and the methods themselves.
 *   handlers.c          the shared checks and conversions, and the front door
 *                       (the method table; run: draining, authentication, the
 *                       request within its limit, the status, the log line,
 *                       the metrics);
 *   handlers_compute.c  Lookup, Warm and Prefill: the methods that hash,
 *                       build and run the model;
 *   handlers_entries.c  the methods over stored entries (GetEntry, PutEntry,
 *                       Invalidate, List, Inspect, Watch), Stats, policies,
 *                       Health;
 *   handlers_transport.c OpenTransport, CloseTransport, and deliveries of
 *                       states and entries through a client's session;
 *   fetch.c             a stored entry for a request: leased here, or from
 *                       an owner in the cluster.
 * Storing entries is put_internal.h's; entries read while a pass runs,
 * land_internal.h's; fetching or recomputing a hit, cost_internal.h's.
 */
#ifndef HY_CACHED_HANDLERS_INTERNAL_H
#define HY_CACHED_HANDLERS_INTERNAL_H

#include "service_internal.h"

#define MAX_SEAM      64
#define CHUNK_BYTES   (1u << 20)
#define LIST_SORT_MAX 200000

typedef struct rq {
    hy_svc *s;
    hy_rpc_call *call;
    svc_caller who;
    char msg[512];
    /* for the request's log line */
    char model[HY_CFG_NAME_MAX]; /* a copy: a request's strings die with its message */
    const char *mode;
    int segs, hits, misses;
    int64_t computed;
    double ttft_ms;
    double t_door; /* hy_now_s() when the front door took the call */
} rq;

/* The segments of a request, resolved: token ids checked against the
 * vocabulary and copied as int32, or the entry a key names. */
typedef struct seg {
    int32_t *tok;
    size_t n;
    hy_key key;      /* under the request's W and dtype (or as given) */
    bool by_key;     /* the request gave the key */
    hy_entry *entry; /* a reused entry (pic family), or the one a key named: a
                      * view into the bytes of `lease` */
    hy_lease *lease; /* held until the entry is freed (h_seg_drop) */
    hy_tier_id from; /* where that entry's bytes came from */
    void *rbuf;      /* or: the bytes fetched from an owner (cluster mode), the entry's view */
    char member[64]; /* that owner's id */
    char **tags;
    size_t ntags;
} seg;

/* An EntryMeta message over a hy_meta (pointers into m and the holder). */
typedef struct pb_meta {
    Hypic__V1__EntryMeta pb;
    char *tags[HY_MAX_TAGS];
    Hypic__V1__Tier tiers[3];
} pb_meta;

/* Sets r->msg and returns code. */
hy_rpc_code h_fail(rq *r, hy_rpc_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
hy_rpc_code h_from_err(rq *r, int rc, const hy_err *e);
hy_rpc_code h_check_tenant(rq *r, const char *tenant);
hy_rpc_code h_need_model(rq *r, const char *name, svc_model **out);
/* PERMISSION_DENIED when local_only is asked by a caller that is not a member
 * (cluster mode's calls between members, and hand-over, carry it). */
hy_rpc_code h_need_member(rq *r, bool local_only);
hy_rpc_code h_seam_of(rq *r, bool has, uint32_t seam, int *W);
hy_rpc_code h_dtype_of(rq *r, Hypic__V1__StateDtype d, hy_entry_dtype *out);
/* The fields every keyed method checks first, in this order: tenant, model,
 * seam (the configured default unless given) and dtype. */
hy_rpc_code h_keyed_fields(rq *r, const char *tenant, const char *model, bool has_seam,
                           uint32_t seam, Hypic__V1__StateDtype dtype, svc_model **sm, int *W,
                           hy_entry_repr *rp);
/* The representation a request names (pb: NULL when unset, rp unchanged)
 * over rp, the fields unspecified taken from the server's settings. */
hy_rpc_code h_repr_of(rq *r, const Hypic__V1__Representation *pb, hy_entry_repr *rp);
void h_repr_to_pb(hy_entry_repr rp, Hypic__V1__Representation *pb);
hy_rpc_code h_key_of(rq *r, const char *field, ProtobufCBinaryData b, hy_key *k);
Hypic__V1__Tier h_pb_tier(hy_tier_id t);
hy_tier_id h_fastest(unsigned mask);
bool h_visible(rq *r, const svc_model *sm, const hy_key *k, hy_meta *m, unsigned *mask);
void h_segs_free(rq *r, seg *sg, size_t n);
/* Frees a segment's entry and releases the lease its bytes live in. */
void h_seg_drop(rq *r, seg *sg);
hy_rpc_code h_segs_parse(rq *r, svc_model *sm, Hypic__V1__Segment **in, size_t n,
                         size_t extra_tokens, bool keys_allowed, seg **out);
hy_rpc_code h_segs_resolve_keys(rq *r, svc_model *sm, seg *sg, size_t n);
void h_meta_to_pb(hy_svc *s, hy_meta *m, unsigned mask, pb_meta *o);
hy_rpc_code h_send(rq *r, const ProtobufCMessage *m);
void h_set_threads(hy_svc *s);

/* --- fetch.c: a stored entry for a request --- */

/* The entry under k (visible to the caller, of model sm) into g: a view of
 * its leased bytes (g->entry, g->lease, g->from), or in cluster mode, when
 * this member does not have it, of the bytes fetched from an owner (g->rbuf,
 * g->member; g->from HY_TIER_NONE). Verified; HY_ENOTFOUND on a miss.
 * *bytes: its size. */
int fetch_entry(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err);
/* The same from this member's tiers only. */
int fetch_here(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err);

/* --- handlers_transport.c: deliveries through bulk transport sessions --- */

/* A delivered state's reply part and the storage it points into. */
typedef struct h_delivery {
    Hypic__V1__Delivery d;
    Hypic__V1__StateTensor *t, **tp;
    uint64_t *shape;
} h_delivery;
/* Writes st (laid out as hy_state_layout says) into transport session id's
 * buffer at offset; fills out (free with h_delivery_free, also on failure).
 * UNAVAILABLE when the transfer failed (nothing counts as delivered). */
hy_rpc_code h_deliver_state(rq *r, svc_model *sm, hy_state *st, uint64_t id, uint64_t offset,
                            h_delivery *out);
void h_delivery_free(h_delivery *d);
/* Before any work: session id is the caller's and its buffer holds the state
 * after `tokens` tokens at offset (NOT_FOUND, RESOURCE_EXHAUSTED otherwise). */
hy_rpc_code h_state_fits(rq *r, svc_model *sm, uint64_t id, uint64_t offset, int64_t tokens);
/* Writes p[0..n) into session id's buffer at offset. */
hy_rpc_code h_deliver_bytes(rq *r, uint64_t id, uint64_t offset, const void *p, uint64_t n,
                            Hypic__V1__Delivery *d);
typedef struct h_tp_stats {
    Hypic__V1__TransportStats pb;
    Hypic__V1__TransportKindStats kinds[HY_TP_KINDS - 1], *kp[HY_TP_KINDS - 1];
    hy_tp_stats st;
} h_tp_stats;
void h_transport_stats(hy_svc *s, h_tp_stats *o);

/* The methods, each answering one call (the status it returns finishes it). */
hy_rpc_code do_lookup(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_warm(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_prefill(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_get_entry(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_put_entry(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_invalidate(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_pin(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_unpin(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_list(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_inspect(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_watch(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_stats(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_get_policy(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_set_policy(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_health(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_open_transport(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_close_transport(rq *r, const ProtobufCMessage *req);
hy_rpc_code do_build(rq *r, const ProtobufCMessage *req);

#endif
