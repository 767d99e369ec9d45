/*
 * Entries read while the pass that composes them runs (land.c): those only
 * the NVMe tier holds, and those an owner in the cluster holds (its GetEntry
 * stream). Each is added to a request's batch with where its entry and its
 * bytes go, and read by one of the daemon's readers (threads kept for its
 * life and shared by its requests, up to LAND_THREADS: one an entry while
 * there are fewer entries in flight), each entry in its own layer order — so
 * every entry's layer l lands at about the same time, the pass starts once
 * each one's header and tokens are in, and it waits per layer
 * (hy_entry_view_open). The service's Prefill and `hypic-bench pic` use it.
 */
#ifndef HY_CACHED_LAND_INTERNAL_H
#define HY_CACHED_LAND_INTERNAL_H

#include "cost_internal.h"
#include "hy_model.h"
#include "hy_tiers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LAND_THREADS 128
typedef struct land_batch land_batch;
typedef struct hy_svc hy_svc;

/* Whether k's entry is stored and visible to tenant, of model fp: then
 * *bytes its size and *mask its tiers (1 << hy_tier_id each). */
bool land_peek(hy_store *st, const uint8_t fp[32], const char *tenant, const hy_key *k,
               uint64_t *bytes, unsigned *mask);
/* A batch of up to cap entries of model m (fingerprint fp) for tenant. */
int land_new(hy_store *st, const hy_model *m, const uint8_t fp[32], const char *tenant, size_t cap,
             land_batch **out);
/* Adds k's entry from the NVMe tier (*bytes as land_peek gave): once its
 * read is over, *entry and *lease are set when it opened (free the entry,
 * then release the lease). Returns its index. */
size_t land_add(land_batch *L, const hy_key *k, uint64_t bytes, hy_entry **entry, hy_lease **lease);
/* Adds k's entry from member (an owner of it other than this one; bytes as
 * its Lookup said): once its stream is over, *entry and *buf (the bytes it
 * views: free() after the entry) are set when it opened. An entry whose
 * tokens are not the key's is a miss. Returns its index. */
size_t land_add_remote(land_batch *L, hy_svc *s, const char *member, const hy_key *k,
                       uint64_t bytes, hy_entry **entry, void **buf);
/* Starts the reads. */
int land_go(land_batch *L);
/* Entries added (0 for NULL). */
size_t land_count(const land_batch *L);
/* Waits until entry i's header and tokens have landed and passed: its
 * entry, or NULL — a miss after all (gone meanwhile, or failing its checks:
 * then removed from the store). */
hy_entry *land_opened(land_batch *L, size_t i);
/* Waits until every read is over (NULL: none). */
void land_wait(land_batch *L);
/* Whether an entry that had opened failed on the way (a pass composing it
 * then failed with it): which, and why. */
bool land_failed(const land_batch *L, size_t *job, hy_err *err);
/* Where entry i comes from: COST_FROM_NVME or COST_FROM_REMOTE. */
cost_source land_source(const land_batch *L, size_t i);
/* Where entry i came from, in words ("the NVMe tier", "member n2"), into buf. */
const char *land_where(const land_batch *L, size_t i, char *buf, size_t cap);
/* The bytes of the entries from s that opened, and the seconds from the
 * reads' start to the last one's end (after land_wait); false: none. */
bool land_read(const land_batch *L, cost_source s, uint64_t *bytes, double *seconds);
/* Waits for the reads (land_wait) and frees the batch (NULL: a no-op). */
void land_free(land_batch *L);

#endif
