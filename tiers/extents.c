/*
 * The block allocator of the host arena and the hbm tier (extents_internal.h): offsets
 * only, no memory of its own.
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
#include "extents_internal.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

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

struct hy_extents {
    const char *name; /* prefixes messages: "arena", "hbm" */
    size_t capacity;

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
static void extents_die(const hy_extents *x, const char *what, size_t off)
{
    fprintf(stderr, "hy_%s: %s (offset %zu)\n", x->name, what, off);
    abort();
}

/* --- the free-extent treap ------------------------------------------------- */

static void pull(hy_extents *x, uint32_t t)
{
    ext_node *n = &x->nodes[t];
    n->max = HY_MAX(n->len, HY_MAX(x->nodes[n->l].max, x->nodes[n->r].max));
}

/* Takes a slot from the pool; the pool was sized by reserve() beforehand. */
static uint32_t node_new(hy_extents *x, size_t off, size_t len)
{
    uint32_t t = x->node_free;
    if (!t) extents_die(x, "free-extent pool exhausted", off);
    x->node_free = x->nodes[t].l;
    x->rng ^= x->rng << 13, x->rng ^= x->rng >> 7, x->rng ^= x->rng << 17;
    x->nodes[t] = (ext_node){.off = off, .len = len, .max = len, .prio = (uint32_t)(x->rng >> 32)};
    x->free_extents++;
    return t;
}

static void node_put(hy_extents *x, uint32_t t)
{
    x->nodes[t].l = x->node_free;
    x->node_free = t;
    x->free_extents--;
}

/* Splits t into keys < key (*lo) and keys >= key (*hi). */
static void split(hy_extents *x, uint32_t t, size_t key, uint32_t *lo, uint32_t *hi)
{
    if (!t) {
        *lo = *hi = 0;
        return;
    }
    ext_node *n = &x->nodes[t];
    if (n->off < key) {
        split(x, n->r, key, &n->r, hi);
        *lo = t;
    } else {
        split(x, n->l, key, lo, &n->l);
        *hi = t;
    }
    pull(x, t);
}

/* Joins two treaps, every key of lo below every key of hi. */
static uint32_t merge(hy_extents *x, uint32_t lo, uint32_t hi)
{
    if (!lo || !hi) return lo ? lo : hi;
    if (x->nodes[lo].prio > x->nodes[hi].prio) {
        x->nodes[lo].r = merge(x, x->nodes[lo].r, hi);
        pull(x, lo);
        return lo;
    }
    x->nodes[hi].l = merge(x, lo, x->nodes[hi].l);
    pull(x, hi);
    return hi;
}

static void ext_insert(hy_extents *x, size_t off, size_t len)
{
    uint32_t lo, hi;
    split(x, x->root, off, &lo, &hi);
    x->root = merge(x, merge(x, lo, node_new(x, off, len)), hi);
}

static void ext_erase(hy_extents *x, size_t off)
{
    uint32_t lo, mid, hi;
    split(x, x->root, off, &lo, &mid);
    split(x, mid, off + 1, &mid, &hi);
    assert(mid && x->nodes[mid].off == off && !x->nodes[mid].l && !x->nodes[mid].r);
    node_put(x, mid);
    x->root = merge(x, lo, hi);
}

/* The extent with the largest offset below off, or the one with the smallest
 * offset above it (0 when none). */
static uint32_t ext_neighbour(const hy_extents *x, size_t off, bool below)
{
    uint32_t t = x->root, best = 0;
    while (t) {
        const ext_node *n = &x->nodes[t];
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
static uint32_t ext_take(hy_extents *x, uint32_t t, size_t len, size_t *off)
{
    ext_node *n = &x->nodes[t];
    if (x->nodes[n->l].max >= len) {
        n->l = ext_take(x, n->l, len, off);
    } else if (n->len >= len) {
        *off = n->off;
        if (n->len == len) {
            uint32_t sub = merge(x, n->l, n->r);
            node_put(x, t);
            return sub;
        }
        n->off += len; /* stays between its neighbours: order holds */
        n->len -= len;
    } else {
        n->r = ext_take(x, n->r, len, off);
    }
    pull(x, t);
    return t;
}

/* --- the live-block table -------------------------------------------------- */

static size_t tab_home(const hy_extents *x, size_t key)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> x->tab_shift);
}

static size_t tab_find(const hy_extents *x, size_t off)
{
    const size_t key = off / HY_PAGE + 1;
    for (size_t i = tab_home(x, key);; i = (i + 1) & (x->tab_cap - 1)) {
        if (x->tab[i].key == key || !x->tab[i].key) return i;
    }
}

static void tab_put(hy_extents *x, size_t off, size_t size)
{
    size_t i = tab_find(x, off);
    assert(!x->tab[i].key);
    x->tab[i] = (blk_slot){off / HY_PAGE + 1, size};
}

/* Removes slot i, shifting later members of its probe run back so every key
 * stays reachable from its home slot. */
static void tab_del(hy_extents *x, size_t i)
{
    const size_t mask = x->tab_cap - 1;
    for (size_t j = (i + 1) & mask; x->tab[j].key; j = (j + 1) & mask) {
        size_t h = tab_home(x, x->tab[j].key);
        if (((j - h) & mask) >= ((j - i) & mask)) { /* home at or before the hole */
            x->tab[i] = x->tab[j];
            i = j;
        }
    }
    x->tab[i].key = 0;
}

/* Doubles the table and rehashes. */
static int tab_grow(hy_extents *x)
{
    blk_slot *old = x->tab;
    size_t old_cap = x->tab_cap, cap = 2 * old_cap;
    blk_slot *tab = calloc(cap, sizeof *tab);
    if (!tab) return HY_ENOMEM;
    x->tab = tab, x->tab_cap = cap, x->tab_shift--;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].key) tab_put(x, (old[i].key - 1) * HY_PAGE, old[i].size);
    free(old);
    return HY_OK;
}

/* Makes room for one more live block: a table slot at load <= 1/2 and an
 * extent node for every extent a later release could create. */
static int reserve(hy_extents *x)
{
    if (2 * (x->blocks + 1) > x->tab_cap && tab_grow(x)) return HY_ENOMEM;
    if (x->blocks + 2 >= x->node_cap) { /* slots 1..cap-1 >= blocks + 2 extents */
        if (x->node_cap > UINT32_MAX / 2) return HY_ENOMEM;
        uint32_t cap = 2 * x->node_cap;
        ext_node *n = realloc(x->nodes, cap * sizeof *n);
        if (!n) return HY_ENOMEM;
        for (uint32_t t = x->node_cap; t < cap; t++) n[t].l = t + 1 < cap ? t + 1 : x->node_free;
        x->node_free = x->node_cap;
        x->nodes = n, x->node_cap = cap;
    }
    return HY_OK;
}

/* --- the API --------------------------------------------------------------- */

int hy_extents_new(const char *name, size_t capacity, hy_extents **out)
{
    assert(capacity > 0 && capacity % HY_PAGE == 0 && capacity <= ((size_t)1 << 48));
    *out = NULL;
    hy_extents *x = calloc(1, sizeof *x);
    if (!x) return HY_ENOMEM;
    x->name = name;
    x->capacity = capacity;
    x->rng = 0x2545F4914F6CDD1Dull;
    x->node_cap = 64;
    x->nodes = calloc(x->node_cap, sizeof *x->nodes);
    x->tab_cap = 64;
    x->tab_shift = 64 - 6;
    x->tab = calloc(x->tab_cap, sizeof *x->tab);
    if (!x->nodes || !x->tab) {
        hy_extents_free(x);
        return HY_ENOMEM;
    }
    for (uint32_t t = 1; t < x->node_cap; t++) x->nodes[t].l = t + 1 < x->node_cap ? t + 1 : 0;
    x->node_free = 1;
    x->root = node_new(x, 0, capacity);
    *out = x;
    return HY_OK;
}

void hy_extents_free(hy_extents *x)
{
    if (!x) return;
    free(x->nodes);
    free(x->tab);
    free(x);
}

int hy_extents_alloc(hy_extents *x, size_t bytes, size_t *off)
{
    assert(x && off);
    if (bytes == 0) return HY_EINVAL;
    if (bytes > x->capacity) return HY_ERANGE; /* no eviction could make room */
    const size_t len = (bytes + HY_PAGE - 1) / HY_PAGE * HY_PAGE;
    if (x->nodes[x->root].max < len) return HY_ENOMEM;
    if (reserve(x)) return HY_ENOMEM;
    x->root = ext_take(x, x->root, len, off);
    tab_put(x, *off, len);
    x->blocks++;
    x->used += len;
    return HY_OK;
}

void hy_extents_release(hy_extents *x, size_t off)
{
    assert(x);
    if (off % HY_PAGE || off >= x->capacity) extents_die(x, "release of a foreign offset", off);
    size_t i = tab_find(x, off);
    if (!x->tab[i].key) extents_die(x, "release of an offset that is not a live block", off);
    const size_t size = x->tab[i].size;
    tab_del(x, i);
    x->blocks--;
    x->used -= size;

    size_t start = off, len = size;
    uint32_t p = ext_neighbour(x, off, true), s = ext_neighbour(x, off, false);
    if (p && x->nodes[p].off + x->nodes[p].len > off)
        extents_die(x, "free extent overlaps block", off);
    if (s && x->nodes[s].off < off + size) extents_die(x, "free extent overlaps block", off);
    if (s && x->nodes[s].off == off + size) {
        len += x->nodes[s].len;
        ext_erase(x, x->nodes[s].off);
    }
    if (p && x->nodes[p].off + x->nodes[p].len == off) {
        start = x->nodes[p].off;
        len += x->nodes[p].len;
        ext_erase(x, start);
    }
    ext_insert(x, start, len);
}

size_t hy_extents_block_size(const hy_extents *x, size_t off)
{
    if (off % HY_PAGE || off >= x->capacity) return 0;
    size_t i = tab_find(x, off);
    return x->tab[i].key ? x->tab[i].size : 0;
}

void hy_extents_stats_get(const hy_extents *x, hy_extents_stats *st)
{
    *st = (hy_extents_stats){
        .capacity = x->capacity,
        .used = x->used,
        .free_bytes = x->capacity - x->used,
        .largest_free = x->nodes[x->root].max,
        .free_extents = x->free_extents,
        .blocks = x->blocks,
    };
    if (st->free_bytes) st->fragmentation = 1.0 - (double)st->largest_free / (double)st->free_bytes;
}

/* In-order walk for hy_extents_check: extents sorted, disjoint, non-adjacent,
 * within capacity, heap-ordered, with correct subtree maxima. */
static int check_tree(const hy_extents *x, uint32_t t, size_t *end, size_t *sum, size_t *count)
{
    if (!t) return 0;
    const ext_node *n = &x->nodes[t];
    if (check_tree(x, n->l, end, sum, count)) return -1;
    if (n->len == 0 || n->len % HY_PAGE || n->off % HY_PAGE) return -1;
    if (*count && n->off <= *end) return -1; /* overlapping or touching */
    if (n->off + n->len > x->capacity) return -1;
    if ((n->l && x->nodes[n->l].prio > n->prio) || (n->r && x->nodes[n->r].prio > n->prio))
        return -1;
    if (n->max != HY_MAX(n->len, HY_MAX(x->nodes[n->l].max, x->nodes[n->r].max))) return -1;
    *end = n->off + n->len, *sum += n->len, (*count)++;
    return check_tree(x, n->r, end, sum, count);
}

int hy_extents_check(const hy_extents *x, hy_err *err)
{
    size_t end = 0, sum = 0, count = 0, live = 0, live_bytes = 0;
    if (check_tree(x, x->root, &end, &sum, &count))
        return hy_err_set(err, HY_EFORMAT, "%s: free-extent tree is malformed", x->name);
    for (size_t i = 0; i < x->tab_cap; i++) {
        if (!x->tab[i].key) continue;
        live++, live_bytes += x->tab[i].size;
        size_t off = (x->tab[i].key - 1) * HY_PAGE;
        if (off + x->tab[i].size > x->capacity || x->tab[i].size % HY_PAGE)
            return hy_err_set(err, HY_EFORMAT, "%s: block at %zu out of bounds", x->name, off);
    }
    if (count != x->free_extents || live != x->blocks || live_bytes != x->used ||
        sum + x->used != x->capacity)
        return hy_err_set(err, HY_EFORMAT,
                          "%s: counts disagree (extents %zu/%zu, blocks %zu/%zu, "
                          "free %zu + used %zu != capacity %zu)",
                          x->name, count, x->free_extents, live, x->blocks, sum, x->used,
                          x->capacity);
    if (x->free_extents > x->blocks + 1)
        return hy_err_set(err, HY_EFORMAT, "%s: %zu free extents for %zu blocks", x->name,
                          x->free_extents, x->blocks);
    return HY_OK;
}
