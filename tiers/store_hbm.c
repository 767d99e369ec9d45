/*
 * The tier manager's hbm side (hy_tiers.h; shared state and locking in
 * store_internal.h): every move of bytes into or out of GPU memory.
 *
 *   open     hy_hbm_available() decides whether the tier exists; when it
 *            does, the host arena is registered with the driver so that
 *            host ↔ hbm copies are DMA (a failure to pin is a warning);
 *   commit   the hbm admitter decides; a block is allocated (evicting hbm
 *            victims) and the reservation's bytes copied up;
 *   evict    an hbm victim with a host copy just loses its block; one
 *            without is demoted: a host block is allocated (which may evict
 *            host → NVMe), the bytes are copied down, then the device block
 *            is freed. If that fails the entry keeps its hbm copy (unless it
 *            is also in NVMe) and the allocation that wanted room fails: an
 *            entry is never dropped from hbm for want of a place below;
 *   acquire  device leases: an hbm copy is pinned and handed out; otherwise
 *            the host bytes (from NVMe first, verified, when need be) are
 *            copied up into a block that becomes the hbm copy if the hbm
 *            admitter agrees, else lives as long as the lease. Host leases on
 *            an entry held only in hbm are copied down by st_fetch_host
 *            (store.c) through st_hbm_copy_down.
 *
 * Copies run with the store's lock dropped and the entry pinned; the device
 * tier's own mutex (hbm.c) keeps its allocator consistent meanwhile
 * (devtier_internal.h). After a copy each path rechecks the entry: invalidated
 * (dead), or given the same copy by another thread (then ours is freed).
 */
#include "store_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- open / close -------------------------------------------------------------- */

int st_hbm_open_device(const hy_store_config *cfg, const hy_devtier_ops **ops, void **ctx,
                       char *why, size_t n, hy_err *err)
{
    *ops = NULL;
    *ctx = NULL;
    char avail[256];
    if (!hy_hbm_available(avail, sizeof avail)) {
        snprintf(why, n, "%s", avail);
        hy_log(HY_LOG_WARN,
               "store: an hbm tier of %zu bytes is configured but unavailable, running "
               "without it: %s",
               cfg->hbm_bytes, avail);
        return HY_OK;
    }
    hy_hbm *h = NULL;
    int rc = hy_hbm_open(cfg->hbm_bytes, cfg->hbm_device, &h, err);
    if (rc) return rc;
    snprintf(why, n, "hbm on CUDA device %d (%s)", cfg->hbm_device, avail);
    *ops = &hy_devtier_hbm;
    *ctx = h;
    return HY_OK;
}

int st_hbm_attach(hy_store *s, hy_err *err)
{
    hy_hbm_stats hs;
    s->dev->stats(s->dev_ctx, &hs);
    s->dev_capacity = hs.capacity;
    s->cfg.hbm_policy.capacity = hs.capacity;
    int rc = hy_evictor_new(&s->cfg.hbm_policy, &s->ev[HY_TIER_HBM], err);
    if (!rc) rc = hy_admitter_new(&s->cfg.hbm_policy, &s->ad[HY_TIER_HBM], err);
    if (rc || !s->dev->pin_host) return rc;
    size_t n;
    void *base = hy_arena_region(s->arena, &n);
    hy_err e = {0};
    if (s->dev->pin_host(s->dev_ctx, base, n, &e) == HY_OK) {
        s->host_pinned = true;
        hy_arena_set_pinned(s->arena, true);
    } else {
        hy_log(HY_LOG_WARN,
               "store: host arena (%zu bytes) not pinned, host <-> hbm copies run at the pageable "
               "rate: %s",
               n, e.msg);
    }
    return HY_OK;
}

void st_hbm_detach(hy_store *s)
{
    if (!s->dev) return;
    if (s->host_pinned) {
        size_t n;
        s->dev->unpin_host(s->dev_ctx, hy_arena_region(s->arena, &n));
        hy_arena_set_pinned(s->arena, false);
        s->host_pinned = false;
    }
    s->dev->close(s->dev_ctx);
    s->dev = NULL;
    s->dev_ctx = NULL;
}

/* --- blocks and copies ---------------------------------------------------------- */

void st_hbm_release(hy_store *s, size_t doff)
{
    s->dev->release(s->dev_ctx, doff);
}

static int copy_up(hy_store *s, size_t doff, const void *src, size_t n, hy_err *err)
{
    pthread_mutex_unlock(&s->mu);
    int rc = s->dev->write(s->dev_ctx, doff, src, n, err);
    pthread_mutex_lock(&s->mu);
    return rc;
}

int st_hbm_copy_down(hy_store *s, size_t doff, void *dst, size_t n, hy_err *err)
{
    pthread_mutex_unlock(&s->mu);
    int rc = s->dev->read(s->dev_ctx, doff, dst, n, err);
    pthread_mutex_lock(&s->mu);
    return rc;
}

/* The hbm entry a new block of `bytes` would displace, as the admitter knows
 * it (st_freq_id); 0 when the tier has room (or nothing can be displaced). */
static uint64_t would_displace(hy_store *s, uint64_t bytes)
{
    hy_hbm_stats hs;
    s->dev->stats(s->dev_ctx, &hs);
    uint64_t vid = 0;
    if (hs.largest_free < st_round_page(bytes) &&
        hy_evictor_victim(s->ev[HY_TIER_HBM], &vid, st_pinned_cb, s) != HY_OK)
        vid = 0;
    return st_freq_id(s, vid);
}

/* --- eviction ------------------------------------------------------------------- */

/* Evicts one unpinned hbm copy (see the top of the file). HY_OK when a block
 * was freed or the victim turned out to need keeping (leased meanwhile:
 * another victim is tried next); an error when the victim could not be
 * demoted (it stays, and the caller's allocation fails with it). Called with
 * the lock held; drops it while making room in host and copying down. */
static int evict_one_hbm(hy_store *s, hy_err *err)
{
    uint64_t vid;
    if (hy_evictor_victim(s->ev[HY_TIER_HBM], &vid, st_pinned_cb, s) != HY_OK)
        return hy_err_set(err, HY_ENOMEM,
                          "hbm tier full (%zu bytes) and every resident entry is leased",
                          s->dev_capacity);
    obj *v = st_find_by_id(s, vid);
    if (!v || !v->in_hbm) {
        hy_evictor_remove(s->ev[HY_TIER_HBM], vid);
        return HY_OK;
    }
    s->st.hbm_evictions++;
    if (v->in_host) { /* the host copy has the bytes already */
        st_copy_drop(s, v, HY_TIER_HBM);
        return HY_OK;
    }
    hy_evictor_remove(s->ev[HY_TIER_HBM], vid); /* not a candidate while it moves */
    v->pins++;
    hy_err e2 = {0};
    size_t off;
    int rc = st_host_alloc(s, v->meta.bytes, &off, &e2); /* may drop the lock */
    const bool have = rc == HY_OK;
    if (have && !v->dead && !v->in_host)
        rc = st_hbm_copy_down(s, v->doff, hy_arena_ptr(s->arena, off), v->meta.bytes, &e2);
    if (v->dead) { /* invalidated meanwhile: its blocks go with its last pin */
        if (have) hy_arena_release(s->arena, off);
        st_unpin(s, v);
        return HY_OK;
    }
    v->pins--; /* alive: still pinned only if leased meanwhile */
    if (have && (rc || v->in_host)) {
        hy_arena_release(s->arena, off); /* failed, or another thread copied it down */
    } else if (have) {
        st_copy_add(s, v, HY_TIER_HOST, off);
        s->st.hbm_demotions++;
    }
    if (rc && !v->in_host && !v->in_nvme) { /* nowhere to go: it stays in hbm */
        hy_evictor_insert(s->ev[HY_TIER_HBM], vid, v->meta.bytes, v->meta.flops, v->meta.tokens,
                          ++s->tick);
        return hy_err_set(err, rc, "hbm: cannot demote an entry of %llu bytes to host: %s",
                          (unsigned long long)v->meta.bytes, e2.msg);
    }
    if (rc && !v->in_host) /* no room below for now (ENOMEM) is routine under pressure */
        hy_log(rc == HY_ENOMEM ? HY_LOG_DEBUG : HY_LOG_WARN,
               "hbm: demotion to host failed, the entry stays in NVMe: %s", e2.msg);
    if (v->pins > 0) { /* leased meanwhile: its hbm copy stays too */
        hy_evictor_insert(s->ev[HY_TIER_HBM], vid, v->meta.bytes, v->meta.flops, v->meta.tokens,
                          ++s->tick);
        return HY_OK;
    }
    st_copy_drop(s, v, HY_TIER_HBM);
    return HY_OK;
}

/* A device block of `bytes`, evicting hbm copies as needed; may drop the
 * lock (demotions). HY_ERANGE for an entry larger than the tier. */
static int hbm_alloc(hy_store *s, uint64_t bytes, size_t *off, hy_err *err)
{
    if (st_round_page(bytes) > s->dev_capacity)
        return hy_err_set(err, HY_ERANGE, "an entry of %llu bytes exceeds the hbm tier (%zu bytes)",
                          (unsigned long long)bytes, s->dev_capacity);
    for (;;) {
        if (s->dev->alloc(s->dev_ctx, st_round_page(bytes), off) == HY_OK) {
            assert(s->dev->block_size(s->dev_ctx, *off) >= bytes);
            return HY_OK;
        }
        int rc = evict_one_hbm(s, err);
        if (rc) return rc;
    }
}

/* --- commit ---------------------------------------------------------------------- */

bool st_hbm_place(hy_store *s, const hy_meta *m, const void *data, size_t *doff)
{
    if (!s->dev) return false;
    const uint64_t id = hy_key_id(&m->key);
    if (!hy_admitter_admit(s->ad[HY_TIER_HBM], id, m->tokens, would_displace(s, m->bytes)))
        return false;
    hy_err e = {0};
    int rc = hbm_alloc(s, m->bytes, doff, &e);
    if (!rc && (rc = copy_up(s, *doff, data, m->bytes, &e))) st_hbm_release(s, *doff);
    if (rc)
        hy_log(rc == HY_ENOMEM || rc == HY_ERANGE ? HY_LOG_DEBUG : HY_LOG_WARN,
               "hbm: a new entry of %llu bytes skips the tier: %s", (unsigned long long)m->bytes,
               e.msg);
    return rc == HY_OK;
}

/* --- device leases --------------------------------------------------------------- */

/* Copies o (pinned, no hbm copy) up into a device block for the lease l: the
 * source is o's host copy, or bytes brought from NVMe (verified) into host
 * first. The block becomes o's hbm copy if the hbm admitter agrees, else it
 * is l's temporary block. Drops the lock around copies. */
int st_hbm_promote(hy_store *s, obj *o, hy_lease *l, hy_err *err)
{
    const uint64_t id = hy_key_id(&o->meta.key), bytes = o->meta.bytes;
    size_t hoff = o->off;
    bool htmp = false;
    int rc = o->in_host ? HY_OK : st_fetch_host(s, o, &hoff, &htmp, NULL, NULL, &(bool){false}, err);
    if (rc) return rc;
    if (!o->in_hbm) { /* else another thread promoted it while we fetched */
        const bool keep =
            hy_admitter_admit(s->ad[HY_TIER_HBM], id, o->meta.tokens, would_displace(s, bytes));
        size_t doff = 0;
        rc = hbm_alloc(s, bytes, &doff, err); /* may drop the lock */
        const bool have = rc == HY_OK;
        if (have && !o->dead && !o->in_hbm)
            rc = copy_up(s, doff, hy_arena_ptr(s->arena, hoff), bytes, err);
        if (!rc && o->dead) rc = HY_ENOTFOUND; /* invalidated meanwhile */
        if (rc || o->in_hbm) {
            if (have) st_hbm_release(s, doff); /* failed, or another thread's copy won */
        } else if (keep) {
            st_copy_add(s, o, HY_TIER_HBM, doff);
            s->st.hbm_promotions++;
        } else {
            l->dtmp = true;
            l->dtmp_off = doff;
            s->st.hbm_tmp_leases++;
        }
    }
    if (htmp) hy_arena_release(s->arena, hoff);
    return rc;
}

int hy_store_acquire_device(hy_store *s, const hy_key *key, hy_lease **out, hy_err *err)
{
    *out = NULL;
    if (!s->dev)
        return hy_err_set(err, HY_EUNSUPPORTED, "store: no hbm tier for a device lease: %s",
                          s->hbm_why);
    return st_acquire(s, key, true, NULL, NULL, out, err);
}

/* --- stats ----------------------------------------------------------------------- */

void st_hbm_stats(hy_store *s, hy_store_stats *st)
{
    st->hbm_present = s->dev != NULL;
    snprintf(st->hbm_why, sizeof st->hbm_why, "%s", s->hbm_why);
    if (!s->dev) return;
    s->dev->stats(s->dev_ctx, &st->hbm);
    st->hbm_bytes = st->hbm.used;
    st->hbm_capacity = st->hbm.capacity;
}
