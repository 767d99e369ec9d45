/*
 * The tier manager: one store over the host arena and, when configured, the
 * NVMe tier, with a policy per tier (DESIGN.md §4).
 *
 * Lifecycle of an entry:
 *   reserve  a page-aligned host buffer of meta.bytes for the caller to fill
 *            (space is made by evicting unleased entries); invisible;
 *   commit   the entry becomes visible: admission picks its tier — host (and
 *            NVMe too when write-through), NVMe only, or none (the put is
 *            dropped, reported in *placed);
 *   abort    the reservation is dropped, nothing was ever visible.
 *   acquire  a lease on the entry's bytes in host memory: while any lease is
 *            held the bytes are neither evicted nor freed, even if the entry
 *            is invalidated meanwhile (it disappears from lookups at once and
 *            its memory goes with the last release). A hit in NVMe promotes
 *            the entry to host (if the host admitter agrees; otherwise it is
 *            read into a temporary buffer that lives as long as the lease),
 *            verifying its checksums on the way.
 *   evict    host victims are demoted to NVMe (written first unless already
 *            there) when it exists, else dropped; NVMe victims are dropped.
 *
 * Limits: capacity per tier, a byte quota per tenant (host + NVMe residency
 * counted once per entry), TTL (expired entries are misses and are removed
 * when seen). Invalidation by key, tag, tenant or model. Listing with
 * filters and paging. All calls are thread-safe (one mutex for the index;
 * payload copies and I/O run outside it with the entry pinned). With an NVMe
 * tier a mover thread demotes in the background (see the watermarks).
 */
#ifndef HY_STORE_H
#define HY_STORE_H

#include "tiers/arena.h"
#include "tiers/hy_tiers.h"
#include "tiers/nvme.h"
#include "tiers/policy.h"

typedef enum hy_tier_id { HY_TIER_NONE = -1, HY_TIER_HOST = 0, HY_TIER_NVME = 1 } hy_tier_id;

typedef struct hy_store_config {
    size_t host_bytes; /* host arena capacity (> 0) */
    hy_policy_config host_policy;
    const char *nvme_dir; /* NULL: no NVMe tier */
    hy_nvme_config nvme;
    hy_policy_config nvme_policy;
    bool write_through;      /* commit also writes NVMe; else only on demotion */
    uint64_t default_ttl_ns; /* applied when a put's meta has none; 0: none */
    uint64_t tenant_quota;   /* bytes per tenant; 0: unlimited */
    /* Background moves: when the host tier fills past high_watermark (a
     * fraction of host_bytes; default 0.9) a request goes on a bounded queue
     * (move_queue entries; default 64; a full queue drops the request) and the
     * mover thread demotes victims to NVMe until usage falls below
     * low_watermark (default 0.75), so puts rarely wait on NVMe writes. A put
     * that finds no room still evicts in the foreground. Only with NVMe. */
    double high_watermark, low_watermark;
    uint32_t move_queue;
} hy_store_config;

typedef struct hy_store hy_store;
typedef struct hy_put hy_put;
typedef struct hy_lease hy_lease;

/* Which entries a call concerns; NULL / empty fields match everything. */
typedef struct hy_store_filter {
    const hy_key *key;
    const char *tag;
    const char *tenant;
    const uint8_t *model; /* 32 bytes */
} hy_store_filter;

typedef struct hy_store_stats {
    uint64_t entries, host_entries, nvme_entries;
    uint64_t host_bytes, host_capacity;
    uint64_t hits_host, hits_nvme, misses, puts, puts_dropped, evictions, demotions, promotions,
        expired, invalidated, checksum_failures;
    uint64_t moves_queued, moves_dropped, moves_done; /* background queue */
    hy_arena_stats arena;
    hy_nvme_stats nvme; /* zeros without an NVMe tier */
} hy_store_stats;

/* The recommended configuration for a host tier of host_bytes and, when
 * nvme_dir is not NULL, an NVMe tier there: policies chosen from
 * `hypic-bench policies` (docs/policies.md) — gdsf eviction with tinylfu
 * admission in the host tier, gdsf with admit-always in NVMe — write-back,
 * watermarks 0.9 / 0.75, a move queue of 64. */
void hy_store_config_default(hy_store_config *cfg, size_t host_bytes, const char *nvme_dir);

int hy_store_open(const hy_store_config *cfg, hy_store **out, hy_err *err);
void hy_store_close(hy_store *s); /* every lease and reservation must be gone */

int hy_store_reserve(hy_store *s, const hy_meta *meta, hy_put **out, void **buf, hy_err *err);
/* placed (optional): the tier the entry went to, HY_TIER_NONE when admission
 * dropped it (not an error). Replaces an existing entry with the same key. */
int hy_store_commit(hy_store *s, hy_put *p, hy_tier_id *placed, hy_err *err);
void hy_store_abort(hy_store *s, hy_put *p);

/* HY_ENOTFOUND on a miss (or an expired entry). */
int hy_store_acquire(hy_store *s, const hy_key *key, hy_lease **out, hy_err *err);
const void *hy_lease_data(const hy_lease *l);
const hy_meta *hy_lease_meta(const hy_lease *l);
void hy_store_release(hy_store *s, hy_lease *l);

/* Removes every entry matching f (leased ones vanish from lookups now and
 * free their bytes on last release); *removed counts them. */
int hy_store_invalidate(hy_store *s, const hy_store_filter *f, size_t *removed, hy_err *err);
/* Up to cap metas of entries matching f, skipping the first `offset`, in key
 * order; *total (optional) is the number matching. */
int hy_store_list(hy_store *s, const hy_store_filter *f, size_t offset, hy_meta *out, size_t cap,
                  size_t *n, size_t *total, hy_err *err);
/* Replaces a tier's policy at runtime (residents are re-registered). */
int hy_store_set_policy(hy_store *s, hy_tier_id tier, const hy_policy_config *p, hy_err *err);
void hy_store_stats_get(hy_store *s, hy_store_stats *st);

#endif
