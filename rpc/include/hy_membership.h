/*
 * Cluster membership kept in etcd (rpc/membership.c): each live node holds
 * one key, prefix + its id, whose value is a JSON object describing it (at
 * least "id" and "address"), attached to a lease the node keeps alive. A
 * node that stops revokes its lease and leaves at once; one that crashes
 * leaves when its lease expires (about its TTL later). Anyone, node or
 * client, may watch the prefix and be told the whole live set on each
 * change.
 *
 * What the daemon (a member) and the C client (a watcher) use; built on
 * hy_etcd.h.
 */
#ifndef HY_MEMBERSHIP_H
#define HY_MEMBERSHIP_H

#include "hy_common.h"

#include <stddef.h>

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
 * object, ...), and the etcd errors of hy_etcd.h (no endpoint answered). */
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
