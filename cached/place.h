/*
 * Entries read while the pass that composes them runs (place.c): those only
 * the NVMe tier holds, and those an owner in the cluster holds (its GetEntry
 * stream). Each is added with where its entry and its bytes go, and read by
 * one of the daemon's readers (threads kept for its life and shared by its
 * requests, up to PL_LANDING_THREADS: one an entry while there are fewer
 * entries in flight), each entry in its own layer order — so every entry's layer l lands at about
 * the same time, the pass starts once each one's header and tokens are in, and it waits per layer
 * (hy_entry_view_open). The service's Prefill and `hypic-bench pic` use it.
 */
#ifndef HY_CACHED_PLACE_H
#define HY_CACHED_PLACE_H

#include "hy_model.h"
#include "hy_tiers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PL_LANDING_THREADS 128
typedef struct pl_landing pl_landing;
typedef struct hy_svc hy_svc;
typedef enum pl_source { PL_FROM_HOST, PL_FROM_NVME, PL_FROM_REMOTE, PL_FROM_COUNT } pl_source;
/* Whether k's entry is stored and visible to tenant, of model fp: then
 * *bytes its size and *mask its tiers (1 << hy_tier_id each). */
bool pl_peek(hy_store *st, const uint8_t fp[32], const char *tenant, const hy_key *k,
             uint64_t *bytes, unsigned *mask);
int pl_landing_new(hy_store *st, const hy_model *m, const uint8_t fp[32], const char *tenant,
                   size_t cap, pl_landing **out);
/* Adds k's entry (*bytes as pl_peek gave): once its read is over,
 * *entry and *lease are set when it opened (free the entry, then release
 * the lease). Returns its index. */
size_t pl_landing_add(pl_landing *L, const hy_key *k, uint64_t bytes, hy_entry **entry,
                      hy_lease **lease);
/* Adds k's entry from member (an owner of it other than this one; bytes as
 * its Lookup said): once its stream is over, *entry and *buf (the bytes it
 * views: free() after the entry) are set when it opened. An entry whose
 * tokens are not the key's is a miss. Returns its index. */
size_t pl_landing_add_remote(pl_landing *L, hy_svc *s, const char *member, const hy_key *k,
                             uint64_t bytes, hy_entry **entry, void **buf);
/* Starts the reads. */
int pl_landing_go(pl_landing *L);
/* Entries added (0 for NULL). */
size_t pl_landing_count(const pl_landing *L);
/* Waits until entry i's header and tokens have landed and passed: its
 * entry, or NULL — a miss after all (gone meanwhile, or failing its checks:
 * then removed from the store). */
hy_entry *pl_landing_opened(pl_landing *L, size_t i);
/* Waits until every read is over (NULL: none). */
void pl_landing_end(pl_landing *L);
/* Whether an entry that had opened failed on the way (a pass composing it
 * then failed with it): which, and why. */
bool pl_landing_failed(const pl_landing *L, size_t *job, hy_err *err);
pl_source pl_landing_source(const pl_landing *L, size_t i);
/* Where entry i came from, in words ("the NVMe tier", "member n2"), into buf. */
const char *pl_landing_where(const pl_landing *L, size_t i, char *buf, size_t cap);
/* The bytes of the entries from s that opened, and the seconds from the
 * reads' start to the last one's end (after pl_landing_end); false: none. */
bool pl_landing_read(const pl_landing *L, pl_source s, uint64_t *bytes, double *seconds);
void pl_landing_free(pl_landing *L);

/* --- storing entries where they belong ------------------------------------------------ */

typedef struct svc_model svc_model;
/* An entry's metadata for the store: key, tenant, model, its tokens, the
 * prefill a hit saves, its size, its tags (up to HY_MAX_TAGS). */
void pl_meta_of(const svc_model *sm, const char *tenant, const hy_key *key, const hy_entry *e,
                size_t bytes, char *const *tags, size_t ntags, hy_meta *m);
/* Stores the serialised, validated entry buf (m->bytes of it) where it
 * belongs: on one node here; in cluster mode with its owners — here when
 * this member is one, to the others in the background, or, with
 * wait_owner and this member not one, to one of them now (HY_EIO naming
 * them when none takes it). here_only: this member alone, whoever owns it.
 * *placed: the tier here (HY_TIER_NONE when admission dropped it or it is
 * not stored here); member (HY_MEMBER_ID_MAX bytes): this member's id when
 * it is an owner, else the owner that took it or the first ("" on one node). */
int pl_store(hy_svc *s, svc_model *sm, const hy_meta *m, const void *buf, bool wait_owner,
             bool here_only, hy_tier_id *placed, char *member, hy_err *err);
/* An entry built here (inline, by Warm, by a scatter worker: e is buf's
 * entry) stored where it belongs, counted in the daemon's statistics
 * (built, stored, bytes by representation). member may be NULL. */
int pl_store_built(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key,
                   const hy_entry *e, const void *buf, size_t len, char *const *tags, size_t ntags,
                   hy_tier_id *placed, char *member, hy_err *err);
/* The same, serialising e first; *bytes (may be NULL) its size. */
int pl_store_entry(hy_svc *s, svc_model *sm, const char *tenant, const hy_key *key,
                   const hy_entry *e, char *const *tags, size_t ntags, hy_tier_id *placed,
                   uint64_t *bytes, char *member, hy_err *err);

/* --- fetch or recompute ------------------------------------------------------- */

/* What bringing an entry from where it lies costs, and what computing its
 * segment inside the pass costs, both fitted to what was measured (the
 * scheduler's least-squares fit: seconds = fixed + a·n + b·n², n bytes or
 * tokens) over the last PL_SAMPLES of each; a hit is recomputed when that is
 * the cheaper. Thread-safe. */
#define PL_SAMPLES     64
#define PL_MIN_SAMPLES 4
typedef struct pl_fit pl_fit;
typedef struct pl_costs pl_costs;
const char *pl_source_name(pl_source s); /* "host", "nvme", "remote" */
int pl_costs_new(pl_costs **out);
void pl_costs_free(pl_costs *c);
/* A fetch of `bytes` from s that took `seconds`; a pass that computed
 * `tokens` in `seconds` (its compositions and waits left out). */
void pl_costs_fetched(pl_costs *c, pl_source s, uint64_t bytes, double seconds);
void pl_costs_computed(pl_costs *c, uint64_t tokens, double seconds);
/* The estimates, in seconds; false while fewer than PL_MIN_SAMPLES were
 * measured (or the fit failed). Computing n tokens counts what they add to
 * a pass: the fit's terms in n, not its fixed part (paid anyway). */
bool pl_costs_fetch_s(pl_costs *c, pl_source s, uint64_t bytes, double *out);
bool pl_costs_compute_s(pl_costs *c, uint64_t tokens, double *out);

typedef enum pl_policy { PL_AUTO, PL_FETCH, PL_RECOMPUTE } pl_policy;
/* The choice for a hit of `bytes` in s whose segment would compute
 * `tokens`: true to recompute it. why gets one line saying which and why;
 * *fetch_s and *compute_s the estimates (0 when unknown). */
bool pl_recompute(pl_costs *c, pl_policy pol, pl_source s, uint64_t bytes, uint64_t tokens,
                  double *fetch_s, double *compute_s, char *why, size_t cap);

#endif
