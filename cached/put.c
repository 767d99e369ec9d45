/*
 * Storing entries where they belong (put_internal.h).
 */
#include "put_internal.h"
#include "cluster_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void put_meta(const svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              size_t bytes, char *const *tags, size_t ntags, hy_meta *m)
{
    memset(m, 0, sizeof *m);
    m->key = *key;
    snprintf(m->tenant, sizeof m->tenant, "%s", tenant);
    memcpy(m->model, sm->fp, 32);
    for (size_t i = 0; i < ntags && i < HY_MAX_TAGS; i++)
        snprintf(m->tags[m->ntags++], HY_TAG_MAX, "%s", tags[i]);
    const int32_t *tok;
    m->tokens = (uint32_t)hy_entry_tokens(e, &tok);
    /* the prefill a hit saves: the body's tokens after an empty prefix */
    m->flops = hy_config_prefill_flops(sm->c, 0, hy_entry_body_tokens(e));
    m->bytes = bytes;
}

int put_bytes(hy_svc *s, svc_model *sm, const hy_meta *m, const void *buf, bool wait_owner,
              bool here_only, hy_tier_id *placed, char *member, hy_err *err)
{
    *placed = HY_TIER_NONE;
    member[0] = '\0';
    bool here = true;
    svc_view *v = here_only ? NULL : svc_view_get(s);
    if (v) { /* cluster mode: with its owners */
        svc_peer *own[HY_OWNERS_MAX];
        bool self;
        const size_t n = svc_view_owners(s, v, m->tenant, &m->key, own, &self);
        if (n) snprintf(member, HY_MEMBER_ID_MAX, "%s", self ? s->cfg.cluster_id : own[0]->id);
        svc_view_put(v);
        here = self;
        if (n > (self ? 1u : 0u)) {
            char *tags[HY_MAX_TAGS];
            for (uint32_t t = 0; t < m->ntags; t++) tags[t] = (char *)m->tags[t];
            char took[HY_MEMBER_ID_MAX];
            hy_err pe = {0};
            const bool now = wait_owner && !self; /* one owner must take it now */
            if (wait_owner) svc_cluster_count_forward(s);
            const int rc = svc_cluster_put(s, sm->name, m->tenant, &m->key, tags, m->ntags, buf,
                                           (size_t)m->bytes, now, took, &pe);
            if (rc && now) {
                if (err) *err = pe;
                return rc;
            }
            if (rc) hy_log(HY_LOG_WARN, "cluster: %s", pe.msg);
            if (now) snprintf(member, HY_MEMBER_ID_MAX, "%s", took);
        }
    }
    if (!here) return HY_OK;
    hy_put *p;
    void *dst;
    int rc = hy_store_reserve(s->store, m, &p, &dst, err);
    if (rc) return rc;
    memcpy(dst, buf, (size_t)m->bytes);
    return hy_store_commit(s->store, p, placed, err);
}

int put_built(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              const void *buf, size_t len, char *const *tags, size_t ntags, hy_tier_id *placed,
              char *member, hy_err *err)
{
    hy_meta m;
    put_meta(sm, tenant, key, e, len, tags, ntags, &m);
    char who[HY_MEMBER_ID_MAX];
    const int rc = put_bytes(s, sm, &m, buf, false, false, placed, who, err);
    if (member) snprintf(member, HY_MEMBER_ID_MAX, "%s", who);
    if (rc) return rc;
    atomic_fetch_add(&s->met.entries_built, 1);
    svc_reprs_count(&s->reprs, e, len);
    if (*placed != HY_TIER_NONE) atomic_fetch_add(&s->met.entries_stored, 1);
    return HY_OK;
}

int put_entry(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              char *const *tags, size_t ntags, hy_tier_id *placed, uint64_t *bytes, char *member,
              hy_err *err)
{
    *placed = HY_TIER_NONE;
    void *buf;
    size_t len;
    int rc = hy_entry_serialize(e, &buf, &len, err);
    if (rc) return rc;
    rc = put_built(s, sm, tenant, key, e, buf, len, tags, ntags, placed, member, err);
    free(buf);
    if (bytes) *bytes = len;
    return rc;
}
