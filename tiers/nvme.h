/*
 * The persistent tier: a RocksDB catalog (Debian's librocksdb-dev, C API)
 * and payload bytes in large preallocated extent files written and read with
 * io_uring (liburing) and O_DIRECT, straight from and into page-aligned host
 * buffers.
 *
 * Layout of DIR: catalog/ (RocksDB), extents/extent-NNNNNN.dat (each
 * extent_bytes, preallocated with fallocate), LOCK (flock, one process).
 * Catalog value per key: extent id, offset, stored length (padded to
 * HY_PAGE), payload length, one XXH3-64 per HY_NVME_CHUNK of payload, and the
 * hy_meta (model, tenant, tags, tokens, flops, created, last access, hits,
 * expiry). Format in docs/store-format.md.
 *
 * Durability (nvme_journal.c): each extent file begins with a ring of
 * journal slots. A put writes its payload and its record (into the next slot
 * of the same file), fdatasyncs the extent once, then writes the catalog
 * record with an unsynced WAL write (every 64th is synced). A removal writes
 * a tombstone into a slot and fdatasyncs it before its catalog delete and
 * before its bytes can be reused. Slots are overwritten only once the
 * catalog holds their effect durably. On open, the catalog is scanned, the
 * journals are read and every operation above the catalog's floor is
 * replayed (newest per key wins; a replayed put's payload is verified first),
 * and the extents' free space is rebuilt from the live records; a record
 * whose extent is missing or too short is dropped and logged. Every read
 * verifies the chunk checksums; a mismatch drops the entry (record deleted,
 * space freed), logs it, and returns HY_EFORMAT — never the bytes. Free space
 * inside extents is reused (first fit, coalescing); space amplification =
 * extent bytes allocated / live payload bytes.
 *
 * Thread safety: every call may come from any thread; the tier serialises
 * catalog updates and allocation internally and keeps one io_uring per
 * thread or under a lock.
 */
#ifndef HY_NVME_H
#define HY_NVME_H

#include "tiers/hy_tiers.h"

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

typedef struct hy_nvme hy_nvme;

/* Opens or creates the tier in dir, recovering the catalog and extents. */
int hy_nvme_open(const char *dir, const hy_nvme_config *cfg, hy_nvme **out, hy_err *err);
void hy_nvme_close(hy_nvme *n);

/* Stores a payload durably. data: HY_PAGE-aligned, readable for meta->bytes
 * rounded up to HY_PAGE (the tail padding is written too). Replaces an
 * existing entry of the same key. HY_ENOMEM (with a message) when no extent
 * has room and max_extents are in use: the caller evicts and retries. */
int hy_nvme_put(hy_nvme *n, const hy_meta *meta, const void *data, hy_err *err);
/* Reads a payload into dst (HY_PAGE-aligned, cap >= meta.bytes rounded up to
 * HY_PAGE) after verifying every chunk checksum; fills *meta when not NULL
 * and counts a hit (last access, hits — persisted lazily, at most once a
 * second per entry). HY_ENOTFOUND, or HY_EFORMAT after dropping a corrupt
 * entry. */
int hy_nvme_get(hy_nvme *n, const hy_key *key, void *dst, size_t cap, hy_meta *meta, hy_err *err);
/* The catalog record alone. */
int hy_nvme_lookup(hy_nvme *n, const hy_key *key, hy_meta *meta);
int hy_nvme_remove(hy_nvme *n, const hy_key *key, hy_err *err);
/* Calls fn for every entry (catalog order) until it returns non-zero. */
/* (fn sees a snapshot and may call into the tier; the return is fn's non-zero
 * value, or 0 when every entry was listed, or HY_ENOMEM.) */
int hy_nvme_foreach(hy_nvme *n, int (*fn)(void *ctx, const hy_meta *m), void *ctx, hy_err *err);
void hy_nvme_stats_get(hy_nvme *n, hy_nvme_stats *st);

/* Where an entry's payload lies: extents/extent-NNNNNN.dat (NNNNNN = extent,
 * six digits), bytes [offset, offset + stored). For tools and tests (e.g. to
 * damage a payload on purpose). 0 or HY_ENOTFOUND. */
typedef struct hy_nvme_loc {
    uint32_t extent;
    uint64_t offset, stored;
} hy_nvme_loc;
int hy_nvme_locate(hy_nvme *n, const hy_key *key, hy_nvme_loc *loc);

/* Fault injection for tests: the next `count` io_uring completions of the
 * given direction (0 read, 1 write) report -EIO. */
void hy_nvme_inject_io_error(hy_nvme *n, int direction, int count);

#endif
