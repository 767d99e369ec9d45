/*
 * The running state of a prefix: what the executor needs to continue after
 * it. Linear layers keep a constant-size S [Hv][dk][dv] and conv state
 * [K-1][conv_dim]; attention layers keep the rotated K and V of every position
 * ([pos][Hkv][hd]), grown geometrically — MLA layers the normalised latent as
 * K ([pos][kv_lora]) and the shared key part as V ([pos][qk_rope]), beside
 * their per-head expansion (x). Copying a state is how callers
 * checkpoint a prefix.
 *
 * Invariant: 0 ≤ pos ≤ kv_cap (every prefill reserves its positions first),
 * and a layer has S and conv buffers exactly when it is linear, K and V
 * buffers holding kv_cap rows when it is attention and kv_cap > 0.
 */
#include "model_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static size_t s_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv;
}

static size_t conv_floats(const hy_model_config *c)
{
    return (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c);
}

static size_t k_row(const hy_model_config *c)
{
    return (size_t)hy_config_kv_k(c);
}
static size_t v_row(const hy_model_config *c)
{
    return (size_t)hy_config_kv_v(c);
}
/* An MLA layer's expanded row per position: every head's key (its part of
 * kv_b_proj(latent), then the shared part) and every head's value; derived
 * from the K and V rows, kept so that each position is expanded once. */
size_t hy_state_x_row(const hy_model_config *c)
{
    return c->mla ? (size_t)c->n_heads * (size_t)(c->qk_nope + c->qk_rope + c->v_head) : 0;
}

/* Versions are never reused, whichever state they go to: a state freed and
 * another allocated at its address cannot pass for it. */
static _Atomic uint64_t g_version;

void hy_state_touch(hy_state *s)
{
    s->version = ++g_version;
}

void hy_state_free(hy_state *s)
{
    if (!s) return;
    int L = s->m->cfg.n_layers;
    for (int i = 0; i < L; i++) {
        hy_free(s->S[i]);
        hy_free(s->conv[i]);
        free(s->k[i]);
        free(s->v[i]);
        free(s->x[i]);
    }
    free(s->S);
    free(s->conv);
    free(s->k);
    free(s->v);
    free(s->x);
    free(s);
}

int hy_state_new(const hy_model *m, hy_state **out, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    *out = NULL;
    assert(c->n_layers >= 1 && c->n_layers <= HY_MAX_LAYERS); /* the loader's bounds */
    hy_state *s = calloc(1, sizeof *s);
    if (!s) return hy_err_set(err, HY_ENOMEM, "out of memory");
    s->m = m;
    hy_state_touch(s);
    int L = c->n_layers;
    s->S = calloc((size_t)L, sizeof *s->S);
    s->conv = calloc((size_t)L, sizeof *s->conv);
    s->k = calloc((size_t)L, sizeof *s->k);
    s->v = calloc((size_t)L, sizeof *s->v);
    s->x = calloc((size_t)L, sizeof *s->x);
    int bad = !s->S || !s->conv || !s->k || !s->v || !s->x;
    for (int i = 0; i < L && !bad; i++) {
        if (c->layer_kind[i] != HY_LAYER_LINEAR) continue;
        s->S[i] = hy_calloc(s_floats(c) * sizeof(float));
        s->conv[i] = hy_calloc(conv_floats(c) * sizeof(float) + 1);
        bad = !s->S[i] || !s->conv[i];
    }
    if (bad) {
        hy_state_free(s);
        return hy_err_set(err, HY_ENOMEM, "out of memory for the running state");
    }
    *out = s;
    return HY_OK;
}

void hy_state_reset(hy_state *s)
{
    const hy_model_config *c = &s->m->cfg;
    for (int i = 0; i < c->n_layers; i++) {
        if (s->S[i]) memset(s->S[i], 0, s_floats(c) * sizeof(float));
        if (s->conv[i]) memset(s->conv[i], 0, conv_floats(c) * sizeof(float));
    }
    s->pos = 0;
    s->x_valid = 0;
    hy_state_touch(s);
}

int hy_state_reserve(hy_state *s, int64_t need, hy_err *err)
{
    const hy_model_config *c = &s->m->cfg;
    assert(need >= 0 && s->pos >= 0 && s->pos <= s->kv_cap);
    if (need <= s->kv_cap) return HY_OK;
    int64_t cap = s->kv_cap ? s->kv_cap * 2 : 256;
    if (cap < need) cap = need;
    size_t kb, vb, xb;
    if (hy_mul_size((size_t)cap, k_row(c) * sizeof(float), &kb) != HY_OK ||
        hy_mul_size((size_t)cap, v_row(c) * sizeof(float), &vb) != HY_OK ||
        hy_mul_size((size_t)cap, hy_state_x_row(c) * sizeof(float), &xb) != HY_OK)
        return hy_err_set(err, HY_ERANGE, "KV cache of %lld positions overflows", (long long)cap);
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != HY_LAYER_ATTENTION) continue;
        float *nk = realloc(s->k[i], kb);
        if (nk) s->k[i] = nk;
        float *nv = nk ? realloc(s->v[i], vb) : NULL;
        if (nv) s->v[i] = nv;
        float *nx = nv && xb ? realloc(s->x[i], xb) : NULL;
        if (nx) s->x[i] = nx;
        if (!nk || !nv || (xb && !nx))
            return hy_err_set(err, HY_ENOMEM,
                              "out of memory growing the KV cache to %lld positions",
                              (long long)cap);
    }
    s->kv_cap = cap;
    assert(s->kv_cap >= need);
    return HY_OK;
}

void hy_state_trim(hy_state *s, int64_t keep)
{
    const hy_model_config *c = &s->m->cfg;
    if (keep < s->pos) keep = s->pos;
    if (s->kv_cap <= keep) return;
    for (int i = 0; i < c->n_layers; i++) {
        if (c->layer_kind[i] != HY_LAYER_ATTENTION) continue;
        float **bufs[] = {&s->k[i], &s->v[i], &s->x[i]};
        const size_t rows[] = {k_row(c), v_row(c), hy_state_x_row(c)};
        for (int b = 0; b < 3; b++) {
            if (!*bufs[b]) continue;
            if (keep == 0 || rows[b] == 0) {
                free(*bufs[b]);
                *bufs[b] = NULL;
                continue;
            }
            /* a shrink that fails leaves the larger block: still keep rows */
            float *n = realloc(*bufs[b], (size_t)keep * rows[b] * sizeof(float));
            if (n) *bufs[b] = n;
        }
    }
    s->kv_cap = keep;
}

int64_t hy_state_capacity(const hy_state *s)
{
    return s->kv_cap;
}

int hy_state_copy(hy_state *dst, const hy_state *src, hy_err *err)
{
    const hy_model_config *c = &src->m->cfg;
    if (dst->m != src->m) return hy_err_set(err, HY_EINVAL, "state copy between different models");
    assert(src->pos >= 0 && src->pos <= src->kv_cap); /* the rows copied below exist */
    int rc = hy_state_reserve(dst, src->pos, err);
    if (rc) return rc;
    assert(dst->kv_cap >= src->pos);
    for (int i = 0; i < c->n_layers; i++) {
        if (src->S[i]) memcpy(dst->S[i], src->S[i], s_floats(c) * sizeof(float));
        if (src->conv[i]) memcpy(dst->conv[i], src->conv[i], conv_floats(c) * sizeof(float));
        if (src->k[i] && src->pos > 0) {
            memcpy(dst->k[i], src->k[i], (size_t)src->pos * k_row(c) * sizeof(float));
            memcpy(dst->v[i], src->v[i], (size_t)src->pos * v_row(c) * sizeof(float));
            if (src->x[i] && src->x_valid > 0)
                memcpy(dst->x[i], src->x[i],
                       (size_t)src->x_valid * hy_state_x_row(c) * sizeof(float));
        }
    }
    dst->pos = src->pos;
    dst->x_valid = src->x_valid;
    hy_state_touch(dst);
    return HY_OK;
}

size_t hy_state_bytes(const hy_state *s)
{
    const hy_model_config *c = &s->m->cfg;
    size_t b = 0;
    for (int i = 0; i < c->n_layers; i++)
        if (c->layer_kind[i] == HY_LAYER_LINEAR)
            b += (s_floats(c) + conv_floats(c)) * sizeof(float);
        else if (c->layer_kind[i] == HY_LAYER_ATTENTION)
            b += (size_t)s->pos * (k_row(c) + v_row(c) + hy_state_x_row(c)) * sizeof(float);
    return b;
}

int64_t hy_state_pos(const hy_state *s)
{
    return s->pos;
}

static int layer_ok(const hy_state *s, int layer)
{
    return layer >= 0 && layer < s->m->cfg.n_layers;
}

float *hy_state_S(hy_state *s, int layer)
{
    if (!layer_ok(s, layer)) return NULL;
    hy_state_touch(s); /* the caller may write */
    return s->S[layer];
}

float *hy_state_conv(hy_state *s, int layer)
{
    if (!layer_ok(s, layer)) return NULL;
    hy_state_touch(s); /* the caller may write */
    return s->conv[layer];
}

float *hy_state_k(hy_state *s, int layer)
{
    if (!layer_ok(s, layer)) return NULL;
    hy_state_touch(s); /* the caller may write */
    return s->k[layer];
}

float *hy_state_v(hy_state *s, int layer)
{
    if (!layer_ok(s, layer)) return NULL;
    hy_state_touch(s); /* the caller may write */
    return s->v[layer];
}

int hy_state_layout(const hy_model_config *c, int64_t pos, hy_state_tensor *out, uint64_t *total)
{
    uint64_t off = 0;
    int n = 0;
    for (int i = 0; i < c->n_layers; i++) {
        hy_state_tensor a, b;
        if (c->layer_kind[i] == HY_LAYER_MLP) continue; /* no state */
        if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            a = (hy_state_tensor){
                i, HY_PART_CONV,
                2, {(uint64_t)c->conv_kernel - 1, (uint64_t)hy_config_conv_dim(c)},
                0, conv_floats(c) * sizeof(float)};
            b = (hy_state_tensor){
                i, HY_PART_S,
                3, {(uint64_t)c->lin_v_heads, (uint64_t)c->lin_dk, (uint64_t)c->lin_dv},
                0, s_floats(c) * sizeof(float)};
        } else {
            /* MLA: the latent and the shared key part, one "head" each, as
             * transformers' cache keeps them */
            const uint64_t kh = c->mla ? 1 : (uint64_t)c->n_kv_heads;
            a = (hy_state_tensor){i, HY_PART_K,
                                  3, {(uint64_t)pos, kh, k_row(c) / kh},
                                  0, (uint64_t)pos * k_row(c) * sizeof(float)};
            b = (hy_state_tensor){i, HY_PART_V,
                                  3, {(uint64_t)pos, kh, v_row(c) / kh},
                                  0, (uint64_t)pos * v_row(c) * sizeof(float)};
        }
        hy_state_tensor *two[2] = {&a, &b};
        for (int j = 0; j < 2; j++) {
            off = (off + HY_STATE_ALIGN - 1) / HY_STATE_ALIGN * HY_STATE_ALIGN;
            two[j]->offset = off;
            off += two[j]->bytes;
            out[n++] = *two[j];
        }
    }
    *total = off;
    return n;
}

const float *hy_state_part_data(hy_state *st, const hy_state_tensor *t)
{
    if (!layer_ok(st, t->layer)) return NULL;
    switch (t->part) {
    case HY_PART_CONV:
        return st->conv[t->layer];
    case HY_PART_S:
        return st->S[t->layer];
    case HY_PART_K:
        return t->shape[0] <= (uint64_t)st->pos ? st->k[t->layer] : NULL;
    case HY_PART_V:
        return t->shape[0] <= (uint64_t)st->pos ? st->v[t->layer] : NULL;
    }
    return NULL;
}
