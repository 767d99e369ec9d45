/*
 * Storing an entry where it belongs (put.c): on one node, in this member's
 * tiers; in cluster mode, with its owners (hy_rendezvous_owners over the
 * current view) — here when this member is one of them, to the others in the
 * background (or to one of them now, for a PutEntry this member does not
 * own). Used by Warm, Prefill's inline builds, PutEntry and the entries
 * scatter workers build.
 */
#ifndef HY_CACHED_PUT_INTERNAL_H
#define HY_CACHED_PUT_INTERNAL_H

#include "service_internal.h"

/* An entry's metadata for the store: key, tenant, model, its tokens, the
 * prefill a hit saves, its size, its tags (up to HY_MAX_TAGS). */
void put_meta(const svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              size_t bytes, char *const *tags, size_t ntags, hy_meta *m);
/* Stores the serialised, validated entry buf (m->bytes of it) where it
 * belongs: on one node here; in cluster mode with its owners — here when
 * this member is one, to the others in the background, or, with
 * wait_owner and this member not one, to one of them now (HY_EIO naming
 * them when none takes it). here_only: this member alone, whoever owns it.
 * *placed: the tier here (HY_TIER_NONE when admission dropped it or it is
 * not stored here); member (HY_MEMBER_ID_MAX bytes): this member's id when
 * it is an owner, else the owner that took it or the first ("" on one node). */
int put_bytes(hy_svc *s, svc_model *sm, const hy_meta *m, const void *buf, bool wait_owner,
              bool here_only, hy_tier_id *placed, char *member, hy_err *err);
/* An entry built here (inline, by Warm, by a scatter worker: e is buf's
 * entry) stored where it belongs, counted in the daemon's statistics
 * (built, stored, bytes by representation). member may be NULL. */
int put_built(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              const void *buf, size_t len, char *const *tags, size_t ntags, hy_tier_id *placed,
              char *member, hy_err *err);
/* The same, serialising e first; *bytes (may be NULL) its size. */
int put_entry(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
              char *const *tags, size_t ntags, hy_tier_id *placed, uint64_t *bytes, char *member,
              hy_err *err);

#endif
