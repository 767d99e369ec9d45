/*
 * What the store's tests share: a key per entry number, and a payload
 * pattern per (entry number, size) — so a replaced entry of another size
 * reads differently — with its check. Included by test_store.c and
 * test_tier_moves.c.
 */
#ifndef HY_TEST_STORE_FIXTURE_H
#define HY_TEST_STORE_FIXTURE_H

#include "hy_common.h"
#include "hy_tiers.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static inline hy_key key_of(uint64_t n)
{
    hy_key k;
    uint8_t seed[8];
    memcpy(seed, &n, 8);
    hy_sha256(seed, 8, k.b);
    return k;
}

/* The payload of entry n: a pattern derived from n and its size. */
static inline void fill(void *buf, uint64_t n, size_t bytes)
{
    uint64_t *p = buf, x = (n ^ (uint64_t)bytes << 20) * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < bytes / 8; i++) p[i] = (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
    memset((char *)buf + bytes / 8 * 8, (int)(n & 0xff), bytes % 8);
}

static inline bool check(const void *buf, uint64_t n, size_t bytes)
{
    void *want = malloc(bytes);
    if (!want) return false;
    fill(want, n, bytes);
    bool ok = memcmp(want, buf, bytes) == 0;
    free(want);
    return ok;
}

#endif
