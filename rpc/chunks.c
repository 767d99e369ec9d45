/*
 * An entry's EntryChunk stream reassembled (hy_rpc.h, hy_chunks): pieces in
 * order or at their offsets (Build streams layers as they are built, the
 * header last), checked never to overlap or pass meta.bytes, so that when
 * the received bytes add up to meta.bytes every byte came exactly once. The
 * buffer grows with the pieces — never past meta.bytes — rather than being
 * allocated whole on the sender's word; gaps not yet filled are zero.
 */
#include "hy_rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int refuse(hy_chunks *a, int code, const char *why)
{
    snprintf(a->why, sizeof a->why, "%s", why);
    return code;
}

/* The buffer holds at least end bytes (zero past what was there). */
static int grow(hy_chunks *a, uint64_t end)
{
    if (end <= a->cap) return HY_OK;
    uint64_t cap = a->cap ? a->cap : 1 << 16;
    while (cap < end) cap *= 2;
    if (cap > a->want) cap = a->want;
    uint8_t *nb = realloc(a->buf, (size_t)cap);
    if (!nb) return refuse(a, HY_ENOMEM, "out of memory for the entry's bytes");
    memset(nb + a->cap, 0, (size_t)(cap - a->cap));
    a->buf = nb;
    a->cap = cap;
    return HY_OK;
}

int hy_chunks_add(hy_chunks *a, const Hypic__V1__EntryChunk *ch)
{
    if (!a->started) {
        if (!ch->meta) return refuse(a, HY_EFORMAT, "the first chunk carries no metadata");
        if (a->max && ch->meta->bytes > a->max) {
            snprintf(a->why, sizeof a->why, "meta.bytes = %llu is over the limit of %llu",
                     (unsigned long long)ch->meta->bytes, (unsigned long long)a->max);
            return HY_EFORMAT;
        }
        a->want = ch->meta->bytes;
        a->started = true;
    } else if (ch->meta) {
        return refuse(a, HY_EFORMAT, "a chunk after the first carries metadata");
    }
    const uint64_t n = ch->data.len;
    const uint64_t lo =
        ch->placement_case == HYPIC__V1__ENTRY_CHUNK__PLACEMENT_OFFSET ? ch->offset : a->next;
    if (lo > a->want || n > a->want - lo) {
        snprintf(a->why, sizeof a->why,
                 "the chunks hold more than meta.bytes = %llu bytes (a chunk of %llu at %llu)",
                 (unsigned long long)a->want, (unsigned long long)n, (unsigned long long)lo);
        return HY_EFORMAT;
    }
    if (n == 0) return HY_OK;
    const uint64_t hi = lo + n;
    /* the spans so far, sorted and merged where they touch */
    size_t at = 0;
    while (at < a->nspans && a->spans[at].hi <= lo) at++;
    if (at < a->nspans && a->spans[at].lo < hi) {
        snprintf(a->why, sizeof a->why, "a chunk at %llu..%llu overlaps bytes already received",
                 (unsigned long long)lo, (unsigned long long)hi);
        return HY_EFORMAT;
    }
    int rc = grow(a, hi);
    if (rc) return rc;
    memcpy(a->buf + lo, ch->data.data, (size_t)n);
    a->got += n;
    a->next = hi;
    const bool join_prev = at > 0 && a->spans[at - 1].hi == lo;
    const bool join_next = at < a->nspans && a->spans[at].lo == hi;
    if (join_prev && join_next) {
        a->spans[at - 1].hi = a->spans[at].hi;
        memmove(&a->spans[at], &a->spans[at + 1], (a->nspans - at - 1) * sizeof *a->spans);
        a->nspans--;
    } else if (join_prev) {
        a->spans[at - 1].hi = hi;
    } else if (join_next) {
        a->spans[at].lo = lo;
    } else {
        if (a->nspans == a->spans_cap) {
            size_t cap = a->spans_cap ? 2 * a->spans_cap : 16;
            void *ns = realloc(a->spans, cap * sizeof *a->spans);
            if (!ns) return refuse(a, HY_ENOMEM, "out of memory");
            a->spans = ns;
            a->spans_cap = cap;
        }
        memmove(&a->spans[at + 1], &a->spans[at], (a->nspans - at) * sizeof *a->spans);
        a->spans[at].lo = lo;
        a->spans[at].hi = hi;
        a->nspans++;
    }
    return HY_OK;
}

bool hy_chunks_complete(const hy_chunks *a)
{
    return a->started && a->got == a->want && a->cap == a->want;
}

void *hy_chunks_take(hy_chunks *a, size_t *n)
{
    void *b = a->buf ? a->buf : malloc(1); /* an empty entry: a buffer all the same */
    *n = (size_t)a->got;
    a->buf = NULL;
    hy_chunks_free(a);
    return b;
}

void hy_chunks_free(hy_chunks *a)
{
    free(a->buf);
    free(a->spans);
    memset(a, 0, sizeof *a);
}
