/*
 * Segment entries: build, reuse, serialise (DESIGN.md §1–2, issue 3).
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
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <stdlib.h>
#include <string.h>

/* --- sizes ---------------------------------------------------------------- */

static size_t t_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * c->lin_dk * c->lin_dk;
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
    hy_entry *e;
    if ((rc = hy_entry_alloc(m, W, w, (int)n, dtype, &e, err))) return rc;
    memcpy(e->tokens, tokens, n * sizeof *tokens);
    const int Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    float **S_w = calloc((size_t)c->n_layers, sizeof *S_w);
    if (!S_w) rc = hy_err_set(err, HY_ENOMEM, "out of memory");

    /* One prefill of the whole segment with a capture from the body's start:
     * the seam runs as usual, the body also advances T (from I) and records
     * canonical K/V, and the state at the body's start lands in S_w. */
    for (int i = 0; i < c->n_layers && !rc; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        if (!(S_w[i] = hy_alloc(s_floats(c) * 4))) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
            break;
        }
        memset(e->T[i], 0, t_floats(c) * 4);
        for (int h = 0; h < Hv; h++)
            for (int d = 0; d < dk; d++) e->T[i][(size_t)h * dk * dk + (size_t)d * dk + d] = 1.0f;
    }
    if (!rc) {
        hy_capture cap = {.start = st->pos + w, .S_w = S_w, .T = e->T, .K = e->K, .V = e->V};
        hy_exec_set_capture(ex, &cap);
        rc = hy_exec_prefill(ex, st, tokens, n, logits, err);
        hy_exec_set_capture(ex, NULL);
    }

    /* S_body = S_n − T·S_w per head; the tail is the conv state now. */
    for (int i = 0; i < c->n_layers && !rc; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        float *sb = S_w[i]; /* reused: S_w -> S_body */
        float *tmp = hy_alloc(s_floats(c) * 4);
        if (!tmp) {
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
            break;
        }
        memcpy(tmp, st->S[i], s_floats(c) * 4);
#pragma omp parallel for schedule(static)
        for (int h = 0; h < Hv; h++)
            hy_gemm(0, 0, dk, dv, dk, -1.0f, e->T[i] + (size_t)h * dk * dk, (size_t)dk,
                    sb + (size_t)h * dk * dv, (size_t)dv, 1.0f, tmp + (size_t)h * dk * dv,
                    (size_t)dv);
        if (dtype == HY_ENTRY_F32) {
            memcpy(e->S[i], tmp, s_floats(c) * 4);
        } else {
            uint16_t *o = e->S[i];
            for (size_t j = 0; j < s_floats(c); j++) o[j] = hy_f32_to_bf16(tmp[j]);
        }
        hy_free(tmp);
        memcpy(e->tail[i], st->conv[i], tail_floats(c) * 4);
    }
    for (int i = 0; S_w && i < c->n_layers; i++) hy_free(S_w[i]);
    free(S_w);
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
    const hy_model *m = st->m;
    const hy_model_config *c = &m->cfg;
    if (memcmp(e->model_fp, m->fingerprint, 32) != 0)
        return hy_err_set(err, HY_EINVAL,
                          "the entry was built for another model (fingerprint "
                          "differs)");
    if (e->n_layers != c->n_layers)
        return hy_err_set(err, HY_EINVAL, "the entry has %d layers, the model %d", e->n_layers,
                          c->n_layers);
    int rc = hy_state_reserve(st, st->pos + e->n, err);
    if (rc) return rc;
    float *tmp = hy_alloc(s_floats(c) * 4);
    if (!tmp) return hy_err_set(err, HY_ENOMEM, "out of memory");

    /* The seam, recomputed under the true prefix through every layer. */
    if (e->w > 0 && (rc = hy_exec_prefill(ex, st, e->tokens, (size_t)e->w, NULL, err))) {
        hy_free(tmp);
        return rc;
    }

    const int Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const int KV = c->n_kv_heads * c->head_dim, hd = c->head_dim;
    const int64_t p0 = st->pos;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            float *S = st->S[i];
            const size_t SS = s_floats(c);
            if (e->dtype == HY_ENTRY_F32) {
                memcpy(tmp, e->S[i], SS * 4);
            } else {
                const uint16_t *b = e->S[i];
                for (size_t j = 0; j < SS; j++) tmp[j] = hy_bf16_to_f32(b[j]);
            }
            if (use_T) { /* tmp = S_body + T·S, then S = tmp */
#pragma omp parallel for schedule(static)
                for (int h = 0; h < Hv; h++)
                    hy_gemm(0, 0, dk, dv, dk, 1.0f, e->T[i] + (size_t)h * dk * dk, (size_t)dk,
                            S + (size_t)h * dk * dv, (size_t)dv, 1.0f, tmp + (size_t)h * dk * dv,
                            (size_t)dv);
            } else { /* naive addition: drops T, wrong for any decaying layer */
                for (size_t j = 0; j < SS; j++) tmp[j] += S[j];
            }
            memcpy(S, tmp, SS * 4);
            memcpy(st->conv[i], e->tail[i], tail_floats(c) * 4);
        } else {
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
    hy_free(tmp);
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

int hy_entry_key(const char *tenant, const uint8_t model_fp[32], int W, hy_entry_dtype dtype,
                 const int32_t *tokens, size_t n, uint8_t key[32])
{
    hy_sha256_ctx *h;
    if (hy_sha256_begin(&h)) return HY_ENOMEM;
    const char *t = tenant ? tenant : "";
    uint32_t hdr[4] = {(uint32_t)strlen(t), HY_ENTRY_VERSION, (uint32_t)W, (uint32_t)dtype};
    hy_sha256_add(h, "hypic-entry-key", 16);
    hy_sha256_add(h, &hdr[0], 4); /* length-prefixed tenant: no ambiguity with what follows */
    hy_sha256_add(h, t, hdr[0]);
    hy_sha256_add(h, model_fp, 32);
    hy_sha256_add(h, &hdr[1], 12);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)tokens[i];
        unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                               (unsigned char)(v >> 24)};
        hy_sha256_add(h, le, 4);
    }
    hy_sha256_end(h, key);
    return HY_OK;
}
