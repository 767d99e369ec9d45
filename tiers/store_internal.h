/*
 * Private to the tier manager (hy_tiers.h): the store's state and what its two
 * files offer each other.
 *
 *   store.c      the index, quotas, removal, host and NVMe eviction, the
 *                mover, open/close, puts, host leases, invalidation,
 *                listing, policies and stats;
 *   store_hbm.c  everything that moves bytes into or out of hbm: opening and
 *                pinning, placement at commit, hbm eviction (demotion to
 *                host), copies down for host leases, device leases.
 *
 * Locking. s->mu guards everything here, the arena, the policies and the
 * residency flags. Every path that copies bytes (NVMe I/O, host ↔ hbm
 * transfers) pins the entry (pins > 0: no copy of it is evicted or freed)
 * and drops s->mu around the copy; after retaking it the path rechecks what
 * may have changed meanwhile (dead, another thread's copy). The device tier
 * guards its own allocator (devtier_internal.h), so its alloc/release run under s->mu
 * and its transfers under nothing of the store's: lock order s->mu → the
 * tier's mutex, never the reverse. NVMe puts of one key are serialised
 * (s->nvme_busy, s->nvme_cv: see store.c), since records are keyed by key;
 * a put that waited rechecks its entry (dead, or written by another thread)
 * before writing.
 *
 * Residency rules (the invariants a reader can check):
 *   - a live entry has at least one of in_hbm, in_host, in_nvme;
 *   - each copy is registered with its tier's evictor exactly while it is
 *     live and not being moved; the hy_store_stats *_entries count them;
 *   - a dead entry (invalidated, replaced or expired while pinned) is out of
 *     the index and the evictors; its host and hbm blocks are freed with its
 *     last pin (st_obj_destroy), its NVMe record at once.
 */
#ifndef HY_STORE_INTERNAL_H
#define HY_STORE_INTERNAL_H

#include "arena_internal.h"
#include "devtier_internal.h"
#include "hbm_internal.h"
#include "hy_tiers.h"
#include "nvme_internal.h"
#include "policy_internal.h"

#include <pthread.h>

/* An entry. The policies know it by oid, an id of the store's own (unique
 * while the store is open, never 0), not by anything a client can choose:
 * the key's leading bytes would do as a hash, but a tenant who finds two
 * segments whose keys share them would have two entries under one id. The
 * admitters, which count how often a key is asked for before any entry
 * exists, still count by hy_key_id: a collision there only adds up two
 * keys' frequencies. */
typedef struct obj {
    hy_meta meta;
    uint64_t oid;
    bool in_hbm, in_host, in_nvme, dead;
    size_t off;          /* host block, when in_host */
    size_t doff;         /* device block, when in_hbm */
    int pins;            /* leases and in-flight copies: no copy of a pinned entry is evicted */
    struct obj *next;    /* in the key index's chain */
    struct obj *id_next; /* in the oid index's chain */
    struct obj *kl, *kr; /* in the key-ordered treap (hy_store_list_after) */
    uint64_t kp;         /* its heap priority there: the key's seeded hash */
} obj;

typedef struct quota {
    char tenant[HY_TENANT_MAX];
    uint64_t bytes;    /* of its stored entries */
    uint64_t reserved; /* of its puts reserved and not yet committed or aborted */
    uint64_t pinned;   /* of its entries with a pin set (pins.c) */
    bool has_limit;    /* hy_store_set_quota: limit replaces cfg.tenant_quota */
    uint64_t limit;
    struct quota *next;
} quota;
struct nvme_busy;

struct hy_store {
    hy_store_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* the mover waits on it for requests */
    pthread_t mover;
    bool mover_running, stop;
    int *queue; /* ring of move requests */
    size_t qhead, qlen;
    hy_arena *arena;
    hy_nvme *nvme;
    struct nvme_busy *nvme_busy; /* keys with an NVMe put in flight (store.c) */
    pthread_cond_t nvme_cv;      /* signalled when one lands, or a demotion ends */
    int host_moving;             /* host victims being demoted (out of the evictor meanwhile) */
    const hy_devtier_ops *dev;   /* NULL: no hbm tier */
    void *dev_ctx;
    size_t dev_capacity;
    bool host_pinned;  /* the arena is registered with the device tier */
    char hbm_why[128]; /* what the tier is, or why there is none */
    hy_evictor *ev[HY_TIER_COUNT];
    hy_admitter *ad[HY_TIER_COUNT];
    obj **buckets;  /* by key */
    obj **obuckets; /* by oid, as many buckets */
    obj *kroot;     /* the same entries in key order: a treap on (key, kp) */
    size_t nbuckets, count;
    uint64_t seed; /* of the key index's bucket hash: random per open */
    uint64_t next_oid;
    struct quota *quotas;
    /* user pins (pins.c): the ids of entries whose pin is set (a superset:
     * swept), their bytes and count, and the file that keeps them */
    uint64_t *pin_ids;
    size_t npin_ids, cap_pin_ids;
    uint64_t pinned_bytes, pinned_count;
    char *pins_path; /* NULL without an NVMe tier */
    uint64_t tick;
    hy_store_stats st;
    /* Tests only, NULL otherwise: runs before every NVMe put, without s->mu,
     * with the key being written, so that a test can hold a put in flight
     * while other threads act. Set before the store is shared. */
    void (*nvme_put_hook)(void *ctx, const hy_key *key);
    void *nvme_put_hook_ctx;
};

struct hy_lease {
    obj *o;
    const void *data; /* host lease: the bytes */
    void *dev;        /* device lease: the bytes in GPU memory */
    bool tmp;         /* data is a temporary host block (not kept in host) */
    size_t tmp_off;
    bool dtmp; /* dev is a temporary device block (not admitted to hbm) */
    size_t dtmp_off;
    hy_tier_id from; /* the tier the bytes were served from */
};

static inline size_t st_round_page(uint64_t b)
{
    return (size_t)((b + HY_PAGE - 1) / HY_PAGE * HY_PAGE);
}

/* --- store.c (all with s->mu held) --- */

/* The live entry for key: records the lookup with the host and hbm
 * admitters, removes the entry if expired, counts a miss when there is
 * none. */
obj *st_lookup(hy_store *s, const hy_key *key, uint64_t now);
/* An acquire served from tier `from`: counts the hit, the entry's hits and
 * access time, and touches every evictor that holds a copy. */
void st_served(hy_store *s, obj *o, hy_tier_id from, uint64_t now);
/* A new entry (zeroed, with its oid), not yet in the index; NULL when out of
 * memory. */
obj *st_obj_new(hy_store *s);
/* The live entry of key, NULL when none (no lookup is recorded). */
obj *st_find_key(hy_store *s, const hy_key *key);
/* The live entry whose oid is id, NULL when none. */
obj *st_find_by_id(hy_store *s, uint64_t id);
/* The admitters' id of the entry an evictor named by oid (its key's
 * hy_key_id), 0 for none. */
uint64_t st_freq_id(hy_store *s, uint64_t oid);
/* Whether the entry of id is pinned (an evictor's `pinned` callback). */
bool st_pinned_cb(void *ctx, uint64_t id);
quota *st_quota_of(hy_store *s, const char *tenant, bool create);
bool st_matches(const hy_meta *m, const hy_store_filter *f);
/* Whether o's user pin holds at now (CLOCK_REALTIME ns). */
static inline bool st_held(const obj *o, uint64_t now)
{
    return o->meta.pinned_until_ns == HY_PIN_FOREVER || o->meta.pinned_until_ns > now;
}
/* pins.c: remembers o among the pinned (lock held); reads DIR/pins at open. */
void st_pin_track(hy_store *s, obj *o);
int st_pins_open(hy_store *s, const char *dir, hy_err *err);
/* Records a new copy of o in tier t at block off (ignored for NVMe): sets the
 * flag, counts it and registers it with t's evictor. */
void st_copy_add(hy_store *s, obj *o, hy_tier_id t, size_t off);
/* Forgets o's copy in tier t and frees it (block or NVMe record). */
void st_copy_drop(hy_store *s, obj *o, hy_tier_id t);
/* Takes an entry out of the index and every tier; its blocks go now or with
 * the last pin. reason (evicted, expired, invalidated, corrupt) goes to the
 * removal event; NULL for a replacement, which sends none. */
void st_obj_remove(hy_store *s, obj *o, const char *reason);
/* Drops a pin; the last pin of a dead entry frees it. */
void st_unpin(hy_store *s, obj *o);
/* A host block of `bytes`, evicting host entries (to NVMe) as needed; may
 * drop the lock during a demotion's NVMe write, or to wait for another
 * thread's demotion when nothing else is left to evict. */
int st_host_alloc(hy_store *s, uint64_t bytes, size_t *off, hy_err *err);
/* Brings the bytes of o (pinned, no host copy) into host memory from its hbm
 * copy, or else from NVMe (checksums verified): *off is the block, which
 * became o's host copy if the host admitter agreed, else is a temporary block
 * the caller owns (*tmp). Drops the lock around the copy. HY_ENOTFOUND when o
 * was invalidated meanwhile; HY_EFORMAT when NVMe bytes were corrupt (the
 * entry is dropped). */
/* fn (when not NULL) is told of the bytes as they land from NVMe; *kept:
 * it was, so *off is the block they land in (with *tmp), whatever the
 * outcome — the caller's lease holds it until its reader is done. */
int st_fetch_host(hy_store *s, obj *o, size_t *off, bool *tmp, hy_store_landed_fn fn, void *ctx,
                  bool *kept, hy_err *err);

/* Both acquires (without s->mu): looks the entry up, pins it for the lease,
 * brings its bytes to host memory (device false) or into hbm (device true),
 * counts the hit by the tier that served it. */
int st_acquire(hy_store *s, const hy_key *key, bool device, hy_store_landed_fn fn, void *ctx,
               hy_lease **out, hy_err *err);

/* --- store_hbm.c (all with s->mu held unless said) --- */

/* At hy_store_open with cfg->hbm_bytes > 0 (without s->mu; no store yet):
 * the hbm tier's ops and handle in *ops / *ctx, or both NULL when no device
 * is available (logged; `why` says why). A failure of hy_hbm_open is
 * returned. */
int st_hbm_open_device(const hy_store_config *cfg, const hy_devtier_ops **ops, void **ctx,
                       char *why, size_t n, hy_err *err);
/* Completes s->dev (set by the caller): the tier's capacity, policy, and the
 * host arena pinned when the tier can pin it (a failure is a warning). */
int st_hbm_attach(hy_store *s, hy_err *err);
/* Unpins the arena and closes the tier (before the arena is freed). */
void st_hbm_detach(hy_store *s);
/* At commit: whether hbm takes a copy of the new entry, whose bytes are at
 * data (the reservation, the caller's alone): its admitter agrees, a block is
 * found (evicting) and the copy up succeeds; *doff is then the block, not yet
 * attached to any entry. A failure is logged, not returned: the entry just
 * skips hbm. Drops the lock around the copy. */
bool st_hbm_place(hy_store *s, const hy_meta *m, const void *data, size_t *doff);
/* Frees a device block. */
void st_hbm_release(hy_store *s, size_t doff);
/* Copies n bytes from o's hbm copy into host memory at dst, with the lock
 * dropped; the caller pins o and owns dst. */
int st_hbm_copy_down(hy_store *s, size_t doff, void *dst, size_t n, hy_err *err);
/* Gives o (pinned, not in hbm) a device copy for lease l: kept in hbm when
 * its admitter agrees, else a temporary block of the lease (l->dtmp). Drops
 * the lock around the copies. */
int st_hbm_promote(hy_store *s, obj *o, hy_lease *l, hy_err *err);
/* Fills the hbm part of st. */
void st_hbm_stats(hy_store *s, hy_store_stats *st);

#endif
