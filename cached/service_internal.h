/*
 * hypic-cached's state: the models it serves with their executor contexts,
 * the store, the tenants, the gates that bound work (requests in flight per
 * tenant, a queue for the executors), leases held for Lookup, the event hub
 * behind Watch, and the counters behind /metrics. service.c owns the state;
 * handlers.c answers the RPCs over it; main.c reads the configuration, starts
 * and stops (docs/operations.md).
 *
 * Locking: svc.mu guards the tenants' in-flight counts, the lease table and
 * the configuration that SIGHUP replaces (tenants, policies); each model's mu
 * its executor contexts and their queue; the hub's mu its ring of events.
 * Never two of these at once, and none while calling the store (the store's
 * event callback takes the hub's lock under the store's: the hub never calls
 * the store). They are taken with svc_lock and given back with svc_unlock,
 * which count those a thread holds: a second one stops at an assertion.
 */
#ifndef HY_CACHED_SERVICE_INTERNAL_H
#define HY_CACHED_SERVICE_INTERNAL_H

#include "config_internal.h"
#include "cost_internal.h"
#include "hy_model.h"
#include "hy_rpc.h"
#include "hy_tiers.h"
#include "hy_transport.h"
#include "metrics_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#ifndef HY_CACHED_VERSION /* project()'s VERSION, from cached/CMakeLists.txt */
#error "HY_CACHED_VERSION is set by the build"
#endif

/* One executor context: a forward pass at a time. */
typedef struct svc_exec {
    hy_exec *ex;
    hy_state *st;
    bool busy;
} svc_exec;

/* Prefix-mode checkpoints of one tenant on one model (never shared across
 * tenants: a restored checkpoint would tell one tenant what another sent). */
typedef struct svc_prefix {
    char tenant[HY_TENANT_MAX];
    hy_prefix_cache *pc;
    pthread_mutex_t mu; /* held for the request that uses it */
    struct svc_prefix *next;
} svc_prefix;

/* A request waiting for an executor context, in arrival order. */
typedef struct svc_waiter {
    pthread_cond_t cv;
    svc_exec *granted; /* set by svc_exec_give: the context handed over */
    struct svc_waiter *next;
} svc_waiter;

typedef struct svc_model {
    char name[HY_CFG_NAME_MAX];
    hy_model *m;
    const hy_model_config *c;
    uint8_t fp[32];
    size_t wbytes; /* hy_model_matrix_bytes, counted once at open */
    svc_exec *ctx;
    int nctx;
    pthread_mutex_t mu;
    svc_waiter *head, *tail; /* under mu: FIFO of requests waiting for a context */
    svc_prefix *prefixes;    /* under mu */
    cost_fits *costs;        /* fetching its entries and computing its tokens, as measured */
    /* Its contexts run on the hbm tier's device: an entry with a copy there
     * is leased on the device and composed where it lies, viewed through
     * this executor's copies (ctx[0]'s). NULL: every entry comes to the
     * host. */
    hy_exec *on_hbm;
} svc_model;

/* A tenant as the service knows it: from the configuration, or the single
 * tenant "default" when no tokens are configured. */
typedef struct svc_tenant {
    char name[HY_TENANT_MAX];
    char token[HY_CFG_TOKEN_MAX];
    bool admin;
    uint32_t max_in_flight;
    uint32_t in_flight; /* under svc.mu */
    uint32_t watchers;  /* its open Watch streams, under svc.mu */
    uint64_t leased;    /* bytes of the entries its Lookup leases hold, under svc.mu */
} svc_tenant;

/* Leases taken by Lookup (lease_ms > 0), released when they expire. */
typedef struct svc_lease_set {
    uint64_t id;
    char tenant[HY_TENANT_MAX];
    uint64_t bytes;      /* the leased entries' bytes, counted against the tenant */
    uint64_t expires_ns; /* hy_now_ns */
    hy_lease **leases;
    size_t n;
    struct svc_lease_set *next;
} svc_lease_set;

/* Store events for Watch: a ring of the latest, numbered. */
#define SVC_HUB_RING          4096
#define SVC_WATCH_HEARTBEAT_S 5 /* a Watch stream quiet this long sends a heartbeat */
typedef struct svc_event {
    uint64_t seq;
    hy_store_event kind;
    hy_meta meta;
    char reason[16];
} svc_event;

typedef struct svc_hub {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    svc_event *ring; /* SVC_HUB_RING */
    uint64_t next;   /* seq of the next event */
    int watchers;
    bool closing;
} svc_hub;

/* Per-mode TTFT histograms and per-method, per-status counts. */
#define SVC_CODES   17
#define SVC_METHODS 18 /* the method table's rows (handlers.c), hy_rpc_method_count */
typedef struct svc_metrics {
    hy_hist ttft[HY_MODE_COUNT];
    hy_hist latency[SVC_METHODS + 1]; /* per method (and unknown ones), seconds */
    _Atomic uint64_t calls[SVC_METHODS + 1][SVC_CODES];
    _Atomic uint64_t tokens_computed, segments_hit, segments_missed, segments_uncacheable;
    _Atomic uint64_t entries_built, entries_stored;
} svc_metrics;

/* The entries this daemon built or received for storing since it started, by
 * representation (Stats' reprs): how large each kind is, and how its linear
 * heads are stored. The first SVC_REPRS representations seen get a row; the
 * rest share the last. */
#define SVC_REPRS 8
typedef struct svc_repr_row {
    hy_entry_repr repr;
    uint64_t entries, bytes, body_tokens;
    uint64_t t_heads[HY_FORM_COUNT], s_heads[HY_FORM_COUNT];
} svc_repr_row;
typedef struct svc_reprs {
    pthread_mutex_t mu;
    svc_repr_row row[SVC_REPRS];
    int n;
} svc_reprs;
/* Counts entry e of `bytes` serialised bytes in its representation's row. */
void svc_reprs_count(svc_reprs *r, const hy_entry *e, size_t bytes);

/* The quality watch's figures for one model and mode (shadow.c). */
typedef struct svc_shadow_row {
    int model; /* index in hy_svc.models */
    hy_mode mode;
    uint64_t compared;       /* requests computed again in full and compared */
    uint64_t top1_agree;     /* of them, the served argmax was the exact one */
    uint64_t over_threshold; /* KL past pic.shadow_kl_warn (each one logged) */
    uint64_t dropped;        /* drawn but not compared: the queue was full, or draining */
    uint64_t failed;         /* the full pass failed (logged) */
    double kl_sum, kl_max;   /* KL(full || served), nats */
    double seconds;          /* the full passes' time */
} svc_shadow_row;

typedef struct hy_svc {
    hy_cached_config cfg; /* fields other than tenants and policies never change */
    pthread_mutex_t mu;
    svc_tenant *tenants; /* under mu; replaced whole by a reload */
    int ntenants;
    bool open_access; /* no tokens: every caller is "default" */
    svc_model *models;
    int nmodels;
    hy_store *store;
    svc_hub hub;
    svc_lease_set *leases; /* under mu */
    uint64_t next_lease;
    _Atomic int in_flight; /* calls inside a handler */
    _Atomic int queued;    /* calls waiting for an executor context */
    _Atomic bool draining, ready;
    svc_metrics met;
    svc_reprs reprs;
    struct svc_shadow *shadow; /* pic.shadow_rate > 0 (shadow.c); NULL: off */
    uint64_t started_ns;
    hy_tp_hub *tp;               /* bulk transports; NULL until svc_transport_start */
    bool flushed;                /* svc_flush ran: the write-back entries are on NVMe */
    struct svc_router *router;   /* scatter workers (router_internal.h); NULL: none */
    struct svc_cluster *cluster; /* cluster mode (cluster_internal.h); NULL: one node */
    char tp_shm_path[108];       /* the shm socket ("" when shm is off) */
    char *peer_ca_pem;           /* with tls: what peers' and workers' certificates chain to */
    char *peer_cert_pem;         /* with tls.client_ca: tls.cert and tls.key, presented as */
    char *peer_key_pem;          /* this member's client certificate on those channels */
} hy_svc;

/* A call's identity once authenticated. */
typedef struct svc_caller {
    char tenant[HY_TENANT_MAX];
    bool admin;
    bool member; /* another member or the daemon of a scatter worker, on tenant's behalf
                  * (always, without tokens) */
} svc_caller;

/* --- service.c ------------------------------------------------------------ */

/* Takes (gives back) svc.mu, a model's mu or the hub's mu, asserting that the
 * thread holds no other of them (see Locking above). */
void svc_lock(pthread_mutex_t *mu);
void svc_unlock(pthread_mutex_t *mu);

/* Opens every model, the store (replaying NVMe) and the executor contexts. */
int svc_open(hy_svc *s, const hy_cached_config *cfg, hy_err *err);
/* Releases leases and flushes write-back entries to NVMe (once; non-zero
 * when the flush failed). */
int svc_flush(hy_svc *s);
/* svc_flush unless done, then closes the store (RocksDB) and the models.
 * What main starts — the transports, the router, the cluster — it stops
 * before (main.c). Non-zero when the flush failed. */
int svc_close(hy_svc *s);
/* Starts the bulk transports' hub (the data port, the shm socket, RDMA) once
 * the gRPC server has its port (for the shm socket's default name). */
int svc_transport_start(hy_svc *s, int grpc_port, hy_err *err);
/* Stops it (NULL: a no-op): the rpc server is stopped, no transfer runs. */
void svc_transport_stop(hy_svc *s);

/* Re-reads tenants (tokens, quotas, limits) and the tiers' policies from a
 * newly loaded configuration; other changed keys are logged as needing a
 * restart. */
int svc_reload(hy_svc *s, const hy_cached_config *cfg, hy_err *err);

svc_model *svc_model_find(hy_svc *s, const char *name);
/* The model whose fingerprint is fp, or NULL (an entry's model). */
svc_model *svc_model_by_fp(hy_svc *s, const uint8_t fp[32]);
/* The caller of a call from its bearer token: UNAUTHENTICATED when tokens are
 * configured and it has none or an unknown one. Counts the call in flight
 * for its tenant: RESOURCE_EXHAUSTED beyond the tenant's limit. Pair with
 * svc_leave. */
hy_rpc_code svc_enter(hy_svc *s, hy_rpc_call *call, svc_caller *who, char *msg, size_t cap);
void svc_leave(hy_svc *s, const svc_caller *who);
/* The credential this daemon presents to members and scatter workers for a
 * call on tenant's behalf (cluster.secret's; see service.c), in buf; NULL
 * without tokens (nothing to present). */
const char *svc_member_token(const hy_svc *s, const char *tenant, char *buf, size_t cap);
/* A channel to another member or a scatter worker at address: TLS when this
 * daemon serves TLS (their certificates verified against cluster.tls_ca, or
 * tls.cert's own chain, for cluster.tls_server_name or the address's host),
 * plaintext otherwise. */
int svc_peer_open(hy_svc *s, const char *address, hy_rpc_client **out, hy_err *err);
/* Counts a Watch stream of the caller's tenant: false (nothing counted) when
 * it has limits.watchers_per_tenant open. Pair with svc_watch_leave. */
bool svc_watch_enter(hy_svc *s, const svc_caller *who);
void svc_watch_leave(hy_svc *s, const svc_caller *who);

/* An executor context of model sm, waiting in the bounded queue:
 * RESOURCE_EXHAUSTED when the queue is full, DEADLINE_EXCEEDED when the
 * call's deadline passes first, UNAVAILABLE when draining. */
hy_rpc_code svc_exec_take(hy_svc *s, svc_model *sm, hy_rpc_call *call, svc_exec **out, char *msg,
                          size_t cap);
void svc_exec_give(hy_svc *s, svc_model *sm, svc_exec *x);
/* A context of sm when sm runs and queues nothing (every context free, no
 * waiter), marked busy; NULL otherwise. Given back with svc_exec_give. */
svc_exec *svc_exec_take_idle(svc_model *sm);
/* Wakes the requests waiting for sm's contexts (for draining). */
void svc_exec_wake_all(svc_model *sm);
/* The prefix cache of (model, tenant), locked; unlock with svc_prefix_put. */
int svc_prefix_get(hy_svc *s, svc_model *sm, const char *tenant, svc_prefix **out, hy_err *err);
void svc_prefix_put(svc_prefix *p);

/* Leases for Lookup. */
/* Holds leases[0..n) for tenant for ms: the set's id, or 0 when they would
 * pass the tenant's limit on leased bytes (svc_lease_cap) or memory ran out,
 * with why said (the leases are released and freed either way but the
 * first). */
uint64_t svc_lease_add(hy_svc *s, const char *tenant, hy_lease **leases, size_t n, uint32_t ms,
                       char *why, size_t cap);
/* One tenant's limit on the bytes its leases hold: limits.lease_bytes_per_tenant,
 * or a quarter of the host tier when that is 0. */
uint64_t svc_lease_cap(const hy_svc *s);
/* One tenant's cap on pinned bytes: limits.pinned_bytes_per_tenant, or a
 * quarter of the host tier when that is 0. */
uint64_t svc_pin_cap(const hy_svc *s);
/* Releases the leases past their time (all of them with all = true). */
void svc_lease_reap(hy_svc *s, bool all);

/* The event hub (the store's on_event callback feeds it). */
void svc_hub_event(void *ctx, hy_store_event ev, const hy_meta *m, const char *reason);

/* A call the rpc server answered before any handler (hy_rpc_refused_fn):
 * counted under its method (or "(unknown)") and logged. */
void svc_refused(void *app, const hy_rpc_method *m, hy_rpc_code code, const char *msg);
#define SVC_UNKNOWN_METHOD SVC_METHODS /* the row of calls[] for methods no server has */

/* The Prometheus exposition of everything (http.c calls it). */
void svc_metrics_render(void *app, hy_strbuf *b);
bool svc_ready(void *app, char *why, size_t cap);

/* --- handlers.c ------------------------------------------------------------ */

/* Every method's handler: the front door (the method's row in handlers.c's
 * table: who may call it, where and when, its message limit) and then the
 * method. It receives its own request: serve it with
 * hy_rpc_server_config.handler_receives. */
void svc_front_door(void *app, hy_rpc_call *call, const ProtobufCMessage *req);
/* The rpc server's handlers, in hy_rpc_methods' order: the front door for
 * each method, or (worker) for those hypic-worker serves and NULL
 * (UNIMPLEMENTED) for the rest. */
void svc_handlers(hy_rpc_handler out[SVC_METHODS], bool worker);
/* The methods that get a gRPC worker of their own (hy_rpc_server_config.
 * dedicated), NULL-terminated. */
void svc_dedicated_methods(const char *out[SVC_METHODS + 1]);
/* The table's rows are the methods' (names, order): HY_EINVAL otherwise. */
int svc_doors_check(hy_err *err);
/* The largest request method idx takes, bytes: a small one's
 * SVC_SMALL_REQUEST, one of segments svc_request_limit, PutEntry's chunks
 * limits.max_message. */
#define SVC_SMALL_REQUEST (64u << 10)
size_t svc_method_limit(const hy_svc *s, size_t idx);
/* The largest Lookup, Warm, Prefill or Build request the limits allow:
 * limits.max_tokens token ids at 5 bytes, limits.max_segments segments with
 * all their tags, 64 KiB for the rest; at most limits.max_message. */
size_t svc_request_limit(const hy_cached_config *cfg);

/* --- shadow.c: the quality watch (pic.shadow_rate) ---------------------------- */

/* Starts the watch's thread when pic.shadow_rate > 0 (else nothing). */
int svc_shadow_start(hy_svc *s, hy_err *err);
/* Stops it: the comparison running ends first, those waiting are dropped. */
void svc_shadow_stop(hy_svc *s);
/* After a pass of rq that reused `hits` entries and served logits: drawn at
 * pic.shadow_rate, copied and queued for the watch (modes pic, noseam,
 * naive; never blocks). */
void svc_shadow_offer(hy_svc *s, svc_model *sm, const hy_request *rq, int hits,
                      const float *logits);
/* The figures so far, a row per (model, mode) with any, into out (up to
 * cap); how many. */
size_t svc_shadow_rows(hy_svc *s, svc_shadow_row *out, size_t cap);

#endif
