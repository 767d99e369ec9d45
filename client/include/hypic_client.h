/*
 * libhypic-client: the C client of the HYPIC cache-tier service (hypic.v1,
 * served by hypic-cached). One blocking call per RPC, each with the
 * connection's bearer token and deadline, answering with the gRPC status
 * code and message the server sent.
 *
 * Requests and responses are protoc-c's messages from rpc/hypic.proto
 * (hypic.pb-c.h, included here): fill a request with its _INIT macro, call,
 * read the response, free it with hyc_free. docs/api.md documents every
 * method, field, limit and status.
 *
 * Statuses: every call returns st->code, gRPC's status code (0: OK;
 * hyc_code_name names them) and fills st->msg with the server's message
 * ("" on OK). A call that could not reach the server is UNAVAILABLE (14), one
 * past its deadline DEADLINE_EXCEEDED (4). Connections: a call whose
 * connection could not be made (refused, reset, a handshake that failed)
 * never reached the server and is made again on a fresh connection for up
 * to 1 s within its deadline before it is UNAVAILABLE; a call made after a
 * failed connection dials at once (the handle is never left failing with
 * an earlier failure). What goes wrong on the client's
 * side (a response that does not decode, entry chunks that do not add up,
 * out of memory) is INTERNAL (13) with a message starting "client: "; an
 * argument the client refuses before sending anything (a NULL request, a
 * chunk size over the message limit) is INVALID_ARGUMENT, also "client: ".
 * On an error no response is returned (*out is NULL).
 *
 * Threads: one hyc may be used by several threads at once; each call blocks
 * only its own thread. The library links the rpc transport only, never the
 * model or the store.
 */
#ifndef HYPIC_CLIENT_H
#define HYPIC_CLIENT_H

#include "hypic.pb-c.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hyc hyc;

typedef struct hyc_options {
    const char *target;  /* "host:port" of hypic-cached's gRPC listener */
    const char *token;   /* bearer token of the caller's tenant, or NULL (no tokens configured) */
    int64_t deadline_ms; /* per call; 0: none */
    size_t max_message;  /* bytes per message each way; 0: 64 MiB (the daemon's default) */
    const char *tls_ca_file; /* PEM file of the CA the server's certificate chains to: TLS; NULL:
                                plaintext */
    /* The name the server's certificate must carry instead of target's host;
     * NULL: target's host. TLS only. */
    const char *tls_server_name;
    /* Mutual TLS (a daemon with tls.client_ca): PEM files of this client's
     * certificate and its private key, presented when the daemon asks; both
     * or neither, with tls_ca_file. NULL: none. */
    const char *tls_cert_file, *tls_key_file;
    /* Calls wait, within their deadline, for the connection to come up
     * instead of failing UNAVAILABLE at once while the daemon cannot be
     * reached (gRPC's wait_for_ready); false: fail fast. */
    bool wait_for_ready;
    /* How long one attempt to connect (TCP, TLS, the HTTP/2 handshake) may
     * take before the calls waiting on it fail UNAVAILABLE; 0: 5000 ms. A
     * call made after a failed attempt dials again at once. */
    int connect_timeout_ms;
} hyc_options;

typedef struct hyc_status {
    int code; /* gRPC status code, 0: OK */
    char msg[512];
} hyc_status;

/* gRPC's status codes, as hyc calls return them. */
enum {
    HYC_OK = 0,
    HYC_CANCELLED = 1,
    HYC_UNKNOWN = 2,
    HYC_INVALID_ARGUMENT = 3,
    HYC_DEADLINE_EXCEEDED = 4,
    HYC_NOT_FOUND = 5,
    HYC_ALREADY_EXISTS = 6,
    HYC_PERMISSION_DENIED = 7,
    HYC_RESOURCE_EXHAUSTED = 8,
    HYC_FAILED_PRECONDITION = 9,
    HYC_ABORTED = 10,
    HYC_OUT_OF_RANGE = 11,
    HYC_UNIMPLEMENTED = 12,
    HYC_INTERNAL = 13,
    HYC_UNAVAILABLE = 14,
    HYC_DATA_LOSS = 15,
    HYC_UNAUTHENTICATED = 16,
};

/* Opens a connection to o->target: a TCP connection of this handle's own
 * (not shared with other handles to the same target, so that a frontend's
 * threads, each with its handle, are read by the daemon in parallel). Nothing is sent until the
 * first call, so a server that is not listening shows as UNAVAILABLE on that call, not here.
 * INVALID_ARGUMENT when o->target is empty or the CA file cannot be read or holds no PEM
 * certificate (the message names the file). The options are copied. */
int hyc_open(const hyc_options *o, hyc **out, hyc_status *st);
/* Closes the connection; no call may be in flight on it. NULL is a no-op. */
void hyc_close(hyc *c);

/* ---- unary methods: request in, one response out (free with hyc_free) ---- */

/* Which segments are cached, in request order, and how many leading ones hit. */
int hyc_lookup(hyc *c, const Hypic__V1__LookupRequest *rq, Hypic__V1__LookupResponse **out,
               hyc_status *st);
/* Prefill with cache reuse: first-token top-k, greedy continuation, outcome
 * per segment and per-phase timings. */
int hyc_prefill(hyc *c, const Hypic__V1__PrefillRequest *rq, Hypic__V1__PrefillResponse **out,
                hyc_status *st);
/* Removes entries by key, tag, model or all of the caller's tenant. */
int hyc_invalidate(hyc *c, const Hypic__V1__InvalidateRequest *rq,
                   Hypic__V1__InvalidateResponse **out, hyc_status *st);
/* Pin: the entries named by key or tag kept from eviction and TTL expiry,
 * until unpinned or for ttl_ms; RESOURCE_EXHAUSTED past the tenant's pin cap. */
int hyc_pin(hyc *c, const Hypic__V1__PinRequest *rq, Hypic__V1__PinResponse **out, hyc_status *st);
/* Unpin: by key, tag or all of the tenant's pins. */
int hyc_unpin(hyc *c, const Hypic__V1__UnpinRequest *rq, Hypic__V1__UnpinResponse **out,
              hyc_status *st);
/* One page of the tenant's entries; pass out->next_page_token back in
 * rq->page_token for the next (empty on the last page). */
int hyc_list(hyc *c, const Hypic__V1__ListRequest *rq, Hypic__V1__ListResponse **out,
             hyc_status *st);
/* An entry's metadata and sections, its checksums verified when rq->verify. */
int hyc_inspect(hyc *c, const Hypic__V1__InspectRequest *rq, Hypic__V1__InspectResponse **out,
                hyc_status *st);
/* The store's counters per tier and the server's load. */
int hyc_stats(hyc *c, const Hypic__V1__StatsRequest *rq, Hypic__V1__StatsResponse **out,
              hyc_status *st);
/* A tier's eviction and admission policy. */
int hyc_get_policy(hyc *c, const Hypic__V1__GetPolicyRequest *rq, Hypic__V1__Policy **out,
                   hyc_status *st);
/* Changes a tier's policy at runtime; *out is the policy now in force. */
int hyc_set_policy(hyc *c, const Hypic__V1__SetPolicyRequest *rq, Hypic__V1__Policy **out,
                   hyc_status *st);
/* Whether the server is serving, its version and its models. */
int hyc_health(hyc *c, const Hypic__V1__HealthRequest *rq, Hypic__V1__HealthResponse **out,
               hyc_status *st);

/* ---- streams ---- */

/* Builds and stores the request's segments; on(ctx, p) is called with each
 * segment's progress as the server reports it (p is valid during the call
 * only). An on that returns non-zero ends the call: the client cancels it
 * (the server sees the client go) and the return is CANCELLED with the
 * message "client: stopped by the callback". on may be NULL. */
int hyc_warm(hyc *c, const Hypic__V1__WarmRequest *rq,
             int (*on)(void *ctx, const Hypic__V1__WarmProgress *p), void *ctx, hyc_status *st);

/* Stored / removed events of the tenant's entries, as they happen, until the
 * server ends the stream, the deadline passes (a watcher usually opens its
 * connection with deadline_ms 0), or on returns non-zero (then as in
 * hyc_warm: CANCELLED, "client: stopped by the callback"). */
int hyc_watch(hyc *c, const Hypic__V1__WatchRequest *rq,
              int (*on)(void *ctx, const Hypic__V1__WatchEvent *e), void *ctx, hyc_status *st);

/* Fetches a serialised entry: *meta (free with hyc_free) and its bytes
 * (*bytes, *n; malloc'd, free with free(); a 0-byte entry gives a non-NULL
 * *bytes). The chunks must add up to exactly meta->bytes, the first must
 * carry the metadata and no other may: otherwise INTERNAL "client: ...",
 * and nothing is returned. */
int hyc_get_entry(hyc *c, const Hypic__V1__GetEntryRequest *rq, Hypic__V1__EntryMeta **meta,
                  void **bytes, size_t *n, hyc_status *st);

/* Builds a segment's entry on the server (a scatter worker, or any daemon)
 * and streams it back unstored: *meta (key under the caller's tenant, tokens,
 * flops, bytes, tags) and the serialised bytes, checked as hyc_get_entry
 * checks GetEntry's chunks. hyc_put_entry stores them. */
int hyc_build(hyc *c, const Hypic__V1__BuildRequest *rq, Hypic__V1__EntryMeta **meta, void **bytes,
              size_t *n, hyc_status *st);

/* Stores a serialised entry: meta (meta->bytes is set to n on the wire,
 * whatever it holds) and bytes[0..n), sent in chunks of `chunk` bytes (0:
 * 1 MiB; at most max_message - 64 KiB, the room left for the metadata), the
 * first carrying meta. The server validates the whole entry before committing
 * it. *out says where it was placed (TIER_NONE: valid, but not admitted). */
int hyc_put_entry(hyc *c, const Hypic__V1__EntryMeta *meta, const void *bytes, size_t n,
                  size_t chunk, Hypic__V1__PutEntryResponse **out, hyc_status *st);

/* ---- bulk transports (docs/transports.md) ---- */

/* The raw methods: offer transports, get a session; end a session. */
int hyc_open_transport(hyc *c, const Hypic__V1__OpenTransportRequest *rq,
                       Hypic__V1__OpenTransportResponse **out, hyc_status *st);
int hyc_close_transport(hyc *c, const Hypic__V1__CloseTransportRequest *rq,
                        Hypic__V1__CloseTransportResponse **out, hyc_status *st);

/* A transport session with its buffer: what the server writes states and
 * entries into. */
typedef struct hyc_session hyc_session;

/* Opens a session whose buffer holds capacity bytes, offering the kinds in
 * `kinds` best first ("shm,tcp"; NULL: "rdma,shm,tcp"): RDMA only when this
 * machine has a device (else it is left out of the offer), shm only when the
 * server is on this host (it answers with its socket; a connect that fails is
 * an error). Then attaches. INVALID_ARGUMENT for a kind that is not tcp, shm
 * or rdma (cuda_ipc: hyc_session_open_cuda); the server's status when it serves none of them (e.g.
 * FAILED_PRECONDITION naming why for each); UNAVAILABLE when the attach
 * fails. */
int hyc_session_open(hyc *c, const char *kinds, uint64_t capacity, hyc_session **out,
                     hyc_status *st);
/* A session that may deliver into GPU memory on the daemon's node: kinds
 * may include "cuda_ipc" (NULL: "cuda_ipc,shm,tcp"), whose buffer is buf —
 * device memory of capacity bytes on CUDA device `device` of this process
 * (< 0: the current one) — or, buf NULL, allocated there and freed with the
 * session. The offer carries cudaIpcGetMemHandle's handle, the GPU's PCI bus
 * id and the buffer's offset in its allocation; the daemon copies into it
 * and synchronises before it replies, so an OK reply is the delivery. The
 * CUDA runtime is loaded when asked (this library does not link it): a
 * process without one, or a daemon without the GPU, passes cuda_ipc over
 * for the next offer, saying why (hyc_session_passed_over). When the server
 * takes cuda_ipc, hyc_session_on_device is true and hyc_session_buffer is the
 * device pointer. */
int hyc_session_open_cuda(hyc *c, const char *kinds, int device, void *buf, uint64_t capacity,
                          hyc_session **out, hyc_status *st);
bool hyc_session_on_device(const hyc_session *s);
/* Copies n bytes at off of the session's buffer into host memory dst (from
 * the GPU when the buffer is device memory). */
int hyc_session_read(const hyc_session *s, uint64_t off, void *dst, size_t n, hyc_status *st);
/* CloseTransport, then the buffer and the connection go. NULL: no-op. */
void hyc_session_close(hyc_session *s);
uint64_t hyc_session_id(const hyc_session *s);
const char *hyc_session_kind(const hyc_session *s);        /* "tcp", "shm", "rdma" or "cuda_ipc" */
const char *hyc_session_passed_over(const hyc_session *s); /* why earlier offers were not taken */
uint8_t *hyc_session_buffer(const hyc_session *s);
uint64_t hyc_session_capacity(const hyc_session *s);

/* Prefill with return_state into s's buffer at offset (rq's own
 * return_state, transport_session and state_offset are set here). On OK the
 * whole state is in the buffer — the reply arrived and the transport
 * completed its transfer — and (*out)->state gives its layout. A transfer the
 * server reports failed is its status (UNAVAILABLE); one the transport does
 * not complete within the deadline (10 s when none) is UNAVAILABLE "client:
 * ..." and the session should be closed. */
int hyc_prefill_state(hyc *c, hyc_session *s, uint64_t offset, Hypic__V1__PrefillRequest *rq,
                      Hypic__V1__PrefillResponse **out, hyc_status *st);
/* GetEntry through s: the entry's bytes land at offset in s's buffer;
 * *meta (free with hyc_free) and *delivery-like facts in (*meta)->bytes. */
int hyc_get_entry_into(hyc *c, hyc_session *s, uint64_t offset, Hypic__V1__GetEntryRequest *rq,
                       Hypic__V1__EntryMeta **meta, hyc_status *st);

/* ---- cluster mode (docs/deploy.md#cluster-mode) ----
 *
 * A cluster of hypic-cached members shares the key space: an entry's owners
 * are the top r members by rendezvous hashing of its key (hy_cluster.h).
 * Any member answers any call (asking the owners itself), but a client that
 * knows the set goes straight to them: GetEntry, PutEntry and Lookup by key
 * to the owners, Prefill to any member, the next one when a member does not
 * answer. A member that is gone is a miss, never an error. */
typedef struct hyc_cluster hyc_cluster;

typedef struct hyc_cluster_options {
    const char *members; /* a static set: "id=host:port,id=host:port,..." */
    const char *etcd;    /* or etcd's endpoints "host:port,...": the set is the members
                          * registered there, followed as they join and leave */
    const char *prefix;  /* etcd's key prefix; NULL: "/hypic/members/" */
    /* etcd over TLS (the CA its certificate chains to; a certificate and key
     * of this client's for an etcd with --client-cert-auth; the name its
     * certificate carries instead of the endpoint's host), and as a user of
     * etcd's own, which needs only read access to the prefix. NULL: plaintext,
     * no user. The members' registration seal (cluster.secret) is theirs:
     * a client trusts the set as far as etcd's access control goes, and each
     * member's certificate (client.tls_ca_file) proves the member is one. */
    const char *etcd_tls_ca_file, *etcd_tls_cert_file, *etcd_tls_key_file;
    const char *etcd_tls_server_name;
    const char *etcd_user, *etcd_password;
    uint32_t replicas;  /* owners per entry, as the members are configured; 0: 1 */
    hyc_options client; /* token, deadline, limits and TLS of every member's connection
                         * (its target is ignored) */
} hyc_cluster_options;

/* INVALID_ARGUMENT for a member list that does not parse (naming the item),
 * neither members nor etcd, an etcd TLS file that cannot be read (naming
 * it), a password without a user or a user etcd refuses (naming the user);
 * UNAVAILABLE when no etcd endpoint answers. */
int hyc_cluster_open(const hyc_cluster_options *o, hyc_cluster **out, hyc_status *st);
void hyc_cluster_close(hyc_cluster *c);
/* The live set now, by id: how many; ids and addrs (either may be NULL)
 * filled for the first cap. */
size_t hyc_cluster_members(hyc_cluster *c, char (*ids)[64], char (*addrs)[256], size_t cap);
/* key's owners, best first: how many; their ids for the first cap. */
size_t hyc_cluster_owners(hyc_cluster *c, const uint8_t key[32], char (*ids)[64], size_t cap);
/* The connection to member id (NULL when it is not in the set): for the
 * calls that are not routed. Valid until hyc_cluster_close. */
hyc *hyc_cluster_member(hyc_cluster *c, const char *id);
/* GetEntry from the key's owners in order: the first that has it. NOT_FOUND
 * when none has it or none answers. */
int hyc_cluster_get_entry(hyc_cluster *c, const Hypic__V1__GetEntryRequest *rq,
                          Hypic__V1__EntryMeta **meta, void **bytes, size_t *n, hyc_status *st);
/* PutEntry to the first of meta->key's owners that takes it (that member
 * gives it to the other owners in the background). meta->key is required. */
int hyc_cluster_put_entry(hyc_cluster *c, const Hypic__V1__EntryMeta *meta, const void *bytes,
                          size_t n, Hypic__V1__PutEntryResponse **out, hyc_status *st);
/* Lookup: segments given by key asked of their owners (one call per member,
 * merged in request order), those given by tokens of any member (which asks
 * the owners). A member that does not answer leaves its segments misses. */
int hyc_cluster_lookup(hyc_cluster *c, const Hypic__V1__LookupRequest *rq,
                       Hypic__V1__LookupResponse **out, hyc_status *st);
/* Prefill on the members in turn (round-robin); a member that does not
 * answer (UNAVAILABLE) is skipped for the next, each member tried once. */
int hyc_cluster_prefill(hyc_cluster *c, const Hypic__V1__PrefillRequest *rq,
                        Hypic__V1__PrefillResponse **out, hyc_status *st);

/* ---- helpers ---- */

/* Frees any response message a hyc call returned (and EntryMeta from
 * hyc_get_entry); NULL is a no-op. */
void hyc_free(void *msg);
/* gRPC's name of a status code ("OK", "NOT_FOUND", ...), or "UNKNOWN_CODE"
 * for a number gRPC does not define. */
const char *hyc_code_name(int code);

#ifdef __cplusplus
}
#endif

#endif
