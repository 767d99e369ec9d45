/*
 * Fetching a stored entry for a request (handlers_internal.h): leased from
 * this member's tiers and viewed in place — on the hbm tier's device when
 * the model's passes run there (svc_model.on_hbm), in host memory else —, or — in cluster mode,
 * when this member does not have it — fetched whole from an owner. Either way it is verified first:
 * a stored entry that fails its checks is removed and taken as a miss (a wrong byte is worse than a
 * miss), an owner's that fails them is a miss too.
 */
#include "cluster_internal.h"
#include "handlers_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Leases the entry under key (visible to the caller, of model sm) and
 * verifies it: g->entry is a view into the leased bytes (no copy), and
 * g->lease must be released after it is freed (h_seg_drop). HY_ENOTFOUND on
 * a miss; a stored entry that fails its checks (a wrong byte is worse than a
 * miss) is removed and reported as a miss. */
static int fetch_leased(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    hy_lease *l;
    /* a model whose passes run on the hbm tier's device takes an entry
     * held there where it lies (the copy may move before the acquire: a
     * device lease then copies it up again) */
    unsigned mask = 0;
    const bool on_device = sm->on_hbm && hy_store_tiers_of(r->s->store, k, &mask) == HY_OK &&
                           (mask & 1u << HY_TIER_HBM);
    int rc = on_device ? hy_store_acquire_device(r->s->store, k, &l, err)
                       : hy_store_acquire(r->s->store, k, &l, err);
    if (rc == HY_EFORMAT) return HY_ENOTFOUND; /* its NVMe copy failed its checksums: dropped */
    if (rc) return rc;
    const hy_meta *m = hy_lease_meta(l);
    if (strcmp(m->tenant, r->who.tenant) != 0 || memcmp(m->model, sm->fp, 32) != 0) {
        hy_store_release(r->s->store, l);
        return HY_ENOTFOUND;
    }
    g->from = hy_lease_tier(l);
    *bytes = m->bytes;
    rc = on_device
             ? hy_exec_view_device(sm->on_hbm, hy_lease_device_ptr(l), m->bytes, &g->entry, err)
             : hy_entry_view(sm->m, hy_lease_data(l), m->bytes, &g->entry, err);
    if (rc == HY_OK) {
        g->lease = l;
        return HY_OK;
    }
    hy_store_release(r->s->store, l);
    if (rc == HY_EFORMAT || rc == HY_EINVAL) {
        char hex[65];
        hy_key_hex(k, hex);
        hy_log(HY_LOG_ERROR, "entry %s failed to decode, removing it: %s", hex, err->msg);
        hy_store_filter f = {.key = k};
        size_t gone;
        hy_err ignored = {0};
        hy_store_invalidate(r->s->store, &f, &gone, &ignored);
        return HY_ENOTFOUND;
    }
    return rc;
}

/* From an owner (cluster mode): the bytes must decode and be the entry of
 * key k for this tenant (an owner's wrong byte is a miss too). */
static int fetch_from_owner(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes)
{
    svc_view *v = svc_view_get(r->s);
    if (!v) return HY_ENOTFOUND;
    void *buf = NULL;
    size_t len = 0;
    hy_err e = {0};
    int rc = svc_cluster_fetch(r->s, v, sm, r->who.tenant, k, &buf, &len, g->member, &e);
    svc_view_put(v);
    if (rc) return HY_ENOTFOUND;
    hy_entry *ent = NULL;
    uint8_t want[32];
    const int32_t *tok;
    if (hy_entry_view(sm->m, buf, len, &ent, &e) == HY_OK) {
        const int n = hy_entry_tokens(ent, &tok);
        hy_entry_key(r->who.tenant, sm->fp, hy_entry_seam_setting(ent), hy_entry_repr_of(ent), tok,
                     (size_t)n, want);
        if (memcmp(want, k->b, 32) == 0) {
            g->entry = ent;
            g->rbuf = buf;
            g->from = HY_TIER_NONE;
            *bytes = len;
            return HY_OK;
        }
        snprintf(e.msg, sizeof e.msg, "its tokens are not the key's");
    }
    hy_log(HY_LOG_WARN, "cluster: an entry from %s failed its checks, taken as a miss: %s",
           g->member, e.msg);
    hy_entry_free(ent);
    free(buf);
    g->member[0] = '\0';
    return HY_ENOTFOUND;
}

int fetch_here(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    g->entry = NULL;
    g->lease = NULL;
    g->rbuf = NULL;
    g->member[0] = '\0';
    return fetch_leased(r, sm, k, g, bytes, err);
}

int fetch_entry(rq *r, svc_model *sm, const hy_key *k, seg *g, uint64_t *bytes, hy_err *err)
{
    int rc = fetch_here(r, sm, k, g, bytes, err);
    if (rc == HY_ENOTFOUND && r->s->cluster) rc = fetch_from_owner(r, sm, k, g, bytes);
    return rc;
}
