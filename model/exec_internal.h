/*
 * Private to the forward pass (forward.c, the step driver; ffn.c, the MLPs
 * and routed experts; linear_layers.c, the linear-attention and state-space
 * mixers; attention_layers.c, softmax attention and MLA): the executor's
 * workspace, a step's items, the profiling brackets, the products every
 * layer calls, and the table of layer kinds a backend implements.
 *
 * A layer kind is the unit of a backend: the step driver runs each layer's
 * mixer and MLP through hy_fwd_ops, so another backend (a device's) supplies
 * its own table for the kinds it runs and the driver stays as it is.
 */
#ifndef HY_EXEC_INTERNAL_H
#define HY_EXEC_INTERNAL_H

#include "hy_kernels.h"
#include "model_internal.h"

#include <math.h>

struct hy_exec {
    const hy_model *m;
    const struct hy_fwd_ops *ops; /* the layers' backend (hy_fwd_cpu) */
    struct hy_dev_exec *dev;      /* on a device (exec_dev.c): its steps run there; NULL: CPU */
    int max_batch;
    hy_layer_hook_fn layer_hook; /* hy_exec_set_layer_hook */
    hy_cancel_fn cancel;         /* hy_exec_set_cancel */
    void *cancel_ctx;
    void *layer_ctx;
    hy_gdn_mode mode;
    /* this call is one token after a prefix — transformers' decode step,
     * where Mamba2 leaves dt unclamped (hy_model_config.dt_min) */
    bool decode_step;
    hy_mla_mode mla_mode; /* hy_exec_set_mla_mode */
    bool mla_absorbed;    /* this pass attends in MLA's latent space */
    hy_mla_mode mla_used; /* hy_exec_mla_mode_used */
    float *ws;            /* activations, ws_floats */
    size_t ws_floats;
    float *scratch; /* nthreads × scratch_per_thread */
    size_t scratch_per_thread, scratch_floats;
    int nthreads;    /* scratch slots: OpenMP threads when the call started */
    size_t step_cap; /* tokens per step the views below are sized for */
    int64_t ctx_cap; /* context (positions) the scratch is sized for */
    /* views into ws, for the current step size */
    float *x, *xn, *y, *big, *mid, *o, *g, *beta, *h, *gu, *xe, *ye, *topw, *aux, *lat_in, *lat_out,
        *mla_q, *mla_o;
    int *topi, *rows;
    hy_exec_stats stats; /* hy_exec_set_profiling */
    /* the current step's plan (hy_exec_run): its items in request order, and
     * per row its absolute position and capture; grown as calls need */
    struct item *items;
    size_t items_cap;
    int64_t *rowpos;
    hy_capture **rowcap;
    size_t rowpos_cap, rowcap_cap;
    /* GDN's value heads of one key head share their chunks' k·kᵀ and q·kᵀ
     * (hy_gdn_share): per thread share_slots slots after the delta rule's
     * scratch and their tags; share_gen counts the layer calls that share */
    size_t share_slots, share_tags_n;
    int64_t *share_tags;
    int64_t share_gen;
    double *tcompose; /* per thread (padded): seconds composing holes */
    int tcompose_n;
    double hole_kv_s;      /* this call's seconds writing holes' K/V */
    double arrival_wait_s; /* this call's seconds waiting for holes' layers to land */
    /* RoPE's cos and sin per position (hy_rope_cos_sin), rotary_dim floats
     * each, for positions [0, rope_n): computed once for every head, layer
     * and call (a hole's ~500 keys per attention layer took a sin and cos
     * per pair and head each time) */
    float *rope;
    int64_t rope_n;
};

/* One piece's share of a step: rows [r0, r0 + n) of a run at positions
 * pos …, or a hole whose body starts at pos. */
typedef struct item {
    const hy_piece *p;
    const int32_t *tok; /* runs: the tokens of these rows */
    int r0, n;
    int64_t pos;
    bool last; /* a run whose final token is in this step */
} item;

/* Doubles between two threads' compose timers: a cache line each. */
#define TC_PAD 8

/* Attributes the wall time since the previous mark to `op`. */
static inline void prof_mark(hy_exec *ex, hy_exec_op op)
{
    const double t = hy_now_s();
    ex->stats.prof.seconds[op] += t - ex->stats.last;
    ex->stats.last = t;
}

/* Before an op: the gap since the previous op (residual adds, loop control)
 * is OTHER. */
static inline void prof_begin(hy_exec *ex)
{
    if (ex->stats.on) prof_mark(ex, HY_EXEC_OP_OTHER);
}

static inline void prof_end(hy_exec *ex, hy_exec_op op)
{
    if (!ex->stats.on) return;
    prof_mark(ex, op);
    ex->stats.prof.calls[op]++;
}

static inline size_t hy_fwd_widest_mlp(const hy_model_config *c)
{
    size_t w = (size_t)c->intermediate;
    if (c->n_experts) w = HY_MAX(w, (size_t)HY_MAX(c->moe_intermediate, c->shared_intermediate));
    return w;
}

/* Rows an MLA layer expands per product at least (hy_fwd_mla_expand). */
#define MLA_EXPAND_ROWS 256

/* A thread's scratch for composing one head in any of its stored forms. */
static inline size_t hy_fwd_compose_floats(const hy_model_config *c)
{
    return hy_rep_apply_scratch(hy_lin_tkind(c), c->lin_dk, c->lin_dv);
}

/* A thread's scratch for the query heads of one KV head attending together
 * (hy_attention_heads): 16 MiB, a context of 16k tokens for 4 heads. */
#define ATTN_HEADS_MAX_FLOATS ((size_t)4 << 20)

/* out = x·rms(x)⁻¹·w over one head's d values: hy_rmsnorm's arithmetic for
 * a single row, without the nested parallel region it would open inside a
 * parallel loop. */
static inline void hy_fwd_rmsnorm_row(const float *x, const float *w, int d, float eps, float *out)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int i = 0; i < d; i++) out[i] = x[i] * r * w[i];
}

/* x·rms⁻¹·w·silu(z) over one value head's d outputs, in place. */
static inline void hy_fwd_gated_rmsnorm(float *o, const float *z, const float *w, int d, float eps)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; i++) ss += o[i] * o[i];
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
#pragma omp simd
    for (int i = 0; i < d; i++) o[i] = o[i] * r * w[i] * hy_siluf(z[i]);
}

/* --- products (forward.c), timed as GEMMs ------------------------------- */

/* y [n][N] = x [n][K] · wᵀ, w [N][K] one of the model's weight matrices
 * (hy_model_matrices), in the format the model keeps them in. */
void hy_fwd_linear(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                   float *y, size_t ldy);
/* The same with an fp32 w that is not one of the matrices (MLA's kv_b_proj). */
void hy_fwd_linear_f32(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                       float *y, size_t ldy);
/* y [n][N] = x [n][K] · w, w [K][N] row-major (not transposed): MLA's
 * products with parts of kv_b_proj. */
void hy_fwd_gemm_nn(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                    size_t ldw, float *y, size_t ldy);
/* y[t][j] += b[j] for n rows of d (stride ldy): a projection's bias. */
void hy_fwd_add_bias(hy_exec *ex, int n, int d, const float *b, float *y, size_t ldy);

/* --- layer kinds ---------------------------------------------------------- */

/* A mixer over one step: the items it[0, ni) with n computed rows (n may be
 * 0: holes only) read ex->xn and leave the sublayer's output in ex->y, the
 * layer's state in st advanced past the step; nblk: attention's query
 * blocks of the step, nholes: the holes among the items. */
typedef void (*hy_fwd_mixer_fn)(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n,
                                int nblk, int nholes);
/* One MLP over n rows of width D, xin [n][D] into out [n][D]; gu and h:
 * [n][2·inter] and [n][inter] of scratch. */
typedef void (*hy_fwd_mlp_fn)(hy_exec *ex, const hy_mlp_w *w, int n, int D, const float *xin,
                              float *gu, float *h, float *out);
/* Routed experts (and the shared one) over the step's n rows, xn to y. */
typedef void (*hy_fwd_moe_fn)(hy_exec *ex, const hy_layer_w *L, int n);

#define HY_FWD_LIN_KINDS (HY_LIN_MAMBA2 + 1)
/* What a backend runs: a mixer per linear family (by hy_lin_kind) and for
 * attention (softmax, MLA), the MLP and the routed experts. NULL: a kind
 * the backend does not run. */
typedef struct hy_fwd_ops {
    const char *name;
    hy_fwd_mixer_fn linear[HY_FWD_LIN_KINDS];
    hy_fwd_mixer_fn attention, mla;
    hy_fwd_mlp_fn mlp;
    hy_fwd_moe_fn moe;
} hy_fwd_ops;

/* The CPU's layers (OpenMP over the hy_* kernels). */
void hy_fwd_gdn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes);
void hy_fwd_kda_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes);
void hy_fwd_mamba_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                        int nholes);
void hy_fwd_light_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                        int nholes);
void hy_fwd_attn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                       int nholes);
void hy_fwd_mla_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes);
void hy_fwd_ffn(hy_exec *ex, const hy_mlp_w *w, int n, int D, const float *xin, float *gu, float *h,
                float *out);
void hy_fwd_moe(hy_exec *ex, const hy_layer_w *L, int n);
extern const hy_fwd_ops hy_fwd_cpu;

/* Of an item's n rows from position pos, how many come before its capture's
 * body starts (n: none of them is in the body; 0: every one is). Those run
 * without T; the state at the body's start is kept, and the rest advance T. */
static inline int hy_fwd_capture_split(const hy_capture *cap, int64_t pos, int n)
{
    if (!cap) return n;
    return cap->start <= pos ? 0 : (int)HY_MIN(cap->start - pos, (int64_t)n);
}

/* A step's rows: ex->rowpos and ex->rowcap of the items' computed rows,
 * *end the position the step ends at; returns the holes among the items
 * (forward.c, for both step functions). */
int hy_fwd_step_rows(hy_exec *ex, const item *it, int ni, int64_t *end);
/* Waits until layer li of every hole among it[0, ni) has landed (forward.c). */
int hy_fwd_holes_wait(hy_exec *ex, const item *it, int ni, int li, hy_err *err);

/* --- the executor on a device (exec_dev.c) ------------------------------------
 *
 * hy_exec_run plans the steps as for the CPU; with ex->dev each step runs
 * on the device: hy_dev_begin before the first (the state's mirror and the
 * buffers), hy_dev_step for each, hy_dev_end after the last (what the pass
 * changed back into st). */
typedef struct hy_dev_exec hy_dev_exec;
/* HY_EUNSUPPORTED naming what of m the device executor does not run. */
int hy_dev_supports(const hy_model *m, hy_err *err);
int hy_dev_exec_new(const hy_model *m, hy_exec_device kind, int device, hy_dev_exec **out,
                    hy_err *err);
void hy_dev_exec_free(hy_dev_exec *d);
const char *hy_dev_exec_name(const hy_dev_exec *d);
/* The device's ordinal (-1: emulated). */
int hy_dev_exec_index(const hy_dev_exec *d);
/* Passes that began by copying the state up: not those that followed a
 * pass of the same state untouched since on the host (for tests). */
uint64_t hy_dev_exec_state_uploads(const hy_dev_exec *d);
/* The weights it uses: the same for every executor of one model on one
 * device (uploaded once, freed with the last of them; for tests). */
const void *hy_dev_exec_weights(const hy_dev_exec *d);
int hy_dev_begin(hy_exec *ex, hy_state *st, size_t B, int64_t ctx, hy_err *err);
int hy_dev_step(hy_exec *ex, hy_state *st, const item *it, int ni, int n, float *logits,
                hy_err *err);
int hy_dev_end(hy_exec *ex, hy_state *st, hy_err *err);

/* MLA's cached latents at positions [p0, p0 + count) (or pos[r]) expanded
 * into the layer's per-head keys and values (attention_layers.c). */
void hy_fwd_mla_expand(hy_exec *ex, hy_state *st, int li, const float *lat, size_t ldl,
                       const int64_t *pos, int64_t p0, int count);

#endif
