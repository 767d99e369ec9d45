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
#include <stdlib.h>
#include <string.h>

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
static size_t s_elem(hy_entry_dtype dt)
{
    return dt == HY_ENTRY_BF16 ? 2 : 4;
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
    if (e->dtype != HY_ENTRY_F32 && e->dtype != HY_ENTRY_BF16) return false;
    if (ec->lin_v_heads != c->lin_v_heads || ec->lin_dk != c->lin_dk || ec->lin_dv != c->lin_dv ||
        ec->conv_kernel != c->conv_kernel || hy_config_conv_dim(ec) != hy_config_conv_dim(c) ||
        ec->n_kv_heads != c->n_kv_heads || ec->head_dim != c->head_dim || ec->mla != c->mla ||
        hy_config_kv_k(ec) != hy_config_kv_k(c) || hy_config_kv_v(ec) != hy_config_kv_v(c))
        return false;
    for (int i = 0; i < c->n_layers; i++) {
        if (ec->layer_kind[i] != c->layer_kind[i]) return false;
        if (c->layer_kind[i] == HY_LAYER_LINEAR && (!e->T[i] || !e->S[i] || !e->tail[i]))
            return false;
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

void hy_entry_free(hy_entry *e)
{
    if (!e) return;
    for (int i = 0; i < e->n_layers && !e->view; i++) {
        if (e->T) hy_free(e->T[i]);
        if (e->S) hy_free(e->S[i]);
        if (e->tail) hy_free(e->tail[i]);
        if (e->K) hy_free(e->K[i]);
        if (e->V) hy_free(e->V[i]);
    }
    free(e->T), free(e->S), free(e->tail), free(e->K), free(e->V);
    if (!e->view) hy_free(e->tokens);
    free(e);
}

/* Allocates an entry's sections for the model (contents undefined). */
int hy_entry_alloc(const hy_model *m, int W, int w, int n, hy_entry_dtype dt, bool view,
                   hy_entry **out, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    /* the seam rule (hy_entry_seam) leaves at least one body token */
    assert(n >= 1 && w >= 0 && w < n && c->n_layers <= HY_MAX_LAYERS);
    assert(dt == HY_ENTRY_F32 || dt == HY_ENTRY_BF16);
    hy_entry *e = calloc(1, sizeof *e);
    if (!e) return hy_err_set(err, HY_ENOMEM, "out of memory");
    e->cfg = *c;
    e->W = W, e->w = w, e->n = n, e->nb = n - w, e->dtype = dt, e->n_layers = c->n_layers;
    memcpy(e->model_fp, m->fingerprint, 32);
    const size_t L = (size_t)c->n_layers;
    e->T = calloc(L, sizeof *e->T), e->S = calloc(L, sizeof *e->S);
    e->tail = calloc(L, sizeof *e->tail);
    e->K = calloc(L, sizeof *e->K), e->V = calloc(L, sizeof *e->V);
    e->view = view;
    e->tokens = view ? NULL : hy_alloc((size_t)n * sizeof *e->tokens);
    int bad = !e->T || !e->S || !e->tail || !e->K || !e->V || (!view && !e->tokens);
    for (int i = 0; i < c->n_layers && !bad && !view; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            e->T[i] = hy_alloc(t_floats(c) * 4);
            e->S[i] = hy_alloc(s_floats(c) * s_elem(dt));
            e->tail[i] = hy_alloc(tail_floats(c) * 4);
            bad = !e->T[i] || !e->S[i] || !e->tail[i];
        } else if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            e->K[i] = hy_alloc(k_floats(c, e->nb) * 4);
            e->V[i] = hy_alloc(v_floats(c, e->nb) * 4);
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

int hy_entry_build_begin(const hy_model *m, int64_t pos, const int32_t *tokens, size_t n, int W,
                         hy_entry_dtype dtype, hy_entry **out, hy_capture **cap_out, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    *out = NULL;
    *cap_out = NULL;
    int w, rc = hy_entry_seam(c, n, W, &w, err);
    if (rc) return rc;
    if (dtype != HY_ENTRY_F32 && dtype != HY_ENTRY_BF16)
        return hy_err_set(err, HY_EINVAL, "entry storage dtype %d is not F32 or BF16", (int)dtype);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return hy_err_set(err, HY_ERANGE, "token %zu has id %d, outside the vocabulary [0, %d)",
                              i, (int)tokens[i], c->vocab);
    hy_entry *e;
    if ((rc = hy_entry_alloc(m, W, w, (int)n, dtype, false, &e, err))) return rc;
    memcpy(e->tokens, tokens, n * sizeof *tokens);
    const hy_la_tkind kind = hy_lin_tkind(c);
    const size_t th = hy_la_t_size(hy_lin_family(c), c->lin_dk);
    hy_capture *cap = calloc(1, sizeof *cap);
    float **S_w = calloc((size_t)c->n_layers, sizeof *S_w);
    bool bad = !cap || !S_w;
    /* S_w: the state at the body's start, then S_body in place — straight in
     * the entry's S when that is fp32, else an fp32 buffer rounded at the end */
    for (int i = 0; i < c->n_layers && !bad; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        S_w[i] = dtype == HY_ENTRY_F32 ? (float *)e->S[i] : hy_alloc(s_floats(c) * 4);
        bad = !S_w[i];
        for (int h = 0; h < c->lin_v_heads && !bad; h++)
            hy_la_t_identity(kind, c->lin_dk, e->T[i] + (size_t)h * th);
    }
    if (bad) {
        for (int i = 0; S_w && i < c->n_layers; i++)
            if (S_w[i] != (float *)e->S[i]) hy_free(S_w[i]);
        free(S_w);
        free(cap);
        hy_entry_free(e);
        return hy_err_set(err, HY_ENOMEM, "out of memory for an entry of %zu tokens", n);
    }
    *cap = (hy_capture){.start = pos + w,
                        .end = pos + (int64_t)n,
                        .S_w = S_w,
                        .T = e->T,
                        .K = e->K,
                        .V = e->V,
                        .tail = e->tail};
    /* K, V hold nb rows: the body, [start, end) */
    assert(cap->end - cap->start == e->nb);
    *out = e;
    *cap_out = cap;
    return HY_OK;
}

void hy_entry_build_end(hy_entry *e, hy_capture *cap)
{
    if (!cap) return;
    const hy_model_config *c = &e->cfg;
    for (int i = 0; cap->S_w && i < c->n_layers; i++) {
        if (!cap->S_w[i] || cap->S_w[i] == e->S[i]) continue;
        uint16_t *o = e->S[i]; /* BF16: S_body rounded */
        for (size_t j = 0; j < s_floats(c); j++) o[j] = hy_f32_to_bf16(cap->S_w[i][j]);
        hy_free(cap->S_w[i]);
    }
    free(cap->S_w);
    free(cap);
}

int hy_entry_build(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                   hy_entry_dtype dtype, float *logits, hy_entry **out, hy_err *err)
{
    *out = NULL;
    assert(state_fits(st));
    hy_entry *e;
    hy_capture *cap;
    int rc = hy_entry_build_begin(st->m, st->pos, tokens, n, W, dtype, &e, &cap, err);
    if (rc) return rc;
    /* One pass over the whole segment: the seam runs as usual, the body also
     * advances T and records canonical K/V, and at its end S_body and the
     * tail land in the entry. */
    const hy_piece p = {.tokens = tokens, .n = n, .cap = cap};
    rc = hy_exec_run(ex, st, &p, 1, logits, NULL, err);
    hy_entry_build_end(e, cap);
    if (rc) {
        hy_entry_free(e);
        return rc;
    }
    *out = e;
    return HY_OK;
}

/* A streamed build's hook: a layer is final in the step that reaches the
 * segment's end; BF16 S is rounded then, layer by layer, instead of at
 * hy_entry_build_end. */
typedef struct stream_ctx {
    hy_entry *e;
    hy_capture *cap;
    int64_t end;
    hy_entry_layer_fn on_layer;
    void *ctx;
} stream_ctx;

static void layer_done(void *arg, int layer, int64_t end)
{
    stream_ctx *sc = arg;
    if (end != sc->end) return; /* an earlier step: more rows to come */
    const hy_model_config *c = &sc->e->cfg;
    float *Sw = sc->cap->S_w ? sc->cap->S_w[layer] : NULL;
    if (Sw && Sw != sc->e->S[layer]) {
        uint16_t *o = sc->e->S[layer];
        for (size_t j = 0; j < s_floats(c); j++) o[j] = hy_f32_to_bf16(Sw[j]);
        hy_free(Sw);
        sc->cap->S_w[layer] = NULL; /* hy_entry_build_end skips it */
    }
    sc->on_layer(sc->ctx, sc->e, layer);
}

int hy_entry_build_streamed(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                            hy_entry_dtype dtype, hy_entry_layer_fn on_layer, void *ctx,
                            hy_entry **out, hy_err *err)
{
    *out = NULL;
    assert(state_fits(st));
    hy_entry *e;
    hy_capture *cap;
    int rc = hy_entry_build_begin(st->m, st->pos, tokens, n, W, dtype, &e, &cap, err);
    if (rc) return rc;
    stream_ctx sc = {
        .e = e, .cap = cap, .end = st->pos + (int64_t)n, .on_layer = on_layer, .ctx = ctx};
    const hy_piece p = {.tokens = tokens, .n = n, .cap = cap};
    hy_exec_set_layer_hook(ex, layer_done, &sc);
    rc = hy_exec_run(ex, st, &p, 1, NULL, NULL, err);
    hy_exec_set_layer_hook(ex, NULL, NULL);
    hy_entry_build_end(e, cap);
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

int hy_entry_seam_setting(const hy_entry *e)
{
    return e->W;
}

hy_entry_dtype hy_entry_dtype_of(const hy_entry *e)
{
    return e->dtype;
}

int hy_entry_key(const char *tenant, const uint8_t model_fp[32], int W, hy_entry_dtype dtype,
                 const int32_t *tokens, size_t n, uint8_t key[32])
{
    hy_sha256_ctx *h;
    if (hy_sha256_begin(&h)) return HY_ENOMEM;
    const char *t = tenant ? tenant : "";
    /* every integer little-endian, whatever the host's order */
    const uint32_t hdr[4] = {(uint32_t)strlen(t), HY_ENTRY_VERSION, (uint32_t)W, (uint32_t)dtype};
    unsigned char le[1024];
    for (int i = 0; i < 4; i++)
        for (int b = 0; b < 4; b++) le[4 * i + b] = (unsigned char)(hdr[i] >> (8 * b));
    hy_sha256_add(h, "hypic-entry-key", 16);
    hy_sha256_add(h, le, 4); /* length-prefixed tenant: no ambiguity with what follows */
    hy_sha256_add(h, t, hdr[0]);
    hy_sha256_add(h, model_fp, 32);
    hy_sha256_add(h, le + 4, 12);
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
