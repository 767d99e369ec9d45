/*
 * cluster: where an entry lives and who the members are — the placement rule
 * (placement.c), a small etcd v3 client (etcd.c) and the membership kept in
 * etcd (membership.c). Shared by the daemon and the clients, which must
 * agree on the rule. Uses rpc (the etcd client speaks gRPC through
 * hy_rpc_client) and common; never the model, the store or the transports.
 */
#ifndef HY_CLUSTER_H
#define HY_CLUSTER_H

#include "hy_common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- placement (placement.c) ----
 *
 * The placement rule, shared by daemons and clients (both ends
 * must agree on it): an entry's owners are the top r live members by
 * rendezvous (highest-random-weight) hashing of its key. A member's score
 * for a key depends on the two alone, so when a member joins it takes about
 * 1/n of the keys — each from the owner it outscores — and no other key
 * moves; when one leaves only its keys move. (docs/deploy.md.)
 *
 * score(key, id) = the first 8 bytes, big-endian, of SHA-256 over the
 * string "hypic-owner", its NUL, the 32-byte key and the member's id bytes.
 * Ties (never seen in practice) go to the smaller id. The Python client
 * computes the same (client/python/hypic/cluster.py).
 */
#define HY_MEMBER_ID_MAX 64 /* a member's id, with its NUL */
#define HY_OWNERS_MAX    64 /* replicas an entry may have */

/* The score of member `id` for `key`. */
uint64_t hy_rendezvous_score(const uint8_t key[32], const char *id);

/* The owners of key among the n members ids[0..n): the indexes of the top
 * min(r, n, HY_OWNERS_MAX) by score, best first, into out. Returns how
 * many. */
size_t hy_rendezvous_owners(const uint8_t key[32], const char *const *ids, size_t n, size_t r,
                            size_t *out);

/* ---- the etcd client (etcd.c) ---- */

/*
 * A small etcd v3 client (etcd.c): keys, leases and prefix watches over
 * etcd's gRPC API, on hy_rpc_client, over TLS (client certificates too) and
 * as a user of etcd's own (its auth API), when asked. Enough for the cluster
 * membership (below) and nothing more: no transactions, no user admin.
 *
 * The messages are protoc-c's, generated from rpc/etcd.proto (our own
 * declaration of the part of etcd's API we use, with etcd's field numbers).
 *
 * Errors name the endpoint, the etcd method and etcd's status message. A
 * gRPC status maps to: NOT_FOUND -> HY_ENOTFOUND, INVALID_ARGUMENT /
 * OUT_OF_RANGE / FAILED_PRECONDITION -> HY_EINVAL, DEADLINE_EXCEEDED ->
 * HY_EAGAIN, CANCELLED -> HY_ECANCELED, anything else (UNAVAILABLE: no
 * endpoint answered) -> HY_EIO.
 *
 * Thread-safe: one hy_etcd may be used from several threads at once.
 */

typedef struct hy_etcd hy_etcd;

/* A client of the etcd cluster reachable at endpoints[0..n) ("host:port",
 * plaintext gRPC; at most 16). The list is tried in order, starting from the
 * one that answered last: a call that finds an endpoint UNAVAILABLE moves on
 * to the next, and fails only when none answers. timeout_ms (> 0) is each
 * unary call's deadline. Nothing is sent here: an etcd that is not there
 * shows on the first call. HY_EINVAL for an empty list, an empty endpoint or
 * a bad timeout. */
int hy_etcd_open(const char *const *endpoints, size_t n, int64_t timeout_ms, hy_etcd **out,
                 hy_err *err);

/* How to reach etcd: hy_etcd_open's arguments, and */
typedef struct hy_etcd_options {
    const char *const *endpoints;
    size_t n;
    int64_t timeout_ms;
    /* TLS: PEM text of the CA etcd's certificates chain to (NULL:
     * plaintext); with it, optionally this client's certificate and key (PEM
     * text, both or neither: etcd's --client-cert-auth) and the name etcd's
     * certificate carries instead of each endpoint's host. */
    const char *tls_ca_pem, *tls_cert_pem, *tls_key_pem, *tls_server_name;
    /* A user of etcd's (NULL: none, for an etcd without auth): each endpoint
     * is asked for a token (Auth.Authenticate) before the first call, the
     * token sent with every call, and asked for again once when etcd says it
     * is no longer valid. A wrong name or password is HY_EINVAL naming the
     * user; a user without permission on a key, HY_EIO with etcd's
     * "permission denied". */
    const char *user, *password;
} hy_etcd_options;
/* hy_etcd_open with these options; they are copied. HY_EINVAL as
 * hy_etcd_open's, and for a certificate without its key (or without TLS), or
 * a password without a user. */
int hy_etcd_open_ex(const hy_etcd_options *o, hy_etcd **out, hy_err *err);
/* Closes every channel; no call or watch may still be running on e. NULL is
 * a no-op. */
void hy_etcd_close(hy_etcd *e);

/* Sets key (NUL-terminated, not empty) to val[0..n), attached to lease (0:
 * none; the key is deleted when the lease ends). HY_ENOTFOUND when the lease
 * does not exist. */
int hy_etcd_put(hy_etcd *e, const char *key, const void *val, size_t n, int64_t lease, hy_err *err);
/* Deletes key; a key that is not there is not an error (0). */
int hy_etcd_delete(hy_etcd *e, const char *key, hy_err *err);

/* One key as a range returns it; key is NUL-terminated, value_len bytes at
 * value (also NUL-terminated, for text values; the NUL is not counted). */
typedef struct hy_etcd_kv {
    char *key;
    uint8_t *value;
    size_t value_len;
    int64_t mod_revision; /* the revision that last wrote the key */
    int64_t lease;        /* 0: none */
} hy_etcd_kv;

/* Every key starting with prefix (not empty), sorted by key, into *kvs
 * (*n of them; free with hy_etcd_kvs_free; NULL when none) and the store's
 * revision at the time (revision may be NULL): a watch from *revision + 1
 * misses nothing that happened after this range. */
int hy_etcd_range_prefix(hy_etcd *e, const char *prefix, hy_etcd_kv **kvs, size_t *n,
                         int64_t *revision, hy_err *err);
void hy_etcd_kvs_free(hy_etcd_kv *kvs, size_t n);

/* A new lease of ttl_s seconds (> 0): *id, and the TTL etcd granted in *ttl
 * (may be NULL; etcd raises a TTL under its minimum). */
int hy_etcd_lease_grant(hy_etcd *e, int64_t ttl_s, int64_t *id, int64_t *ttl, hy_err *err);
/* Renews lease id for its full TTL, which goes to *ttl (may be NULL). One
 * LeaseKeepAlive call per renewal. HY_ENOTFOUND when the lease is gone
 * (expired, revoked, or etcd lost it): grant a new one. */
int hy_etcd_lease_keepalive(hy_etcd *e, int64_t id, int64_t *ttl, hy_err *err);
/* Ends lease id now: its keys are deleted at once. HY_ENOTFOUND when it is
 * already gone. */
int hy_etcd_lease_revoke(hy_etcd *e, int64_t id, hy_err *err);

/* ---- Watches ---- */

typedef enum hy_etcd_event_type { HY_ETCD_PUT = 0, HY_ETCD_DELETE = 1 } hy_etcd_event_type;

/* One change: for a DELETE value is empty (value_len 0) and lease 0. key and
 * value are NUL-terminated and live only during the callback. */
typedef struct hy_etcd_event {
    hy_etcd_event_type type;
    const char *key;
    const uint8_t *value;
    size_t value_len;
    int64_t mod_revision; /* the revision of this change */
    int64_t lease;
} hy_etcd_event;

/* Called on the watch's thread with the events of one etcd WatchResponse
 * (n may be 0: a progress notice), in revision order, ok true; revision is
 * the store's revision of that response. When the stream breaks (etcd went
 * away, the watch was cancelled by etcd or its start revision compacted),
 * called once with ok false, no events and the reason in why; the watch is
 * then over (hy_etcd_watch_stop still frees it). Never called after
 * hy_etcd_watch_stop returned, nor for the stop itself. */
typedef void (*hy_etcd_watch_fn)(void *ctx, bool ok, const hy_etcd_event *ev, size_t n,
                                 int64_t revision, const char *why);

typedef struct hy_etcd_watch hy_etcd_watch;

/* Watches every key starting with prefix (not empty) from start_revision
 * (0: from now on), on a thread of its own, one long Watch call. Returns once
 * etcd has confirmed the watch (so a change made after this returns is
 * seen), or with the error that prevented it (no endpoint answered within
 * e's timeout, etcd refused the watch). e must outlive the watch. */
int hy_etcd_watch_start(hy_etcd *e, const char *prefix, int64_t start_revision, hy_etcd_watch_fn fn,
                        void *ctx, hy_etcd_watch **out, hy_err *err);
/* Cancels the watch's call, waits for its thread and frees it. Must not be
 * called from fn. NULL is a no-op. */
void hy_etcd_watch_stop(hy_etcd_watch *w);

/* ---- membership (membership.c) ---- */

/*
 * Cluster membership kept in etcd (membership.c): each live node holds
 * one key, prefix + its id, whose value is a JSON object describing it (at
 * least "id" and "address"), attached to a lease the node keeps alive. A
 * node that stops revokes its lease and leaves at once; one that crashes
 * leaves when its lease expires (about its TTL later). Anyone, node or
 * client, may watch the prefix and be told the whole live set on each
 * change.
 *
 * What the daemon (a member) and the C client (a watcher) use; built on
 * the etcd client above.
 */

typedef struct hy_member {
    char id[64];       /* the key after the prefix */
    char address[256]; /* the value's "address" */
    char *info;        /* the whole JSON value, NUL-terminated */
} hy_member;

/* The whole live set, sorted by id (strcmp), n may be 0. m and its strings
 * live only during the call. Runs on the membership's threads (and once in
 * hy_membership_start's), one call at a time; it must not call
 * hy_membership_stop or _abandon. */
typedef void (*hy_members_fn)(void *ctx, const hy_member *m, size_t n);

typedef struct hy_membership_config {
    const char *const *endpoints; /* etcd's, "host:port" */
    size_t nendpoints;
    const char *prefix;    /* e.g. "/hypic/members/" (not empty) */
    int ttl_s;             /* the lease's TTL in seconds (>= 1); 0: 10 */
    const char *self_id;   /* NULL: watch only (a client); at most 63 bytes, no '/' */
    const char *self_info; /* JSON object text with at least "address" (and "id") */
    int64_t timeout_ms;    /* each etcd call's deadline; 0: 2000 */
    hy_members_fn on_change;
    void *ctx;
    /* TLS and etcd's auth, as hy_etcd_options has them (all NULL: plaintext,
     * no user) */
    const char *tls_ca_pem, *tls_cert_pem, *tls_key_pem, *tls_server_name;
    const char *user, *password;
} hy_membership_config;

typedef struct hy_membership hy_membership;

/* Joins (when self_id is set: grants a lease of ttl_s, puts prefix + self_id
 * = self_info with it) and reads the prefix; on_change has been called with
 * the initial set (which includes this node) before this returns. Then a
 * keepalive thread renews the lease every ttl_s / 3 (a lease that is gone,
 * after etcd restarted or a long pause, is granted again and the key put
 * again), and a watch thread follows the prefix, calling on_change with the
 * new set after each change; a broken watch is followed by a fresh read of
 * the prefix (on_change with that set) and a new watch, retried with
 * backoff while etcd is away. A value that is not a JSON object with a
 * string "address" is logged and left out of the set. The config's strings
 * are copied. Errors: HY_EINVAL (a bad config: self_info not such an
 * object, ...), and the etcd client's errors above (no endpoint answered). */
int hy_membership_start(const hy_membership_config *c, hy_membership **out, hy_err *err);
/* Stops the threads (on_change is not called after this returns), then
 * revokes the lease: the node leaves the set at once for everyone else.
 * NULL is a no-op. */
void hy_membership_stop(hy_membership *m);
/* Stops the threads WITHOUT revoking: the key stays until the lease expires,
 * as after a crash (for tests, and for a node handing over to a restart of
 * itself). NULL is a no-op. */
void hy_membership_abandon(hy_membership *m);

#endif
