/*
 * tiers: the segment-state store (DESIGN.md §2 and §4). Entries are opaque,
 * immutable byte payloads (a serialised hy_entry, MBs each) with metadata;
 * the store knows nothing of the model. Tiers, fastest first: hbm (GPU
 * memory, when built with CUDA and a device exists), host (one arena in RAM),
 * nvme (a RocksDB catalog plus extent files read and written with io_uring
 * and O_DIRECT). A wrong byte served is worse than a miss: payloads carry
 * checksums (XXH3 per MiB) verified on every read from NVMe, so on every
 * promotion out of it. Copies between host and hbm never leave the process's
 * memory and are not re-hashed (the payload's own section checksums,
 * docs/entry-format.md, are checked by whoever decodes it).
 *
 * This header holds what every part of the store shares: keys, metadata and
 * the fixed limits. The parts: arena.h (host memory), policy.h (eviction and
 * admission), nvme.h (the persistent tier), hbm.h (GPU memory), store.h (the
 * tier manager).
 */
#ifndef HY_TIERS_H
#define HY_TIERS_H

#include "common/hy_common.h"

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
} hy_meta;

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

#endif
