/*
 * The executor on a device (hy_exec_set_device): the same passes as the CPU's
 * — the step driver in forward.c plans the steps, its items, captures and
 * holes — with each step's work done by kernels/cuda's launchers on device
 * memory, for the Gated DeltaNet family (Qwen3-Next, Qwen3.5 dense and MoE).
 *
 * What lives where:
 *   - the model's weights, uploaded once per device and shared by the
 *     model's executors there (bf16 matrices widened to fp32 on the way:
 *     the products then read what the CPU's f32 path reads; kept in bf16
 *     when the model asks for bf16 arithmetic);
 *   - a mirror of the running state: at a pass's start the host state is
 *     copied up (S and the conv window of each linear layer, K and V of the
 *     positions so far) unless the mirror is already that state's, as the
 *     last pass left it and untouched since (hy_state.version: a decode
 *     step after a pass); at its end what the pass changed comes back, so
 *     everything that reads a state (entries, copies, deliveries) is
 *     unchanged;
 *   - the step's activations, sized for max_batch rows.
 * A hole's sections go up as the pass reaches its layer (composition and
 * K/V written on the device), or are read where they lie for an entry in
 * the device's memory (hy_exec_view_device); a capture's T, snapshots, canonical K/V and
 * conv tail come down as the CPU's pass would have written them, and the
 * body's S = S_end − T·S_w is extracted on the host by the CPU kernel.
 *
 * Two sets of launchers run it: the CUDA kernels (hy_cu_*) on a GPU, and
 * their twins (hy_emu_*) that run the same bodies on the host — which is
 * how `make test` checks this file's every launch against the CPU executor
 * on machines without a GPU.
 */
#include "exec_internal.h"
#include "hy_cuda.h"
#include "hy_cuda_attn.h"
#include "hy_cuda_gdn.h"
#include "hy_cuda_ops.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The launchers one backend provides: hy_cu_X or its twin hy_emu_X, the
 * same signature each. */
#define DEV_OP(name) __typeof__(hy_cu_##name) *name
typedef struct dev_ops {
    DEV_OP(malloc);
    DEV_OP(free);
    DEV_OP(copy);
    DEV_OP(copy_rows);
    DEV_OP(zero);
    DEV_OP(sync);
    DEV_OP(linear);
    DEV_OP(linear_bf16);
    DEV_OP(to_bf16);
    DEV_OP(linear_w16);
    DEV_OP(rmsnorm);
    DEV_OP(rmsnorm_heads);
    DEV_OP(gated_rmsnorm);
    DEV_OP(conv1d_silu);
    DEV_OP(swiglu);
    DEV_OP(add);
    DEV_OP(mul_sigmoid);
    DEV_OP(embed);
    DEV_OP(rope_table);
    DEV_OP(rope_rotate);
    DEV_OP(moe_route);
    DEV_OP(moe_plan);
    DEV_OP(moe_gather);
    DEV_OP(moe_combine);
    DEV_OP(moe_shared_gate);
    DEV_OP(gdn_gates);
    DEV_OP(gdn_chunked);
    DEV_OP(gdn_recurrent);
    DEV_OP(attention_work);
    DEV_OP(attention);
    DEV_OP(compose_layer);
    DEV_OP(hole_kv_write);
} dev_ops;
#undef DEV_OP

#define DEV_OPS(P)                                                                                 \
    {                                                                                              \
        .malloc = P##malloc, .free = P##free, .copy = P##copy, .copy_rows = P##copy_rows,          \
        .zero = P##zero, .sync = P##sync, .linear = P##linear, .linear_bf16 = P##linear_bf16,      \
        .to_bf16 = P##to_bf16, .linear_w16 = P##linear_w16, .rmsnorm = P##rmsnorm,                 \
        .rmsnorm_heads = P##rmsnorm_heads, .gated_rmsnorm = P##gated_rmsnorm,                      \
        .conv1d_silu = P##conv1d_silu, .swiglu = P##swiglu, .add = P##add,                         \
        .mul_sigmoid = P##mul_sigmoid, .embed = P##embed, .rope_table = P##rope_table,             \
        .rope_rotate = P##rope_rotate, .moe_route = P##moe_route, .moe_plan = P##moe_plan,         \
        .moe_gather = P##moe_gather, .moe_combine = P##moe_combine,                                \
        .moe_shared_gate = P##moe_shared_gate, .gdn_gates = P##gdn_gates,                          \
        .gdn_chunked = P##gdn_chunked, .gdn_recurrent = P##gdn_recurrent,                          \
        .attention_work = P##attention_work, .attention = P##attention,                            \
        .compose_layer = P##compose_layer, .hole_kv_write = P##hole_kv_write                       \
    }

static const dev_ops k_emu = DEV_OPS(hy_emu_);
#ifdef HY_HAVE_CUDA_KERNELS
static const dev_ops k_cuda = DEV_OPS(hy_cu_);
#endif

typedef struct dev_mlp {
    int inter;
    float *w_gu, *w_down;
} dev_mlp;

typedef struct dev_layer {
    float *in_norm, *post_norm;
    /* GDN */
    float *w_in, *conv_w, *neg_A, *dt_bias, *norm_w, *w_out;
    /* attention */
    float *w_qkv, *q_norm, *k_norm, *w_o;
    /* MLP, or routed experts and the shared one */
    dev_mlp mlp, shared, *experts;
    float *router, *shared_gate;
} dev_layer;

/* Device allocations, freed together. */
typedef struct dev_mem {
    void **p;
    size_t n, cap;
} dev_mem;

/* The model's weights on one device, shared by every executor of the model
 * there (executor.contexts of them): uploaded by the first, freed with the
 * last (weights_get, weights_put). */
typedef struct dev_weights {
    const hy_model *m;
    const dev_ops *op;
    int device;
    bool bf16; /* matrices in bf16 (the products' arithmetic) */
    int refs;
    dev_mem mem;
    float *embed, *final_norm, *lm_head, *inv_freq;
    dev_layer *L;
    struct dev_weights *next;
} dev_weights;

struct hy_dev_exec {
    const dev_ops *op;
    hy_cu_stream stream;
    hy_cu_blas *blas; /* NULL when emulated */
    bool bf16;        /* the weight matrices kept in bf16 (HY_WEIGHTS_BF16 on a BF16
                       * checkpoint): products of more rows than HY_CU_W16_ROWS in bf16 */
    int device;       /* the CUDA ordinal; -1 when emulated */
    char name[160];
    const hy_model *m;
    dev_mem mem;    /* device memory this executor frees */
    dev_weights *w; /* the model's weights there, shared */
    /* the state's mirror */
    float **S, **conv, **K, **V;
    int64_t kv_cap, pos_begin;
    /* whose it is, as of which version (hy_state.version) and position:
     * current when the next pass's state is still that one (NULL: none,
     * and during a pass) */
    const hy_state *mirror_of;
    uint64_t mirror_version;
    int64_t mirror_pos;
    uint64_t state_uploads; /* passes that copied the state up (tests) */
    /* RoPE's table for positions [0, rope_n) */
    float *rope;
    int64_t rope_n;
    /* a step's activations, for B rows */
    size_t B;
    float *x, *xn, *y, *big, *cv, *o, *g, *beta, *kb, *gu, *h, *le, *topw, *xe, *ye, *ye2, *last,
        *logits;
    int32_t *ids, *topi, *offsets, *rows, *slot_row;
    int64_t *pos;
    float *attn_work;
    size_t attn_work_n;
    /* a product's rows rounded to bf16 (d->bf16) */
    uint16_t *xb16;
    /* a capture's T of one layer, every head */
    float *T;
    /* a hole's sections on their way: payloads, and the head records */
    uint8_t *stage;
    size_t stage_bytes;
    hy_cu_rep *recs;
    /* host staging */
    hy_cu_rep *h_recs;
    int32_t *h_ids;
    int32_t *h_offsets;
    float *h_g, *h_S, *h_work;
};

/* --- memory ------------------------------------------------------------------ */

/* bytes of device memory into *out, kept in mem to be freed with it. */
static int mem_alloc(const dev_ops *op, hy_cu_stream stream, dev_mem *mem, size_t bytes, void **out,
                     hy_err *err)
{
    if (mem->n == mem->cap) {
        size_t nc = mem->cap ? 2 * mem->cap : 256;
        void **no = realloc(mem->p, nc * sizeof *no);
        if (!no) return hy_err_set(err, HY_ENOMEM, "out of memory");
        mem->p = no;
        mem->cap = nc;
    }
    int rc = op->malloc(stream, bytes, out, err);
    if (!rc) mem->p[mem->n++] = *out;
    return rc;
}

static void mem_free(const dev_ops *op, hy_cu_stream stream, dev_mem *mem)
{
    for (size_t i = 0; i < mem->n; i++) op->free(stream, mem->p[i]);
    free(mem->p);
    *mem = (dev_mem){0};
}

static int dalloc(hy_dev_exec *d, size_t bytes, void **out, hy_err *err)
{
    int rc = mem_alloc(d->op, d->stream, &d->mem, bytes, out, err);
    if (rc) hy_err_prefix(err, "%s", d->name);
    return rc;
}

/* Frees p (one of d's) now, before the executor goes: a buffer that grows. */
static void dfree(hy_dev_exec *d, void *p)
{
    if (!p) return;
    for (size_t i = 0; i < d->mem.n; i++)
        if (d->mem.p[i] == p) {
            d->mem.p[i] = d->mem.p[--d->mem.n];
            d->op->free(d->stream, p);
            return;
        }
    assert(!"dfree of a buffer not the executor's");
}

static int up(hy_dev_exec *d, void *dst, const void *src, size_t bytes, hy_err *err)
{
    return d->op->copy(d->stream, dst, src, bytes, HY_CU_H2D, err);
}

static int down(hy_dev_exec *d, void *dst, const void *src, size_t bytes, hy_err *err)
{
    return d->op->copy(d->stream, dst, src, bytes, HY_CU_D2H, err);
}

/* Bytes of a hole's section src into device memory at dst: up from the
 * host, or across the device for an entry that lies there. */
static int hole_in(hy_dev_exec *d, const hy_entry *e, void *dst, const void *src, size_t bytes,
                   hy_err *err)
{
    if (!e->dev) return up(d, dst, src, bytes, err);
    return d->op->copy(d->stream, dst, hy_entry_dev_addr(e, src), bytes, HY_CU_D2D, err);
}

/* A copy of host floats src[0, n) on the device (*out NULL when src is). */
static int upload(dev_weights *w, const float *src, size_t n, float **out, hy_err *err)
{
    *out = NULL;
    if (!src) return HY_OK;
    int rc = mem_alloc(w->op, NULL, &w->mem, n * sizeof(float), (void **)out, err);
    return rc ? rc : w->op->copy(NULL, *out, src, n * sizeof(float), HY_CU_H2D, err);
}

/* A weight matrix (hy_model_matrices) of n values: bf16 ones kept so when
 * the products run in bf16 (its bytes then bf16, whatever *out's type),
 * widened otherwise. */
static int upload_matrix(dev_weights *w, const float *src, size_t n, float **out, hy_err *err)
{
    if (!w->m->w_bf16 || !src) return upload(w, src, n, out, err);
    if (w->bf16) {
        *out = NULL;
        int rc = mem_alloc(w->op, NULL, &w->mem, n * sizeof(uint16_t), (void **)out, err);
        return rc ? rc : w->op->copy(NULL, *out, src, n * sizeof(uint16_t), HY_CU_H2D, err);
    }
    float *wide = malloc(n * sizeof *wide);
    if (!wide) return hy_err_set(err, HY_ENOMEM, "out of memory widening a matrix");
    const uint16_t *b = (const uint16_t *)(const void *)src;
    for (size_t i = 0; i < n; i++) wide[i] = hy_bf16_to_f32(b[i]);
    int rc = upload(w, wide, n, out, err);
    free(wide);
    return rc;
}

static int upload_mlp(dev_weights *w, const hy_mlp_w *src, int D, dev_mlp *out, hy_err *err)
{
    out->inter = src->inter;
    if (src->inter == 0) return HY_OK;
    int rc = upload_matrix(w, src->w_gu, (size_t)2 * src->inter * D, &out->w_gu, err);
    return rc ? rc : upload_matrix(w, src->w_down, (size_t)D * src->inter, &out->w_down, err);
}

/* --- what runs here ------------------------------------------------------------ */

static bool head_dim_ok(int d)
{
    return d == 16 || d == 32 || d == 64 || d == 128;
}

int hy_dev_supports(const hy_model *m, hy_err *err)
{
    const hy_model_config *c = &m->cfg;
    const char *why = NULL;
    if (c->arch != HY_ARCH_QWEN3_NEXT && c->arch != HY_ARCH_QWEN3_5 &&
        c->arch != HY_ARCH_QWEN3_5_MOE)
        why = "its architecture is not of the Gated DeltaNet family the device executor runs "
              "(Qwen3-Next, Qwen3.5 dense and MoE)";
    else if (m->w_q8)
        why = "its weights are kept in q8 (executor.weights: q8), which the device does not read";
    else if (!head_dim_ok(c->lin_dk) || !head_dim_ok(c->lin_dv))
        why = "its linear heads' widths are not among 16, 32, 64, 128";
    else if (c->head_dim > HY_CU_ATTN_MAX_HD)
        why = "its attention heads are wider than the device kernel's 512";
    else if (c->n_experts && c->router != HY_ROUTER_SOFTMAX)
        why = "its router is not a softmax one";
    else if (c->moe_latent || c->scaled_residual || c->mlp_act != HY_MLP_SWIGLU || c->mla ||
             !c->qk_norm || c->qk_norm_flat)
        why = "it has a part the device executor does not run";
    for (int i = 0; !why && i < c->n_layers; i++)
        if (c->layer_post_norm[i] || c->layer_no_mlp[i] || c->layer_kind[i] == HY_LAYER_MLP)
            why = "it has a layer the device executor does not run";
    if (why)
        return hy_err_set(err, HY_EUNSUPPORTED, "model %s (%s): %s", c->model_type, c->arch_name,
                          why);
    return HY_OK;
}

/* --- the executor --------------------------------------------------------------- */

static int upload_weights(dev_weights *w, hy_err *err)
{
    const hy_model *m = w->m;
    const hy_model_config *c = &m->cfg;
    const size_t H = (size_t)c->hidden, V = (size_t)c->vocab;
    int rc = upload(w, m->embed, V * H, &w->embed, err);
    if (!rc) rc = upload(w, m->final_norm1, H, &w->final_norm, err);
    if (!rc) rc = upload_matrix(w, m->lm_head, V * H, &w->lm_head, err);
    if (!rc && c->rotary_dim)
        rc = upload(w, m->rope_inv_freq, (size_t)c->rotary_dim / 2, &w->inv_freq, err);
    if (!rc && !(w->L = calloc((size_t)c->n_layers, sizeof *w->L)))
        rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    const size_t Hk = (size_t)c->lin_k_heads, Hv = (size_t)c->lin_v_heads;
    const size_t dk = (size_t)c->lin_dk, dv = (size_t)c->lin_dv, Vd = Hv * dv;
    const size_t C = 2 * Hk * dk + Vd, P = C + Vd + 2 * Hv;
    const size_t hd = (size_t)c->head_dim, qs = c->attn_gate ? 2 * hd : hd;
    const size_t Q2 = (size_t)c->n_heads * qs, KV = (size_t)c->n_kv_heads * hd;
    for (int li = 0; !rc && li < c->n_layers; li++) {
        const hy_layer_w *L = &m->layers[li];
        dev_layer *dl = &w->L[li];
        rc = upload(w, L->in_norm1, H, &dl->in_norm, err);
        if (!rc) rc = upload(w, L->post_norm1, H, &dl->post_norm, err);
        if (!rc && L->kind == HY_LAYER_LINEAR) {
            const hy_gdn_w *g = &L->gdn;
            rc = upload_matrix(w, g->w_in, P * H, &dl->w_in, err);
            if (!rc) rc = upload(w, g->conv_w, (size_t)c->conv_kernel * C, &dl->conv_w, err);
            if (!rc) rc = upload(w, g->neg_A, Hv, &dl->neg_A, err);
            if (!rc) rc = upload(w, g->dt_bias, Hv, &dl->dt_bias, err);
            if (!rc) rc = upload(w, g->norm_w, dv, &dl->norm_w, err);
            if (!rc) rc = upload_matrix(w, g->w_out, H * Vd, &dl->w_out, err);
        } else if (!rc) {
            const hy_attn_w *a = &L->attn;
            rc = upload_matrix(w, a->w_qkv, (Q2 + 2 * KV) * H, &dl->w_qkv, err);
            if (!rc) rc = upload(w, a->q_norm1, hd, &dl->q_norm, err);
            if (!rc) rc = upload(w, a->k_norm1, hd, &dl->k_norm, err);
            if (!rc) rc = upload_matrix(w, a->w_o, H * (size_t)c->n_heads * hd, &dl->w_o, err);
        }
        if (rc) break;
        if (!L->moe) {
            rc = upload_mlp(w, &L->mlp, (int)H, &dl->mlp, err);
            continue;
        }
        const int E = c->n_experts;
        rc = upload_matrix(w, L->router, (size_t)E * H, &dl->router, err);
        if (!rc && !(dl->experts = calloc((size_t)E, sizeof *dl->experts)))
            rc = hy_err_set(err, HY_ENOMEM, "out of memory");
        for (int e = 0; !rc && e < E; e++)
            rc = upload_mlp(w, &L->experts[e], (int)H, &dl->experts[e], err);
        if (!rc) rc = upload_mlp(w, &L->shared, (int)H, &dl->shared, err);
        if (!rc && c->shared_gated) rc = upload(w, L->shared_gate, H, &dl->shared_gate, err);
    }
    return rc;
}

static pthread_mutex_t g_weights_mu = PTHREAD_MUTEX_INITIALIZER;
static dev_weights *g_weights; /* every set in use */

static void weights_free(dev_weights *w)
{
    if (w->L)
        for (int li = 0; li < w->m->cfg.n_layers; li++) free(w->L[li].experts);
    free(w->L);
    mem_free(w->op, NULL, &w->mem);
    free(w);
}

/* d's model's weights on d's device: the set another executor uploaded
 * there, or uploaded now. */
static int weights_get(hy_dev_exec *d, hy_err *err)
{
    pthread_mutex_lock(&g_weights_mu);
    dev_weights *w = g_weights;
    while (w && !(w->m == d->m && w->op == d->op && w->device == d->device && w->bf16 == d->bf16))
        w = w->next;
    int rc = HY_OK;
    if (w) {
        w->refs++;
    } else if (!(w = calloc(1, sizeof *w))) {
        rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    } else {
        w->m = d->m, w->op = d->op, w->device = d->device, w->bf16 = d->bf16, w->refs = 1;
        rc = upload_weights(w, err);
        if (rc) {
            hy_err_prefix(err, "%s: the weights", d->name);
            weights_free(w);
            w = NULL;
        } else {
            w->next = g_weights;
            g_weights = w;
        }
    }
    pthread_mutex_unlock(&g_weights_mu);
    d->w = w;
    return rc;
}

static void weights_put(dev_weights *w)
{
    if (!w) return;
    pthread_mutex_lock(&g_weights_mu);
    const bool last = --w->refs == 0;
    if (last)
        for (dev_weights **q = &g_weights; *q; q = &(*q)->next)
            if (*q == w) {
                *q = w->next;
                break;
            }
    pthread_mutex_unlock(&g_weights_mu);
    if (last) weights_free(w);
}

int hy_dev_exec_new(const hy_model *m, hy_exec_device kind, int device, hy_dev_exec **out,
                    hy_err *err)
{
    *out = NULL;
    int rc = hy_dev_supports(m, err);
    if (rc) return rc;
    hy_dev_exec *d = calloc(1, sizeof *d);
    if (!d) return hy_err_set(err, HY_ENOMEM, "out of memory");
    d->m = m;
    d->device = kind == HY_EXEC_EMULATED ? -1 : device;
    d->bf16 = m->bf16_asked; /* the device multiplies in bf16 wherever asked */
    if (kind == HY_EXEC_EMULATED) {
        d->op = &k_emu;
        snprintf(d->name, sizeof d->name, "emulated device (the CUDA kernels' bodies on the CPU)");
    } else {
#ifdef HY_HAVE_CUDA_KERNELS
        d->op = &k_cuda;
        char gpu[128] = "";
        rc = hy_cu_use_device(device, gpu, sizeof gpu, err);
        snprintf(d->name, sizeof d->name, "cuda:%d (%s)", device, gpu);
        if (!rc) rc = hy_cu_blas_new(d->stream, &d->blas, err);
#else
        (void)device;
        rc = hy_err_set(err, HY_EUNSUPPORTED,
                        "this build has no CUDA kernels (nvcc was not found when it was "
                        "configured): executor.device cuda is not available");
#endif
    }
    if (!rc && d->bf16) { /* said wherever the device is named */
        const size_t at = strlen(d->name);
        snprintf(d->name + at, sizeof d->name - at, ", bf16 products");
    }
    if (!rc) rc = weights_get(d, err);
    if (!rc && !(d->S = calloc((size_t)m->cfg.n_layers, 4 * sizeof *d->S)))
        rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    if (rc) {
        hy_dev_exec_free(d);
        return rc;
    }
    d->conv = d->S + m->cfg.n_layers;
    d->K = d->conv + m->cfg.n_layers;
    d->V = d->K + m->cfg.n_layers;
    *out = d;
    return HY_OK;
}

void hy_dev_exec_free(hy_dev_exec *d)
{
    if (!d) return;
    mem_free(d->op, d->stream, &d->mem);
    weights_put(d->w);
    free(d->S);
#ifdef HY_HAVE_CUDA_KERNELS
    hy_cu_blas_free(d->blas);
#endif
    free(d->h_ids);
    free(d->h_recs);
    free(d->h_offsets);
    free(d->h_g);
    free(d->h_S);
    free(d->h_work);
    free(d);
}

const char *hy_dev_exec_name(const hy_dev_exec *d)
{
    return d->name;
}

int hy_dev_exec_index(const hy_dev_exec *d)
{
    return d->device;
}

/* Device bytes down for an entry's view (hy_entry_read_fn). */
static int view_read(void *ctx, void *dst, const void *src, size_t n, hy_err *err)
{
    return down(ctx, dst, src, n, err);
}

int hy_exec_view_device(hy_exec *ex, const void *dev, size_t len, hy_entry **out, hy_err *err)
{
    *out = NULL;
    if (!ex->dev)
        return hy_err_set(err, HY_EINVAL,
                          "an entry in device memory needs an executor on that device; this one "
                          "runs on the CPU");
    int rc = HY_OK;
#ifdef HY_HAVE_CUDA_KERNELS
    /* the reads run in the caller's thread: on this executor's device */
    if (ex->dev->device >= 0) rc = hy_cu_use_device(ex->dev->device, NULL, 0, err);
#endif
    return rc ? rc
              : hy_entry_view_device(ex->m, ex->dev->device, dev, len, view_read, ex->dev, out,
                                     err);
}

/* --- a pass ------------------------------------------------------------------ */

/* Grows a device buffer of floats to hold n (its content is not kept). */
static int dgrow(hy_dev_exec *d, float **p, size_t n, hy_err *err)
{
    dfree(d, *p);
    *p = NULL;
    return dalloc(d, (n ? n : 1) * sizeof(float), (void **)p, err);
}

static int workspace(hy_dev_exec *d, size_t B, hy_err *err)
{
    if (B <= d->B) return HY_OK;
    const hy_model_config *c = &d->m->cfg;
    const size_t H = (size_t)c->hidden, Hv = (size_t)c->lin_v_heads, dv = (size_t)c->lin_dv;
    const size_t Vd = Hv * dv, C = (size_t)hy_config_conv_dim(c);
    const size_t hd = (size_t)c->head_dim, qs = c->attn_gate ? 2 * hd : hd;
    const size_t Qd = (size_t)c->n_heads * hd, KV = (size_t)c->n_kv_heads * hd;
    const size_t Pl = C + Vd + 2 * Hv, Pa = (size_t)c->n_heads * qs + 2 * KV;
    const size_t I = hy_fwd_widest_mlp(c), E = (size_t)c->n_experts;
    const size_t k = (size_t)HY_MAX(c->top_k, 1), V = (size_t)c->vocab;
    float **f[] = {&d->x,  &d->xn, &d->y,  &d->big,  &d->cv, &d->o,  &d->g,   &d->beta, &d->kb,
                   &d->gu, &d->h,  &d->le, &d->topw, &d->xe, &d->ye, &d->ye2, &d->last, &d->logits};
    const size_t n[] = {B * H,     B * H,
                        B * H,     B * HY_MAX(Pl, HY_MAX(Pa, E)),
                        B * C,     B * HY_MAX(Vd, Qd),
                        B * Hv,    B * Hv,
                        B * KV,    B * 2 * I,
                        B * I,     B * HY_MAX(E, 1),
                        B * k,     B * k * H,
                        B * k * H, B * H,
                        H,         V};
    int rc = HY_OK;
    for (size_t i = 0; !rc && i < sizeof f / sizeof *f; i++) rc = dgrow(d, f[i], n[i], err);
    int32_t **ip[] = {&d->ids, &d->topi, &d->offsets, &d->rows, &d->slot_row};
    const size_t in[] = {B, B * k, E + 1, B * k, B * k};
    for (size_t i = 0; !rc && i < sizeof ip / sizeof *ip; i++) {
        dfree(d, *ip[i]);
        *ip[i] = NULL;
        rc = dalloc(d, (in[i] ? in[i] : 1) * sizeof(int32_t), (void **)ip[i], err);
    }
    if (!rc) {
        dfree(d, d->pos);
        d->pos = NULL;
        rc = dalloc(d, B * sizeof(int64_t), (void **)&d->pos, err);
    }
    if (!rc && d->bf16) { /* the widest product's rows: K ≤ max(H, Vd, Qd, I) */
        dfree(d, d->xb16);
        d->xb16 = NULL;
        const size_t K = HY_MAX(HY_MAX(H, Vd), HY_MAX(Qd, I));
        rc = dalloc(d, B * K * sizeof(uint16_t), (void **)&d->xb16, err);
    }
    free(d->h_ids);
    free(d->h_g);
    d->h_ids = malloc(B * sizeof *d->h_ids);
    d->h_g = malloc(B * Hv * sizeof *d->h_g);
    if (!rc && (!d->h_ids || !d->h_g)) rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    if (!rc) d->B = B;
    return rc;
}

/* The first use sizes what depends on the model only. */
static int fixed_buffers(hy_dev_exec *d, hy_err *err)
{
    if (d->recs) return HY_OK;
    const hy_model_config *c = &d->m->cfg;
    const size_t Hv = (size_t)c->lin_v_heads, dk = (size_t)c->lin_dk, dv = (size_t)c->lin_dv;
    int rc = dalloc(d, 2 * Hv * sizeof(hy_cu_rep), (void **)&d->recs, err);
    if (!rc) rc = dalloc(d, Hv * dk * dk * sizeof(float), (void **)&d->T, err);
    d->h_recs = malloc(2 * Hv * sizeof *d->h_recs);
    d->h_offsets = malloc(((size_t)c->n_experts + 1) * sizeof *d->h_offsets);
    d->h_S = malloc(Hv * dk * dv * sizeof *d->h_S);
    d->h_work =
        malloc((hy_la_compose_scratch(HY_LA_T_DENSE, (int)dk, (int)dv) + 1) * sizeof *d->h_work);
    if (!rc && (!d->h_recs || !d->h_offsets || !d->h_S || !d->h_work))
        rc = hy_err_set(err, HY_ENOMEM, "out of memory");
    return rc;
}

/* Device staging of at least n bytes (for a hole's sections). */
static int stage(hy_dev_exec *d, size_t n, hy_err *err)
{
    if (n <= d->stage_bytes) return HY_OK;
    dfree(d, d->stage);
    d->stage = NULL;
    d->stage_bytes = 0;
    int rc = dalloc(d, n, (void **)&d->stage, err);
    if (!rc) d->stage_bytes = n;
    return rc;
}

/* The state's mirror holds kv_cap positions (grown, it holds nothing yet:
 * hy_dev_begin copies the state up again). */
static int state_buffers(hy_dev_exec *d, int64_t kv_cap, hy_err *err)
{
    if (kv_cap > d->kv_cap) d->mirror_of = NULL;
    const hy_model_config *c = &d->m->cfg;
    const size_t Hv = (size_t)c->lin_v_heads, dk = (size_t)c->lin_dk, dv = (size_t)c->lin_dv;
    const size_t C = (size_t)hy_config_conv_dim(c), KV = (size_t)c->n_kv_heads * c->head_dim;
    int rc = HY_OK;
    for (int li = 0; !rc && li < c->n_layers; li++) {
        if (c->layer_kind[li] == HY_LAYER_LINEAR) {
            if (!d->S[li]) rc = dgrow(d, &d->S[li], Hv * dk * dv, err);
            if (!rc && !d->conv[li])
                rc = dgrow(d, &d->conv[li], (size_t)(c->conv_kernel - 1) * C, err);
        } else if (kv_cap > d->kv_cap) {
            rc = dgrow(d, &d->K[li], (size_t)kv_cap * KV, err);
            if (!rc) rc = dgrow(d, &d->V[li], (size_t)kv_cap * KV, err);
        }
    }
    if (!rc && kv_cap > d->kv_cap) d->kv_cap = kv_cap;
    return rc;
}

static int rope_table(hy_dev_exec *d, int64_t npos, hy_err *err)
{
    const int rd = d->m->cfg.rotary_dim;
    if (rd == 0 || npos <= d->rope_n) return HY_OK;
    const int64_t n = HY_MAX(npos, d->rope_n + d->rope_n / 2);
    float *t = NULL;
    int rc = dalloc(d, (size_t)n * rd * sizeof(float), (void **)&t, err);
    if (!rc && d->rope_n)
        rc = d->op->copy(d->stream, t, d->rope, (size_t)d->rope_n * rd * sizeof(float), HY_CU_D2D,
                         err);
    if (!rc)
        rc = d->op->rope_table(d->stream, rd, d->w->inv_freq, d->rope_n, n - d->rope_n,
                               t + (size_t)d->rope_n * rd, err);
    if (rc) {
        dfree(d, t);
        return rc;
    }
    dfree(d, d->rope);
    d->rope = t;
    d->rope_n = n;
    return HY_OK;
}

int hy_dev_begin(hy_exec *ex, hy_state *st, size_t B, int64_t ctx, hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model_config *c = &d->m->cfg;
    int rc = HY_OK;
#ifdef HY_HAVE_CUDA_KERNELS
    /* the pass may run on another thread than the one that made the
     * executor: its CUDA calls go to this executor's device */
    if (d->device >= 0) rc = hy_cu_use_device(d->device, NULL, 0, err);
#endif
    if (!rc) rc = fixed_buffers(d, err);
    if (!rc) rc = workspace(d, B, err);
    if (!rc) rc = state_buffers(d, st->kv_cap, err);
    if (!rc) rc = rope_table(d, ctx, err);
    const size_t Hv = (size_t)c->lin_v_heads, dk = (size_t)c->lin_dk, dv = (size_t)c->lin_dv;
    const size_t C = (size_t)hy_config_conv_dim(c), KV = (size_t)c->n_kv_heads * c->head_dim;
    /* the mirror is this state's as the last pass left it, untouched since
     * on the host (a decode step after a pass): nothing to copy up */
    const bool current =
        d->mirror_of == st && d->mirror_version == st->version && d->mirror_pos == st->pos;
    d->mirror_of = NULL; /* until this pass has ended well */
    if (!current) d->state_uploads++;
    for (int li = 0; !rc && !current && li < c->n_layers; li++) {
        if (c->layer_kind[li] == HY_LAYER_LINEAR) {
            rc = up(d, d->S[li], st->S[li], Hv * dk * dv * sizeof(float), err);
            if (!rc)
                rc = up(d, d->conv[li], st->conv[li],
                        (size_t)(c->conv_kernel - 1) * C * sizeof(float), err);
        } else if (st->pos > 0) {
            rc = up(d, d->K[li], st->k[li], (size_t)st->pos * KV * sizeof(float), err);
            if (!rc) rc = up(d, d->V[li], st->v[li], (size_t)st->pos * KV * sizeof(float), err);
        }
    }
    d->pos_begin = st->pos;
    if (rc) hy_err_prefix(err, "%s", d->name);
    return rc;
}

int hy_dev_end(hy_exec *ex, hy_state *st, hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model_config *c = &d->m->cfg;
    const size_t Hv = (size_t)c->lin_v_heads, dk = (size_t)c->lin_dk, dv = (size_t)c->lin_dv;
    const size_t C = (size_t)hy_config_conv_dim(c), KV = (size_t)c->n_kv_heads * c->head_dim;
    const int64_t from = d->pos_begin, n = st->pos - from;
    int rc = d->op->sync(d->stream, err);
    for (int li = 0; !rc && li < c->n_layers; li++) {
        if (c->layer_kind[li] == HY_LAYER_LINEAR) {
            rc = down(d, st->S[li], d->S[li], Hv * dk * dv * sizeof(float), err);
            if (!rc)
                rc = down(d, st->conv[li], d->conv[li],
                          (size_t)(c->conv_kernel - 1) * C * sizeof(float), err);
        } else if (n > 0) {
            const size_t at = (size_t)from * KV, bytes = (size_t)n * KV * sizeof(float);
            rc = down(d, st->k[li] + at, d->K[li] + at, bytes, err);
            if (!rc) rc = down(d, st->v[li] + at, d->V[li] + at, bytes, err);
        }
    }
    if (rc) {
        hy_err_prefix(err, "%s", d->name);
        return rc;
    }
    hy_state_touch(st); /* changed on the host, to what the mirror holds */
    d->mirror_of = st, d->mirror_version = st->version, d->mirror_pos = st->pos;
    return HY_OK;
}

const void *hy_dev_exec_weights(const hy_dev_exec *d)
{
    return d->w;
}

uint64_t hy_dev_exec_state_uploads(const hy_dev_exec *d)
{
    return d->state_uploads;
}

/* --- layers ------------------------------------------------------------------- */

/* Y [n][N] = X [n][K] · Wᵀ, W one of the model's matrices as the device
 * keeps it (hy_fwd_linear's work): fp32 on cuBLAS; or bf16, as the CPU's
 * bf16 arithmetic runs it — more than HY_CU_W16_ROWS rows rounded to bf16
 * and multiplied on cuBLAS's bf16 path with fp32 sums, fewer (a decode
 * step) in fp32 against the widened weights. */
static int matmul(hy_dev_exec *d, int n, int K, int N, const float *X, size_t ldx, const float *W,
                  float *Y, size_t ldy, hy_err *err)
{
    if (!d->bf16) return d->op->linear(d->blas, n, K, N, X, ldx, W, Y, ldy, err);
    const uint16_t *W16 = (const uint16_t *)(const void *)W;
    if (n <= HY_CU_W16_ROWS) return d->op->linear_w16(d->stream, n, K, N, X, ldx, W16, Y, ldy, err);
    /* the rows as laid out, gaps included (ldx ≥ K) */
    int rc = d->op->to_bf16(d->stream, (size_t)(n - 1) * ldx + (size_t)K, X, d->xb16, err);
    return rc ? rc : d->op->linear_bf16(d->blas, n, K, N, d->xb16, ldx, W16, Y, ldy, err);
}

static int ffn(hy_dev_exec *d, const dev_mlp *w, int n, int D, const float *xin, float *out,
               hy_err *err)
{
    const int I = w->inter;
    int rc = matmul(d, n, D, 2 * I, xin, (size_t)D, w->w_gu, d->gu, (size_t)2 * I, err);
    if (!rc) rc = d->op->swiglu(d->stream, n, I, d->gu, (size_t)2 * I, d->h, (size_t)I, err);
    if (!rc) rc = matmul(d, n, I, D, d->h, (size_t)I, w->w_down, out, (size_t)D, err);
    return rc;
}

/* The routed experts and the shared one over n rows, xn to y. */
static int moe(hy_dev_exec *d, const dev_layer *dl, int n, hy_err *err)
{
    const hy_model_config *c = &d->m->cfg;
    const int H = c->hidden, E = c->n_experts, k = c->top_k;
    const dev_ops *op = d->op;
    int rc = matmul(d, n, H, E, d->xn, (size_t)H, dl->router, d->le, (size_t)E, err);
    if (!rc)
        rc = op->moe_route(d->stream, n, E, k, c->norm_topk, d->le, (size_t)E, d->topi, d->topw,
                           err);
    if (!rc) rc = op->moe_plan(d->stream, n, k, E, d->topi, d->offsets, d->rows, d->slot_row, err);
    if (!rc) rc = down(d, d->h_offsets, d->offsets, ((size_t)E + 1) * sizeof *d->h_offsets, err);
    if (!rc)
        rc = op->moe_gather(d->stream, n, k, H, d->rows, d->xn, (size_t)H, d->xe, (size_t)H, err);
    for (int e = 0; !rc && e < E; e++) {
        const int r0 = d->h_offsets[e], m = d->h_offsets[e + 1] - r0;
        /* distinct experts per token: at most n rows, what gu and h hold */
        assert(m >= 0 && m <= n);
        if (m > 0)
            rc = ffn(d, &dl->experts[e], m, H, d->xe + (size_t)r0 * H, d->ye + (size_t)r0 * H, err);
    }
    if (!rc)
        rc = op->moe_combine(d->stream, n, k, H, d->slot_row, d->topw, d->ye, (size_t)H, d->y,
                             (size_t)H, err);
    if (!rc && dl->shared.inter > 0) {
        rc = ffn(d, &dl->shared, n, H, d->xn, d->ye2, err);
        if (!rc)
            rc = op->moe_shared_gate(d->stream, n, H, d->xn, (size_t)H, dl->shared_gate, d->ye2,
                                     (size_t)H, d->y, (size_t)H, err);
    }
    return rc;
}

/* A hole's T and S(body|0) of layer li composed into the mirror's state:
 * its heads' payloads and records go up, one launch composes them all. */
static int compose(hy_dev_exec *d, int li, const hy_entry *e, bool use_T, hy_err *err)
{
    const hy_model_config *c = &d->m->cfg;
    const int Hv = c->lin_v_heads;
    const hy_head_rep *th = &e->th[(size_t)li * Hv], *sh = &e->sh[(size_t)li * Hv];
    size_t total = 0; /* staged when the payloads come up from the host */
    for (int h = 0; h < Hv && !e->dev; h++)
        total += ((th[h].bytes + 15u) & ~15u) + ((sh[h].bytes + 15u) & ~15u);
    int rc = e->dev ? HY_OK : stage(d, total + 16, err);
    hy_cu_rep *recs = d->h_recs;
    size_t at = 0;
    for (int h = 0; !rc && h < 2 * Hv; h++) {
        const hy_head_rep *r = h < Hv ? &th[h] : &sh[h - Hv];
        recs[h].form = r->form;
        recs[h].dtype = r->dtype;
        recs[h].rank = r->rank;
        recs[h].gamma = r->gamma;
        recs[h].p = NULL;
        if (r->bytes && r->p && e->dev) { /* where it lies on this device */
            recs[h].p = hy_entry_dev_addr(e, r->p);
        } else if (r->bytes && r->p) {
            recs[h].p = d->stage + at;
            rc = up(d, d->stage + at, r->p, r->bytes, err);
            at += (r->bytes + 15u) & ~15u;
        }
    }
    if (!rc) rc = up(d, d->recs, recs, 2 * (size_t)Hv * sizeof *recs, err);
    hy_cu_compose a = {.heads = Hv,
                       .dk = c->lin_dk,
                       .dv = c->lin_dv,
                       .use_T = use_T,
                       .t = d->recs,
                       .s = d->recs + Hv,
                       .S = d->S[li],
                       .hs = (size_t)c->lin_dk * c->lin_dv};
    if (!rc) rc = d->op->compose_layer(d->stream, &a, err);
    return rc;
}

/* The delta rule of every head of layer li over the step's rows [off, off +
 * len), T advanced beside the state when not NULL. */
static int delta(hy_exec *ex, int li, int off, int len, float *T, hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model_config *c = &d->m->cfg;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const size_t Kd = (size_t)Hk * dk, Vd = (size_t)Hv * dv, C = 2 * Kd + Vd;
    const float *row = d->cv + (size_t)off * C;
    const hy_cu_gdn_args a = {.n = len,
                              .Hk = Hk,
                              .Hv = Hv,
                              .dk = dk,
                              .dv = dv,
                              .q = row,
                              .k = row + Kd,
                              .v = row + 2 * Kd,
                              .ldq = C,
                              .ldk = C,
                              .ldv = C,
                              .g = d->g + (size_t)off * Hv,
                              .beta = d->beta + (size_t)off * Hv,
                              .ldgb = (size_t)Hv,
                              .S = d->S[li],
                              .o = d->o + (size_t)off * Vd,
                              .ldo = Vd,
                              .T = T};
    return ex->mode == HY_GDN_CHUNKED && len > 1 ? d->op->gdn_chunked(d->stream, &a, err)
                                                 : d->op->gdn_recurrent(d->stream, &a, err);
}

/* A GDN layer over the step (hy_fwd_gdn_layer's work, on the device). */
static int gdn_layer(hy_exec *ex, int li, const item *it, int ni, int n, hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model_config *c = &d->m->cfg;
    const dev_layer *dl = &d->w->L[li];
    const dev_ops *op = d->op;
    const int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk,
              dv = c->lin_dv, K = c->conv_kernel;
    const size_t Vd = (size_t)Hv * dv, C = 2 * (size_t)Hk * dk + Vd, P = C + Vd + 2 * (size_t)Hv;
    const size_t ss = (size_t)dk * dv, tt = (size_t)dk * dk, tail = (size_t)(K - 1) * C;
    int rc = HY_OK;
    if (n > 0) rc = matmul(d, n, H, (int)P, d->xn, (size_t)H, dl->w_in, d->big, P, err);
    bool captures = false;
    for (int i = 0; !rc && i < ni; i++) { /* the conv, item by item */
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            rc = hole_in(d, p->hole, d->conv[li], p->hole->tail[li], tail * sizeof(float), err);
            continue;
        }
        rc = op->conv1d_silu(d->stream, it[i].n, (int)C, K, d->big + (size_t)it[i].r0 * P, P,
                             d->conv[li], dl->conv_w, NULL, d->cv + (size_t)it[i].r0 * C, C, err);
        if (!rc && p->cap && it[i].last)
            rc = down(d, p->cap->tail[li], d->conv[li], tail * sizeof(float), err);
        captures |= p->cap != NULL;
    }
    if (!rc && n > 0) {
        const hy_cu_gdn_gate_args ga = {.n = n,
                                        .Hk = Hk,
                                        .Hv = Hv,
                                        .dk = dk,
                                        .dv = dv,
                                        .cv = d->cv,
                                        .ldc = C,
                                        .proj = d->big,
                                        .ldp = P,
                                        .neg_A = dl->neg_A,
                                        .dt_bias = dl->dt_bias,
                                        .beta_scale = c->lin_beta_scale,
                                        .beta = d->beta,
                                        .g = d->g};
        rc = op->gdn_gates(d->stream, &ga, err);
    }
    /* a capture's γ: the body's log-decays, summed on the host */
    if (!rc && captures && n > 0) rc = down(d, d->h_g, d->g, (size_t)n * Hv * sizeof *d->h_g, err);
    for (int i = 0; !rc && i < ni; i++) {
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            rc = compose(d, li, p->hole, p->use_T, err);
            continue;
        }
        const int r0 = it[i].r0, nn = it[i].n;
        hy_capture *cap = p->cap;
        /* with a capture: rows [0, s) without T, the state kept at s (the
         * body's start), rows [s, nn) advancing T too */
        const int s = hy_fwd_capture_split(cap, it[i].pos, nn);
        for (int part = 0; !rc && part < 2; part++) {
            const int off = r0 + (part ? s : 0), len = part ? nn - s : s;
            if (len > 0 && part) {
                rc = up(d, d->T, cap->T[li], (size_t)Hv * tt * sizeof(float), err);
                if (!rc) rc = delta(ex, li, off, len, d->T, err);
                if (!rc) rc = down(d, cap->T[li], d->T, (size_t)Hv * tt * sizeof(float), err);
                if (!rc && cap->logdecay[li])
                    for (int h = 0; h < Hv; h++)
                        for (int t = off; t < off + len; t++)
                            cap->logdecay[li][h] += d->h_g[(size_t)t * Hv + h];
            } else if (len > 0) {
                rc = delta(ex, li, off, len, NULL, err);
            }
            if (!rc && part == 0 && cap && it[i].pos + s == cap->start)
                rc = down(d, cap->S_w[li], d->S[li], (size_t)Hv * ss * sizeof(float), err);
        }
        if (!rc && cap && it[i].last) { /* the segment's end: S_w ← S − T·S_w */
            rc = down(d, d->h_S, d->S[li], (size_t)Hv * ss * sizeof(float), err);
            for (int h = 0; !rc && h < Hv; h++) {
                float *sw = cap->S_w[li] + (size_t)h * ss;
                hy_la_extract(HY_LA_T_DENSE, dk, dv, cap->T[li] + (size_t)h * tt, sw,
                              d->h_S + (size_t)h * ss, sw, d->h_work);
            }
        }
    }
    if (rc || n == 0) return rc;
    rc = op->gated_rmsnorm(d->stream, n, Hv, dv, d->o, Vd, d->big + C, P, dl->norm_w,
                           c->lin_norm_eps, err);
    if (!rc) rc = matmul(d, n, (int)Vd, H, d->o, Vd, dl->w_out, d->y, (size_t)H, err);
    return rc;
}

/* Rows [r0, r0 + n) of a device matrix (row stride ld floats, width w
 * floats from column col) into host dst [n][w]. */
static int rows_down(hy_dev_exec *d, float *dst, const float *src, size_t ld, size_t col, int r0,
                     int n, size_t w, hy_err *err)
{
    if (n <= 0) return HY_OK;
    int rc = stage(d, (size_t)n * w * sizeof(float), err);
    if (!rc)
        rc = d->op->copy_rows(d->stream, (size_t)n, w * sizeof(float), src + (size_t)r0 * ld + col,
                              ld * sizeof(float), d->stage, w * sizeof(float), err);
    if (!rc) rc = down(d, dst, d->stage, (size_t)n * w * sizeof(float), err);
    return rc;
}

/* An attention layer over the step (hy_fwd_attn_layer's work, on the
 * device): the holes' K/V first, then the rows' projections, norms, the
 * capture's canonical K and V, RoPE, the rows' K/V into the cache, the
 * attention and the output gate. */
static int attn_layer(hy_exec *ex, int li, const item *it, int ni, int n, int nholes, hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model_config *c = &d->m->cfg;
    const dev_layer *dl = &d->w->L[li];
    const dev_ops *op = d->op;
    const int H = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim,
              rd = c->rotary_dim;
    const size_t qs = c->attn_gate ? 2 * (size_t)hd : (size_t)hd, Q2 = (size_t)Hq * qs;
    const size_t KV = (size_t)Hkv * hd, P = Q2 + 2 * KV, Qd = (size_t)Hq * hd;
    int rc = HY_OK;
    for (int i = 0; !rc && nholes > 0 && i < ni; i++) {
        const hy_entry *e = it[i].p->hole;
        if (it[i].p->tokens) continue;
        const size_t el = e->repr.kv == HY_ENTRY_BF16 ? 2 : 4;
        const size_t bytes = (size_t)e->nb * KV * el, half = (bytes + 255) & ~(size_t)255;
        const void *eK = hy_entry_dev_addr(e, e->K[li]), *eV = hy_entry_dev_addr(e, e->V[li]);
        if (!e->dev) { /* up from the host; a device entry's are read where they lie */
            rc = stage(d, 2 * half, err);
            if (!rc) rc = up(d, d->stage, e->K[li], bytes, err);
            if (!rc) rc = up(d, d->stage + half, e->V[li], bytes, err);
            eK = d->stage, eV = d->stage + half;
        }
        const hy_cu_hole_kv hk = {.nb = e->nb,
                                  .Hkv = Hkv,
                                  .hd = hd,
                                  .rd = rd,
                                  .dtype = e->repr.kv == HY_ENTRY_BF16 ? HY_CU_BF16 : HY_CU_F32,
                                  .eK = eK,
                                  .eV = eV,
                                  .rope = d->rope,
                                  .p0 = it[i].pos,
                                  .K = d->K[li],
                                  .V = d->V[li],
                                  .ldk = KV,
                                  .ldv = KV};
        if (!rc) rc = op->hole_kv_write(d->stream, &hk, err);
    }
    if (rc || n == 0) return rc;
    rc = matmul(d, n, H, (int)P, d->xn, (size_t)H, dl->w_qkv, d->big, P, err);
    if (!rc)
        rc = op->rmsnorm_heads(d->stream, n, Hq, hd, d->big, P, qs, dl->q_norm, c->rms_eps, d->big,
                               P, qs, err);
    if (!rc)
        rc = op->rmsnorm_heads(d->stream, n, Hkv, hd, d->big + Q2, P, (size_t)hd, dl->k_norm,
                               c->rms_eps, d->kb, KV, (size_t)hd, err);
    for (int i = 0; !rc && i < ni; i++) { /* a capture's canonical K and its V */
        const hy_capture *cap = it[i].p->cap;
        if (!it[i].p->tokens || !cap) continue;
        const int64_t first = HY_MAX(cap->start, it[i].pos);
        const int skip = (int)(first - it[i].pos), cnt = it[i].n - skip;
        if (cnt <= 0) continue;
        const size_t crow = (size_t)(first - cap->start);
        rc = rows_down(d, cap->K[li] + crow * KV, d->kb, KV, 0, it[i].r0 + skip, cnt, KV, err);
        if (!rc)
            rc = rows_down(d, cap->V[li] + crow * KV, d->big, P, Q2 + KV, it[i].r0 + skip, cnt, KV,
                           err);
    }
    if (!rc && rd)
        rc = op->rope_rotate(d->stream, n, rd, d->pos, d->rope, d->big, P, qs, Hq, d->kb, KV,
                             (size_t)hd, Hkv, err);
    for (int i = 0; !rc && i < ni; i++) { /* the rows' K and V at their positions */
        if (!it[i].p->tokens) continue;
        const size_t at = (size_t)it[i].pos * KV;
        rc = op->copy(d->stream, d->K[li] + at, d->kb + (size_t)it[i].r0 * KV,
                      (size_t)it[i].n * KV * sizeof(float), HY_CU_D2D, err);
        if (!rc)
            rc = op->copy_rows(d->stream, (size_t)it[i].n, KV * sizeof(float),
                               d->big + (size_t)it[i].r0 * P + Q2 + KV, P * sizeof(float),
                               d->V[li] + at, KV * sizeof(float), err);
    }
    const hy_cu_attn a = {.n = n,
                          .Hq = Hq,
                          .Hkv = Hkv,
                          .hd = hd,
                          .pos = d->pos,
                          .ctx = ex->rowpos[n - 1] + 1,
                          .q = d->big,
                          .ldq = P,
                          .qhs = qs,
                          .K = d->K[li],
                          .V = d->V[li],
                          .ldk = KV,
                          .ldv = KV,
                          .scale = 1.0f / sqrtf((float)hd),
                          .o = d->o,
                          .ldo = Qd,
                          .ohs = (size_t)hd};
    const size_t work = rc ? 0 : op->attention_work(&a);
    if (!rc && work > d->attn_work_n) {
        rc = dgrow(d, &d->attn_work, work, err);
        d->attn_work_n = rc ? 0 : work;
    }
    if (!rc) rc = op->attention(d->stream, &a, d->attn_work, d->attn_work_n, err);
    if (!rc && c->attn_gate)
        rc = op->mul_sigmoid(d->stream, n, Hq, hd, d->o, Qd, (size_t)hd, d->big + hd, P, qs, err);
    if (!rc) rc = matmul(d, n, (int)Qd, H, d->o, Qd, dl->w_o, d->y, (size_t)H, err);
    return rc;
}

/* --- a step ---------------------------------------------------------------------- */

int hy_dev_step(hy_exec *ex, hy_state *st, const item *it, int ni, int n, float *logits,
                hy_err *err)
{
    hy_dev_exec *d = ex->dev;
    const hy_model *m = ex->m;
    const hy_model_config *c = &m->cfg;
    const dev_ops *op = d->op;
    const int H = c->hidden;
    assert(st->m == m && ni >= 1 && n >= 0 && (size_t)n <= d->B);
    assert(it[0].pos == st->pos && (n > 0 || !logits));
    int64_t end;
    const int nholes = hy_fwd_step_rows(ex, it, ni, &end);
    for (int i = 0; i < ni; i++) /* the computed rows' tokens, for the embedding */
        for (int t = 0; it[i].p->tokens && t < it[i].n; t++) d->h_ids[it[i].r0 + t] = it[i].tok[t];
    int rc = HY_OK;
    if (n > 0) {
        rc = up(d, d->ids, d->h_ids, (size_t)n * sizeof *d->h_ids, err);
        if (!rc) rc = up(d, d->pos, ex->rowpos, (size_t)n * sizeof *ex->rowpos, err);
        if (!rc) rc = op->embed(d->stream, n, H, d->ids, d->w->embed, d->x, (size_t)H, err);
    }
    for (int li = 0; !rc && li < c->n_layers; li++) {
        const hy_layer_w *L = &m->layers[li];
        const dev_layer *dl = &d->w->L[li];
        if (nholes > 0 && (rc = hy_fwd_holes_wait(ex, it, ni, li, err))) return rc;
        if (n > 0)
            rc = op->rmsnorm(d->stream, n, H, d->x, (size_t)H, dl->in_norm, c->rms_eps, d->xn,
                             (size_t)H, err);
        if (!rc)
            rc = L->kind == HY_LAYER_LINEAR ? gdn_layer(ex, li, it, ni, n, err)
                                            : attn_layer(ex, li, it, ni, n, nholes, err);
        if (!rc && ex->layer_hook) {
            /* the hook reads what this layer's state and captures hold */
            rc = op->sync(d->stream, err);
            if (!rc) ex->layer_hook(ex->layer_ctx, li, end);
        }
        if (rc || n == 0) continue;
        rc = op->add(d->stream, (size_t)n * H, d->x, d->y, err);
        if (!rc)
            rc = op->rmsnorm(d->stream, n, H, d->x, (size_t)H, dl->post_norm, c->rms_eps, d->xn,
                             (size_t)H, err);
        if (!rc) rc = L->moe ? moe(d, dl, n, err) : ffn(d, &dl->mlp, n, H, d->xn, d->y, err);
        if (!rc) rc = op->add(d->stream, (size_t)n * H, d->x, d->y, err);
    }
    if (!rc && logits) {
        rc = op->rmsnorm(d->stream, 1, H, d->x + (size_t)(n - 1) * H, (size_t)H, d->w->final_norm,
                         c->rms_eps, d->last, (size_t)H, err);
        if (!rc)
            rc = matmul(d, 1, H, c->vocab, d->last, (size_t)H, d->w->lm_head, d->logits,
                        (size_t)c->vocab, err);
        if (!rc) rc = down(d, logits, d->logits, (size_t)c->vocab * sizeof(float), err);
    }
    if (rc) {
        hy_err_prefix(err, "%s", d->name);
        return rc;
    }
    st->pos = end;
    return HY_OK;
}

/* --- the device's limit ------------------------------------------------------------ */

int hy_exec_device_gemm_rate(hy_exec *ex, int n, double *fp32, double *bf16, hy_err *err)
{
    *fp32 = *bf16 = 0;
    hy_dev_exec *d = ex->dev;
    if (!d) return hy_err_set(err, HY_EINVAL, "the executor runs on the CPU");
    const size_t nn = (size_t)n * n;
    float *a = NULL, *b = NULL, *c = NULL;
    uint16_t *ah = NULL, *bh = NULL;
    int rc = dalloc(d, nn * sizeof *a, (void **)&a, err);
    if (!rc) rc = dalloc(d, nn * sizeof *b, (void **)&b, err);
    if (!rc) rc = dalloc(d, nn * sizeof *c, (void **)&c, err);
    if (!rc) rc = dalloc(d, nn * sizeof *ah, (void **)&ah, err);
    if (!rc) rc = dalloc(d, nn * sizeof *bh, (void **)&bh, err);
    if (!rc) rc = d->op->zero(d->stream, a, nn * sizeof *a, err);
    if (!rc) rc = d->op->zero(d->stream, b, nn * sizeof *b, err);
    if (!rc) rc = d->op->to_bf16(d->stream, nn, a, ah, err);
    if (!rc) rc = d->op->to_bf16(d->stream, nn, b, bh, err);
    const double flops = 2.0 * (double)n * n * n;
    for (int kind = 0; kind < 2 && !rc; kind++) {
        double best = 1e30;
        for (int rep = 0; rep < 4 && !rc; rep++) { /* the first one warms up */
            rc = d->op->sync(d->stream, err);
            const double t0 = hy_now_s();
            rc = rc     ? rc
                 : kind ? d->op->linear_bf16(d->blas, n, n, n, ah, (size_t)n, bh, c, (size_t)n, err)
                        : d->op->linear(d->blas, n, n, n, a, (size_t)n, b, c, (size_t)n, err);
            if (!rc) rc = d->op->sync(d->stream, err);
            const double dt = hy_now_s() - t0;
            if (rep > 0 && dt < best) best = dt;
        }
        if (!rc) *(kind ? bf16 : fp32) = flops / best;
    }
    dfree(d, a);
    dfree(d, b);
    dfree(d, c);
    dfree(d, ah);
    dfree(d, bh);
    return rc;
}
