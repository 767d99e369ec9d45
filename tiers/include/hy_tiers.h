/*
 * tiers: the segment-state store — the one header other modules and users
 * include (docs/architecture.md#the-store). Entries are opaque, immutable
 * byte payloads (a serialised segment entry, MBs each) with metadata; the
 * store knows nothing of the model. Tiers, fastest first: hbm (GPU memory,
 * when built with CUDA and a device exists), host (one arena in RAM), nvme (a
 * RocksDB catalog plus extent files read and written with io_uring and
 * O_DIRECT). A wrong byte served is worse than a miss: payloads carry
 * checksums (XXH3 per MiB) verified on every read from NVMe, so on every
 * promotion out of it. Copies between host and hbm never leave the process's
 * memory and are not re-hashed (the payload's own section checksums,
 * docs/entry-format.md, are checked by whoever decodes it).
 *
 * Contents: keys and metadata; the policies' names and configuration; the
 * tiers' configuration and statistics; the tier manager (hy_store_*), which
 * is the API. The parts behind it are private to tiers/: arena_internal.h
 * (host memory), extents_internal.h (the block allocator), policy_internal.h
 * (eviction and admission engines), nvme_internal.h (the persistent tier),
 * hbm_internal.h (GPU memory), store_internal.h (the manager's state).
 */
#ifndef HY_TIERS_H
#define HY_TIERS_H

#include "hy_common.h"

#include <stdbool.h>

#define HY_KEY_BYTES  32
#define HY_TENANT_MAX 64 /* bytes, including the NUL */
#define HY_TAG_MAX    64 /* bytes per tag, including the NUL */
#define HY_MAX_TAGS   8
#define HY_PAGE       4096u /* O_DIRECT and arena granularity */

/* A content key: SHA-256 over (tenant, model, format version, W, dtype,
 * tokens) — hy_entry_key() in model/ computes it. */
typedef struct hy_key {
    uint8_t b[HY_KEY_BYTES];
} hy_key;

/* What the store keeps about an entry besides its bytes. */
typedef struct hy_meta {
    hy_key key;
    char tenant[HY_TENANT_MAX];
    uint8_t model[32]; /* model fingerprint */
    uint32_t ntags;
    char tags[HY_MAX_TAGS][HY_TAG_MAX];  /* e.g. document ids: invalidation by tag */
    uint32_t tokens;                     /* the segment's token count */
    double flops;                        /* recompute cost the entry saves, FLOPs */
    uint64_t bytes;                      /* payload bytes */
    uint64_t created_ns, last_access_ns; /* CLOCK_REALTIME, so they survive restarts */
    uint64_t expires_ns;                 /* 0: no TTL */
    uint64_t hits;
    /* A user's pin (hy_store_pin): 0 none, HY_PIN_FOREVER until unpinned,
     * else CLOCK_REALTIME ns when it lapses. Not in the NVMe record: the
     * store keeps its pins in a file of their own beside it. */
    uint64_t pinned_until_ns;
} hy_meta;
#define HY_PIN_FOREVER UINT64_MAX

/* 64-bit id of a key for hash tables and policies (its first 8 bytes: keys
 * are uniformly distributed). */
static inline uint64_t hy_key_id(const hy_key *k)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = (v << 8) | k->b[i];
    return v;
}

/* Lower-case hex of a key (65 bytes with the NUL). */
void hy_key_hex(const hy_key *k, char out[65]);
/* Parses 64 hex digits. */
int hy_key_parse(const char *hex, hy_key *out);
/* Wall-clock nanoseconds (CLOCK_REALTIME). */
uint64_t hy_wall_ns(void);
/* Checks a meta's fields: tenant and tags NUL-terminated and within limits,
 * ntags <= HY_MAX_TAGS, bytes > 0. Names the offending field. */
int hy_meta_validate(const hy_meta *m, hy_err *err);

/* ---- Policies, per tier ---- */

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

typedef enum hy_evict_kind {
    HY_EVICT_LRU = 0,
    HY_EVICT_LFU,
    HY_EVICT_S3FIFO,
    HY_EVICT_GDSF,
    HY_EVICT_HYBRID,
    HY_EVICT_COUNT
} hy_evict_kind;

typedef enum hy_admit_kind {
    HY_ADMIT_ALWAYS = 0,
    HY_ADMIT_SECOND_HIT,
    HY_ADMIT_TINYLFU,
    HY_ADMIT_MIN_TOKENS,
    HY_ADMIT_COUNT
} hy_admit_kind;

typedef struct hy_policy_config {
    hy_evict_kind evict;
    hy_admit_kind admit;
    uint32_t min_tokens; /* for HY_ADMIT_MIN_TOKENS */
    uint64_t capacity;   /* bytes of the tier: sizes S3-FIFO's small queue, the sketch */
} hy_policy_config;

const char *hy_evict_name(hy_evict_kind k);
const char *hy_admit_name(hy_admit_kind k);
/* Parses "lru", "lfu", "s3fifo", "gdsf", "hybrid" / "always", "second-hit",
 * "tinylfu", "min-tokens N" (the number after a space). Names the bad value. */
int hy_policy_parse(const char *evict, const char *admit, hy_policy_config *out, hy_err *err);

/* ---- The tiers' configuration and figures ---- */

/* The allocator's figures, shared by the stats of every tier built on it
 * (hy_extents_stats, hy_arena_stats, hy_hbm_stats). */
#define HY_EXTENTS_STATS_FIELDS                                                                    \
    size_t capacity;      /* bytes */                                                              \
    size_t used;          /* bytes in live blocks (rounded to pages) */                            \
    size_t free_bytes;    /* capacity − used */                                                  \
    size_t largest_free;  /* the largest block an allocation could get now */                      \
    size_t free_extents;  /* number of free extents */                                             \
    size_t blocks;        /* live blocks */                                                        \
    double fragmentation; /* 1 − largest_free / free_bytes (0 when nothing is free) */

typedef struct hy_arena_stats {
    HY_EXTENTS_STATS_FIELDS
    bool locked;     /* mlock succeeded */
    bool huge_pages; /* MADV_HUGEPAGE accepted */
    bool pinned;     /* registered with the CUDA driver (hy_arena_set_pinned) */
} hy_arena_stats;

#define HY_NVME_CHUNK (1u << 20) /* bytes per payload checksum */

typedef struct hy_nvme_config {
    uint64_t extent_bytes; /* size of one extent file (default 256 MiB) */
    uint32_t max_extents;  /* capacity = max_extents × extent_bytes; 0: 64 */
    uint32_t queue_depth;  /* io_uring entries (default 32) */
} hy_nvme_config;

/* live_bytes: payload bytes of the entries; allocated_bytes: extent bytes
 * handed out (payloads padded to HY_PAGE, plus puts in flight and removed
 * entries still being read); extent_bytes_total: the extent files' bytes
 * (fallocated). space_amplification = extent_bytes_total / live_bytes, the
 * disk taken per live byte: it rises when entries are removed and falls back
 * as new puts reuse their space. reads, writes: gets and puts completed. */
typedef struct hy_nvme_stats {
    uint64_t entries, live_bytes, allocated_bytes, extent_bytes_total;
    double space_amplification; /* extent_bytes_total / live (1 when empty) */
    uint64_t reads, writes, checksum_failures, dropped_on_open;
    /* The journal (one flush per put): operations replayed on open, puts
     * found cut short there (not replayed), synced catalog writes. */
    uint64_t journal_replayed, journal_rejected, journal_syncs;
} hy_nvme_stats;

typedef struct hy_hbm_stats {
    int device; /* the CUDA device index */
    /* capacity: bytes of device memory owned by the tier */
    HY_EXTENTS_STATS_FIELDS
    uint64_t writes, reads;             /* completed host→device, device→host copies */
    uint64_t bytes_written, bytes_read; /* their bytes */
    uint64_t write_ns, read_ns;         /* wall time spent in them: bytes / ns = GB/s */
    uint64_t pageable;                  /* copies whose host buffer was not pinned */
} hy_hbm_stats;

/* Whether hy_hbm_open can succeed on this machine: the build has CUDA and
 * cudaGetDeviceCount reports at least one device. Fills why (n bytes, may be
 * NULL) with the reason when false ("built without CUDA ..." or "no CUDA
 * device: <cudaGetErrorString>"), or with the device count when true.
 * Initialises the CUDA runtime on first call; never fails otherwise. */
bool hy_hbm_available(char *why, size_t n);

/* ---- The tier manager ---- */

/*
 * The tier manager: one store over up to three tiers, fastest first — hbm
 * (GPU memory, when configured and a CUDA device exists), the host arena, and
 * NVMe when configured — with a policy per tier.
 *
 * An entry may have a copy in any subset of {hbm, host, nvme}; the copies
 * are identical bytes. Lifecycle:
 *   reserve  a page-aligned host buffer of meta.bytes for the caller to fill
 *            (space is made by evicting unleased entries); invisible;
 *   commit   the entry becomes visible: the hbm admitter decides whether it
 *            also goes up to hbm (a device block, evicting hbm victims as
 *            needed); the host admitter whether the host copy stays; NVMe
 *            takes it when write-through, or when host refused, if its
 *            admitter agrees. Admitted nowhere, the put is dropped. *placed
 *            reports the highest tier it landed in;
 *   abort    the reservation is dropped, nothing was ever visible;
 *   acquire  a lease on the entry's bytes in host memory: while any lease is
 *            held no copy of the entry is evicted and its bytes are not
 *            freed, even if the entry is invalidated meanwhile (it
 *            disappears from lookups at once and its memory goes with the
 *            last release). An entry not in host is brought down from hbm
 *            (if it is there) or promoted from NVMe, verifying its checksums
 *            on the way; the block becomes its host copy if the host
 *            admitter agrees, else it is a temporary buffer that lives as
 *            long as the lease;
 *   acquire_device  the same for GPU consumers: a lease on the bytes in hbm
 *            (hy_lease_device_ptr). An entry not in hbm is copied up from its
 *            host copy (obtained from NVMe first, verified, if need be); the
 *            device block becomes its hbm copy if the hbm admitter agrees,
 *            else a temporary block that lives as long as the lease;
 *   evict    hbm victims are demoted to host, never dropped (one that already
 *            has a host copy just loses its device block); host victims are
 *            demoted to NVMe (written first unless already there) when it
 *            exists and admits them, else their host copy is dropped — and
 *            with it the entry, unless it still has an hbm or NVMe copy; NVMe
 *            victims (unleased, like all victims) lose their NVMe copy likewise.
 *
 * Limits: capacity per tier, a byte quota per tenant (counted once per entry,
 * whatever its copies), TTL (expired entries are misses and are removed when
 * seen). Invalidation by key, tag, tenant or model. Listing with filters and
 * paging. All calls are thread-safe: one mutex guards the index, the arena
 * and the policies; payload copies, hbm transfers and NVMe I/O run outside it
 * with the entry pinned (the hbm tier guards its own allocator: hbm_internal.h). With
 * an NVMe tier a mover thread demotes host victims in the background (see
 * the watermarks). With an hbm tier the host arena is pinned for DMA
 * (arena_internal.h).
 */

typedef enum hy_tier_id {
    HY_TIER_NONE = -1,
    HY_TIER_HOST = 0,
    HY_TIER_NVME = 1,
    HY_TIER_HBM = 2,
} hy_tier_id;

#define HY_TIER_COUNT 3

/* What the store tells its owner (hy_store_config.on_event): an entry became
 * visible (committed, or replaced by a new commit of its key), or its key
 * left the store; reason says why ("stored"; "evicted", "expired",
 * "invalidated", "corrupt"). */
typedef enum hy_store_event { HY_STORE_STORED = 0, HY_STORE_REMOVED } hy_store_event;
typedef void (*hy_store_event_fn)(void *ctx, hy_store_event ev, const hy_meta *m,
                                  const char *reason);

typedef struct hy_store_config {
    size_t host_bytes; /* host arena capacity (> 0) */
    hy_policy_config host_policy;
    const char *nvme_dir; /* NULL: no NVMe tier */
    hy_nvme_config nvme;
    hy_policy_config nvme_policy;
    size_t hbm_bytes; /* hbm tier capacity; 0: no hbm tier. Without a CUDA
                       * device the store logs why and runs without it */
    int hbm_device;   /* its CUDA device index */
    hy_policy_config hbm_policy;
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
    /* Optional: called for every stored and removed entry, with the store's
     * lock held — it must be quick and must not call the store (queue the
     * event and return). */
    hy_store_event_fn on_event;
    void *event_ctx;
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

/* Counters since open. hits_hbm + hits_host + hits_nvme counts the acquires
 * served (host and device leases), each by the tier its bytes came from: a
 * host lease is a host hit when the entry had a host copy, else an hbm hit
 * when it had an hbm copy, else an NVMe hit; a device lease is an hbm hit,
 * else a host hit, else an NVMe hit. evictions, demotions and promotions
 * concern host and NVMe (host → NVMe, NVMe → host); the hbm_* counters the
 * moves into and out of hbm. */
typedef struct hy_store_stats {
    uint64_t entries, host_entries, nvme_entries, hbm_entries; /* copies per tier */
    uint64_t host_bytes, host_capacity;
    uint64_t hits_hbm, hits_host, hits_nvme, misses, puts, puts_dropped, evictions, demotions,
        promotions, expired, invalidated, checksum_failures;
    uint64_t moves_queued, moves_dropped, moves_done; /* background queue */
    uint64_t nvme_evictions; /* of `evictions`, the NVMe victims (the rest were host's) */
    /* hbm: whether the store has the tier, and else why not */
    bool hbm_present;
    char hbm_why[128];
    uint64_t hbm_bytes, hbm_capacity; /* device bytes in use (leases' temporary blocks too) */
    uint64_t hbm_placed;              /* commits that put a copy in hbm */
    uint64_t hbm_promotions;          /* device acquires that copied an entry up to stay */
    uint64_t hbm_tmp_leases;          /* device acquires served from a temporary block */
    uint64_t hbm_demotions;           /* hbm victims copied down to host */
    uint64_t hbm_evictions;           /* hbm victims (demoted, or released beside a host copy) */
    uint64_t hbm_copies_down;         /* host acquires of an entry with no host copy, from hbm */
    hy_arena_stats arena;
    hy_nvme_stats nvme; /* zeros without an NVMe tier */
    hy_hbm_stats hbm;   /* zeros without an hbm tier */
} hy_store_stats;

/* The recommended configuration for a host tier of host_bytes and, when
 * nvme_dir is not NULL, an NVMe tier there: policies chosen from
 * `hypic-bench policies` (docs/policies.md) — gdsf eviction with tinylfu
 * admission in the host tier, gdsf with admit-always in NVMe — write-back,
 * watermarks 0.9 / 0.75, a move queue of 64. No hbm tier (hbm_bytes 0: set
 * it to have one), but hbm_policy is the host tier's (gdsf + tinylfu), on
 * device 0. */
void hy_store_config_default(hy_store_config *cfg, size_t host_bytes, const char *nvme_dir);

/* With cfg->hbm_bytes > 0: when hy_hbm_available() is false the store logs a
 * warning with the reason and opens without hbm (stats say why); when true a
 * failure to open the hbm tier fails the open with hy_hbm_open's message. */
int hy_store_open(const hy_store_config *cfg, hy_store **out, hy_err *err);
void hy_store_close(hy_store *s); /* every lease and reservation must be gone */

int hy_store_reserve(hy_store *s, const hy_meta *meta, hy_put **out, void **buf, hy_err *err);
/* placed (optional): the highest tier the entry went to (HY_TIER_HBM, then
 * HY_TIER_HOST, then HY_TIER_NVME), HY_TIER_NONE when admission dropped it
 * (not an error). A failure to place a copy in hbm (no room beside leased
 * entries, a failed copy) is not an error either: the entry skips hbm.
 * Replaces an existing entry with the same key. */
int hy_store_commit(hy_store *s, hy_put *p, hy_tier_id *placed, hy_err *err);
void hy_store_abort(hy_store *s, hy_put *p);

/* A host lease. HY_ENOTFOUND on a miss (or an expired entry); HY_EFORMAT when
 * the only copy (NVMe) fails its checksum (the entry is dropped); HY_ENOMEM
 * when host memory is full of leased entries. */
int hy_store_acquire(hy_store *s, const hy_key *key, hy_lease **out, hy_err *err);
/* The same, and when the entry comes from the NVMe tier, fn is told — in
 * the caller's thread, before this returns — of the bytes as they land: data
 * is where the lease's bytes will be; [0, verified) of it passed the tier's
 * checksums, [0, landed) are there (the rest usable only by a reader that
 * checks them itself, as an entry's header and section checksums do). A
 * non-zero return from fn ends the acquire with that code (the entry stays
 * stored). Not called for a copy in host memory.
 * Once fn was told of bytes, *out is a lease on the buffer they land in even
 * when this fails (their reader may still read them): release it after. */
typedef int (*hy_store_landed_fn)(void *ctx, const void *data, uint64_t verified, uint64_t landed,
                                  hy_err *err);
int hy_store_acquire_landing(hy_store *s, const hy_key *key, hy_store_landed_fn fn, void *ctx,
                             hy_lease **out, hy_err *err);
/* A device lease: hy_lease_device_ptr is the entry's bytes in GPU memory.
 * HY_EUNSUPPORTED (saying why) when the store has no hbm tier; otherwise as
 * hy_store_acquire, plus HY_ENOMEM when hbm is full of leased entries (or
 * HY_ERANGE for an entry larger than it) and HY_EIO when a copy fails. */
int hy_store_acquire_device(hy_store *s, const hy_key *key, hy_lease **out, hy_err *err);
/* The bytes of a host lease (NULL for a device lease). */
const void *hy_lease_data(const hy_lease *l);
/* The device address of a device lease's bytes (NULL for a host lease): valid
 * until the release; never dereference it on the host. */
void *hy_lease_device_ptr(const hy_lease *l);
const hy_meta *hy_lease_meta(const hy_lease *l);
/* The tier a lease's bytes came from (as counted in the hits_* stats). */
hy_tier_id hy_lease_tier(const hy_lease *l);
void hy_store_release(hy_store *s, hy_lease *l); /* either kind */

/* Which tiers hold a copy of the entry: bit (1u << t) of *mask for each
 * hy_tier_id t. Not an access (no hit, no admission record, no TTL removal).
 * HY_ENOTFOUND when the index has no such entry. For introspection and
 * tests. */
int hy_store_tiers_of(hy_store *s, const hy_key *key, unsigned *mask);
/* The same with a copy of the entry's metadata (meta and mask may be NULL);
 * an expired entry is absent. Not an access either. */
int hy_store_peek(hy_store *s, const hy_key *key, hy_meta *meta, unsigned *mask);

/* Writes every entry that has a host copy and no NVMe copy to NVMe (a
 * write-back store's clean shutdown, so that a restart serves them); *written
 * counts them. No-op without an NVMe tier. Entries only in hbm are not
 * written. The first failed write ends it with that write's error. */
int hy_store_flush(hy_store *s, size_t *written, hy_err *err);

/* Byte quota of one tenant, replacing cfg.tenant_quota for it (0:
 * unlimited). Entries already stored stay; later reserves are held to it. */
int hy_store_set_quota(hy_store *s, const char *tenant, uint64_t bytes, hy_err *err);
/* HY_ERANGE (saying so) when `bytes` more would not fit the tenant's quota
 * now: a check before a put's bytes are gathered (the reserve checks again). */
int hy_store_quota_room(hy_store *s, const char *tenant, uint64_t bytes, hy_err *err);
/* Bytes the tenant's entries hold (counted once per entry). */
uint64_t hy_store_tenant_bytes(hy_store *s, const char *tenant);
/* A tier's current policy (as hy_store_set_policy left it). */
int hy_store_get_policy(hy_store *s, hy_tier_id tier, hy_policy_config *p, hy_err *err);

/* Removes every entry matching f (leased ones vanish from lookups now and
 * free their bytes on last release); *removed counts them. */
/* Pins (what users ask a cache for system prompts and hot documents): the
 * entries f matches — f->tenant must name their tenant — are not evicted
 * from any tier, nor expired by their TTL, until until_ns (CLOCK_REALTIME;
 * HY_PIN_FOREVER: until unpinned; a pin again sets the new time). All or
 * nothing: HY_ERANGE, naming the limit, when the tenant's pinned bytes would
 * pass tenant_cap (0: no cap of its own) or the store's would pass half the
 * host tier (eviction must keep room); HY_ENOENT when nothing matches.
 * Invalidation still removes a pinned entry. With an NVMe tier the pins
 * are kept in DIR/pins and come back with their entries on open. */
int hy_store_pin(hy_store *s, const hy_store_filter *f, uint64_t until_ns, uint64_t tenant_cap,
                 size_t *pinned, uint64_t *bytes, hy_err *err);
/* The pins of the entries f matches lifted: how many and their bytes. */
int hy_store_unpin(hy_store *s, const hy_store_filter *f, size_t *unpinned, uint64_t *bytes,
                   hy_err *err);
/* Bytes of the entries pinned now (lapsed pins cleared first), of tenant or
 * (NULL) of all, and how many entries (count may be NULL). */
uint64_t hy_store_pinned_bytes(hy_store *s, const char *tenant, size_t *count);

int hy_store_invalidate(hy_store *s, const hy_store_filter *f, size_t *removed, hy_err *err);
/* Up to cap metas of entries matching f, skipping the first `offset`, in key
 * order; *total (optional) is the number matching. */
int hy_store_list(hy_store *s, const hy_store_filter *f, size_t offset, hy_meta *out, size_t cap,
                  size_t *n, size_t *total, hy_err *err);
/* Up to cap metas of entries matching f whose key is above *after (NULL:
 * from the first), in key order: a page of a listing that goes on from the
 * last key of the previous one. O(log n + cap) with n entries, plus the
 * entries f rejects on the way (the store keeps its entries in key order),
 * so paging through every entry is O(n log n) in all; entries added or
 * removed between pages show or not by their keys. */
int hy_store_list_after(hy_store *s, const hy_store_filter *f, const hy_key *after, hy_meta *out,
                        size_t cap, size_t *n);
/* Every entry once, a few at a time: each call passes the entries of up to
 * `buckets` buckets of the index to fn (under the store's lock: fn copies
 * what it needs and returns, calling nothing of the store's), from *cursor
 * (0 to begin), and moves *cursor on. HY_EAGAIN while there is more, 0 when
 * the scan has ended (*cursor is 0 again). Linear in the entries: an entry
 * present through the whole scan is passed at least once, at most twice
 * (when the index grew meanwhile); one added or removed during it may or
 * may not be. */
typedef void (*hy_store_scan_fn)(void *ctx, const hy_meta *m);
int hy_store_scan(hy_store *s, uint64_t *cursor, size_t buckets, hy_store_scan_fn fn, void *ctx);
/* Replaces a tier's policy at runtime (residents are re-registered);
 * HY_EINVAL for a tier the store does not have. */
int hy_store_set_policy(hy_store *s, hy_tier_id tier, const hy_policy_config *p, hy_err *err);
void hy_store_stats_get(hy_store *s, hy_store_stats *st);

#endif
