/*
 * Free space inside one extent file: a sorted array of free runs. Allocation
 * is first fit (the lowest offset that fits), which keeps live payloads packed
 * towards the start of each extent; freeing merges the run with its
 * neighbours, so a removed entry's bytes and the holes around it become one
 * run again. Extents hold a few hundred MB-sized payloads, so a linear scan
 * and memmove are cheaper than a tree and easier to check.
 *
 * Not thread-safe: nvme.c holds its mutex around every call. The map is not
 * persisted; nvme.c rebuilds it on open from the catalog's records with
 * nv_space_take().
 */
#include "nvme_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

int nv_space_init(nv_space *s, uint64_t size)
{
    memset(s, 0, sizeof *s);
    s->runs = malloc(4 * sizeof *s->runs);
    if (!s->runs) return HY_ENOMEM;
    s->cap = 4;
    s->size = size;
    s->runs[0] = (nv_run){0, size};
    s->n = 1;
    s->free_bytes = size;
    return HY_OK;
}

void nv_space_release(nv_space *s)
{
    free(s->runs);
    memset(s, 0, sizeof *s);
}

/* Makes room for one more run at index i (shifting the tail). */
static int insert_at(nv_space *s, size_t i, nv_run r)
{
    if (s->n == s->cap) {
        nv_run *g = realloc(s->runs, 2 * s->cap * sizeof *g);
        if (!g) return HY_ENOMEM;
        s->runs = g, s->cap *= 2;
    }
    memmove(s->runs + i + 1, s->runs + i, (s->n - i) * sizeof *s->runs);
    s->runs[i] = r;
    s->n++;
    return HY_OK;
}

static void remove_at(nv_space *s, size_t i)
{
    memmove(s->runs + i, s->runs + i + 1, (s->n - i - 1) * sizeof *s->runs);
    s->n--;
}

int nv_space_alloc(nv_space *s, uint64_t len, uint64_t *off)
{
    assert(len > 0);
    for (size_t i = 0; i < s->n; i++) {
        nv_run *r = &s->runs[i];
        if (r->len < len) continue;
        *off = r->off;
        r->off += len, r->len -= len;
        if (r->len == 0) remove_at(s, i);
        s->free_bytes -= len;
        return HY_OK;
    }
    return HY_ENOMEM;
}

int nv_space_take(nv_space *s, uint64_t off, uint64_t len)
{
    if (len == 0 || off > s->size || len > s->size - off) return HY_EINVAL;
    for (size_t i = 0; i < s->n; i++) {
        nv_run *r = &s->runs[i];
        if (off < r->off) break; /* runs are sorted: no later run holds off */
        if (off + len > r->off + r->len) continue;
        uint64_t end = r->off + r->len;
        if (off > r->off && off + len < end) { /* from the middle: split in two */
            if (insert_at(s, i + 1, (nv_run){off + len, end - off - len})) return HY_ENOMEM;
            s->runs[i].len = off - s->runs[i].off;
        } else if (off > r->off) { /* the tail */
            r->len = off - r->off;
        } else { /* the head, or all of it */
            r->off += len, r->len -= len;
            if (r->len == 0) remove_at(s, i);
        }
        s->free_bytes -= len;
        return HY_OK;
    }
    return HY_EINVAL;
}

int nv_space_free(nv_space *s, uint64_t off, uint64_t len)
{
    assert(len > 0 && off + len <= s->size);
    size_t i = 0; /* the first run after the freed bytes */
    while (i < s->n && s->runs[i].off < off) i++;
    assert(i == 0 || s->runs[i - 1].off + s->runs[i - 1].len <= off); /* not free already */
    assert(i == s->n || off + len <= s->runs[i].off);
    bool join_prev = i > 0 && s->runs[i - 1].off + s->runs[i - 1].len == off;
    bool join_next = i < s->n && off + len == s->runs[i].off;
    if (join_prev && join_next) {
        s->runs[i - 1].len += len + s->runs[i].len;
        remove_at(s, i);
    } else if (join_prev) {
        s->runs[i - 1].len += len;
    } else if (join_next) {
        s->runs[i].off = off, s->runs[i].len += len;
    } else if (insert_at(s, i, (nv_run){off, len})) {
        return HY_ENOMEM;
    }
    s->free_bytes += len;
    return HY_OK;
}

uint64_t nv_space_largest(const nv_space *s)
{
    uint64_t m = 0;
    for (size_t i = 0; i < s->n; i++) m = HY_MAX(m, s->runs[i].len);
    return m;
}
