/*
 * A small open-addressing hash map from 64-bit object ids to 32-bit values
 * (node indices, counters), private to tiers/. Linear probing over a
 * power-of-two table kept at most half full; deletion shifts the following
 * run back (no tombstones), so lookups stay short however many ids come and
 * go. Ids are mixed before probing, so sequential ids spread as well as the
 * uniform ids of real keys. Every operation is O(1) expected.
 */
#ifndef HY_IDMAP_H
#define HY_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HY_IDMAP_NONE UINT32_MAX /* a value no entry holds: marks empty slots */

typedef struct hy_idmap {
    uint64_t *keys;
    uint32_t *vals; /* HY_IDMAP_NONE: an empty slot */
    size_t cap;     /* slots, a power of two (0 before the first put) */
    size_t n;       /* entries */
} hy_idmap;

/* Frees the tables; the map is empty (and usable) afterwards. */
void hy_idmap_clear(hy_idmap *m);
/* The value of id, or HY_IDMAP_NONE when absent. */
uint32_t hy_idmap_get(const hy_idmap *m, uint64_t id);
/* Sets id's value (val != HY_IDMAP_NONE), inserting id when absent. 0, or
 * HY_ENOMEM when the table could not grow (the map is unchanged). */
int hy_idmap_put(hy_idmap *m, uint64_t id, uint32_t val);
/* Removes id; returns whether it was present. */
bool hy_idmap_del(hy_idmap *m, uint64_t id);

#endif
