/*
 * The policies' id map (idmap_internal.h): linear probing, at most half full, with
 * backward-shift deletion.
 */
#include "idmap_internal.h"
#include "hy_common.h"

#include <assert.h>
#include <stdlib.h>

/* splitmix64's finaliser: every input bit moves every output bit. */
static inline size_t slot_of(uint64_t id, size_t cap)
{
    id ^= id >> 30;
    id *= 0xbf58476d1ce4e5b9ull;
    id ^= id >> 27;
    id *= 0x94d049bb133111ebull;
    id ^= id >> 31;
    return (size_t)id & (cap - 1);
}

void hy_idmap_clear(hy_idmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL, m->vals = NULL, m->cap = 0, m->n = 0;
}

uint32_t hy_idmap_get(const hy_idmap *m, uint64_t id)
{
    if (!m->cap) return HY_IDMAP_NONE;
    for (size_t i = slot_of(id, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->vals[i] == HY_IDMAP_NONE) return HY_IDMAP_NONE;
        if (m->keys[i] == id) return m->vals[i];
    }
}

/* Places (id, val) in a table known not to hold id and to have room. */
static void place(uint64_t *keys, uint32_t *vals, size_t cap, uint64_t id, uint32_t val)
{
    size_t i = slot_of(id, cap);
    while (vals[i] != HY_IDMAP_NONE) i = (i + 1) & (cap - 1);
    keys[i] = id, vals[i] = val;
}

static int grow(hy_idmap *m)
{
    size_t cap = m->cap ? 2 * m->cap : 16;
    uint64_t *keys = malloc(cap * sizeof *keys);
    uint32_t *vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
        free(keys), free(vals);
        return HY_ENOMEM;
    }
    for (size_t i = 0; i < cap; i++) vals[i] = HY_IDMAP_NONE;
    for (size_t i = 0; i < m->cap; i++)
        if (m->vals[i] != HY_IDMAP_NONE) place(keys, vals, cap, m->keys[i], m->vals[i]);
    free(m->keys), free(m->vals);
    m->keys = keys, m->vals = vals, m->cap = cap;
    return 0;
}

int hy_idmap_put(hy_idmap *m, uint64_t id, uint32_t val)
{
    assert(val != HY_IDMAP_NONE);
    if (m->cap) {
        for (size_t i = slot_of(id, m->cap); m->vals[i] != HY_IDMAP_NONE;
             i = (i + 1) & (m->cap - 1))
            if (m->keys[i] == id) {
                m->vals[i] = val;
                return 0;
            }
    }
    if (2 * (m->n + 1) > m->cap && grow(m)) return HY_ENOMEM;
    place(m->keys, m->vals, m->cap, id, val);
    m->n++;
    return 0;
}

bool hy_idmap_del(hy_idmap *m, uint64_t id)
{
    if (!m->cap) return false;
    const size_t mask = m->cap - 1;
    size_t i = slot_of(id, m->cap);
    for (;; i = (i + 1) & mask) {
        if (m->vals[i] == HY_IDMAP_NONE) return false;
        if (m->keys[i] == id) break;
    }
    /* Shift back every entry of the run after i that may live at i: one whose
     * home slot is not cyclically within (i, j]. */
    for (size_t j = (i + 1) & mask; m->vals[j] != HY_IDMAP_NONE; j = (j + 1) & mask) {
        size_t home = slot_of(m->keys[j], m->cap);
        bool stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (stays) continue;
        m->keys[i] = m->keys[j], m->vals[i] = m->vals[j];
        i = j;
    }
    m->vals[i] = HY_IDMAP_NONE;
    m->n--;
    return true;
}
