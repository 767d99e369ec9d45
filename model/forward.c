/*
 * The forward pass, read top to bottom like the model (docs/executor.md):
 *
 *   x = embed(tokens)
 *   for each layer:
 *     x += mixer(rmsnorm(x))      mixer = a linear-attention family or attention
 *     x += mlp(rmsnorm(x))        mlp   = SwiGLU or relu², or routed experts + shared
 *   logits = lm_head(rmsnorm(x_last))
 *
 * (Nemotron-H's layers have one of the two sublayers only, each with its
 * own norm.)
 *
 * A call advances the running state by n tokens in steps of at most
 * max_batch tokens (each step is an exact continuation of the previous one).
 * Activations live in one workspace sized for a full step when the call
 * starts; per-thread scratch (delta-rule chunks, attention scores) is sized
 * for the call's final context and for the OpenMP thread count at that
 * moment (a caller may change it between calls). Nothing is allocated per
 * token. The assertions state what each step relies on: the workspace, the
 * scratch and the KV cache hold the step, the layer shapes are the config's.
 *
 * With profiling on (hy_exec_set_profiling) every operation is bracketed by
 * prof_begin / prof_end, which read the wall clock on the calling thread:
 * the ops are parallel inside, and the caller's wall time is what a request
 * waits for. Off, each bracket is one untaken branch.
 */
#include "hy_kernels.h"
#include "model_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct hy_exec {
    const hy_model *m;
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

/* --- profiling ---------------------------------------------------------- */

/* Attributes the wall time since the previous mark to `op`. */
static void prof_mark(hy_exec *ex, hy_exec_op op)
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

const char *hy_exec_op_name(hy_exec_op op)
{
    static const char *const names[HY_EXEC_OP_COUNT] = {
        "gemm", "delta_rule", "attention", "conv", "norm_gate", "moe_routing", "other"};
    return op >= 0 && op < HY_EXEC_OP_COUNT ? names[op] : "?";
}

void hy_exec_set_profiling(hy_exec *ex, bool on)
{
    ex->stats.on = on;
}

void hy_exec_profile(const hy_exec *ex, hy_exec_prof *out)
{
    *out = ex->stats.prof;
}

void hy_exec_profile_reset(hy_exec *ex)
{
    memset(&ex->stats.prof, 0, sizeof ex->stats.prof);
}

/* y [n][N] = x [n][K] · wᵀ, w [N][K] in bf16 in place of fp32 when bf16,
 * timed as a GEMM. */
static void product(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                    bool bf16, float *y, size_t ldy)
{
    prof_begin(ex);
    if (bf16)
        hy_linear_bf16(n, K, N, x, ldx, (const uint16_t *)(const void *)w, y, ldy,
                       ex->m->bf16_math);
    else
        hy_linear(n, K, N, x, ldx, w, y, ldy);
    if (ex->stats.on) ex->stats.prof.gemm_flops += 2.0 * n * (double)K * N;
    prof_end(ex, HY_EXEC_OP_GEMM);
}

/* product() with w one of the model's weight matrices (hy_model_matrices),
 * in the format the model keeps them in. */
static void linear(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                   float *y, size_t ldy)
{
    if (!ex->m->w_q8) {
        product(ex, n, K, N, x, ldx, w, ex->m->w_bf16, y, ldy);
        return;
    }
    hy_q8w q;
    hy_model_q8_matrix(ex->m, w, &q);
    prof_begin(ex);
    hy_linear_q8(n, K, N, x, ldx, &q, y, ldy);
    if (ex->stats.on) ex->stats.prof.gemm_flops += 2.0 * n * (double)K * N;
    prof_end(ex, HY_EXEC_OP_GEMM);
}

/* product() with an fp32 w that is not one of the matrices (MLA's kv_b_proj). */
static void linear_f32(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                       float *y, size_t ldy)
{
    product(ex, n, K, N, x, ldx, w, false, y, ldy);
}

/* --- workspace planning -------------------------------------------------- */

static size_t widest_mlp(const hy_model_config *c)
{
    size_t w = (size_t)c->intermediate;
    if (c->n_experts) w = HY_MAX(w, (size_t)HY_MAX(c->moe_intermediate, c->shared_intermediate));
    return w;
}

/* Rows an MLA layer expands per product at least (mla_expand). */
#define MLA_EXPAND_ROWS 256

/* Floats of activations for a step of B tokens; with base != NULL also
 * assigns the views. */
static size_t plan(hy_exec *ex, size_t B, float *base)
{
    static_assert(sizeof(int) == sizeof(float), "int views take float-sized slots");
    const hy_model_config *c = &ex->m->cfg;
    const size_t H = (size_t)c->hidden, C = (size_t)hy_config_conv_dim(c);
    const size_t Vd = (size_t)c->lin_v_heads * c->lin_dv;
    const size_t Qd = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    const size_t I = widest_mlp(c);
    size_t Pbig = HY_MAX(C + Vd + 2 * (size_t)c->lin_v_heads, 2 * Qd + 2 * KV);
    Pbig = HY_MAX(Pbig, (size_t)c->n_experts);
    /* KDA: q | k | v | f_a | g_a | b rows; the per-channel log-decays and the
     * output gate are Q = Vd wide */
    const size_t Hv = (size_t)c->lin_v_heads, G = c->lin_kind == HY_LIN_KDA ? Vd : Hv;
    if (c->lin_kind == HY_LIN_KDA) /* Ling's full-rank gates: f and g are Vd wide each */
        Pbig = HY_MAX(Pbig, C + (c->kda_full_gates ? 2 * Vd : 2 * (size_t)c->lin_dk) + Hv);
    /* MLA: the query (or its bottleneck) | latent | shared key rows; a hole's
     * latents expanded by kv_b_proj; the attention output nh·dv */
    /* aux: KDA's output gate, Mamba2's dt·x */
    size_t Mid = HY_MAX(C, Qd),
           Aux = c->lin_kind == HY_LIN_KDA || c->lin_kind == HY_LIN_MAMBA2 ? Vd : 0;
    /* the experts' input and output rows: the hidden width, or the latent */
    const size_t Xe = HY_MAX(H, (size_t)c->moe_latent);
    if (c->mla) {
        const size_t nh = (size_t)c->n_heads, R = (size_t)c->kv_lora, dr = (size_t)c->qk_rope;
        const size_t Qa = c->q_lora ? (size_t)c->q_lora : nh * (c->qk_nope + dr);
        const size_t kvb = nh * (size_t)(c->qk_nope + c->v_head);
        /* Ling's gate per head after the latent rows */
        Pbig = HY_MAX(Pbig, HY_MAX(Qa + R + dr + (c->mla_head_gate ? nh : 0), kvb));
        Mid = HY_MAX(Mid, HY_MAX(R, nh * (size_t)c->v_head));
        Aux = HY_MAX(Aux, kvb);
    }
    size_t sizes[] = {
        B * H,                           /* x */
        B * H,                           /* xn */
        B * H,                           /* y */
        B * Pbig,                        /* big: fused projections, router logits */
        B * Mid,                         /* mid: conv output / attention output / latents */
        B * HY_MAX(Vd, Qd),              /* o: delta-rule output / MLA queries */
        B * G,                           /* g: log-decays (per head, or per channel) */
        B * (size_t)c->lin_v_heads,      /* beta */
        B * I,                           /* h: SwiGLU hidden */
        B * 2 * I,                       /* gu: gate|up */
        c->n_experts ? B * Xe : 0,       /* xe: gathered expert input */
        c->n_experts ? B * Xe : 0,       /* ye: expert output */
        B * (size_t)HY_MAX(c->top_k, 1), /* topw */
        B * (size_t)HY_MAX(c->top_k, 1), /* topi (ints, same size) */
        B * (size_t)HY_MAX(c->top_k, 1), /* rows (ints): tokens routed to one expert */
        /* aux: KDA's output gate; MLA's expanded latents, in chunks of at least
         * MLA_EXPAND_ROWS (a call of holes alone has steps of one row) */
        (c->mla ? HY_MAX(B, (size_t)MLA_EXPAND_ROWS) : B) * Aux,
        B * (size_t)c->moe_latent, /* lat_in: the routed experts' input in the latent */
        B * (size_t)c->moe_latent, /* lat_out: their weighted sum */
        /* mla_q, mla_o: MLA's absorbed queries and latent outputs, [B][nh][kv_lora] */
        c->mla ? B * (size_t)c->n_heads * (size_t)c->kv_lora : 0,
        c->mla ? B * (size_t)c->n_heads * (size_t)c->kv_lora : 0,
    };
    float **views[] = {&ex->x,   &ex->xn,     &ex->y,       &ex->big,   &ex->mid,
                       &ex->o,   &ex->g,      &ex->beta,    &ex->h,     &ex->gu,
                       &ex->xe,  &ex->ye,     &ex->topw,    NULL,       NULL,
                       &ex->aux, &ex->lat_in, &ex->lat_out, &ex->mla_q, &ex->mla_o};
    int **iviews[] = {&ex->topi, &ex->rows};
    int next_int = 0;
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        if (base) {
            if (views[i])
                *views[i] = base + off;
            else
                *iviews[next_int++] = (int *)(base + off);
        }
        off += (sizes[i] + 15) & ~(size_t)15; /* keep every view 64-byte aligned */
    }
    return off;
}

/* A thread's scratch for composing one head in any of its stored forms. */
static size_t compose_floats(const hy_model_config *c)
{
    return hy_rep_apply_scratch(hy_lin_tkind(c), c->lin_dk, c->lin_dv);
}

/* A thread's scratch for the query heads of one KV head attending together
 * (hy_attention_heads): 16 MiB, a context of 16k tokens for 4 heads. */
#define ATTN_HEADS_MAX_FLOATS ((size_t)4 << 20)

/* Whether GDN's value heads share their key heads' products: a GDN model
 * whose key heads serve several value heads each, with at least a key head
 * for every thread (the heads of one key head run on one thread). */
static bool gdn_shares(const hy_exec *ex)
{
    const hy_model_config *c = &ex->m->cfg;
    return hy_lin_family(c) == HY_LA_GDN && ex->mode == HY_GDN_CHUNKED && c->lin_k_heads > 0 &&
           c->lin_v_heads > c->lin_k_heads && c->lin_v_heads % c->lin_k_heads == 0 &&
           c->lin_k_heads >= ex->nthreads;
}

static int ensure_workspace(hy_exec *ex, size_t B, int64_t ctx, hy_err *err)
{
    const hy_model_config *c = &ex->m->cfg;
    assert(B >= 1 && B <= (size_t)ex->max_batch && ctx >= (int64_t)B);
    /* The parallel regions below run on as many threads as the caller's
     * OpenMP setting gives now, each indexing its own scratch slot. */
    ex->nthreads = omp_get_max_threads();
    size_t need = plan(ex, B, NULL);
    if (need > ex->ws_floats) {
        float *nw = hy_alloc(need * sizeof(float));
        if (!nw) return hy_err_set(err, HY_ENOMEM, "out of memory for a %zu-token step", B);
        hy_free(ex->ws);
        ex->ws = nw;
        ex->ws_floats = need;
    }
    plan(ex, B, ex->ws);
    ex->step_cap = 0; /* until the scratch is in place too */
    size_t per = hy_la_chunked_scratch(hy_lin_family(c), c->lin_dk, c->lin_dv);
    const size_t slots = gdn_shares(ex) ? hy_gdn_share_slots(B) : 0;
    if (slots) { /* the shared products after the delta rule's own scratch */
        per = hy_gdn_chunked_scratch(c->lin_dk, c->lin_dv) +
              slots * 2 * (size_t)HY_GDN_CHUNK * HY_GDN_CHUNK;
        const size_t nt = slots * 2 * (size_t)ex->nthreads;
        if (nt > ex->share_tags_n) {
            int64_t *t = malloc(nt * sizeof *t);
            if (!t) return hy_err_set(err, HY_ENOMEM, "out of memory for a %zu-token step", B);
            free(ex->share_tags);
            ex->share_tags = t;
            ex->share_tags_n = nt;
        }
        for (size_t i = 0; i < nt; i++) ex->share_tags[i] = -1;
    }
    ex->share_slots = 0; /* until the scratch is in place too */
    per = HY_MAX(per, hy_la_chunked_scratch(hy_lin_family(c), c->lin_dk, c->lin_dv));
    per = HY_MAX(per, (size_t)HY_ATTN_BLOCK * (size_t)ctx);
    /* a KV head's query heads attend together while their scores stay small
     * (attn_layer falls back to a head at a time past it) */
    const int grp = c->n_kv_heads > 0 ? c->n_heads / c->n_kv_heads : 1;
    const size_t heads = hy_attention_heads_scratch(grp, c->head_dim, c->head_dim, ctx);
    if (grp > 1 && heads <= ATTN_HEADS_MAX_FLOATS) per = HY_MAX(per, heads);
    per = HY_MAX(per, compose_floats(c)); /* a hole's or a capture's composition */
    size_t total = per * (size_t)ex->nthreads;
    if (total > ex->scratch_floats) {
        float *ns = hy_alloc(total * sizeof(float));
        if (!ns)
            return hy_err_set(err, HY_ENOMEM, "out of memory for scratch of context %lld",
                              (long long)ctx);
        hy_free(ex->scratch);
        ex->scratch = ns;
        ex->scratch_floats = total;
    }
    ex->scratch_per_thread = per;
    ex->share_slots = slots;
    ex->step_cap = B;
    ex->ctx_cap = ctx;
    return HY_OK;
}

/* RoPE's table covers positions [0, npos): grown by half again at least,
 * the new positions filled in parallel. Models without attention keep none. */
static int rope_reserve(hy_exec *ex, int64_t npos, hy_err *err)
{
    const hy_model_config *c = &ex->m->cfg;
    if (npos <= ex->rope_n) return HY_OK;
    bool attention = false;
    for (int li = 0; li < c->n_layers; li++) attention |= c->layer_kind[li] == HY_LAYER_ATTENTION;
    if (!attention || c->rotary_dim == 0) return HY_OK; /* no RoPE to tabulate */
    const int rd = c->rotary_dim;
    const int64_t n = HY_MAX(npos, ex->rope_n + ex->rope_n / 2);
    float *t = hy_alloc((size_t)n * (size_t)rd * sizeof(float));
    if (!t)
        return hy_err_set(err, HY_ENOMEM, "out of memory for RoPE's table of %lld positions",
                          (long long)n);
    if (ex->rope_n) memcpy(t, ex->rope, (size_t)ex->rope_n * (size_t)rd * sizeof(float));
    const int64_t from = ex->rope_n;
#pragma omp parallel for schedule(static)
    for (int64_t p = from; p < n; p++)
        hy_rope_cos_sin(rd, ex->m->rope_inv_freq, p, t + (size_t)p * (size_t)rd);
    hy_free(ex->rope);
    ex->rope = t;
    ex->rope_n = n;
    return HY_OK;
}

int hy_exec_new(const hy_model *m, int max_batch, hy_exec **out, hy_err *err)
{
    *out = NULL;
    if (max_batch < 0 || max_batch > (1 << 20))
        return hy_err_set(err, HY_ERANGE, "max_batch %d outside [0, 1048576]", max_batch);
    hy_exec *ex = calloc(1, sizeof *ex);
    if (!ex) return hy_err_set(err, HY_ENOMEM, "out of memory");
    ex->m = m;
    ex->max_batch = max_batch ? max_batch : 1024;
    *out = ex;
    return HY_OK;
}

void hy_exec_free(hy_exec *ex)
{
    if (!ex) return;
    hy_free(ex->ws);
    hy_free(ex->scratch);
    free(ex->items);
    free(ex->rowpos);
    free(ex->rowcap);
    free(ex->tcompose);
    free(ex->share_tags);
    hy_free(ex->rope);
    free(ex);
}

void hy_exec_set_gdn_mode(hy_exec *ex, hy_gdn_mode mode)
{
    ex->mode = mode;
}

void hy_exec_set_mla_mode(hy_exec *ex, hy_mla_mode mode)
{
    ex->mla_mode = mode;
}

hy_mla_mode hy_exec_mla_mode_used(const hy_exec *ex)
{
    return ex->mla_used;
}

/* y [n][N] = x [n][K] · w, w [K][N] row-major (not transposed, unlike
 * hy_linear's), timed as a GEMM: MLA's products with parts of kv_b_proj. */
static void gemm_nn(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                    size_t ldw, float *y, size_t ldy)
{
    prof_begin(ex);
    hy_gemm(0, 0, n, N, K, 1.0f, x, ldx, w, ldw, 0.0f, y, ldy);
    if (ex->stats.on) ex->stats.prof.gemm_flops += 2.0 * n * (double)K * N;
    prof_end(ex, HY_EXEC_OP_GEMM);
}

/* --- layers ---------------------------------------------------------------- */

/* y[t][j] += b[j] for n rows of d (stride ldy): a projection's bias. */
static void add_bias(hy_exec *ex, int n, int d, const float *b, float *y, size_t ldy)
{
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *r = y + (size_t)t * ldy;
#pragma omp simd
        for (int j = 0; j < d; j++) r[j] += b[j];
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
}

/* One MLP over n rows of width D, xin [n][D] into out [n][D]: SwiGLU,
 * down(silu(gate x) ⊙ up x), or relu², down(relu(up x + b_up)²) + b_down
 * (Nemotron-H). gu and h: [n][2·inter] and [n][inter] of scratch. */
static void ffn(hy_exec *ex, const hy_mlp_w *w, int n, int D, const float *xin, float *gu, float *h,
                float *out)
{
    const int I = w->inter;
    if (ex->m->cfg.mlp_act == HY_MLP_RELU2) {
        linear(ex, n, D, I, xin, (size_t)D, w->w_gu, h, (size_t)I);
        if (w->b_up) add_bias(ex, n, I, w->b_up, h, (size_t)I);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            float *hr = h + (size_t)t * I;
#pragma omp simd
            for (int j = 0; j < I; j++) {
                const float r = hr[j] > 0.0f ? hr[j] : 0.0f;
                hr[j] = r * r;
            }
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
        linear(ex, n, I, D, h, (size_t)I, w->w_down, out, (size_t)D);
        if (w->b_down) add_bias(ex, n, D, w->b_down, out, (size_t)D);
        return;
    }
    const int H = D;
    linear(ex, n, H, 2 * I, xin, (size_t)H, w->w_gu, gu, (size_t)(2 * I));
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *gr = gu + (size_t)t * 2 * I;
        float *hr = h + (size_t)t * I;
#pragma omp simd
        for (int j = 0; j < I; j++) hr[j] = hy_siluf(gr[j]) * gr[I + j];
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    linear(ex, n, I, H, h, (size_t)I, w->w_down, out, (size_t)H);
}

/* Top-k of p[0, E) by selection, skipping entries where skip[e]; ties keep
 * the lower index. */
static void top_k(const float *p, int E, int k, const bool *skip, int *ti)
{
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = skip && skip[e];
            for (int q = 0; q < j; q++) taken |= ti[q] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        assert(best >= 0);
        ti[j] = best;
    }
}

/* One token's routing from its router logits p[0, E) (overwritten): the k
 * experts ti and their weights tw. Softmax: the top-k probabilities,
 * renormalised with norm_topk. DeepSeek's (Kimi): sigmoid scores s; the
 * biased scores s + bias rank the groups (each by its two best) and, within
 * the topk_group groups kept, the experts; the weights are the chosen s,
 * renormalised (+1e-20) with norm_topk, times routed_scale. */
static void route_token(const hy_model_config *c, const float *bias, float *p, float *tw, int *ti)
{
    const int E = c->n_experts, k = c->top_k;
    if (c->router == HY_ROUTER_SOFTMAX) {
        float mx = p[0], sum = 0.0f;
        for (int e = 1; e < E; e++) mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++) sum += (p[e] = hy_expf(p[e] - mx));
        for (int e = 0; e < E; e++) p[e] /= sum;
        top_k(p, E, k, NULL, ti);
        float wsum = 0.0f;
        for (int j = 0; j < k; j++) wsum += (tw[j] = p[ti[j]]);
        if (c->norm_topk)
            for (int j = 0; j < k; j++) tw[j] /= wsum;
        return;
    }
    enum { MAXE = 4096, MAXG = 256 }; /* the loader's bounds */
    float sb[MAXE], gs[MAXG] = {0};
    bool drop[MAXE];
    assert(E <= MAXE && c->n_group <= MAXG);
    const int G = c->n_group, per = E / G;
    for (int e = 0; e < E; e++) {
        p[e] = hy_sigmoidf(p[e]);
        sb[e] = p[e] + bias[e];
    }
    for (int g = 0; g < G; g++) { /* a group's score: its two best biased scores */
        float a = -INFINITY, b = -INFINITY;
        for (int e = g * per; e < (g + 1) * per; e++)
            if (sb[e] > a)
                b = a, a = sb[e];
            else if (sb[e] > b)
                b = sb[e];
        gs[g] = a + b;
    }
    int kept[MAXE];
    top_k(gs, G, c->topk_group, NULL, kept);
    for (int e = 0; e < E; e++) drop[e] = true;
    for (int j = 0; j < c->topk_group; j++)
        for (int e = kept[j] * per; e < (kept[j] + 1) * per; e++) drop[e] = false;
    top_k(sb, E, k, drop, ti);
    float wsum = 0.0f;
    for (int j = 0; j < k; j++) wsum += (tw[j] = p[ti[j]]);
    const float scale = c->norm_topk ? c->routed_scale / (wsum + 1e-20f) : c->routed_scale;
    for (int j = 0; j < k; j++) tw[j] *= scale;
}

/* Routed experts and the shared expert over the step's n rows (xn in, y
 * out). The router reads xn; the experts read xn too, or, with a latent
 * (Nemotron-H's moe_latent), fc1_latent_proj(xn), their weighted sum then
 * going through fc2_latent_proj; the shared expert always reads xn. */
static void moe_mlp(hy_exec *ex, const hy_layer_w *L, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const int H = c->hidden, E = c->n_experts, k = c->top_k;
    const int D = c->moe_latent ? c->moe_latent : H; /* the experts' width */
    assert(k >= 1 && k <= E); /* the loader's rule: top-k picks k distinct experts */
    assert(L->shared.inter <= (int)widest_mlp(c));
    float *logits = ex->big; /* [n][E] */
    linear(ex, n, H, E, ex->xn, (size_t)H, L->router, logits, (size_t)E);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        route_token(c, L->router_bias, logits + (size_t)t * E, ex->topw + (size_t)t * k,
                    ex->topi + (size_t)t * k);
    prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    const float *src = ex->xn; /* [n][D]: what the experts read */
    float *acc = ex->y;        /* [n][D]: their weighted sum */
    if (c->moe_latent) {
        linear(ex, n, H, D, ex->xn, (size_t)H, L->latent.w_gu, ex->lat_in, (size_t)D);
        if (L->latent.b_up) add_bias(ex, n, D, L->latent.b_up, ex->lat_in, (size_t)D);
        src = ex->lat_in, acc = ex->lat_out;
    }
    memset(acc, 0, (size_t)n * D * sizeof(float));
    int *rows = ex->rows; /* (token, slot) pairs routed to expert e */
    for (int e = 0; e < E; e++) {
        prof_begin(ex);
        int m = 0;
        for (int t = 0; t < n; t++)
            for (int j = 0; j < k; j++)
                if (ex->topi[(size_t)t * k + j] == e) {
                    memcpy(ex->xe + (size_t)m * D, src + (size_t)t * D, (size_t)D * sizeof(float));
                    rows[m++] = t * k + j;
                }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
        if (m == 0) continue;
        /* distinct experts per token: at most n rows, the capacity of xe, ye */
        assert(m <= n && L->experts[e].inter <= (int)widest_mlp(c));
        ffn(ex, &L->experts[e], m, D, ex->xe, ex->gu, ex->h, ex->ye);
        prof_begin(ex);
        for (int r = 0; r < m; r++) {
            const int t = rows[r] / k;
            const float w = ex->topw[rows[r]];
            float *yr = acc + (size_t)t * D;
            const float *er = ex->ye + (size_t)r * D;
            for (int d = 0; d < D; d++) yr[d] += w * er[d];
        }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    }
    if (c->moe_latent) {
        linear(ex, n, D, H, ex->lat_out, (size_t)D, L->latent.w_down, ex->y, (size_t)H);
        if (L->latent.b_down) add_bias(ex, n, H, L->latent.b_down, ex->y, (size_t)H);
    }
    if (L->shared.inter > 0) {
        ffn(ex, &L->shared, n, H, ex->xn, ex->gu, ex->h, ex->ye);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            const float *xr = ex->xn + (size_t)t * H;
            float s = 1.0f; /* Kimi's and Nemotron-H's shared experts are not gated */
            if (c->shared_gated) {
                s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int d = 0; d < H; d++) s += xr[d] * L->shared_gate[d];
                s = hy_sigmoidf(s);
            }
            float *yr = ex->y + (size_t)t * H;
            const float *sr = ex->ye + (size_t)t * H;
            for (int d = 0; d < H; d++) yr[d] += s * sr[d];
        }
        prof_end(ex, HY_EXEC_OP_MOE_ROUTING);
    }
}

/* --- linear layers ------------------------------------------------------ */

/* A hole composed into one head's state: S ← T·S + S_body, or S ← S + S_body
 * without T (naive: T replaced by I — wrong for any decaying layer). work:
 * compose_floats(). */
static void compose_head(const hy_model_config *c, const hy_entry *e, int li, int h, bool use_T,
                         float *S, float *work)
{
    const size_t at = (size_t)li * c->lin_v_heads + h;
    hy_rep_apply(hy_lin_tkind(c), c->lin_dk, c->lin_dv, &e->th[at], &e->sh[at], use_T, S, work);
}

/* Advances one head's state S over the step's rows [off, off + len) of a
 * run (and T beside it when not NULL), writing their outputs: the family's
 * kernel. ctx: the step's activations it reads. */
typedef void (*head_run_fn)(hy_exec *ex, int li, int h, int off, int len, float *S, float *T,
                            float *work, const float *ctx);
/* Σ of head h's scalar log-decays over rows [off, off + len) of the step, for
 * families whose decay is one scalar per token and head (T = γ·Π(…) with
 * γ = exp of it), else NULL. */
typedef double (*head_logdecay_fn)(const hy_exec *ex, int h, int off, int len);

/* One head over the step's items in request order, whatever the family: runs
 * advance S through `run` (from a capture's start, T beside it; the state is
 * kept at the body's start and replaced at the segment's end by S_body = S −
 * T·S_w), holes compose into S. Returns the seconds spent composing. */
static double head_items(hy_exec *ex, hy_state *st, int li, int h, const item *it, int ni,
                         float *work, head_run_fn run, head_logdecay_fn logdecay, const float *ctx)
{
    const hy_model_config *c = &ex->m->cfg;
    const int dk = c->lin_dk, dv = c->lin_dv;
    const size_t ss = (size_t)dk * dv, th = hy_la_t_size(hy_lin_family(c), dk);
    float *S = st->S[li] + (size_t)h * ss;
    double composing = 0.0;
    for (int i = 0; i < ni; i++) {
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            const double t0 = hy_now_s();
            compose_head(c, p->hole, li, h, p->use_T, S, work);
            composing += hy_now_s() - t0;
            continue;
        }
        const int r0 = it[i].r0, n = it[i].n;
        const hy_capture *cap = p->cap;
        /* With a capture, rows [0, s) run without T, the state is kept at s
         * (the body's start), and rows [s, n) advance T too. */
        int s = n;
        if (cap) s = cap->start <= it[i].pos ? 0 : (int)HY_MIN(cap->start - it[i].pos, (int64_t)n);
        for (int part = 0; part < 2; part++) {
            const int off = r0 + (part ? s : 0), len = part ? n - s : s;
            if (len > 0)
                run(ex, li, h, off, len, S, part ? cap->T[li] + (size_t)h * th : NULL, work, ctx);
            if (len > 0 && part && logdecay && cap->logdecay[li])
                cap->logdecay[li][h] += logdecay(ex, h, off, len);
            if (part == 0 && cap && it[i].pos + s == cap->start)
                memcpy(cap->S_w[li] + (size_t)h * ss, S, ss * sizeof(float));
        }
        if (cap && it[i].last) { /* the segment's end: S_w ← S_body = S − T·S_w */
            float *sw = cap->S_w[li] + (size_t)h * ss;
            hy_la_extract(hy_lin_tkind(c), dk, dv, cap->T[li] + (size_t)h * th, sw, S, sw, work);
        }
    }
    return composing;
}

/* Every head of a linear layer over the step's items (head_items with the
 * family's kernel), in parallel; each thread's composing time is added to
 * its compose timer. */
static void heads_over_items(hy_exec *ex, hy_state *st, int li, int nheads, int group,
                             const item *it, int ni, head_run_fn run, head_logdecay_fn logdecay,
                             const float *ctx)
{
    prof_begin(ex);
    /* heads [g·group, (g+1)·group) on one thread, one after another */
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < nheads / group; g++) {
        const int tid = omp_get_thread_num();
        assert(tid < ex->nthreads && tid < ex->tcompose_n);
        float *work = ex->scratch + (size_t)tid * ex->scratch_per_thread;
        for (int h = g * group; h < (g + 1) * group; h++)
            ex->tcompose[(size_t)tid * TC_PAD] +=
                head_items(ex, st, li, h, it, ni, work, run, logdecay, ctx);
    }
    prof_end(ex, HY_EXEC_OP_DELTA_RULE);
}

/* A family kernel over one head's rows: chunked for runs of more than one
 * token unless the recurrent form is asked for. */
static void la_kernel(const hy_exec *ex, const hy_la_in *in, float *S, float *o, size_t ldo,
                      float *T, float *work)
{
    if (ex->mode == HY_GDN_CHUNKED && in->n > 1)
        hy_la_chunked(in, S, o, ldo, T, work);
    else
        hy_la_recurrent(in, S, o, ldo, T);
}

/* The short conv (SiLU) over the first C channels of each run's projection
 * rows (stride P), from the state the item before left, into cv [n][C]; a
 * hole leaves its tail, the last K−1 inputs of its segment, and a capture
 * ending in the step takes the conv state at its end. */
static void conv_items(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int C,
                       const float *proj, int P, const float *conv_w, const float *conv_b,
                       float *cv)
{
    const int K = ex->m->cfg.conv_kernel;
    const size_t tail = (size_t)(K - 1) * (size_t)C * sizeof(float);
    prof_begin(ex);
    for (int i = 0; i < ni; i++) {
        const hy_piece *p = it[i].p;
        if (!p->tokens) {
            memcpy(st->conv[li], p->hole->tail[li], tail);
            continue;
        }
        hy_conv1d_silu(it[i].n, C, K, proj + (size_t)it[i].r0 * P, (size_t)P, st->conv[li], conv_w,
                       conv_b, cv + (size_t)it[i].r0 * C, (size_t)C);
        if (p->cap && it[i].last) memcpy(p->cap->tail[li], st->conv[li], tail);
    }
    prof_end(ex, HY_EXEC_OP_CONV);
}

/* The delta rule of head h over rows [off, off + len); cv: the conv's output
 * rows q | k | v (q, k normalised). */
static void gdn_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                    const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk, dv = c->lin_dv;
    const int Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, hk = h / (Hv / Hk);
    const hy_gdn_in in = {.n = len,
                          .dk = dk,
                          .dv = dv,
                          .q = cv + (size_t)off * C + hk * dk,
                          .k = cv + (size_t)off * C + Kd + hk * dk,
                          .v = cv + (size_t)off * C + 2 * Kd + h * dv,
                          .ldq = (size_t)C,
                          .ldk = (size_t)C,
                          .ldv = (size_t)C,
                          .g = ex->g + (size_t)off * Hv + h,
                          .beta = ex->beta + (size_t)off * Hv + h,
                          .ldgb = (size_t)Hv};
    float *o = ex->o + (size_t)off * Vd + (size_t)h * dv;
    if (ex->mode == HY_GDN_CHUNKED && len > 1 && ex->share_slots) {
        const size_t tid = (size_t)omp_get_thread_num();
        const hy_gdn_share sh = {.prods = work + hy_gdn_chunked_scratch(dk, dv),
                                 .tags = ex->share_tags + tid * 2 * ex->share_slots,
                                 .nslots = ex->share_slots,
                                 .id = ex->share_gen * Hk + hk,
                                 .row0 = off};
        hy_gdn_chunked_shared(&in, S, o, (size_t)Vd, T, work, &sh);
    } else if (ex->mode == HY_GDN_CHUNKED && len > 1)
        hy_gdn_chunked(&in, S, o, (size_t)Vd, T, work);
    else
        hy_gdn_recurrent(&in, S, o, (size_t)Vd, T);
}

/* GDN's log-decay of head h per row, ex->g [rows][Hv]. */
static double gdn_logdecay(const hy_exec *ex, int h, int off, int len)
{
    const int Hv = ex->m->cfg.lin_v_heads;
    double s = 0.0;
    for (int t = off; t < off + len; t++) s += ex->g[(size_t)t * Hv + h];
    return s;
}

/* out = x·rms(x)⁻¹·w over one head's d values: hy_rmsnorm's arithmetic for
 * a single row, without the nested parallel region it would open inside a
 * parallel loop. */
static inline void rmsnorm_row(const float *x, const float *w, int d, float eps, float *out)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
    for (int i = 0; i < d; i++) out[i] = x[i] * r * w[i];
}

/* x·rms⁻¹·w·silu(z) over one value head's d outputs, in place. */
static inline void gated_rmsnorm(float *o, const float *z, const float *w, int d, float eps)
{
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int i = 0; i < d; i++) ss += o[i] * o[i];
    const float r = 1.0f / sqrtf(ss / (float)d + eps);
#pragma omp simd
    for (int i = 0; i < d; i++) o[i] = o[i] * r * w[i] * hy_siluf(z[i]);
}

/* A linear layer over the step's n computed rows (n may be 0: holes only). */
static void gdn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_gdn_w *w = &ex->m->layers[li].gdn;
    const int H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk,
              dv = c->lin_dv;
    const int Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, P = C + Vd + 2 * Hv;
    float *proj = ex->big, *cv = ex->mid;
    /* the state's S and conv buffers are sized from the same config */
    assert(Hv % Hk == 0 && C == hy_config_conv_dim(c) && st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_gdn_chunked_scratch(dk, dv));
    assert(ex->scratch_per_thread >= compose_floats(c));

    if (n > 0) linear(ex, n, H, P, ex->xn, (size_t)H, w->w_in, proj, (size_t)P);
    conv_items(ex, st, li, it, ni, C, proj, P, w->conv_w, NULL, cv);

    const float qscale = 1.0f / sqrtf((float)dk);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = cv + (size_t)t * C;
        for (int hk = 0; hk < Hk; hk++) {
            hy_l2norm_scale(row + hk * dk, dk, 1e-6f, qscale);
            hy_l2norm_scale(row + Kd + hk * dk, dk, 1e-6f, 1.0f);
        }
        const float *b = proj + (size_t)t * P + C + Vd, *a = b + Hv;
        for (int h = 0; h < Hv; h++) {
            ex->beta[(size_t)t * Hv + h] = c->lin_beta_scale * hy_sigmoidf(b[h]);
            ex->g[(size_t)t * Hv + h] = w->neg_A[h] * hy_softplusf(a[h] + w->dt_bias[h]);
        }
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    /* a key head's value heads on one thread, sharing its products */
    const bool share = ex->share_slots > 0;
    if (share) ex->share_gen++;
    heads_over_items(ex, st, li, Hv, share ? Hv / Hk : 1, it, ni, gdn_run, gdn_logdecay, cv);
    if (n == 0) return;

    /* Gated RMSNorm per value head: w · norm(o) · silu(z). */
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        for (int h = 0; h < Hv; h++)
            gated_rmsnorm(ex->o + (size_t)t * Vd + (size_t)h * dv,
                          proj + (size_t)t * P + C + (size_t)h * dv, w->norm_w, dv,
                          c->lin_norm_eps);
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    linear(ex, n, Vd, H, ex->o, (size_t)Vd, w->w_out, ex->y, (size_t)H);
}

/* --- Kimi Delta Attention -------------------------------------------------- */

/* KDA of head h over rows [off, off + len): the delta rule with a decay per
 * key channel (T dense). cv: the conv's output rows q | k | v (q, k
 * normalised, q scaled); ex->g the per-channel log-decays, ex->beta β. */
static void kda_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                    const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int H = c->lin_v_heads, d = c->lin_dk, Q = H * d, C = 3 * Q;
    const float *row = cv + (size_t)off * C + (size_t)h * d;
    const hy_la_in in = {.family = HY_LA_KDA,
                         .n = len,
                         .dk = d,
                         .dv = d,
                         .q = row,
                         .k = row + Q,
                         .v = row + 2 * Q,
                         .ldq = (size_t)C,
                         .ldk = (size_t)C,
                         .ldv = (size_t)C,
                         .g = ex->g + (size_t)off * Q + (size_t)h * d,
                         .ldg = (size_t)Q,
                         .beta = ex->beta + (size_t)off * H + h,
                         .ldb = (size_t)H};
    float *o = ex->o + (size_t)off * Q + (size_t)h * d;
    la_kernel(ex, &in, S, o, (size_t)Q, T, work);
}

/* A KDA layer over the step's n computed rows (n may be 0: holes only): the
 * fused projection, the SiLU short conv over q | k | v, the per-channel
 * log-decay g = −exp(A_log)·softplus(f + dt_bias) — or Ling's bounded
 * lower_bound·sigmoid(exp(A_log)·(f + dt_bias)) — with f = f_b(f_a x) (Kimi)
 * or f_proj x (Ling), β = sigmoid(b), l2-normalised q (scaled by d^−½) and
 * k, the delta rule per head, then per head w·norm(o)·sigmoid(z) with z =
 * g_b(g_a x) or g_proj x, and o_proj. */
static void kda_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_kda_w *w = &ex->m->layers[li].kda;
    const int Hd = c->hidden, H = c->lin_v_heads, d = c->lin_dk, Q = H * d, C = 3 * Q;
    const bool full = c->kda_full_gates;           /* Ling: f and g straight from the projection */
    const int G = full ? Q : d, P = C + 2 * G + H; /* rows q | k | v | f | g | b */
    float *proj = ex->big, *cv = ex->mid;
    assert(c->lin_dk == c->lin_dv && c->lin_k_heads == H && C == hy_config_conv_dim(c));
    assert(st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_KDA, d, d));
    if (n > 0) {
        linear(ex, n, Hd, P, ex->xn, (size_t)Hd, w->w_in, proj, (size_t)P);
        if (full) {
            prof_begin(ex);
#pragma omp parallel for schedule(static)
            for (int t = 0; t < n; t++) {
                memcpy(ex->g + (size_t)t * Q, proj + (size_t)t * P + C, (size_t)Q * sizeof(float));
                memcpy(ex->aux + (size_t)t * Q, proj + (size_t)t * P + C + Q,
                       (size_t)Q * sizeof(float));
            }
            prof_end(ex, HY_EXEC_OP_NORM_GATE);
        } else {
            linear(ex, n, d, Q, proj + C, (size_t)P, w->w_fb, ex->g, (size_t)Q);
            linear(ex, n, d, Q, proj + C + d, (size_t)P, w->w_gb, ex->aux, (size_t)Q);
        }
    }
    conv_items(ex, st, li, it, ni, C, proj, P, w->conv_w, NULL, cv);

    const float qscale = 1.0f / sqrtf((float)d);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = cv + (size_t)t * C, *g = ex->g + (size_t)t * Q;
        for (int h = 0; h < H; h++) {
            hy_l2norm_scale(row + h * d, d, 1e-6f, qscale);
            hy_l2norm_scale(row + Q + h * d, d, 1e-6f, 1.0f);
            if (c->kda_safe_gate) /* Ling: lb·sigmoid(exp(A_log)·(f + dt_bias)) ∈ (lb, 0) */
                for (int j = 0; j < d; j++) {
                    const int ch = h * d + j;
                    g[ch] =
                        c->kda_lower_bound * hy_sigmoidf(-w->neg_A[h] * (g[ch] + w->dt_bias[ch]));
                }
            else
                for (int j = 0; j < d; j++) {
                    const int ch = h * d + j;
                    g[ch] = w->neg_A[h] * hy_softplusf(g[ch] + w->dt_bias[ch]);
                }
        }
        const float *b = proj + (size_t)t * P + C + 2 * G;
        for (int h = 0; h < H; h++) ex->beta[(size_t)t * H + h] = hy_sigmoidf(b[h]);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    heads_over_items(ex, st, li, H, 1, it, ni, kda_run, NULL, cv);
    if (n == 0) return;

    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++)
        for (int h = 0; h < H; h++) {
            float *o = ex->o + (size_t)t * Q + (size_t)h * d;
            const float *z = ex->aux + (size_t)t * Q + (size_t)h * d;
            rmsnorm_row(o, w->norm_w, d, c->rms_eps, o);
#pragma omp simd
            for (int j = 0; j < d; j++) o[j] *= hy_sigmoidf(z[j]);
        }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    linear(ex, n, Q, Hd, ex->o, (size_t)Q, w->w_out, ex->y, (size_t)Hd);
}

/* --- Mamba2 (Nemotron-H) ---------------------------------------------------- */

/* Mamba2 of head h over rows [off, off + len): per token S ← a·S + B (dt·x)ᵀ
 * with a = exp(dt·A) (one decay per head and token: T a scalar) and
 * o = Sᵀ C, the kernels' MAMBA2 family with key B, query C and value dt·x.
 * cv: the conv's output rows x | B | C; ex->aux the rows of dt·x, ex->g
 * those of dt·A. */
static void mamba_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                      const float *cv)
{
    (void)li;
    const hy_model_config *c = &ex->m->cfg;
    const int nh = c->lin_v_heads, G = c->lin_k_heads, N = c->lin_dk, P = c->lin_dv;
    const int I = nh * P, C = I + 2 * G * N, g = h / (nh / G);
    const float *row = cv + (size_t)off * C;
    const hy_la_in in = {.family = HY_LA_MAMBA2,
                         .n = len,
                         .dk = N,
                         .dv = P,
                         .q = row + I + G * N + g * N,
                         .k = row + I + g * N,
                         .v = ex->aux + (size_t)off * I + (size_t)h * P,
                         .ldq = (size_t)C,
                         .ldk = (size_t)C,
                         .ldv = (size_t)I,
                         .g = ex->g + (size_t)off * nh + h,
                         .ldg = (size_t)nh};
    float *o = ex->o + (size_t)off * I + (size_t)h * P;
    la_kernel(ex, &in, S, o, (size_t)I, T, work);
}

/* A Mamba2 layer over the step's n computed rows (n may be 0: holes only):
 * in_proj to z | x B C | dt, the SiLU conv over x B C, dt = softplus(dt +
 * dt_bias) — clamped below at dt_min unless the call is a decode step, as
 * transformers' chunked scan clamps and its one-token update does not — the
 * scan per head, y + D·x, then the gated norm: y ⊙ silu(z) normalised over
 * each group's heads, times its weight, and out_proj. */
static void mamba_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_mamba_w *w = &ex->m->layers[li].mamba;
    const int H = c->hidden, nh = c->lin_v_heads, G = c->lin_k_heads, N = c->lin_dk, P = c->lin_dv;
    const int I = nh * P, C = I + 2 * G * N, Pin = I + C + nh, gw = I / G;
    float *proj = ex->big, *cv = ex->mid;
    assert(C == hy_config_conv_dim(c) && nh % G == 0 && st->S[li] && st->conv[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_MAMBA2, N, P));
    if (n > 0) {
        linear(ex, n, H, Pin, ex->xn, (size_t)H, w->w_in, proj, (size_t)Pin);
        if (w->b_in) add_bias(ex, n, Pin, w->b_in, proj, (size_t)Pin);
    }
    conv_items(ex, st, li, it, ni, C, proj + I, Pin, w->conv_w, w->conv_b, cv);

    const float lo = ex->decode_step ? 0.0f : c->dt_min; /* softplus is > 0 anyway */
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        const float *dtr = proj + (size_t)t * Pin + I + C, *x = cv + (size_t)t * C;
        float *v = ex->aux + (size_t)t * I;
        for (int h = 0; h < nh; h++) {
            float dt = hy_softplusf(dtr[h] + w->dt_bias[h]);
            dt = dt < lo ? lo : dt;
            ex->g[(size_t)t * nh + h] = w->neg_A[h] * dt;
#pragma omp simd
            for (int p = 0; p < P; p++) v[h * P + p] = dt * x[h * P + p];
        }
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    heads_over_items(ex, st, li, nh, 1, it, ni, mamba_run, NULL, cv);
    if (n == 0) return;

    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = ex->o + (size_t)t * I;
        const float *x = cv + (size_t)t * C, *z = proj + (size_t)t * Pin;
        for (int h = 0; h < nh; h++)
#pragma omp simd
            for (int p = 0; p < P; p++) o[h * P + p] += w->D[h] * x[h * P + p];
#pragma omp simd
        for (int j = 0; j < I; j++) o[j] *= hy_siluf(z[j]);
        for (int g = 0; g < G; g++)
            rmsnorm_row(o + (size_t)g * gw, w->norm_w + (size_t)g * gw, gw, c->lin_norm_eps,
                        o + (size_t)g * gw);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    linear(ex, n, I, H, ex->o, (size_t)I, w->w_out, ex->y, (size_t)H);
    if (w->b_out) add_bias(ex, n, H, w->b_out, ex->y, (size_t)H);
}

/* --- lightning attention (MiniMax) ----------------------------------------- */

/* Lightning attention of head h over rows [off, off + len): S ← a·S + k vᵀ
 * per token with the head's constant decay a = exp(g0), o = Sᵀq (T a
 * scalar). proj: the step's rows of silu(qkv) | gate. */
static void light_run(hy_exec *ex, int li, int h, int off, int len, float *S, float *T, float *work,
                      const float *proj)
{
    const hy_model_config *c = &ex->m->cfg;
    const int d = c->lin_dk, D = c->lin_v_heads * d, P = 4 * D;
    const float *row = proj + (size_t)off * P + (size_t)h * 3 * d;
    const hy_la_in in = {.family = HY_LA_LIGHTNING,
                         .n = len,
                         .dk = d,
                         .dv = d,
                         .q = row,
                         .k = row + d,
                         .v = row + 2 * d,
                         .ldq = (size_t)P,
                         .ldk = (size_t)P,
                         .ldv = (size_t)P,
                         .g0 = ex->m->layers[li].light.g0[h]};
    float *o = ex->o + (size_t)off * D + (size_t)h * d;
    la_kernel(ex, &in, S, o, (size_t)D, T, work);
}

/* A lightning layer over the step's n computed rows (n may be 0: holes
 * only): silu over qkv_proj (per head [q | k | v], no scaling, no norm), the
 * decayed linear attention per head, the output RMSNorm over all heads,
 * times sigmoid(output_gate(x)), then out_proj. No conv: a hole leaves
 * nothing but its state. */
static void light_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_light_w *w = &ex->m->layers[li].light;
    const int H = c->hidden, nh = c->lin_v_heads, d = c->lin_dk, D = nh * d, P = 4 * D;
    float *proj = ex->big;
    assert(c->lin_dk == c->lin_dv && st->S[li]);
    assert(ex->scratch_per_thread >= hy_la_chunked_scratch(HY_LA_LIGHTNING, d, d));
    if (n > 0) {
        linear(ex, n, H, P, ex->xn, (size_t)H, w->w_in, proj, (size_t)P);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            float *row = proj + (size_t)t * P;
#pragma omp simd
            for (int j = 0; j < 3 * D; j++) row[j] = hy_siluf(row[j]);
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    heads_over_items(ex, st, li, nh, 1, it, ni, light_run, NULL, proj);
    if (n == 0) return;
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *o = ex->o + (size_t)t * D;
        const float *gate = proj + (size_t)t * P + 3 * D;
        rmsnorm_row(o, w->norm_w, D, c->lin_norm_eps, o);
#pragma omp simd
        for (int j = 0; j < D; j++) o[j] *= hy_sigmoidf(gate[j]);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    linear(ex, n, D, H, ex->o, (size_t)D, w->w_out, ex->y, (size_t)H);
}

/* --- attention layers ------------------------------------------------------ */

/* dst[i] ← src[i] widened from bf16, over the threads. */
static void hole_kv_widen(float *dst, const void *src, size_t n)
{
    const uint16_t *b = src;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++) dst[i] = hy_bf16_to_f32(b[i]);
}

/* Each hole's K, rotated to the hole's positions, and V into the cache:
 * exactly what computing those tokens there would have written. */
static void write_holes(hy_exec *ex, hy_state *st, int li, const item *it, int ni)
{
    const hy_model_config *c = &ex->m->cfg;
    const int KV = c->n_kv_heads * c->head_dim, hd = c->head_dim;
    const double t0 = hy_now_s();
    for (int i = 0; i < ni; i++) {
        const hy_entry *e = it[i].p->hole;
        if (it[i].p->tokens) continue;
        const int64_t p0 = it[i].pos;
        assert(p0 + e->nb <= st->kv_cap);
        float *K = st->k[li] + (size_t)p0 * KV, *V = st->v[li] + (size_t)p0 * KV;
        const int rd = c->rotary_dim;
        assert(rd == 0 || p0 + e->nb <= ex->rope_n);
        if (e->repr.kv == HY_ENTRY_BF16) { /* widened in place, then rotated there */
            hole_kv_widen(K, e->K[li], (size_t)e->nb * KV);
            hole_kv_widen(V, e->V[li], (size_t)e->nb * KV);
        }
        const float *eK = e->repr.kv == HY_ENTRY_BF16 ? K : e->K[li];
        const float *eV = e->V[li];
#pragma omp parallel for schedule(static)
        for (int t = 0; t < e->nb; t++) {
            const float *cs = rd ? ex->rope + (size_t)(p0 + t) * (size_t)rd : NULL;
            for (int g = 0; g < c->n_kv_heads; g++) {
                const size_t at = (size_t)t * KV + (size_t)g * hd;
                hy_rope_rotate(K + at, eK + at, rd, cs);
                if (eK != K) memcpy(K + at + rd, eK + at + rd, (size_t)(hd - rd) * sizeof(float));
            }
            if (e->repr.kv != HY_ENTRY_BF16)
                memcpy(V + (size_t)t * KV, eV + (size_t)t * KV, (size_t)KV * sizeof(float));
        }
    }
    ex->hole_kv_s += hy_now_s() - t0;
}

/* An attention layer over the step's n computed rows (n may be 0: holes
 * only). The holes' K/V are written first, so every computed token attends
 * causally to every position before it, computed or composed. */
static void attn_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                       int nholes)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_attn_w *w = &ex->m->layers[li].attn;
    const int H = c->hidden, Hq = c->n_heads, Hkv = c->n_kv_heads, hd = c->head_dim;
    /* q_proj's rows: [query|gate] per head with the output gate, else queries */
    const int qs = c->attn_gate ? 2 * hd : hd, Q2 = Hq * qs;
    const int KV = Hkv * hd, P = Q2 + 2 * KV, Qd = Hq * hd, grp = Hq / Hkv, rd = c->rotary_dim;
    float *proj = ex->big, *ob = ex->mid;
    float *Kc = st->k[li], *Vc = st->v[li];
    assert(Hq % Hkv == 0 && Kc && Vc);
    assert(rd % 2 == 0 && rd <= hd);
    assert(!(c->qk_norm_flat && c->attn_gate)); /* a flat q norm needs the queries contiguous */

    if (nholes > 0) {
        prof_begin(ex);
        write_holes(ex, st, li, it, ni);
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
    if (n == 0) return;

    linear(ex, n, H, P, ex->xn, (size_t)H, w->w_qkv, proj, (size_t)P);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = proj + (size_t)t * P;
        const int64_t pos = ex->rowpos[t];
        /* rows are written at their positions; the scores need HY_ATTN_BLOCK
         * × context floats per thread */
        assert(pos < st->kv_cap && ex->scratch_per_thread >= (size_t)HY_ATTN_BLOCK * (pos + 1));
        assert(rd == 0 || pos < ex->rope_n);
        const float *cs = rd ? ex->rope + (size_t)pos * (size_t)rd : NULL;
        float *krow = Kc + (size_t)pos * KV, *vrow = Vc + (size_t)pos * KV;
        const bool per_head = c->qk_norm && !c->qk_norm_flat;
        if (!c->qk_norm) { /* MiniMax: the projections as they are */
            memcpy(krow, row + Q2, (size_t)KV * sizeof(float));
        } else if (c->qk_norm_flat) { /* OLMo: one norm over all queries, one over the keys */
            rmsnorm_row(row, w->q_norm1, Qd, c->rms_eps, row);
            rmsnorm_row(row + Q2, w->k_norm1, KV, c->rms_eps, krow);
        }
        for (int h = 0; h < Hq; h++) {
            float *qh = row + (size_t)h * qs;
            if (per_head) rmsnorm_row(qh, w->q_norm1, hd, c->rms_eps, qh);
            hy_rope_rotate(qh, qh, rd, cs);
        }
        const hy_capture *cap = ex->rowcap[t];
        const int64_t crow = cap && pos >= cap->start ? pos - cap->start : -1; /* capture row */
        float *ck = crow >= 0 ? cap->K[li] + (size_t)crow * KV : NULL;
        for (int g = 0; g < Hkv; g++) {
            float *kh = krow + (size_t)g * hd;
            if (per_head) rmsnorm_row(row + Q2 + (size_t)g * hd, w->k_norm1, hd, c->rms_eps, kh);
            if (ck) memcpy(ck + (size_t)g * hd, kh, (size_t)hd * sizeof(float)); /* canonical */
            hy_rope_rotate(kh, kh, rd, cs);
        }
        memcpy(vrow, row + Q2 + KV, (size_t)KV * sizeof(float));
        if (ck) memcpy(cap->V[li] + (size_t)crow * KV, vrow, (size_t)KV * sizeof(float));
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);

    const float scale = 1.0f / sqrtf((float)hd);
    prof_begin(ex);
    /* the query heads of a KV head together, when the scratch holds their
     * scores: a block's context is its last row's position + 1 */
    int64_t ctx = 0;
    for (int b = 0; b < nblk; b++)
        ctx = HY_MAX(ctx, ex->rowpos[HY_MIN_INT(n, (b + 1) * HY_ATTN_BLOCK) - 1] + 1);
    const bool together =
        grp > 1 && ex->scratch_per_thread >= hy_attention_heads_scratch(grp, hd, hd, ctx);
    if (together) {
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < Hkv * nblk; job++) {
            const int g = job % Hkv;
            const int r0 = (nblk - 1 - job / Hkv) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *work = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_heads(B, grp, hd, hd, ex->rowpos + r0,
                               proj + (size_t)r0 * P + (size_t)g * grp * qs, (size_t)P, (size_t)qs,
                               Kc + (size_t)g * hd, (size_t)KV, Vc + (size_t)g * hd, (size_t)KV,
                               scale, ob + (size_t)r0 * Qd + (size_t)g * grp * hd, (size_t)Qd,
                               (size_t)hd, work);
        }
    } else {
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < Hq * nblk; job++) {
            const int h = job % Hq, g = h / grp;
            /* blocks of the step's rows, whatever runs they belong to; the
             * last (the longest context) first */
            const int r0 = (nblk - 1 - job / Hq) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at(B, hd, hd, ex->rowpos + r0, proj + (size_t)r0 * P + (size_t)h * qs,
                            (size_t)P, Kc + (size_t)g * hd, (size_t)KV, Vc + (size_t)g * hd,
                            (size_t)KV, scale, ob + (size_t)r0 * Qd + (size_t)h * hd, (size_t)Qd,
                            scores);
        }
    }
    prof_end(ex, HY_EXEC_OP_ATTENTION);
    if (c->attn_gate) {
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++)
            for (int h = 0; h < Hq; h++) {
                float *oh = ob + (size_t)t * Qd + (size_t)h * hd;
                const float *gate = proj + (size_t)t * P + (size_t)h * qs + hd;
#pragma omp simd
                for (int j = 0; j < hd; j++) oh[j] *= hy_sigmoidf(gate[j]);
            }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    linear(ex, n, Qd, H, ob, (size_t)Qd, w->w_o, ex->y, (size_t)H);
}

/* --- multi-head latent attention (Kimi) ----------------------------------- */

/* MLA's latent norms: transformers builds them without an eps argument. */
#define MLA_NORM_EPS 1e-6f

/* Expands `count` cached latents (rows of lat, stride ldl) at positions
 * pos[r] (or p0 + r when pos is NULL) into the layer's expanded rows: per
 * head the key kv_b_proj gives (qk_nope) followed by the shared key part
 * (the V row, qk_rope), then per head the value (v_head). In chunks of the
 * step's rows (MLA_EXPAND_ROWS at least), through ex->aux. */
static void mla_expand(hy_exec *ex, hy_state *st, int li, const float *lat, size_t ldl,
                       const int64_t *pos, int64_t p0, int count)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_mla_w *w = &ex->m->layers[li].mla;
    const int nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head, R = c->kv_lora;
    const int KB = nh * (dn + dv), Kw = nh * (dn + dr);
    const size_t XW = hy_state_x_row(c);
    const int chunk = (int)HY_MAX(ex->step_cap, (size_t)MLA_EXPAND_ROWS); /* ex->aux's rows */
    for (int r0 = 0; r0 < count; r0 += chunk) {
        const int m = HY_MIN_INT(chunk, count - r0);
        linear_f32(ex, m, R, KB, lat + (size_t)r0 * ldl, ldl, w->w_kvb, ex->aux, (size_t)KB);
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int r = 0; r < m; r++) {
            const int64_t at = pos ? pos[r0 + r] : p0 + r0 + r;
            assert(at < st->kv_cap);
            float *X = st->x[li] + (size_t)at * XW;
            const float *kr = st->v[li] + (size_t)at * dr, *e = ex->aux + (size_t)r * KB;
            for (int h = 0; h < nh; h++) {
                memcpy(X + (size_t)h * (dn + dr), e + (size_t)h * (dn + dv), (size_t)dn * 4);
                memcpy(X + (size_t)h * (dn + dr) + dn, kr, (size_t)dr * 4);
                memcpy(X + Kw + (size_t)h * dv, e + (size_t)h * (dn + dv) + dn, (size_t)dv * 4);
            }
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
}

/* An MLA layer over the step's n computed rows (n may be 0: holes only).
 * Each token caches its normalised latent (K row) and the shared key part
 * (V row) as transformers' cache holds them: Kimi's as projected (no
 * positional encoding), Ling's rotated to the token's position (RoPE on the
 * shared key and on each query's rope part; the loader reordered the
 * checkpoint's interleaved pairs to halves). An entry keeps the key part
 * unrotated and a hole's is rotated to the hole's positions. Every cached
 * row is expanded once into per-head keys and values, against which the
 * queries attend (scale (dn+dr)^−½); Ling then scales each head's output by
 * sigmoid(g_proj x). With attention_bias, kv_a_proj_with_mqa and the output
 * projection add their biases. */
static void mla_layer(hy_exec *ex, hy_state *st, int li, const item *it, int ni, int n, int nblk,
                      int nholes)
{
    const hy_model_config *c = &ex->m->cfg;
    const hy_mla_w *w = &ex->m->layers[li].mla;
    const int H = c->hidden, nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head;
    const int R = c->kv_lora, ql = c->q_lora, Qa = ql ? ql : nh * (dn + dr);
    const int Pa = Qa + R + dr + (c->mla_head_gate ? nh : 0), rd = c->rotary_dim;
    const int Kw = nh * (dn + dr), Od = nh * dv;
    const size_t XW = hy_state_x_row(c);
    float *proj = ex->big, *lat = ex->mid;
    assert(st->k[li] && st->v[li] && st->x[li] && (rd == 0 || rd == dr));

    if (nholes > 0) {
        const double t0 = hy_now_s();
        for (int i = 0; i < ni; i++) {
            const hy_entry *e = it[i].p->hole;
            if (it[i].p->tokens) continue;
            const int64_t p0 = it[i].pos;
            assert(p0 + e->nb <= st->kv_cap && (rd == 0 || p0 + e->nb <= ex->rope_n));
            float *kr = st->v[li] + (size_t)p0 * dr;
            const float *ekr = e->V[li];
            if (e->repr.kv == HY_ENTRY_BF16) { /* widened in place, rotated there */
                hole_kv_widen(st->k[li] + (size_t)p0 * R, e->K[li], (size_t)e->nb * R);
                hole_kv_widen(kr, e->V[li], (size_t)e->nb * dr);
                ekr = kr;
            } else {
                memcpy(st->k[li] + (size_t)p0 * R, e->K[li], (size_t)e->nb * R * sizeof(float));
            }
            if (rd == 0) {
                if (ekr != kr) memcpy(kr, ekr, (size_t)e->nb * dr * sizeof(float));
            } else
#pragma omp parallel for schedule(static)
                for (int t = 0; t < e->nb; t++)
                    hy_rope_rotate(kr + (size_t)t * dr, ekr + (size_t)t * dr, rd,
                                   ex->rope + (size_t)(p0 + t) * (size_t)rd);
            if (!ex->mla_absorbed)
                mla_expand(ex, st, li, st->k[li] + (size_t)p0 * R, (size_t)R, NULL, p0, e->nb);
        }
        ex->hole_kv_s += hy_now_s() - t0;
    }
    if (n == 0) return;

    linear(ex, n, H, Pa, ex->xn, (size_t)H, w->w_a, proj, (size_t)Pa);
    if (w->b_kva) add_bias(ex, n, R + dr, w->b_kva, proj + Qa, (size_t)Pa);
    prof_begin(ex);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < n; t++) {
        float *row = proj + (size_t)t * Pa, *lt = lat + (size_t)t * R;
        const int64_t pos = ex->rowpos[t];
        assert(pos < st->kv_cap && ex->scratch_per_thread >= (size_t)HY_ATTN_BLOCK * (pos + 1));
        assert(rd == 0 || pos < ex->rope_n);
        rmsnorm_row(row + Qa, w->kv_norm, R, MLA_NORM_EPS, lt);
        memcpy(st->k[li] + (size_t)pos * R, lt, (size_t)R * sizeof(float));
        const float *kr = row + Qa + R; /* the shared key part, unrotated */
        const hy_capture *cap = ex->rowcap[t];
        if (cap && pos >= cap->start) { /* canonical rows for the entry */
            const int64_t crow = pos - cap->start;
            memcpy(cap->K[li] + (size_t)crow * R, lt, (size_t)R * sizeof(float));
            memcpy(cap->V[li] + (size_t)crow * dr, kr, (size_t)dr * sizeof(float));
        }
        float *vrow = st->v[li] + (size_t)pos * dr;
        if (rd == 0)
            memcpy(vrow, kr, (size_t)dr * sizeof(float));
        else
            hy_rope_rotate(vrow, kr, rd, ex->rope + (size_t)pos * (size_t)rd);
        if (ql) rmsnorm_row(row, w->q_norm, ql, MLA_NORM_EPS, row);
    }
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
    float *q = proj; /* the queries: proj's rows, or q_b_proj's */
    size_t ldq = (size_t)Pa;
    if (ql) {
        linear(ex, n, ql, Kw, proj, (size_t)Pa, w->w_qb, ex->o, (size_t)Kw);
        q = ex->o, ldq = (size_t)Kw;
    }
    if (rd) { /* each head's rope part of the queries, wherever they are */
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++)
            for (int h = 0; h < nh; h++) {
                float *qr = q + (size_t)t * ldq + (size_t)h * (dn + dr) + dn;
                hy_rope_rotate(qr, qr, rd, ex->rope + (size_t)ex->rowpos[t] * (size_t)rd);
            }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    float *ob = ex->mid; /* the latents are in the cache now */
    const float scale = 1.0f / sqrtf((float)(dn + dr));
    if (ex->mla_absorbed) {
        /* in the latent space: per head q_nope·W_UK (kv_b_proj's key rows),
         * scores against the latents plus q_rope·k_rope, the weighted sum of
         * latents, then through W_UV (its value rows) */
        float *qa = ex->mla_q, *oa = ex->mla_o;
        const size_t lda = (size_t)nh * R;
        for (int h = 0; h < nh; h++)
            gemm_nn(ex, n, dn, R, q + (size_t)h * (dn + dr), ldq,
                    w->w_kvb + (size_t)h * (dn + dv) * R, (size_t)R, qa + (size_t)h * R, lda);
        prof_begin(ex);
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < nh * nblk; job++) {
            const int h = job % nh;
            const int r0 = (nblk - 1 - job / nh) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at2(B, R, dr, R, ex->rowpos + r0, qa + (size_t)r0 * lda + (size_t)h * R,
                             lda, st->k[li], (size_t)R,
                             q + (size_t)r0 * ldq + (size_t)h * (dn + dr) + dn, ldq, st->v[li],
                             (size_t)dr, st->k[li], (size_t)R, scale,
                             oa + (size_t)r0 * lda + (size_t)h * R, lda, scores);
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
        for (int h = 0; h < nh; h++)
            linear_f32(ex, n, R, dv, oa + (size_t)h * R, lda,
                       w->w_kvb + ((size_t)h * (dn + dv) + dn) * R, ob + (size_t)h * dv,
                       (size_t)Od);
    } else {
        mla_expand(ex, st, li, lat, (size_t)R, ex->rowpos, 0, n);
        const float *X = st->x[li];
        prof_begin(ex);
#pragma omp parallel for schedule(dynamic, 1)
        for (int job = 0; job < nh * nblk; job++) {
            const int h = job % nh;
            const int r0 = (nblk - 1 - job / nh) * HY_ATTN_BLOCK,
                      B = HY_MIN_INT(HY_ATTN_BLOCK, n - r0);
            assert(omp_get_thread_num() < ex->nthreads);
            float *scores = ex->scratch + (size_t)omp_get_thread_num() * ex->scratch_per_thread;
            hy_attention_at(B, dn + dr, dv, ex->rowpos + r0,
                            q + (size_t)r0 * ldq + (size_t)h * (dn + dr), ldq,
                            X + (size_t)h * (dn + dr), XW, X + Kw + (size_t)h * dv, XW, scale,
                            ob + (size_t)r0 * Od + (size_t)h * dv, (size_t)Od, scores);
        }
        prof_end(ex, HY_EXEC_OP_ATTENTION);
    }
    if (c->mla_head_gate) { /* Ling: one sigmoid gate per head */
        prof_begin(ex);
#pragma omp parallel for schedule(static)
        for (int t = 0; t < n; t++) {
            const float *gate = proj + (size_t)t * Pa + Qa + R + dr;
            for (int h = 0; h < nh; h++) {
                const float s = hy_sigmoidf(gate[h]);
                float *oh = ob + (size_t)t * Od + (size_t)h * dv;
#pragma omp simd
                for (int j = 0; j < dv; j++) oh[j] *= s;
            }
        }
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    linear(ex, n, Od, H, ob, (size_t)Od, w->w_o, ex->y, (size_t)H);
    if (w->b_o) add_bias(ex, n, H, w->b_o, ex->y, (size_t)H);
}

static void add_rows(float *x, const float *y, size_t count)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) x[i] += y[i];
}

/* --- one step ----------------------------------------------------------------- */

/* A sublayer's input xn: the residual stream x normalised by w, or x itself
 * (w NULL: the layer normalises the sublayer's output instead). */
static void sublayer_input(hy_exec *ex, int n, const float *w)
{
    const int H = ex->m->cfg.hidden;
    prof_begin(ex);
    if (w)
        hy_rmsnorm(n, H, ex->x, (size_t)H, w, ex->m->cfg.rms_eps, ex->xn, (size_t)H);
    else
        memcpy(ex->xn, ex->x, (size_t)n * H * sizeof(float));
    prof_end(ex, HY_EXEC_OP_NORM_GATE);
}

/* x += y, the sublayer's output y normalised by w first when w is given; or,
 * with MiniMax's scaled residual, x = alpha·xn + beta·y (xn the sublayer's
 * normalised input). */
static void sublayer_output(hy_exec *ex, int n, const float *w, float alpha, float beta)
{
    const hy_model_config *c = &ex->m->cfg;
    const int H = c->hidden;
    if (w) {
        prof_begin(ex);
        hy_rmsnorm(n, H, ex->y, (size_t)H, w, c->rms_eps, ex->y, (size_t)H);
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
    }
    if (!c->scaled_residual) {
        add_rows(ex->x, ex->y, (size_t)n * H);
        return;
    }
    float *x = ex->x;
    const float *xn = ex->xn, *y = ex->y;
    const size_t count = (size_t)n * H;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) x[i] = alpha * xn[i] + beta * y[i];
}

/* One step: the items it[0, ni) hold n ≤ step_cap computed rows (n = 0 only
 * for holes after the last computed token), after hy_exec_run has reserved
 * the state and sized the workspace for the whole call. */
/* Waits until layer li of every hole among it[0, ni) has landed (entries
 * fetched while the pass runs: hy_entry_view_open); the time goes to
 * ex->arrival_wait_s. */
static int holes_wait(hy_exec *ex, const item *it, int ni, int li, hy_err *err)
{
    double t0 = 0.0;
    int rc = HY_OK;
    for (int i = 0; i < ni && !rc; i++) {
        const hy_entry *e = it[i].p->hole;
        if (!e || hy_entry_whole(e)) continue;
        if (t0 == 0.0) t0 = hy_now_s();
        if ((rc = hy_entry_layer_wait(e, li, err)))
            hy_err_prefix(err, "the entry at position %lld, layer %d", (long long)it[i].pos, li);
    }
    if (t0 != 0.0) ex->arrival_wait_s += hy_now_s() - t0;
    return rc;
}

static int step(hy_exec *ex, hy_state *st, const item *it, int ni, int n, float *logits,
                hy_err *err)
{
    const hy_model *m = ex->m;
    const hy_model_config *c = &m->cfg;
    const int H = c->hidden;
    assert(st->m == m && ni >= 1 && n >= 0 && (size_t)n <= ex->step_cap);
    assert(it[0].pos == st->pos && (n > 0 || !logits));
    int nholes = 0;
    for (int i = 0; i < ni; i++) {
        const item *r = &it[i];
        if (!r->p->tokens) {
            nholes++;
            continue;
        }
        for (int t = 0; t < r->n; t++) {
            assert(r->tok[t] >= 0 && r->tok[t] < c->vocab); /* hy_exec_run checked them */
            memcpy(ex->x + (size_t)(r->r0 + t) * H, m->embed + (size_t)r->tok[t] * H,
                   (size_t)H * sizeof(float));
            ex->rowpos[r->r0 + t] = r->pos + t;
            ex->rowcap[r->r0 + t] = r->p->cap;
        }
    }
    const int nblk = (n + HY_ATTN_BLOCK - 1) / HY_ATTN_BLOCK; /* attention's row blocks */
    const item *lst = &it[ni - 1];
    const int64_t end = lst->pos + (lst->p->tokens ? lst->n : lst->p->hole->nb);
    assert(end <= ex->ctx_cap && end <= st->kv_cap);
    for (int li = 0; li < c->n_layers; li++) {
        const hy_layer_w *L = &m->layers[li];
        assert(L->kind == c->layer_kind[li] && L->moe == c->layer_moe[li]);
        assert(L->moe || c->layer_no_mlp[li] || L->mlp.inter <= (int)widest_mlp(c));
        /* pre-normalised: x += f(norm(x)); post-normalised: x += norm(f(x)) */
        const bool post = c->layer_post_norm[li];
        const bool lin = L->kind == HY_LAYER_LINEAR, mixer = L->kind != HY_LAYER_MLP;
        if (mixer) {
            if (nholes > 0) {
                const int rc = holes_wait(ex, it, ni, li, err);
                if (rc) return rc;
            }
            if (n > 0) sublayer_input(ex, n, post ? NULL : L->in_norm1);
            if (lin && c->lin_kind == HY_LIN_LIGHTNING)
                light_layer(ex, st, li, it, ni, n);
            else if (lin && c->lin_kind == HY_LIN_KDA)
                kda_layer(ex, st, li, it, ni, n);
            else if (lin && c->lin_kind == HY_LIN_MAMBA2)
                mamba_layer(ex, st, li, it, ni, n);
            else if (lin)
                gdn_layer(ex, st, li, it, ni, n);
            else if (c->mla)
                mla_layer(ex, st, li, it, ni, n, nblk, nholes);
            else
                attn_layer(ex, st, li, it, ni, n, nblk, nholes);
            if (ex->layer_hook) ex->layer_hook(ex->layer_ctx, li, end); /* its state is final */
            if (n > 0)
                sublayer_output(ex, n, post ? L->in_norm1 : NULL,
                                lin ? c->lin_alpha : c->attn_alpha,
                                lin ? c->lin_beta : c->attn_beta);
        }
        if (n == 0 || c->layer_no_mlp[li]) continue;
        /* a layer of an MLP alone normalises with its only norm */
        sublayer_input(ex, n, post ? NULL : mixer ? L->post_norm1 : L->in_norm1);
        if (L->moe)
            moe_mlp(ex, L, n);
        else
            ffn(ex, &L->mlp, n, H, ex->xn, ex->gu, ex->h, ex->y);
        sublayer_output(ex, n, post ? L->post_norm1 : NULL, c->mlp_alpha, c->mlp_beta);
    }
    st->pos = end;
    if (logits) {
        float *last = ex->xn; /* row 0 of xn is free now */
        prof_begin(ex);
        hy_rmsnorm(1, H, ex->x + (size_t)(n - 1) * H, (size_t)H, m->final_norm1, c->rms_eps, last,
                   (size_t)H);
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
        linear(ex, 1, H, c->vocab, last, (size_t)H, m->lm_head, logits, (size_t)c->vocab);
    }
    return HY_OK;
}

/* --- the pass ------------------------------------------------------------------ */

/* Whether a pass over pieces pc from st attends in MLA's latent space: by
 * the mode set, or (AUTO) when that costs fewer FLOPs than expanding what
 * is not expanded yet — the positions an earlier latent-space pass left,
 * every hole's body, every computed token — and attending over the expanded
 * keys and values. Per layer and head: expanding a row 2·kv_lora·(dn + dv);
 * a query–key pair 2·(dn + dr + dv) expanded, 2·(2·kv_lora + dr) in the
 * latent space; a computed token's absorption in and out 2·kv_lora·(dn + dv). */
static bool mla_absorbs(const hy_exec *ex, const hy_state *st, const hy_piece *pc, size_t np)
{
    const hy_model_config *c = &ex->m->cfg;
    if (!c->mla || ex->mla_mode == HY_MLA_EXPANDED) return false;
    if (ex->mla_mode == HY_MLA_ABSORBED) return true;
    const double R = c->kv_lora, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head;
    double rows = (double)(st->pos - st->x_valid), computed = 0, pairs = 0;
    int64_t at = st->pos;
    for (size_t i = 0; i < np; i++) {
        const double n = pc[i].tokens ? (double)pc[i].n : (double)pc[i].hole->nb;
        if (pc[i].tokens) { /* positions at .. at + n − 1 see at + 1 .. at + n keys */
            computed += n;
            pairs += n * (double)at + n * (n + 1) / 2;
        }
        rows += n;
        at += (int64_t)n;
    }
    const double expanded = rows * 2 * R * (dn + dv) + pairs * 2 * (dn + dr + dv);
    const double latent = computed * 2 * R * (dn + dv) + pairs * 2 * (2 * R + dr);
    return latent < expanded;
}

/* Expands every MLA layer's cached latents at positions [st->x_valid,
 * st->pos), which a latent-space pass left unexpanded, before a pass that
 * attends over the expanded rows. */
static void mla_catch_up(hy_exec *ex, hy_state *st)
{
    const hy_model_config *c = &ex->m->cfg;
    const int64_t from = st->x_valid, count = st->pos - from;
    if (count <= 0) return;
    for (int li = 0; li < c->n_layers; li++)
        if (c->layer_kind[li] == HY_LAYER_ATTENTION)
            mla_expand(ex, st, li, st->k[li] + (size_t)from * (size_t)c->kv_lora,
                       (size_t)c->kv_lora, NULL, from, (int)count);
}

/* Grows *p to hold `need` elements of `size` bytes. */
static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return HY_OK;
    void *q = realloc(*p, need * size);
    if (!q) return HY_ENOMEM;
    *p = q;
    *cap = need;
    return HY_OK;
}

/* Checks every piece before anything runs; totals its positions and its
 * computed tokens. */
static int check_pieces(const hy_exec *ex, const hy_state *st, const hy_piece *pc, size_t np,
                        int64_t *total, int64_t *computed, hy_err *err)
{
    const hy_model_config *c = &ex->m->cfg;
    int64_t at = st->pos, nc = 0;
    for (size_t i = 0; i < np; i++) {
        const hy_piece *p = &pc[i];
        if (p->tokens) {
            if (p->n == 0) return hy_err_set(err, HY_EINVAL, "prefill of zero tokens");
            if (p->n > (size_t)INT32_MAX)
                return hy_err_set(err, HY_ERANGE, "prefill of %zu tokens exceeds %d", p->n,
                                  INT32_MAX);
            for (size_t j = 0; j < p->n; j++)
                if (p->tokens[j] < 0 || p->tokens[j] >= c->vocab)
                    return hy_err_set(err, HY_ERANGE,
                                      "token %lld has id %d, outside the vocabulary [0, %d)",
                                      (long long)(nc + (int64_t)j), (int)p->tokens[j], c->vocab);
            /* a capture covers exactly its run, its body at least one token */
            assert(!p->cap || (p->cap->start >= at && p->cap->start < at + (int64_t)p->n &&
                               p->cap->end == at + (int64_t)p->n));
            at += (int64_t)p->n;
            nc += (int64_t)p->n;
        } else if (p->hole) {
            const hy_entry *e = p->hole;
            if (memcmp(e->model_fp, ex->m->fingerprint, 32) != 0)
                return hy_err_set(err, HY_EINVAL,
                                  "the entry was built for another model (fingerprint differs)");
            if (e->n_layers != c->n_layers)
                return hy_err_set(err, HY_EINVAL, "the entry has %d layers, the model %d",
                                  e->n_layers, c->n_layers);
            /* the fingerprint makes its shapes the model's; one still landing
             * has the sections of the layers landed so far */
            assert(!hy_entry_whole(e) || hy_entry_fits(e, c));
            at += e->nb;
        } else {
            return hy_err_set(err, HY_EINVAL, "piece %zu is neither computed tokens nor an entry",
                              i);
        }
    }
    *total = at - st->pos;
    *computed = nc;
    return HY_OK;
}

int hy_exec_run(hy_exec *ex, hy_state *st, const hy_piece *pc, size_t np, float *logits,
                double *compose_s, hy_err *err)
{
    const double t0 = ex->stats.on ? hy_now_s() : 0.0;
    ex->stats.last = t0;
    if (st->m != ex->m) return hy_err_set(err, HY_EINVAL, "state belongs to another model");
    if (np == 0) return hy_err_set(err, HY_EINVAL, "prefill of zero tokens");
    int64_t total = 0, computed = 0;
    int rc = check_pieces(ex, st, pc, np, &total, &computed, err);
    if (rc) return rc;
    if (logits && !pc[np - 1].tokens)
        return hy_err_set(err, HY_EINVAL,
                          "logits need the pass to end with computed tokens, not an entry");
    /* every step but the last holds max_batch computed rows; one of holes
     * alone (after the last computed token) holds none but is sized for one */
    const size_t B = (size_t)HY_MAX(HY_MIN(computed, (int64_t)ex->max_batch), (int64_t)1);
    /* transformers' decode step: one token, nothing else, after a prefix */
    ex->decode_step = np == 1 && pc[0].tokens && pc[0].n == 1 && st->pos > 0;
    ex->mla_absorbed = mla_absorbs(ex, st, pc, np);
    const int64_t ctx = st->pos + total;
    if ((rc = hy_state_reserve(st, ctx, err)) || (rc = ensure_workspace(ex, B, ctx, err)) ||
        (rc = rope_reserve(ex, ctx, err)))
        return rc;
    if (grow((void **)&ex->items, &ex->items_cap, np, sizeof *ex->items) ||
        grow((void **)&ex->rowpos, &ex->rowpos_cap, B, sizeof *ex->rowpos) ||
        grow((void **)&ex->rowcap, &ex->rowcap_cap, B, sizeof *ex->rowcap))
        return hy_err_set(err, HY_ENOMEM, "out of memory planning a pass of %zu pieces", np);
    if (ex->tcompose_n < ex->nthreads) {
        double *tc = realloc(ex->tcompose, (size_t)ex->nthreads * TC_PAD * sizeof *tc);
        if (!tc) return hy_err_set(err, HY_ENOMEM, "out of memory");
        ex->tcompose = tc;
        ex->tcompose_n = ex->nthreads;
    }
    memset(ex->tcompose, 0, (size_t)ex->tcompose_n * TC_PAD * sizeof *ex->tcompose);
    ex->hole_kv_s = 0.0;
    ex->arrival_wait_s = 0.0;
    /* Subnormals as zero (hy_fp_flush_subnormals): T's entries and decayed
     * states sink below FLT_MIN, which costs an Intel core ~70x per product.
     * The caller's mode comes back at the end; the OpenMP workers, which
     * run only this library's kernels, keep it. */
    const uint64_t fp_mode = hy_fp_flush_subnormals();
#pragma omp parallel
    if (omp_get_thread_num() != 0) (void)hy_fp_flush_subnormals();
    if (ex->m->cfg.mla && !ex->mla_absorbed) mla_catch_up(ex, st);

    /* Steps: pieces in order, a run cut where a step's rows are full; the
     * holes before a run's rows go with them into their step. */
    int64_t pos = st->pos;
    size_t i = 0, off = 0;
    while (i < np) {
        if (ex->cancel && ex->cancel(ex->cancel_ctx)) { /* the caller is gone */
            const int64_t done = pos - (ctx - total);
            hy_fp_restore(fp_mode);
            hy_state_reset(st);
            return hy_err_set(err, HY_ECANCELED,
                              "the pass was called off after %lld of its %lld positions",
                              (long long)done, (long long)total);
        }
        int ni = 0, rows = 0;
        while (i < np && (size_t)rows < B) {
            const hy_piece *p = &pc[i];
            if (!p->tokens) {
                ex->items[ni++] = (item){.p = p, .pos = pos};
                pos += p->hole->nb;
                i++;
                continue;
            }
            const int take = (int)HY_MIN(p->n - off, B - (size_t)rows);
            ex->items[ni++] = (item){.p = p,
                                     .tok = p->tokens + off,
                                     .r0 = rows,
                                     .n = take,
                                     .pos = pos,
                                     .last = off + (size_t)take == p->n};
            rows += take, pos += take, off += (size_t)take;
            if (off == p->n) i++, off = 0;
        }
        /* logits only after the step holding the last piece (a run) */
        if ((rc = step(ex, st, ex->items, ni, rows, i == np ? logits : NULL, err))) {
            /* an entry that failed to land: nothing of the pass stays */
            hy_fp_restore(fp_mode);
            hy_state_reset(st);
            return rc;
        }
    }
    assert(st->pos == ctx);
    if (ex->m->cfg.mla) { /* an expanded pass leaves every position expanded */
        if (!ex->mla_absorbed) st->x_valid = ctx;
        ex->mla_used = ex->mla_absorbed ? HY_MLA_ABSORBED : HY_MLA_EXPANDED;
    }
    hy_fp_restore(fp_mode);
    if (compose_s) {
        double tc = 0.0;
        for (int t = 0; t < ex->tcompose_n; t++) tc += ex->tcompose[(size_t)t * TC_PAD];
        *compose_s += tc / ex->nthreads + ex->hole_kv_s;
    }
    if (ex->stats.on) { /* refused calls advance nothing and are not counted */
        prof_end(ex, HY_EXEC_OP_OTHER);
        ex->stats.prof.total_s += ex->stats.last - t0;
        ex->stats.prof.tokens += computed;
    }
    return HY_OK;
}

double hy_exec_arrival_wait_s(const hy_exec *ex)
{
    return ex->arrival_wait_s;
}

void hy_exec_trim(hy_exec *ex, int64_t keep)
{
    if (ex->ctx_cap > keep) { /* every pass sizes it again for its context */
        hy_free(ex->scratch);
        ex->scratch = NULL;
        ex->scratch_floats = 0;
        ex->step_cap = 0;
        ex->ctx_cap = 0;
    }
    if (ex->rope_n > keep) { /* the first keep positions' rows stay where they are */
        const int rd = ex->m->cfg.rotary_dim;
        float *t = keep > 0 ? hy_alloc((size_t)keep * (size_t)rd * sizeof(float)) : NULL;
        if (keep > 0 && !t) return; /* keeps the larger table */
        if (t) memcpy(t, ex->rope, (size_t)keep * (size_t)rd * sizeof(float));
        hy_free(ex->rope);
        ex->rope = t;
        ex->rope_n = keep;
    }
}

void hy_exec_set_cancel(hy_exec *ex, hy_cancel_fn fn, void *ctx)
{
    ex->cancel = fn;
    ex->cancel_ctx = ctx;
}

void hy_exec_set_layer_hook(hy_exec *ex, hy_layer_hook_fn fn, void *ctx)
{
    ex->layer_hook = fn;
    ex->layer_ctx = ctx;
}

int hy_exec_prefill(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, float *logits,
                    hy_err *err)
{
    const hy_piece p = {.tokens = tokens, .n = n};
    if (n == 0) return hy_err_set(err, HY_EINVAL, "prefill of zero tokens");
    return hy_exec_run(ex, st, &p, 1, logits, NULL, err);
}

int hy_exec_decode(hy_exec *ex, hy_state *st, int32_t token, float *logits, hy_err *err)
{
    return hy_exec_prefill(ex, st, &token, 1, logits, err);
}
