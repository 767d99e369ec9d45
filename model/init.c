/*
 * Generated checkpoints: randomly initialised models of a few presets, written
 * in the real on-disk format (config.json + model.safetensors with the
 * Hugging Face tensor names of Qwen3NextForCausalLM), so that every test,
 * benchmark and the default service run on any machine without a download and
 * exercise the same loading code as a real checkpoint.
 *
 * Initialisation keeps activations in a useful range rather than imitating a
 * trained model: projections N(0, 1/fan_in), zero-centred norm weights
 * N(0, 0.1), conv taps N(0, 1/K). The decays are set like a trained model's
 * rather than like transformers' init (A ∈ [1, 16], dt_bias 1, which forgets
 * within a token or two): A_log = log U(0.05, 1) and dt_bias N(−2.5, 1), so
 * g = −A·softplus(a + dt_bias) spans memories of a few to a few hundred
 * tokens and a segment's state matters to what follows.
 */
#include "model_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct preset {
    const char *name;
    hy_arch arch;
    int vocab, hidden, layers, interval, heads, kv_heads, head_dim;
    int lk_heads, lv_heads, ldk, ldv, inter;
    int experts, top_k, moe_inter, shared_inter;
    int tie;
    /* Kimi: MLA's latent, key (expanded, shared) and value widths; expert groups */
    int kv_lora, qk_nope, qk_rope, v_head, n_group, topk_group;
    /* Nemotron-H: its blocks (M Mamba2, * attention, E MoE, - MLP; `layers`
     * of them); its Mamba2 layers take lk_heads groups of ldk (B, C) and
     * lv_heads heads of ldv channels */
    const char *pattern;
} preset;

/* Layer i attends when (i + 1) % interval == 0. One row a preset, in the
 * fields' order (clang-format would fold them into columns). */
// clang-format off
static const preset k_presets[] = {
    /* tests and the default service: < 1 MB */
    {"tiny", HY_ARCH_QWEN3_NEXT, 259, 64, 4, 4, 4, 2, 16, 2, 4, 16, 16, 128, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, NULL},
    /* MoE with a shared expert on every layer but the first */
    {"tiny-moe", HY_ARCH_QWEN3_NEXT, 259, 64, 4, 4, 4, 2, 16, 2, 4, 16, 16, 128, 8, 2, 32, 64, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* one linear layer, no attention: PIC is exact for it (invariant tests) */
    {"tiny-linear", HY_ARCH_QWEN3_NEXT, 259, 64, 1, 2, 4, 2, 16, 2, 4, 16, 16, 128, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, NULL},
    /* benchmarks: ~33 M parameters, 6 linear + 2 attention layers, real head sizes */
    {"small", HY_ARCH_QWEN3_NEXT, 8192, 512, 8, 4, 8, 2, 128, 4, 8, 128, 128, 1024, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, NULL},
    /* small with MoE (as tiny-moe is tiny's), ~32 M parameters: 8 experts of 64 (2 kept) and a shared one of 512 on layers 1-7; layer 0's dense MLP is as wide as the shared expert, so stock llama.cpp's qwen3next (MoE on every layer) can carry it there exactly (tools/anchor) */
    {"small-moe", HY_ARCH_QWEN3_NEXT, 8192, 512, 8, 4, 8, 2, 128, 4, 8, 128, 128, 512, 8, 2, 64, 512, 1, 0, 0, 0, 0, 0, 0, NULL},
    /* OLMo-Hybrid: Gated DeltaNet with beta up to 2, dk != dv, post-normed GQA */
    {"tiny-olmo", HY_ARCH_OLMO_HYBRID, 259, 64, 4, 4, 4, 2, 16, 2, 4, 16, 32, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* its benchmark size: the released 7B's head shapes (dk 96, dv 192, head_dim 128) */
    {"small-olmo", HY_ARCH_OLMO_HYBRID, 8192, 512, 8, 4, 4, 4, 128, 4, 4, 96, 192, 1024, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* MiniMax: lightning attention (layer 0, as released), GQA, MoE on every layer, the released residual factors; heads and head_dim serve both kinds of layer */
    {"tiny-minimax", HY_ARCH_MINIMAX, 259, 64, 4, 2, 4, 2, 16, 4, 4, 16, 16, 0, 4, 2, 32, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* its benchmark size: MiniMax-M1's head_dim 128, 8 experts of 256 */
    {"small-minimax", HY_ARCH_MINIMAX, 8192, 512, 8, 4, 4, 2, 128, 4, 4, 128, 128, 0, 8, 2, 256, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* Kimi-Linear: KDA, MLA (no RoPE) every fourth layer, layer 0 dense, the rest DeepSeek MoE (2 groups of 2 experts, 1 kept) with a shared expert; heads serve both kinds */
    {"tiny-kimi", HY_ARCH_KIMI_LINEAR, 259, 64, 4, 4, 4, 4, 0, 4, 4, 16, 16, 128, 4, 2, 32, 32, 0, 32, 16, 8, 16, 2, 1, NULL},
    /* its benchmark size: Kimi-Linear-48B's head shapes (KDA d 128; MLA latent 512, key 128 + 64, value 128), 8 experts of 256 in one group */
    {"small-kimi", HY_ARCH_KIMI_LINEAR, 8192, 512, 8, 4, 4, 4, 0, 4, 4, 128, 128, 1024, 8, 2, 256, 256, 0, 512, 128, 64, 128, 1, 1, NULL},
    /* Ling: KDA and MLA (RoPE on its shared key, a gate per head) in groups of 2, layer 0 dense, the rest DeepSeek MoE (2 groups of 2 experts, 1 kept) with a shared expert; heads serve both kinds */
    {"tiny-ling", HY_ARCH_BAILING_HYBRID, 259, 64, 4, 2, 4, 4, 0, 4, 4, 16, 16, 128, 4, 2, 32, 32, 0, 32, 16, 8, 16, 2, 1, NULL},
    /* its benchmark size: Ling-3.0-Flash's head shapes (KDA d 128; MLA latent 512, key 128 + 64, value 128), MLA every fourth layer, 8 experts of 256 in 2 groups (1 kept) with a shared one */
    {"small-ling", HY_ARCH_BAILING_HYBRID, 8192, 512, 8, 4, 4, 4, 0, 4, 4, 128, 128, 1024, 8, 2, 256, 256, 0, 512, 128, 64, 128, 2, 1, NULL},
    /* the GPU benchmarks' real shape: the published configuration of the smallest Qwen3.5
     * (hidden 1024, 24 layers as 6 x (3 GDN + 1 gated attention), 8 query and 2 KV heads of
     * 256, 16 linear heads of 128, FFN 3584, vocabulary 248 320, untied head) in Qwen3-Next's
     * format, which computes the same: 1.0 B parameters with its untied head, 1.9 GB in BF16 (about
     * a minute to write); not for the tests */
    {"qwen35-0.8b-shape", HY_ARCH_QWEN3_NEXT, 248320, 1024, 24, 4, 8, 2, 256, 16, 16, 128, 128, 3584, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, NULL},
    /* Nemotron-H: Mamba2 (4 heads of 16, 2 groups of B and C of 16), NoPE GQA, a relu² MLP block and MoE blocks (2 groups of 2 experts, 1 kept) with a shared expert */
    {"tiny-nemotron", HY_ARCH_NEMOTRON_H, 259, 64, 6, 0, 4, 2, 16, 2, 4, 16, 16, 128, 4, 2, 32, 32, 0, 0, 0, 0, 0, 2, 1, "M-M*ME"},
    /* its benchmark size: Nemotron-3-Nano's head shapes (Mamba2 heads of 64 channels, state 128; attention head_dim 128) and block order, 8 experts of 256 with a shared one of 512 */
    {"small-nemotron", HY_ARCH_NEMOTRON_H, 8192, 512, 14, 0, 4, 2, 128, 2, 8, 128, 64, 1024, 8, 2, 256, 512, 0, 0, 0, 0, 0, 1, 1, "MEMEM*EMEMEM*E"},
};
// clang-format on

const char *const hy_presets[] = {"tiny",           "tiny-moe",  "tiny-linear", "small",
                                  "small-moe",      "tiny-olmo", "small-olmo",  "tiny-minimax",
                                  "small-minimax",  "tiny-kimi", "small-kimi",  "tiny-nemotron",
                                  "small-nemotron", "tiny-ling", "small-ling",  "qwen35-0.8b-shape",
                                  NULL};

typedef struct writer {
    hy_st_wtensor *ts;
    size_t n, cap;
    hy_dtype dtype;
    hy_rng rng;
    int failed;
} writer;

/* Adds a tensor of the given shape filled by `fill` (0: normal(mean, std),
 * 1: log U(mean, std), for A_log). */
static void add(writer *w, const char *name, int nd, const int64_t *shape, int fill, double mean,
                double std)
{
    if (w->failed) return;
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 128;
        hy_st_wtensor *nt = realloc(w->ts, nc * sizeof *nt);
        if (!nt) {
            w->failed = 1;
            return;
        }
        w->ts = nt;
        w->cap = nc;
    }
    size_t numel = 1;
    for (int i = 0; i < nd; i++) numel *= (size_t)shape[i];
    void *data = malloc(numel * hy_dtype_size(w->dtype) + 1);
    char *nm = strdup(name);
    if (!data || !nm) {
        free(data);
        free(nm);
        w->failed = 1;
        return;
    }
    for (size_t i = 0; i < numel; i++) {
        double v = fill == 1 ? log(mean + (std - mean) * hy_rng_uniform(&w->rng))
                             : mean + std * hy_rng_normal(&w->rng);
        if (w->dtype == HY_DT_BF16)
            ((uint16_t *)data)[i] = hy_f32_to_bf16((float)v);
        else
            ((float *)data)[i] = (float)v;
    }
    hy_st_wtensor *t = &w->ts[w->n++];
    memset(t, 0, sizeof *t);
    t->name = nm;
    t->dtype = w->dtype;
    t->ndim = nd;
    memcpy(t->shape, shape, (size_t)nd * sizeof *shape);
    t->data = data;
}

#define ADD(w, name, fill, mean, std, ...)                                                         \
    add(w, name, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),                        \
        (const int64_t[]){__VA_ARGS__}, fill, mean, std)

static void add_mlp(writer *w, const char *base, int64_t H, int64_t I)
{
    char n[160];
    snprintf(n, sizeof n, "%s.gate_proj.weight", base);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)H), I, H);
    snprintf(n, sizeof n, "%s.up_proj.weight", base);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)H), I, H);
    snprintf(n, sizeof n, "%s.down_proj.weight", base);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)I), H, I);
}

/* An OLMo-Hybrid layer under the names its released checkpoints carry: norms
 * attention_layer_norm / feedforward_layer_norm (linear layers) and
 * feedforward_layer_norm / post_feedforward_layernorm (attention layers,
 * which normalise their outputs), one conv per q, k and v. Norm weights are
 * plain (w, not 1 + w): N(1, 0.1). */
static void add_olmo_layer(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    const bool att = (i + 1) % p->interval == 0;
    snprintf(n, sizeof n, "model.layers.%d.%s.weight", i,
             att ? "feedforward_layer_norm" : "attention_layer_norm");
    ADD(w, n, 0, 1.0, 0.1, H);
    snprintf(n, sizeof n, "model.layers.%d.%s.weight", i,
             att ? "post_feedforward_layernorm" : "feedforward_layer_norm");
    ADD(w, n, 0, 1.0, 0.1, H);
    if (att) {
        const int64_t Q = (int64_t)p->heads * p->head_dim, KV = (int64_t)p->kv_heads * p->head_dim;
        static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
        for (int j = 0; j < 3; j++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.weight", i, proj[j]);
            ADD(w, n, 0, 0.0, sH, j ? KV : Q, H);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Q), H, Q);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, Q);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, KV);
    } else {
        const int64_t K = 4, Kd = (int64_t)p->lk_heads * p->ldk, Vd = (int64_t)p->lv_heads * p->ldv;
        static const char *const proj[] = {"q_proj", "k_proj", "v_proj",
                                           "g_proj", "b_proj", "a_proj"};
        const int64_t rows[] = {Kd, Kd, Vd, Vd, p->lv_heads, p->lv_heads};
        for (int j = 0; j < 6; j++) {
            snprintf(n, sizeof n, "model.layers.%d.linear_attn.%s.weight", i, proj[j]);
            ADD(w, n, 0, 0.0, sH, rows[j], H);
        }
        static const char *const conv[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
        for (int j = 0; j < 3; j++) {
            snprintf(n, sizeof n, "model.layers.%d.linear_attn.%s.weight", i, conv[j]);
            ADD(w, n, 0, 0.0, 1.0 / sqrt((double)K), j < 2 ? Kd : Vd, 1, K);
        }
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.dt_bias", i);
        ADD(w, n, 0, -2.5, 1.0, p->lv_heads);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.A_log", i);
        ADD(w, n, 1, 0.05, 1.0, p->lv_heads);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.o_norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, p->ldv);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Vd), H, Vd);
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp", i);
    add_mlp(w, n, H, p->inter);
}

/* A layer's two plain RMSNorm weights (w, not 1 + w): N(1, 0.1). */
static void add_plain_norms(writer *w, int i, int64_t H)
{
    char n[160];
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", i);
    ADD(w, n, 0, 1.0, 0.1, H);
    snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", i);
    ADD(w, n, 0, 1.0, 0.1, H);
}

/* Routed experts as MiniMax's and Kimi's releases keep them:
 * block_sparse_moe.experts.{e}.w1 (gate), w3 (up), w2 (down). */
static void add_w123_experts(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden, I = p->moe_inter;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    for (int e = 0; e < p->experts; e++) {
        snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", i, e);
        ADD(w, n, 0, 0.0, sH, I, H);
        snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", i, e);
        ADD(w, n, 0, 0.0, sH, I, H);
        snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", i, e);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)I), H, I);
    }
}

/* A MiniMax layer under its released (and save_pretrained) names: plain
 * norms, lightning attention (qkv_proj per head [q|k|v], output_gate,
 * out_proj, norm; its decays follow from the layer's index, so no buffer is
 * written) or GQA without norms, and block_sparse_moe's experts as w1 (gate),
 * w3 (up), w2 (down). */
static void add_minimax_layer(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden, D = (int64_t)p->heads * p->head_dim;
    const int64_t KV = (int64_t)p->kv_heads * p->head_dim;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    add_plain_norms(w, i, H);
    if ((i + 1) % p->interval == 0) {
        static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
        for (int j = 0; j < 3; j++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s.weight", i, proj[j]);
            ADD(w, n, 0, 0.0, sH, j ? KV : D, H);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)D), H, D);
    } else {
        snprintf(n, sizeof n, "model.layers.%d.self_attn.qkv_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, 3 * D, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.output_gate.weight", i);
        ADD(w, n, 0, 0.0, sH, D, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.out_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)D), H, D);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, D);
    }
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.gate.weight", i);
    ADD(w, n, 0, 0.0, sH, p->experts, H);
    add_w123_experts(w, p, i);
}

/* An MLA layer's query and latent projections under model.layers.i.<blk>.
 * (Kimi's self_attn, Ling's attention): q_proj, kv_a_proj_with_mqa,
 * kv_a_layernorm (a plain weight) and kv_b_proj. */
static void add_mla_latent(writer *w, const preset *p, int i, const char *blk)
{
    const int64_t H = p->hidden, nh = p->heads, R = p->kv_lora, dn = p->qk_nope, dr = p->qk_rope,
                  dv = p->v_head;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    snprintf(n, sizeof n, "model.layers.%d.%s.q_proj.weight", i, blk);
    ADD(w, n, 0, 0.0, sH, nh * (dn + dr), H);
    snprintf(n, sizeof n, "model.layers.%d.%s.kv_a_proj_with_mqa.weight", i, blk);
    ADD(w, n, 0, 0.0, sH, R + dr, H);
    snprintf(n, sizeof n, "model.layers.%d.%s.kv_a_layernorm.weight", i, blk);
    ADD(w, n, 0, 1.0, 0.1, R);
    snprintf(n, sizeof n, "model.layers.%d.%s.kv_b_proj.weight", i, blk);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)R), nh * (dn + dv), R);
}

/* A KDA layer's q/k/v projections [Q][H], each followed by its depthwise
 * conv [Q][1][4], under model.layers.i.<blk>. (Kimi's self_attn, Ling's
 * attention). */
static void add_kda_qkv(writer *w, const preset *p, int i, const char *blk)
{
    static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
    static const char *const conv[] = {"q_conv1d", "k_conv1d", "v_conv1d"};
    const int64_t H = p->hidden, Q = (int64_t)p->lv_heads * p->ldk, K = 4;
    char n[160];
    for (int j = 0; j < 3; j++) {
        snprintf(n, sizeof n, "model.layers.%d.%s.%s.weight", i, blk, proj[j]);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)H), Q, H);
        snprintf(n, sizeof n, "model.layers.%d.%s.%s.weight", i, blk, conv[j]);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)K), Q, 1, K);
    }
}

/* A Kimi-Linear layer under its released names: plain norms; KDA (q/k/v
 * projections and one conv each, the forget gate's f_a/f_b with dt_bias per
 * channel and A_log [1][1][H][1], b_proj, the output gate's g_a/g_b, o_norm,
 * o_proj) or MLA (q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj,
 * o_proj); layer 0's dense MLP as mlp.*, the others' experts as
 * block_sparse_moe.experts.{e}.w1/w3/w2 beside the router, its selection
 * bias and the shared experts. */
static void add_kimi_layer(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden, nh = p->heads, d = p->ldk, Q = (int64_t)p->lv_heads * d;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    add_plain_norms(w, i, H);
    if ((i + 1) % p->interval == 0) {
        const int64_t dv = p->v_head;
        add_mla_latent(w, p, i, "self_attn");
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)(nh * dv)), H, nh * dv);
    } else {
        add_kda_qkv(w, p, i, "self_attn");
        static const char *const gate[] = {"f", "g"};
        for (int j = 0; j < 2; j++) {
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_a_proj.weight", i, gate[j]);
            ADD(w, n, 0, 0.0, sH, d, H);
            snprintf(n, sizeof n, "model.layers.%d.self_attn.%s_b_proj.weight", i, gate[j]);
            ADD(w, n, 0, 0.0, 1.0 / sqrt((double)d), Q, d);
        }
        snprintf(n, sizeof n, "model.layers.%d.self_attn.dt_bias", i);
        ADD(w, n, 0, -2.5, 1.0, Q);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.A_log", i);
        ADD(w, n, 1, 0.05, 1.0, 1, 1, p->lv_heads, 1);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.b_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, p->lv_heads, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, d);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Q), H, Q);
    }
    if (i == 0) { /* first_k_dense_replace 1 */
        snprintf(n, sizeof n, "model.layers.%d.mlp", i);
        add_mlp(w, n, H, p->inter);
        return;
    }
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.gate.weight", i);
    ADD(w, n, 0, 0.0, 1.5 * sH, p->experts, H);
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.gate.e_score_correction_bias", i);
    ADD(w, n, 0, 0.0, 0.05, p->experts);
    add_w123_experts(w, p, i);
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.shared_experts", i);
    add_mlp(w, n, H, p->shared_inter);
}

/* A relu² MLP (no gate) under base: up_proj [I][H], down_proj [H][I]. */
static void add_relu2(writer *w, const char *base, int64_t H, int64_t I)
{
    char n[160];
    snprintf(n, sizeof n, "%s.up_proj.weight", base);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)H), I, H);
    snprintf(n, sizeof n, "%s.down_proj.weight", base);
    ADD(w, n, 0, 0.0, 1.0 / sqrt((double)I), H, I);
}

/* DeepSeek's MoE under base, as Nemotron-H and Ling release it: the router
 * gate.weight with its selection bias gate.<bias>, the experts
 * experts.{e}.* (relu² or SwiGLU) and the shared experts. */
static void add_grouped_moe(writer *w, const preset *p, const char *base, const char *bias,
                            bool relu2)
{
    const int64_t H = p->hidden;
    char n[160];
    snprintf(n, sizeof n, "%s.gate.weight", base);
    ADD(w, n, 0, 0.0, 1.5 / sqrt((double)H), p->experts, H);
    snprintf(n, sizeof n, "%s.gate.%s", base, bias);
    ADD(w, n, 0, 0.0, 0.05, p->experts);
    for (int e = 0; e < p->experts; e++) {
        snprintf(n, sizeof n, "%s.experts.%d", base, e);
        (relu2 ? add_relu2 : add_mlp)(w, n, H, p->moe_inter);
    }
    snprintf(n, sizeof n, "%s.shared_experts", base);
    (relu2 ? add_relu2 : add_mlp)(w, n, H, p->shared_inter);
}

/* A Nemotron-H block under its released names (backbone.layers.i.): the
 * block's plain norm and one mixer — Mamba2 (in_proj z | x B C | dt, the
 * conv with its bias, A_log, dt_bias, D, the gated norm, out_proj), GQA
 * without norms, a relu² MLP, or the MoE (router, selection bias, experts
 * {e}.up_proj / down_proj, the shared expert). dt_bias N(−3.5, 1) gives dt
 * of ~0.03 (a few heads below time_step_min, clamped in prompts), so with A
 * in [0.05, 1] the heads remember a few to a few hundred tokens. */
static void add_nemotron_layer(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden, nh = p->lv_heads, G = p->lk_heads, N = p->ldk, P = p->ldv;
    const int64_t I = nh * P, C = I + 2 * G * N, K = 4;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    snprintf(n, sizeof n, "backbone.layers.%d.norm.weight", i);
    ADD(w, n, 0, 1.0, 0.1, H);
    switch (p->pattern[i]) {
    case 'M':
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.in_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, I + C + nh, H);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.conv1d.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)K), C, 1, K);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.conv1d.bias", i);
        ADD(w, n, 0, 0.0, 0.1, C);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.A_log", i);
        ADD(w, n, 1, 0.05, 1.0, nh);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.dt_bias", i);
        ADD(w, n, 0, -3.5, 1.0, nh);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.D", i);
        ADD(w, n, 0, 0.5, 0.5, nh);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, I);
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.out_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)I), H, I);
        break;
    case '*': {
        const int64_t Q = (int64_t)p->heads * p->head_dim, KV = (int64_t)p->kv_heads * p->head_dim;
        static const char *const proj[] = {"q_proj", "k_proj", "v_proj"};
        for (int j = 0; j < 3; j++) {
            snprintf(n, sizeof n, "backbone.layers.%d.mixer.%s.weight", i, proj[j]);
            ADD(w, n, 0, 0.0, sH, j ? KV : Q, H);
        }
        snprintf(n, sizeof n, "backbone.layers.%d.mixer.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Q), H, Q);
        break;
    }
    case '-':
        snprintf(n, sizeof n, "backbone.layers.%d.mixer", i);
        add_relu2(w, n, H, p->inter);
        break;
    default: /* 'E' */
        snprintf(n, sizeof n, "backbone.layers.%d.mixer", i);
        add_grouped_moe(w, p, n, "e_score_correction_bias", true);
    }
}

/* A Ling layer under its released names: plain norms; KDA under attention.
 * (q/k/v projections and one conv each, f_proj, dt_bias per channel, A_log
 * [H], b_proj, g_proj, o_norm, the output projection `dense`) or MLA
 * (q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, g_proj, dense);
 * layer 0's dense MLP, the others' MoE as mlp.gate with its expert_bias, the
 * experts {e}.gate_proj / up_proj / down_proj and the shared experts. Its
 * forget gate is bounded (lb·sigmoid(exp(A_log)·(f + dt_bias)), lb −5):
 * A_log = log U(1, 2) and dt_bias N(−5, 1) put the argument of the sigmoid
 * between about −12 and −2, so the channels remember from a few tokens to
 * thousands (the delta-rule presets' init would make sigmoid(·) ~0.2 and
 * forget every token). */
static void add_ling_layer(writer *w, const preset *p, int i)
{
    const int64_t H = p->hidden, nh = p->heads, d = p->ldk, Q = (int64_t)p->lv_heads * d;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    add_plain_norms(w, i, H);
    if ((i + 1) % p->interval == 0) {
        const int64_t dv = p->v_head;
        add_mla_latent(w, p, i, "attention");
        snprintf(n, sizeof n, "model.layers.%d.attention.g_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, nh, H);
        snprintf(n, sizeof n, "model.layers.%d.attention.dense.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)(nh * dv)), H, nh * dv);
    } else {
        add_kda_qkv(w, p, i, "attention");
        snprintf(n, sizeof n, "model.layers.%d.attention.f_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, Q, H);
        snprintf(n, sizeof n, "model.layers.%d.attention.dt_bias", i);
        ADD(w, n, 0, -5.0, 1.0, Q);
        snprintf(n, sizeof n, "model.layers.%d.attention.A_log", i);
        ADD(w, n, 1, 1.0, 2.0, p->lv_heads);
        snprintf(n, sizeof n, "model.layers.%d.attention.b_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, p->lv_heads, H);
        snprintf(n, sizeof n, "model.layers.%d.attention.g_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, Q, H);
        snprintf(n, sizeof n, "model.layers.%d.attention.o_norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, d);
        snprintf(n, sizeof n, "model.layers.%d.attention.dense.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Q), H, Q);
    }
    if (i == 0) { /* first_k_dense_replace 1 */
        snprintf(n, sizeof n, "model.layers.%d.mlp", i);
        add_mlp(w, n, H, p->inter);
        return;
    }
    snprintf(n, sizeof n, "model.layers.%d.mlp", i);
    add_grouped_moe(w, p, n, "expert_bias", false);
}

static void add_layer(writer *w, const preset *p, int i)
{
    if (p->arch == HY_ARCH_BAILING_HYBRID) {
        add_ling_layer(w, p, i);
        return;
    }
    if (p->arch == HY_ARCH_NEMOTRON_H) {
        add_nemotron_layer(w, p, i);
        return;
    }
    if (p->arch == HY_ARCH_KIMI_LINEAR) {
        add_kimi_layer(w, p, i);
        return;
    }
    if (p->arch == HY_ARCH_MINIMAX) {
        add_minimax_layer(w, p, i);
        return;
    }
    if (p->arch == HY_ARCH_OLMO_HYBRID) {
        add_olmo_layer(w, p, i);
        return;
    }
    const int64_t H = p->hidden;
    const double sH = 1.0 / sqrt((double)H);
    char n[160];
    snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", i);
    ADD(w, n, 0, 0.0, 0.1, H);
    snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", i);
    ADD(w, n, 0, 0.0, 0.1, H);
    if ((i + 1) % p->interval == 0) {
        const int64_t hd = p->head_dim;
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, 2 * p->heads * hd, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, p->kv_heads * hd, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.v_proj.weight", i);
        ADD(w, n, 0, 0.0, sH, p->kv_heads * hd, H);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)(p->heads * hd)), H, p->heads * hd);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.q_norm.weight", i);
        ADD(w, n, 0, 0.0, 0.1, hd);
        snprintf(n, sizeof n, "model.layers.%d.self_attn.k_norm.weight", i);
        ADD(w, n, 0, 0.0, 0.1, hd);
    } else {
        const int64_t r = p->lv_heads / p->lk_heads,
                      C = 2 * p->lk_heads * p->ldk + p->lv_heads * p->ldv;
        const int64_t K = 4, Vd = (int64_t)p->lv_heads * p->ldv;
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.in_proj_qkvz.weight", i);
        ADD(w, n, 0, 0.0, sH, p->lk_heads * (2 * p->ldk + 2 * r * p->ldv), H);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.in_proj_ba.weight", i);
        ADD(w, n, 0, 0.0, sH, 2 * p->lv_heads, H);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.conv1d.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)K), C, 1, K);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.dt_bias", i);
        ADD(w, n, 0, -2.5, 1.0, p->lv_heads);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.A_log", i);
        ADD(w, n, 1, 0.05, 1.0, p->lv_heads);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.norm.weight", i);
        ADD(w, n, 0, 1.0, 0.1, p->ldv);
        snprintf(n, sizeof n, "model.layers.%d.linear_attn.out_proj.weight", i);
        ADD(w, n, 0, 0.0, 1.0 / sqrt((double)Vd), H, Vd);
    }
    if (p->experts > 0 && i > 0) {
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate.weight", i);
        ADD(w, n, 0, 0.0, sH, p->experts, H);
        for (int e = 0; e < p->experts; e++) {
            snprintf(n, sizeof n, "model.layers.%d.mlp.experts.%d", i, e);
            add_mlp(w, n, H, p->moe_inter);
        }
        snprintf(n, sizeof n, "model.layers.%d.mlp.shared_expert", i);
        add_mlp(w, n, H, p->shared_inter);
        snprintf(n, sizeof n, "model.layers.%d.mlp.shared_expert_gate.weight", i);
        ADD(w, n, 0, 0.0, sH, 1, H);
    } else {
        snprintf(n, sizeof n, "model.layers.%d.mlp", i);
        add_mlp(w, n, H, p->inter);
    }
}

static void add_layer_types(cJSON *c, const preset *p)
{
    cJSON *lt = cJSON_AddArrayToObject(c, "layer_types");
    for (int i = 0; i < p->layers; i++)
        cJSON_AddItemToArray(
            lt,
            cJSON_CreateString((i + 1) % p->interval == 0 ? "full_attention" : "linear_attention"));
}

/* The keys every preset's config.json starts with, in save_pretrained's
 * order, up to a RoPE object of base theta (returned in *rope for the
 * caller to complete). */
/* The keys every preset's config.json opens with: the class, the type, the
 * preset's name, the dtype (under the key its checkpoints use), the
 * vocabulary and the hidden width. */
static cJSON *config_start(const preset *p, const char *dtype, const char *cls,
                           const char *model_type, const char *dtype_key)
{
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(cls));
    cJSON_AddStringToObject(c, "model_type", model_type);
    cJSON_AddStringToObject(c, "hypic_preset", p->name);
    cJSON_AddStringToObject(c, dtype_key, strcmp(dtype, "BF16") == 0 ? "bfloat16" : "float32");
    cJSON_AddNumberToObject(c, "vocab_size", p->vocab);
    cJSON_AddNumberToObject(c, "hidden_size", p->hidden);
    return c;
}

static cJSON *config_head(const preset *p, const char *dtype, const char *cls,
                          const char *model_type, const char *dtype_key, int inter, double eps,
                          double max_pos, double theta, cJSON **rope)
{
    cJSON *c = config_start(p, dtype, cls, model_type, dtype_key);
    cJSON_AddNumberToObject(c, "intermediate_size", inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", p->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", p->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", p->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", p->head_dim);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "rms_norm_eps", eps);
    cJSON_AddNumberToObject(c, "max_position_embeddings", max_pos);
    cJSON *rp = cJSON_AddObjectToObject(c, "rope_parameters");
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddNumberToObject(rp, "rope_theta", theta);
    if (rope) *rope = rp;
    return c;
}

/* The Gated DeltaNet keys of Qwen3-Next and OLMo-Hybrid. */
static void add_gdn_keys(cJSON *c, const preset *p)
{
    cJSON_AddNumberToObject(c, "linear_conv_kernel_dim", 4);
    cJSON_AddNumberToObject(c, "linear_key_head_dim", p->ldk);
    cJSON_AddNumberToObject(c, "linear_value_head_dim", p->ldv);
    cJSON_AddNumberToObject(c, "linear_num_key_heads", p->lk_heads);
    cJSON_AddNumberToObject(c, "linear_num_value_heads", p->lv_heads);
}

/* config.json as OlmoHybridConfig.save_pretrained writes it (the keys the
 * class defines). */
static cJSON *make_olmo_config(const preset *p, const char *dtype)
{
    cJSON *c = config_head(p, dtype, "OlmoHybridForCausalLM", "olmo_hybrid", "dtype", p->inter,
                           1e-6, 65536, 500000.0, NULL);
    add_gdn_keys(c, p);
    cJSON_AddBoolToObject(c, "linear_allow_neg_eigval", 1);
    add_layer_types(c, p);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", p->tie);
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddNullToObject(c, "pad_token_id");
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    return c;
}

/* config.json as MiniMaxConfig.save_pretrained writes it. */
static cJSON *make_minimax_config(const preset *p, const char *dtype)
{
    cJSON *c = config_head(p, dtype, "MiniMaxForCausalLM", "minimax", "dtype", p->moe_inter, 1e-5,
                           131072, 10000000.0, NULL);
    add_layer_types(c, p);
    cJSON_AddNumberToObject(c, "block_size", 256);
    cJSON_AddNumberToObject(c, "num_local_experts", p->experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", p->top_k);
    /* MiniMax-M1's: alpha (2·80)^(1/4) on every residual, beta 1 */
    static const char *const factors[] = {"full_attn", "linear_attn", "mlp"};
    for (int f = 0; f < 3; f++) {
        char k[48];
        snprintf(k, sizeof k, "%s_alpha_factor", factors[f]);
        cJSON_AddNumberToObject(c, k, 3.5565588200778455);
        snprintf(k, sizeof k, "%s_beta_factor", factors[f]);
        cJSON_AddNumberToObject(c, k, 1.0);
    }
    cJSON_AddNullToObject(c, "sliding_window");
    cJSON_AddBoolToObject(c, "tie_word_embeddings", p->tie);
    cJSON_AddNullToObject(c, "pad_token_id");
    cJSON_AddNullToObject(c, "bos_token_id");
    cJSON_AddNullToObject(c, "eos_token_id");
    return c;
}

/* config.json as Kimi-Linear's release carries it: the 1-indexed layer lists
 * and head shapes of linear_attn_config, Kimi's key names, no layer_types. */
static cJSON *make_kimi_config(const preset *p, const char *dtype)
{
    cJSON *c = config_start(p, dtype, "KimiLinearForCausalLM", "kimi_linear", "dtype");
    cJSON_AddNumberToObject(c, "intermediate_size", p->inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", p->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", p->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", p->kv_heads);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-5);
    cJSON_AddNumberToObject(c, "model_max_length", 1048576);
    cJSON *la = cJSON_AddObjectToObject(c, "linear_attn_config");
    cJSON *kda = cJSON_AddArrayToObject(la, "kda_layers");
    cJSON *full = cJSON_AddArrayToObject(la, "full_attn_layers");
    for (int i = 0; i < p->layers; i++)
        cJSON_AddItemToArray((i + 1) % p->interval == 0 ? full : kda, cJSON_CreateNumber(i + 1));
    cJSON_AddNumberToObject(la, "head_dim", p->ldk);
    cJSON_AddNumberToObject(la, "num_heads", p->lv_heads);
    cJSON_AddNumberToObject(la, "short_conv_kernel_size", 4);
    cJSON_AddNullToObject(c, "q_lora_rank");
    cJSON_AddNumberToObject(c, "kv_lora_rank", p->kv_lora);
    cJSON_AddNumberToObject(c, "qk_nope_head_dim", p->qk_nope);
    cJSON_AddNumberToObject(c, "qk_rope_head_dim", p->qk_rope);
    cJSON_AddNumberToObject(c, "v_head_dim", p->v_head);
    cJSON_AddBoolToObject(c, "mla_use_nope", 1);
    cJSON_AddNumberToObject(c, "first_k_dense_replace", 1);
    cJSON_AddNumberToObject(c, "num_experts", p->experts);
    cJSON_AddNumberToObject(c, "num_experts_per_token", p->top_k);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", p->moe_inter);
    cJSON_AddNumberToObject(c, "num_shared_experts", p->shared_inter / p->moe_inter);
    cJSON_AddNumberToObject(c, "num_expert_group", p->n_group);
    cJSON_AddNumberToObject(c, "topk_group", p->topk_group);
    cJSON_AddBoolToObject(c, "moe_renormalize", 1);
    cJSON_AddStringToObject(c, "moe_router_activation_func", "sigmoid");
    cJSON_AddNumberToObject(c, "routed_scaling_factor", 2.446);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    return c;
}

/* config.json as Nemotron-H's releases carry it: the block pattern as
 * hybrid_override_pattern beside num_hidden_layers, no RoPE keys. */
static cJSON *make_nemotron_config(const preset *p, const char *dtype)
{
    cJSON *c = config_start(p, dtype, "NemotronHForCausalLM", "nemotron_h", "torch_dtype");
    cJSON_AddStringToObject(c, "hybrid_override_pattern", p->pattern);
    cJSON_AddNumberToObject(c, "num_hidden_layers", p->layers);
    cJSON_AddNumberToObject(c, "num_attention_heads", p->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", p->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", p->head_dim);
    cJSON_AddNumberToObject(c, "intermediate_size", p->inter);
    cJSON_AddStringToObject(c, "mlp_hidden_act", "relu2");
    cJSON_AddBoolToObject(c, "mlp_bias", 0);
    cJSON_AddNumberToObject(c, "mamba_num_heads", p->lv_heads);
    cJSON_AddNumberToObject(c, "mamba_head_dim", p->ldv);
    cJSON_AddNumberToObject(c, "ssm_state_size", p->ldk);
    cJSON_AddNumberToObject(c, "n_groups", p->lk_heads);
    cJSON_AddNumberToObject(c, "conv_kernel", 4);
    cJSON_AddNumberToObject(c, "chunk_size", 128);
    cJSON_AddNumberToObject(c, "time_step_min", 0.001);
    cJSON_AddBoolToObject(c, "use_conv_bias", 1);
    cJSON_AddBoolToObject(c, "use_bias", 0);
    cJSON_AddStringToObject(c, "mamba_hidden_act", "silu");
    cJSON_AddNumberToObject(c, "n_routed_experts", p->experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", p->top_k);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", p->moe_inter);
    cJSON_AddNumberToObject(c, "moe_shared_expert_intermediate_size", p->shared_inter);
    cJSON_AddNumberToObject(c, "n_group", p->n_group);
    cJSON_AddNumberToObject(c, "topk_group", p->topk_group);
    cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
    cJSON_AddNumberToObject(c, "routed_scaling_factor", 2.5);
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 262144);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    return c;
}

/* config.json as Ling-3.0's release carries it: layer_group_size and
 * first_k_dense_replace (no layer lists), head_dim the KDA width, the keys
 * transformers ignores (partial_rotary_factor, rope_interleave). */
static cJSON *make_ling_config(const preset *p, const char *dtype)
{
    cJSON *c = config_start(p, dtype, "BailingMoeV3ForCausalLM", "bailing_hybrid", "torch_dtype");
    cJSON_AddNumberToObject(c, "intermediate_size", p->inter);
    cJSON_AddNumberToObject(c, "num_hidden_layers", p->layers);
    cJSON_AddNumberToObject(c, "layer_group_size", p->interval);
    cJSON_AddNumberToObject(c, "first_k_dense_replace", 1);
    cJSON_AddNumberToObject(c, "num_attention_heads", p->heads);
    cJSON_AddNumberToObject(c, "num_key_value_heads", p->kv_heads);
    cJSON_AddNumberToObject(c, "head_dim", p->ldk);
    cJSON_AddNumberToObject(c, "short_conv_kernel_size", 4);
    cJSON_AddBoolToObject(c, "kda_safe_gate", 1);
    /* a float, as BailingHybridConfig's strict field wants it: cJSON would print -5 */
    cJSON_AddRawToObject(c, "kda_lower_bound", "-5.0");
    cJSON_AddNumberToObject(c, "kv_lora_rank", p->kv_lora);
    cJSON_AddNullToObject(c, "q_lora_rank");
    cJSON_AddNumberToObject(c, "qk_nope_head_dim", p->qk_nope);
    cJSON_AddNumberToObject(c, "qk_rope_head_dim", p->qk_rope);
    cJSON_AddNumberToObject(c, "v_head_dim", p->v_head);
    cJSON_AddNumberToObject(c, "rope_theta", 6000000.0);
    cJSON_AddNumberToObject(c, "partial_rotary_factor", 0.5);
    cJSON_AddBoolToObject(c, "rope_interleave", 1);
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "rms_norm_eps", 1e-6);
    cJSON_AddNumberToObject(c, "max_position_embeddings", 262144);
    cJSON_AddNumberToObject(c, "num_experts", p->experts);
    cJSON_AddNumberToObject(c, "num_experts_per_tok", p->top_k);
    cJSON_AddNumberToObject(c, "moe_intermediate_size", p->moe_inter);
    cJSON_AddNumberToObject(c, "num_shared_experts", p->shared_inter / p->moe_inter);
    cJSON_AddNumberToObject(c, "n_group", p->n_group);
    cJSON_AddNumberToObject(c, "topk_group", p->topk_group);
    cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
    cJSON_AddStringToObject(c, "score_function", "sigmoid");
    cJSON_AddNumberToObject(c, "routed_scaling_factor", 2.5);
    cJSON_AddNumberToObject(c, "num_nextn_predict_layers", 0);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 0);
    cJSON_AddNumberToObject(c, "pad_token_id", 0);
    cJSON_AddNumberToObject(c, "eos_token_id", 1);
    return c;
}

static cJSON *make_config(const preset *p, const char *dtype)
{
    if (p->arch == HY_ARCH_BAILING_HYBRID) return make_ling_config(p, dtype);
    if (p->arch == HY_ARCH_NEMOTRON_H) return make_nemotron_config(p, dtype);
    if (p->arch == HY_ARCH_KIMI_LINEAR) return make_kimi_config(p, dtype);
    if (p->arch == HY_ARCH_MINIMAX) return make_minimax_config(p, dtype);
    if (p->arch == HY_ARCH_OLMO_HYBRID) return make_olmo_config(p, dtype);
    cJSON *rp = NULL;
    cJSON *c = config_head(p, dtype, "Qwen3NextForCausalLM", "qwen3_next", "torch_dtype", p->inter,
                           1e-6, 262144, 10000000.0, &rp);
    cJSON_AddNumberToObject(rp, "partial_rotary_factor", 0.25);
    add_gdn_keys(c, p);
    cJSON_AddNumberToObject(c, "full_attention_interval", p->interval);
    add_layer_types(c, p);
    cJSON_AddNumberToObject(c, "num_experts", p->experts);
    if (p->experts) {
        cJSON_AddNumberToObject(c, "num_experts_per_tok", p->top_k);
        cJSON_AddNumberToObject(c, "moe_intermediate_size", p->moe_inter);
        cJSON_AddNumberToObject(c, "shared_expert_intermediate_size", p->shared_inter);
        cJSON_AddBoolToObject(c, "norm_topk_prob", 1);
        cJSON_AddNumberToObject(c, "decoder_sparse_step", 1);
        cJSON *mo = cJSON_AddArrayToObject(c, "mlp_only_layers");
        cJSON_AddItemToArray(mo, cJSON_CreateNumber(0));
    }
    cJSON_AddBoolToObject(c, "tie_word_embeddings", p->tie);
    cJSON_AddBoolToObject(c, "attention_bias", 0);
    cJSON_AddNumberToObject(c, "bos_token_id", 1);
    cJSON_AddNumberToObject(c, "eos_token_id", 2);
    return c;
}

/* mkdir -p */
static int make_dirs(const char *dir, hy_err *err)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return hy_err_set(err, HY_ERANGE, "%s: path too long", dir);
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return hy_err_set(err, HY_EIO, "%s: cannot create: %s", path, strerror(errno));
        *p = c;
        if (c == '\0') break;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return hy_err_set(err, HY_EIO, "%s: not a directory", dir);
    return HY_OK;
}

int hy_model_init(const char *preset_name, uint64_t seed, const char *dir, const char *dtype,
                  hy_err *err)
{
    const preset *p = NULL;
    for (size_t i = 0; i < sizeof k_presets / sizeof *k_presets; i++)
        if (strcmp(k_presets[i].name, preset_name) == 0) p = &k_presets[i];
    if (!p) {
        char names[512] = ""; /* the list itself, so the message never falls behind it */
        for (int i = 0; hy_presets[i]; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     hy_presets[i]);
        return hy_err_set(err, HY_EINVAL, "unknown preset '%s' (%s)", preset_name, names);
    }
    writer w = {0};
    if (strcmp(dtype, "F32") == 0)
        w.dtype = HY_DT_F32;
    else if (strcmp(dtype, "BF16") == 0)
        w.dtype = HY_DT_BF16;
    else
        return hy_err_set(err, HY_EINVAL, "dtype '%s': F32 or BF16", dtype);
    int rc0 = make_dirs(dir, err);
    if (rc0) return rc0;
    hy_rng_seed(&w.rng, seed);

    const int64_t H = p->hidden;
    /* the names as the family releases them (model.c's table) */
    const hy_family *f = hy_family_of(p->arch);
    char name[128];
    snprintf(name, sizeof name, "%s%s", f->released_prefix,
             f->embed_released ? f->embed_released : f->embed);
    ADD(&w, name, 0, 0.0, 0.25, p->vocab, H);
    for (int i = 0; i < p->layers; i++) add_layer(&w, p, i);
    /* zero-centred norms (Qwen's) are stored as w and applied as 1 + w */
    snprintf(name, sizeof name, "%s%s", f->released_prefix, f->final_norm);
    ADD(&w, name, 0, f->zero_centred_norms ? 0.0 : 1.0, 0.1, H);
    if (!p->tie) ADD(&w, "lm_head.weight", 0, 0.0, 1.0 / sqrt((double)H), p->vocab, H);

    int rc =
        w.failed ? hy_err_set(err, HY_ENOMEM, "out of memory generating '%s'", p->name) : HY_OK;
    char path[PATH_MAX];
    if (rc == HY_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        rc = hy_st_write(path, w.ts, w.n, err);
    }
    if (rc == HY_OK) {
        cJSON *c = make_config(p, dtype);
        char *text = c ? cJSON_Print(c) : NULL;
        cJSON_Delete(c);
        snprintf(path, sizeof path, "%s/config.json", dir);
        FILE *f = text ? fopen(path, "w") : NULL;
        if (!f || fputs(text, f) < 0 || fputc('\n', f) < 0)
            rc = hy_err_set(err, HY_EIO, "%s: cannot write", path);
        if (f && fclose(f) != 0 && rc == HY_OK)
            rc = hy_err_set(err, HY_EIO, "%s: cannot write", path);
        free(text);
    }
    for (size_t i = 0; i < w.n; i++) {
        free((void *)w.ts[i].name);
        free((void *)w.ts[i].data);
    }
    free(w.ts);
    return rc;
}
