/*
 * Weight matrices kept as a BF16 checkpoint stores them, or in 8 bits.
 *
 * Decode streams every weight matrix once per token, so its speed is the
 * matrices' bytes over the memory bandwidth; a BF16 checkpoint widened to
 * fp32 streams twice the bytes it needs. The loader always builds the fp32
 * layouts (model.c: renamed, fused, reordered rows); when every value of
 * every matrix is a bf16 value — the case exactly when the checkpoint is
 * BF16 — hy_model_narrow rewrites each buffer holding matrices into one of
 * half the size, element for element, so every field's offset into its
 * buffer is unchanged in elements, and frees the fp32 one. The products
 * (hy_linear_bf16) widen the values as they read them and accumulate in
 * fp32, so the sums are the fp32 path's up to the order of additions —
 * unless the model was opened for bf16 arithmetic (HY_WEIGHTS_BF16), where
 * large products round the activations to bf16 too.
 *
 * Asked for (HY_WEIGHTS_Q8), hy_model_quantize_q8 rewrites the same buffers
 * from any checkpoint into 8-bit values with one fp32 scale per 32 of them
 * (the buffer's values, then its scales): 1.125 bytes a weight, read by
 * hy_linear_q8, which finds a matrix's scales through the table of buffers
 * (m->q8, by address). Lossy: the fingerprint says so (model.c).
 *
 * Vectors (norms, biases, decays), the conv taps, the embedding rows and
 * MLA's kv_b_proj (sliced per head by the absorbed attention) stay fp32:
 * together a few percent of the bytes.
 */
#include "model_internal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

static void add(float ***slots, size_t cap, size_t *n, float **field)
{
    if (*field && *n < cap) slots[*n] = field;
    if (*field) (*n)++;
}

static void add_mlp(float ***slots, size_t cap, size_t *n, hy_mlp_w *w)
{
    add(slots, cap, n, &w->w_gu);
    add(slots, cap, n, &w->w_down);
}

size_t hy_model_matrices(hy_model *m, float ***slots, size_t cap)
{
    size_t n = 0;
    for (int i = 0; i < m->cfg.n_layers; i++) {
        hy_layer_w *L = &m->layers[i];
        float **f[] = {&L->gdn.w_in,   &L->gdn.w_out,   &L->light.w_in, &L->light.w_out,
                       &L->kda.w_in,   &L->kda.w_fb,    &L->kda.w_gb,   &L->kda.w_out,
                       &L->mamba.w_in, &L->mamba.w_out, &L->attn.w_qkv, &L->attn.w_o,
                       &L->mla.w_a,    &L->mla.w_qb,    &L->mla.w_o,    &L->router};
        for (size_t j = 0; j < sizeof f / sizeof *f; j++) add(slots, cap, &n, f[j]);
        add_mlp(slots, cap, &n, &L->mlp);
        add_mlp(slots, cap, &n, &L->shared);
        add_mlp(slots, cap, &n, &L->latent);
        for (int e = 0; L->experts && e < m->cfg.n_experts; e++)
            add_mlp(slots, cap, &n, &L->experts[e]);
    }
    add(slots, cap, &n, &m->lm_head);
    return n;
}

/* The owned buffer holding p, or -1. */
static ptrdiff_t owner_of(const hy_model *m, const float *p)
{
    for (size_t j = 0; j < m->n_owned; j++) {
        const char *b = m->owned[j].p;
        if ((const char *)p >= b && (const char *)p < b + m->owned[j].bytes) return (ptrdiff_t)j;
    }
    return -1;
}

static bool all_bf16(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (hy_bf16_to_f32(hy_f32_to_bf16(x[i])) != x[i] && x[i] == x[i]) return false;
    return true;
}

/* The two narrow formats: a buffer of n fp32 values becomes one of
 * fmt_bytes(n) bytes, value k at byte k · fmt_width. */
typedef enum { FMT_BF16, FMT_Q8 } fmt;

/* q8's scales follow the values, 64-byte aligned. */
static size_t q8_scale_at(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

static size_t fmt_bytes(fmt f, size_t n)
{
    return f == FMT_BF16 ? n * 2
                         : q8_scale_at(n) + (n + HY_Q8_BLOCK - 1) / HY_Q8_BLOCK * sizeof(float);
}

static void fmt_convert(fmt f, void *dst, const float *src, size_t n)
{
    if (f == FMT_Q8) {
        hy_q8_quantize(src, n, dst, (float *)((char *)dst + q8_scale_at(n)));
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = hy_f32_to_bf16(src[i]);
}

static int by_address(const void *a, const void *b)
{
    const uintptr_t x = (uintptr_t)((const hy_q8buf *)a)->q, y = (uintptr_t)((const hy_q8buf *)b)->q;
    return x < y ? -1 : x > y;
}

/* Rewrites every buffer holding matrices (and a tied LM head, into a copy of
 * its own) in format f; with check, only when every value is a bf16 one. */
static int reformat(hy_model *m, fmt f, bool check, hy_err *err)
{
    const size_t ns = hy_model_matrices(m, NULL, 0);
    float ***slots = malloc((ns + 1) * sizeof *slots);
    ptrdiff_t *own = malloc((ns + 1) * sizeof *own);
    uint8_t *narrow = calloc(m->n_owned + 1, 1);
    void *head = NULL;
    hy_q8buf *table = NULL;
    int rc = HY_OK;
    if (!slots || !own || !narrow) {
        rc = hy_err_set(err, HY_ENOMEM, "out of memory narrowing the weights");
        goto out;
    }
    hy_model_matrices(m, slots, ns);
    const bool tied = m->lm_head == m->embed; /* the head gets its own copy */
    for (size_t s = 0; s < ns; s++) {
        own[s] = tied && slots[s] == &m->lm_head ? -1 : owner_of(m, *slots[s]);
        /* every matrix lives in a buffer the loader made for matrices */
        assert(own[s] >= 0 || (tied && slots[s] == &m->lm_head));
        if (own[s] >= 0) narrow[own[s]] = 1;
    }
    size_t nbuf = 0;
    for (size_t j = 0; j < m->n_owned; j++) nbuf += narrow[j];
    const size_t head_n = (size_t)m->cfg.vocab * m->cfg.hidden;
    /* all or nothing: a single fp32 value keeps the model fp32 */
    for (size_t j = 0; check && j < m->n_owned; j++)
        if (narrow[j] && !all_bf16(m->owned[j].p, m->owned[j].bytes / sizeof(float))) goto out;
    if (check && tied && !all_bf16(m->lm_head, head_n)) goto out;
    /* the new buffers first, so that running out of memory changes nothing */
    void **nb = calloc(m->n_owned + 1, sizeof *nb);
    if (!nb || (f == FMT_Q8 && !(table = calloc(nbuf + 1, sizeof *table))))
        rc = hy_err_set(err, HY_ENOMEM, "out of memory narrowing the weights");
    for (size_t j = 0; j < m->n_owned && rc == HY_OK; j++)
        if (narrow[j] && !(nb[j] = hy_alloc(fmt_bytes(f, m->owned[j].bytes / sizeof(float)))))
            rc = hy_err_set(err, HY_ENOMEM, "out of memory narrowing the weights");
    if (rc == HY_OK && tied && !(head = hy_alloc(fmt_bytes(f, head_n))))
        rc = hy_err_set(err, HY_ENOMEM, "out of memory narrowing the LM head");
    if (rc == HY_OK && tied && m->n_owned == m->cap_owned) {
        hy_owned *no = realloc(m->owned, (m->cap_owned + 1) * sizeof *no);
        if (!no)
            rc = hy_err_set(err, HY_ENOMEM, "out of memory narrowing the weights");
        else
            m->owned = no, m->cap_owned++;
    }
    if (rc != HY_OK) {
        for (size_t j = 0; nb && j < m->n_owned; j++) free(nb[j]);
        free(nb);
        goto out;
    }
    const size_t width = f == FMT_BF16 ? 2 : 1;
    for (size_t s = 0; s < ns; s++) { /* the same value offset in the narrowed buffer */
        if (own[s] < 0) continue;
        const size_t off = (size_t)(*slots[s] - (float *)m->owned[own[s]].p);
        *slots[s] = (float *)(void *)((char *)nb[own[s]] + off * width);
    }
    size_t nt = 0;
    for (size_t j = 0; j < m->n_owned; j++) {
        if (!nb[j]) continue;
        const size_t n = m->owned[j].bytes / sizeof(float);
        fmt_convert(f, nb[j], m->owned[j].p, n);
        free(m->owned[j].p);
        m->owned[j] = (hy_owned){nb[j], fmt_bytes(f, n)};
        if (table) table[nt++] = (hy_q8buf){nb[j], n, (float *)((char *)nb[j] + q8_scale_at(n))};
    }
    free(nb);
    if (tied) {
        fmt_convert(f, head, m->embed, head_n);
        m->owned[m->n_owned++] = (hy_owned){head, fmt_bytes(f, head_n)};
        if (table) table[nt++] = (hy_q8buf){head, head_n, (float *)((char *)head + q8_scale_at(head_n))};
        m->lm_head = head;
        head = NULL;
    }
    if (f == FMT_BF16) {
        m->w_bf16 = true;
    } else {
        qsort(table, nt, sizeof *table, by_address);
        m->q8 = table, m->n_q8 = nt, m->w_q8 = true;
        table = NULL;
    }
out:
    free(table);
    free(head);
    free(narrow);
    free(own);
    free(slots);
    return rc;
}

int hy_model_narrow(hy_model *m, hy_err *err)
{
    if (m->w_bf16 || m->w_q8) return HY_OK;
    return reformat(m, FMT_BF16, true, err);
}

int hy_model_quantize_q8(hy_model *m, hy_err *err)
{
    if (m->w_bf16 || m->w_q8) return HY_OK;
    return reformat(m, FMT_Q8, false, err);
}

void hy_model_q8_matrix(const hy_model *m, const float *w, hy_q8w *out)
{
    /* the last buffer starting at or before w */
    size_t lo = 0, hi = m->n_q8;
    while (hi - lo > 1) {
        const size_t mid = (lo + hi) / 2;
        if ((uintptr_t)m->q8[mid].q <= (uintptr_t)w)
            lo = mid;
        else
            hi = mid;
    }
    const hy_q8buf *b = &m->q8[lo];
    assert((uintptr_t)w >= (uintptr_t)b->q && (uintptr_t)w < (uintptr_t)b->q + b->n);
    *out = (hy_q8w){b->q, b->scale, (size_t)((const int8_t *)(const void *)w - b->q)};
}

const char *hy_model_weights_name(const hy_model *m)
{
    return m->w_q8 ? "q8" : m->w_bf16 ? "bf16" : "f32";
}

bool hy_model_bf16_math(const hy_model *m)
{
    return m->bf16_math;
}

size_t hy_model_matrix_bytes(const hy_model *m)
{
    const size_t ns = hy_model_matrices((hy_model *)m, NULL, 0);
    float ***slots = malloc((ns + 1) * sizeof *slots);
    if (!slots) return 0;
    hy_model_matrices((hy_model *)m, slots, ns);
    /* a buffer's bytes once, however many matrices it holds */
    size_t bytes = 0;
    for (size_t j = 0; j < m->n_owned; j++)
        for (size_t s = 0; s < ns; s++) {
            const char *b = m->owned[j].p, *p = (const char *)*slots[s];
            if (p >= b && p < b + m->owned[j].bytes) {
                bytes += m->owned[j].bytes;
                break;
            }
        }
    free(slots);
    return bytes;
}
