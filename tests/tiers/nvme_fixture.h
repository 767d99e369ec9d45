/*
 * What the nvme tier's tests share: a directory per case, payloads, keys and
 * metas determined by a seed, put and check (get compared with what was put)
 * and the stats. Included by test_nvme.c and test_nvme_journal.c only.
 */
#ifndef HY_TEST_NVME_FIXTURE_H
#define HY_TEST_NVME_FIXTURE_H

#include "test_util.h"
#include "nvme_internal.h"

#include <string.h>

#define MiB (1ull << 20)

static char g_tmp[64];
static int g_case;

/* A fresh directory per case under g_tmp. */
static inline void case_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "%s/case%d", g_tmp, g_case++);
}

static inline hy_nvme *open_tier(const char *dir, uint64_t extent, uint32_t max_extents)
{
    hy_nvme_config c = {.extent_bytes = extent, .max_extents = max_extents, .queue_depth = 8};
    hy_err e = {0};
    hy_nvme *n = NULL;
    int rc = hy_nvme_open(dir, &c, &n, &e);
    if (rc) fprintf(stderr, "\n  %s\n", e.msg);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return n;
}

static inline uint64_t padded(uint64_t bytes)
{
    return (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
}

/* A page-aligned buffer holding `bytes` of a sequence determined by seed,
 * zero padding after them. */
static inline uint8_t *payload(uint64_t bytes, uint64_t seed)
{
    uint8_t *p = aligned_alloc(HY_PAGE, padded(bytes));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memset(p + bytes, 0, padded(bytes) - bytes);
    hy_rng r;
    hy_rng_seed(&r, seed);
    for (uint64_t i = 0; i < bytes; i += 8) {
        uint64_t v = hy_rng_next(&r);
        memcpy(p + i, &v, HY_MIN(8, bytes - i));
    }
    return p;
}

static inline hy_key key_of(uint64_t seed)
{
    hy_key k;
    hy_rng r;
    hy_rng_seed(&r, seed ^ 0x6b6579);
    for (int i = 0; i < HY_KEY_BYTES; i += 8) {
        uint64_t v = hy_rng_next(&r);
        memcpy(k.b + i, &v, 8);
    }
    return k;
}

static inline hy_meta meta_of(uint64_t seed, uint64_t bytes)
{
    hy_meta m = {.key = key_of(seed), .bytes = bytes, .tokens = (uint32_t)seed, .ntags = 2};
    snprintf(m.tenant, sizeof m.tenant, "tenant-%llu", (unsigned long long)(seed % 3));
    snprintf(m.tags[0], HY_TAG_MAX, "doc-%llu", (unsigned long long)seed);
    snprintf(m.tags[1], HY_TAG_MAX, "shared");
    for (int i = 0; i < 32; i++) m.model[i] = (uint8_t)(i * 7 + seed);
    m.flops = 1.5e12 * (double)(seed + 1);
    m.expires_ns = seed * 1000;
    return m;
}

static inline int put(hy_nvme *n, uint64_t seed, uint64_t bytes)
{
    hy_meta m = meta_of(seed, bytes);
    uint8_t *p = payload(bytes, seed);
    hy_err e = {0};
    int rc = hy_nvme_put(n, &m, p, &e);
    if (rc && rc != HY_ENOMEM) fprintf(stderr, "\n  put: %s\n", e.msg);
    free(p);
    return rc;
}

/* get → 0 when the bytes and the meta are those put with (seed, bytes). */
static inline int check(hy_nvme *n, uint64_t seed, uint64_t bytes)
{
    hy_meta want = meta_of(seed, bytes), got;
    uint8_t *ref = payload(bytes, seed), *buf = aligned_alloc(HY_PAGE, padded(bytes));
    memset(buf, 0xee, padded(bytes));
    hy_err e = {0};
    int rc = hy_nvme_get(n, &want.key, buf, padded(bytes), &got, &e);
    if (rc == 0 && (memcmp(buf, ref, bytes) != 0 || got.bytes != bytes ||
                    strcmp(got.tenant, want.tenant) != 0 || got.ntags != 2 ||
                    strcmp(got.tags[0], want.tags[0]) != 0 || got.tokens != want.tokens ||
                    got.flops != want.flops || got.expires_ns != want.expires_ns ||
                    memcmp(got.model, want.model, 32) != 0 || got.created_ns == 0))
        rc = -100;
    free(ref), free(buf);
    return rc;
}

static inline hy_nvme_stats stats(hy_nvme *n)
{
    hy_nvme_stats s;
    hy_nvme_stats_get(n, &s);
    return s;
}

static inline void extent_file(const char *dir, uint32_t id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/extents/extent-%06u.dat", dir, id);
}

#endif
