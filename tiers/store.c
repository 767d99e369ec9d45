/*
 * The tier manager (hy_tiers.h), host and NVMe side; the hbm moves are in
 * store_hbm.c and the state both share in store_internal.h (which also says
 * how locking and residency work). One mutex guards the index (a chained
 * hash table of entries by key), the arena, the policies and the quotas.
 * Payload copies, checksums and NVMe I/O of a commit or a promotion run
 * outside it: the entry or reservation involved is pinned, so nothing frees
 * its bytes meanwhile. Demotion drops the lock around its NVMe write with the
 * victim pinned. With an NVMe tier a mover thread takes requests from a
 * bounded queue and demotes in the background between the watermarks; a put
 * that still finds no room evicts in the foreground.
 *
 * NVMe records are keyed by key alone, while two entries may share a key for
 * a while (a replace, a put racing an invalidation or a demotion of the old
 * one). So puts of one key are serialised (s->nvme_busy), and a removal of a
 * key's record while a put of that key is in flight is left to the put,
 * which replaces the record, or removes it if it fails: otherwise the
 * removal could land after the put and take the newer entry's record. A put
 * that waited for another of its key rechecks its entry first and writes
 * nothing if it died meanwhile: the put it waited for may be its
 * replacement's (nvme_put_evicting).
 */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* A key whose NVMe put is in flight (lives on the putting thread's stack). */
typedef struct nvme_busy {
    hy_key key;
    bool removed; /* a removal of the key's record met the put: left to it */
    struct nvme_busy *next;
} nvme_busy;

enum { MOVE_MAKE_ROOM = 1 };

struct hy_put {
    hy_meta meta;
    size_t off;
    uint64_t charged; /* bytes counted in its tenant's quota.reserved */
};

/* --- index ------------------------------------------------------------------ */

/* A key's bucket hash: keyed with the store's random seed. The key's own
 * leading bytes would do for keys nobody chooses, but a tenant can search
 * for segments whose keys share their low bits and pile entries into one
 * chain that every lookup then walks. */
static uint64_t key_hash(const hy_store *s, const hy_key *k)
{
    return hy_xxh3_seeded(k->b, HY_KEY_BYTES, s->seed);
}

static obj **slot(hy_store *s, const hy_key *k)
{
    obj **p = &s->buckets[key_hash(s, k) & (s->nbuckets - 1)];
    while (*p && memcmp((*p)->meta.key.b, k->b, HY_KEY_BYTES) != 0) p = &(*p)->next;
    return p;
}

static obj *idx_find(hy_store *s, const hy_key *k)
{
    return *slot(s, k);
}

static int idx_grow(hy_store *s)
{
    size_t nb = s->nbuckets * 2;
    obj **b = calloc(nb, sizeof *b), **ob = calloc(nb, sizeof *ob);
    if (!b || !ob) {
        free(b);
        free(ob);
        return HY_ENOMEM;
    }
    for (size_t i = 0; i < s->nbuckets; i++) {
        for (obj *o = s->buckets[i], *nx; o; o = nx) {
            nx = o->next;
            obj **h = &b[key_hash(s, &o->meta.key) & (nb - 1)];
            o->next = *h;
            *h = o;
        }
        for (obj *o = s->obuckets[i], *nx; o; o = nx) {
            nx = o->id_next;
            obj **h = &ob[o->oid & (nb - 1)];
            o->id_next = *h;
            *h = o;
        }
    }
    free(s->buckets);
    free(s->obuckets);
    s->buckets = b;
    s->obuckets = ob;
    s->nbuckets = nb;
    return HY_OK;
}

/* The key-ordered view of the index: a treap (a binary search tree on the
 * key, a max-heap on kp = the key's seeded hash, so its shape is random
 * whatever keys a tenant picks and its depth O(log n) expected). It makes
 * a page of List in key order O(log n + page) instead of a sort of every
 * entry per page (hy_store_list_after). Keys in the index are unique. */
static obj *kt_insert(obj *t, obj *o)
{
    if (!t) return o;
    if (memcmp(o->meta.key.b, t->meta.key.b, HY_KEY_BYTES) < 0) {
        t->kl = kt_insert(t->kl, o);
        if (t->kl->kp > t->kp) { /* rotate right */
            obj *l = t->kl;
            t->kl = l->kr;
            l->kr = t;
            return l;
        }
    } else {
        t->kr = kt_insert(t->kr, o);
        if (t->kr->kp > t->kp) { /* rotate left */
            obj *r = t->kr;
            t->kr = r->kl;
            r->kl = t;
            return r;
        }
    }
    return t;
}

static obj *kt_merge(obj *a, obj *b) /* every key of a below every key of b */
{
    if (!a) return b;
    if (!b) return a;
    if (a->kp > b->kp) {
        a->kr = kt_merge(a->kr, b);
        return a;
    }
    b->kl = kt_merge(a, b->kl);
    return b;
}

static obj *kt_remove(obj *t, obj *o)
{
    assert(t); /* o is in the tree */
    if (t == o) {
        obj *m = kt_merge(o->kl, o->kr);
        o->kl = o->kr = NULL;
        return m;
    }
    if (memcmp(o->meta.key.b, t->meta.key.b, HY_KEY_BYTES) < 0)
        t->kl = kt_remove(t->kl, o);
    else
        t->kr = kt_remove(t->kr, o);
    return t;
}

static void idx_insert(hy_store *s, obj *o)
{
    o->kl = o->kr = NULL;
    o->kp = key_hash(s, &o->meta.key);
    s->kroot = kt_insert(s->kroot, o);
    if (s->count >= s->nbuckets) idx_grow(s); /* on failure chains just get longer */
    obj **h = &s->buckets[key_hash(s, &o->meta.key) & (s->nbuckets - 1)];
    o->next = *h;
    *h = o;
    obj **oh = &s->obuckets[o->oid & (s->nbuckets - 1)];
    o->id_next = *oh;
    *oh = o;
    s->count++;
}

static void idx_unlink(hy_store *s, obj *o)
{
    obj **p = slot(s, &o->meta.key);
    assert(*p == o);
    *p = o->next;
    o->next = NULL;
    obj **q = &s->obuckets[o->oid & (s->nbuckets - 1)];
    while (*q != o) q = &(*q)->id_next;
    *q = o->id_next;
    o->id_next = NULL;
    s->kroot = kt_remove(s->kroot, o);
    s->count--;
}

obj *st_find_key(hy_store *s, const hy_key *key)
{
    return idx_find(s, key);
}

obj *st_obj_new(hy_store *s)
{
    obj *o = calloc(1, sizeof *o);
    if (o) o->oid = __atomic_add_fetch(&s->next_oid, 1, __ATOMIC_RELAXED); /* with or without mu */
    return o;
}

/* --- quotas -------------------------------------------------------------------- */

quota *st_quota_of(hy_store *s, const char *tenant, bool create)
{
    for (quota *q = s->quotas; q; q = q->next)
        if (strcmp(q->tenant, tenant) == 0) return q;
    if (!create) return NULL;
    quota *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    snprintf(q->tenant, sizeof q->tenant, "%s", tenant);
    q->next = s->quotas;
    s->quotas = q;
    return q;
}

/* An entry enters (+1) or leaves (-1) its tenant's bytes, and its pinned
 * bytes while its pin is set (lapsed or not: hy_store_pin's sweep clears
 * lapsed pins and their bytes together). */
static void quota_add(hy_store *s, const hy_meta *m, int64_t sign)
{
    quota *q = st_quota_of(s, m->tenant, true);
    if (q) q->bytes += (uint64_t)(sign * (int64_t)m->bytes);
    if (m->pinned_until_ns) {
        if (q) q->pinned += (uint64_t)(sign * (int64_t)m->bytes);
        s->pinned_bytes += (uint64_t)(sign * (int64_t)m->bytes);
        s->pinned_count += (uint64_t)sign;
    }
}

/* HY_ERANGE (saying so) when `bytes` more for tenant would pass its quota,
 * counting what it stores and what its puts have reserved (the lock is
 * held). *limit: the quota (0: none). */
static int quota_check(hy_store *s, const char *tenant, uint64_t bytes, uint64_t *limit,
                       hy_err *err)
{
    const quota *q = st_quota_of(s, tenant, false);
    const uint64_t used = q ? q->bytes + q->reserved : 0;
    *limit = q && q->has_limit ? q->limit : s->cfg.tenant_quota;
    if (*limit && used + bytes > *limit)
        return hy_err_set(err, HY_ERANGE,
                          "tenant '%s': %llu bytes stored or being put + %llu would exceed its "
                          "quota of %llu",
                          tenant, (unsigned long long)used, (unsigned long long)bytes,
                          (unsigned long long)*limit);
    return HY_OK;
}

/* A put's reservation leaves its tenant's reserved bytes: committed (its
 * entry is counted in bytes instead) or aborted (the lock is held). */
static void quota_unreserve(hy_store *s, hy_put *p)
{
    quota *q = p->charged ? st_quota_of(s, p->meta.tenant, false) : NULL;
    if (q) q->reserved -= HY_MIN(q->reserved, p->charged);
    p->charged = 0;
}

/* --- copies and removal ---------------------------------------------------------- */

static bool resident(const obj *o, hy_tier_id t)
{
    return t == HY_TIER_HBM ? o->in_hbm : t == HY_TIER_HOST ? o->in_host : o->in_nvme;
}

void st_copy_add(hy_store *s, obj *o, hy_tier_id t, size_t off)
{
    assert(!resident(o, t) && !o->dead);
    switch (t) {
    case HY_TIER_HBM:
        o->in_hbm = true, o->doff = off, s->st.hbm_entries++;
        break;
    case HY_TIER_HOST:
        o->in_host = true, o->off = off, s->st.host_entries++;
        break;
    default:
        o->in_nvme = true, s->st.nvme_entries++;
    }
    hy_evictor_insert(s->ev[t], o->oid, o->meta.bytes, o->meta.flops, o->meta.tokens, ++s->tick);
}

static nvme_busy *nvme_busy_find(hy_store *s, const hy_key *k)
{
    for (nvme_busy *b = s->nvme_busy; b; b = b->next)
        if (memcmp(b->key.b, k->b, HY_KEY_BYTES) == 0) return b;
    return NULL;
}

/* Removes the NVMe record of key k, or leaves it to the put of k in flight
 * (top of the file). */
static void nvme_remove_key(hy_store *s, const hy_key *k)
{
    nvme_busy *b = nvme_busy_find(s, k);
    if (b) {
        b->removed = true;
        return;
    }
    hy_err ignored = {0};
    hy_nvme_remove(s->nvme, k, &ignored);
}

void st_copy_drop(hy_store *s, obj *o, hy_tier_id t)
{
    assert(resident(o, t) && !o->dead);
    hy_evictor_remove(s->ev[t], o->oid); /* no-op when moving */
    switch (t) {
    case HY_TIER_HBM:
        st_hbm_release(s, o->doff);
        o->in_hbm = false, s->st.hbm_entries--;
        break;
    case HY_TIER_HOST:
        hy_arena_release(s->arena, o->off);
        o->in_host = false, s->st.host_entries--;
        break;
    default:
        nvme_remove_key(s, &o->meta.key);
        o->in_nvme = false, s->st.nvme_entries--;
    }
}

/* Frees what an unpinned, unlinked entry still holds. */
static void obj_destroy(hy_store *s, obj *o)
{
    assert(o->pins == 0);
    if (o->in_host) hy_arena_release(s->arena, o->off);
    if (o->in_hbm) st_hbm_release(s, o->doff);
    free(o);
}

void st_unpin(hy_store *s, obj *o)
{
    assert(o->pins > 0);
    if (--o->pins == 0 && o->dead) obj_destroy(s, o);
}

void st_obj_remove(hy_store *s, obj *o, const char *reason)
{
    const uint64_t id = o->oid;
    if (reason && s->cfg.on_event)
        s->cfg.on_event(s->cfg.event_ctx, HY_STORE_REMOVED, &o->meta, reason);
    idx_unlink(s, o);
    quota_add(s, &o->meta, -1);
    if (o->in_nvme) st_copy_drop(s, o, HY_TIER_NVME);
    /* host and hbm blocks stay until the last pin: only their registration goes */
    if (o->in_host) hy_evictor_remove(s->ev[HY_TIER_HOST], id), s->st.host_entries--;
    if (o->in_hbm) hy_evictor_remove(s->ev[HY_TIER_HBM], id), s->st.hbm_entries--;
    o->dead = true;
    if (o->pins == 0) obj_destroy(s, o);
}

/* --- host and NVMe eviction ------------------------------------------------------- */

obj *st_find_by_id(hy_store *s, uint64_t id)
{
    for (obj *o = s->obuckets[id & (s->nbuckets - 1)]; o; o = o->id_next)
        if (o->oid == id) return o;
    return NULL;
}

uint64_t st_freq_id(hy_store *s, uint64_t oid)
{
    const obj *o = oid ? st_find_by_id(s, oid) : NULL;
    return o ? hy_key_id(&o->meta.key) : 0;
}

bool st_pinned_cb(void *ctx, uint64_t id)
{
    obj *o = st_find_by_id(ctx, id);
    return o && (o->pins > 0 || st_held(o, hy_wall_ns()));
}

/* The entry a new NVMe copy of `bytes` would push out, as the admitter
 * names it (hy_key_id), or 0 while the tier has room for it. */
static uint64_t nvme_would_displace(hy_store *s, uint64_t bytes)
{
    uint64_t vid = 0;
    if (!hy_nvme_has_room(s->nvme, bytes) &&
        hy_evictor_victim(s->ev[HY_TIER_NVME], &vid, st_pinned_cb, s) != HY_OK)
        vid = 0;
    return st_freq_id(s, vid);
}

/* Writes an entry to NVMe, evicting unpinned NVMe copies while it is full
 * (an entry with a copy in another tier keeps it). o is the entry whose bytes
 * these are (pinned by the caller, so `data` stays), or NULL for a commit's
 * reservation, not yet in the index. Called with the lock held; drops it
 * around each write and while another put of the key is in flight. *wrote
 * says whether a record was written: not when o died or got its NVMe copy
 * from another thread before the write began (then HY_OK). A put that waited
 * must not write a dead entry: the put it waited for may be of the entry that
 * replaced it, whose record ours would overwrite, and the caller's removal of
 * a dead entry's record would then take the newer entry's. */
static int nvme_put_evicting(hy_store *s, obj *o, const hy_meta *m, const void *data, bool *wrote,
                             hy_err *err)
{
    const hy_meta snap = *m; /* taken under the lock: hits and times change under it */
    *wrote = false;
    for (;;) {
        while (nvme_busy_find(s, &snap.key)) pthread_cond_wait(&s->nvme_cv, &s->mu);
        if (o && (o->dead || o->in_nvme)) return HY_OK;
        nvme_busy busy = {.key = snap.key, .next = s->nvme_busy};
        s->nvme_busy = &busy;
        pthread_mutex_unlock(&s->mu);
        if (s->nvme_put_hook) s->nvme_put_hook(s->nvme_put_hook_ctx, &snap.key);
        int rc = hy_nvme_put(s->nvme, &snap, data, err);
        pthread_mutex_lock(&s->mu);
        nvme_busy **p = &s->nvme_busy;
        while (*p != &busy) p = &(*p)->next;
        *p = busy.next;
        pthread_cond_broadcast(&s->nvme_cv);
        if (rc && busy.removed) { /* the record left on disk, if any, was a removed entry's */
            hy_err ignored = {0};
            hy_nvme_remove(s->nvme, &snap.key, &ignored);
        }
        *wrote = rc == HY_OK;
        if (rc != HY_ENOMEM) return rc;
        uint64_t vid;
        if (hy_evictor_victim(s->ev[HY_TIER_NVME], &vid, st_pinned_cb, s) != HY_OK) return rc;
        obj *v = st_find_by_id(s, vid);
        s->st.evictions++;
        s->st.nvme_evictions++;
        if (!v)
            hy_evictor_remove(s->ev[HY_TIER_NVME], vid);
        else if (v->in_host || v->in_hbm)
            st_copy_drop(s, v, HY_TIER_NVME);
        else
            st_obj_remove(s, v, "evicted");
    }
}

/* Evicts one unpinned host copy: demoted to NVMe when there is one and it
 * admits it; the entry is dropped when no copy is left (none in NVMe or
 * hbm). Called with the lock held (dropped during the demotion's write, with
 * the victim pinned). With no victim left while other threads' demotions are
 * in flight, waits for one of them to land and returns HY_OK: their blocks
 * are about to be freed, and may be what a contiguous allocation needs. */
static int evict_one_host(hy_store *s, hy_err *err)
{
    uint64_t vid;
    if (hy_evictor_victim(s->ev[HY_TIER_HOST], &vid, st_pinned_cb, s) != HY_OK) {
        if (s->host_moving > 0) {
            pthread_cond_wait(&s->nvme_cv, &s->mu); /* broadcast as each NVMe put lands */
            return HY_OK;
        }
        return hy_err_set(err, HY_ENOMEM,
                          "host tier full (%zu bytes) and every resident entry is leased",
                          s->cfg.host_bytes);
    }
    obj *v = st_find_by_id(s, vid);
    if (!v) {
        hy_evictor_remove(s->ev[HY_TIER_HOST], vid);
        return HY_OK;
    }
    s->st.evictions++;
    hy_evictor_remove(s->ev[HY_TIER_HOST], vid); /* not a candidate while it moves */
    if (s->nvme && !v->in_nvme &&
        hy_admitter_admit(s->ad[HY_TIER_NVME], hy_key_id(&v->meta.key), v->meta.tokens,
                          nvme_would_displace(s, v->meta.bytes))) {
        hy_err e2 = {0};
        bool wrote;
        v->pins++;
        s->host_moving++;
        int rc = nvme_put_evicting(s, v, &v->meta, hy_arena_ptr(s->arena, v->off), &wrote, &e2);
        s->host_moving--;
        pthread_cond_broadcast(&s->nvme_cv); /* for waiters above (a skipped put signals none) */
        v->pins--;
        if (v->dead) { /* invalidated or replaced meanwhile: the record, if any, is v's */
            if (wrote) nvme_remove_key(s, &v->meta.key);
            if (v->pins == 0) obj_destroy(s, v);
            return HY_OK;
        }
        if (wrote) {
            st_copy_add(s, v, HY_TIER_NVME, 0);
            s->st.demotions++;
        } else if (rc) {
            hy_log(HY_LOG_WARN, "demotion to NVMe failed, %s: %s",
                   v->in_hbm ? "the entry keeps its hbm copy" : "dropping the entry", e2.msg);
        }
    }
    if (v->pins > 0) { /* leased meanwhile: its host bytes stay */
        hy_evictor_insert(s->ev[HY_TIER_HOST], vid, v->meta.bytes, v->meta.flops, v->meta.tokens,
                          ++s->tick);
        return HY_OK;
    }
    if (!v->in_nvme && !v->in_hbm)
        st_obj_remove(s, v, "evicted");
    else
        st_copy_drop(s, v, HY_TIER_HOST);
    return HY_OK;
}

int st_host_alloc(hy_store *s, uint64_t bytes, size_t *off, hy_err *err)
{
    if (st_round_page(bytes) > s->cfg.host_bytes)
        return hy_err_set(err, HY_ERANGE,
                          "an entry of %llu bytes exceeds the host tier (%zu bytes)",
                          (unsigned long long)bytes, s->cfg.host_bytes);
    for (;;) {
        if (hy_arena_alloc(s->arena, st_round_page(bytes), off) == HY_OK) return HY_OK;
        int rc = evict_one_host(s, err);
        if (rc) return rc;
    }
}

/* --- background moves ----------------------------------------------------------------- */

static bool above(const hy_store *s, double frac)
{
    hy_arena_stats as;
    hy_arena_stats_get(s->arena, &as);
    return (double)as.used > frac * (double)s->cfg.host_bytes;
}

/* Queues a request unless one is already pending or the queue is full.
 * Called with the lock held. */
static void move_request(hy_store *s, int kind)
{
    if (!s->mover_running) return;
    for (size_t i = 0; i < s->qlen; i++)
        if (s->queue[(s->qhead + i) % s->cfg.move_queue] == kind) return;
    if (s->qlen == s->cfg.move_queue) {
        s->st.moves_dropped++;
        return;
    }
    s->queue[(s->qhead + s->qlen++) % s->cfg.move_queue] = kind;
    s->st.moves_queued++;
    pthread_cond_signal(&s->cv);
}

static void *mover_main(void *arg)
{
    hy_store *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->stop && s->qlen == 0) pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) break;
        const int kind = s->queue[s->qhead];
        s->qhead = (s->qhead + 1) % s->cfg.move_queue;
        s->qlen--;
        if (kind == MOVE_MAKE_ROOM) {
            hy_err ignored = {0};
            while (!s->stop && above(s, s->cfg.low_watermark) &&
                   evict_one_host(s, &ignored) == HY_OK)
                ;
        }
        s->st.moves_done++;
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* --- open / close ------------------------------------------------------------------ */

static int load_nvme_entry(void *ctx, const hy_meta *m)
{
    hy_store *s = ctx;
    obj *o = st_obj_new(s);
    if (!o) return HY_ENOMEM;
    o->meta = *m;
    o->meta.pinned_until_ns = 0; /* pins come from their own file (st_pins_load) */
    idx_insert(s, o);
    quota_add(s, &o->meta, +1);
    st_copy_add(s, o, HY_TIER_NVME, 0);
    return 0;
}

void hy_store_config_default(hy_store_config *cfg, size_t host_bytes, const char *nvme_dir)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->host_bytes = host_bytes;
    cfg->host_policy = (hy_policy_config){.evict = HY_EVICT_GDSF, .admit = HY_ADMIT_TINYLFU};
    cfg->hbm_policy = cfg->host_policy;
    cfg->nvme_dir = nvme_dir;
    cfg->nvme_policy = (hy_policy_config){.evict = HY_EVICT_GDSF, .admit = HY_ADMIT_ALWAYS};
    cfg->high_watermark = 0.9;
    cfg->low_watermark = 0.75;
    cfg->move_queue = 64;
}

/* hy_store_open with the device tier decided (ops NULL: none; `why` says
 * what it is or why there is none). Owns ctx from the call on. */
static int store_open(const hy_store_config *cfg, const hy_devtier_ops *ops, void *ctx,
                      const char *why, hy_store **out, hy_err *err)
{
    *out = NULL;
    hy_store *s = calloc(1, sizeof *s);
    if (!s) {
        if (ops) ops->close(ctx);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    s->dev = ops, s->dev_ctx = ctx; /* closed by hy_store_close from here on */
    snprintf(s->hbm_why, sizeof s->hbm_why, "%s", why);
    s->cfg = *cfg;
    s->cfg.nvme_dir = NULL; /* not kept: the caller's string */
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->nvme_cv, NULL);
    s->nbuckets = 1024;
    if (getrandom(&s->seed, sizeof s->seed, 0) != (ssize_t)sizeof s->seed)
        s->seed = hy_now_ns() ^ (uint64_t)(uintptr_t)s; /* no entropy yet: still not a constant */
    s->buckets = calloc(s->nbuckets, sizeof *s->buckets);
    s->obuckets = calloc(s->nbuckets, sizeof *s->obuckets);
    int rc = s->buckets && s->obuckets ? HY_OK : hy_err_set(err, HY_ENOMEM, "out of memory");
    if (!rc && cfg->host_bytes == 0) rc = hy_err_set(err, HY_EINVAL, "store: host_bytes is 0");
    s->cfg.host_policy.capacity = cfg->host_bytes;
    if (!rc) rc = hy_arena_new(cfg->host_bytes, &s->arena, err);
    if (!rc) rc = hy_evictor_new(&s->cfg.host_policy, &s->ev[HY_TIER_HOST], err);
    if (!rc) rc = hy_admitter_new(&s->cfg.host_policy, &s->ad[HY_TIER_HOST], err);
    if (!rc && s->dev) rc = st_hbm_attach(s, err);
    if (!rc && cfg->nvme_dir) {
        const uint32_t ne = cfg->nvme.max_extents ? cfg->nvme.max_extents : 64;
        hy_policy_config *np = &s->cfg.nvme_policy;
        np->capacity =
            (uint64_t)ne * (cfg->nvme.extent_bytes ? cfg->nvme.extent_bytes : 256u << 20);
        rc = hy_evictor_new(np, &s->ev[HY_TIER_NVME], err);
        if (!rc) rc = hy_admitter_new(np, &s->ad[HY_TIER_NVME], err);
        if (!rc) rc = hy_nvme_open(cfg->nvme_dir, &cfg->nvme, &s->nvme, err);
        if (!rc) rc = hy_nvme_foreach(s->nvme, load_nvme_entry, s, err);
        if (!rc) rc = st_pins_open(s, cfg->nvme_dir, err);
    }
    s->st.host_capacity = cfg->host_bytes;
    if (!s->cfg.high_watermark) s->cfg.high_watermark = 0.9;
    if (!s->cfg.low_watermark) s->cfg.low_watermark = 0.75;
    if (!s->cfg.move_queue) s->cfg.move_queue = 64;
    if (!rc && !(s->cfg.low_watermark > 0 && s->cfg.low_watermark < s->cfg.high_watermark &&
                 s->cfg.high_watermark <= 1))
        rc = hy_err_set(err, HY_EINVAL,
                        "store: watermarks must satisfy 0 < low (%g) < high (%g) <= 1",
                        s->cfg.low_watermark, s->cfg.high_watermark);
    if (!rc && s->nvme) {
        s->queue = calloc(s->cfg.move_queue, sizeof *s->queue);
        if (!s->queue || pthread_create(&s->mover, NULL, mover_main, s) != 0)
            rc = hy_err_set(err, HY_ENOMEM, "store: cannot start the mover thread");
        else
            s->mover_running = true;
    }
    if (rc) {
        hy_store_close(s);
        return rc;
    }
    *out = s;
    return HY_OK;
}

int hy_store_open(const hy_store_config *cfg, hy_store **out, hy_err *err)
{
    *out = NULL;
    if (cfg->host_bytes == 0) return hy_err_set(err, HY_EINVAL, "store: host_bytes is 0");
    char why[128] = "not configured (hbm_bytes is 0)";
    const hy_devtier_ops *ops = NULL;
    void *ctx = NULL;
    if (cfg->hbm_bytes) {
        int rc = st_hbm_open_device(cfg, &ops, &ctx, why, sizeof why, err);
        if (rc) return rc;
    }
    return store_open(cfg, ops, ctx, why, out, err);
}

int hy_store_open_with_devtier(const hy_store_config *cfg, const hy_devtier_ops *ops, void *ctx,
                               hy_store **out, hy_err *err)
{
    assert(ops && ops->close);
    return store_open(cfg, ops, ctx, ops->name, out, err);
}

void hy_store_close(hy_store *s)
{
    if (!s) return;
    if (s->mover_running) {
        pthread_mutex_lock(&s->mu);
        s->stop = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->mover, NULL);
    }
    free(s->queue);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->nvme_cv);
    for (size_t i = 0; s->buckets && i < s->nbuckets; i++)
        for (obj *o = s->buckets[i], *nx; o; o = nx) {
            nx = o->next;
            assert(o->pins == 0 && "hy_store_close with leases outstanding");
            free(o); /* the arena and the device tier go whole */
        }
    free(s->buckets);
    free(s->obuckets);
    for (quota *q = s->quotas, *nx; q; q = nx) nx = q->next, free(q);
    free(s->pin_ids);
    free(s->pins_path);
    for (int t = 0; t < HY_TIER_COUNT; t++) hy_evictor_free(s->ev[t]), hy_admitter_free(s->ad[t]);
    hy_nvme_close(s->nvme);
    st_hbm_detach(s); /* unpins the arena: before it is unmapped */
    hy_arena_free_all(s->arena);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* --- put ---------------------------------------------------------------------------- */

int hy_store_reserve(hy_store *s, const hy_meta *meta, hy_put **out, void **buf, hy_err *err)
{
    *out = NULL;
    int rc = hy_meta_validate(meta, err);
    if (rc) return rc;
    hy_put *p = calloc(1, sizeof *p);
    if (!p) return hy_err_set(err, HY_ENOMEM, "out of memory");
    p->meta = *meta;
    pthread_mutex_lock(&s->mu);
    uint64_t limit;
    rc = quota_check(s, meta->tenant, meta->bytes, &limit, err);
    if (!rc) rc = st_host_alloc(s, meta->bytes, &p->off, err); /* may drop the lock */
    /* Charged now, under the same hold of the lock as a check (the
     * allocation may drop it, so the quota is checked again after it): puts
     * that run at once cannot all pass a check made before any counted. */
    if (!rc && limit) {
        quota *q = NULL;
        rc = quota_check(s, meta->tenant, meta->bytes, &limit, err);
        if (!rc && !(q = st_quota_of(s, meta->tenant, true)))
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
        if (rc)
            hy_arena_release(s->arena, p->off);
        else
            q->reserved += meta->bytes, p->charged = meta->bytes;
    }
    void *b = rc ? NULL : hy_arena_ptr(s->arena, p->off);
    pthread_mutex_unlock(&s->mu);
    if (rc) {
        free(p);
        return rc;
    }
    *out = p;
    *buf = b;
    return HY_OK;
}

void hy_store_abort(hy_store *s, hy_put *p)
{
    if (!p) return;
    pthread_mutex_lock(&s->mu);
    quota_unreserve(s, p);
    hy_arena_release(s->arena, p->off);
    pthread_mutex_unlock(&s->mu);
    free(p);
}

/* Placement, in order: hbm (its admitter, a copy up from the reservation),
 * then whether the reservation stays as the host copy, then NVMe. */
int hy_store_commit(hy_store *s, hy_put *p, hy_tier_id *placed, hy_err *err)
{
    hy_meta *m = &p->meta;
    const uint64_t id = hy_key_id(&m->key);
    void *data = hy_arena_ptr(s->arena, p->off); /* the arena never moves */
    m->created_ns = m->last_access_ns = hy_wall_ns();
    m->hits = 0;
    if (!m->expires_ns && s->cfg.default_ttl_ns)
        m->expires_ns = m->created_ns + s->cfg.default_ttl_ns;
    obj *o = st_obj_new(s); /* before any write, so that a failed commit changes nothing */
    if (!o) {
        hy_store_abort(s, p);
        if (placed) *placed = HY_TIER_NONE;
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }

    pthread_mutex_lock(&s->mu);
    quota_unreserve(s, p); /* counted as stored below, if it is stored */
    s->st.puts++;
    size_t doff = 0;
    const bool to_hbm = st_hbm_place(s, m, data, &doff); /* the block is ours alone */
    uint64_t vid = 0;
    hy_arena_stats as;
    hy_arena_stats_get(s->arena, &as);
    if (as.largest_free < st_round_page(m->bytes) &&
        hy_evictor_victim(s->ev[HY_TIER_HOST], &vid, st_pinned_cb, s) != HY_OK)
        vid = 0;
    const bool to_host = hy_admitter_admit(s->ad[HY_TIER_HOST], id, m->tokens, st_freq_id(s, vid));
    const bool to_nvme =
        s->nvme && (s->cfg.write_through || !to_host) &&
        hy_admitter_admit(s->ad[HY_TIER_NVME], id, m->tokens, nvme_would_displace(s, m->bytes));
    bool wrote;
    int rc = to_nvme ? nvme_put_evicting(s, NULL, m, data, &wrote, err) : HY_OK;
    obj *old = rc ? NULL : idx_find(s, &m->key); /* a failed replace keeps the old entry */
    const uint64_t pin = old ? old->meta.pinned_until_ns : 0; /* a replace keeps the pin */
    if (old) {
        if (old->in_nvme && to_nvme && !rc) { /* the record on disk is the new one already */
            hy_evictor_remove(s->ev[HY_TIER_NVME], old->oid);
            old->in_nvme = false;
            s->st.nvme_entries--;
        }
        st_obj_remove(s, old, NULL); /* replaced: the key stays, as the event below says */
    }
    if (rc || !(to_hbm || to_host || to_nvme)) {
        free(o);
        o = NULL;
    }
    hy_tier_id where = HY_TIER_NONE;
    if (o) {
        o->meta = *m;
        o->meta.pinned_until_ns = pin;
        if (pin) st_pin_track(s, o);
        if (to_nvme) st_copy_add(s, o, HY_TIER_NVME, 0), where = HY_TIER_NVME;
        if (to_host) st_copy_add(s, o, HY_TIER_HOST, p->off), where = HY_TIER_HOST;
        if (to_hbm) st_copy_add(s, o, HY_TIER_HBM, doff), where = HY_TIER_HBM;
        if (to_hbm) s->st.hbm_placed++;
        idx_insert(s, o);
        quota_add(s, &o->meta, +1);
        if (s->cfg.on_event) s->cfg.on_event(s->cfg.event_ctx, HY_STORE_STORED, &o->meta, "stored");
    } else if (!rc) {
        s->st.puts_dropped++;
    }
    if (to_hbm && !o) st_hbm_release(s, doff);
    if (!o || !o->in_host) hy_arena_release(s->arena, p->off);
    if (above(s, s->cfg.high_watermark)) move_request(s, MOVE_MAKE_ROOM);
    pthread_mutex_unlock(&s->mu);
    free(p);
    if (placed) *placed = where;
    return rc;
}

/* --- get ---------------------------------------------------------------------------- */

static bool expired(const obj *o, uint64_t now)
{
    return o->meta.expires_ns && now >= o->meta.expires_ns && !st_held(o, now);
}

obj *st_lookup(hy_store *s, const hy_key *key, uint64_t now)
{
    const uint64_t id = hy_key_id(key);
    for (int t = 0; t < HY_TIER_COUNT; t++) /* NVMe's too: its admitter weighs what it keeps */
        if (s->ad[t]) hy_admitter_record(s->ad[t], id);
    obj *o = idx_find(s, key);
    if (o && expired(o, now)) {
        st_obj_remove(s, o, "expired");
        s->st.expired++;
        o = NULL;
    }
    if (!o) s->st.misses++;
    return o;
}

void st_served(hy_store *s, obj *o, hy_tier_id from, uint64_t now)
{
    const uint64_t id = o->oid;
    if (from == HY_TIER_HBM)
        s->st.hits_hbm++;
    else if (from == HY_TIER_HOST)
        s->st.hits_host++;
    else
        s->st.hits_nvme++;
    o->meta.hits++;
    o->meta.last_access_ns = now;
    for (int t = 0; t < HY_TIER_COUNT; t++)
        if (resident(o, (hy_tier_id)t)) hy_evictor_access(s->ev[t], id, ++s->tick);
}

/* A reader told of the verified prefix of an entry read from NVMe, with
 * the buffer it lands in. */
typedef struct landing {
    hy_store_landed_fn fn;
    void *ctx;
    const void *data;
    bool told; /* fn saw bytes: a reader may be using them */
} landing;

static int landing_tell(void *ctx, uint64_t verified, uint64_t landed, hy_err *err)
{
    landing *g = ctx;
    g->told = true;
    return g->fn(g->ctx, g->data, verified, landed, err);
}

/* The entry a new host copy of `bytes` would push out, as the admitter
 * names it (hy_key_id), or 0 while there is room: past the low watermark the
 * demoter is moving the eviction candidate out, so a newcomer competes with
 * it, as it does when no free block is large enough. */
static uint64_t host_would_displace(hy_store *s, uint64_t bytes)
{
    hy_arena_stats as;
    hy_arena_stats_get(s->arena, &as);
    const size_t need = st_round_page(bytes);
    uint64_t vid = 0;
    const bool full = as.largest_free < need ||
                      (double)(as.used + need) > s->cfg.low_watermark * (double)s->cfg.host_bytes;
    if (full && hy_evictor_victim(s->ev[HY_TIER_HOST], &vid, st_pinned_cb, s) != HY_OK) vid = 0;
    return st_freq_id(s, vid);
}

int st_fetch_host(hy_store *s, obj *o, size_t *off, bool *tmp, hy_store_landed_fn fn, void *ctx,
                  bool *kept, hy_err *err)
{
    *kept = false;
    assert(o->pins > 0 && !o->in_host && (o->in_hbm || o->in_nvme));
    const uint64_t id = hy_key_id(&o->meta.key);
    /* a copy brought up from NVMe (or HBM) is a newcomer to the host tier:
     * the admitter weighs it against what it would push out */
    const bool keep = hy_admitter_admit(s->ad[HY_TIER_HOST], id, o->meta.tokens,
                                        host_would_displace(s, o->meta.bytes));
    size_t blk;
    *tmp = false;
    int rc = st_host_alloc(s, o->meta.bytes, &blk, err); /* may drop the lock */
    if (rc) return rc;
    const bool from_hbm = o->in_hbm; /* pinned: the copy stays while we read it */
    if (o->dead || o->in_host) {
        /* nothing to copy: gone, or another thread brought it down meanwhile */
    } else if (from_hbm) {
        rc = st_hbm_copy_down(s, o->doff, hy_arena_ptr(s->arena, blk), o->meta.bytes, err);
    } else {
        void *dst = hy_arena_ptr(s->arena, blk);
        const hy_key k = o->meta.key;
        const size_t cap = st_round_page(o->meta.bytes);
        pthread_mutex_unlock(&s->mu);
        landing g = {fn, ctx, dst, false};
        /* verifies every chunk, telling fn of each verified prefix */
        rc = hy_nvme_get_progress(s->nvme, &k, dst, cap, NULL, fn ? landing_tell : NULL, &g, err);
        pthread_mutex_lock(&s->mu);
        *kept = g.told; /* a reader of the bytes told so far releases them */
    }
    if (rc || o->dead || o->in_host) {
        if (*kept) /* a reader uses this block: it stays with the lease, whatever came */
            *off = blk, *tmp = true;
        else
            hy_arena_release(s->arena, blk);
        if (!from_hbm && rc == HY_EFORMAT) {
            s->st.checksum_failures++;
            if (!o->dead) { /* the NVMe tier dropped it: so do we */
                hy_evictor_remove(s->ev[HY_TIER_NVME], o->oid);
                o->in_nvme = false;
                s->st.nvme_entries--;
                st_obj_remove(s, o, "corrupt");
            }
        }
        if (!rc && o->dead) rc = HY_ENOTFOUND; /* invalidated meanwhile */
        if (!rc && !*kept) *off = o->off;      /* another thread's host copy */
        return rc;
    }
    if (from_hbm) s->st.hbm_copies_down++;
    if (keep) {
        st_copy_add(s, o, HY_TIER_HOST, blk);
        if (!from_hbm) s->st.promotions++;
    } else {
        *tmp = true;
    }
    *off = blk;
    return HY_OK;
}

int st_acquire(hy_store *s, const hy_key *key, bool device, hy_store_landed_fn fn, void *ctx,
               hy_lease **out, hy_err *err)
{
    *out = NULL;
    hy_lease *l = calloc(1, sizeof *l);
    if (!l) return hy_err_set(err, HY_ENOMEM, "out of memory");
    const uint64_t now = hy_wall_ns();
    pthread_mutex_lock(&s->mu);
    obj *o = st_lookup(s, key, now);
    if (!o) {
        pthread_mutex_unlock(&s->mu);
        free(l);
        return HY_ENOTFOUND;
    }
    o->pins++; /* the lease's pin, taken now so the copies below are protected */
    const hy_tier_id near = device ? HY_TIER_HBM : HY_TIER_HOST;
    const hy_tier_id other = device ? HY_TIER_HOST : HY_TIER_HBM;
    const hy_tier_id from = resident(o, near) ? near : resident(o, other) ? other : HY_TIER_NVME;
    int rc = HY_OK;
    if (device && !o->in_hbm) rc = st_hbm_promote(s, o, l, err);
    l->tmp_off = o->off;
    bool kept = false;
    if (!device && !o->in_host) rc = st_fetch_host(s, o, &l->tmp_off, &l->tmp, fn, ctx, &kept, err);
    if (rc && kept) { /* fn's reader may still read the bytes it was told of: a lease holds them */
        l->o = o;
        l->from = HY_TIER_NVME;
        l->data = hy_arena_ptr(s->arena, l->tmp_off);
        pthread_mutex_unlock(&s->mu);
        *out = l;
        return rc;
    }
    if (rc) {
        if (rc == HY_ENOTFOUND) s->st.misses++;
        st_unpin(s, o);
        pthread_mutex_unlock(&s->mu);
        free(l);
        return rc;
    }
    st_served(s, o, from, now);
    l->o = o;
    l->from = from;
    if (device)
        l->dev = s->dev->device_ptr(s->dev_ctx, l->dtmp ? l->dtmp_off : o->doff);
    else
        l->data = hy_arena_ptr(s->arena, l->tmp_off);
    pthread_mutex_unlock(&s->mu);
    *out = l;
    return HY_OK;
}

int hy_store_acquire(hy_store *s, const hy_key *key, hy_lease **out, hy_err *err)
{
    return st_acquire(s, key, false, NULL, NULL, out, err);
}

int hy_store_acquire_landing(hy_store *s, const hy_key *key, hy_store_landed_fn fn, void *ctx,
                             hy_lease **out, hy_err *err)
{
    return st_acquire(s, key, false, fn, ctx, out, err);
}

const void *hy_lease_data(const hy_lease *l)
{
    return l->data;
}

void *hy_lease_device_ptr(const hy_lease *l)
{
    return l->dev;
}

const hy_meta *hy_lease_meta(const hy_lease *l)
{
    return &l->o->meta;
}

hy_tier_id hy_lease_tier(const hy_lease *l)
{
    return l->from;
}

void hy_store_release(hy_store *s, hy_lease *l)
{
    if (!l) return;
    pthread_mutex_lock(&s->mu);
    if (l->tmp) hy_arena_release(s->arena, l->tmp_off);
    if (l->dtmp) st_hbm_release(s, l->dtmp_off);
    st_unpin(s, l->o);
    pthread_mutex_unlock(&s->mu);
    free(l);
}

int hy_store_tiers_of(hy_store *s, const hy_key *key, unsigned *mask)
{
    return hy_store_peek(s, key, NULL, mask);
}

int hy_store_peek(hy_store *s, const hy_key *key, hy_meta *meta, unsigned *mask)
{
    pthread_mutex_lock(&s->mu);
    const obj *o = idx_find(s, key);
    if (o && expired(o, hy_wall_ns())) o = NULL; /* removed by the next access */
    unsigned m = 0;
    for (int t = 0; o && t < HY_TIER_COUNT; t++)
        if (resident(o, (hy_tier_id)t)) m |= 1u << t;
    if (o && meta) *meta = o->meta;
    pthread_mutex_unlock(&s->mu);
    if (mask) *mask = m;
    return o ? HY_OK : HY_ENOTFOUND;
}

int hy_store_flush(hy_store *s, size_t *written, hy_err *err)
{
    size_t n = 0;
    int rc = HY_OK;
    if (written) *written = 0;
    if (!s->nvme) return HY_OK;
    pthread_mutex_lock(&s->mu);
    /* The lock is dropped during each write, and the index may change then
     * (removed entries, a grown table): after a write the walk resumes at the
     * head of the same bucket, or from the start when the table was resized.
     * Written entries are skipped (in_nvme), so the walk ends. */
    size_t i = 0;
    while (i < s->nbuckets && !rc) {
        obj *o = s->buckets[i];
        while (o && (o->in_nvme || !o->in_host || o->dead)) o = o->next;
        if (!o) {
            i++;
            continue;
        }
        const size_t nb = s->nbuckets;
        o->pins++;
        hy_err e2 = {0};
        bool wrote;
        int wrc = nvme_put_evicting(s, o, &o->meta, hy_arena_ptr(s->arena, o->off), &wrote, &e2);
        if (o->dead) {
            if (wrote) nvme_remove_key(s, &o->meta.key);
        } else if (wrote) {
            st_copy_add(s, o, HY_TIER_NVME, 0);
            n++;
        } else if (wrc) { /* else a demotion wrote it while we waited */
            rc = hy_err_set(err, wrc, "flush to NVMe: %s", e2.msg);
        }
        st_unpin(s, o);
        if (s->nbuckets != nb) i = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (written) *written = n;
    return rc;
}

int hy_store_set_quota(hy_store *s, const char *tenant, uint64_t bytes, hy_err *err)
{
    if (!tenant || !tenant[0] || strlen(tenant) >= HY_TENANT_MAX)
        return hy_err_set(err, HY_EINVAL, "set_quota: tenant name empty or over %d bytes",
                          HY_TENANT_MAX - 1);
    pthread_mutex_lock(&s->mu);
    quota *q = st_quota_of(s, tenant, true);
    if (q) q->has_limit = true, q->limit = bytes;
    pthread_mutex_unlock(&s->mu);
    return q ? HY_OK : hy_err_set(err, HY_ENOMEM, "out of memory");
}

uint64_t hy_store_tenant_bytes(hy_store *s, const char *tenant)
{
    pthread_mutex_lock(&s->mu);
    const quota *q = st_quota_of(s, tenant, false);
    const uint64_t b = q ? q->bytes : 0;
    pthread_mutex_unlock(&s->mu);
    return b;
}

int hy_store_quota_room(hy_store *s, const char *tenant, uint64_t bytes, hy_err *err)
{
    uint64_t limit;
    pthread_mutex_lock(&s->mu);
    const int rc = quota_check(s, tenant, bytes, &limit, err);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int hy_store_get_policy(hy_store *s, hy_tier_id tier, hy_policy_config *p, hy_err *err)
{
    if (tier != HY_TIER_HOST && !(tier == HY_TIER_NVME && s->nvme) &&
        !(tier == HY_TIER_HBM && s->dev))
        return hy_err_set(err, HY_EINVAL, "get_policy: this store has no %s tier",
                          tier == HY_TIER_HBM    ? "hbm"
                          : tier == HY_TIER_NVME ? "NVMe"
                                                 : "host");
    pthread_mutex_lock(&s->mu);
    *p = tier == HY_TIER_HOST  ? s->cfg.host_policy
         : tier == HY_TIER_HBM ? s->cfg.hbm_policy
                               : s->cfg.nvme_policy;
    pthread_mutex_unlock(&s->mu);
    return HY_OK;
}

/* --- invalidation, listing, policies, stats ------------------------------------------ */

bool st_matches(const hy_meta *m, const hy_store_filter *f)
{
    if (!f) return true;
    if (f->key && memcmp(f->key->b, m->key.b, HY_KEY_BYTES) != 0) return false;
    if (f->tenant && f->tenant[0] && strcmp(f->tenant, m->tenant) != 0) return false;
    if (f->model && memcmp(f->model, m->model, 32) != 0) return false;
    if (f->tag && f->tag[0]) {
        bool any = false;
        for (uint32_t i = 0; i < m->ntags && !any; i++) any = strcmp(m->tags[i], f->tag) == 0;
        if (!any) return false;
    }
    return true;
}

int hy_store_invalidate(hy_store *s, const hy_store_filter *f, size_t *removed, hy_err *err)
{
    (void)err;
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    if (f && f->key) {
        obj *o = idx_find(s, f->key);
        if (o && st_matches(&o->meta, f)) st_obj_remove(s, o, "invalidated"), n++;
    } else {
        for (size_t i = 0; i < s->nbuckets; i++)
            for (obj *o = s->buckets[i], *nx; o; o = nx) {
                nx = o->next;
                if (st_matches(&o->meta, f)) st_obj_remove(s, o, "invalidated"), n++;
            }
    }
    s->st.invalidated += n;
    pthread_mutex_unlock(&s->mu);
    if (removed) *removed = n;
    return HY_OK;
}

static int cmp_meta_key(const void *a, const void *b)
{
    return memcmp(((const hy_meta *)a)->key.b, ((const hy_meta *)b)->key.b, HY_KEY_BYTES);
}

int hy_store_list(hy_store *s, const hy_store_filter *f, size_t offset, hy_meta *out, size_t cap,
                  size_t *n, size_t *total, hy_err *err)
{
    pthread_mutex_lock(&s->mu);
    if (cap == 0) { /* a count: nothing copied */
        size_t k = 0;
        for (size_t i = 0; i < s->nbuckets; i++)
            for (obj *o = s->buckets[i]; o; o = o->next) k += st_matches(&o->meta, f);
        pthread_mutex_unlock(&s->mu);
        *n = 0;
        if (total) *total = k;
        return HY_OK;
    }
    hy_meta *all = malloc((s->count + 1) * sizeof *all);
    size_t k = 0;
    for (size_t i = 0; all && i < s->nbuckets; i++)
        for (obj *o = s->buckets[i]; o; o = o->next)
            if (st_matches(&o->meta, f)) all[k++] = o->meta;
    pthread_mutex_unlock(&s->mu);
    if (!all) return hy_err_set(err, HY_ENOMEM, "out of memory listing %zu entries", s->count);
    qsort(all, k, sizeof *all, cmp_meta_key);
    size_t m = 0;
    for (size_t i = offset; i < k && m < cap; i++) out[m++] = all[i];
    free(all);
    *n = m;
    if (total) *total = k;
    return HY_OK;
}

/* Appends to out (up to cap, *n so far) the entries of the subtree t
 * matching f whose key is above after (NULL: all), in key order. Visits the
 * path to after and then the entries it passes on: O(depth + what it
 * passes), the entries f rejects included. */
static void kt_list(const obj *t, const hy_key *after, const hy_store_filter *f, hy_meta *out,
                    size_t cap, size_t *n)
{
    while (t && *n < cap) {
        if (after && memcmp(t->meta.key.b, after->b, HY_KEY_BYTES) <= 0) {
            t = t->kr;
            continue;
        }
        kt_list(t->kl, after, f, out, cap, n);
        if (*n < cap && st_matches(&t->meta, f)) out[(*n)++] = t->meta;
        t = t->kr;
        after = NULL; /* everything right of t is above it */
    }
}

int hy_store_list_after(hy_store *s, const hy_store_filter *f, const hy_key *after, hy_meta *out,
                        size_t cap, size_t *n)
{
    *n = 0;
    pthread_mutex_lock(&s->mu);
    kt_list(s->kroot, after, f, out, cap, n);
    pthread_mutex_unlock(&s->mu);
    return HY_OK;
}

/* v with its bits in reverse order. */
static uint64_t bit_reverse(uint64_t v)
{
    v = (v >> 1 & 0x5555555555555555ull) | (v & 0x5555555555555555ull) << 1;
    v = (v >> 2 & 0x3333333333333333ull) | (v & 0x3333333333333333ull) << 2;
    v = (v >> 4 & 0x0f0f0f0f0f0f0f0full) | (v & 0x0f0f0f0f0f0f0f0full) << 4;
    v = (v >> 8 & 0x00ff00ff00ff00ffull) | (v & 0x00ff00ff00ff00ffull) << 8;
    v = (v >> 16 & 0x0000ffff0000ffffull) | (v & 0x0000ffff0000ffffull) << 16;
    return v >> 32 | v << 32;
}

/* The cursor walks the buckets in the order of their indices' bits read
 * backwards (Redis's SCAN does the same): the index only ever doubles, and a
 * bucket's entries then split between it and the bucket whose index adds the
 * new high bit, which this order visits after it — so an entry present from
 * the first call to the last is passed at least once, whatever the index
 * did in between (at most twice, when it grew). */
int hy_store_scan(hy_store *s, uint64_t *cursor, size_t buckets, hy_store_scan_fn fn, void *ctx)
{
    pthread_mutex_lock(&s->mu);
    const uint64_t mask = s->nbuckets - 1;
    uint64_t v = *cursor;
    size_t done = 0;
    do {
        for (obj *o = s->buckets[v & mask]; o; o = o->next) fn(ctx, &o->meta);
        v |= ~mask;
        v = bit_reverse(bit_reverse(v) + 1);
    } while (v && ++done < buckets);
    pthread_mutex_unlock(&s->mu);
    *cursor = v;
    return v ? HY_EAGAIN : HY_OK;
}

int hy_store_set_policy(hy_store *s, hy_tier_id tier, const hy_policy_config *p, hy_err *err)
{
    if (tier != HY_TIER_HOST && !(tier == HY_TIER_NVME && s->nvme) &&
        !(tier == HY_TIER_HBM && s->dev))
        return hy_err_set(err, HY_EINVAL, "set_policy: this store has no %s tier",
                          tier == HY_TIER_HBM    ? "hbm"
                          : tier == HY_TIER_NVME ? "NVMe"
                                                 : "host");
    hy_policy_config *cur = tier == HY_TIER_HOST  ? &s->cfg.host_policy
                            : tier == HY_TIER_HBM ? &s->cfg.hbm_policy
                                                  : &s->cfg.nvme_policy;
    hy_policy_config pc = *p;
    pc.capacity = cur->capacity; /* set at open, never changed */
    hy_evictor *ev;
    hy_admitter *ad;
    int rc = hy_evictor_new(&pc, &ev, err);
    if (rc) return rc;
    if ((rc = hy_admitter_new(&pc, &ad, err))) {
        hy_evictor_free(ev);
        return rc;
    }
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->nbuckets; i++)
        for (obj *o = s->buckets[i]; o; o = o->next)
            if (resident(o, tier))
                hy_evictor_insert(ev, o->oid, o->meta.bytes, o->meta.flops, o->meta.tokens,
                                  ++s->tick);
    hy_evictor_free(s->ev[tier]);
    hy_admitter_free(s->ad[tier]);
    s->ev[tier] = ev;
    s->ad[tier] = ad;
    *cur = pc;
    pthread_mutex_unlock(&s->mu);
    return HY_OK;
}

void hy_store_stats_get(hy_store *s, hy_store_stats *st)
{
    pthread_mutex_lock(&s->mu);
    *st = s->st;
    st->entries = s->count;
    hy_arena_stats_get(s->arena, &st->arena);
    st->host_bytes = st->arena.used;
    if (s->nvme) hy_nvme_stats_get(s->nvme, &st->nvme);
    st_hbm_stats(s, st);
    pthread_mutex_unlock(&s->mu);
}
