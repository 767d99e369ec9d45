/*
 * Cluster mode (docs/deploy.md#cluster-mode): the members of a
 * cluster share the key space by rendezvous hashing (hy_cluster.h). Each
 * member keeps a view of the live set — a static list from the
 * configuration, or etcd's (hy_cluster.h: every member registers under a
 * prefix with a lease it keeps alive and watches the prefix) — and with it:
 *
 *   - looks a segment up on its owners when it does not own it (Lookup,
 *     GetEntry, Prefill's fetch), through GetEntry/Lookup with local_only
 *     set, so a question is passed on once at most;
 *   - puts an entry it built to its owners (in the background: a queue with
 *     retries, recomputing the owners from the view at each try, so an owner
 *     that died is replaced once its lease has expired);
 *   - after each change of the set, hands the entries it holds to members
 *     that became their owners (a newcomer gets what it now owns);
 *   - takes a member that does not answer as a miss, never as an error.
 *
 * A view is immutable and counted: a request takes one (svc_view_get) and
 * uses its peers' channels without a lock while the set changes under it.
 */
#ifndef HY_CACHED_CLUSTER_INTERNAL_H
#define HY_CACHED_CLUSTER_INTERNAL_H

#include "hy_cluster.h"
#include "service_internal.h"

typedef struct svc_peer {
    char id[HY_MEMBER_ID_MAX];
    char address[HY_CFG_ADDR_MAX];
    bool self;
    hy_rpc_client *cl; /* NULL for self */
    _Atomic int refs;  /* views holding it */
    /* transport sessions to it (cluster.transport_bytes), per tenant: what
     * GetEntry delivers entries into (cluster.c) */
    pthread_mutex_t tp_mu;
    struct peer_tp *tps;
    double tp_off_until; /* hy_now_s: after a session failed to open, streams until then */
} svc_peer;

typedef struct svc_view {
    _Atomic int refs;
    size_t n;
    svc_peer **peers; /* sorted by id */
    const char **ids; /* peers[i]->id, for hy_rendezvous_owners */
} svc_view;

/* Joins the cluster when cluster.id is set (s->cluster stays NULL
 * otherwise): the static set, or etcd's (registering this member, bound: its
 * gRPC address as bound, advertised unless cluster.advertise says
 * otherwise). HY_EIO naming etcd's endpoints when none answers. */
int svc_cluster_start(hy_svc *s, const char *bound, hy_err *err);
/* Leaves the set at once (revokes the etcd lease): peers stop sending here.
 * The first step of a drain; a no-op on one node. */
void svc_cluster_leave(hy_svc *s);
/* Puts what is still queued for its owners (waiting up to about 2 s), then
 * stops and frees everything. NULL cluster: a no-op. */
void svc_cluster_stop(hy_svc *s);

/* The current view, counted (NULL on one node); svc_view_put when done. */
svc_view *svc_view_get(hy_svc *s);
void svc_view_put(svc_view *v);
/* The owners of key k for tenant's replication factor, best first, into
 * out[HY_OWNERS_MAX]; *self: whether this member is one. */
size_t svc_view_owners(hy_svc *s, const svc_view *v, const char *tenant, const hy_key *k,
                       svc_peer **out, bool *self);

/* The entry under k from its owners other than this member, in order: the
 * first that has it. *buf (64-byte aligned for hy_entry_view, *len bytes;
 * free()) and the member's id into
 * member. HY_ENOTFOUND when none has it or none answers. */
int svc_cluster_fetch(hy_svc *s, svc_view *v, svc_model *sm, const char *tenant, const hy_key *k,
                      void **buf, size_t *len, char member[HY_MEMBER_ID_MAX], hy_err *err);

/* The entry under k from member (an owner other than this one), streamed:
 * fn is called with each chunk as it arrives, in order — total the
 * entry's size (checked against limits.max_entry_bytes), at the offset of
 * data — and a code it returns ends the stream with that code. HY_OK once
 * every byte came; HY_ENOTFOUND when the member does not have it (or is
 * not in the view); HY_EIO when it failed to answer or the stream broke. */
typedef int (*svc_stream_fn)(void *ctx, uint64_t total, uint64_t at, const void *data, size_t len,
                             hy_err *err);
int svc_cluster_stream(hy_svc *s, const char *member, svc_model *sm, const char *tenant,
                       const hy_key *k, svc_stream_fn fn, void *ctx, hy_err *err);

/* Looks keys[0..n) up on peer p (LookupRequest.local_only); st[i] filled
 * (hit, tier, bytes, tokens) for each. HY_EIO when p did not answer. */
int svc_cluster_lookup(hy_svc *s, svc_peer *p, const char *model, const char *tenant,
                       const hy_key *keys, size_t n, Hypic__V1__SegmentStatus *st, hy_err *err);

/* Hands a serialised entry to its owners other than this member. wait_one:
 * put it to one of them now (the first that takes it; its id into member,
 * HY_EIO naming them when none does) and the rest in the background;
 * otherwise all in the background (member: the first owner's id). */
int svc_cluster_put(hy_svc *s, const char *model, const char *tenant, const hy_key *k,
                    char *const *tags, size_t ntags, const void *buf, size_t len, bool wait_one,
                    char member[HY_MEMBER_ID_MAX], hy_err *err);

/* Sends q (local_only and tenant already set) as `method` to every member
 * but this one, each reply to on_reply; a member whose call fails, or
 * answers other than OK or benign (HY_RPC_OK: none), is named in
 * unreachable (up to cap, *nun of them). */
void svc_cluster_fanout(hy_svc *s, const char *tenant, const char *method,
                        const ProtobufCMessage *q, hy_rpc_code benign,
                        int (*on_reply)(void *ctx, const ProtobufCMessage *msg), void *ctx,
                        char (*unreachable)[HY_MEMBER_ID_MAX], size_t cap, size_t *nun);
/* Invalidate q (local_only set) on every member but this one: the sum of
 * what they removed into *removed; the ids of those that did not answer
 * into unreachable (up to cap, *nun of them). */
void svc_cluster_invalidate(hy_svc *s, const char *tenant, const Hypic__V1__InvalidateRequest *q,
                            uint64_t *removed, char (*unreachable)[HY_MEMBER_ID_MAX], size_t cap,
                            size_t *nun);

/* Stats' cluster section: *out filled, its arrays in *hold (free with
 * svc_cluster_stats_free). */
typedef struct svc_cluster_pb {
    Hypic__V1__ClusterStats pb;
    Hypic__V1__Member *m;
    Hypic__V1__Member **mp;
} svc_cluster_pb;
void svc_cluster_stats(hy_svc *s, svc_cluster_pb *out);
void svc_cluster_stats_free(svc_cluster_pb *out);
/* Prometheus lines (hypic_cluster_*). */
void svc_cluster_metrics(hy_svc *s, hy_strbuf *b);
/* Counts a Lookup/GetEntry/PutEntry passed on to owners. */
void svc_cluster_count_forward(hy_svc *s);

#endif
