/*
 * config.json of the supported hybrid architectures, read as transformers
 * 5.23 reads it and validated into one hy_model_config.
 *
 * One declarative table, k_keys, lists every key the loader reads: where it
 * is read (the text model's object or the top level), its type, the default
 * of each architecture's transformers config class (Qwen3NextConfig,
 * Qwen3_5TextConfig, Qwen3_5MoeTextConfig), the values the executor runs and
 * what the key means. Parsing is driven by it; docs/config-keys.md renders it
 * (test_config keeps the two equal) and explains the rules, which are
 * transformers' own:
 *   - an absent key takes the class's default; a key the class does not
 *     define is ignored, as transformers keeps it as an attribute no module
 *     reads (one log line names such keys);
 *   - null is refused, as strict dataclass validation refuses it, except for
 *     the Optional fields (layer_types, mlp_only_layers, the RoPE objects,
 *     text_config), where it means absent;
 *   - a composite config (model_type qwen3_5 / qwen3_5_moe) nests the text
 *     model under text_config, whose class is fixed by the composite's
 *     model_type (text_config's own model_type is not consulted; absent, every
 *     text key takes its default). tie_word_embeddings is read at the top
 *     level: ...ForConditionalGeneration ties by its own flag, never by
 *     text_config's.
 * What transformers accepts but the executor cannot run is refused with a
 * message naming the file, the key and the limit; no value is ever replaced
 * silently.
 */
#include "model_internal.h"

#include <assert.h>
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_ARCH = HY_ARCH_COUNT, MAX_KEYS = 120 };
_Static_assert(HY_ARCH_QWEN3_NEXT == 0 && HY_ARCH_QWEN3_5 == 1 && HY_ARCH_QWEN3_5_MOE == 2 &&
                   HY_ARCH_OLMO_HYBRID == 3 && HY_ARCH_MINIMAX == 4 && HY_ARCH_KIMI_LINEAR == 5 &&
                   HY_ARCH_NEMOTRON_H == 6 && HY_ARCH_BAILING_HYBRID == 7 && N_ARCH == 8,
               "k_keys' default columns are indexed by hy_arch");

/* The text model type of each architecture, as transformers names it. */
static const char *const k_text_type[N_ARCH] = {"qwen3_next",  "qwen3_5_text",  "qwen3_5_moe_text",
                                                "olmo_hybrid", "minimax",       "kimi_linear",
                                                "nemotron_h",  "bailing_hybrid"};

typedef enum key_type { KT_INT, KT_NUM, KT_BOOL, KT_OTHER } key_type;
/* An int field whose key is absent (or null) and derived from others. */
enum { DERIVED = INT_MIN };
typedef enum key_where { AT_TEXT, AT_TOP } key_where;

/* What the scalar keys are read into before hy_model_config is derived. */
typedef struct cfg_vals {
    hy_model_config c;
    double rms_eps, rope_theta, partial_rotary;
    int sparse_step;
    bool attention_bias, neg_eigval;
    int block_size;
    double alpha_beta[6];      /* MiniMax: full-attention, linear-attention and MLP alpha, beta */
    int n_shared, first_dense; /* Kimi */
    double routed_scale;
    double dt_min;  /* Nemotron-H's time_step_min */
    int short_conv; /* Ling's short_conv_kernel_size */
    double kda_lower_bound;
    bool mlp_types_given; /* mlp_layer_types set layer_moe */
    bool mlp_only[HY_MAX_LAYERS];
} cfg_vals;

typedef struct cfg_ctx {
    const cJSON *root; /* the file's object */
    const cJSON *text; /* the text model's keys: text_config when nested, else root */
    bool nested;
    hy_arch arch;
    const char *path;
    hy_err *err;
    cfg_vals v;
    bool given[MAX_KEYS];                  /* k_keys[i] was present in config.json */
    const cJSON *kda_layers, *full_layers; /* linear_attn_config's lists, when both are there */
} cfg_ctx;

typedef struct cfg_key cfg_key;
struct cfg_key {
    const char *name;
    key_where where;
    key_type type;
    size_t off; /* KT_INT (int), KT_NUM (double), KT_BOOL (bool): the field of cfg_vals */
    /* transformers' default per hy_arch: JSON text for scalars, words for
     * KT_OTHER; NULL where the class has no such key (then it is ignored) */
    const char *def[N_ARCH];
    double lo, hi; /* KT_INT, KT_NUM: what the executor runs; KT_BOOL: lo == hi is the only value */
    int (*read)(cfg_ctx *, const cfg_key *); /* KT_OTHER: reads the key */
    const char *tname;                       /* KT_OTHER: its JSON type, in words */
    const char *runs;                        /* KT_OTHER: what the executor runs, in words */
    const char *meaning;
    bool deferred; /* read by read_identity or with another key, not in table order */
};

static int read_rope(cfg_ctx *c, const cfg_key *k);
static int read_layers(cfg_ctx *c, const cfg_key *k);
static int read_mlp_only(cfg_ctx *c, const cfg_key *k);
static int read_sliding(cfg_ctx *c, const cfg_key *k);
static int read_lin_cfg(cfg_ctx *c, const cfg_key *k);
static int read_mlp_types(cfg_ctx *c, const cfg_key *k);
static int read_block_types(cfg_ctx *c, const cfg_key *k);
static int read_fixed_string(cfg_ctx *c, const cfg_key *k);
static int mark_layers(cfg_ctx *c, const cJSON *list, const char *name, hy_layer_kind kind,
                       bool *seen);

#define V(f) offsetof(cfg_vals, f)
/* Table rows: a scalar key read in table order, or one with its own reader. */
#define SCALAR(nm, at, ty, field, d0, d1, d2, d3, d4, d5, d6, d7, lo_, hi_, what)                  \
    {                                                                                              \
        .name = nm, .where = at, .type = ty, .off = V(field),                                      \
        .def = {d0, d1, d2, d3, d4, d5, d6, d7}, .lo = lo_, .hi = hi_, .meaning = what             \
    }
#define OTHER(nm, at, tn, d0, d1, d2, d3, d4, d5, d6, d7, reader, runs_, what, later)              \
    {                                                                                              \
        .name = nm, .where = at, .type = KT_OTHER, .def = {d0, d1, d2, d3, d4, d5, d6, d7},        \
        .read = reader, .tname = tn, .runs = runs_, .meaning = what, .deferred = later             \
    }

/* A default of UNUSED: the class defines the key but no module reads it
 * (Nemotron-H's attention_bias, sliding_window, num_hidden_layers): the
 * loader reads nothing of it and says so once. */
#define UNUSED "unused"
static bool is_unused(const char *def)
{
    return def && strcmp(def, UNUSED) == 0;
}

/* Every key the loader reads, in the order it reads them. Defaults are
 * transformers 5.23's (configuration_qwen3_next.py, configuration_qwen3_5.py,
 * configuration_qwen3_5_moe.py, configuration_olmo_hybrid.py,
 * configuration_minimax.py, configuration_kimi_linear.py,
 * configuration_nemotron_h.py; RoPE defaults
 * from modeling_rope_utils.py). A default written "=<when>: <rule>" is
 * derived from other keys (derive()) when the key is absent or, where <when>
 * says `null`, null; a default mentioning `null` accepts null. */
static const cfg_key k_keys[] = {
    OTHER("model_type", AT_TOP, "string", "required", "required", "required", "required",
          "required", "required", "required", "required", NULL,
          "`qwen3_next`; `qwen3_5_text` or `qwen3_5` (nested); `qwen3_5_moe_text` or "
          "`qwen3_5_moe` (nested); `olmo_hybrid`; `minimax`; `kimi_linear`; `nemotron_h`",
          "selects the architecture; `qwen3_5` and `qwen3_5_moe` are the vision-language "
          "composites whose text model is under `text_config`",
          true),
    OTHER("architectures", AT_TOP, "list of strings", "none", "none", "none", "none", "none",
          "none", "none", "none", NULL, "any",
          "recorded (the first entry) for reports; the executor is chosen by `model_type`", true),
    OTHER("text_config", AT_TOP, "object", NULL, "`{}` (all defaults)", "`{}` (all defaults)", NULL,
          NULL, NULL, NULL, NULL, NULL, "an object or null",
          "the text model's keys of a composite config; its own `model_type` is not consulted",
          true),
    SCALAR("vocab_size", AT_TEXT, KT_INT, c.vocab, "151936", "248320", "248320", "100352", "32000",
           "163840", "131072", "157184", 1, 1 << 24, "rows of the embedding and of the LM head"),
    SCALAR("hidden_size", AT_TEXT, KT_INT, c.hidden, "2048", "4096", "2048", "3840", "4096", "2304",
           "4096", "2560", 1, 1 << 16, "width of the residual stream"),
    SCALAR("num_hidden_layers", AT_TEXT, KT_INT, c.n_layers, "48", "32", "40", "32", "32", "27",
           UNUSED, "42", 1, HY_MAX_LAYERS,
           "decoder layers; a tensor of a layer beyond them is an error"),
    SCALAR("intermediate_size", AT_TEXT, KT_INT, c.intermediate, "5632", "12288", NULL, "11008",
           "14336", "9216", "21504", "6144", 0, 1 << 20,
           "width of a dense MLP (SwiGLU; relu² for Nemotron-H); 0 only where no layer is dense"),
    SCALAR("num_attention_heads", AT_TEXT, KT_INT, c.n_heads, "16", "16", "16", "30", "32", "32",
           "32", "32", 1, 1024,
           "query heads of a full-attention layer; a multiple of `num_key_value_heads`"),
    SCALAR("num_key_value_heads", AT_TEXT, KT_INT, c.n_kv_heads, "2", "4", "2",
           "=`null`: `num_attention_heads`", "8", "32; `null`: `num_attention_heads`",
           "8; `null`: `num_attention_heads`", "32; `null`: `num_attention_heads`", 1, 1024,
           "key/value heads of a full-attention layer (GQA)"),
    SCALAR("head_dim", AT_TEXT, KT_INT, c.head_dim, "256", "256", "256",
           "=absent: `hidden_size` / `num_attention_heads`",
           "=`null`: `hidden_size` / `num_attention_heads`", NULL, "128", "128", 2, 4096,
           "width of a full-attention head"),
    OTHER("hidden_act", AT_TEXT, "string", "`\"silu\"`", "`\"silu\"`", "`\"silu\"`", "`\"silu\"`",
          "`\"silu\"`", "`\"silu\"`", NULL, "`\"silu\"`", read_fixed_string, "`\"silu\"` only",
          "activation of every MLP", false),
    SCALAR("attention_bias", AT_TEXT, KT_BOOL, attention_bias, "false", "false", "false", "false",
           NULL, "false", UNUSED, "false", 0, 1,
           "biases on the attention projections: Ling's MLA only (kv_a_proj_with_mqa and the "
           "output projection); true is refused for the others"),
    SCALAR("rms_norm_eps", AT_TEXT, KT_NUM, rms_eps, "1e-06", "1e-06", "1e-06", "1e-06", "1e-05",
           "1e-05", NULL, "1e-06", 0, 1, "epsilon of every RMSNorm"),
    SCALAR("linear_num_key_heads", AT_TEXT, KT_INT, c.lin_k_heads, "16", "16", "16",
           "=`null`: `num_attention_heads`", NULL, NULL, NULL, NULL, 1, 1024,
           "query/key heads of a Gated DeltaNet layer"),
    SCALAR("linear_num_value_heads", AT_TEXT, KT_INT, c.lin_v_heads, "32", "32", "32",
           "=`null`: `num_attention_heads`", NULL, NULL, NULL, NULL, 1, 1024,
           "value heads of a Gated DeltaNet layer; a multiple of `linear_num_key_heads`"),
    SCALAR("linear_key_head_dim", AT_TEXT, KT_INT, c.lin_dk, "128", "128", "128",
           "=`null`: int(0.75 × `hidden_size` / `linear_num_key_heads`)", NULL, NULL, NULL, NULL, 1,
           1024, "key width of a Gated DeltaNet head"),
    SCALAR("linear_value_head_dim", AT_TEXT, KT_INT, c.lin_dv, "128", "128", "128",
           "=`null`: 2 × `linear_key_head_dim`", NULL, NULL, NULL, NULL, 1, 1024,
           "value width of a Gated DeltaNet head"),
    SCALAR("linear_allow_neg_eigval", AT_TEXT, KT_BOOL, neg_eigval, NULL, NULL, NULL, "true", NULL,
           NULL, NULL, NULL, 0, 1,
           "beta = 2·sigmoid(b) instead of sigmoid(b): the delta rule's eigenvalues 1 − beta "
           "then reach down to −1"),
    SCALAR("linear_conv_kernel_dim", AT_TEXT, KT_INT, c.conv_kernel, "4", "4", "4", "4", NULL, "4",
           NULL, "=absent: `short_conv_kernel_size`", 1, 16,
           "taps of the causal short convolution before the delta rule"),
    SCALAR("linear_num_heads", AT_TEXT, KT_INT, c.lin_v_heads, NULL, NULL, NULL, NULL, NULL, "32",
           NULL, "=absent: `num_attention_heads`", 1, 1024,
           "heads of a KDA layer: queries, keys and values alike (`linear_attn_config.num_heads` "
           "wins)"),
    SCALAR("linear_head_dim", AT_TEXT, KT_INT, c.lin_dk, NULL, NULL, NULL, NULL, NULL, "128", NULL,
           "=absent: `head_dim`", 1, 1024,
           "key and value width of a KDA head (`linear_attn_config.head_dim` wins)"),
    OTHER("linear_attn_config", AT_TEXT, "object", NULL, NULL, NULL, NULL, NULL, "`null`", NULL,
          NULL, read_lin_cfg,
          "`head_dim`, `num_heads`, `short_conv_kernel_size` as the flat keys; "
          "`kda_layers` and `full_attn_layers` together covering every layer",
          "Kimi's nested settings: they win over `linear_head_dim`, `linear_num_heads` and "
          "`linear_conv_kernel_dim`, and without `layer_types` the two 1-indexed lists say "
          "which layers are KDA and which MLA",
          false),
    SCALAR("rope_theta", AT_TEXT, KT_NUM, rope_theta, "10000.0", "10000.0", "10000.0",
           "10000.0; `null`: no RoPE", "1000000.0", NULL, NULL, "6000000.0", 1, 1e12,
           "RoPE base where the RoPE object does not give one; OLMo-Hybrid runs without "
           "positional encoding (NoPE) when the base in effect is null"),
    SCALAR("partial_rotary_factor", AT_TEXT, KT_NUM, partial_rotary, "0.25", "0.25", "0.25", NULL,
           NULL, NULL, NULL, NULL, 0, 1,
           "rotated fraction of `head_dim` where the RoPE object does not give one; "
           "int(head_dim x factor) must be even and >= 2"),
    OTHER("rope_parameters", AT_TEXT, "object", "`null`", "`null`", "`null`", "`null`", "`null`",
          NULL, NULL, "`null`", read_rope,
          "`rope_type` (or `type`) `\"default\"`; M-RoPE sections accepted",
          "RoPE settings (`rope_theta`, `partial_rotary_factor`) that win over the top-level "
          "keys; for text every M-RoPE section sees the same position, which is plain RoPE",
          false),
    OTHER("rope_scaling", AT_TEXT, "object", "`null`", "`null`", "`null`", "`null`", "`null`", NULL,
          NULL, "`null`", NULL, "as `rope_parameters`",
          "the older name: when a non-empty object it replaces `rope_parameters` entirely", true),
    OTHER("layer_types", AT_TEXT, "list of strings", "`null`", "`null`", "`null`", "`null`",
          "`null`", "`null`", NULL, "`null`", read_layers,
          "`num_hidden_layers` entries, each `\"linear_attention\"` or `\"full_attention\"`",
          "the token mixer of each layer; null derives it from `full_attention_interval`", false),
    {.name = "full_attention_interval",
     .where = AT_TEXT,
     .type = KT_INT,
     .def = {"4", "4", "4", NULL, NULL, NULL, NULL, NULL},
     .lo = 1,
     .hi = HY_MAX_LAYERS,
     .meaning = "read only when `layer_types` is null: layer i has full attention when "
                "(i + 1) % interval == 0, else linear attention",
     .deferred = true},
    SCALAR("num_experts", AT_TEXT, KT_INT, c.n_experts, "512", NULL, "256", NULL, NULL,
           "256; alias `num_local_experts`", NULL, "512; alias `num_local_experts`", 0, 4096,
           "routed experts per MoE layer; 0 (Qwen3-Next only) makes every layer dense"),
    SCALAR("num_experts_per_tok", AT_TEXT, KT_INT, c.top_k, "10", NULL, "8", NULL, "2", NULL, "2",
           NULL, 1, 4096, "experts each token is routed to; at most `num_experts`"),
    SCALAR("moe_intermediate_size", AT_TEXT, KT_INT, c.moe_intermediate, "512", NULL, "512", NULL,
           NULL, "1024", "7688", "768", 1, 1 << 20, "width of a routed expert's SwiGLU"),
    SCALAR("shared_expert_intermediate_size", AT_TEXT, KT_INT, c.shared_intermediate, "512", NULL,
           "512", NULL, NULL, NULL, NULL, NULL, 0, 1 << 20,
           "width of the sigmoid-gated shared expert of every MoE layer; 0: none (its tensors "
           "must then be absent)"),
    SCALAR("norm_topk_prob", AT_TEXT, KT_BOOL, c.norm_topk, "true", NULL, NULL, NULL, NULL, NULL,
           "true", NULL, 0, 1,
           "renormalise the top-k routing weights to sum 1; the Qwen3.5 MoE router always does, "
           "whatever the key says"),
    SCALAR("decoder_sparse_step", AT_TEXT, KT_INT, sparse_step, "1", NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, 1, HY_MAX_LAYERS,
           "layer i is MoE when (i + 1) % step == 0 and i is not in `mlp_only_layers` (Qwen3.5 "
           "MoE routes every layer)"),
    OTHER("mlp_only_layers", AT_TEXT, "list of ints", "`[]`", NULL, NULL, NULL, NULL, NULL, NULL,
          NULL, read_mlp_only, "integers; those outside [0, num_hidden_layers) match no layer",
          "layers with a dense MLP although the sparse step would route them", false),
    SCALAR("num_local_experts", AT_TEXT, KT_INT, c.n_experts, NULL, NULL, NULL, NULL,
           "8; `num_experts` as alias", NULL, NULL, NULL, 1, 4096,
           "routed experts of every MiniMax layer (`num_experts` is read when this key is absent)"),
    OTHER("sliding_window", AT_TEXT, "int or null", NULL, NULL, NULL, NULL, "`null`", NULL, UNUSED,
          NULL, read_sliding, "`null` only",
          "a sliding attention window; the executor attends causally over everything", false),
    SCALAR("block_size", AT_TEXT, KT_INT, block_size, NULL, NULL, NULL, NULL, "256", NULL, NULL,
           NULL, 1, 1 << 20,
           "lightning attention's prefill block; the result does not depend on it (fp32 rounding)"),
    SCALAR("full_attn_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[0], NULL, NULL, NULL, NULL, "1",
           NULL, NULL, NULL, -1e6, 1e6,
           "a softmax-attention layer's x = alpha·norm(x) + beta·attn(norm(x))"),
    SCALAR("full_attn_beta_factor", AT_TEXT, KT_NUM, alpha_beta[1], NULL, NULL, NULL, NULL, "1",
           NULL, NULL, NULL, -1e6, 1e6, "see `full_attn_alpha_factor`"),
    SCALAR("linear_attn_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[2], NULL, NULL, NULL, NULL, "1",
           NULL, NULL, NULL, -1e6, 1e6, "the same for a lightning-attention layer"),
    SCALAR("linear_attn_beta_factor", AT_TEXT, KT_NUM, alpha_beta[3], NULL, NULL, NULL, NULL, "1",
           NULL, NULL, NULL, -1e6, 1e6, "see `linear_attn_alpha_factor`"),
    SCALAR("mlp_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[4], NULL, NULL, NULL, NULL, "1", NULL,
           NULL, NULL, -1e6, 1e6, "the same around the MoE: x = alpha·norm(x) + beta·moe(norm(x))"),
    SCALAR("mlp_beta_factor", AT_TEXT, KT_NUM, alpha_beta[5], NULL, NULL, NULL, NULL, "1", NULL,
           NULL, NULL, -1e6, 1e6, "see `mlp_alpha_factor`"),
    SCALAR("num_experts_per_token", AT_TEXT, KT_INT, c.top_k, NULL, NULL, NULL, NULL, NULL, "8",
           NULL, "8", 1, 4096, "experts each token is routed to (alias `num_experts_per_tok`)"),
    SCALAR("num_shared_experts", AT_TEXT, KT_INT, n_shared, NULL, NULL, NULL, NULL, NULL, "1", NULL,
           "1", 0, 64,
           "shared experts, always on: one SwiGLU of `moe_intermediate_size` × this width "
           "(alias `n_shared_experts`)"),
    SCALAR("moe_renormalize", AT_TEXT, KT_BOOL, c.norm_topk, NULL, NULL, NULL, NULL, NULL, "true",
           NULL, "true", 0, 1,
           "renormalise the chosen experts' sigmoid scores to sum 1 before the routed scaling "
           "(alias `norm_topk_prob`)"),
    SCALAR("num_expert_group", AT_TEXT, KT_INT, c.n_group, NULL, NULL, NULL, NULL, NULL, "1", NULL,
           "8", 1, 256,
           "groups of consecutive experts the router ranks by their two best biased scores "
           "(alias `n_group`)"),
    SCALAR("topk_group", AT_TEXT, KT_INT, c.topk_group, NULL, NULL, NULL, NULL, NULL, "1", "1", "4",
           1, 4096, "groups kept; the experts are chosen among theirs"),
    SCALAR("routed_scaling_factor", AT_TEXT, KT_NUM, routed_scale, NULL, NULL, NULL, NULL, NULL,
           "2.446", "1.0", "2.5", 0, 1e6,
           "the routed experts' weights are multiplied by it (after the renormalisation)"),
    SCALAR("first_k_dense_replace", AT_TEXT, KT_INT, first_dense, NULL, NULL, NULL, NULL, NULL, "1",
           NULL, "2", 0, HY_MAX_LAYERS,
           "without `mlp_layer_types`, the first this many layers have a dense MLP, the rest MoE"),
    OTHER("mlp_layer_types", AT_TEXT, "list of strings", NULL, NULL, NULL, NULL, NULL, "`null`",
          NULL, "`null`", read_mlp_types,
          "`num_hidden_layers` entries, each `\"dense\"` or `\"sparse\"`",
          "each layer's MLP: dense, or routed experts with the shared one", false),
    SCALAR("q_lora_rank", AT_TEXT, KT_INT, c.q_lora, NULL, NULL, NULL, NULL, NULL,
           "=`null`: none (a plain `q_proj`)", NULL, NULL, 1, 65536,
           "an MLA layer's queries go through a rank-q_lora bottleneck (`q_a_proj`, an RMSNorm, "
           "`q_b_proj`)"),
    SCALAR("kv_lora_rank", AT_TEXT, KT_INT, c.kv_lora, NULL, NULL, NULL, NULL, NULL, "512", NULL,
           "512", 1, 65536,
           "width of the latent an MLA layer caches per token, expanded to every head's key "
           "and value"),
    SCALAR("qk_nope_head_dim", AT_TEXT, KT_INT, c.qk_nope, NULL, NULL, NULL, NULL, NULL, "128",
           NULL, "128", 1, 4096, "a head's key part expanded from the latent"),
    SCALAR("qk_rope_head_dim", AT_TEXT, KT_INT, c.qk_rope, NULL, NULL, NULL, NULL, NULL, "64", NULL,
           "64", 1, 4096,
           "the key part all heads share, cached beside the latent (Kimi rotates nothing)"),
    SCALAR("v_head_dim", AT_TEXT, KT_INT, c.v_head, NULL, NULL, NULL, NULL, NULL, "128", NULL,
           "128", 1, 4096, "a head's value width"),
    OTHER("layers_block_type", AT_TEXT, "list of strings", NULL, NULL, NULL, NULL, NULL, NULL,
          "`null`: `hybrid_override_pattern`, else `[\"linear_attention\", \"moe\", "
          "\"full_attention\", \"mlp\"]`; alias `layer_types`",
          NULL, read_block_types,
          "1 to 256 entries, each `\"linear_attention\"` (or `\"mamba\"`), `\"full_attention\"` "
          "(or `\"attention\"`), `\"moe\"` or `\"mlp\"`",
          "Nemotron-H's blocks, one token mixer or one MLP each: Mamba2, GQA attention, routed "
          "experts or a dense MLP; their number is the layer count (`num_hidden_layers` is not "
          "read)",
          false),
    OTHER("hybrid_override_pattern", AT_TEXT, "string", NULL, NULL, NULL, NULL, NULL, NULL, "none",
          NULL, NULL, "one character per block: `M`, `*`, `E` or `-`",
          "the released checkpoints' spelling of `layers_block_type` (M Mamba2, * attention, "
          "E MoE, - MLP); read only when that list is absent",
          true),
    SCALAR("layer_norm_epsilon", AT_TEXT, KT_NUM, rms_eps, NULL, NULL, NULL, NULL, NULL, NULL,
           "1e-05", NULL, 0, 1, "epsilon of every RMSNorm, the Mamba2 gated norm's too"),
    OTHER("mlp_hidden_act", AT_TEXT, "string", NULL, NULL, NULL, NULL, NULL, NULL, "`\"relu2\"`",
          NULL, read_fixed_string, "`\"relu2\"` only",
          "activation of the MLP blocks and of every expert: relu(x)², no gate projection", false),
    SCALAR("mlp_bias", AT_TEXT, KT_BOOL, c.mlp_bias, NULL, NULL, NULL, NULL, NULL, NULL, "false",
           NULL, 0, 1, "biases on the MLP blocks, the shared expert and the latent projections"),
    SCALAR("mamba_num_heads", AT_TEXT, KT_INT, c.lin_v_heads, NULL, NULL, NULL, NULL, NULL, NULL,
           "128", NULL, 1, 1024, "heads of a Mamba2 layer; a multiple of `n_groups`"),
    SCALAR("mamba_head_dim", AT_TEXT, KT_INT, c.lin_dv, NULL, NULL, NULL, NULL, NULL, NULL, "64",
           NULL, 1, 1024,
           "channels of x per Mamba2 head (the layer is mamba_num_heads × this wide; `expand` is "
           "not read)"),
    SCALAR("ssm_state_size", AT_TEXT, KT_INT, c.lin_dk, NULL, NULL, NULL, NULL, NULL, NULL, "128",
           NULL, 1, 1024, "width N of B and C: a head's state is N × mamba_head_dim"),
    SCALAR("n_groups", AT_TEXT, KT_INT, c.lin_k_heads, NULL, NULL, NULL, NULL, NULL, NULL,
           "8; alias `mamba_n_groups` (wins)", NULL, 1, 1024,
           "groups of heads sharing one B and one C, which are also the gated norm's groups"),
    SCALAR("conv_kernel", AT_TEXT, KT_INT, c.conv_kernel, NULL, NULL, NULL, NULL, NULL, NULL,
           "4; alias `mamba_d_conv` (wins)", NULL, 2, 16, "taps of the causal conv over x | B | C"),
    OTHER("mamba_hidden_act", AT_TEXT, "string", NULL, NULL, NULL, NULL, NULL, NULL, "`\"silu\"`",
          NULL, read_fixed_string, "`\"silu\"` only",
          "activation after the Mamba2 conv (the output gate is SiLU whatever it says)", false),
    SCALAR("time_step_min", AT_TEXT, KT_NUM, dt_min, NULL, NULL, NULL, NULL, NULL, NULL,
           "0.001; alias `mamba_dt_min` (wins)", NULL, 0, 1e6,
           "a prompt token's dt is clamped below at it; a decode step's is not (transformers' "
           "chunked scan clamps, its one-token update does not)"),
    SCALAR("use_conv_bias", AT_TEXT, KT_BOOL, c.lin_conv_bias, NULL, NULL, NULL, NULL, NULL, NULL,
           "true; alias `mamba_conv_bias` (wins)", NULL, 0, 1, "a bias on the Mamba2 conv"),
    SCALAR("use_bias", AT_TEXT, KT_BOOL, c.lin_proj_bias, NULL, NULL, NULL, NULL, NULL, NULL,
           "false", NULL, 0, 1, "biases on the Mamba2 in_proj and out_proj"),
    SCALAR("chunk_size", AT_TEXT, KT_INT, block_size, NULL, NULL, NULL, NULL, NULL, NULL,
           "128; alias `mamba_chunk_size` (wins)", NULL, 1, 1 << 20,
           "Mamba2's prefill chunk; the result does not depend on it (fp32 rounding)"),
    SCALAR("n_routed_experts", AT_TEXT, KT_INT, c.n_experts, NULL, NULL, NULL, NULL, NULL, NULL,
           "8; alias `num_local_experts`", NULL, 1, 4096, "routed experts of every MoE block"),
    SCALAR("moe_shared_expert_intermediate_size", AT_TEXT, KT_INT, c.shared_intermediate, NULL,
           NULL, NULL, NULL, NULL, NULL, "7688", NULL, 1, 1 << 20,
           "width of the shared expert every MoE block adds, ungated"),
    SCALAR("moe_latent_size", AT_TEXT, KT_INT, c.moe_latent, NULL, NULL, NULL, NULL, NULL, NULL,
           "=`null`: none (experts on the hidden width)", NULL, 1, 65536,
           "the routed experts run in a latent this wide: fc1_latent_proj before them, "
           "fc2_latent_proj after their sum (the router and the shared expert see the hidden "
           "state)"),
    SCALAR("n_group", AT_TEXT, KT_INT, c.n_group, NULL, NULL, NULL, NULL, NULL, NULL, "1", NULL, 1,
           256, "groups of consecutive experts the router ranks by their two best biased scores"),
    SCALAR("short_conv_kernel_size", AT_TEXT, KT_INT, short_conv, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, "4", 2, 16,
           "taps of a KDA layer's short conv, unless `linear_conv_kernel_dim` is given"),
    {.name = "layer_group_size",
     .where = AT_TEXT,
     .type = KT_INT,
     .def = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, "6"},
     .lo = 1,
     .hi = HY_MAX_LAYERS,
     .meaning = "read only when `layer_types` is null: layer i (from 0) is MLA when (i + 1) % "
                "size == 0, else KDA (a last partial group is all KDA)",
     .deferred = true},
    SCALAR("kda_safe_gate", AT_TEXT, KT_BOOL, c.kda_safe_gate, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, "true", 0, 1,
           "the bounded forget gate lower_bound·sigmoid(exp(A_log)·(f + dt_bias)); false: "
           "−exp(A_log)·softplus(f + dt_bias)"),
    SCALAR("kda_lower_bound", AT_TEXT, KT_NUM, kda_lower_bound, NULL, NULL, NULL, NULL, NULL, NULL,
           NULL, "-5.0", -1e6, 0, "the bounded gate's least log-decay per token"),
    SCALAR("num_nextn_predict_layers", AT_TEXT, KT_INT, c.mtp_layers, NULL, NULL, NULL, NULL, NULL,
           NULL, NULL, "1; alias `num_mtp_layers`", 0, 64,
           "multi-token-prediction layers after the last one; their tensors (and `model.mtp.*`) "
           "are skipped, as transformers builds none"),
    SCALAR("tie_word_embeddings", AT_TOP, KT_BOOL, c.tie_embeddings, "false", "false", "false",
           "false", "false", "false", "false", "false", 0, 1,
           "the LM head is the embedding matrix (`lm_head.weight` may then be absent; when present "
           "it is used, as transformers does); a composite config ties by its own flag, never by "
           "`text_config`'s"),
};
#undef SCALAR
#undef OTHER
#define N_KEYS (sizeof k_keys / sizeof *k_keys)
_Static_assert(sizeof k_keys / sizeof *k_keys <= MAX_KEYS, "raise MAX_KEYS");

static const cJSON *get(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

static size_t key_index(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (strcmp(k_keys[i].name, name) == 0) return i;
    assert(!"a key of k_keys");
    return 0;
}

/* Keys a class reads under a second name (its attribute_map): the table's
 * name wins when both are present, as transformers' own spelling does. */
/* Nemotron-H's older mamba_* names win when present (NemotronHConfig's
 * __post_init__ pops them over the new ones). */
static const struct {
    hy_arch arch;
    const char *key, *alias;
    bool alias_wins;
} k_alias[] = {
    {HY_ARCH_MINIMAX, "num_local_experts", "num_experts", false},
    {HY_ARCH_KIMI_LINEAR, "num_experts", "num_local_experts", false},
    {HY_ARCH_KIMI_LINEAR, "num_experts_per_token", "num_experts_per_tok", false},
    {HY_ARCH_KIMI_LINEAR, "num_shared_experts", "n_shared_experts", false},
    {HY_ARCH_KIMI_LINEAR, "moe_renormalize", "norm_topk_prob", false},
    {HY_ARCH_KIMI_LINEAR, "num_expert_group", "n_group", false},
    {HY_ARCH_BAILING_HYBRID, "num_experts", "num_local_experts", false},
    {HY_ARCH_BAILING_HYBRID, "num_experts_per_token", "num_experts_per_tok", false},
    {HY_ARCH_BAILING_HYBRID, "num_shared_experts", "n_shared_experts", false},
    {HY_ARCH_BAILING_HYBRID, "moe_renormalize", "norm_topk_prob", false},
    {HY_ARCH_BAILING_HYBRID, "num_expert_group", "n_group", false},
    {HY_ARCH_BAILING_HYBRID, "num_nextn_predict_layers", "num_mtp_layers", false},
    {HY_ARCH_NEMOTRON_H, "layers_block_type", "layer_types", false},
    {HY_ARCH_NEMOTRON_H, "n_routed_experts", "num_local_experts", false},
    {HY_ARCH_NEMOTRON_H, "n_groups", "mamba_n_groups", true},
    {HY_ARCH_NEMOTRON_H, "conv_kernel", "mamba_d_conv", true},
    {HY_ARCH_NEMOTRON_H, "time_step_min", "mamba_dt_min", true},
    {HY_ARCH_NEMOTRON_H, "use_conv_bias", "mamba_conv_bias", true},
    {HY_ARCH_NEMOTRON_H, "chunk_size", "mamba_chunk_size", true},
};

static bool is_alias(hy_arch arch, const char *name)
{
    for (size_t i = 0; i < sizeof k_alias / sizeof *k_alias; i++)
        if (k_alias[i].arch == arch && strcmp(k_alias[i].alias, name) == 0) return true;
    return false;
}

/* The name k is spelt with in config.json: its own, else an alias present
 * (an alias that wins, first). */
static const char *file_name(const cfg_ctx *c, const cfg_key *k)
{
    const cJSON *obj = k->where == AT_TOP ? c->root : c->text;
    const char *alias = NULL;
    for (size_t i = 0; i < sizeof k_alias / sizeof *k_alias; i++)
        if (k_alias[i].arch == c->arch && strcmp(k_alias[i].key, k->name) == 0 &&
            get(obj, k_alias[i].alias)) {
            alias = k_alias[i].alias;
            if (k_alias[i].alias_wins) return alias;
        }
    return get(obj, k->name) || !alias ? k->name : alias;
}

/* Reads a number of type t (KT_INT or KT_NUM) from obj[key] into *out,
 * def (JSON text) when absent; null and values outside [lo, hi] are refused. */
static int read_number(cfg_ctx *c, const cJSON *obj, const char *key, key_type t, const char *def,
                       double lo, double hi, double *out)
{
    const cJSON *v = get(obj, key);
    double x;
    if (!v) {
        x = strtod(def, NULL);
    } else if (!cJSON_IsNumber(v) || (t == KT_INT && v->valuedouble != floor(v->valuedouble))) {
        return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be %s%s", c->path, key,
                          t == KT_INT ? "an integer" : "a number",
                          cJSON_IsNull(v) ? ", not null" : "");
    } else {
        x = v->valuedouble;
    }
    if (!(x >= lo && x <= hi)) {
        if (t == KT_INT)
            return hy_err_set(c->err, HY_ERANGE, "%s: '%s' = %.0f is outside [%.0f, %.0f]", c->path,
                              key, x, lo, hi);
        return hy_err_set(c->err, HY_ERANGE, "%s: '%s' = %g is outside [%g, %g]", c->path, key, x,
                          lo, hi);
    }
    *out = x;
    return HY_OK;
}

/* Reads one KT_INT / KT_NUM / KT_BOOL key of the table into its field. */
static int read_scalar(cfg_ctx *c, const cfg_key *k)
{
    const cJSON *obj = k->where == AT_TOP ? c->root : c->text;
    const char *def = k->def[c->arch];
    char *field = (char *)&c->v + k->off;
    const char *nm = file_name(c, k);
    if (k->type == KT_BOOL) {
        const cJSON *v = get(obj, nm);
        if (v && !cJSON_IsBool(v))
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be true or false%s", c->path, nm,
                              cJSON_IsNull(v) ? ", not null" : "");
        bool b = v ? cJSON_IsTrue(v) : strncmp(def, "true", 4) == 0; /* "true; alias ..." */
        if (k->lo == k->hi && b != (k->lo != 0))
            return hy_err_set(c->err, HY_EUNSUPPORTED, "%s: %s %s is not supported", c->path, nm,
                              b ? "true" : "false");
        *(bool *)field = b;
        return HY_OK;
    }
    /* "=…" defaults are derived later (DERIVED in the field until then); a
     * default mentioning `null` takes null for what the rule says */
    const cJSON *v = get(obj, nm);
    const bool derived = def[0] == '=', null_ok = strstr(def, "`null`") != NULL;
    if ((derived && !v) || (null_ok && cJSON_IsNull(v))) {
        if (k->type == KT_INT)
            *(int *)field = DERIVED;
        else
            *(double *)field = NAN;
        return HY_OK;
    }
    double x;
    int rc = read_number(c, obj, nm, k->type, derived ? "0" : def, k->lo, k->hi, &x);
    if (rc) return rc;
    if (k->type == KT_INT)
        *(int *)field = (int)x;
    else
        *(double *)field = x;
    return HY_OK;
}

/* A string key with the one value the executor runs: its default, the
 * text between the first pair of double quotes of the table's default. */
static int read_fixed_string(cfg_ctx *c, const cfg_key *k)
{
    const char *def = k->def[c->arch], *q = strchr(def, '"');
    assert(q && strchr(q + 1, '"'));
    const int len = (int)(strchr(q + 1, '"') - q - 1);
    const cJSON *v = get(c->text, k->name);
    if (v && (!cJSON_IsString(v) || (int)strlen(v->valuestring) != len ||
              strncmp(v->valuestring, q + 1, (size_t)len) != 0))
        return hy_err_set(c->err, HY_EUNSUPPORTED, "%s: %s must be '%.*s'", c->path, k->name, len,
                          q + 1);
    return HY_OK;
}

/* transformers' convert_rope_params_to_dict: rope_scaling, when a non-empty
 * object, replaces rope_parameters; inside the chosen object rope_theta and
 * partial_rotary_factor win over the top-level keys (already read). */
static int read_rope(cfg_ctx *c, const cfg_key *k)
{
    (void)k;
    static const char *const names[2] = {"rope_scaling", "rope_parameters"};
    const cJSON *use = NULL;
    const char *which = NULL;
    for (int i = 0; i < 2; i++) {
        const cJSON *rp = get(c->text, names[i]);
        if (!rp || cJSON_IsNull(rp)) continue;
        if (!cJSON_IsObject(rp))
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be an object", c->path, names[i]);
        if (!use && (i == 1 || rp->child)) {
            use = rp;
            which = names[i];
        }
    }
    double theta = c->v.rope_theta, partial = c->v.partial_rotary;
    if (use) {
        const cJSON *ty = get(use, "rope_type");
        if (!ty) ty = get(use, "type");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default") != 0))
            return hy_err_set(c->err, HY_EUNSUPPORTED,
                              "%s: %s.rope_type '%s' is not supported (only 'default')", c->path,
                              which, cJSON_IsString(ty) ? ty->valuestring : "?");
        char dflt[2][32];
        snprintf(dflt[0], sizeof dflt[0], "%.17g", theta);
        snprintf(dflt[1], sizeof dflt[1], "%.17g", partial);
        int rc;
        /* a null base is OLMo-Hybrid's NoPE (rope_theta's default says so) */
        const cJSON *rt = get(use, "rope_theta");
        if (c->arch == HY_ARCH_OLMO_HYBRID && cJSON_IsNull(rt))
            theta = NAN;
        else if (rt && (rc = read_number(c, use, "rope_theta", KT_NUM, dflt[0], 1.0, 1e12, &theta)))
            return rc;
        /* only the classes that define the factor read it (OLMo-Hybrid rotates
         * the whole head, whatever the object says) */
        if (k_keys[key_index("partial_rotary_factor")].def[c->arch] &&
            (rc =
                 read_number(c, use, "partial_rotary_factor", KT_NUM, dflt[1], 0.0, 1.0, &partial)))
            return rc;
    }
    /* rotary_dim follows from head_dim in derive() */
    c->v.rope_theta = theta;
    c->v.partial_rotary = partial;
    return HY_OK;
}

static int read_layers(cfg_ctx *c, const cfg_key *k)
{
    hy_model_config *cfg = &c->v.c;
    const cJSON *lt = get(c->text, k->name);
    if (lt && !cJSON_IsNull(lt)) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != cfg->n_layers)
            return hy_err_set(c->err, HY_EINVAL,
                              "%s: 'layer_types' must be an array of num_hidden_layers (%d) "
                              "strings",
                              c->path, cfg->n_layers);
        for (int i = 0; i < cfg->n_layers; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, i);
            if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention") == 0)
                cfg->layer_kind[i] = HY_LAYER_ATTENTION;
            else if (cJSON_IsString(e) && strcmp(e->valuestring, "linear_attention") == 0)
                cfg->layer_kind[i] = HY_LAYER_LINEAR;
            else
                return hy_err_set(c->err, HY_EINVAL,
                                  "%s: layer_types[%d] must be 'linear_attention' or "
                                  "'full_attention'",
                                  c->path, i);
        }
        return HY_OK;
    }
    if (c->arch == HY_ARCH_KIMI_LINEAR) {
        /* KimiLinearConfig: linear_attn_config's lists (1-indexed) when both are
         * there, every layer covered; else full attention at i % 4 == 0, i > 0 */
        if (!c->kda_layers) {
            for (int i = 0; i < cfg->n_layers; i++)
                cfg->layer_kind[i] = i > 0 && i % 4 == 0 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
            return HY_OK;
        }
        bool seen[HY_MAX_LAYERS] = {false};
        int rc;
        if ((rc = mark_layers(c, c->full_layers, "full_attn_layers", HY_LAYER_ATTENTION, seen)) ||
            (rc = mark_layers(c, c->kda_layers, "kda_layers", HY_LAYER_LINEAR, seen)))
            return rc;
        for (int i = 0; i < cfg->n_layers; i++)
            if (!seen[i])
                return hy_err_set(c->err, HY_EINVAL,
                                  "%s: layer %d (number %d) is in neither "
                                  "linear_attn_config.kda_layers nor .full_attn_layers",
                                  c->path, i, i + 1);
        return HY_OK;
    }
    if (c->arch == HY_ARCH_BAILING_HYBRID) { /* BailingHybridConfig: the last of each group */
        const cfg_key *gk = &k_keys[key_index("layer_group_size")];
        c->given[gk - k_keys] = get(c->text, gk->name) != NULL;
        double size;
        int rc = read_number(c, c->text, gk->name, KT_INT, gk->def[c->arch], gk->lo, gk->hi, &size);
        if (rc) return rc;
        for (int i = 0; i < cfg->n_layers; i++)
            cfg->layer_kind[i] = (i + 1) % (int)size == 0 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
        return HY_OK;
    }
    if (c->arch == HY_ARCH_MINIMAX) { /* MiniMaxConfig: F L F L ..., full attention first */
        for (int i = 0; i < cfg->n_layers; i++)
            cfg->layer_kind[i] = (i + 1) % 2 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
        return HY_OK;
    }
    if (c->arch == HY_ARCH_OLMO_HYBRID) {
        /* OlmoHybridConfig: every fourth layer (i % 4 == 3) has full
         * attention, and the last one when that leaves none */
        bool any = false;
        for (int i = 0; i < cfg->n_layers; i++) {
            cfg->layer_kind[i] = i % 4 == 3 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
            any |= i % 4 == 3;
        }
        if (!any) cfg->layer_kind[cfg->n_layers - 1] = HY_LAYER_ATTENTION;
        return HY_OK;
    }
    /* transformers pops full_attention_interval only here, so with layer_types
     * given it is never read (nor checked) */
    const cfg_key *fi = &k_keys[key_index("full_attention_interval")];
    c->given[fi - k_keys] = get(c->text, fi->name) != NULL;
    double interval;
    int rc = read_number(c, c->text, fi->name, KT_INT, fi->def[c->arch], fi->lo, fi->hi, &interval);
    if (rc) return rc;
    for (int i = 0; i < cfg->n_layers; i++)
        cfg->layer_kind[i] = (i + 1) % (int)interval == 0 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
    return HY_OK;
}

/* MiniMax's softmax layers would take a sliding window; the executor's
 * attention is causal over the whole context, so only null (absent) runs. */
static int read_sliding(cfg_ctx *c, const cfg_key *k)
{
    const cJSON *v = get(c->text, k->name);
    if (v && !cJSON_IsNull(v))
        return hy_err_set(c->err, HY_EUNSUPPORTED,
                          "%s: sliding_window must be null: a sliding attention window is not "
                          "supported",
                          c->path);
    return HY_OK;
}

/* Qwen3NextDecoderLayer tests `layer_idx not in mlp_only_layers`: integers
 * outside the layer range simply match nothing. */
static int read_mlp_only(cfg_ctx *c, const cfg_key *k)
{
    const cJSON *mo = get(c->text, k->name);
    if (!mo || cJSON_IsNull(mo)) return HY_OK;
    if (!cJSON_IsArray(mo))
        return hy_err_set(c->err, HY_EINVAL, "%s: 'mlp_only_layers' must be an array", c->path);
    int i = 0;
    for (const cJSON *e = mo->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble))
            return hy_err_set(c->err, HY_EINVAL, "%s: mlp_only_layers[%d] must be an integer",
                              c->path, i);
        if (e->valuedouble >= 0 && e->valuedouble < c->v.c.n_layers)
            c->v.mlp_only[(int)e->valuedouble] = true;
    }
    return HY_OK;
}

/* An int list of 1-indexed layers (linear_attn_config's kda_layers or
 * full_attn_layers) marking each as kind in *cfg; seen[] collects them. */
static int mark_layers(cfg_ctx *c, const cJSON *list, const char *name, hy_layer_kind kind,
                       bool *seen)
{
    hy_model_config *cfg = &c->v.c;
    int i = 0;
    for (const cJSON *e = list->child; e; e = e->next, i++) {
        if (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 1 ||
            e->valuedouble > cfg->n_layers)
            return hy_err_set(c->err, HY_EINVAL,
                              "%s: linear_attn_config.%s[%d] must be a layer number in [1, %d] "
                              "(the list counts from 1)",
                              c->path, name, i, cfg->n_layers);
        cfg->layer_kind[(int)e->valuedouble - 1] = kind;
        seen[(int)e->valuedouble - 1] = true;
    }
    return HY_OK;
}

/* Kimi's linear_attn_config: its head_dim, num_heads and short_conv_kernel_size
 * replace the flat keys (read before it); its two layer lists are kept for
 * read_layers. */
static int read_lin_cfg(cfg_ctx *c, const cfg_key *k)
{
    const cJSON *lc = get(c->text, k->name);
    if (!lc || cJSON_IsNull(lc)) return HY_OK;
    if (!cJSON_IsObject(lc))
        return hy_err_set(c->err, HY_EINVAL, "%s: 'linear_attn_config' must be an object", c->path);
    static const struct {
        const char *name, *flat;
        size_t off;
    } sub[] = {{"head_dim", "linear_head_dim", offsetof(hy_model_config, lin_dk)},
               {"num_heads", "linear_num_heads", offsetof(hy_model_config, lin_v_heads)},
               {"short_conv_kernel_size", "linear_conv_kernel_dim",
                offsetof(hy_model_config, conv_kernel)}};
    for (size_t i = 0; i < sizeof sub / sizeof *sub; i++) {
        if (!get(lc, sub[i].name)) continue;
        const cfg_key *fk = &k_keys[key_index(sub[i].flat)];
        char key[64];
        snprintf(key, sizeof key, "linear_attn_config.%s", sub[i].name);
        const cJSON *v = get(lc, sub[i].name);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
            !(v->valuedouble >= fk->lo && v->valuedouble <= fk->hi))
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be an integer in [%.0f, %.0f]",
                              c->path, key, fk->lo, fk->hi);
        *(int *)((char *)&c->v.c + sub[i].off) = (int)v->valuedouble;
    }
    const cJSON *kda = get(lc, "kda_layers"), *full = get(lc, "full_attn_layers");
    if (cJSON_IsArray(kda) && cJSON_IsArray(full)) {
        c->kda_layers = kda;
        c->full_layers = full;
    } else if ((kda && !cJSON_IsNull(kda) && !cJSON_IsArray(kda)) ||
               (full && !cJSON_IsNull(full) && !cJSON_IsArray(full))) {
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: linear_attn_config.kda_layers and .full_attn_layers must be lists "
                          "of layer numbers",
                          c->path);
    }
    return HY_OK;
}

/* Kimi's mlp_layer_types: "dense" or "sparse" per layer. */
static int read_mlp_types(cfg_ctx *c, const cfg_key *k)
{
    hy_model_config *cfg = &c->v.c;
    const cJSON *mt = get(c->text, k->name);
    if (!mt || cJSON_IsNull(mt)) return HY_OK;
    if (!cJSON_IsArray(mt) || cJSON_GetArraySize(mt) != cfg->n_layers)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: 'mlp_layer_types' must be an array of num_hidden_layers (%d) "
                          "strings",
                          c->path, cfg->n_layers);
    for (int i = 0; i < cfg->n_layers; i++) {
        const cJSON *e = cJSON_GetArrayItem(mt, i);
        const bool dense = cJSON_IsString(e) && strcmp(e->valuestring, "dense") == 0;
        if (!dense && !(cJSON_IsString(e) && strcmp(e->valuestring, "sparse") == 0))
            return hy_err_set(c->err, HY_EINVAL,
                              "%s: mlp_layer_types[%d] must be 'dense' or 'sparse'", c->path, i);
        cfg->layer_moe[i] = !dense;
    }
    c->v.mlp_types_given = true;
    return HY_OK;
}

/* Nemotron-H's blocks: layers_block_type (alias layer_types; transformers
 * renames the older "mamba" and "attention"), else the released
 * hybrid_override_pattern, else NemotronHConfig's default M E * -. Each
 * block is one token mixer with no MLP, or one MLP (dense or routed) with
 * no mixer; their number is the layer count. */
static int read_block_types(cfg_ctx *c, const cfg_key *k)
{
    static const struct {
        const char *name, *legacy;
        char ch;
    } kinds[] = {{"linear_attention", "mamba", 'M'},
                 {"full_attention", "attention", '*'},
                 {"moe", NULL, 'E'},
                 {"mlp", NULL, '-'}};
    hy_model_config *cfg = &c->v.c;
    const char *nm = file_name(c, k);
    const cJSON *bt = get(c->text, nm), *pat = get(c->text, "hybrid_override_pattern");
    c->given[key_index("hybrid_override_pattern")] = pat != NULL;
    char ch[HY_MAX_LAYERS + 1] = "ME*-"; /* the default */
    int n = 4;
    if (bt && !cJSON_IsNull(bt)) {
        n = cJSON_IsArray(bt) ? cJSON_GetArraySize(bt) : 0;
        if (n < 1 || n > HY_MAX_LAYERS)
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be a list of 1 to %d strings",
                              c->path, nm, HY_MAX_LAYERS);
        int i = 0;
        for (const cJSON *e = bt->child; e; e = e->next, i++) {
            size_t t = 0;
            while (t < 4 && !(cJSON_IsString(e) &&
                              (strcmp(e->valuestring, kinds[t].name) == 0 ||
                               (kinds[t].legacy && strcmp(e->valuestring, kinds[t].legacy) == 0))))
                t++;
            if (t == 4)
                return hy_err_set(c->err, HY_EINVAL,
                                  "%s: %s[%d] must be 'linear_attention' (or 'mamba'), "
                                  "'full_attention' (or 'attention'), 'moe' or 'mlp'",
                                  c->path, nm, i);
            ch[i] = kinds[t].ch;
        }
    } else if (pat) {
        n = cJSON_IsString(pat) ? (int)strlen(pat->valuestring) : 0;
        if (n < 1 || n > HY_MAX_LAYERS)
            return hy_err_set(c->err, HY_EINVAL,
                              "%s: 'hybrid_override_pattern' must be a string of 1 to %d "
                              "characters",
                              c->path, HY_MAX_LAYERS);
        for (int i = 0; i < n; i++) {
            ch[i] = pat->valuestring[i];
            if (!strchr("ME*-", ch[i]))
                return hy_err_set(c->err, HY_EINVAL,
                                  "%s: hybrid_override_pattern[%d] is '%c': each block must be "
                                  "M (Mamba2), * (attention), E (MoE) or - (MLP)",
                                  c->path, i, ch[i]);
        }
    }
    cfg->n_layers = n;
    for (int i = 0; i < n; i++) {
        cfg->layer_kind[i] = ch[i] == 'M'   ? HY_LAYER_LINEAR
                             : ch[i] == '*' ? HY_LAYER_ATTENTION
                                            : HY_LAYER_MLP;
        cfg->layer_moe[i] = ch[i] == 'E';
        cfg->layer_no_mlp[i] = ch[i] == 'M' || ch[i] == '*';
    }
    return HY_OK;
}

/* Selects the architecture and the object holding the text model's keys. */
static int read_identity(cfg_ctx *c, cJSON **empty)
{
    hy_model_config *cfg = &c->v.c;
    const cJSON *archs = get(c->root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%s",
             cJSON_IsString(a0) ? a0->valuestring : "(none)");
    const cJSON *mt = get(c->root, "model_type");
    if (!cJSON_IsString(mt))
        return hy_err_set(c->err, HY_EINVAL, "%s: 'model_type' is missing", c->path);
    static const struct {
        const char *type;
        hy_arch arch;
        bool nested;
    } types[] = {
        {"qwen3_next", HY_ARCH_QWEN3_NEXT, false},
        {"qwen3_5_text", HY_ARCH_QWEN3_5, false},
        {"qwen3_5", HY_ARCH_QWEN3_5, true},
        {"qwen3_5_moe_text", HY_ARCH_QWEN3_5_MOE, false},
        {"qwen3_5_moe", HY_ARCH_QWEN3_5_MOE, true},
        {"olmo_hybrid", HY_ARCH_OLMO_HYBRID, false},
        {"minimax", HY_ARCH_MINIMAX, false},
        {"kimi_linear", HY_ARCH_KIMI_LINEAR, false},
        {"nemotron_h", HY_ARCH_NEMOTRON_H, false},
        {"bailing_hybrid", HY_ARCH_BAILING_HYBRID, false},
    };
    size_t t = 0;
    while (t < sizeof types / sizeof *types && strcmp(types[t].type, mt->valuestring) != 0) t++;
    if (t == sizeof types / sizeof *types)
        return hy_err_set(
            c->err, HY_EUNSUPPORTED,
            "%s: model_type '%s' is not supported (qwen3_next, qwen3_5_text, "
            "qwen3_5, qwen3_5_moe_text, qwen3_5_moe, olmo_hybrid, minimax, kimi_linear, "
            "nemotron_h, bailing_hybrid)",
            c->path, mt->valuestring);
    c->arch = types[t].arch;
    c->nested = types[t].nested;
    cfg->arch = c->arch;
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", k_text_type[c->arch]);
    c->text = c->root;
    if (c->nested) {
        const cJSON *tc = get(c->root, "text_config");
        if (tc && !cJSON_IsNull(tc) && !cJSON_IsObject(tc))
            return hy_err_set(c->err, HY_EINVAL, "%s: 'text_config' must be an object", c->path);
        if (cJSON_IsObject(tc)) {
            c->text = tc;
        } else { /* transformers builds the text config from its defaults */
            if (!(*empty = cJSON_CreateObject()))
                return hy_err_set(c->err, HY_ENOMEM, "out of memory");
            c->text = *empty;
        }
    }
    return HY_OK;
}

/* Log lines (one each) for what config.json says but transformers does not
 * read: keys this architecture's class does not define, a composite's text
 * keys at the top level, and text_config's own tie flag when it disagrees. */
static void log_ignored(const cfg_ctx *c)
{
    char undefined[400] = "", top[400] = "", unread[400] = "";
    size_t nu = 0, nt = 0, nr = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        const cfg_key *k = &k_keys[i];
        if (is_unused(k->def[c->arch])) {
            if (get(k->where == AT_TOP ? c->root : c->text, k->name) && nr < sizeof unread)
                nr += (size_t)snprintf(unread + nr, sizeof unread - nr, "%s%s", nr ? ", " : "",
                                       k->name);
            continue;
        }
        /* text_config is a composite's key only: a flat config's is ignored */
        bool defined = k->def[c->arch] && (c->nested || strcmp(k->name, "text_config") != 0);
        /* a name the class reads under its attribute_map (k_alias) */
        defined |= is_alias(c->arch, k->name);
        if (!defined && get(k->where == AT_TOP ? c->root : c->text, k->name)) {
            if (nu < sizeof undefined)
                nu += (size_t)snprintf(undefined + nu, sizeof undefined - nu, "%s%s",
                                       nu ? ", " : "", k->name);
        } else if (c->nested && k->where == AT_TEXT && defined && get(c->root, k->name)) {
            if (nt < sizeof top)
                nt += (size_t)snprintf(top + nt, sizeof top - nt, "%s%s", nt ? ", " : "", k->name);
        }
    }
    if (nu)
        hy_log(HY_LOG_INFO, "%s: ignoring %s: not a setting of %s, which transformers ignores too",
               c->path, undefined, k_text_type[c->arch]);
    if (nt)
        hy_log(HY_LOG_INFO,
               "%s: ignoring top-level %s: a composite config's text settings are those of "
               "text_config",
               c->path, top);
    if (nr)
        hy_log(HY_LOG_INFO,
               "%s: not reading %s: %s defines them but nothing in transformers reads them",
               c->path, unread, k_text_type[c->arch]);
    const cJSON *tt = c->nested ? get(c->text, "tie_word_embeddings") : NULL;
    if (cJSON_IsBool(tt) && cJSON_IsTrue(tt) != c->v.c.tie_embeddings)
        hy_log(HY_LOG_INFO,
               "%s: text_config.tie_word_embeddings is %s but the top-level flag (%s) decides, "
               "as in transformers' ...ForConditionalGeneration",
               c->path, cJSON_IsTrue(tt) ? "true" : "false",
               c->v.c.tie_embeddings ? "true" : "false");
}

/* What follows from the keys together: head multiples, the MoE layers, the
 * routing rule, dense widths. */
/* Fills an int key derived from others ("=…" defaults) and checks it against
 * the table's bounds, as it would be if config.json had said it. */
static int fill_derived(cfg_ctx *c, const char *key, int *field, double value)
{
    const cfg_key *k = &k_keys[key_index(key)];
    if (*field != DERIVED) return HY_OK;
    if (!(value >= k->lo && value <= k->hi))
        return hy_err_set(c->err, HY_ERANGE,
                          "%s: '%s' is not given and its default (%s) comes to %.0f, outside "
                          "[%.0f, %.0f]",
                          c->path, key, k->def[c->arch] + 1, value, k->lo, k->hi);
    *field = (int)value;
    return HY_OK;
}

/* The keys derived from others, in OlmoHybridConfig.__post_init__'s order,
 * and OLMo-Hybrid's fixed choices: plain GQA with the norms over all heads,
 * full-width RoPE, post-normalised attention layers, beta up to 2, a gated
 * output norm with its own epsilon. */
static int derive_olmo(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    if ((rc = fill_derived(c, "linear_num_key_heads", &cfg->lin_k_heads, cfg->n_heads)) ||
        (rc = fill_derived(c, "linear_num_value_heads", &cfg->lin_v_heads, cfg->n_heads)) ||
        (rc = fill_derived(c, "linear_key_head_dim", &cfg->lin_dk,
                           floor(0.75 * cfg->hidden / cfg->lin_k_heads))) ||
        (rc = fill_derived(c, "linear_value_head_dim", &cfg->lin_dv, 2.0 * cfg->lin_dk)) ||
        (rc = fill_derived(c, "num_key_value_heads", &cfg->n_kv_heads, cfg->n_heads)) ||
        (rc = fill_derived(c, "head_dim", &cfg->head_dim, cfg->hidden / cfg->n_heads)))
        return rc;
    bool lin = false, att = false;
    for (int i = 0; i < cfg->n_layers; i++) {
        lin |= cfg->layer_kind[i] == HY_LAYER_LINEAR;
        att |= cfg->layer_kind[i] == HY_LAYER_ATTENTION;
        cfg->layer_post_norm[i] = cfg->layer_kind[i] == HY_LAYER_ATTENTION;
    }
    if (!lin || !att) /* OlmoHybridConfig.validate_architecture */
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: olmo_hybrid needs at least one linear_attention and one "
                          "full_attention layer",
                          c->path);
    cfg->attn_gate = false;
    cfg->qk_norm_flat = true;
    cfg->lin_beta_scale = c->v.neg_eigval ? 2.0f : 1.0f;
    cfg->lin_norm_eps = 1e-5f; /* OlmoHybridGatedDeltaNet's o_norm, whatever rms_norm_eps says */
    c->v.partial_rotary = 1.0;
    return HY_OK;
}

/* MiniMax: head_dim null is hidden / heads; lightning layers run
 * num_attention_heads heads of head_dim keys and values with no conv; every
 * layer routes (num_local_experts, alias num_experts; intermediate_size is
 * an expert's width) and always renormalises; plain GQA without q/k norms,
 * RoPE over the whole head; the residual alpha/beta factors. */
static int derive_minimax(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    if ((rc = fill_derived(c, "head_dim", &cfg->head_dim, cfg->hidden / cfg->n_heads))) return rc;
    if (cfg->top_k > cfg->n_experts)
        return hy_err_set(c->err, HY_ERANGE, "%s: 'num_experts_per_tok' = %d is outside [1, %d]",
                          c->path, cfg->top_k, cfg->n_experts);
    cfg->lin_kind = HY_LIN_LIGHTNING;
    cfg->lin_k_heads = cfg->lin_v_heads = cfg->n_heads;
    cfg->lin_dk = cfg->lin_dv = cfg->head_dim;
    cfg->conv_kernel = 1;
    cfg->lin_norm_eps = 1e-6f; /* MiniMaxLightningAttention's norm, whatever rms_norm_eps says */
    cfg->moe_intermediate = cfg->intermediate;
    cfg->shared_intermediate = 0;
    cfg->norm_topk = true;
    cfg->attn_gate = false;
    cfg->qk_norm = false;
    cfg->scaled_residual = true;
    const double *ab = c->v.alpha_beta;
    cfg->attn_alpha = (float)ab[0], cfg->attn_beta = (float)ab[1];
    cfg->lin_alpha = (float)ab[2], cfg->lin_beta = (float)ab[3];
    cfg->mlp_alpha = (float)ab[4], cfg->mlp_beta = (float)ab[5];
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_moe[i] = true;
    c->v.partial_rotary = 1.0;
    return HY_OK;
}

/* DeepSeek's grouped routing (Kimi, Nemotron-H) over E experts: the groups
 * split them evenly, two or more each (a group's score is its two best),
 * topk_group of them at most, and top-k fits the experts of the groups
 * kept. The key names are the architecture's own. */
static int check_groups(cfg_ctx *c, const hy_model_config *cfg, const char *e_key,
                        const char *g_key, const char *k_key)
{
    const int E = cfg->n_experts, G = cfg->n_group;
    if (E < 1)
        return hy_err_set(c->err, HY_ERANGE, "%s: '%s' = %d: MoE layers need >= 1", c->path, e_key,
                          E);
    if (E % G || E / G < 2 || cfg->topk_group > G)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: %s %d must divide %s %d into groups of >= 2, and topk_group %d "
                          "must not exceed it",
                          c->path, g_key, G, e_key, E, cfg->topk_group);
    if (cfg->top_k > cfg->topk_group * (E / G))
        return hy_err_set(c->err, HY_ERANGE,
                          "%s: %s %d exceeds the %d experts of the topk_group %d groups kept",
                          c->path, k_key, cfg->top_k, cfg->topk_group * (E / G), cfg->topk_group);
    return HY_OK;
}

/* What Kimi-Linear and Ling share: KDA layers whose q, k and v heads are
 * alike, MLA layers with as many key/value heads as query heads (kv_b_proj
 * expands the latent to each), DeepSeek's MoE (sigmoid scores, groups, a
 * routed scaling, ungated shared experts of num_shared_experts × the expert
 * width, the first first_k_dense_replace layers dense unless mlp_layer_types
 * says), and an LM head of its own whatever tie_word_embeddings says. */
static int derive_kda_mla(cfg_ctx *c, hy_model_config *cfg)
{
    if (cfg->n_kv_heads != cfg->n_heads)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: num_key_value_heads %d must equal num_attention_heads %d: "
                          "kv_b_proj expands the latent to every query head",
                          c->path, cfg->n_kv_heads, cfg->n_heads);
    cfg->mla = true;
    cfg->head_dim = cfg->qk_nope + cfg->qk_rope;
    cfg->lin_kind = HY_LIN_KDA;
    cfg->lin_k_heads = cfg->lin_v_heads;
    cfg->lin_dv = cfg->lin_dk;
    cfg->attn_gate = false;
    cfg->qk_norm = false;
    if (cfg->tie_embeddings)
        hy_log(HY_LOG_INFO,
               "%s: tie_word_embeddings true has no effect on %s (its LM head is its own, as in "
               "transformers)",
               c->path, k_text_type[c->arch]);
    cfg->tie_embeddings = false;
    cfg->router = HY_ROUTER_SIGMOID_GROUPED;
    cfg->routed_scale = (float)c->v.routed_scale;
    cfg->shared_intermediate = c->v.n_shared * cfg->moe_intermediate;
    cfg->shared_gated = false;
    bool any_moe = false;
    for (int i = 0; i < cfg->n_layers; i++) {
        if (!c->v.mlp_types_given) cfg->layer_moe[i] = i >= c->v.first_dense;
        any_moe |= cfg->layer_moe[i];
    }
    if (any_moe)
        return check_groups(c, cfg, "num_experts", "num_expert_group", "num_experts_per_token");
    return HY_OK;
}

/* Kimi-Linear: KDA layers of linear_num_heads heads, keys and values of
 * linear_head_dim; MLA layers without positional encoding, as many key/value
 * heads as query heads; DeepSeek's router over sigmoid scores with groups and
 * a routed scaling, shared experts without a gate; the first
 * first_k_dense_replace layers dense unless mlp_layer_types says otherwise;
 * plain RMSNorm weights, and an LM head of its own whatever
 * tie_word_embeddings says (KimiLinearForCausalLM ties nothing). */
static int derive_kimi(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    if ((rc = fill_derived(c, "num_key_value_heads", &cfg->n_kv_heads, cfg->n_heads))) return rc;
    if (cfg->q_lora == DERIVED) cfg->q_lora = 0;
    c->v.rope_theta = NAN; /* no positional encoding anywhere */
    return derive_kda_mla(c, cfg);
}

/* Nemotron-H: blocks of one mixer or one MLP (read_block_types); Mamba2
 * layers of mamba_num_heads heads of mamba_head_dim channels, n_groups
 * groups of B and C of ssm_state_size, the conv's and projections' biases
 * as configured, dt clamped below at time_step_min in prompts; GQA without
 * positional encoding, norms or biases; relu² MLPs and experts (no gate),
 * DeepSeek's grouped sigmoid router with a routed scaling, one ungated
 * shared expert, an optional latent for the routed experts; plain RMSNorm
 * weights; an LM head of its own whatever tie_word_embeddings says. */
static int derive_nemotron(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    if ((rc = fill_derived(c, "num_key_value_heads", &cfg->n_kv_heads, cfg->n_heads))) return rc;
    if (cfg->moe_latent == DERIVED) cfg->moe_latent = 0;
    if (cfg->lin_v_heads % cfg->lin_k_heads)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: mamba_num_heads %d is not a multiple of n_groups %d", c->path,
                          cfg->lin_v_heads, cfg->lin_k_heads);
    cfg->lin_kind = HY_LIN_MAMBA2;
    cfg->lin_norm_eps = cfg->rms_eps;
    cfg->dt_min = (float)c->v.dt_min;
    c->v.rope_theta = NAN; /* no positional encoding */
    cfg->attn_gate = false;
    cfg->qk_norm = false;
    cfg->mlp_act = HY_MLP_RELU2;
    if (cfg->tie_embeddings)
        hy_log(HY_LOG_INFO,
               "%s: tie_word_embeddings true has no effect on nemotron_h (its LM head is its "
               "own, as in transformers)",
               c->path);
    cfg->tie_embeddings = false;
    cfg->router = HY_ROUTER_SIGMOID_GROUPED;
    cfg->routed_scale = (float)c->v.routed_scale;
    cfg->shared_gated = false;
    bool any_moe = false;
    for (int i = 0; i < cfg->n_layers; i++) any_moe |= cfg->layer_moe[i];
    if (any_moe) return check_groups(c, cfg, "n_routed_experts", "n_group", "num_experts_per_tok");
    return HY_OK;
}

/* Ling (bailing_hybrid): KDA layers of linear_num_heads (else
 * num_attention_heads) heads of linear_head_dim (else head_dim, which the
 * class then rewrites to qk_rope_head_dim), their conv of
 * linear_conv_kernel_dim (else short_conv_kernel_size) taps, the bounded
 * gate and full-rank gate projections; MLA without a query bottleneck (the
 * class ignores q_lora_rank), RoPE on the shared key and the queries'
 * rope part (default RoPE only: its yarn scaling would change the scale), a
 * sigmoid gate per head and attention_bias on kv_a_proj_with_mqa and the
 * output projection; DeepSeek's MoE as Kimi's, its first
 * first_k_dense_replace layers dense unless mlp_layer_types says; an LM head
 * of its own whatever tie_word_embeddings says. */
static int derive_ling(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    if ((rc = fill_derived(c, "num_key_value_heads", &cfg->n_kv_heads, cfg->n_heads)) ||
        (rc = fill_derived(c, "linear_num_heads", &cfg->lin_v_heads, cfg->n_heads)) ||
        (rc = fill_derived(c, "linear_head_dim", &cfg->lin_dk, cfg->head_dim)) ||
        (rc = fill_derived(c, "linear_conv_kernel_dim", &cfg->conv_kernel, c->v.short_conv)))
        return rc;
    cfg->q_lora = 0;
    cfg->mla_head_gate = true;
    cfg->mla_bias = c->v.attention_bias;
    cfg->kda_full_gates = true;
    cfg->kda_lower_bound = (float)c->v.kda_lower_bound;
    return derive_kda_mla(c, cfg);
}

/* RoPE's base and width: the rotated part of each head is even; none with
 * OLMo-Hybrid's null base. */
static int derive_rope(cfg_ctx *c, hy_model_config *cfg)
{
    const double partial = c->v.partial_rotary;
    cfg->rope_theta = isnan(c->v.rope_theta) ? 0.0 : c->v.rope_theta;
    if (isnan(c->v.rope_theta)) {
        cfg->rotary_dim = 0;
        return HY_OK;
    }
    /* MLA (Ling) rotates the queries' and the shared key's qk_rope part */
    cfg->rotary_dim = cfg->mla ? cfg->qk_rope : (int)(cfg->head_dim * partial);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: head_dim %d x partial_rotary_factor %g gives %d rotary dims; need "
                          "an even number >= 2",
                          c->path, cfg->head_dim, partial, cfg->rotary_dim);
    return HY_OK;
}

static int derive(cfg_ctx *c, hy_model_config *cfg)
{
    *cfg = c->v.c;
    cfg->rms_eps = (float)c->v.rms_eps;
    cfg->norm_offset = hy_family_of(c->arch)->zero_centred_norms;
    /* Qwen's choices; OLMo-Hybrid's own replace them */
    cfg->attn_gate = true;
    cfg->qk_norm = true;
    cfg->qk_norm_flat = false;
    cfg->lin_kind = HY_LIN_GDN;
    cfg->lin_beta_scale = 1.0f;
    cfg->lin_norm_eps = cfg->rms_eps;
    cfg->shared_gated = true;
    cfg->router = HY_ROUTER_SOFTMAX;
    cfg->routed_scale = 1.0f;
    int rc;
    if (c->arch == HY_ARCH_OLMO_HYBRID && (rc = derive_olmo(c, cfg))) return rc;
    if (c->arch == HY_ARCH_MINIMAX && (rc = derive_minimax(c, cfg))) return rc;
    if (c->arch == HY_ARCH_KIMI_LINEAR && (rc = derive_kimi(c, cfg))) return rc;
    if (c->arch == HY_ARCH_NEMOTRON_H && (rc = derive_nemotron(c, cfg))) return rc;
    if (c->arch == HY_ARCH_BAILING_HYBRID && (rc = derive_ling(c, cfg))) return rc;
    if (c->v.attention_bias && c->arch != HY_ARCH_BAILING_HYBRID)
        return hy_err_set(c->err, HY_EUNSUPPORTED, "%s: attention_bias true is not supported",
                          c->path);
    if ((rc = derive_rope(c, cfg))) return rc;
    if (cfg->n_heads % cfg->n_kv_heads)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                          c->path, cfg->n_heads, cfg->n_kv_heads);
    if (cfg->lin_v_heads % cfg->lin_k_heads)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: linear_num_value_heads %d is not a multiple of "
                          "linear_num_key_heads %d",
                          c->path, cfg->lin_v_heads, cfg->lin_k_heads);
    if (c->arch == HY_ARCH_QWEN3_5_MOE && cfg->n_experts == 0)
        return hy_err_set(c->err, HY_ERANGE,
                          "%s: 'num_experts' = 0 is outside [1, 4096] (%s routes every layer)",
                          c->path, k_text_type[c->arch]);
    if (cfg->n_experts > 0 && cfg->top_k > cfg->n_experts)
        return hy_err_set(c->err, HY_ERANGE, "%s: 'num_experts_per_tok' = %d%s is outside [1, %d]",
                          c->path, cfg->top_k,
                          c->given[key_index("num_experts_per_tok")] ? ""
                                                                     : " (transformers' default)",
                          cfg->n_experts);
    /* Qwen3_5MoeTopKRouter renormalises unconditionally (no such setting). */
    if (c->arch == HY_ARCH_QWEN3_5_MOE) cfg->norm_topk = true;
    for (int i = 0; i < cfg->n_layers; i++) {
        if (c->arch == HY_ARCH_QWEN3_NEXT)
            cfg->layer_moe[i] =
                cfg->n_experts > 0 && (i + 1) % c->v.sparse_step == 0 && !c->v.mlp_only[i];
        else if (c->arch != HY_ARCH_MINIMAX && c->arch != HY_ARCH_KIMI_LINEAR &&
                 c->arch != HY_ARCH_NEMOTRON_H && c->arch != HY_ARCH_BAILING_HYBRID)
            cfg->layer_moe[i] = c->arch == HY_ARCH_QWEN3_5_MOE;
        if (!cfg->layer_moe[i] && !cfg->layer_no_mlp[i] && cfg->intermediate == 0)
            return hy_err_set(c->err, HY_EINVAL,
                              "%s: layer %d has a dense MLP but 'intermediate_size' is 0", c->path,
                              i);
    }
    return HY_OK;
}

/* Python's json writes the non-finite floats as bare Infinity, -Infinity
 * and NaN, which released config.json files carry (Nemotron-H's
 * time_step_limit) and transformers reads; JSON, and cJSON, have no such
 * literals. Outside strings they become 1e999 and -1e999 (parsed as ±inf)
 * and the string "NaN", so a key the loader reads refuses them with its own
 * message (out of range, or not a number) and any other key is simply not
 * read. Returns a malloc'd copy, or NULL when out of memory. */
static char *nonfinite_to_json(const char *text)
{
    const size_t n = strlen(text);
    /* "NaN" (3) → "\"NaN\"" (5) is the only growth: 5/3 of the text at most */
    char *out = malloc(2 * n + 16), *o = out;
    if (!out) return NULL;
    bool in_str = false;
    for (const char *p = text; *p;) {
        if (in_str) {
            if (*p == '\\' && p[1])
                *o++ = *p++;
            else if (*p == '"')
                in_str = false;
            *o++ = *p++;
        } else if (*p == '"') {
            in_str = true;
            *o++ = *p++;
        } else if (strncmp(p, "-Infinity", 9) == 0) {
            memcpy(o, "-1e999", 6), o += 6, p += 9;
        } else if (strncmp(p, "Infinity", 8) == 0) {
            memcpy(o, "1e999", 5), o += 5, p += 8;
        } else if (strncmp(p, "NaN", 3) == 0) {
            memcpy(o, "\"NaN\"", 5), o += 5, p += 3;
        } else {
            *o++ = *p++;
        }
    }
    *o = '\0';
    return out;
}

int hy_config_parse(const char *text, const char *path, hy_model_config *cfg, hy_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    char *json = nonfinite_to_json(text);
    if (!json) return hy_err_set(err, HY_ENOMEM, "out of memory");
    cJSON *root = cJSON_Parse(json), *empty = NULL;
    free(json);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hy_err_set(err, HY_EFORMAT, "%s: not a well-formed JSON object", path);
    }
    cfg_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        cJSON_Delete(root);
        return hy_err_set(err, HY_ENOMEM, "out of memory");
    }
    c->root = root;
    c->path = path;
    c->err = err;
    int rc = read_identity(c, &empty);
    for (size_t i = 0; rc == HY_OK && i < N_KEYS; i++) {
        const cfg_key *k = &k_keys[i];
        /* not a key of this class, one it never reads, or one read with another */
        if (!k->def[c->arch] || is_unused(k->def[c->arch]) || k->deferred) continue;
        c->given[i] = get(k->where == AT_TOP ? root : c->text, file_name(c, k)) != NULL;
        rc = k->read ? k->read(c, k) : read_scalar(c, k);
    }
    if (rc == HY_OK) rc = derive(c, cfg);
    if (rc == HY_OK)
        log_ignored(c);
    else
        memset(cfg, 0, sizeof *cfg);
    free(c);
    cJSON_Delete(empty);
    cJSON_Delete(root);
    return rc;
}

int hy_config_load(const char *dir, hy_model_config *cfg, hy_err *err)
{
    char path[PATH_MAX], *text = NULL;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = hy_read_file(path, 16u << 20, &text, NULL, err);
    if (rc != HY_OK) return rc;
    rc = hy_config_parse(text, path, cfg, err);
    hy_free(text);
    return rc;
}

int hy_config_conv_dim(const hy_model_config *c)
{
    return 2 * c->lin_k_heads * c->lin_dk + c->lin_v_heads * c->lin_dv;
}

size_t hy_config_linear_state_floats(const hy_model_config *c)
{
    return (size_t)c->lin_v_heads * c->lin_dk * c->lin_dv +
           (size_t)(c->conv_kernel - 1) * (size_t)hy_config_conv_dim(c);
}

/* Weights of one layer's token mixer and MLP, in floats. */
static size_t mixer_params(const hy_model_config *c, int i)
{
    size_t H = (size_t)c->hidden;
    if (c->layer_kind[i] == HY_LAYER_MLP) return 0;
    if (c->layer_kind[i] == HY_LAYER_LINEAR && c->lin_kind == HY_LIN_MAMBA2) {
        const size_t I = (size_t)c->lin_v_heads * c->lin_dv, C = (size_t)hy_config_conv_dim(c);
        const size_t nh = (size_t)c->lin_v_heads, P = I + C + nh;
        /* in_proj (z | xBC | dt), conv, A_log, D, dt_bias, the gated norm, out_proj */
        return H * P + C * (size_t)c->conv_kernel + 3 * nh + I + I * H +
               (c->lin_conv_bias ? C : 0) + (c->lin_proj_bias ? P + H : 0);
    }
    if (c->layer_kind[i] == HY_LAYER_LINEAR && c->lin_kind == HY_LIN_KDA) {
        const size_t d = (size_t)c->lin_dk, Q = (size_t)c->lin_v_heads * d;
        /* q, k, v, the gate bottlenecks, b; convs; A, dt_bias, norm; o_proj */
        return H * (3 * Q + 2 * d + (size_t)c->lin_v_heads) + 2 * d * Q +
               3 * Q * (size_t)c->conv_kernel + (size_t)c->lin_v_heads + Q + d + Q * H;
    }
    if (c->layer_kind[i] == HY_LAYER_ATTENTION && c->mla) {
        const size_t nh = (size_t)c->n_heads, qk = (size_t)(c->qk_nope + c->qk_rope);
        const size_t R = (size_t)c->kv_lora, ql = (size_t)c->q_lora;
        const size_t q = ql ? H * ql + ql + ql * nh * qk : H * nh * qk;
        return q + H * (R + (size_t)c->qk_rope) + R + R * nh * (size_t)(c->qk_nope + c->v_head) +
               nh * (size_t)c->v_head * H;
    }
    if (c->layer_kind[i] == HY_LAYER_LINEAR && c->lin_kind == HY_LIN_LIGHTNING) {
        const size_t d = (size_t)c->lin_v_heads * c->lin_dv; /* qkv, output gate, out, norm */
        return H * 4 * d + d * H + d;
    }
    if (c->layer_kind[i] == HY_LAYER_LINEAR) {
        size_t cd = (size_t)hy_config_conv_dim(c), vd = (size_t)c->lin_v_heads * c->lin_dv;
        return H * (cd + vd + 2 * (size_t)c->lin_v_heads) + cd * (size_t)c->conv_kernel +
               2 * (size_t)c->lin_v_heads + (size_t)c->lin_dv + vd * H;
    }
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    size_t norms = !c->qk_norm ? 0 : c->qk_norm_flat ? qd + kd : 2 * (size_t)c->head_dim;
    return H * ((c->attn_gate ? 2 : 1) * qd + 2 * kd) + qd * H + norms;
}

/* One MLP of width I from and to width D: 3·D·I for SwiGLU, 2·D·I for relu²,
 * with its biases when bias. */
static size_t ffn_params(const hy_model_config *c, size_t D, size_t I, bool bias)
{
    return (c->mlp_act == HY_MLP_SWIGLU ? 3 : 2) * D * I + (bias ? I + D : 0);
}

static size_t mlp_params(const hy_model_config *c, int i, int active_only)
{
    size_t H = (size_t)c->hidden;
    if (c->layer_no_mlp[i]) return 0;
    if (!c->layer_moe[i]) return ffn_params(c, H, (size_t)c->intermediate, c->mlp_bias);
    size_t e = active_only ? (size_t)c->top_k : (size_t)c->n_experts;
    const size_t D = c->moe_latent ? (size_t)c->moe_latent : H; /* the experts' width */
    const size_t lat = c->moe_latent ? 2 * H * D + (c->mlp_bias ? D + H : 0) : 0;
    return H * (size_t)c->n_experts + e * ffn_params(c, D, (size_t)c->moe_intermediate, false) +
           lat + ffn_params(c, H, (size_t)c->shared_intermediate, c->mlp_bias) +
           (c->shared_gated && c->shared_intermediate ? H : 0);
}

size_t hy_config_param_count(const hy_model_config *c)
{
    size_t H = (size_t)c->hidden, n = (size_t)c->vocab * H * (c->tie_embeddings ? 1 : 2) + H;
    for (int i = 0; i < c->n_layers; i++) {
        /* a block of one mixer or one MLP has one norm, else two */
        const bool one = c->layer_no_mlp[i] || c->layer_kind[i] == HY_LAYER_MLP;
        n += (one ? 1 : 2) * H + mixer_params(c, i) + mlp_params(c, i, 0);
    }
    return n;
}

double hy_config_prefill_flops(const hy_model_config *c, int64_t ctx0, int64_t n)
{
    double f = 2.0 * (double)c->vocab * c->hidden; /* last-token logits */
    for (int i = 0; i < c->n_layers; i++) {
        double w = (double)mixer_params(c, i) + (double)mlp_params(c, i, 1);
        f += 2.0 * w * (double)n;
        if (c->layer_kind[i] == HY_LAYER_ATTENTION) {
            /* QKᵀ and PV over the causal triangle after ctx0 cached keys. */
            double pairs = (double)n * (double)ctx0 + (double)n * (double)(n + 1) / 2.0;
            const double dkv = c->mla ? (double)(c->qk_nope + c->qk_rope + c->v_head)
                                      : 2.0 * c->head_dim; /* q·k and p·v widths */
            f += 2.0 * pairs * dkv * c->n_heads;
        } else if (c->layer_kind[i] == HY_LAYER_LINEAR) {
            /* Delta rule: read-out, correction and update, each ~2·dk·dv per token and head;
             * lightning and Mamba2: the decay (1), the update and the read-out (2 each). */
            const bool plain = c->lin_kind == HY_LIN_LIGHTNING || c->lin_kind == HY_LIN_MAMBA2;
            const double per = plain ? 5.0 : 6.0;
            f += per * (double)n * c->lin_v_heads * c->lin_dk * c->lin_dv;
        }
    }
    return f;
}

int hy_config_keys_markdown(char *buf, size_t cap)
{
    size_t len = 0;
#define OUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, __VA_ARGS__);   \
        if (n_ < 0) return HY_EINVAL;                                                              \
        len += (size_t)n_;                                                                         \
    } while (0)
    OUT("| key | read from | type |");
    for (int a = 0; a < N_ARCH; a++) OUT(" %s |", k_text_type[a]);
    OUT(" the executor runs | meaning |\n|---|---|---|");
    for (int a = 0; a < N_ARCH; a++) OUT("---|");
    OUT("---|---|\n");
    static const char *const tnames[] = {"int", "number", "bool"};
    for (size_t i = 0; i < N_KEYS; i++) {
        const cfg_key *k = &k_keys[i];
        OUT("| `%s` | %s | %s |", k->name, k->where == AT_TOP ? "top level" : "text",
            k->type == KT_OTHER ? k->tname : tnames[k->type]);
        for (int a = 0; a < N_ARCH; a++) {
            if (!k->def[a])
                OUT(" — |");
            else if (is_unused(k->def[a]))
                OUT(" unused |");
            else if (k->type == KT_OTHER)
                OUT(" %s |", k->def[a]);
            else if (k->def[a][0] == '=') /* derived: "=<when>: <rule>" */
                OUT(" %s |", k->def[a] + 1);
            else if (strchr(k->def[a], ';')) /* "<default>; <null rule>" */
                OUT(" `%.*s`%s |", (int)strcspn(k->def[a], ";"), k->def[a],
                    k->def[a] + strcspn(k->def[a], ";"));
            else
                OUT(" `%s` |", k->def[a]);
        }
        if (k->type == KT_INT)
            OUT(" [%.0f, %.0f] |", k->lo, k->hi);
        else if (k->type == KT_NUM)
            OUT(" [%g, %g] |", k->lo, k->hi);
        else if (k->type == KT_BOOL)
            OUT(" %s |", k->lo != k->hi ? "`true`, `false`"
                         : k->lo        ? "`true` only"
                                        : "`false` only");
        else
            OUT(" %s |", k->runs);
        OUT(" %s |\n", k->meaning);
    }
#undef OUT
    return len < cap ? (int)len : HY_ERANGE;
}

int hy_config_kv_k(const hy_model_config *c)
{
    return c->mla ? c->kv_lora : c->n_kv_heads * c->head_dim;
}

int hy_config_kv_v(const hy_model_config *c)
{
    return c->mla ? c->qk_rope : c->n_kv_heads * c->head_dim;
}
