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
 * own norm.) This file is the step driver: the workspace, the items of a
 * step, the residual stream and the pass over pieces; the sublayers are the
 * backend's (exec_internal.h: hy_fwd_ops) — for the CPU, ffn.c,
 * linear_layers.c and attention_layers.c.
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
#include "exec_internal.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* --- profiling and products ---------------------------------------------- */

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
void hy_fwd_linear(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
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
void hy_fwd_linear_f32(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                       float *y, size_t ldy)
{
    product(ex, n, K, N, x, ldx, w, false, y, ldy);
}

/* y [n][N] = x [n][K] · w, w [K][N] row-major (not transposed, unlike
 * hy_linear's), timed as a GEMM: MLA's products with parts of kv_b_proj. */
void hy_fwd_gemm_nn(hy_exec *ex, int n, int K, int N, const float *x, size_t ldx, const float *w,
                    size_t ldw, float *y, size_t ldy)
{
    prof_begin(ex);
    hy_gemm(0, 0, n, N, K, 1.0f, x, ldx, w, ldw, 0.0f, y, ldy);
    if (ex->stats.on) ex->stats.prof.gemm_flops += 2.0 * n * (double)K * N;
    prof_end(ex, HY_EXEC_OP_GEMM);
}

/* y[t][j] += b[j] for n rows of d (stride ldy): a projection's bias. */
void hy_fwd_add_bias(hy_exec *ex, int n, int d, const float *b, float *y, size_t ldy)
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

/* --- workspace planning -------------------------------------------------- */

/* Floats of activations for a step of B tokens; with base != NULL also
 * assigns the views. */
static size_t plan(hy_exec *ex, size_t B, float *base)
{
    static_assert(sizeof(int) == sizeof(float), "int views take float-sized slots");
    const hy_model_config *c = &ex->m->cfg;
    const size_t H = (size_t)c->hidden, C = (size_t)hy_config_conv_dim(c);
    const size_t Vd = (size_t)c->lin_v_heads * c->lin_dv;
    const size_t Qd = (size_t)c->n_heads * c->head_dim, KV = (size_t)c->n_kv_heads * c->head_dim;
    const size_t I = hy_fwd_widest_mlp(c);
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
     * (hy_fwd_attn_layer falls back to a head at a time past it) */
    const int grp = c->n_kv_heads > 0 ? c->n_heads / c->n_kv_heads : 1;
    const size_t heads = hy_attention_heads_scratch(grp, c->head_dim, c->head_dim, ctx);
    if (grp > 1 && heads <= ATTN_HEADS_MAX_FLOATS) per = HY_MAX(per, heads);
    per = HY_MAX(per, hy_fwd_compose_floats(c)); /* a hole's or a capture's composition */
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
    ex->ops = &hy_fwd_cpu;
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
    hy_dev_exec_free(ex->dev);
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

int hy_exec_set_device(hy_exec *ex, hy_exec_device kind, int device, hy_err *err)
{
    hy_dev_exec *d = NULL;
    if (kind != HY_EXEC_CPU) {
        int rc = hy_dev_exec_new(ex->m, kind, device, &d, err);
        if (rc) return rc;
    }
    hy_dev_exec_free(ex->dev);
    ex->dev = d;
    return HY_OK;
}

const char *hy_exec_device_name(const hy_exec *ex)
{
    return ex->dev ? hy_dev_exec_name(ex->dev) : "cpu";
}

int hy_exec_device_parse(const char *s, hy_exec_device *kind, int *device)
{
    *device = 0;
    if (!strcmp(s, "cpu")) {
        *kind = HY_EXEC_CPU;
        return HY_OK;
    }
    if (!strcmp(s, "emulated")) {
        *kind = HY_EXEC_EMULATED;
        return HY_OK;
    }
    if (strncmp(s, "cuda", 4) != 0) return HY_EINVAL;
    *kind = HY_EXEC_CUDA;
    if (s[4] == '\0') return HY_OK;
    if (s[4] != ':' || s[5] < '0' || s[5] > '9') return HY_EINVAL;
    char *end = NULL;
    const long n = strtol(s + 5, &end, 10);
    if (*end || n > 1023) return HY_EINVAL;
    *device = (int)n;
    return HY_OK;
}

hy_mla_mode hy_exec_mla_mode_used(const hy_exec *ex)
{
    return ex->mla_used;
}

static void add_rows(float *x, const float *y, size_t count)
{
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) x[i] += y[i];
}

/* The CPU backend: every layer kind, OpenMP over the hy_* kernels. */
const hy_fwd_ops hy_fwd_cpu = {
    .name = "cpu",
    .linear = {[HY_LIN_GDN] = hy_fwd_gdn_layer,
               [HY_LIN_LIGHTNING] = hy_fwd_light_layer,
               [HY_LIN_KDA] = hy_fwd_kda_layer,
               [HY_LIN_MAMBA2] = hy_fwd_mamba_layer},
    .attention = hy_fwd_attn_layer,
    .mla = hy_fwd_mla_layer,
    .mlp = hy_fwd_ffn,
    .moe = hy_fwd_moe,
};

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
int hy_fwd_holes_wait(hy_exec *ex, const item *it, int ni, int li, hy_err *err)
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

int hy_fwd_step_rows(hy_exec *ex, const item *it, int ni, int64_t *end)
{
    int nholes = 0;
    for (int i = 0; i < ni; i++) {
        const item *r = &it[i];
        if (!r->p->tokens) {
            nholes++;
            continue;
        }
        for (int t = 0; t < r->n; t++) {
            ex->rowpos[r->r0 + t] = r->pos + t;
            ex->rowcap[r->r0 + t] = r->p->cap;
        }
    }
    const item *lst = &it[ni - 1];
    *end = lst->pos + (lst->p->tokens ? lst->n : lst->p->hole->nb);
    return nholes;
}

static int step(hy_exec *ex, hy_state *st, const item *it, int ni, int n, float *logits,
                hy_err *err)
{
    const hy_model *m = ex->m;
    const hy_model_config *c = &m->cfg;
    const hy_fwd_ops *ops = ex->ops;
    const int H = c->hidden;
    assert(st->m == m && ni >= 1 && n >= 0 && (size_t)n <= ex->step_cap);
    assert(it[0].pos == st->pos && (n > 0 || !logits));
    int64_t end;
    const int nholes = hy_fwd_step_rows(ex, it, ni, &end);
    for (int i = 0; i < ni; i++) /* the computed rows' embeddings */
        for (int t = 0; it[i].p->tokens && t < it[i].n; t++) {
            const int32_t tok = it[i].tok[t];
            assert(tok >= 0 && tok < c->vocab); /* hy_exec_run checked them */
            memcpy(ex->x + (size_t)(it[i].r0 + t) * H, m->embed + (size_t)tok * H,
                   (size_t)H * sizeof(float));
        }
    const int nblk = (n + HY_ATTN_BLOCK - 1) / HY_ATTN_BLOCK; /* attention's row blocks */
    assert(end <= ex->ctx_cap && end <= st->kv_cap);
    for (int li = 0; li < c->n_layers; li++) {
        const hy_layer_w *L = &m->layers[li];
        assert(L->kind == c->layer_kind[li] && L->moe == c->layer_moe[li]);
        assert(L->moe || c->layer_no_mlp[li] || L->mlp.inter <= (int)hy_fwd_widest_mlp(c));
        /* pre-normalised: x += f(norm(x)); post-normalised: x += norm(f(x)) */
        const bool post = c->layer_post_norm[li];
        const bool lin = L->kind == HY_LAYER_LINEAR, mixer = L->kind != HY_LAYER_MLP;
        if (mixer) {
            if (nholes > 0) {
                const int rc = hy_fwd_holes_wait(ex, it, ni, li, err);
                if (rc) return rc;
            }
            if (n > 0) sublayer_input(ex, n, post ? NULL : L->in_norm1);
            const hy_fwd_mixer_fn mix = lin      ? ops->linear[c->lin_kind]
                                        : c->mla ? ops->mla
                                                 : ops->attention;
            mix(ex, st, li, it, ni, n, nblk, nholes);
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
            ops->moe(ex, L, n);
        else
            ops->mlp(ex, &L->mlp, n, H, ex->xn, ex->gu, ex->h, ex->y);
        sublayer_output(ex, n, post ? L->post_norm1 : NULL, c->mlp_alpha, c->mlp_beta);
    }
    st->pos = end;
    if (logits) {
        float *last = ex->xn; /* row 0 of xn is free now */
        prof_begin(ex);
        hy_rmsnorm(1, H, ex->x + (size_t)(n - 1) * H, (size_t)H, m->final_norm1, c->rms_eps, last,
                   (size_t)H);
        prof_end(ex, HY_EXEC_OP_NORM_GATE);
        hy_fwd_linear(ex, 1, H, c->vocab, last, (size_t)H, m->lm_head, logits, (size_t)c->vocab);
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
            hy_fwd_mla_expand(ex, st, li, st->k[li] + (size_t)from * (size_t)c->kv_lora,
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
            /* one in a device's memory is composed there only */
            if (e->dev && (!ex->dev || hy_dev_exec_index(ex->dev) != e->dev_index))
                return hy_err_set(err, HY_EINVAL,
                                  "piece %zu: the entry lies in the memory of %s %d; this "
                                  "executor runs on %s",
                                  i, e->dev_index < 0 ? "the emulated device" : "CUDA device",
                                  e->dev_index, ex->dev ? hy_dev_exec_name(ex->dev) : "the CPU");
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
    /* on a device: the state's mirror up to date, the step's buffers sized;
     * on the CPU the pass writes the state itself */
    if (ex->dev && (rc = hy_dev_begin(ex, st, B, ctx, err))) return rc;
    if (!ex->dev) hy_state_touch(st);
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
        rc = ex->dev ? hy_dev_step(ex, st, ex->items, ni, rows, i == np ? logits : NULL, err)
                     : step(ex, st, ex->items, ni, rows, i == np ? logits : NULL, err);
        if (rc) {
            /* an entry that failed to land: nothing of the pass stays */
            hy_fp_restore(fp_mode);
            hy_state_reset(st);
            return rc;
        }
    }
    assert(st->pos == ctx);
    if (ex->dev && (rc = hy_dev_end(ex, st, err))) { /* what the pass changed, back */
        hy_fp_restore(fp_mode);
        hy_state_reset(st);
        return rc;
    }
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
