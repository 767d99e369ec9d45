/*
 * Binding a checkpoint to the executor's layouts (model_internal.h). Every tensor
 * the architecture needs is looked up by its Hugging Face name, checked for a
 * floating dtype and the exact shape the config implies, widened to fp32 and
 * rearranged:
 *   - Qwen3-Next packs in_proj_qkvz per key-head group as [q k v z] and
 *     in_proj_ba as [b a]; Qwen3.5 has separate in_proj_qkv / z / b / a.
 *     Both become one fused input projection with rows q | k | v | z | b | a.
 *   - conv1d.weight [C][1][K] becomes tap-major [K][C].
 *   - zero-centred RMSNorm weights become 1 + w.
 *   - routed experts come either one tensor per expert (the Hugging Face hub
 *     layout) or fused as experts.gate_up_proj [E][2I][H] / down_proj [E][H][I];
 *     MiniMax's as block_sparse_moe.experts.{e}.w1 / w3 / w2.
 *   - OLMo-Hybrid's separate q/k/v/g/b/a projections and q/k/v convs are
 *     fused like Qwen3.5's; its norms (and MiniMax's) are plain weights.
 *   - MiniMax's lightning layers: qkv_proj and output_gate fused, the decay
 *     of each head from slope_rate (or computed as transformers does).
 *   - Kimi's KDA layers: q/k/v/f_a/g_a/b fused, the q/k/v convs as one; its
 *     MLA layers: the query and latent projections fused; its MoE under
 *     block_sparse_moe. (released) or mlp. (transformers' modules), the
 *     router's selection bias beside it.
 *   - Ling's KDA (full-rank f_proj and g_proj beside q/k/v/b, fused; the
 *     three convs as one) and MLA (q_proj, kv_a_proj_with_mqa and g_proj
 *     fused, the RoPE rows reordered from interleaved pairs to halves) under
 *     attention. as released (the output projection `dense`) or self_attn.
 *     as transformers' modules name them, its MoE under mlp. with the
 *     router's selection bias as `expert_bias` or `e_score_correction_bias`;
 *     the multi-token-prediction layers after the last one are skipped.
 *   - Nemotron-H's blocks under backbone. (released and saved) or model.
 *     (transformers' modules): one norm and one mixer each — Mamba2's
 *     in_proj (z | x B C | dt), conv, A_log, D, dt_bias, gated norm and
 *     out_proj with their optional biases; GQA's q/k/v/o; a relu² MLP; or
 *     the routed experts (one tensor each, or fused 3-D) with the router's
 *     selection bias, the shared expert and the optional latent
 *     projections. The embedding is backbone.embeddings, the final norm
 *     backbone.norm_f.
 * Every tensor of the files must be used: one the configuration leaves unused
 * is an error naming it (config.json and the weights disagree). Two parts of
 * real checkpoints that the text executor does not run are skipped with one
 * log line each: the vision tower of a Qwen3.5 vision-language checkpoint
 * (model.visual.*) and the multi-token-prediction head (mtp.*), which
 * transformers' Qwen3-Next / Qwen3.5 models ignore as well
 * (_keys_to_ignore_on_load_unexpected) and next-token logits never use.
 */
#include "model_internal.h"
#include "hy_kernels.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct loader {
    const char *dir;
    hy_model *m;
    hy_st *st;
    char prefix[64]; /* "model." or "model.language_model." */
    uint8_t *used;   /* [hy_st_count]: the tensor was loaded */
    hy_err *err;
} loader;

/* Registers p (allocated with malloc-compatible allocators) to be freed with
 * the model; returns p, or NULL (after freeing p) when the table cannot grow. */
static void *own(hy_model *m, void *p, size_t bytes)
{
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        size_t nc = m->cap_owned ? m->cap_owned * 2 : 256;
        hy_owned *no = realloc(m->owned, nc * sizeof *no);
        if (!no) {
            free(p);
            return NULL;
        }
        m->owned = no;
        m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = (hy_owned){p, bytes};
    return p;
}

static float *own_alloc(hy_model *m, size_t floats)
{
    return own(m, hy_alloc(floats * sizeof(float)), floats * sizeof(float));
}

/* The position of t in the checkpoint's name-ordered table. */
static size_t tensor_index(const loader *ld, const hy_st_tensor *t)
{
    size_t i = (size_t)(t - hy_st_at(ld->st, 0));
    assert(i < hy_st_count(ld->st) && hy_st_at(ld->st, i) == t);
    return i;
}

/* Finds `name` (already prefixed) and checks its shape against dims[0..nd);
 * marks it used. */
static int find_checked(loader *ld, const char *name, int nd, const int64_t *dims,
                        const hy_st_tensor **out)
{
    const hy_st_tensor *t = hy_st_find(ld->st, name);
    if (!t)
        return hy_err_set(ld->err, HY_ENOTFOUND, "%s: tensor '%s' is missing from the checkpoint",
                          ld->dir, name);
    ld->used[tensor_index(ld, t)] = 1;
    char want[128] = "", got[128] = "";
    int ok = t->ndim == nd;
    for (int i = 0; i < nd; i++) {
        if (ok && t->shape[i] != dims[i]) ok = 0;
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "",
                 (long long)dims[i]);
    }
    for (int i = 0; i < t->ndim; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "",
                 (long long)t->shape[i]);
    if (!ok)
        return hy_err_set(ld->err, HY_EFORMAT, "%s: tensor '%s' has shape [%s], config needs [%s]",
                          t->file, name, got, want);
    if (t->dtype != HY_DT_F32 && t->dtype != HY_DT_BF16 && t->dtype != HY_DT_F16)
        return hy_err_set(ld->err, HY_EUNSUPPORTED,
                          "%s: tensor '%s' has dtype %s; F32, BF16 or F16 expected", t->file, name,
                          hy_dtype_name(t->dtype));
    *out = t;
    return HY_OK;
}

/* Loads name (relative to the prefix unless it starts with '/') into a new
 * owned fp32 buffer, or into dst when given. */
static int load(loader *ld, const char *name, int nd, const int64_t *dims, float *dst, float **out)
{
    char full[sizeof ld->prefix + 256];
    if (name[0] == '/')
        snprintf(full, sizeof full, "%s", name + 1);
    else
        snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    const hy_st_tensor *t = NULL;
    int rc = find_checked(ld, full, nd, dims, &t);
    if (rc) return rc;
    if (!dst && !(dst = own_alloc(ld->m, (size_t)t->numel)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory loading '%s'", full);
    if ((rc = hy_st_read_f32(t, dst, ld->err))) return rc;
    if (out) *out = dst;
    return HY_OK;
}

#define DIMS(...)  ((const int64_t[]){__VA_ARGS__})
#define NDIMS(...) ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define LOAD(ld, name, dst, out, ...)                                                              \
    load(ld, name, NDIMS(__VA_ARGS__), DIMS(__VA_ARGS__), dst, out)

/* An RMSNorm's multiplier: Qwen's norms are zero-centred (1 + w, added here
 * once), OLMo's plain (w). */
static int load_norm1(loader *ld, const char *name, int64_t d, float **out)
{
    int rc = LOAD(ld, name, NULL, out, d);
    if (rc == HY_OK && ld->m->cfg.norm_offset)
        for (int64_t i = 0; i < d; i++) (*out)[i] += 1.0f;
    return rc;
}

/* Whether the checkpoint holds `name` (relative to the prefix). */
static bool has(const loader *ld, const char *name)
{
    char full[sizeof ld->prefix + 256];
    snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    return hy_st_find(ld->st, full) != NULL;
}

/* has() of a name formatted with one layer index. */
static bool has_fmt(const loader *ld, const char *fmt, int i)
{
    char n[200];
    snprintf(n, sizeof n, fmt, i);
    return has(ld, n);
}

/* The name a tensor has in this checkpoint: the released checkpoints' (and
 * save_pretrained's) `ckpt`, or transformers' module name `module`, which
 * its loader renames the former to and so accepts as well. */
static const char *either(const loader *ld, const char *ckpt, const char *module)
{
    return has(ld, ckpt) || !has(ld, module) ? ckpt : module;
}

static int load_mlp(loader *ld, const char *base, int inter, hy_mlp_w *w)
{
    const int64_t H = ld->m->cfg.hidden;
    char n[200];
    w->inter = inter;
    if (!(w->w_gu = own_alloc(ld->m, 2 * (size_t)inter * H)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    int rc;
    snprintf(n, sizeof n, "%s.gate_proj.weight", base);
    if ((rc = LOAD(ld, n, w->w_gu, NULL, inter, H))) return rc;
    snprintf(n, sizeof n, "%s.up_proj.weight", base);
    if ((rc = LOAD(ld, n, w->w_gu + (size_t)inter * H, NULL, inter, H))) return rc;
    snprintf(n, sizeof n, "%s.down_proj.weight", base);
    return LOAD(ld, n, NULL, &w->w_down, H, inter);
}

/* A relu² MLP (Nemotron-H's; no gate) from and to width D: base.up_proj
 * [inter][D] and base.down_proj [D][inter], with their biases when bias. */
static int load_relu2(loader *ld, const char *base, int inter, int64_t D, bool bias, hy_mlp_w *w)
{
    char n[256]; /* base (at most 200) and a suffix */
    int rc;
    w->inter = inter;
    snprintf(n, sizeof n, "%s.up_proj.weight", base);
    if ((rc = LOAD(ld, n, NULL, &w->w_gu, inter, D))) return rc;
    snprintf(n, sizeof n, "%s.down_proj.weight", base);
    if ((rc = LOAD(ld, n, NULL, &w->w_down, D, inter))) return rc;
    if (!bias) return HY_OK;
    snprintf(n, sizeof n, "%s.up_proj.bias", base);
    if ((rc = LOAD(ld, n, NULL, &w->b_up, inter))) return rc;
    snprintf(n, sizeof n, "%s.down_proj.bias", base);
    return LOAD(ld, n, NULL, &w->b_down, D);
}

/* Routed SwiGLU experts under layers.i.mlp.experts: fused
 * (experts.gate_up_proj [E][2I][H], experts.down_proj [E][H][I]) or one
 * gate/up/down triple each, the Hugging Face hub layout. */
static int load_mlp_experts(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts, I = c->moe_intermediate;
    char n[200], full[256];
    int rc;
    if (!(L->experts =
              own(ld->m, calloc((size_t)E, sizeof *L->experts), (size_t)E * sizeof *L->experts)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(full, sizeof full, "%slayers.%d.mlp.experts.gate_up_proj", ld->prefix, i);
    if (hy_st_find(ld->st, full)) { /* fused layout */
        float *gu, *dn;
        snprintf(n, sizeof n, "layers.%d.mlp.experts.gate_up_proj", i);
        if ((rc = LOAD(ld, n, NULL, &gu, E, 2 * I, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.mlp.experts.down_proj", i);
        if ((rc = LOAD(ld, n, NULL, &dn, E, H, I))) return rc;
        for (int64_t e = 0; e < E; e++) {
            L->experts[e].inter = (int)I;
            L->experts[e].w_gu = gu + (size_t)e * 2 * I * H;
            L->experts[e].w_down = dn + (size_t)e * H * I;
        }
    } else {
        for (int64_t e = 0; e < E; e++) {
            snprintf(n, sizeof n, "layers.%d.mlp.experts.%lld", i, (long long)e);
            if ((rc = load_mlp(ld, n, (int)I, &L->experts[e]))) return rc;
        }
    }
    return HY_OK;
}

/* Qwen's MoE: the router, the experts, the sigmoid-gated shared expert. */
static int load_moe(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts;
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.mlp.gate.weight", i);
    if ((rc = LOAD(ld, n, NULL, &L->router, E, H))) return rc;
    if ((rc = load_mlp_experts(ld, i, L))) return rc;
    if (c->shared_intermediate > 0) {
        snprintf(n, sizeof n, "layers.%d.mlp.shared_expert", i);
        if ((rc = load_mlp(ld, n, c->shared_intermediate, &L->shared))) return rc;
        snprintf(n, sizeof n, "layers.%d.mlp.shared_expert_gate.weight", i);
        if ((rc = LOAD(ld, n, NULL, &L->shared_gate, 1, H))) return rc;
    }
    return HY_OK;
}

/* The depthwise conv's taps [C][1][K], tap-major into [K][C] from channel
 * c0 on. */
static int load_conv(loader *ld, const char *name, int64_t c0, int64_t ch, float *conv_w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t K = c->conv_kernel, C = hy_config_conv_dim(c);
    float *cw;
    int rc = LOAD(ld, name, NULL, &cw, ch, 1, K);
    if (rc) return rc;
    for (int64_t j = 0; j < ch; j++)
        for (int64_t t = 0; t < K; t++) conv_w[t * C + c0 + j] = cw[j * K + t];
    return HY_OK;
}

/* OLMo-Hybrid's Gated DeltaNet: separate q/k/v/g/b/a projections (g is the
 * output gate, z elsewhere) and, as released, one conv per q, k and v, which
 * transformers concatenates into conv1d on loading. */
static int load_olmo_gdn(loader *ld, int i, hy_gdn_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, Hv = c->lin_v_heads, K = c->conv_kernel;
    const int64_t Kd = c->lin_k_heads * c->lin_dk, Vd = Hv * c->lin_dv, C = 2 * Kd + Vd;
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj", "g_proj", "b_proj", "a_proj"};
    const int64_t rows[] = {Kd, Kd, Vd, Vd, Hv, Hv};
    char n[200];
    int rc;
    int64_t r0 = 0;
    for (int p = 0; p < 6; p++) {
        snprintf(n, sizeof n, "layers.%d.linear_attn.%s.weight", i, proj[p]);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)(r0 * H), NULL, rows[p], H))) return rc;
        r0 += rows[p];
    }
    if (!(w->conv_w = own_alloc(ld->m, (size_t)(K * C))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.linear_attn.conv1d.weight", i);
    if (has(ld, n)) {
        if ((rc = load_conv(ld, n, 0, C, w->conv_w))) return rc;
    } else {
        /* transformers concatenates the three along the channels, whatever
         * their sizes (save_pretrained splits conv1d in equal thirds, so a
         * saved q_conv1d need not be q's channels): only the total counts */
        static const char *const conv[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
        int64_t c0 = 0;
        for (int p = 0; p < 3; p++) {
            char full[sizeof ld->prefix + sizeof n];
            snprintf(n, sizeof n, "layers.%d.linear_attn.%s.weight", i, conv[p]);
            snprintf(full, sizeof full, "%s%s", ld->prefix, n);
            const hy_st_tensor *t = hy_st_find(ld->st, full);
            int64_t ch = t && t->ndim == 3 ? t->shape[0] : (p == 2 ? C - c0 : Kd);
            if (ch < 1 || ch > C - c0 - (2 - p))
                return hy_err_set(ld->err, HY_EFORMAT,
                                  "%s: tensor '%s' has %lld channels; q_conv1d, k_conv1d and "
                                  "v_conv1d together must have the conv's %lld",
                                  t->file, full, (long long)ch, (long long)C);
            if ((rc = load_conv(ld, n, c0, ch, w->conv_w))) return rc;
            c0 += ch;
        }
        if (c0 != C)
            return hy_err_set(ld->err, HY_EFORMAT,
                              "%s: layer %d's q_conv1d, k_conv1d and v_conv1d have %lld channels "
                              "together; the conv has %lld",
                              ld->dir, i, (long long)c0, (long long)C);
    }
    return HY_OK;
}

static int load_gdn(loader *ld, int i, hy_gdn_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, Hk = c->lin_k_heads, Hv = c->lin_v_heads, dk = c->lin_dk,
                  dv = c->lin_dv, K = c->conv_kernel, r = Hv / Hk;
    const int64_t Kd = Hk * dk, Vd = Hv * dv, C = 2 * Kd + Vd, P = C + Vd + 2 * Hv;
    char n[200];
    int rc;
    if (!(w->w_in = own_alloc(ld->m, (size_t)(P * H))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    if (c->arch == HY_ARCH_OLMO_HYBRID) {
        if ((rc = load_olmo_gdn(ld, i, w))) return rc;
    } else if (c->arch == HY_ARCH_QWEN3_NEXT) {
        float *qkvz, *ba;
        const int64_t grp = 2 * dk + 2 * r * dv;
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_qkvz.weight", i);
        if ((rc = LOAD(ld, n, NULL, &qkvz, Hk * grp, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_ba.weight", i);
        if ((rc = LOAD(ld, n, NULL, &ba, 2 * Hv, H))) return rc;
        const size_t row = (size_t)H * sizeof(float);
        for (int64_t g = 0; g < Hk; g++) {
            const float *src = qkvz + (size_t)(g * grp) * H;
            memcpy(w->w_in + (size_t)(g * dk) * H, src, (size_t)dk * row);
            memcpy(w->w_in + (size_t)(Kd + g * dk) * H, src + (size_t)dk * H, (size_t)dk * row);
            memcpy(w->w_in + (size_t)(2 * Kd + g * r * dv) * H, src + (size_t)(2 * dk) * H,
                   (size_t)(r * dv) * row);
            memcpy(w->w_in + (size_t)(C + g * r * dv) * H, src + (size_t)(2 * dk + r * dv) * H,
                   (size_t)(r * dv) * row);
            const float *bs = ba + (size_t)(g * 2 * r) * H;
            memcpy(w->w_in + (size_t)(C + Vd + g * r) * H, bs, (size_t)r * row);
            memcpy(w->w_in + (size_t)(C + Vd + Hv + g * r) * H, bs + (size_t)r * H,
                   (size_t)r * row);
        }
    } else {
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_qkv.weight", i);
        if ((rc = LOAD(ld, n, w->w_in, NULL, C, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_z.weight", i);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)C * H, NULL, Vd, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_b.weight", i);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)(C + Vd) * H, NULL, Hv, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.linear_attn.in_proj_a.weight", i);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)(C + Vd + Hv) * H, NULL, Hv, H))) return rc;
    }
    if (c->arch != HY_ARCH_OLMO_HYBRID) {
        if (!(w->conv_w = own_alloc(ld->m, (size_t)(K * C))))
            return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
        snprintf(n, sizeof n, "layers.%d.linear_attn.conv1d.weight", i);
        if ((rc = load_conv(ld, n, 0, C, w->conv_w))) return rc;
    }
    snprintf(n, sizeof n, "layers.%d.linear_attn.A_log", i);
    if ((rc = LOAD(ld, n, NULL, &w->neg_A, Hv))) return rc;
    for (int64_t h = 0; h < Hv; h++) w->neg_A[h] = -expf(w->neg_A[h]);
    snprintf(n, sizeof n, "layers.%d.linear_attn.dt_bias", i);
    if ((rc = LOAD(ld, n, NULL, &w->dt_bias, Hv))) return rc;
    const bool olmo = c->arch == HY_ARCH_OLMO_HYBRID;
    snprintf(n, sizeof n, "layers.%d.linear_attn.%s.weight", i, olmo ? "o_norm" : "norm");
    if ((rc = LOAD(ld, n, NULL, &w->norm_w, dv))) return rc;
    snprintf(n, sizeof n, "layers.%d.linear_attn.%s.weight", i, olmo ? "o_proj" : "out_proj");
    return LOAD(ld, n, NULL, &w->w_out, H, Vd);
}

/* MiniMax's lightning layer: qkv_proj and output_gate fused into one input
 * projection, the output norm, out_proj, and the decay of each head: the
 * checkpoint's slope_rate buffer [heads][1][1] when it holds one (what
 * transformers loads and decodes with), else MiniMaxLightningAttention's
 * get_slope_rate in fp32: base^(h+1)·(1 − l/(L − 1 + 1e-5) + 1e-5), base =
 * 2^(−8/heads). Its other buffers (query_decay, key_decay, diagonal_decay)
 * are tables of the same decays for the block prefill: check_all_used skips
 * them. */
static int load_lightning(loader *ld, int i, hy_light_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, nh = c->lin_v_heads, d = nh * c->lin_dv;
    char n[200];
    int rc;
    if (!(w->w_in = own_alloc(ld->m, (size_t)(4 * d * H))) ||
        !(w->g0 = own_alloc(ld->m, (size_t)nh)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.self_attn.qkv_proj.weight", i);
    if ((rc = LOAD(ld, n, w->w_in, NULL, 3 * d, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.output_gate.weight", i);
    if ((rc = LOAD(ld, n, w->w_in + (size_t)(3 * d * H), NULL, d, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.norm.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->norm_w, d))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.out_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->w_out, H, d))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.slope_rate", i);
    if (has(ld, n)) {
        if ((rc = LOAD(ld, n, w->g0, NULL, nh, 1, 1))) return rc;
    } else {
        const float base = (float)(1.0 / pow(2.0, 8.0 / (double)nh));
        const float f = (float)(1.0 - i / (c->n_layers - 1 + 1e-5) + 1e-5);
        for (int64_t h = 0; h < nh; h++) w->g0[h] = powf(base, (float)(h + 1)) * f;
    }
    for (int64_t h = 0; h < nh; h++) w->g0[h] = -w->g0[h];
    return HY_OK;
}

/* A KDA layer's A_log, [H] as released or [1][1][H][1] as some keep it
 * (transformers' Kimi module; vLLM), into −exp(A_log) [H]. */
static int load_kda_neg_a(loader *ld, const char *name, int64_t H, float **out)
{
    char full[sizeof ld->prefix + 256];
    snprintf(full, sizeof full, "%s%s", ld->prefix, name);
    const hy_st_tensor *a = hy_st_find(ld->st, full);
    int rc =
        a && a->ndim == 4 ? LOAD(ld, name, NULL, out, 1, 1, H, 1) : LOAD(ld, name, NULL, out, H);
    if (rc) return rc;
    for (int64_t h = 0; h < H; h++) (*out)[h] = -expf((*out)[h]);
    return HY_OK;
}

/* Kimi's KDA layer: q/k/v/f_a/g_a/b projections fused into one, the gate
 * bottlenecks' second halves, the q/k/v convs (one conv1d, or the released
 * q_conv1d | k_conv1d | v_conv1d), A_log ([H] or [1][1][H][1]), dt_bias per
 * channel, the shared output norm and o_proj. */
static int load_kda(loader *ld, int i, hy_kda_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t Hd = c->hidden, H = c->lin_v_heads, d = c->lin_dk, Q = H * d, K = c->conv_kernel;
    const int64_t P = 3 * Q + 2 * d + H;
    static const char *const proj[] = {"q_proj",   "k_proj",   "v_proj",
                                       "f_a_proj", "g_a_proj", "b_proj"};
    const int64_t rows[] = {Q, Q, Q, d, d, H};
    char n[200];
    int rc;
    if (!(w->w_in = own_alloc(ld->m, (size_t)(P * Hd))) ||
        !(w->conv_w = own_alloc(ld->m, (size_t)(K * 3 * Q))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    int64_t r0 = 0;
    for (int p = 0; p < 6; p++) {
        /* transformers' module names put the gate's halves under forget_gate. */
        snprintf(n, sizeof n, "layers.%d.self_attn.%s%s.weight", i,
                 p == 3 && !has_fmt(ld, "layers.%d.self_attn.f_a_proj.weight", i) ? "forget_gate."
                                                                                  : "",
                 proj[p]);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)(r0 * Hd), NULL, rows[p], Hd))) return rc;
        r0 += rows[p];
    }
    const char *fg = has_fmt(ld, "layers.%d.self_attn.f_b_proj.weight", i) ? "" : "forget_gate.";
    snprintf(n, sizeof n, "layers.%d.self_attn.%sf_b_proj.weight", i, fg);
    if ((rc = LOAD(ld, n, NULL, &w->w_fb, Q, d))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.g_b_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->w_gb, Q, d))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.conv1d.weight", i);
    if (has(ld, n)) {
        if ((rc = load_conv(ld, n, 0, 3 * Q, w->conv_w))) return rc;
    } else {
        static const char *const conv[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
        for (int p = 0; p < 3; p++) {
            snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, conv[p]);
            if ((rc = load_conv(ld, n, p * Q, Q, w->conv_w))) return rc;
        }
    }
    fg = has_fmt(ld, "layers.%d.self_attn.A_log", i) ? "" : "forget_gate.";
    snprintf(n, sizeof n, "layers.%d.self_attn.%sA_log", i, fg);
    if ((rc = load_kda_neg_a(ld, n, H, &w->neg_A))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.%sdt_bias", i, fg);
    if ((rc = LOAD(ld, n, NULL, &w->dt_bias, Q))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.o_norm.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->norm_w, d))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.o_proj.weight", i);
    return LOAD(ld, n, NULL, &w->w_out, Hd, Q);
}

/* Nemotron-H's Mamba2 mixer: in_proj [I + C + nh][hidden] (rows z | x B C
 * | dt, kept as they are), the conv over x B C, A_log, dt_bias, D, the
 * gated norm's weight [I], out_proj; in_proj/out_proj biases with use_bias,
 * the conv's with use_conv_bias. */
static int load_mamba(loader *ld, int i, hy_mamba_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, nh = c->lin_v_heads, I = nh * c->lin_dv, C = hy_config_conv_dim(c),
                  K = c->conv_kernel, P = I + C + nh;
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.mixer.in_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->w_in, P, H))) return rc;
    if (!(w->conv_w = own_alloc(ld->m, (size_t)(K * C))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.mixer.conv1d.weight", i);
    if ((rc = load_conv(ld, n, 0, C, w->conv_w))) return rc;
    if (c->lin_conv_bias) {
        snprintf(n, sizeof n, "layers.%d.mixer.conv1d.bias", i);
        if ((rc = LOAD(ld, n, NULL, &w->conv_b, C))) return rc;
    }
    snprintf(n, sizeof n, "layers.%d.mixer.A_log", i);
    if ((rc = LOAD(ld, n, NULL, &w->neg_A, nh))) return rc;
    for (int64_t h = 0; h < nh; h++) w->neg_A[h] = -expf(w->neg_A[h]);
    snprintf(n, sizeof n, "layers.%d.mixer.dt_bias", i);
    if ((rc = LOAD(ld, n, NULL, &w->dt_bias, nh))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.D", i);
    if ((rc = LOAD(ld, n, NULL, &w->D, nh))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.norm.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->norm_w, I))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.out_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->w_out, H, I))) return rc;
    if (!c->lin_proj_bias) return HY_OK;
    snprintf(n, sizeof n, "layers.%d.mixer.in_proj.bias", i);
    if ((rc = LOAD(ld, n, NULL, &w->b_in, P))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.out_proj.bias", i);
    return LOAD(ld, n, NULL, &w->b_out, H);
}

/* Nemotron-H's MoE block: the router [E][hidden] and its selection bias,
 * the relu² experts — one tensor pair each as released
 * (experts.{e}.up_proj.weight [Im][D], down_proj.weight [D][Im]) or fused
 * (experts.up_proj [E][Im][D], down_proj [E][D][Im]), D the latent width
 * when there is one — the shared expert, and fc1/fc2_latent_proj. */
static int load_nemotron_moe(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts, Im = c->moe_intermediate;
    const int64_t D = c->moe_latent ? c->moe_latent : H;
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.mixer.gate.weight", i);
    if ((rc = LOAD(ld, n, NULL, &L->router, E, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.gate.e_score_correction_bias", i);
    if ((rc = LOAD(ld, n, NULL, &L->router_bias, E))) return rc;
    if (!(L->experts =
              own(ld->m, calloc((size_t)E, sizeof *L->experts), (size_t)E * sizeof *L->experts)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.mixer.experts.up_proj", i);
    if (has(ld, n)) {
        float *up, *dn;
        if ((rc = LOAD(ld, n, NULL, &up, E, Im, D))) return rc;
        snprintf(n, sizeof n, "layers.%d.mixer.experts.down_proj", i);
        if ((rc = LOAD(ld, n, NULL, &dn, E, D, Im))) return rc;
        for (int64_t e = 0; e < E; e++)
            L->experts[e] = (hy_mlp_w){.inter = (int)Im,
                                       .w_gu = up + (size_t)(e * Im * D),
                                       .w_down = dn + (size_t)(e * D * Im)};
    } else {
        for (int64_t e = 0; e < E; e++) {
            snprintf(n, sizeof n, "layers.%d.mixer.experts.%lld", i, (long long)e);
            if ((rc = load_relu2(ld, n, (int)Im, D, false, &L->experts[e]))) return rc;
        }
    }
    snprintf(n, sizeof n, "layers.%d.mixer.shared_experts", i);
    if ((rc = load_relu2(ld, n, c->shared_intermediate, H, c->mlp_bias, &L->shared))) return rc;
    if (!c->moe_latent) return HY_OK;
    hy_mlp_w *lt = &L->latent;
    lt->inter = (int)D;
    snprintf(n, sizeof n, "layers.%d.mixer.fc1_latent_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &lt->w_gu, D, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.fc2_latent_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &lt->w_down, H, D))) return rc;
    if (!c->mlp_bias) return HY_OK;
    snprintf(n, sizeof n, "layers.%d.mixer.fc1_latent_proj.bias", i);
    if ((rc = LOAD(ld, n, NULL, &lt->b_up, D))) return rc;
    snprintf(n, sizeof n, "layers.%d.mixer.fc2_latent_proj.bias", i);
    return LOAD(ld, n, NULL, &lt->b_down, H);
}

/* A Ling layer's tensor: `attention.` as released, `self_attn.` as
 * transformers' modules name it; `rel` may name alternatives a|b|c for the
 * part after the prefix (the first present wins, the first when none is). */
static const char *ling_name(loader *ld, int i, const char *rel, char *out, size_t cap)
{
    static const char *const where[] = {"attention", "self_attn"};
    char alt[96];
    snprintf(alt, sizeof alt, "%s", rel);
    char *save = NULL;
    const char *first = NULL;
    for (char *r = strtok_r(alt, "|", &save); r; r = strtok_r(NULL, "|", &save))
        for (int w = 0; w < 2; w++) {
            snprintf(out, cap, "layers.%d.%s.%s", i, where[w], r);
            if (has(ld, out)) return out;
            if (!first) first = r;
        }
    snprintf(out, cap, "layers.%d.attention.%s", i, first);
    return out;
}

/* rows [r0, r0 + d) of a [rows][cols] matrix, d even, from interleaved pairs
 * (x0, x1), (x2, x3), ... to halves x0 x2 ... | x1 x3 ... */
static void deinterleave_rows(float *w, int64_t r0, int64_t d, int64_t cols)
{
    float *tmp = malloc((size_t)(d * cols) * sizeof *tmp);
    if (!tmp) return; /* the caller checked d; a failed malloc leaves the rows as they were */
    for (int64_t j = 0; j < d; j++)
        memcpy(tmp + (size_t)(((j % 2) * (d / 2) + j / 2) * cols), w + (size_t)((r0 + j) * cols),
               (size_t)cols * sizeof *tmp);
    memcpy(w + (size_t)(r0 * cols), tmp, (size_t)(d * cols) * sizeof *tmp);
    free(tmp);
}

/* Ling's KDA layer: q, k, v, f_proj (released at the top, as transformers'
 * forget_gate.f_proj), g_proj and b_proj fused into one projection; the q/k/v
 * convs (released separately, conv1d as transformers concatenates them);
 * A_log ([H], or [1][1][H][1] as vLLM keeps it), dt_bias [Q], o_norm and the
 * output projection (`dense` as released, o_proj elsewhere). */
static int load_ling_kda(loader *ld, int i, hy_kda_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t Hd = c->hidden, H = c->lin_v_heads, d = c->lin_dk, Q = H * d, K = c->conv_kernel;
    static const char *const proj[] = {"q_proj.weight", "k_proj.weight",
                                       "v_proj.weight", "f_proj.weight|forget_gate.f_proj.weight",
                                       "g_proj.weight", "b_proj.weight"};
    const int64_t rows[] = {Q, Q, Q, Q, Q, H};
    char n[200];
    int rc;
    if (!(w->w_in = own_alloc(ld->m, (size_t)((5 * Q + H) * Hd))) ||
        !(w->conv_w = own_alloc(ld->m, (size_t)(K * 3 * Q))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    int64_t r0 = 0;
    for (int p = 0; p < 6; p++) {
        ling_name(ld, i, proj[p], n, sizeof n);
        if ((rc = LOAD(ld, n, w->w_in + (size_t)(r0 * Hd), NULL, rows[p], Hd))) return rc;
        r0 += rows[p];
    }
    ling_name(ld, i, "conv1d.weight|q_conv1d.weight", n, sizeof n);
    if (strstr(n, ".conv1d.")) {
        if ((rc = load_conv(ld, n, 0, 3 * Q, w->conv_w))) return rc;
    } else {
        static const char *const conv[] = {"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight"};
        for (int p = 0; p < 3; p++) {
            ling_name(ld, i, conv[p], n, sizeof n);
            if ((rc = load_conv(ld, n, p * Q, Q, w->conv_w))) return rc;
        }
    }
    ling_name(ld, i, "A_log|forget_gate.A_log", n, sizeof n);
    if ((rc = load_kda_neg_a(ld, n, H, &w->neg_A))) return rc;
    ling_name(ld, i, "dt_bias|forget_gate.dt_bias", n, sizeof n);
    if ((rc = LOAD(ld, n, NULL, &w->dt_bias, Q))) return rc;
    ling_name(ld, i, "o_norm.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, NULL, &w->norm_w, d))) return rc;
    ling_name(ld, i, "dense.weight|o_proj.weight", n, sizeof n);
    return LOAD(ld, n, NULL, &w->w_out, Hd, Q);
}

/* Ling's MLA layer: q_proj (no query bottleneck), kv_a_proj_with_mqa and
 * g_proj (a gate per head) fused, their RoPE rows reordered to halves
 * (hy_mla_w.w_a); kv_a_layernorm, kv_b_proj, the output projection (`dense`
 * as released); with attention_bias, the biases of kv_a_proj_with_mqa and
 * of the output projection. */
static int load_ling_mla(loader *ld, int i, hy_mla_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t Hd = c->hidden, nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head,
                  R = c->kv_lora, Qa = nh * (dn + dr);
    char n[200];
    int rc;
    if (!(w->w_a = own_alloc(ld->m, (size_t)((Qa + R + dr + nh) * Hd))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    ling_name(ld, i, "q_proj.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, w->w_a, NULL, Qa, Hd))) return rc;
    ling_name(ld, i, "kv_a_proj_with_mqa.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, w->w_a + (size_t)(Qa * Hd), NULL, R + dr, Hd))) return rc;
    ling_name(ld, i, "g_proj.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, w->w_a + (size_t)((Qa + R + dr) * Hd), NULL, nh, Hd))) return rc;
    ling_name(ld, i, "kv_a_layernorm.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, NULL, &w->kv_norm, R))) return rc;
    ling_name(ld, i, "kv_b_proj.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, NULL, &w->w_kvb, nh * (dn + dv), R))) return rc;
    ling_name(ld, i, "dense.weight|o_proj.weight", n, sizeof n);
    if ((rc = LOAD(ld, n, NULL, &w->w_o, Hd, nh * dv))) return rc;
    if (c->mla_bias) {
        ling_name(ld, i, "kv_a_proj_with_mqa.bias", n, sizeof n);
        if ((rc = LOAD(ld, n, NULL, &w->b_kva, R + dr))) return rc;
        ling_name(ld, i, "dense.bias|o_proj.bias", n, sizeof n);
        if ((rc = LOAD(ld, n, NULL, &w->b_o, Hd))) return rc;
    }
    if (c->rotary_dim == 0) return HY_OK;
    for (int64_t h = 0; h < nh; h++) deinterleave_rows(w->w_a, h * (dn + dr) + dn, dr, Hd);
    deinterleave_rows(w->w_a, Qa + R, dr, Hd);
    if (w->b_kva) deinterleave_rows(w->b_kva, R, dr, 1);
    return HY_OK;
}

/* An MLA layer: q_proj (or q_a_proj, q_a_layernorm, q_b_proj) and
 * kv_a_proj_with_mqa fused into one input projection, the latent's norm,
 * kv_b_proj and o_proj. attention_bias is refused by the config. */
static int load_mla(loader *ld, int i, hy_mla_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t Hd = c->hidden, nh = c->n_heads, dn = c->qk_nope, dr = c->qk_rope, dv = c->v_head,
                  R = c->kv_lora, ql = c->q_lora;
    const int64_t Qa = ql ? ql : nh * (dn + dr);
    char n[200];
    int rc;
    if (!(w->w_a = own_alloc(ld->m, (size_t)((Qa + R + dr) * Hd))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.self_attn.%s.weight", i, ql ? "q_a_proj" : "q_proj");
    if ((rc = LOAD(ld, n, w->w_a, NULL, Qa, Hd))) return rc;
    if (ql) {
        snprintf(n, sizeof n, "layers.%d.self_attn.q_a_layernorm.weight", i);
        if ((rc = LOAD(ld, n, NULL, &w->q_norm, ql))) return rc;
        snprintf(n, sizeof n, "layers.%d.self_attn.q_b_proj.weight", i);
        if ((rc = LOAD(ld, n, NULL, &w->w_qb, nh * (dn + dr), ql))) return rc;
    }
    snprintf(n, sizeof n, "layers.%d.self_attn.kv_a_proj_with_mqa.weight", i);
    if ((rc = LOAD(ld, n, w->w_a + (size_t)(Qa * Hd), NULL, R + dr, Hd))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.kv_a_layernorm.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->kv_norm, R))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.kv_b_proj.weight", i);
    if ((rc = LOAD(ld, n, NULL, &w->w_kvb, nh * (dn + dv), R))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.o_proj.weight", i);
    return LOAD(ld, n, NULL, &w->w_o, Hd, nh * dv);
}

/* Routed experts under base (block_sparse_moe or mlp): fused
 * experts.gate_up_proj / down_proj, or per expert w1 (gate), w3 (up), w2
 * (down) as released. */
static int load_experts(loader *ld, int i, const char *base, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts, I = c->moe_intermediate;
    char n[200];
    int rc;
    if (!(L->experts =
              own(ld->m, calloc((size_t)E, sizeof *L->experts), (size_t)E * sizeof *L->experts)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.%s.experts.gate_up_proj", i, base);
    if (has(ld, n)) {
        float *gu, *dn;
        if ((rc = LOAD(ld, n, NULL, &gu, E, 2 * I, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.%s.experts.down_proj", i, base);
        if ((rc = LOAD(ld, n, NULL, &dn, E, H, I))) return rc;
        for (int64_t e = 0; e < E; e++) {
            L->experts[e].inter = (int)I;
            L->experts[e].w_gu = gu + (size_t)e * 2 * I * H;
            L->experts[e].w_down = dn + (size_t)e * H * I;
        }
        return HY_OK;
    }
    for (int64_t e = 0; e < E; e++) {
        hy_mlp_w *x = &L->experts[e];
        x->inter = (int)I;
        if (!(x->w_gu = own_alloc(ld->m, 2 * (size_t)I * H)))
            return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
        snprintf(n, sizeof n, "layers.%d.%s.experts.%lld.w1.weight", i, base, (long long)e);
        if ((rc = LOAD(ld, n, x->w_gu, NULL, I, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.%s.experts.%lld.w3.weight", i, base, (long long)e);
        if ((rc = LOAD(ld, n, x->w_gu + (size_t)(I * H), NULL, I, H))) return rc;
        snprintf(n, sizeof n, "layers.%d.%s.experts.%lld.w2.weight", i, base, (long long)e);
        if ((rc = LOAD(ld, n, NULL, &x->w_down, H, I))) return rc;
    }
    return HY_OK;
}

/* Ling's MoE: the router and its selection bias (`expert_bias` as
 * released, `e_score_correction_bias` as transformers' module names it), the
 * experts (one gate/up/down triple each as released, or fused), the shared
 * experts, all under mlp. */
static int load_ling_moe(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts;
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.mlp.gate.weight", i);
    if ((rc = LOAD(ld, n, NULL, &L->router, E, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.mlp.gate.%s", i,
             has_fmt(ld, "layers.%d.mlp.gate.expert_bias", i) ? "expert_bias"
                                                              : "e_score_correction_bias");
    if ((rc = LOAD(ld, n, NULL, &L->router_bias, E))) return rc;
    if ((rc = load_mlp_experts(ld, i, L))) return rc;
    snprintf(n, sizeof n, "layers.%d.mlp.shared_experts", i);
    return load_mlp(ld, n, c->shared_intermediate, &L->shared);
}

/* Kimi's MoE (DeepSeek's): the router with its selection bias, the experts
 * and the ungated shared experts, under block_sparse_moe. as released or
 * mlp. as transformers names its modules. */
static int load_kimi_moe(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, E = c->n_experts;
    const char *base =
        has_fmt(ld, "layers.%d.block_sparse_moe.gate.weight", i) ? "block_sparse_moe" : "mlp";
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.%s.gate.weight", i, base);
    if ((rc = LOAD(ld, n, NULL, &L->router, E, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.%s.gate.e_score_correction_bias", i, base);
    if ((rc = LOAD(ld, n, NULL, &L->router_bias, E))) return rc;
    if ((rc = load_experts(ld, i, base, L))) return rc;
    if (c->shared_intermediate == 0) return HY_OK;
    snprintf(n, sizeof n, "layers.%d.%s.shared_experts", i, base);
    return load_mlp(ld, n, c->shared_intermediate, &L->shared);
}

/* MiniMax's experts as its released checkpoints (and save_pretrained) keep
 * them: block_sparse_moe.gate and experts.{e}.w1 (gate), w3 (up), w2
 * (down); the fused mlp.* form of transformers' modules is load_moe's. */
static int load_minimax_moe(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    char n[200];
    int rc;
    snprintf(n, sizeof n, "layers.%d.block_sparse_moe.gate.weight", i);
    if (!has(ld, n)) return load_moe(ld, i, L);
    if ((rc = LOAD(ld, n, NULL, &L->router, c->n_experts, c->hidden))) return rc;
    return load_experts(ld, i, "block_sparse_moe", L);
}

static int load_attn(loader *ld, int i, hy_attn_w *w)
{
    const hy_model_config *c = &ld->m->cfg;
    const int64_t H = c->hidden, hd = c->head_dim, KV = c->n_kv_heads * hd;
    const int64_t Q =
        (c->attn_gate ? 2 : 1) * c->n_heads * hd; /* [query|gate] per head, or query */
    const int64_t qn = c->qk_norm_flat ? c->n_heads * hd : hd, kn = c->qk_norm_flat ? KV : hd;
    const char *sa = hy_family_of(c->arch)->attn_module;
    char n[200];
    int rc;
    if (!(w->w_qkv = own_alloc(ld->m, (size_t)((Q + 2 * KV) * H))))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    snprintf(n, sizeof n, "layers.%d.%s.q_proj.weight", i, sa);
    if ((rc = LOAD(ld, n, w->w_qkv, NULL, Q, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.%s.k_proj.weight", i, sa);
    if ((rc = LOAD(ld, n, w->w_qkv + (size_t)(Q * H), NULL, KV, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.%s.v_proj.weight", i, sa);
    if ((rc = LOAD(ld, n, w->w_qkv + (size_t)((Q + KV) * H), NULL, KV, H))) return rc;
    snprintf(n, sizeof n, "layers.%d.%s.o_proj.weight", i, sa);
    if ((rc = LOAD(ld, n, NULL, &w->w_o, H, c->n_heads * hd))) return rc;
    if (!c->qk_norm) return HY_OK;
    snprintf(n, sizeof n, "layers.%d.self_attn.q_norm.weight", i);
    if ((rc = load_norm1(ld, n, qn, &w->q_norm1))) return rc;
    snprintf(n, sizeof n, "layers.%d.self_attn.k_norm.weight", i);
    return load_norm1(ld, n, kn, &w->k_norm1);
}

/* --- the families ---------------------------------------------------------- */

/* Each layer kind's loader, one signature for all (the table below). */
static int mix_gdn(loader *ld, int i, hy_layer_w *L)
{
    return load_gdn(ld, i, &L->gdn);
}
static int mix_lightning(loader *ld, int i, hy_layer_w *L)
{
    return load_lightning(ld, i, &L->light);
}
static int mix_kda(loader *ld, int i, hy_layer_w *L)
{
    return load_kda(ld, i, &L->kda);
}
static int mix_ling_kda(loader *ld, int i, hy_layer_w *L)
{
    return load_ling_kda(ld, i, &L->kda);
}
static int mix_mamba(loader *ld, int i, hy_layer_w *L)
{
    return load_mamba(ld, i, &L->mamba);
}
static int mix_attn(loader *ld, int i, hy_layer_w *L)
{
    return load_attn(ld, i, &L->attn);
}
static int mix_mla(loader *ld, int i, hy_layer_w *L)
{
    return load_mla(ld, i, &L->mla);
}
static int mix_ling_mla(loader *ld, int i, hy_layer_w *L)
{
    return load_ling_mla(ld, i, &L->mla);
}
/* A dense SwiGLU MLP under layers.i.mlp. */
static int mlp_swiglu(loader *ld, int i, hy_layer_w *L)
{
    char n[96];
    snprintf(n, sizeof n, "layers.%d.mlp", i);
    return load_mlp(ld, n, ld->m->cfg.intermediate, &L->mlp);
}
/* Kimi's dense layers: mlp. as released, block_sparse_moe. as saved. */
static int mlp_kimi(loader *ld, int i, hy_layer_w *L)
{
    char n[96];
    snprintf(n, sizeof n, "layers.%d.%s", i,
             has_fmt(ld, "layers.%d.block_sparse_moe.gate_proj.weight", i) ? "block_sparse_moe"
                                                                           : "mlp");
    return load_mlp(ld, n, ld->m->cfg.intermediate, &L->mlp);
}
/* Nemotron-H's MLP blocks: relu² under layers.i.mixer. */
static int mlp_relu2(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    char n[96];
    snprintf(n, sizeof n, "layers.%d.mixer", i);
    return load_relu2(ld, n, c->intermediate, c->hidden, c->mlp_bias, &L->mlp);
}

/* One row per architecture: the names its checkpoints give the parts
 * around the layers, and the loader of each layer kind (the per-layer
 * tensor names are the loaders'). Adding a family is a row here, its
 * config keys (config.c) and its layers' loaders above. */
struct hy_family_loaders {
    int (*linear)(loader *, int, hy_layer_w *);
    int (*attention)(loader *, int, hy_layer_w *);
    int (*mlp)(loader *, int, hy_layer_w *);
    int (*moe)(loader *, int, hy_layer_w *);
};
#define LOADERS(lin, attn, mlp, moe) (&(const struct hy_family_loaders){lin, attn, mlp, moe})
// clang-format off
static const hy_family k_families[HY_ARCH_COUNT] = {
    [HY_ARCH_QWEN3_NEXT] = {"Qwen3-Next", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, true,
                            LOADERS(mix_gdn, mix_attn, mlp_swiglu, load_moe)},
    [HY_ARCH_QWEN3_5] = {"Qwen3.5", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, true,
                         LOADERS(mix_gdn, mix_attn, mlp_swiglu, load_moe)},
    [HY_ARCH_QWEN3_5_MOE] = {"Qwen3.5-MoE", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, true,
                             LOADERS(mix_gdn, mix_attn, mlp_swiglu, load_moe)},
    [HY_ARCH_OLMO_HYBRID] = {"OLMo-Hybrid", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, false,
                             LOADERS(mix_gdn, mix_attn, mlp_swiglu, load_moe)},
    [HY_ARCH_MINIMAX] = {"MiniMax", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, false,
                         LOADERS(mix_lightning, mix_attn, mlp_swiglu, load_minimax_moe)},
    [HY_ARCH_KIMI_LINEAR] = {"Kimi-Linear", "model.", "embed_tokens.weight", NULL, "norm.weight", "self_attn", false, false,
                             LOADERS(mix_kda, mix_mla, mlp_kimi, load_kimi_moe)},
    /* released and saved under backbone., transformers' modules under model. */
    [HY_ARCH_NEMOTRON_H] = {"Nemotron-H", "backbone.", "embeddings.weight", NULL, "norm_f.weight", "mixer", true, false,
                            LOADERS(mix_mamba, mix_attn, mlp_relu2, load_nemotron_moe)},
    /* the embedding as Ling releases it, or as transformers' module names it */
    [HY_ARCH_BAILING_HYBRID] = {"Ling", "model.", "embed_tokens.weight", "word_embeddings.weight", "norm.weight", "self_attn", false, false,
                                LOADERS(mix_ling_kda, mix_ling_mla, mlp_swiglu, load_ling_moe)},
};
// clang-format on
#undef LOADERS

const hy_family *hy_family_of(hy_arch a)
{
    assert(a >= 0 && a < HY_ARCH_COUNT && k_families[a].name);
    return &k_families[a];
}

/* The embedding and the LM head, tied as transformers' tie_weights() ties
 * them when loading: with tie_word_embeddings the head is the embedding, but
 * a head present in the file is used (equal values tie to the same thing;
 * different ones are not tied, with a warning), and a missing embedding is
 * taken from the head. Untied, lm_head.weight is required. */
static int load_embeddings(loader *ld)
{
    hy_model *m = ld->m;
    const int64_t H = m->cfg.hidden, V = m->cfg.vocab;
    char emb[128];
    snprintf(emb, sizeof emb, "%sembed_tokens.weight", ld->prefix);
    const bool has_head = hy_st_find(ld->st, "lm_head.weight") != NULL;
    int rc;
    if (!m->cfg.tie_embeddings) {
        const hy_family *f = hy_family_of(m->cfg.arch);
        const char *e = f->embed_released && !has(ld, f->embed) ? f->embed_released : f->embed;
        if ((rc = LOAD(ld, e, NULL, &m->embed, V, H))) return rc;
        return LOAD(ld, "/lm_head.weight", NULL, &m->lm_head, V, H);
    }
    if (!hy_st_find(ld->st, emb) && has_head) {
        if ((rc = LOAD(ld, "/lm_head.weight", NULL, &m->embed, V, H))) return rc;
        m->lm_head = m->embed;
        return HY_OK;
    }
    if ((rc = LOAD(ld, "embed_tokens.weight", NULL, &m->embed, V, H))) return rc;
    m->lm_head = m->embed;
    if (!has_head) return HY_OK;
    if ((rc = LOAD(ld, "/lm_head.weight", NULL, &m->lm_head, V, H))) return rc;
    if (memcmp(m->lm_head, m->embed, (size_t)(V * H) * sizeof(float)) != 0)
        hy_log(HY_LOG_WARN,
               "%s: tie_word_embeddings is true but lm_head.weight differs from %s; using "
               "lm_head.weight untied, as transformers does",
               ld->dir, emb);
    return HY_OK;
}

/* Why a tensor of layer li may be unused, for the error message. */
static const char *unused_reason(const hy_model_config *c, const char *rest, int li)
{
    if (strstr(rest, ".mlp.shared_expert") && c->layer_moe[li] && c->shared_intermediate == 0)
        return "shared_expert_intermediate_size is 0";
    if ((strstr(rest, ".mlp.experts") || strstr(rest, ".mlp.gate.") ||
         strstr(rest, ".mlp.shared_expert")) &&
        !c->layer_moe[li])
        return "the layer has a dense MLP (num_experts, decoder_sparse_step, mlp_only_layers)";
    if (c->layer_moe[li] && strstr(rest, ".mlp.") && !strstr(rest, ".mlp.experts") &&
        !strstr(rest, ".mlp.gate.") && !strstr(rest, ".mlp.shared_expert"))
        return "the layer is routed (MoE); it has no dense MLP";
    if (strstr(rest, ".self_attn.") && c->layer_kind[li] == HY_LAYER_LINEAR)
        return "the layer is a linear-attention layer (layer_types, full_attention_interval)";
    if (strstr(rest, ".linear_attn.") && c->layer_kind[li] == HY_LAYER_ATTENTION)
        return "the layer is a full-attention layer (layer_types, full_attention_interval)";
    if (strstr(rest, ".mixer.") && c->arch == HY_ARCH_NEMOTRON_H)
        return "the block's type (layers_block_type, hybrid_override_pattern) has no such tensor";
    return "no part of the configured model has this name";
}

/* Every tensor not loaded is either part of a model the text executor does
 * not run (skipped, one log line per part) or an error naming it. */
/* Whether name is one of the block-prefill decay tables of a lightning
 * layer (MiniMax's query_decay, key_decay, diagonal_decay buffers). */
static bool is_decay_table(const loader *ld, const char *name)
{
    const hy_model_config *c = &ld->m->cfg;
    const size_t pl = strlen(ld->prefix);
    if (c->lin_kind != HY_LIN_LIGHTNING || strncmp(name, ld->prefix, pl) != 0 ||
        strncmp(name + pl, "layers.", 7) != 0)
        return false;
    char *end = NULL;
    const long li = strtol(name + pl + 7, &end, 10);
    if (end == name + pl + 7 || li < 0 || li >= c->n_layers || c->layer_kind[li] != HY_LAYER_LINEAR)
        return false;
    return strcmp(end, ".self_attn.query_decay") == 0 || strcmp(end, ".self_attn.key_decay") == 0 ||
           strcmp(end, ".self_attn.diagonal_decay") == 0;
}

/* Whether name is a multi-token-prediction tensor: mtp.* (Qwen), or with
 * the config's mtp_layers (Ling) model.mtp.* and the layers after the last
 * (model.layers.n …). */
static bool is_mtp(const loader *ld, const char *name)
{
    const hy_model_config *c = &ld->m->cfg;
    const size_t pl = strlen(ld->prefix);
    if (strncmp(name, "mtp.", 4) == 0) return true;
    if (c->mtp_layers == 0 || strncmp(name, ld->prefix, pl) != 0) return false;
    if (strncmp(name + pl, "mtp.", 4) == 0) return true;
    char *end = NULL;
    if (strncmp(name + pl, "layers.", 7) != 0) return false;
    const long li = strtol(name + pl + 7, &end, 10);
    return end != name + pl + 7 && *end == '.' && li >= c->n_layers &&
           li < c->n_layers + c->mtp_layers;
}

static int check_all_used(loader *ld)
{
    const hy_model_config *c = &ld->m->cfg;
    size_t n = hy_st_count(ld->st), vision = 0, mtp = 0, unused = 0, tables = 0;
    const hy_st_tensor *first = NULL;
    for (size_t i = 0; i < n; i++) {
        const hy_st_tensor *t = hy_st_at(ld->st, i);
        if (ld->used[i]) continue;
        if (strncmp(t->name, "model.visual.", 13) == 0)
            vision++;
        else if (is_decay_table(ld, t->name))
            tables++;
        else if (is_mtp(ld, t->name))
            mtp++;
        else if (!unused++)
            first = t;
    }
    if (first) {
        char more[48] = "";
        if (unused > 1) snprintf(more, sizeof more, " (and %zu more unused)", unused - 1);
        const size_t pl = strlen(ld->prefix);
        char *end = NULL;
        long li = strncmp(first->name, ld->prefix, pl) == 0 &&
                          strncmp(first->name + pl, "layers.", 7) == 0
                      ? strtol(first->name + pl + 7, &end, 10)
                      : -1;
        if (end == first->name + pl + 7) li = -1; /* "layers." without a number */
        if (li >= c->n_layers)
            return hy_err_set(ld->err, HY_EFORMAT,
                              "%s: tensor '%s' belongs to layer %ld but config.json declares "
                              "num_hidden_layers = %d%s",
                              first->file, first->name, li, c->n_layers, more);
        return hy_err_set(ld->err, HY_EFORMAT,
                          "%s: tensor '%s' is in the checkpoint but config.json leaves it unused "
                          "(%s)%s",
                          first->file, first->name,
                          li >= 0 ? unused_reason(c, end, (int)li)
                                  : "no part of the configured model has this name",
                          more);
    }
    if (vision)
        hy_log(HY_LOG_INFO,
               "%s: skipping the vision tower (%zu tensors model.visual.*): the text executor "
               "does not run it",
               ld->dir, vision);
    if (tables)
        hy_log(HY_LOG_INFO,
               "%s: not reading %zu decay tables (self_attn.query_decay, key_decay, "
               "diagonal_decay): lightning attention runs from each head's slope_rate",
               ld->dir, tables);
    if (mtp)
        hy_log(HY_LOG_INFO,
               "%s: skipping the multi-token-prediction head (%zu tensors %s), as transformers "
               "does: next-token logits do not use it",
               ld->dir, mtp,
               c->mtp_layers ? "in the layers after the last and model.mtp.*" : "mtp.*");
    return HY_OK;
}

/* A layer's two RMSNorms. Pre-normalised layers: input_layernorm before the
 * mixer, post_attention_layernorm before the MLP. OLMo-Hybrid's attention
 * layers normalise outputs instead: post_attention_layernorm after the mixer,
 * post_feedforward_layernorm after the MLP. OLMo's released checkpoints (and
 * save_pretrained) name input_layernorm attention_layer_norm and
 * post_attention_layernorm feedforward_layer_norm, in every layer. */
static int load_layer_norms(loader *ld, int i, hy_layer_w *L)
{
    const hy_model_config *c = &ld->m->cfg;
    const bool olmo = c->arch == HY_ARCH_OLMO_HYBRID;
    char a[2][96], b[2][96];
    if (hy_family_of(c->arch)->block_norm) { /* one norm per block, before its mixer or MLP */
        snprintf(a[0], sizeof a[0], "layers.%d.norm.weight", i);
        return load_norm1(ld, a[0], c->hidden, &L->in_norm1);
    }
    if (c->layer_post_norm[i]) {
        snprintf(a[0], sizeof a[0], "layers.%d.feedforward_layer_norm.weight", i);
        snprintf(b[0], sizeof b[0], "layers.%d.post_attention_layernorm.weight", i);
        snprintf(a[1], sizeof a[1], "layers.%d.post_feedforward_layernorm.weight", i);
        snprintf(b[1], sizeof b[1], "layers.%d.post_feedforward_layernorm.weight", i);
    } else {
        snprintf(a[0], sizeof a[0], "layers.%d.attention_layer_norm.weight", i);
        snprintf(b[0], sizeof b[0], "layers.%d.input_layernorm.weight", i);
        snprintf(a[1], sizeof a[1], "layers.%d.feedforward_layer_norm.weight", i);
        snprintf(b[1], sizeof b[1], "layers.%d.post_attention_layernorm.weight", i);
    }
    int rc = load_norm1(ld, olmo ? either(ld, a[0], b[0]) : b[0], c->hidden, &L->in_norm1);
    if (rc) return rc;
    return load_norm1(ld, olmo ? either(ld, a[1], b[1]) : b[1], c->hidden, &L->post_norm1);
}

static int load_all(loader *ld)
{
    hy_model *m = ld->m;
    const hy_model_config *c = &m->cfg;
    const int64_t H = c->hidden;
    /* a vision-language checkpoint keeps the text model under
     * model.language_model.; Nemotron-H's files under backbone. */
    snprintf(ld->prefix, sizeof ld->prefix, "model.");
    for (size_t i = 0; i < hy_st_count(ld->st); i++) {
        const char *nm = hy_st_at(ld->st, i)->name;
        if (strncmp(nm, "model.language_model.", 21) == 0) {
            snprintf(ld->prefix, sizeof ld->prefix, "model.language_model.");
            break;
        }
        const char *alt = hy_family_of(c->arch)->released_prefix;
        if (strcmp(alt, "model.") != 0 && strncmp(nm, alt, strlen(alt)) == 0) {
            snprintf(ld->prefix, sizeof ld->prefix, "%s", alt);
            break;
        }
    }
    if (!(ld->used = calloc(hy_st_count(ld->st) + 1, 1)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    int rc;
    if ((rc = load_embeddings(ld))) return rc;
    const hy_family *f = hy_family_of(c->arch);
    if ((rc = load_norm1(ld, f->final_norm, H, &m->final_norm1))) return rc;
    if (!(m->layers = calloc((size_t)c->n_layers, sizeof *m->layers)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    for (int i = 0; i < c->n_layers; i++) {
        hy_layer_w *L = &m->layers[i];
        L->kind = c->layer_kind[i];
        L->moe = c->layer_moe[i];
        if ((rc = load_layer_norms(ld, i, L))) return rc;
        if (L->kind == HY_LAYER_LINEAR)
            rc = f->load->linear(ld, i, L);
        else if (L->kind == HY_LAYER_ATTENTION)
            rc = f->load->attention(ld, i, L);
        else
            rc = HY_OK; /* HY_LAYER_MLP: no token mixer */
        if (rc) return rc;
        if (c->layer_no_mlp[i])
            rc = HY_OK;
        else
            rc = L->moe ? f->load->moe(ld, i, L) : f->load->mlp(ld, i, L);
        if (rc) return rc;
    }
    if ((rc = check_all_used(ld))) return rc;
    if (c->rotary_dim == 0) return HY_OK; /* no positional encoding */
    if (!(m->rope_inv_freq = own_alloc(m, (size_t)c->rotary_dim / 2)))
        return hy_err_set(ld->err, HY_ENOMEM, "out of memory");
    hy_rope_inv_freq(c->rotary_dim, c->rope_theta, m->rope_inv_freq);
    return HY_OK;
}

/* The model's identity for cache keys: config.json's bytes, each
 * safetensors file's name, size and header, and samples of every tensor's
 * bytes (hy_st_fingerprint). A changed checkpoint never reuses old entries. */
static int fingerprint(hy_model *m, const char *dir, const hy_st *st, bool q8, hy_err *err)
{
    char path[512], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = hy_read_file(path, 16u << 20, &text, &len, err);
    if (rc) return rc;
    hy_sha256_ctx *h;
    if (hy_sha256_begin(&h)) {
        hy_free(text);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    hy_sha256_add(h, text, len);
    rc = hy_st_fingerprint(st, h);
    /* q8 weights compute other states than the checkpoint's own values: a
     * model of its own, whose entries and cluster peers are not the others' */
    if (q8) hy_sha256_add(h, "weights=q8", 10);
    hy_sha256_end(h, m->fingerprint);
    hy_free(text);
    if (rc) return hy_err_set(err, rc, "out of memory computing the model's fingerprint");
    return HY_OK;
}

void hy_model_fingerprint(const hy_model *m, uint8_t fp[32])
{
    memcpy(fp, m->fingerprint, 32);
}

int hy_weights_parse(const char *s, hy_weights *out)
{
    if (strcmp(s, "auto") == 0)
        *out = HY_WEIGHTS_AUTO;
    else if (strcmp(s, "f32") == 0)
        *out = HY_WEIGHTS_F32;
    else if (strcmp(s, "bf16") == 0)
        *out = HY_WEIGHTS_BF16;
    else if (strcmp(s, "q8") == 0)
        *out = HY_WEIGHTS_Q8;
    else
        return HY_EINVAL;
    return HY_OK;
}

/* Whether every tensor the model uses is stored as BF16. */
static bool checkpoint_bf16(const loader *ld)
{
    for (size_t i = 0; i < hy_st_count(ld->st); i++)
        if (ld->used[i] && hy_st_at(ld->st, i)->dtype != HY_DT_BF16) return false;
    return true;
}

int hy_model_open(hy_model **out, const char *dir, hy_err *err)
{
    return hy_model_open_with(out, dir, HY_WEIGHTS_AUTO, err);
}

int hy_model_open_with(hy_model **out, const char *dir, hy_weights w, hy_err *err)
{
    *out = NULL;
    hy_model *m = calloc(1, sizeof *m);
    if (!m) return hy_err_set(err, HY_ENOMEM, "out of memory");
    loader ld = {.dir = dir, .m = m, .err = err};
    int rc = hy_config_load(dir, &m->cfg, err);
    if (rc == HY_OK) rc = hy_st_open_dir(&ld.st, dir, err);
    if (rc == HY_OK) rc = load_all(&ld);
    if (rc == HY_OK) rc = fingerprint(m, dir, ld.st, w == HY_WEIGHTS_Q8, err);
    if (rc == HY_OK && w == HY_WEIGHTS_Q8)
        rc = hy_model_quantize_q8(m, err);
    else if (rc == HY_OK && w != HY_WEIGHTS_F32 && checkpoint_bf16(&ld))
        rc = hy_model_narrow(m, err);
    m->bf16_asked = m->w_bf16 && w == HY_WEIGHTS_BF16;
    m->bf16_math = m->bf16_asked && hy_linear_bf16_rounds_x(1 << 30, true);
    hy_st_close(ld.st); /* every weight now lives in owned buffers */
    free(ld.used);
    if (rc != HY_OK) {
        hy_model_close(m);
        return rc;
    }
    *out = m;
    return HY_OK;
}

void hy_model_close(hy_model *m)
{
    if (!m) return;
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i].p);
    free(m->owned);
    free(m->q8);
    free(m->layers);
    free(m);
}

const hy_model_config *hy_model_cfg(const hy_model *m)
{
    return &m->cfg;
}
