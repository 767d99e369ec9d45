/*
 * Eviction and admission policies, per tier (docs/policies.md). Pure logic over
 * object ids (hy_key_id) with sizes and costs; the store calls them under its
 * lock, and `hypic-bench policies` replays traces through them.
 *
 * Eviction (hy_evictor): the store reports inserts, accesses and removals;
 * victim() names the object to evict next, skipping those the caller says are
 * pinned (leased). Kinds:
 *   lru     least recently used;
 *   lfu     least frequently used (ties: least recent);
 *   s3fifo  S3-FIFO (a small FIFO of ~10% of capacity for new objects, a main
 *           FIFO with reinsertion of objects accessed while queued, and a ghost
 *           FIFO of recently evicted ids that sends re-inserted ones to main);
 *   gdsf    GreedyDual-Size-Frequency: priority = clock + frequency × cost /
 *           bytes, the clock rising to each victim's priority;
 *   hybrid  recency plus FLOPs saved per byte: priority = clock + cost/bytes ×
 *           (1 + log2(1 + frequency)) with LRU aging — a segment's recompute
 *           cost grows with its tokens while its bytes are mostly the
 *           constant-size linear states, so long segments are worth more per
 *           byte.
 * Admission (hy_admitter): decides whether a put enters a tier at all:
 *   always; second-hit (admit an id seen before within a window of recent
 *   ids); tinylfu (a count-min sketch with periodic halving; admit when the
 *   newcomer's estimated frequency is at least the would-be victim's);
 *   min-tokens N (admit segments of at least N tokens).
 */
#ifndef HY_POLICY_H
#define HY_POLICY_H

#include "hy_tiers.h"

typedef struct hy_evictor hy_evictor;
int hy_evictor_new(const hy_policy_config *cfg, hy_evictor **out, hy_err *err);
void hy_evictor_free(hy_evictor *ev);
/* A new resident object. cost: recompute FLOPs it saves; now: any monotonic
 * tick (the store passes a counter). Inserting a resident id is a broken
 * invariant (assert). */
void hy_evictor_insert(hy_evictor *ev, uint64_t id, uint64_t bytes, double cost, uint32_t tokens,
                       uint64_t now);
void hy_evictor_access(hy_evictor *ev, uint64_t id, uint64_t now);
/* No-op when absent. A remove() of the id victim() last returned (no insert or
 * access in between) is an eviction: it raises the gdsf/hybrid clock and leaves
 * an s3fifo ghost; any other remove() (invalidation, TTL) just forgets the id. */
void hy_evictor_remove(hy_evictor *ev, uint64_t id);
/* The next object to evict, skipping ids for which pinned(ctx, id) is true.
 * Does not remove it (the caller removes it once evicted). 0 and *id set, or
 * HY_ENOTFOUND when every resident object is pinned or none is resident. */
int hy_evictor_victim(hy_evictor *ev, uint64_t *id, bool (*pinned)(void *ctx, uint64_t id),
                      void *ctx);
size_t hy_evictor_count(const hy_evictor *ev);

typedef struct hy_admitter hy_admitter;
int hy_admitter_new(const hy_policy_config *cfg, hy_admitter **out, hy_err *err);
void hy_admitter_free(hy_admitter *ad);
/* Records an access (hit or miss) of id; call on every lookup. */
void hy_admitter_record(hy_admitter *ad, uint64_t id);
/* Whether a put of id should enter; victim_id is the object it would displace
 * (0 when none: the tier has room). */
bool hy_admitter_admit(hy_admitter *ad, uint64_t id, uint32_t tokens, uint64_t victim_id);
/* What the admitter knows of id's popularity, for introspection and tests:
 * tinylfu's sketch estimate (0..15), second-hit's sightings within its window,
 * 0 for the kinds that keep no history. */
uint32_t hy_admitter_estimate(const hy_admitter *ad, uint64_t id);

#endif
