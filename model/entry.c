/*
 * Segment entries: build, reuse, serialise (docs/entry-format.md).
 *
 * Build. The segment is prefilled in one call with a capture set on the
 * executor from the body's start (token w): the seam runs as usual; from the
 * body on each linear layer's transition operator T (from I) advances
 * alongside the real state and each attention layer's canonical K and V are
 * recorded. With S_w the state when the body starts and S_n the state after
 * it, the body's zero-start state is
 *     S_body = S_n − T·S_w            (S_n = T·S_w + S_body: the map is affine)
 * so one extra T pass, not a second state pass, builds the entry — the same
 * code serves the independent build (st empty) and the inline one (st the
 * request's running state). The entry never contains the seam's
 * contribution: T and S_body start at the body.
 *
 * Reuse. The seam is recomputed from the running state through every layer;
 * then the body is composed: S ← T·S + S_body, conv state ← tail, K rotated
 * to its true positions and V appended.
 *
 * Both linear-layer steps are the composition kernels of hy_kernels.h —
 * hy_la_extract_heads builds S_body, hy_la_apply_heads applies (T, S_body) —
 * the functions tests/kernels/test_linear_families.c checks against the
 * recurrence over whole sequences for every family. The executor's linear
 * layers are Gated DeltaNet, a family with a dense dk×dk T per head. `naive`
 * reuse is the same apply with T replaced by the identity (S ← S + S_body).
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The family of every linear layer the executor runs. */
#define LIN_FAMILY HY_LA_GDN

/* --- sizes ---------------------------------------------------------------- */

static size_t t_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * hy_la_t_size(LIN_FAMILY, c->lin_dk);
}
static size_t s_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv;
}
static size_t tail_floats(const hy_model_config *c)
{
    return (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c);
}
static size_t kv_floats(const hy_model_config *c, int nb)
{
    return (size_t)nb * c->n_kv_heads * c->head_dim;
}
static size_t s_elem(hy_entry_dtype dt)
{
    return dt == HY_ENTRY_BF16 ? 2 : 4;
}
/* Scratch of the composition kernels for one layer's heads. */
static size_t compose_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads *
           hy_la_compose_scratch(hy_la_t_kind(LIN_FAMILY), c->lin_dk, c->lin_dv);
}

/* Whether e's sections have the shapes model config c reads and writes
 * through: every copy below sizes itself from c, so an entry of other shapes
 * would overrun its sections. The fingerprint check makes this hold for any
 * entry that reaches hy_entry_apply; it is asserted, not handled. */
static inline bool entry_fits(const hy_entry *e, const hy_model_config *c)
{
    const hy_model_config *ec = &e->cfg;
    if (e->n_layers != c->n_layers || ec->n_layers != c->n_layers || c->n_layers > HY_MAX_LAYERS)
        return false;
    if (e->n < 1 || e->w < 0 || e->w >= e->n || e->nb != e->n - e->w) return false;
    if (e->dtype != HY_ENTRY_F32 && e->dtype != HY_ENTRY_BF16) return false;
    if (ec->lin_v_heads != c->lin_v_heads || ec->lin_dk != c->lin_dk || ec->lin_dv != c->lin_dv ||
        ec->conv_kernel != c->conv_kernel || hy_config_conv_dim(ec) != hy_config_conv_dim(c) ||
        ec->n_kv_heads != c->n_kv_heads || ec->head_dim != c->head_dim)
        return false;
    for (int i = 0; i < c->n_layers; i++) {
        if (ec->layer_kind[i] != c->layer_kind[i]) return false;
        if (c->layer_kind[i] == HY_LAYER_LINEAR ? !e->T[i] || !e->S[i] || !e->tail[i]
                                                : !e->K[i] || !e->V[i])
            return false;
    }
    return true;
}

/* Whether st holds buffers for every layer of its model. */
static inline bool state_fits(const hy_state *st)
{
    const hy_model_config *c = &st->m->cfg;
    for (int i = 0; i < c->n_layers; i++)
        if (c->layer_kind[i] == HY_LAYER_LINEAR ? !st->S[i] || !st->conv[i]
                                                : st->kv_cap > 0 && (!st->k[i] || !st->v[i]))
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
    for (int i = 0; i < e->n_layers; i++) {
        if (e->T) hy_free(e->T[i]);
        if (e->S) hy_free(e->S[i]);
        if (e->tail) hy_free(e->tail[i]);
        if (e->K) hy_free(e->K[i]);
        if (e->V) hy_free(e->V[i]);
    }
    free(e->T), free(e->S), free(e->tail), free(e->K), free(e->V);
    hy_free(e->tokens);
    free(e);
}

/* Allocates an entry's sections for the model (contents undefined). */
int hy_entry_alloc(const hy_model *m, int W, int w, int n, hy_entry_dtype dt, hy_entry **out,
                   hy_err *err)
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
    e->tokens = hy_alloc((size_t)n * sizeof *e->tokens);
    int bad = !e->T || !e->S || !e->tail || !e->K || !e->V || !e->tokens;
    for (int i = 0; i < c->n_layers && !bad; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            e->T[i] = hy_alloc(t_floats(c) * 4);
            e->S[i] = hy_alloc(s_floats(c) * s_elem(dt));
            e->tail[i] = hy_alloc(tail_floats(c) * 4);
            bad = !e->T[i] || !e->S[i] || !e->tail[i];
        } else {
            e->K[i] = hy_alloc(kv_floats(c, e->nb) * 4);
            e->V[i] = hy_alloc(kv_floats(c, e->nb) * 4);
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

int hy_entry_build(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                   hy_entry_dtype dtype, float *logits, hy_entry **out, hy_err *err)
{
    const hy_model *m = st->m;
    const hy_model_config *c = &m->cfg;
    *out = NULL;
    int w, rc = hy_entry_seam(c, n, W, &w, err);
    if (rc) return rc;
    if (dtype != HY_ENTRY_F32 && dtype != HY_ENTRY_BF16)
        return hy_err_set(err, HY_EINVAL, "entry storage dtype %d is not F32 or BF16", (int)dtype);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->vocab)
            return hy_err_set(err, HY_ERANGE, "token %zu has id %d, outside the vocabulary [0, %d)",
                              i, (int)tokens[i], c->vocab);
    assert(state_fits(st));
    /* the capture advances a dense [dk][dk] T per head (hy_capture) */
    assert(hy_la_t_kind(LIN_FAMILY) == HY_LA_T_DENSE);
    hy_entry *e;
    if ((rc = hy_entry_alloc(m, W, w, (int)n, dtype, &e, err))) return rc;
    memcpy(e->tokens, tokens, n * sizeof *tokens);
    const hy_la_tkind kind = hy_la_t_kind(LIN_FAMILY);
    const int Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const size_t th = hy_la_t_size(LIN_FAMILY, dk);
    float **S_w = calloc((size_t)c->n_layers, sizeof *S_w);
    float *work = hy_alloc(compose_floats(c) * 4);
    if (!S_w || !work) rc = hy_err_set(err, HY_ENOMEM, "out of memory");

    /* One prefill of the whole segment with a capture from the body's start:
     * the seam runs as usual, the body also advances T (from I) and records
     * canonical K/V (nb rows: the capacity of e->K, e->V), and the state at
     * the body's start lands in S_w. */
    for (int i = 0; i < c->n_layers && !rc; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        if (!(S_w[i] = hy_alloc(s_floats(c) * 4))) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
            break;
        }
        for (int h = 0; h < Hv; h++) hy_la_t_identity(kind, dk, e->T[i] + (size_t)h * th);
    }
    if (!rc) {
        const int64_t p_in = st->pos;
        hy_capture cap = {.start = p_in + w, .S_w = S_w, .T = e->T, .K = e->K, .V = e->V};
        assert(cap.start + e->nb == p_in + (int64_t)n);
        hy_exec_set_capture(ex, &cap);
        rc = hy_exec_prefill(ex, st, tokens, n, logits, err);
        hy_exec_set_capture(ex, NULL);
        assert(rc || st->pos == p_in + (int64_t)n);
    }

    /* S_body = S_n − T·S_w; the tail is the conv state now. BF16 entries
     * take S_body in fp32 in S_w's buffer first, then round it. */
    for (int i = 0; i < c->n_layers && !rc; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        float *sb = dtype == HY_ENTRY_F32 ? (float *)e->S[i] : S_w[i];
        hy_la_extract_heads(kind, Hv, dk, dv, e->T[i], S_w[i], st->S[i], sb, work);
        if (dtype == HY_ENTRY_BF16) {
            uint16_t *o = e->S[i];
            for (size_t j = 0; j < s_floats(c); j++) o[j] = hy_f32_to_bf16(sb[j]);
        }
        memcpy(e->tail[i], st->conv[i], tail_floats(c) * 4);
    }
    for (int i = 0; S_w && i < c->n_layers; i++) hy_free(S_w[i]);
    free(S_w);
    hy_free(work);
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
    return hy_entry_apply_timed(ex, st, e, use_T, NULL, NULL, err);
}

int hy_entry_apply_timed(hy_exec *ex, hy_state *st, const hy_entry *e, bool use_T, double *seam_s,
                         double *compose_s, hy_err *err)
{
    const hy_model *m = st->m;
    const hy_model_config *c = &m->cfg;
    if (memcmp(e->model_fp, m->fingerprint, 32) != 0)
        return hy_err_set(err, HY_EINVAL,
                          "the entry was built for another model (fingerprint "
                          "differs)");
    if (e->n_layers != c->n_layers)
        return hy_err_set(err, HY_EINVAL, "the entry has %d layers, the model %d", e->n_layers,
                          c->n_layers);
    assert(entry_fits(e, c));
    assert(c->rotary_dim >= 0 && c->rotary_dim <= c->head_dim && c->rotary_dim % 2 == 0);
    int rc = hy_state_reserve(st, st->pos + e->n, err);
    if (rc) return rc;
    assert(state_fits(st));
    /* Scratch before the seam runs, so running out of memory leaves st as it
     * was: the kernels' part, and an fp32 copy of a BF16 S_body. */
    const size_t wf = use_T ? compose_floats(c) : 0;
    const size_t bf = e->dtype == HY_ENTRY_BF16 ? s_floats(c) : 0;
    float *work = (wf + bf) ? hy_alloc((wf + bf) * 4) : NULL;
    if ((wf + bf) && !work) return hy_err_set(err, HY_ENOMEM, "out of memory");

    /* The seam, recomputed under the true prefix through every layer. */
    const double t0 = hy_now_s();
    const int64_t p_in = st->pos;
    if (e->w > 0 && (rc = hy_exec_prefill(ex, st, e->tokens, (size_t)e->w, NULL, err))) {
        hy_free(work);
        return rc;
    }
    assert(st->pos == p_in + e->w);
    (void)p_in; /* read by the assertion only */

    const double t1 = hy_now_s();
    if (seam_s) *seam_s += t1 - t0;
    const hy_la_tkind kind = hy_la_t_kind(LIN_FAMILY);
    const int Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const int KV = c->n_kv_heads * c->head_dim, hd = c->head_dim;
    const int64_t p0 = st->pos;
    assert(st->kv_cap >= p0 + e->nb); /* the K, V rows written below */
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            const float *sb = e->S[i];
            if (e->dtype == HY_ENTRY_BF16) {
                const uint16_t *b = e->S[i];
                float *f = work + wf;
                for (size_t j = 0; j < s_floats(c); j++) f[j] = hy_bf16_to_f32(b[j]);
                sb = f;
            }
            if (use_T) {
                hy_la_apply_heads(kind, Hv, dk, dv, e->T[i], sb, st->S[i], work);
            } else { /* naive: T dropped, i.e. replaced by I — wrong for any decaying layer */
                static const float one = 1.0f;
                hy_la_apply(HY_LA_T_SCALAR, Hv * dk, dv, &one, sb, st->S[i], NULL);
            }
            memcpy(st->conv[i], e->tail[i], tail_floats(c) * 4);
        } else {
            /* The forward pass rotates each key with hy_rope_apply at its
             * position; the same call here puts in the cache exactly the K a
             * full prefill would have. (hy_la_rope_state moves a linear
             * layer's state whose keys carry RoPE — none in these models.) */
            float *K = st->k[i] + (size_t)p0 * KV, *V = st->v[i] + (size_t)p0 * KV;
            memcpy(K, e->K[i], kv_floats(c, e->nb) * 4);
            memcpy(V, e->V[i], kv_floats(c, e->nb) * 4);
#pragma omp parallel for schedule(static)
            for (int t = 0; t < e->nb; t++)
                for (int g = 0; g < c->n_kv_heads; g++)
                    hy_rope_apply(K + (size_t)t * KV + (size_t)g * hd, c->rotary_dim,
                                  m->rope_inv_freq, p0 + t);
        }
    }
    st->pos = p0 + e->nb;
    hy_free(work);
    if (compose_s) *compose_s += hy_now_s() - t1;
    return HY_OK;
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
