/*
 * Eviction policies (policy_internal.h): which resident object a tier gives up next.
 *
 * Every kind keeps one node per tracked id in a pool, found through an
 * open-addressing map (idmap_internal.h), and orders the nodes with either intrusive
 * doubly-linked lists or a binary min-heap:
 *
 *   lru     one list, most recent at the head; access moves a node to the
 *           head, the victim is the tail. O(1).
 *   lfu     a heap keyed (references, last use): the least referenced, the
 *           least recent among equals. O(log n).
 *   gdsf    a heap keyed (priority, last use), priority = clock + references
 *           × cost / bytes; an eviction raises the clock to the evicted
 *           priority, so objects not touched since age relative to newcomers.
 *           O(log n).
 *   hybrid  the same heap, priority = clock + cost / bytes × (1 + log2(1 +
 *           hits)) (hits: accesses since insert): FLOPs saved per byte first,
 *           frequency damped to a logarithm, recency through the clock.
 *   s3fifo  three lists: small (new objects, ~10% of the capacity in bytes),
 *           main, and ghost (ids, with their sizes, of objects evicted from
 *           small, up to the main queue's bytes). A hit only bumps a 2-bit
 *           counter. Evicting from small moves objects hit while queued to
 *           main and evicts the others (they become ghosts); evicting from
 *           main reinserts objects with a non-zero counter at the head,
 *           decrementing it. An insert of a ghost id goes straight to main.
 *           O(1) amortised: each counter decrements at most three times.
 *
 * "Last use" and ordering between equal keys follow the order of calls (a
 * sequence number), which the caller's monotonic `now` agrees with; `now` is
 * not otherwise needed.
 *
 * victim() does not remove; the caller removes the object once it has been
 * evicted. A remove() of the id that victim() last returned (with no insert
 * or access in between) counts as an eviction: it is what raises the GDSF
 * and hybrid clocks and what makes an S3-FIFO ghost; any other remove()
 * (invalidation, TTL) just forgets the object.
 *
 * Pinned objects are skipped without being moved or forgotten: the list kinds
 * walk on from the tail past them, the heap kinds search the heap in key
 * order from the root (a small side heap of candidate positions), so asking
 * for a victim costs O(p) or O(p log p) more with p pinned objects ahead of
 * it — inherent in skipping them.
 *
 * Allocation: nodes, the map and the heap grow by doubling. insert() cannot
 * report a failure (its contract returns nothing): when growth fails the
 * object is left untracked and an error is logged.
 */
#include "idmap_internal.h"
#include "policy_internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NIL UINT32_MAX

enum { Q_NONE = 0, Q_LRU, Q_SMALL, Q_MAIN, Q_GHOST };

typedef struct node {
    uint64_t id, bytes;
    double cost;
    double prio;   /* heap kinds: the key (lfu: references) */
    uint64_t seq;  /* order of the last insert or access */
    uint32_t refs; /* lfu, gdsf, hybrid: accesses including the insert; s3fifo: 0..3 */
    uint32_t prev; /* toward the head (newer); the free list's link is next */
    uint32_t next; /* toward the tail (older) */
    uint32_t hpos; /* index in the heap */
    uint8_t queue; /* Q_*: the list holding the node */
} node;

typedef struct list {
    uint32_t head, tail; /* head: newest */
    uint64_t bytes;
    size_t n;
} list;

struct hy_evictor {
    hy_evict_kind kind;
    uint64_t capacity;
    node *nodes;
    uint32_t nnodes, cap_nodes, free_node;
    hy_idmap map; /* id -> node: resident objects and (s3fifo) ghosts */
    size_t resident;
    uint64_t seq;
    list lru, small, main, ghost;
    uint32_t *heap; /* node indices */
    size_t heap_n, heap_cap;
    uint32_t *scratch; /* victim search: heap positions, heap_cap of them */
    double clock;      /* gdsf, hybrid */
    uint64_t last_victim;
    bool has_last_victim;
};

static bool uses_heap(hy_evict_kind k)
{
    return k == HY_EVICT_LFU || k == HY_EVICT_GDSF || k == HY_EVICT_HYBRID;
}

/* --- node pool ----------------------------------------------------------- */

static uint32_t node_alloc(hy_evictor *ev)
{
    if (ev->free_node != NIL) {
        uint32_t i = ev->free_node;
        ev->free_node = ev->nodes[i].next;
        return i;
    }
    if (ev->nnodes == ev->cap_nodes) {
        if (ev->cap_nodes >= NIL / 2) return NIL;
        uint32_t cap = ev->cap_nodes ? 2 * ev->cap_nodes : 64;
        node *n = realloc(ev->nodes, (size_t)cap * sizeof *n);
        if (!n) return NIL;
        ev->nodes = n, ev->cap_nodes = cap;
    }
    return ev->nnodes++;
}

static void node_free(hy_evictor *ev, uint32_t i)
{
    ev->nodes[i].queue = Q_NONE;
    ev->nodes[i].next = ev->free_node;
    ev->free_node = i;
}

/* --- intrusive lists --------------------------------------------------------- */

static void list_init(list *l)
{
    l->head = l->tail = NIL, l->bytes = 0, l->n = 0;
}

static list *list_of(hy_evictor *ev, uint8_t q)
{
    switch (q) {
    case Q_LRU:
        return &ev->lru;
    case Q_SMALL:
        return &ev->small;
    case Q_MAIN:
        return &ev->main;
    case Q_GHOST:
        return &ev->ghost;
    }
    return NULL;
}

static void list_push_head(hy_evictor *ev, uint8_t q, uint32_t i)
{
    list *l = list_of(ev, q);
    node *x = &ev->nodes[i];
    x->queue = q, x->prev = NIL, x->next = l->head;
    if (l->head != NIL) ev->nodes[l->head].prev = i;
    l->head = i;
    if (l->tail == NIL) l->tail = i;
    l->bytes += x->bytes, l->n++;
}

static void list_unlink(hy_evictor *ev, uint32_t i)
{
    node *x = &ev->nodes[i];
    list *l = list_of(ev, x->queue);
    assert(l && l->n > 0);
    if (x->prev != NIL)
        ev->nodes[x->prev].next = x->next;
    else
        l->head = x->next;
    if (x->next != NIL)
        ev->nodes[x->next].prev = x->prev;
    else
        l->tail = x->prev;
    l->bytes -= x->bytes, l->n--;
    x->queue = Q_NONE, x->prev = x->next = NIL;
}

/* --- binary min-heap on (prio, seq) ---------------------------------------- */

static bool before(const hy_evictor *ev, uint32_t a, uint32_t b)
{
    const node *x = &ev->nodes[a], *y = &ev->nodes[b];
    return x->prio < y->prio || (x->prio == y->prio && x->seq < y->seq);
}

static void heap_set(hy_evictor *ev, size_t pos, uint32_t i)
{
    ev->heap[pos] = i;
    ev->nodes[i].hpos = (uint32_t)pos;
}

static void heap_up(hy_evictor *ev, size_t pos)
{
    uint32_t i = ev->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!before(ev, i, ev->heap[parent])) break;
        heap_set(ev, pos, ev->heap[parent]);
        pos = parent;
    }
    heap_set(ev, pos, i);
}

static void heap_down(hy_evictor *ev, size_t pos)
{
    uint32_t i = ev->heap[pos];
    for (;;) {
        size_t c = 2 * pos + 1;
        if (c >= ev->heap_n) break;
        if (c + 1 < ev->heap_n && before(ev, ev->heap[c + 1], ev->heap[c])) c++;
        if (!before(ev, ev->heap[c], i)) break;
        heap_set(ev, pos, ev->heap[c]);
        pos = c;
    }
    heap_set(ev, pos, i);
}

/* Restores the heap order around a node whose key changed either way. */
static void heap_fix(hy_evictor *ev, uint32_t i)
{
    size_t pos = ev->nodes[i].hpos;
    heap_up(ev, pos);
    heap_down(ev, ev->nodes[i].hpos);
}

static int heap_push(hy_evictor *ev, uint32_t i)
{
    if (ev->heap_n == ev->heap_cap) {
        size_t cap = ev->heap_cap ? 2 * ev->heap_cap : 64;
        uint32_t *h = realloc(ev->heap, cap * sizeof *h);
        if (!h) return HY_ENOMEM;
        ev->heap = h;
        /* The victim search's scratch grows with the heap, so victim() never
         * allocates. */
        uint32_t *s = realloc(ev->scratch, cap * sizeof *s);
        if (!s) return HY_ENOMEM;
        ev->scratch = s, ev->heap_cap = cap;
    }
    heap_set(ev, ev->heap_n++, i);
    heap_up(ev, ev->heap_n - 1);
    return 0;
}

static void heap_delete(hy_evictor *ev, uint32_t i)
{
    size_t pos = ev->nodes[i].hpos;
    assert(pos < ev->heap_n && ev->heap[pos] == i);
    uint32_t last = ev->heap[--ev->heap_n];
    if (last == i) return;
    heap_set(ev, pos, last);
    heap_fix(ev, last);
}

/* The heap key of node i under the evictor's kind. */
static double priority(const hy_evictor *ev, const node *x)
{
    const double per_byte = x->cost / (double)(x->bytes ? x->bytes : 1);
    switch (ev->kind) {
    case HY_EVICT_LFU:
        return (double)x->refs;
    case HY_EVICT_GDSF:
        return ev->clock + (double)x->refs * per_byte;
    case HY_EVICT_HYBRID:
        return ev->clock + per_byte * (1.0 + log2((double)x->refs));
    default:
        return 0;
    }
}

/* --- S3-FIFO ------------------------------------------------------------------- */

static uint64_t small_target(const hy_evictor *ev)
{
    return ev->capacity / 10;
}

/* Drops the oldest ghosts while they hold more than the main queue's share. */
static void ghost_trim(hy_evictor *ev)
{
    const uint64_t limit = ev->capacity - small_target(ev);
    while (ev->ghost.n && ev->ghost.bytes > limit) {
        uint32_t g = ev->ghost.tail;
        list_unlink(ev, g);
        hy_idmap_del(&ev->map, ev->nodes[g].id);
        node_free(ev, g);
    }
}

/* Walks small from its tail: objects hit while queued move to main, the first
 * unpinned one not hit is the victim. NIL when none. */
static uint32_t s3_from_small(hy_evictor *ev, bool (*pinned)(void *, uint64_t), void *ctx)
{
    for (uint32_t c = ev->small.tail; c != NIL;) {
        node *x = &ev->nodes[c];
        uint32_t newer = x->prev;
        if (x->refs >= 1) {
            list_unlink(ev, c);
            list_push_head(ev, Q_MAIN, c);
        } else if (!pinned || !pinned(ctx, x->id)) {
            return c;
        }
        c = newer;
    }
    return NIL;
}

/* Walks main from its tail like a CLOCK hand: a node with a non-zero counter
 * is reinserted at the head with the counter decremented (and met again
 * further on), pinned nodes are passed, the first other one is the victim. */
static uint32_t s3_from_main(hy_evictor *ev, bool (*pinned)(void *, uint64_t), void *ctx)
{
    for (uint32_t c = ev->main.tail; c != NIL;) {
        node *x = &ev->nodes[c];
        uint32_t newer = x->prev;
        if (x->refs > 0) {
            x->refs--;
            list_unlink(ev, c);
            list_push_head(ev, Q_MAIN, c);
            c = newer != NIL ? newer : c; /* it was the head: meet it again */
            continue;
        }
        if (!pinned || !pinned(ctx, x->id)) return c;
        c = newer;
    }
    return NIL;
}

static uint32_t s3_victim(hy_evictor *ev, bool (*pinned)(void *, uint64_t), void *ctx)
{
    uint32_t v;
    if (ev->small.bytes >= small_target(ev) || ev->main.n == 0) {
        v = s3_from_small(ev, pinned, ctx);
        if (v == NIL) v = s3_from_main(ev, pinned, ctx);
    } else {
        v = s3_from_main(ev, pinned, ctx);
        if (v == NIL) v = s3_from_small(ev, pinned, ctx);
    }
    return v;
}

/* --- heap victim search -------------------------------------------------------- */

/* Scratch heap of heap positions ordered by their nodes' keys. */
static void scratch_push(hy_evictor *ev, size_t *n, uint32_t pos)
{
    size_t k = (*n)++;
    while (k > 0) {
        size_t p = (k - 1) / 2;
        if (!before(ev, ev->heap[pos], ev->heap[ev->scratch[p]])) break;
        ev->scratch[k] = ev->scratch[p];
        k = p;
    }
    ev->scratch[k] = pos;
}

static uint32_t scratch_pop(hy_evictor *ev, size_t *n)
{
    uint32_t top = ev->scratch[0], last = ev->scratch[--*n];
    size_t k = 0;
    for (;;) {
        size_t c = 2 * k + 1;
        if (c >= *n) break;
        if (c + 1 < *n && before(ev, ev->heap[ev->scratch[c + 1]], ev->heap[ev->scratch[c]])) c++;
        if (!before(ev, ev->heap[ev->scratch[c]], ev->heap[last])) break;
        ev->scratch[k] = ev->scratch[c];
        k = c;
    }
    if (*n) ev->scratch[k] = last;
    return top;
}

/* The least-keyed unpinned node: the root, or else a best-first search of the
 * heap that expands only past pinned nodes. NIL when all are pinned. */
static uint32_t heap_victim(hy_evictor *ev, bool (*pinned)(void *, uint64_t), void *ctx)
{
    if (!ev->heap_n) return NIL;
    if (!pinned || !pinned(ctx, ev->nodes[ev->heap[0]].id)) return ev->heap[0];
    size_t n = 0;
    for (uint32_t c = 1; c <= 2 && c < ev->heap_n; c++) scratch_push(ev, &n, c);
    while (n) {
        uint32_t pos = scratch_pop(ev, &n);
        if (!pinned(ctx, ev->nodes[ev->heap[pos]].id)) return ev->heap[pos];
        for (size_t c = 2 * (size_t)pos + 1; c <= 2 * (size_t)pos + 2 && c < ev->heap_n; c++)
            scratch_push(ev, &n, (uint32_t)c);
    }
    return NIL;
}

/* --- the interface ------------------------------------------------------------ */

int hy_evictor_new(const hy_policy_config *cfg, hy_evictor **out, hy_err *err)
{
    *out = NULL;
    if (!cfg || (unsigned)cfg->evict >= HY_EVICT_COUNT)
        return hy_err_set(err, HY_EINVAL, "eviction kind %d: unknown", cfg ? (int)cfg->evict : -1);
    if (cfg->evict == HY_EVICT_S3FIFO && cfg->capacity == 0)
        return hy_err_set(err, HY_EINVAL, "s3fifo: capacity 0 (it sizes the small queue)");
    hy_evictor *ev = calloc(1, sizeof *ev);
    if (!ev) return hy_err_set(err, HY_ENOMEM, "evictor: out of memory");
    ev->kind = cfg->evict;
    ev->capacity = cfg->capacity;
    ev->free_node = NIL;
    list_init(&ev->lru), list_init(&ev->small), list_init(&ev->main), list_init(&ev->ghost);
    *out = ev;
    return 0;
}

void hy_evictor_free(hy_evictor *ev)
{
    if (!ev) return;
    free(ev->nodes);
    free(ev->heap);
    free(ev->scratch);
    hy_idmap_clear(&ev->map);
    free(ev);
}

size_t hy_evictor_count(const hy_evictor *ev)
{
    return ev->resident;
}

void hy_evictor_insert(hy_evictor *ev, uint64_t id, uint64_t bytes, double cost, uint32_t tokens,
                       uint64_t now)
{
    (void)tokens, (void)now; /* cost per byte carries what the tokens are worth */
    ev->has_last_victim = false;
    uint32_t i = hy_idmap_get(&ev->map, id);
    bool ghost = i != NIL && ev->nodes[i].queue == Q_GHOST;
    assert(i == NIL || ghost); /* inserting a resident id: a broken invariant */
    if (ghost) {
        list_unlink(ev, i);
    } else {
        i = node_alloc(ev);
        if (i == NIL || hy_idmap_put(&ev->map, id, i)) {
            if (i != NIL) node_free(ev, i);
            hy_log(HY_LOG_ERROR, "evictor: out of memory; object %016llx left untracked",
                   (unsigned long long)id);
            return;
        }
    }
    node *x = &ev->nodes[i];
    x->id = id, x->bytes = bytes, x->cost = cost, x->seq = ++ev->seq;
    x->refs = ev->kind == HY_EVICT_S3FIFO ? 0 : 1;
    x->prev = x->next = NIL, x->queue = Q_NONE;
    switch (ev->kind) {
    case HY_EVICT_LRU:
        list_push_head(ev, Q_LRU, i);
        break;
    case HY_EVICT_S3FIFO:
        list_push_head(ev, ghost ? Q_MAIN : Q_SMALL, i);
        break;
    default:
        x->prio = priority(ev, x);
        if (heap_push(ev, i)) {
            hy_idmap_del(&ev->map, id);
            node_free(ev, i);
            hy_log(HY_LOG_ERROR, "evictor: out of memory; object %016llx left untracked",
                   (unsigned long long)id);
            return;
        }
    }
    ev->resident++;
}

void hy_evictor_access(hy_evictor *ev, uint64_t id, uint64_t now)
{
    (void)now;
    ev->has_last_victim = false;
    uint32_t i = hy_idmap_get(&ev->map, id);
    if (i == NIL || ev->nodes[i].queue == Q_GHOST) return; /* not resident */
    node *x = &ev->nodes[i];
    x->seq = ++ev->seq;
    switch (ev->kind) {
    case HY_EVICT_LRU:
        list_unlink(ev, i);
        list_push_head(ev, Q_LRU, i);
        break;
    case HY_EVICT_S3FIFO:
        if (x->refs < 3) x->refs++;
        break;
    default:
        if (x->refs < UINT32_MAX) x->refs++;
        x->prio = priority(ev, x);
        heap_down(ev, x->hpos); /* the key only grows */
    }
}

void hy_evictor_remove(hy_evictor *ev, uint64_t id)
{
    uint32_t i = hy_idmap_get(&ev->map, id);
    if (i == NIL || ev->nodes[i].queue == Q_GHOST) return;
    const bool evicted = ev->has_last_victim && ev->last_victim == id;
    ev->has_last_victim = false;
    node *x = &ev->nodes[i];
    ev->resident--;
    if (uses_heap(ev->kind)) {
        if (evicted && x->prio > ev->clock && ev->kind != HY_EVICT_LFU) ev->clock = x->prio;
        heap_delete(ev, i);
    } else {
        const bool was_small = x->queue == Q_SMALL;
        list_unlink(ev, i);
        if (ev->kind == HY_EVICT_S3FIFO && evicted && was_small) {
            list_push_head(ev, Q_GHOST, i); /* keeps its id and bytes */
            ghost_trim(ev);
            return;
        }
    }
    hy_idmap_del(&ev->map, id);
    node_free(ev, i);
}

int hy_evictor_victim(hy_evictor *ev, uint64_t *id, bool (*pinned)(void *ctx, uint64_t id),
                      void *ctx)
{
    uint32_t v = NIL;
    switch (ev->kind) {
    case HY_EVICT_LRU:
        for (uint32_t c = ev->lru.tail; c != NIL; c = ev->nodes[c].prev)
            if (!pinned || !pinned(ctx, ev->nodes[c].id)) {
                v = c;
                break;
            }
        break;
    case HY_EVICT_S3FIFO:
        v = s3_victim(ev, pinned, ctx);
        break;
    default:
        v = heap_victim(ev, pinned, ctx);
    }
    ev->has_last_victim = v != NIL;
    if (v == NIL) return HY_ENOTFOUND;
    *id = ev->last_victim = ev->nodes[v].id;
    return 0;
}
