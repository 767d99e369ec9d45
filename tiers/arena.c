/*
 * The host tier's arena (arena.h): one anonymous mapping carved into
 * page-aligned blocks.
 *
 * Memory. The region is reserved 2 MiB-aligned (so transparent huge pages can
 * back all of it), advised MADV_HUGEPAGE, and only then populated: populating
 * first (MAP_POPULATE at mmap time) would fault every page in as 4 KiB before
 * the advice exists, and with THP in "madvise" mode the arena would get no
 * huge pages at all. Population is by mlock when the limit allows it (locking
 * faults pages in), else by MADV_POPULATE_WRITE, else by touching each page.
 * Neither the advice nor the lock is required: stats say whether each took.
 *
 * Free extents live in a treap keyed by offset, each node also holding the
 * largest extent length in its subtree. First fit is then a single descent
 * (go left while the left subtree has a large enough extent), O(log n) in
 * the number of free extents rather than a scan; release finds its two
 * neighbours in O(log n) and merges with those that touch it, so free
 * extents are always maximal and never adjacent. The treap's priorities
 * come from a fixed-seed generator: layouts are reproducible run to run.
 *
 * Live blocks live in an open-addressing hash table (offset → size, linear
 * probing, backward-shift deletion): O(1) expected for release and
 * block_size.
 *
 * Release never allocates: free extents number at most live blocks + 1 (they
 * are maximal, so live blocks separate them), and alloc grows the node pool
 * and the hash table before it commits, so an out-of-memory can only surface
 * as HY_ENOMEM from alloc.
 */
#include "tiers/arena.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older kernels answer EINVAL */
#endif

#define HUGE_ALIGN ((size_t)2 << 20)

/* A free extent [off, off + len), bytes, in the treap. Index 0 is the null
 * node (max 0); free slots are chained through l. */
typedef struct ext_node {
    size_t off, len;
    size_t max; /* the largest len in this subtree */
    uint32_t l, r;
    uint32_t prio;
} ext_node;

/* A live block: key = offset / HY_PAGE + 1 (0 marks an empty slot). */
typedef struct blk_slot {
    size_t key;
    size_t size;
} blk_slot;

struct hy_arena {
    uint8_t *base;
    size_t capacity;
    void *map; /* what mmap returned, for munmap */
    size_t map_len;
    bool locked, huge_pages;

    ext_node *nodes; /* [node_cap]; [0] is null */
    uint32_t node_cap, node_free, root;
    size_t free_extents;
    uint64_t rng;

    blk_slot *tab; /* [tab_cap], a power of two, at most half full */
    size_t tab_cap;
    unsigned tab_shift; /* 64 − log2(tab_cap): Fibonacci hashing keeps the top bits */
    size_t blocks, used;
};

/* Broken invariants stop the process in every build, not only with asserts
 * enabled: carrying on would hand the same bytes to two entries. */
static void arena_die(const char *what, size_t off)
{
    fprintf(stderr, "hy_arena: %s (offset %zu)\n", what, off);
    abort();
}

/* --- the free-extent treap ------------------------------------------------- */

static void pull(hy_arena *a, uint32_t t)
{
    ext_node *n = &a->nodes[t];
    n->max = HY_MAX(n->len, HY_MAX(a->nodes[n->l].max, a->nodes[n->r].max));
}

/* Takes a slot from the pool; the pool was sized by reserve() beforehand. */
static uint32_t node_new(hy_arena *a, size_t off, size_t len)
{
    uint32_t t = a->node_free;
    if (!t) arena_die("free-extent pool exhausted", off);
    a->node_free = a->nodes[t].l;
    a->rng ^= a->rng << 13, a->rng ^= a->rng >> 7, a->rng ^= a->rng << 17;
    a->nodes[t] = (ext_node){.off = off, .len = len, .max = len, .prio = (uint32_t)(a->rng >> 32)};
    a->free_extents++;
    return t;
}

static void node_put(hy_arena *a, uint32_t t)
{
    a->nodes[t].l = a->node_free;
    a->node_free = t;
    a->free_extents--;
}

/* Splits t into keys < key (*lo) and keys >= key (*hi). */
static void split(hy_arena *a, uint32_t t, size_t key, uint32_t *lo, uint32_t *hi)
{
    if (!t) {
        *lo = *hi = 0;
        return;
    }
    ext_node *n = &a->nodes[t];
    if (n->off < key) {
        split(a, n->r, key, &n->r, hi);
        *lo = t;
    } else {
        split(a, n->l, key, lo, &n->l);
        *hi = t;
    }
    pull(a, t);
}

/* Joins two treaps, every key of lo below every key of hi. */
static uint32_t merge(hy_arena *a, uint32_t lo, uint32_t hi)
{
    if (!lo || !hi) return lo ? lo : hi;
    if (a->nodes[lo].prio > a->nodes[hi].prio) {
        a->nodes[lo].r = merge(a, a->nodes[lo].r, hi);
        pull(a, lo);
        return lo;
    }
    a->nodes[hi].l = merge(a, lo, a->nodes[hi].l);
    pull(a, hi);
    return hi;
}

static void ext_insert(hy_arena *a, size_t off, size_t len)
{
    uint32_t lo, hi;
    split(a, a->root, off, &lo, &hi);
    a->root = merge(a, merge(a, lo, node_new(a, off, len)), hi);
}

static void ext_erase(hy_arena *a, size_t off)
{
    uint32_t lo, mid, hi;
    split(a, a->root, off, &lo, &mid);
    split(a, mid, off + 1, &mid, &hi);
    assert(mid && a->nodes[mid].off == off && !a->nodes[mid].l && !a->nodes[mid].r);
    node_put(a, mid);
    a->root = merge(a, lo, hi);
}

/* The extent with the largest offset below off, or the one with the smallest
 * offset above it (0 when none). */
static uint32_t ext_neighbour(const hy_arena *a, size_t off, bool below)
{
    uint32_t t = a->root, best = 0;
    while (t) {
        const ext_node *n = &a->nodes[t];
        if (below ? n->off < off : n->off > off) {
            best = t;
            t = below ? n->r : n->l;
        } else {
            t = below ? n->l : n->r;
        }
    }
    return best;
}

/* Carves len bytes off the front of the lowest-offset extent that holds them
 * (t->max >= len is the caller's check); returns the new subtree root. */
static uint32_t ext_take(hy_arena *a, uint32_t t, size_t len, size_t *off)
{
    ext_node *n = &a->nodes[t];
    if (a->nodes[n->l].max >= len) {
        n->l = ext_take(a, n->l, len, off);
    } else if (n->len >= len) {
        *off = n->off;
        if (n->len == len) {
            uint32_t sub = merge(a, n->l, n->r);
            node_put(a, t);
            return sub;
        }
        n->off += len; /* stays between its neighbours: order holds */
        n->len -= len;
    } else {
        n->r = ext_take(a, n->r, len, off);
    }
    pull(a, t);
    return t;
}

/* --- the live-block table -------------------------------------------------- */

static size_t tab_home(const hy_arena *a, size_t key)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> a->tab_shift);
}

static size_t tab_find(const hy_arena *a, size_t off)
{
    const size_t key = off / HY_PAGE + 1;
    for (size_t i = tab_home(a, key);; i = (i + 1) & (a->tab_cap - 1)) {
        if (a->tab[i].key == key || !a->tab[i].key) return i;
    }
}

static void tab_put(hy_arena *a, size_t off, size_t size)
{
    size_t i = tab_find(a, off);
    assert(!a->tab[i].key);
    a->tab[i] = (blk_slot){off / HY_PAGE + 1, size};
}

/* Removes slot i, shifting later members of its probe run back so every key
 * stays reachable from its home slot. */
static void tab_del(hy_arena *a, size_t i)
{
    const size_t mask = a->tab_cap - 1;
    for (size_t j = (i + 1) & mask; a->tab[j].key; j = (j + 1) & mask) {
        size_t h = tab_home(a, a->tab[j].key);
        if (((j - h) & mask) >= ((j - i) & mask)) { /* home at or before the hole */
            a->tab[i] = a->tab[j];
            i = j;
        }
    }
    a->tab[i].key = 0;
}

/* Doubles the table and rehashes. */
static int tab_grow(hy_arena *a)
{
    blk_slot *old = a->tab;
    size_t old_cap = a->tab_cap, cap = 2 * old_cap;
    blk_slot *tab = calloc(cap, sizeof *tab);
    if (!tab) return HY_ENOMEM;
    a->tab = tab, a->tab_cap = cap, a->tab_shift--;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) tab_put(a, (old[i].key - 1) * HY_PAGE, old[i].size);
    free(old);
    return HY_OK;
}

/* Makes room for one more live block: a table slot at load <= 1/2 and an
 * extent node for every extent a later release could create. */
static int reserve(hy_arena *a)
{
    if (2 * (a->blocks + 1) > a->tab_cap && tab_grow(a)) return HY_ENOMEM;
    if (a->blocks + 2 >= a->node_cap) { /* slots 1..cap-1 >= blocks + 2 extents */
        if (a->node_cap > UINT32_MAX / 2) return HY_ENOMEM;
        uint32_t cap = 2 * a->node_cap;
        ext_node *n = realloc(a->nodes, cap * sizeof *n);
        if (!n) return HY_ENOMEM;
        for (uint32_t t = a->node_cap; t < cap; t++) n[t].l = t + 1 < cap ? t + 1 : a->node_free;
        a->node_free = a->node_cap;
        a->nodes = n, a->node_cap = cap;
    }
    return HY_OK;
}

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
    if (!a) return hy_err_set(err, HY_ENOMEM, "arena: out of memory");
    a->capacity = bytes;
    a->rng = 0x2545F4914F6CDD1Dull;
    a->node_cap = 64;
    a->nodes = calloc(a->node_cap, sizeof *a->nodes);
    a->tab_cap = 64;
    a->tab_shift = 64 - 6;
    a->tab = calloc(a->tab_cap, sizeof *a->tab);
    if (!a->nodes || !a->tab) {
        hy_arena_free_all(a);
        return hy_err_set(err, HY_ENOMEM, "arena: out of memory");
    }
    for (uint32_t t = 1; t < a->node_cap; t++) a->nodes[t].l = t + 1 < a->node_cap ? t + 1 : 0;
    a->node_free = 1;
    int rc = map_region(a, bytes, err);
    if (rc) {
        hy_arena_free_all(a);
        return rc;
    }
    a->root = node_new(a, 0, bytes);
    *out = a;
    return HY_OK;
}

void hy_arena_free_all(hy_arena *a)
{
    if (!a) return;
    if (a->map) munmap(a->map, a->map_len); /* also drops the lock */
    free(a->nodes);
    free(a->tab);
    free(a);
}

int hy_arena_alloc(hy_arena *a, size_t bytes, size_t *off)
{
    assert(a && off);
    if (bytes == 0) return HY_EINVAL;
    if (bytes > a->capacity) return HY_ERANGE; /* no eviction could make room */
    const size_t len = (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
    if (a->nodes[a->root].max < len) return HY_ENOMEM;
    if (reserve(a)) return HY_ENOMEM;
    a->root = ext_take(a, a->root, len, off);
    tab_put(a, *off, len);
    a->blocks++;
    a->used += len;
    return HY_OK;
}

void hy_arena_release(hy_arena *a, size_t off)
{
    assert(a);
    if (off % HY_PAGE || off >= a->capacity) arena_die("release of a foreign offset", off);
    size_t i = tab_find(a, off);
    if (!a->tab[i].key) arena_die("release of an offset that is not a live block", off);
    const size_t size = a->tab[i].size;
    tab_del(a, i);
    a->blocks--;
    a->used -= size;

    size_t start = off, len = size;
    uint32_t p = ext_neighbour(a, off, true), s = ext_neighbour(a, off, false);
    if (p && a->nodes[p].off + a->nodes[p].len > off) arena_die("free extent overlaps block", off);
    if (s && a->nodes[s].off < off + size) arena_die("free extent overlaps block", off);
    if (s && a->nodes[s].off == off + size) {
        len += a->nodes[s].len;
        ext_erase(a, a->nodes[s].off);
    }
    if (p && a->nodes[p].off + a->nodes[p].len == off) {
        start = a->nodes[p].off;
        len += a->nodes[p].len;
        ext_erase(a, start);
    }
    ext_insert(a, start, len);
}

void *hy_arena_ptr(hy_arena *a, size_t off)
{
    assert(a && off < a->capacity && off % HY_PAGE == 0);
    return a->base + off;
}

size_t hy_arena_block_size(const hy_arena *a, size_t off)
{
    if (off % HY_PAGE || off >= a->capacity) return 0;
    size_t i = tab_find(a, off);
    return a->tab[i].key ? a->tab[i].size : 0;
}

void hy_arena_stats_get(const hy_arena *a, hy_arena_stats *st)
{
    *st = (hy_arena_stats){
        .capacity = a->capacity,
        .used = a->used,
        .free_bytes = a->capacity - a->used,
        .largest_free = a->nodes[a->root].max,
        .free_extents = a->free_extents,
        .blocks = a->blocks,
        .locked = a->locked,
        .huge_pages = a->huge_pages,
    };
    if (st->free_bytes) st->fragmentation = 1.0 - (double)st->largest_free / (double)st->free_bytes;
}

/* In-order walk for hy_arena_check: extents sorted, disjoint, non-adjacent,
 * within capacity, heap-ordered, with correct subtree maxima. */
static int check_tree(const hy_arena *a, uint32_t t, size_t *end, size_t *sum, size_t *count)
{
    if (!t) return 0;
    const ext_node *n = &a->nodes[t];
    if (check_tree(a, n->l, end, sum, count)) return -1;
    if (n->len == 0 || n->len % HY_PAGE || n->off % HY_PAGE) return -1;
    if (*count && n->off <= *end) return -1; /* overlapping or touching */
    if (n->off + n->len > a->capacity) return -1;
    if ((n->l && a->nodes[n->l].prio > n->prio) || (n->r && a->nodes[n->r].prio > n->prio))
        return -1;
    if (n->max != HY_MAX(n->len, HY_MAX(a->nodes[n->l].max, a->nodes[n->r].max))) return -1;
    *end = n->off + n->len, *sum += n->len, (*count)++;
    return check_tree(a, n->r, end, sum, count);
}

int hy_arena_check(const hy_arena *a, hy_err *err)
{
    size_t end = 0, sum = 0, count = 0, live = 0, live_bytes = 0;
    if (check_tree(a, a->root, &end, &sum, &count))
        return hy_err_set(err, HY_EFORMAT, "arena: free-extent tree is malformed");
    for (size_t i = 0; i < a->tab_cap; i++) {
        if (!a->tab[i].key) continue;
        live++, live_bytes += a->tab[i].size;
        size_t off = (a->tab[i].key - 1) * HY_PAGE;
        if (off + a->tab[i].size > a->capacity || a->tab[i].size % HY_PAGE)
            return hy_err_set(err, HY_EFORMAT, "arena: block at %zu out of bounds", off);
    }
    if (count != a->free_extents || live != a->blocks || live_bytes != a->used ||
        sum + a->used != a->capacity)
        return hy_err_set(err, HY_EFORMAT,
                          "arena: counts disagree (extents %zu/%zu, blocks %zu/%zu, "
                          "free %zu + used %zu != capacity %zu)",
                          count, a->free_extents, live, a->blocks, sum, a->used, a->capacity);
    if (a->free_extents > a->blocks + 1)
        return hy_err_set(err, HY_EFORMAT, "arena: %zu free extents for %zu blocks",
                          a->free_extents, a->blocks);
    return HY_OK;
}
