/*
 * Segment entries: build, reuse, serialise (docs/entry-format.md).
 *
 * Build. The segment runs through the executor (hy_exec_run) as a run of
 * computed tokens with a capture from the body's start (token w): the seam
 * runs as usual; from the body on each linear layer's transition operator T
 * (from I) advances alongside the real state and each attention layer's
 * canonical K and V are recorded. With S_w the state when the body starts and
 * S_n the state after it, the body's zero-start state is
 *     S_body = S_n − T·S_w            (S_n = T·S_w + S_body: the map is affine)
 * so one extra T pass, not a second state pass, builds the entry — the same
 * code serves the independent build (st empty) and the inline one (a miss in
 * a request's one pass, model/combiner.c). The entry never contains the
 * seam's contribution: T and S_body start at the body.
 *
 * Reuse. The seam is recomputed from the running state through every layer;
 * then the body is a hole in the pass: S ← T·S + S_body, conv state ← tail, K
 * rotated to its true positions and V appended (model/forward.c).
 *
 * Both linear-layer steps are the composition kernels of hy_kernels.h —
 * hy_la_extract builds S_body, hy_la_apply applies (T, S_body) — the
 * functions tests/kernels/test_linear_families.c checks against the
 * recurrence over whole sequences for every family. The executor's linear
 * layers are Gated DeltaNet, a family with a dense dk×dk T per head. `naive`
 * reuse is the same apply with T replaced by the identity (S ← S + S_body).
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* --- sizes ---------------------------------------------------------------- */

static size_t t_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * hy_la_t_size(hy_lin_family(c), c->lin_dk);
}
static size_t s_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv;
}
static size_t tail_floats(const hy_model_config *c)
{
    return (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c);
}
static size_t k_floats(const hy_model_config *c, int nb)
{
    return (size_t)nb * (size_t)hy_config_kv_k(c);
}
static size_t v_floats(const hy_model_config *c, int nb)
{
    return (size_t)nb * (size_t)hy_config_kv_v(c);
}
static size_t elem(hy_entry_dtype dt)
{
    return dt == HY_ENTRY_BF16 ? 2 : 4;
}

int hy_entry_repr_check(const hy_entry_repr *r, hy_err *err)
{
    if (r->s != HY_ENTRY_F32 && r->s != HY_ENTRY_BF16)
        return hy_err_set(err, HY_EINVAL, "entry representation: S dtype %d is not F32 or BF16",
                          (int)r->s);
    if (r->t != HY_ENTRY_F32 && r->t != HY_ENTRY_BF16)
        return hy_err_set(err, HY_EINVAL, "entry representation: T dtype %d is not F32 or BF16",
                          (int)r->t);
    if (r->kv != HY_ENTRY_F32 && r->kv != HY_ENTRY_BF16)
        return hy_err_set(err, HY_EINVAL, "entry representation: K/V dtype %d is not F32 or BF16",
                          (int)r->kv);
    if (!(r->tol >= 0.0f && r->tol <= 1.0f))
        return hy_err_set(err, HY_EINVAL, "entry representation: tolerance %g is outside [0, 1]",
                          (double)r->tol);
    return HY_OK;
}

/* Whether e's sections have the shapes model config c reads and writes
 * through: every copy below sizes itself from c, so an entry of other shapes
 * would overrun its sections. The fingerprint check makes this hold for any
 * entry that reaches hy_entry_apply; it is asserted, not handled. */
bool hy_entry_fits(const hy_entry *e, const hy_model_config *c)
{
    const hy_model_config *ec = &e->cfg;
    if (e->n_layers != c->n_layers || ec->n_layers != c->n_layers || c->n_layers > HY_MAX_LAYERS)
        return false;
    if (e->n < 1 || e->w < 0 || e->w >= e->n || e->nb != e->n - e->w) return false;
    if (hy_entry_repr_check(&e->repr, NULL)) return false;
    if (ec->lin_v_heads != c->lin_v_heads || ec->lin_dk != c->lin_dk || ec->lin_dv != c->lin_dv ||
        ec->conv_kernel != c->conv_kernel || hy_config_conv_dim(ec) != hy_config_conv_dim(c) ||
        ec->n_kv_heads != c->n_kv_heads || ec->head_dim != c->head_dim || ec->mla != c->mla ||
        hy_config_kv_k(ec) != hy_config_kv_k(c) || hy_config_kv_v(ec) != hy_config_kv_v(c))
        return false;
    for (int i = 0; i < c->n_layers; i++) {
        if (ec->layer_kind[i] != c->layer_kind[i]) return false;
        if (c->layer_kind[i] == HY_LAYER_LINEAR && (!e->th || !e->sh || !e->tail[i])) return false;
        if (c->layer_kind[i] == HY_LAYER_ATTENTION && (!e->K[i] || !e->V[i])) return false;
    }
    return true;
}

/* Whether st holds buffers for every layer of its model. */
static inline bool state_fits(const hy_state *st)
{
    const hy_model_config *c = &st->m->cfg;
    for (int i = 0; i < c->n_layers; i++)
        if (c->layer_kind[i] == HY_LAYER_LINEAR ? !st->S[i] || !st->conv[i]
                                                : c->layer_kind[i] == HY_LAYER_ATTENTION &&
                                                      st->kv_cap > 0 && (!st->k[i] || !st->v[i]))
            return false;
    return true;
}

int hy_entry_seam(const hy_model_config *c, size_t n, int W, int *w, hy_err *err)
{
    if (W < 0) return hy_err_set(err, HY_EINVAL, "seam width W = %d is negative", W);
    if (n == 0) return hy_err_set(err, HY_EINVAL, "empty segment");
    if (n > (size_t)INT32_MAX)
        return hy_err_set(err, HY_ERANGE, "segment of %zu tokens exceeds %d", n, INT32_MAX);
    int s = (size_t)W < n - 1 ? W : (int)(n - 1);
    if (W > 0 && s < c->conv_kernel - 1)
        return hy_err_set(err, HY_EUNSUPPORTED,
                          "a segment of %zu tokens is too short to cache with seam W = %d: its "
                          "seam would be %d tokens, narrower than the conv window (%d); it is "
                          "prefilled instead",
                          n, W, s, c->conv_kernel - 1);
    *w = s;
    return HY_OK;
}

static void capture_free(hy_capture *cap, const hy_entry *e);

void hy_entry_free(hy_entry *e)
{
    if (!e) return;
    capture_free(e->pending, e); /* first: it tells its buffers from the entry's */
    for (int i = 0; i < e->n_layers && !e->view; i++) {
        if (e->T) hy_free(e->T[i]);
        if (e->S) hy_free(e->S[i]);
        if (e->tail) hy_free(e->tail[i]);
        if (e->K) hy_free(e->K[i]);
        if (e->V) hy_free(e->V[i]);
    }
    free(e->T), free(e->S), free(e->tail), free(e->K), free(e->V);
    free(e->th), free(e->sh);
    if (!e->view) hy_free(e->tokens);
    hy_entry_arrival_free(e->arr);
    if (e->shadow) munmap(e->shadow, e->shadow_len);
    free(e);
}

/* Allocates an entry: its tokens, conv tails and K/V (contents undefined);
 * the heads' T and S storage comes when a layer is built or decoded. A view
 * gets only its pointer arrays (all NULL) and head tables. */
int hy_entry_alloc(const hy_model *m, int W, int w, int n, hy_entry_repr repr, bool view,
                   hy_entry **out, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    /* the seam rule (hy_entry_seam) leaves at least one body token */
    assert(n >= 1 && w >= 0 && w < n && c->n_layers <= HY_MAX_LAYERS);
    assert(hy_entry_repr_check(&repr, NULL) == HY_OK);
    hy_entry *e = calloc(1, sizeof *e);
    if (!e) return hy_err_set(err, HY_ENOMEM, "out of memory");
    e->cfg = *c;
    e->W = W, e->w = w, e->n = n, e->nb = n - w, e->repr = repr, e->n_layers = c->n_layers;
    e->version = HY_ENTRY_VERSION;
    memcpy(e->model_fp, m->fingerprint, 32);
    const size_t L = (size_t)c->n_layers, heads = L * (size_t)HY_MAX(c->lin_v_heads, 1);
    e->T = calloc(L, sizeof *e->T), e->S = calloc(L, sizeof *e->S);
    e->tail = calloc(L, sizeof *e->tail);
    e->K = calloc(L, sizeof *e->K), e->V = calloc(L, sizeof *e->V);
    e->th = calloc(heads, sizeof *e->th), e->sh = calloc(heads, sizeof *e->sh);
    e->view = view;
    e->tokens = view ? NULL : hy_alloc((size_t)n * sizeof *e->tokens);
    int bad =
        !e->T || !e->S || !e->tail || !e->K || !e->V || !e->th || !e->sh || (!view && !e->tokens);
    for (int i = 0; i < c->n_layers && !bad && !view; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            e->tail[i] = hy_alloc(tail_floats(c) * 4);
            bad = !e->tail[i];
        } else if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            e->K[i] = hy_alloc(HY_MAX(k_floats(c, e->nb), 1) * elem(repr.kv));
            e->V[i] = hy_alloc(HY_MAX(v_floats(c, e->nb), 1) * elem(repr.kv));
            bad = !e->K[i] || !e->V[i];
        }
    }
    if (bad) {
        hy_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "out of memory for an entry of %d tokens", n);
    }
    *out = e;
    return HY_OK;
}

/* --- build ------------------------------------------------------------------ */

/* The capture's buffers, all fp32: per linear layer the state at the body's
 * start (then S_body in place), T from I and the heads' log-decays; per
 * attention layer K and V unless the entry keeps them in fp32 (then straight
 * there). Freed by layer as each is stored. */
static void capture_free(hy_capture *cap, const hy_entry *e)
{
    if (!cap) return;
    for (int i = 0; i < e->n_layers; i++) {
        if (cap->S_w) hy_free(cap->S_w[i]);
        if (cap->T) hy_free(cap->T[i]);
        if (cap->logdecay) free(cap->logdecay[i]);
        if (cap->K && cap->K[i] != e->K[i]) hy_free(cap->K[i]);
        if (cap->V && cap->V[i] != e->V[i]) hy_free(cap->V[i]);
    }
    free(cap->S_w), free(cap->T), free(cap->logdecay), free(cap->K), free(cap->V);
    free(cap);
}

int hy_entry_build_begin(const hy_model *m, int64_t pos, const int32_t *tokens, size_t n, int W,
                         hy_entry_repr repr, hy_entry **out, hy_capture **cap_out, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    *out = NULL;
    *cap_out = NULL;
    int w, rc = hy_entry_seam(c, n, W, &w, err);
    if (rc) return rc;
    if ((rc = hy_entry_repr_check(&repr, err))) return rc;
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return hy_err_set(err, HY_ERANGE, "token %zu has id %d, outside the vocabulary [0, %d)",
                              i, (int)tokens[i], c->vocab);
    hy_entry *e;
    if ((rc = hy_entry_alloc(m, W, w, (int)n, repr, false, &e, err))) return rc;
    memcpy(e->tokens, tokens, n * sizeof *tokens);
    const hy_la_tkind kind = hy_lin_tkind(c);
    const size_t th = hy_la_t_size(hy_lin_family(c), c->lin_dk), L = (size_t)c->n_layers;
    const bool gdn = hy_lin_family(c) == HY_LA_GDN;
    hy_capture *cap = calloc(1, sizeof *cap);
    bool bad = !cap;
    if (cap) {
        cap->S_w = calloc(L, sizeof *cap->S_w), cap->T = calloc(L, sizeof *cap->T);
        cap->logdecay = calloc(L, sizeof *cap->logdecay);
        cap->K = calloc(L, sizeof *cap->K), cap->V = calloc(L, sizeof *cap->V);
        bad = !cap->S_w || !cap->T || !cap->logdecay || !cap->K || !cap->V;
    }
    for (int i = 0; i < c->n_layers && !bad; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            cap->S_w[i] = hy_alloc(s_floats(c) * 4);
            cap->T[i] = hy_alloc(t_floats(c) * 4);
            if (gdn) cap->logdecay[i] = calloc((size_t)c->lin_v_heads, sizeof(double));
            bad = !cap->S_w[i] || !cap->T[i] || (gdn && !cap->logdecay[i]);
            for (int h = 0; h < c->lin_v_heads && !bad; h++)
                hy_la_t_identity(kind, c->lin_dk, cap->T[i] + (size_t)h * th);
        } else if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            const bool f32 = repr.kv == HY_ENTRY_F32;
            cap->K[i] = f32 ? e->K[i] : hy_alloc(HY_MAX(k_floats(c, e->nb), 1) * 4);
            cap->V[i] = f32 ? e->V[i] : hy_alloc(HY_MAX(v_floats(c, e->nb), 1) * 4);
            bad = !cap->K[i] || !cap->V[i];
        }
    }
    if (bad) {
        capture_free(cap, e);
        hy_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "out of memory for an entry of %zu tokens", n);
    }
    cap->start = pos + w;
    cap->end = pos + (int64_t)n;
    cap->tail = e->tail;
    /* K, V hold nb rows: the body, [start, end) */
    assert(cap->end - cap->start == e->nb);
    *out = e;
    *cap_out = cap;
    return HY_OK;
}

/* Layer li's heads encoded (in parallel: an SVD or two per head) and packed
 * into one block the head records point into. */
static int store_linear(hy_entry *e, hy_capture *cap, int li)
{
    const hy_model_config *c = &e->cfg;
    const int H = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const hy_la_tkind kind = hy_lin_tkind(c);
    const size_t th = hy_la_t_size(hy_lin_family(c), dk), ss = (size_t)dk * dv;
    hy_head_rep *tr = e->th + (size_t)li * H, *sr = e->sh + (size_t)li * H;
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed) if (H > 1)
    for (int h = 0; h < 2 * H; h++) {
        const double lg = cap->logdecay[li] ? cap->logdecay[li][h % H] : NAN;
        failed |= h < H
                      ? hy_rep_encode_t(kind, dk, cap->T[li] + (size_t)h * th, lg, &e->repr, &tr[h])
                      : hy_rep_encode_s(dk, dv, cap->S_w[li] + (size_t)(h - H) * ss, &e->repr,
                                        &sr[h - H]);
    }
    /* one block per part: every payload at a multiple of 16 */
    for (int part = 0; part < 2; part++) {
        hy_head_rep *r = part ? sr : tr;
        size_t total = 0;
        for (int h = 0; h < H; h++) total += (r[h].bytes + 15) & ~(size_t)15;
        unsigned char *blk = failed ? NULL : hy_alloc(HY_MAX(total, 1));
        if (!blk) failed = 1;
        size_t off = 0;
        for (int h = 0; h < H; h++) {
            void *p = (void *)r[h].p;
            if (blk && p) {
                memcpy(blk + off, p, r[h].bytes);
                r[h].p = blk + off;
            } else if (!blk) {
                r[h].p = NULL, r[h].bytes = 0, r[h].form = HY_FORM_ZERO;
            }
            free(p);
            off += (r[h].bytes + 15) & ~(size_t)15;
        }
        if (part)
            e->S[li] = blk;
        else
            e->T[li] = blk;
    }
    return failed ? HY_ENOMEM : HY_OK;
}

int hy_entry_build_layer(hy_entry *e, hy_capture *cap, int li)
{
    const hy_model_config *c = &e->cfg;
    int rc = HY_OK;
    if (c->layer_kind[li] == HY_LAYER_LINEAR && cap->T[li]) {
        rc = store_linear(e, cap, li);
        hy_free(cap->T[li]), hy_free(cap->S_w[li]);
        free(cap->logdecay[li]);
        cap->T[li] = NULL, cap->S_w[li] = NULL, cap->logdecay[li] = NULL;
    } else if (c->layer_kind[li] == HY_LAYER_ATTENTION && cap->K[li] && cap->K[li] != e->K[li]) {
        uint16_t *k = e->K[li], *v = e->V[li]; /* K/V in bf16 */
        for (size_t j = 0; j < k_floats(c, e->nb); j++) k[j] = hy_f32_to_bf16(cap->K[li][j]);
        for (size_t j = 0; j < v_floats(c, e->nb); j++) v[j] = hy_f32_to_bf16(cap->V[li][j]);
        hy_free(cap->K[li]), hy_free(cap->V[li]);
        cap->K[li] = e->K[li], cap->V[li] = e->V[li];
    }
    return rc;
}

int hy_entry_build_end(hy_entry *e, hy_capture *cap)
{
    if (!cap) return HY_OK;
    int rc = HY_OK;
    for (int i = 0; i < e->n_layers; i++) {
        const int r = hy_entry_build_layer(e, cap, i);
        if (!rc) rc = r;
    }
    capture_free(cap, e);
    return rc;
}

int hy_entry_finish(hy_entry *e, hy_err *err)
{
    if (!e || !e->pending) return HY_OK;
    hy_capture *cap = e->pending;
    e->pending = NULL;
    const int rc = hy_entry_build_end(e, cap);
    return rc ? hy_err_set(err, rc, "out of memory finishing an entry of %d tokens", e->n) : HY_OK;
}

int hy_entry_build(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                   hy_entry_repr repr, float *logits, hy_entry **out, hy_err *err)
{
    *out = NULL;
    assert(state_fits(st));
    hy_entry *e;
    hy_capture *cap;
    int rc = hy_entry_build_begin(st->m, st->pos, tokens, n, W, repr, &e, &cap, err);
    if (rc) return rc;
    /* One pass over the whole segment: the seam runs as usual, the body also
     * advances T and records canonical K/V, and at its end S_body and the
     * tail land in the capture; then each layer is stored in the entry's
     * representation. */
    const hy_piece p = {.tokens = tokens, .n = n, .cap = cap};
    rc = hy_exec_run(ex, st, &p, 1, logits, NULL, err);
    const int brc = hy_entry_build_end(e, cap);
    if (!rc && brc) rc = hy_err_set(err, brc, "out of memory storing an entry of %zu tokens", n);
    if (rc) {
        hy_entry_free(e);
        return rc;
    }
    *out = e;
    return HY_OK;
}

/* A streamed build's hook: a layer is final in the step that reaches the
 * segment's end; it is stored then, layer by layer, instead of at
 * hy_entry_build_end. */
typedef struct stream_ctx {
    hy_entry *e;
    hy_capture *cap;
    int64_t end;
    hy_entry_layer_fn on_layer;
    void *ctx;
    int rc;
} stream_ctx;

static void layer_done(void *arg, int layer, int64_t end)
{
    stream_ctx *sc = arg;
    if (end != sc->end) return; /* an earlier step: more rows to come */
    const int rc = hy_entry_build_layer(sc->e, sc->cap, layer);
    if (rc) {
        if (!sc->rc) sc->rc = rc;
        return;
    }
    if (!sc->rc) sc->on_layer(sc->ctx, sc->e, layer);
}

int hy_entry_build_streamed(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                            hy_entry_repr repr, hy_entry_layer_fn on_layer, void *ctx,
                            hy_entry **out, hy_err *err)
{
    *out = NULL;
    assert(state_fits(st));
    hy_entry *e;
    hy_capture *cap;
    int rc = hy_entry_build_begin(st->m, st->pos, tokens, n, W, repr, &e, &cap, err);
    if (rc) return rc;
    stream_ctx sc = {
        .e = e, .cap = cap, .end = st->pos + (int64_t)n, .on_layer = on_layer, .ctx = ctx};
    const hy_piece p = {.tokens = tokens, .n = n, .cap = cap};
    hy_exec_set_layer_hook(ex, layer_done, &sc);
    rc = hy_exec_run(ex, st, &p, 1, NULL, NULL, err);
    hy_exec_set_layer_hook(ex, NULL, NULL);
    const int brc = hy_entry_build_end(e, cap);
    if (!rc && (sc.rc || brc))
        rc =
            hy_err_set(err, sc.rc ? sc.rc : brc, "out of memory storing an entry of %zu tokens", n);
    if (rc) {
        hy_entry_free(e);
        return rc;
    }
    *out = e;
    return HY_OK;
}

/* --- reuse ------------------------------------------------------------------- */

int hy_entry_apply(hy_exec *ex, hy_state *st, const hy_entry *e, bool use_T, hy_err *err)
{
    /* the seam, recomputed under the true prefix, then the body as a hole */
    const hy_piece p[2] = {{.tokens = e->tokens, .n = (size_t)e->w}, {.hole = e, .use_T = use_T}};
    assert(state_fits(st));
    return e->w > 0 ? hy_exec_run(ex, st, p, 2, NULL, NULL, err)
                    : hy_exec_run(ex, st, p + 1, 1, NULL, NULL, err);
}

/* --- accessors -------------------------------------------------------------- */

int hy_entry_tokens(const hy_entry *e, const int32_t **tokens)
{
    if (tokens) *tokens = e->tokens;
    return e->n;
}

int hy_entry_seam_width(const hy_entry *e)
{
    return e->w;
}

int hy_entry_body_tokens(const hy_entry *e)
{
    return e->nb;
}

int hy_entry_layers(const hy_entry *e)
{
    return e->n_layers;
}

int hy_entry_seam_setting(const hy_entry *e)
{
    return e->W;
}

hy_entry_dtype hy_entry_dtype_of(const hy_entry *e)
{
    return e->repr.s;
}

hy_entry_repr hy_entry_repr_of(const hy_entry *e)
{
    return e->repr;
}

int hy_entry_version(const hy_entry *e)
{
    return e->version;
}

void hy_entry_census_of(const hy_entry *e, hy_entry_census *out)
{
    memset(out, 0, sizeof *out);
    const hy_model_config *c = &e->cfg;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        for (int h = 0; h < c->lin_v_heads; h++) {
            const hy_head_rep *t = &e->th[(size_t)i * c->lin_v_heads + h];
            const hy_head_rep *s = &e->sh[(size_t)i * c->lin_v_heads + h];
            out->t_heads[t->form]++, out->s_heads[s->form]++;
            out->t_bytes[t->form] += t->bytes, out->s_bytes[s->form] += s->bytes;
            out->t_bf16 += t->bytes && t->dtype == HY_ENTRY_BF16;
            out->s_bf16 += s->bytes && s->dtype == HY_ENTRY_BF16;
            out->t_bound_max = fmaxf(out->t_bound_max, t->bound);
            out->s_bound_max = fmaxf(out->s_bound_max, s->bound);
        }
    }
}

/* The key's version: 1 since the first format. A representation version 1
 * could state (tol = 0, T and K/V in F32) hashes as it did then, so entries
 * stored by earlier builds keep their keys; any other appends its fields. */
#define KEY_VERSION 1

int hy_entry_key(const char *tenant, const uint8_t model_fp[32], int W, hy_entry_repr repr,
                 const int32_t *tokens, size_t n, uint8_t key[32])
{
    hy_sha256_ctx *h;
    if (hy_sha256_begin(&h)) return HY_ENOMEM;
    const char *t = tenant ? tenant : "";
    /* every integer little-endian, whatever the host's order */
    uint32_t tolbits = 0; /* −0 hashes as 0 */
    if (repr.tol != 0.0f) memcpy(&tolbits, &repr.tol, 4);
    const uint32_t hdr[7] = {(uint32_t)strlen(t), KEY_VERSION,       (uint32_t)W, (uint32_t)repr.s,
                             (uint32_t)repr.t,    (uint32_t)repr.kv, tolbits};
    const bool v1 = repr.tol == 0.0f && repr.t == HY_ENTRY_F32 && repr.kv == HY_ENTRY_F32;
    unsigned char le[1024];
    for (int i = 0; i < 7; i++)
        for (int b = 0; b < 4; b++) le[4 * i + b] = (unsigned char)(hdr[i] >> (8 * b));
    hy_sha256_add(h, "hypic-entry-key", 16);
    hy_sha256_add(h, le, 4); /* length-prefixed tenant: no ambiguity with what follows */
    hy_sha256_add(h, t, hdr[0]);
    hy_sha256_add(h, model_fp, 32);
    hy_sha256_add(h, le + 4, v1 ? 12 : 24);
    /* the tokens in blocks: one hash update per 256 tokens, not per token */
    for (size_t i = 0; i < n;) {
        size_t k = 0;
        for (; i < n && k < sizeof le; i++, k += 4) {
            const uint32_t v = (uint32_t)tokens[i];
            le[k] = (unsigned char)v, le[k + 1] = (unsigned char)(v >> 8);
            le[k + 2] = (unsigned char)(v >> 16), le[k + 3] = (unsigned char)(v >> 24);
        }
        hy_sha256_add(h, le, k);
    }
    hy_sha256_end(h, key);
    return HY_OK;
}
