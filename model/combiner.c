/*
 * The combiner: one request, [segment_1 … segment_k, query], in one of the
 * modes of hy_model.h, from the empty state. In `full` and the pic family the
 * whole request is ONE layer-major forward pass (hy_exec_run) over its
 * computed tokens only, in request order at their true positions: a hit
 * contributes its seam's tokens and then its body as a composed hole, a miss
 * its tokens (building its entry inline from the same activations when the
 * mode caches), a segment too short to cache its tokens, and the query comes
 * last for the first token's logits. Every projection is then one GEMM over
 * all of them per step, instead of one pass over the weights per segment.
 * The segment-by-segment form — hy_entry_apply, hy_entry_build and
 * hy_exec_prefill per segment — computes the same function, and is what
 * tests/model/test_onepass.c holds this pass to.
 *
 * The `prefix` baseline keeps a state checkpoint after every segment
 * boundary it has seen (hy_prefix_cache), keyed by SHA-256 over the chain of
 * segment contents, so only a run of leading segments identical to an earlier
 * request's can be reused — what a radix prefix cache with per-segment state
 * checkpoints does for hybrid models.
 *
 * Every mode advances the state by exactly the request's tokens, whatever
 * each segment costs (a reuse, a build, a prefill, a restored checkpoint):
 * the assertions below hold the positions to that.
 */
#include "model_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static const char *k_modes[HY_MODE_COUNT] = {"full", "prefix", "pic", "noseam", "naive"};

const char *hy_mode_name(hy_mode mode)
{
    return (unsigned)mode < HY_MODE_COUNT ? k_modes[mode] : "?";
}

int hy_mode_parse(const char *s, hy_mode *out)
{
    for (int i = 0; i < HY_MODE_COUNT; i++)
        if (strcmp(s, k_modes[i]) == 0) {
            *out = (hy_mode)i;
            return HY_OK;
        }
    return HY_EINVAL;
}

/* --- prefix cache ----------------------------------------------------------- */

typedef struct pc_slot {
    uint8_t key[32];
    hy_state *st;
    size_t bytes;
    uint64_t used;
} pc_slot;

struct hy_prefix_cache {
    pc_slot *slots;
    size_t n, cap, bytes, max_bytes;
    uint64_t clock;
};

int hy_prefix_cache_new(size_t max_bytes, hy_prefix_cache **out, hy_err *err)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return hy_err_set(err, HY_ENOMEM, "out of memory");
    (*out)->max_bytes = max_bytes;
    return HY_OK;
}

void hy_prefix_cache_free(hy_prefix_cache *pc)
{
    if (!pc) return;
    for (size_t i = 0; i < pc->n; i++) hy_state_free(pc->slots[i].st);
    free(pc->slots);
    free(pc);
}

static pc_slot *pc_find(hy_prefix_cache *pc, const uint8_t key[32])
{
    for (size_t i = 0; i < pc->n; i++)
        if (memcmp(pc->slots[i].key, key, 32) == 0) {
            pc->slots[i].used = ++pc->clock;
            return &pc->slots[i];
        }
    return NULL;
}

/* Keeps a copy of st under key, evicting least-recently-used checkpoints to
 * stay within the byte budget. A checkpoint larger than the budget is not kept. */
static int pc_put(hy_prefix_cache *pc, const uint8_t key[32], const hy_state *st, hy_err *err)
{
    const size_t bytes = hy_state_bytes(st);
    if (bytes > pc->max_bytes || pc_find(pc, key)) return HY_OK;
    while (pc->bytes + bytes > pc->max_bytes && pc->n > 0) {
        size_t lru = 0;
        for (size_t i = 1; i < pc->n; i++)
            if (pc->slots[i].used < pc->slots[lru].used) lru = i;
        pc->bytes -= pc->slots[lru].bytes;
        hy_state_free(pc->slots[lru].st);
        pc->slots[lru] = pc->slots[--pc->n];
    }
    if (pc->n == pc->cap) {
        size_t nc = pc->cap ? 2 * pc->cap : 16;
        pc_slot *ns = realloc(pc->slots, nc * sizeof *ns);
        if (!ns) return hy_err_set(err, HY_ENOMEM, "out of memory");
        pc->slots = ns;
        pc->cap = nc;
    }
    /* the evictions made room, or there was nothing left to evict */
    assert(pc->bytes + bytes <= pc->max_bytes || (pc->n == 0 && pc->bytes == 0));
    pc_slot *s = &pc->slots[pc->n];
    int rc = hy_state_new(st->m, &s->st, err);
    if (rc == HY_OK && (rc = hy_state_copy(s->st, st, err)) != HY_OK) hy_state_free(s->st);
    if (rc) return rc;
    memcpy(s->key, key, 32);
    s->bytes = bytes;
    s->used = ++pc->clock;
    pc->bytes += bytes;
    pc->n++;
    return HY_OK;
}

/* chain[i+1] = SHA-256(chain[i] ‖ tokens of segment i). */
static int chain_next(const uint8_t prev[32], const hy_segment *s, uint8_t out[32])
{
    hy_sha256_ctx *h;
    if (hy_sha256_begin(&h)) return HY_ENOMEM;
    uint64_t n = s->n;
    hy_sha256_add(h, prev, 32);
    hy_sha256_add(h, &n, sizeof n);
    hy_sha256_add(h, s->tokens, s->n * sizeof *s->tokens);
    hy_sha256_end(h, out);
    return HY_OK;
}

/* --- one request --------------------------------------------------------------- */

static int run_prefix(hy_exec *ex, hy_state *st, const hy_request *rq, float *logits,
                      hy_result *res, hy_err *err)
{
    if (!rq->prefix)
        return hy_err_set(err, HY_EINVAL, "mode 'prefix' needs a prefix cache in the request");
    uint8_t(*chain)[32] = calloc(rq->nsegs + 1, 32);
    if (!chain) return hy_err_set(err, HY_ENOMEM, "out of memory");
    int rc = HY_OK;
    for (size_t i = 0; i < rq->nsegs && !rc; i++)
        if (chain_next(chain[i], &rq->segs[i], chain[i + 1]))
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    size_t start = 0;
    for (size_t i = rq->nsegs; i > 0 && !rc; i--) {
        pc_slot *s = pc_find(rq->prefix, chain[i]);
        if (s) {
            const double t0 = hy_now_s();
            rc = hy_state_copy(st, s->st, err);
            res->restore_s += hy_now_s() - t0;
            start = i;
            break;
        }
    }
    int64_t at = 0; /* positions of the segments before `start` */
    for (size_t i = 0; i < start; i++) at += (int64_t)rq->segs[i].n;
    /* a checkpoint's key chains the contents and lengths of the segments
     * before it, so its position is theirs */
    assert(rc || st->pos == at);
    res->prefix_segments = (int)start;
    const double t0 = hy_now_s();
    for (size_t i = start; i < rq->nsegs && !rc; i++) {
        rc = hy_exec_prefill(ex, st, rq->segs[i].tokens, rq->segs[i].n, NULL, err);
        res->prefilled += (int64_t)rq->segs[i].n;
        if (!rc) rc = pc_put(rq->prefix, chain[i + 1], st, err);
        at += (int64_t)rq->segs[i].n;
        assert(rc || st->pos == at);
    }
    if (!rc) rc = hy_exec_prefill(ex, st, rq->query, rq->nq, logits, err);
    res->prefilled += (int64_t)rq->nq;
    res->forward_s = hy_now_s() - t0;
    free(chain);
    return rc;
}

/* Checks that a cached entry is for exactly this segment under this mode. */
static int check_entry(const hy_entry *e, const hy_segment *s, int W, size_t i, hy_err *err)
{
    if ((size_t)e->n != s->n || memcmp(e->tokens, s->tokens, s->n * sizeof *s->tokens) != 0)
        return hy_err_set(err, HY_EINVAL,
                          "segment %zu: its entry holds other tokens (a hash collision or a "
                          "caller bug); refusing to use it",
                          i);
    if (e->W != W)
        return hy_err_set(err, HY_EINVAL,
                          "segment %zu: entry built with seam W = %d, mode needs %d", i, e->W, W);
    return HY_OK;
}

/* Appends segment i's pieces at position pos: a hit (e) its seam's tokens
 * then its body as a hole, a miss its tokens with a capture building its
 * entry (into ent[i], cap[i]), a segment too short to cache its tokens. */
static int pic_add(const hy_state *st, const hy_request *rq, size_t i, const hy_entry *e, int W,
                   bool use_T, int64_t pos, hy_piece *pc, size_t *np, hy_entry **ent,
                   hy_capture **cap, hy_result *res, hy_err *err)
{
    const hy_segment *s = &rq->segs[i];
    int w, rc;
    hy_err ignored = {0};
    if (e) {
        if ((rc = check_entry(e, s, W, i, err))) return rc;
        if (e->w > 0) pc[(*np)++] = (hy_piece){.tokens = e->tokens, .n = (size_t)e->w};
        pc[(*np)++] = (hy_piece){.hole = e, .use_T = use_T};
        res->hits++;
        res->prefilled += e->w;
    } else if (hy_entry_seam(&st->m->cfg, s->n, W, &w, &ignored) != HY_OK) { /* too short */
        pc[(*np)++] = (hy_piece){.tokens = s->tokens, .n = s->n};
        res->uncacheable++;
        res->prefilled += (int64_t)s->n;
    } else {
        if ((rc = hy_entry_build_begin(st->m, pos, s->tokens, s->n, W, rq->repr, &ent[i], &cap[i],
                                       err)))
            return rc;
        pc[(*np)++] = (hy_piece){.tokens = s->tokens, .n = s->n, .cap = cap[i]};
        res->misses++;
        res->prefilled += (int64_t)s->n;
    }
    return HY_OK;
}

/* Ends the inline builds: each entry, stored in its representation, goes to
 * res->built (on success) or is freed — also one that ran out of memory
 * being stored: a missing entry is a miss next time, not an error now. */
static void pic_builds_end(const hy_request *rq, hy_entry **ent, hy_capture **cap, int rc,
                           hy_result *res)
{
    for (size_t i = 0; ent && cap && i < rq->nsegs; i++) {
        if (!rc && res->built && rq->defer_builds && ent[i]) { /* finished by the caller */
            ent[i]->pending = cap[i];
            res->built[i] = ent[i];
            continue;
        }
        const int brc = hy_entry_build_end(ent[i], cap[i]);
        if (!rc && !brc && res->built)
            res->built[i] = ent[i];
        else
            hy_entry_free(ent[i]);
    }
}

/* The pic family as one forward pass (hy_exec_run): every computed token of
 * the request — seams, misses, segments too short to cache, the query last —
 * shares each weight pass, hits' bodies composed as holes. */
static int run_pic(hy_exec *ex, hy_state *st, const hy_request *rq, int W, bool use_T,
                   float *logits, hy_result *res, hy_err *err)
{
    const size_t ns = rq->nsegs;
    hy_piece *pc = calloc(2 * ns + 1, sizeof *pc);
    hy_entry **ent = calloc(ns + 1, sizeof *ent); /* entries being built */
    hy_capture **cap = calloc(ns + 1, sizeof *cap);
    int rc = pc && ent && cap ? HY_OK : hy_err_set(err, HY_ENOMEM, "out of memory");
    size_t np = 0;
    int64_t pos = st->pos;
    for (size_t i = 0; i < ns && !rc; i++) {
        rc = pic_add(st, rq, i, rq->segs[i].entry, W, use_T, pos, pc, &np, ent, cap, res, err);
        pos += (int64_t)rq->segs[i].n;
    }
    if (!rc) {
        pc[np++] = (hy_piece){.tokens = rq->query, .n = rq->nq};
        res->prefilled += (int64_t)rq->nq;
        const double t0 = hy_now_s();
        rc = hy_exec_run(ex, st, pc, np, logits, &res->compose_s, err);
        res->arrival_s += hy_exec_arrival_wait_s(ex);
        res->forward_s = hy_now_s() - t0;
    }
    pic_builds_end(rq, ent, cap, rc, res);
    free(pc), free(ent), free(cap);
    return rc;
}

/* The pic family streamed (hy_combine_stream): the segments whose fate is
 * known, from the first one not yet run, go through one pass together; the
 * combiner waits only when the next segment in order is not known yet. */
static int run_pic_stream(hy_exec *ex, hy_state *st, const hy_request *rq, int W, bool use_T,
                          hy_segment_await_fn await, void *ctx, float *logits, hy_result *res,
                          hy_err *err)
{
    const size_t ns = rq->nsegs;
    hy_piece *pc = calloc(2 * ns + 1, sizeof *pc);
    hy_entry **ent = calloc(ns + 1, sizeof *ent);
    hy_capture **cap = calloc(ns + 1, sizeof *cap);
    int rc = pc && ent && cap ? HY_OK : hy_err_set(err, HY_ENOMEM, "out of memory");
    const double t_start = hy_now_s();
    size_t i = 0;
    while (!rc && i < ns) {
        size_t np = 0;
        int64_t pos = st->pos;
        const size_t first = i;
        for (size_t j = first; j < ns && !rc; j++) {
            const hy_entry *e = NULL;
            const double t0 = hy_now_s();
            rc = await(ctx, j, j == first, &e, err); /* wait only for the next one in order */
            if (j == first) res->wait_s += hy_now_s() - t0;
            if (rc == HY_EAGAIN && j > first) {
                rc = HY_OK;
                break;
            }
            if (rc == HY_EAGAIN)
                rc = hy_err_set(err, HY_EINVAL, "segment %zu: await gave no answer", j);
            if (!rc) rc = pic_add(st, rq, j, e, W, use_T, pos, pc, &np, ent, cap, res, err);
            pos += (int64_t)rq->segs[j].n;
            i = j + 1;
        }
        const bool last = i == ns;
        if (!rc && last) {
            pc[np++] = (hy_piece){.tokens = rq->query, .n = rq->nq};
            res->prefilled += (int64_t)rq->nq;
        }
        if (!rc) rc = hy_exec_run(ex, st, pc, np, last ? logits : NULL, &res->compose_s, err);
        res->arrival_s += hy_exec_arrival_wait_s(ex);
        res->passes++;
    }
    if (!rc && ns == 0) { /* only a query */
        pc[0] = (hy_piece){.tokens = rq->query, .n = rq->nq};
        res->prefilled += (int64_t)rq->nq;
        rc = hy_exec_run(ex, st, pc, 1, logits, &res->compose_s, err);
        res->passes++;
    }
    res->forward_s = hy_now_s() - t_start - res->wait_s;
    pic_builds_end(rq, ent, cap, rc, res);
    free(pc), free(ent), free(cap);
    return rc;
}

/* `full`: every token computed, in one pass of the request's pieces. */
static int run_full(hy_exec *ex, hy_state *st, const hy_request *rq, float *logits, hy_result *res,
                    hy_err *err)
{
    hy_piece *pc = calloc(rq->nsegs + 1, sizeof *pc);
    if (!pc) return hy_err_set(err, HY_ENOMEM, "out of memory");
    for (size_t i = 0; i < rq->nsegs; i++) {
        pc[i] = (hy_piece){.tokens = rq->segs[i].tokens, .n = rq->segs[i].n};
        res->prefilled += (int64_t)rq->segs[i].n;
    }
    pc[rq->nsegs] = (hy_piece){.tokens = rq->query, .n = rq->nq};
    res->prefilled += (int64_t)rq->nq;
    const double t0 = hy_now_s();
    int rc = hy_exec_run(ex, st, pc, rq->nsegs + 1, logits, NULL, err);
    res->forward_s = hy_now_s() - t0;
    free(pc);
    return rc;
}

/* The checks every request gets before any state changes; *total: the
 * positions it fills. */
static int request_check(const hy_request *rq, hy_result *res, int64_t *total, hy_err *err)
{
    hy_entry **built = res->built;
    memset(res, 0, sizeof *res);
    res->built = built;
    if (built) memset(built, 0, rq->nsegs * sizeof *built);
    if ((unsigned)rq->mode >= HY_MODE_COUNT)
        return hy_err_set(err, HY_EINVAL, "unknown mode %d", (int)rq->mode);
    if (rq->nq == 0 || !rq->query)
        return hy_err_set(err, HY_EINVAL,
                          "the query is empty: a request needs at least one query token, whose "
                          "logits it returns");
    *total = (int64_t)rq->nq;
    for (size_t i = 0; i < rq->nsegs; i++) {
        if (rq->segs[i].n == 0 || !rq->segs[i].tokens)
            return hy_err_set(err, HY_EINVAL, "segment %zu is empty", i);
        *total += (int64_t)rq->segs[i].n;
    }
    return HY_OK;
}

/* Nothing built survives a failed request. */
static void builds_drop(const hy_request *rq, hy_result *res)
{
    for (size_t i = 0; res->built && i < rq->nsegs; i++) {
        hy_entry_free(res->built[i]);
        res->built[i] = NULL;
    }
}

int hy_combine(hy_exec *ex, hy_state *st, const hy_request *rq, float *logits, hy_result *res,
               hy_err *err)
{
    int64_t total = 0; /* the positions the request fills */
    int rc = request_check(rq, res, &total, err);
    if (rc) return rc;
    hy_state_reset(st);
    switch (rq->mode) {
    case HY_MODE_FULL:
        rc = run_full(ex, st, rq, logits, res, err);
        break;
    case HY_MODE_PREFIX:
        rc = run_prefix(ex, st, rq, logits, res, err);
        break;
    case HY_MODE_PIC:
        rc = run_pic(ex, st, rq, rq->W, true, logits, res, err);
        break;
    case HY_MODE_NOSEAM:
        rc = run_pic(ex, st, rq, 0, true, logits, res, err);
        break;
    case HY_MODE_NAIVE:
        rc = run_pic(ex, st, rq, rq->W, false, logits, res, err);
        break;
    default:
        break;
    }
    assert(rc || st->pos == total);
    (void)total; /* read by the assertion only */
    if (rc) builds_drop(rq, res);
    return rc;
}

int hy_combine_stream(hy_exec *ex, hy_state *st, const hy_request *rq, hy_segment_await_fn await,
                      void *ctx, float *logits, hy_result *res, hy_err *err)
{
    int64_t total = 0;
    int rc = request_check(rq, res, &total, err);
    if (rc) return rc;
    if (rq->mode != HY_MODE_PIC && rq->mode != HY_MODE_NOSEAM && rq->mode != HY_MODE_NAIVE)
        return hy_err_set(err, HY_EINVAL, "mode %s does not reuse entries: it cannot be streamed",
                          hy_mode_name(rq->mode));
    hy_state_reset(st);
    rc = run_pic_stream(ex, st, rq, rq->mode == HY_MODE_NOSEAM ? 0 : rq->W,
                        rq->mode != HY_MODE_NAIVE, await, ctx, logits, res, err);
    assert(rc || st->pos == total);
    (void)total;
    if (rc) builds_drop(rq, res);
    return rc;
}
