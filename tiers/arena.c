/*
 * The host tier's arena (arena_internal.h): one anonymous mapping carved into
 * page-aligned blocks by the allocator it shares with the hbm tier
 * (extents.c, which manages offsets only).
 *
 * Memory. The region is reserved 2 MiB-aligned (so transparent huge pages can
 * back all of it), advised MADV_HUGEPAGE, and only then populated: populating
 * first (MAP_POPULATE at mmap time) would fault every page in as 4 KiB before
 * the advice exists, and with THP in "madvise" mode the arena would get no
 * huge pages at all. Population is by mlock when the limit allows it (locking
 * faults pages in), else by MADV_POPULATE_WRITE, else by touching each page.
 * Neither the advice nor the lock is required: stats say whether each took.
 */
#include "arena_internal.h"
#include "extents_internal.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define HUGE_ALIGN ((size_t)2 << 20)

struct hy_arena {
    uint8_t *base;
    size_t capacity;
    void *map; /* what mmap returned, for munmap */
    size_t map_len;
    bool locked, huge_pages, pinned;
    hy_extents *ext; /* which blocks of [0, capacity) are live */
};

/* --- the mapping ----------------------------------------------------------- */

/* Reserves bytes at a 2 MiB boundary, advises huge pages, then faults the
 * pages in (see the top of the file for why in this order). */
static int map_region(hy_arena *a, size_t bytes, hy_err *err)
{
    a->map_len = bytes + HUGE_ALIGN;
    a->map = mmap(NULL, a->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->map == MAP_FAILED) {
        a->map = NULL;
        return hy_err_set(err, HY_ENOMEM, "arena: cannot map %zu bytes: %s", bytes,
                          strerror(errno));
    }
    uintptr_t start = ((uintptr_t)a->map + HUGE_ALIGN - 1) & ~(uintptr_t)(HUGE_ALIGN - 1);
    a->base = (uint8_t *)start;
    a->huge_pages = madvise(a->base, bytes, MADV_HUGEPAGE) == 0;
    a->locked = mlock(a->base, bytes) == 0;
    if (!a->locked && madvise(a->base, bytes, MADV_POPULATE_WRITE) != 0) {
        for (size_t o = 0; o < bytes; o += HY_PAGE) a->base[o] = 0;
    }
    return HY_OK;
}

/* --- the API --------------------------------------------------------------- */

int hy_arena_new(size_t bytes, hy_arena **out, hy_err *err)
{
    *out = NULL;
    if (bytes == 0) return hy_err_set(err, HY_EINVAL, "arena: capacity is 0 bytes");
    if (bytes > ((size_t)1 << 48))
        return hy_err_set(err, HY_ERANGE, "arena: capacity %zu exceeds 2^48 bytes", bytes);
    bytes = (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
    hy_arena *a = calloc(1, sizeof *a);
    if (!a || hy_extents_new("arena", bytes, &a->ext)) {
        hy_arena_free_all(a);
        return hy_err_set(err, HY_ENOMEM, "arena: out of memory");
    }
    a->capacity = bytes;
    int rc = map_region(a, bytes, err);
    if (rc) {
        hy_arena_free_all(a);
        return rc;
    }
    *out = a;
    return HY_OK;
}

void hy_arena_free_all(hy_arena *a)
{
    if (!a) return;
    if (a->map) munmap(a->map, a->map_len); /* also drops the lock */
    hy_extents_free(a->ext);
    free(a);
}

int hy_arena_alloc(hy_arena *a, size_t bytes, size_t *off)
{
    assert(a && off);
    return hy_extents_alloc(a->ext, bytes, off);
}

void hy_arena_release(hy_arena *a, size_t off)
{
    assert(a);
    hy_extents_release(a->ext, off);
}

void *hy_arena_ptr(hy_arena *a, size_t off)
{
    assert(a && off < a->capacity && off % HY_PAGE == 0);
    return a->base + off;
}

void *hy_arena_region(hy_arena *a, size_t *bytes)
{
    assert(a && bytes);
    *bytes = a->capacity;
    return a->base;
}

void hy_arena_set_pinned(hy_arena *a, bool pinned)
{
    assert(a);
    a->pinned = pinned;
}

size_t hy_arena_block_size(const hy_arena *a, size_t off)
{
    return hy_extents_block_size(a->ext, off);
}

void hy_arena_stats_get(const hy_arena *a, hy_arena_stats *st)
{
    hy_extents_stats x;
    hy_extents_stats_get(a->ext, &x);
    *st = (hy_arena_stats){
        HY_EXTENTS_STATS_INIT(x),
        .locked = a->locked,
        .huge_pages = a->huge_pages,
        .pinned = a->pinned,
    };
}

int hy_arena_check(const hy_arena *a, hy_err *err)
{
    return hy_extents_check(a->ext, err);
}
