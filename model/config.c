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

enum { N_ARCH = HY_ARCH_COUNT, MAX_KEYS = 48 };
_Static_assert(HY_ARCH_QWEN3_NEXT == 0 && HY_ARCH_QWEN3_5 == 1 && HY_ARCH_QWEN3_5_MOE == 2 &&
                   HY_ARCH_OLMO_HYBRID == 3 && HY_ARCH_MINIMAX == 4 && N_ARCH == 5,
               "k_keys' default columns are indexed by hy_arch");

/* The text model type of each architecture, as transformers names it. */
static const char *const k_text_type[N_ARCH] = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
                                                "olmo_hybrid", "minimax"};

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
    double alpha_beta[6]; /* MiniMax: full-attention, linear-attention and MLP alpha, beta */
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
    bool given[MAX_KEYS]; /* k_keys[i] was present in config.json */
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

static int read_act(cfg_ctx *c, const cfg_key *k);
static int read_rope(cfg_ctx *c, const cfg_key *k);
static int read_layers(cfg_ctx *c, const cfg_key *k);
static int read_mlp_only(cfg_ctx *c, const cfg_key *k);
static int read_sliding(cfg_ctx *c, const cfg_key *k);

#define V(f) offsetof(cfg_vals, f)
/* Table rows: a scalar key read in table order, or one with its own reader. */
#define SCALAR(nm, at, ty, field, d0, d1, d2, d3, d4, lo_, hi_, what)                              \
    {                                                                                              \
        .name = nm, .where = at, .type = ty, .off = V(field), .def = {d0, d1, d2, d3, d4},         \
        .lo = lo_, .hi = hi_, .meaning = what                                                      \
    }
#define OTHER(nm, at, tn, d0, d1, d2, d3, d4, reader, runs_, what, later)                          \
    {                                                                                              \
        .name = nm, .where = at, .type = KT_OTHER, .def = {d0, d1, d2, d3, d4}, .read = reader,    \
        .tname = tn, .runs = runs_, .meaning = what, .deferred = later                             \
    }

/* Every key the loader reads, in the order it reads them. Defaults are
 * transformers 5.23's (configuration_qwen3_next.py, configuration_qwen3_5.py,
 * configuration_qwen3_5_moe.py, configuration_olmo_hybrid.py,
 * configuration_minimax.py; RoPE defaults
 * from modeling_rope_utils.py). A default written "=<when>: <rule>" is
 * derived from other keys (derive()) when the key is absent or, where <when>
 * says `null`, null; a default mentioning `null` accepts null. */
static const cfg_key k_keys[] = {
    OTHER("model_type", AT_TOP, "string", "required", "required", "required", "required",
          "required", NULL,
          "`qwen3_next`; `qwen3_5_text` or `qwen3_5` (nested); `qwen3_5_moe_text` or "
          "`qwen3_5_moe` (nested); `olmo_hybrid`; `minimax`",
          "selects the architecture; `qwen3_5` and `qwen3_5_moe` are the vision-language "
          "composites whose text model is under `text_config`",
          true),
    OTHER("architectures", AT_TOP, "list of strings", "none", "none", "none", "none", "none", NULL,
          "any", "recorded (the first entry) for reports; the executor is chosen by `model_type`",
          true),
    OTHER("text_config", AT_TOP, "object", NULL, "`{}` (all defaults)", "`{}` (all defaults)", NULL,
          NULL, NULL, "an object or null",
          "the text model's keys of a composite config; its own `model_type` is not consulted",
          true),
    SCALAR("vocab_size", AT_TEXT, KT_INT, c.vocab, "151936", "248320", "248320", "100352", "32000",
           1, 1 << 24, "rows of the embedding and of the LM head"),
    SCALAR("hidden_size", AT_TEXT, KT_INT, c.hidden, "2048", "4096", "2048", "3840", "4096", 1,
           1 << 16, "width of the residual stream"),
    SCALAR("num_hidden_layers", AT_TEXT, KT_INT, c.n_layers, "48", "32", "40", "32", "32", 1,
           HY_MAX_LAYERS, "decoder layers; a tensor of a layer beyond them is an error"),
    SCALAR("intermediate_size", AT_TEXT, KT_INT, c.intermediate, "5632", "12288", NULL, "11008",
           "14336", 0, 1 << 20, "width of a dense (SwiGLU) MLP; 0 only where no layer is dense"),
    SCALAR("num_attention_heads", AT_TEXT, KT_INT, c.n_heads, "16", "16", "16", "30", "32", 1, 1024,
           "query heads of a full-attention layer; a multiple of `num_key_value_heads`"),
    SCALAR("num_key_value_heads", AT_TEXT, KT_INT, c.n_kv_heads, "2", "4", "2",
           "=`null`: `num_attention_heads`", "8", 1, 1024,
           "key/value heads of a full-attention layer (GQA)"),
    SCALAR("head_dim", AT_TEXT, KT_INT, c.head_dim, "256", "256", "256",
           "=absent: `hidden_size` / `num_attention_heads`",
           "=`null`: `hidden_size` / `num_attention_heads`", 2, 4096,
           "width of a full-attention head"),
    OTHER("hidden_act", AT_TEXT, "string", "`\"silu\"`", "`\"silu\"`", "`\"silu\"`", "`\"silu\"`",
          "`\"silu\"`", read_act, "`\"silu\"` only", "activation of every MLP", false),
    SCALAR("attention_bias", AT_TEXT, KT_BOOL, attention_bias, "false", "false", "false", "false",
           NULL, 0, 0, "biases on the q/k/v/o projections"),
    SCALAR("rms_norm_eps", AT_TEXT, KT_NUM, rms_eps, "1e-06", "1e-06", "1e-06", "1e-06", "1e-05", 0,
           1, "epsilon of every RMSNorm"),
    SCALAR("linear_num_key_heads", AT_TEXT, KT_INT, c.lin_k_heads, "16", "16", "16",
           "=`null`: `num_attention_heads`", NULL, 1, 1024,
           "query/key heads of a Gated DeltaNet layer"),
    SCALAR("linear_num_value_heads", AT_TEXT, KT_INT, c.lin_v_heads, "32", "32", "32",
           "=`null`: `num_attention_heads`", NULL, 1, 1024,
           "value heads of a Gated DeltaNet layer; a multiple of `linear_num_key_heads`"),
    SCALAR("linear_key_head_dim", AT_TEXT, KT_INT, c.lin_dk, "128", "128", "128",
           "=`null`: int(0.75 × `hidden_size` / `linear_num_key_heads`)", NULL, 1, 1024,
           "key width of a Gated DeltaNet head"),
    SCALAR("linear_value_head_dim", AT_TEXT, KT_INT, c.lin_dv, "128", "128", "128",
           "=`null`: 2 × `linear_key_head_dim`", NULL, 1, 1024,
           "value width of a Gated DeltaNet head"),
    SCALAR("linear_allow_neg_eigval", AT_TEXT, KT_BOOL, neg_eigval, NULL, NULL, NULL, "true", NULL,
           0, 1,
           "beta = 2·sigmoid(b) instead of sigmoid(b): the delta rule's eigenvalues 1 − beta "
           "then reach down to −1"),
    SCALAR("linear_conv_kernel_dim", AT_TEXT, KT_INT, c.conv_kernel, "4", "4", "4", "4", NULL, 1,
           16, "taps of the causal short convolution before the delta rule"),
    SCALAR("rope_theta", AT_TEXT, KT_NUM, rope_theta, "10000.0", "10000.0", "10000.0",
           "10000.0; `null`: no RoPE", "1000000.0", 1, 1e12,
           "RoPE base where the RoPE object does not give one; OLMo-Hybrid runs without "
           "positional encoding (NoPE) when the base in effect is null"),
    SCALAR("partial_rotary_factor", AT_TEXT, KT_NUM, partial_rotary, "0.25", "0.25", "0.25", NULL,
           NULL, 0, 1,
           "rotated fraction of `head_dim` where the RoPE object does not give one; "
           "int(head_dim x factor) must be even and >= 2"),
    OTHER("rope_parameters", AT_TEXT, "object", "`null`", "`null`", "`null`", "`null`", "`null`",
          read_rope, "`rope_type` (or `type`) `\"default\"`; M-RoPE sections accepted",
          "RoPE settings (`rope_theta`, `partial_rotary_factor`) that win over the top-level "
          "keys; for text every M-RoPE section sees the same position, which is plain RoPE",
          false),
    OTHER("rope_scaling", AT_TEXT, "object", "`null`", "`null`", "`null`", "`null`", "`null`", NULL,
          "as `rope_parameters`",
          "the older name: when a non-empty object it replaces `rope_parameters` entirely", true),
    OTHER("layer_types", AT_TEXT, "list of strings", "`null`", "`null`", "`null`", "`null`",
          "`null`", read_layers,
          "`num_hidden_layers` entries, each `\"linear_attention\"` or `\"full_attention\"`",
          "the token mixer of each layer; null derives it from `full_attention_interval`", false),
    {.name = "full_attention_interval",
     .where = AT_TEXT,
     .type = KT_INT,
     .def = {"4", "4", "4", NULL, NULL},
     .lo = 1,
     .hi = HY_MAX_LAYERS,
     .meaning = "read only when `layer_types` is null: layer i has full attention when "
                "(i + 1) % interval == 0, else linear attention",
     .deferred = true},
    SCALAR("num_experts", AT_TEXT, KT_INT, c.n_experts, "512", NULL, "256", NULL, NULL, 0, 4096,
           "routed experts per MoE layer; 0 (Qwen3-Next only) makes every layer dense"),
    SCALAR("num_experts_per_tok", AT_TEXT, KT_INT, c.top_k, "10", NULL, "8", NULL, "2", 1, 4096,
           "experts each token is routed to; at most `num_experts`"),
    SCALAR("moe_intermediate_size", AT_TEXT, KT_INT, c.moe_intermediate, "512", NULL, "512", NULL,
           NULL, 1, 1 << 20, "width of a routed expert's SwiGLU"),
    SCALAR("shared_expert_intermediate_size", AT_TEXT, KT_INT, c.shared_intermediate, "512", NULL,
           "512", NULL, NULL, 0, 1 << 20,
           "width of the sigmoid-gated shared expert of every MoE layer; 0: none (its tensors "
           "must then be absent)"),
    SCALAR("norm_topk_prob", AT_TEXT, KT_BOOL, c.norm_topk, "true", NULL, NULL, NULL, NULL, 0, 1,
           "renormalise the top-k routing weights to sum 1; the Qwen3.5 MoE router always does, "
           "whatever the key says"),
    SCALAR("decoder_sparse_step", AT_TEXT, KT_INT, sparse_step, "1", NULL, NULL, NULL, NULL, 1,
           HY_MAX_LAYERS,
           "layer i is MoE when (i + 1) % step == 0 and i is not in `mlp_only_layers` (Qwen3.5 "
           "MoE routes every layer)"),
    OTHER("mlp_only_layers", AT_TEXT, "list of ints", "`[]`", NULL, NULL, NULL, NULL, read_mlp_only,
          "integers; those outside [0, num_hidden_layers) match no layer",
          "layers with a dense MLP although the sparse step would route them", false),
    SCALAR("num_local_experts", AT_TEXT, KT_INT, c.n_experts, NULL, NULL, NULL, NULL,
           "8; `num_experts` as alias", 1, 4096,
           "routed experts of every MiniMax layer (`num_experts` is read when this key is absent)"),
    OTHER("sliding_window", AT_TEXT, "int or null", NULL, NULL, NULL, NULL, "`null`", read_sliding,
          "`null` only",
          "a sliding attention window; the executor attends causally over everything", false),
    SCALAR("block_size", AT_TEXT, KT_INT, block_size, NULL, NULL, NULL, NULL, "256", 1, 1 << 20,
           "lightning attention's prefill block; the result does not depend on it (fp32 rounding)"),
    SCALAR("full_attn_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[0], NULL, NULL, NULL, NULL, "1",
           -1e6, 1e6, "a softmax-attention layer's x = alpha·norm(x) + beta·attn(norm(x))"),
    SCALAR("full_attn_beta_factor", AT_TEXT, KT_NUM, alpha_beta[1], NULL, NULL, NULL, NULL, "1",
           -1e6, 1e6, "see `full_attn_alpha_factor`"),
    SCALAR("linear_attn_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[2], NULL, NULL, NULL, NULL, "1",
           -1e6, 1e6, "the same for a lightning-attention layer"),
    SCALAR("linear_attn_beta_factor", AT_TEXT, KT_NUM, alpha_beta[3], NULL, NULL, NULL, NULL, "1",
           -1e6, 1e6, "see `linear_attn_alpha_factor`"),
    SCALAR("mlp_alpha_factor", AT_TEXT, KT_NUM, alpha_beta[4], NULL, NULL, NULL, NULL, "1", -1e6,
           1e6, "the same around the MoE: x = alpha·norm(x) + beta·moe(norm(x))"),
    SCALAR("mlp_beta_factor", AT_TEXT, KT_NUM, alpha_beta[5], NULL, NULL, NULL, NULL, "1", -1e6,
           1e6, "see `mlp_alpha_factor`"),
    SCALAR("tie_word_embeddings", AT_TOP, KT_BOOL, c.tie_embeddings, "false", "false", "false",
           "false", "false", 0, 1,
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
    if (k->type == KT_BOOL) {
        const cJSON *v = get(obj, k->name);
        if (v && !cJSON_IsBool(v))
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be true or false%s", c->path,
                              k->name, cJSON_IsNull(v) ? ", not null" : "");
        bool b = v ? cJSON_IsTrue(v) : strcmp(def, "true") == 0;
        if (k->lo == k->hi && b != (k->lo != 0))
            return hy_err_set(c->err, HY_EUNSUPPORTED, "%s: %s %s is not supported", c->path,
                              k->name, b ? "true" : "false");
        *(bool *)field = b;
        return HY_OK;
    }
    /* "=…" defaults are derived later (DERIVED in the field until then); a
     * default mentioning `null` takes null for what the rule says */
    const cJSON *v = get(obj, k->name);
    const bool derived = def[0] == '=', null_ok = strstr(def, "`null`") != NULL;
    if ((derived && !v) || (null_ok && cJSON_IsNull(v))) {
        if (k->type == KT_INT)
            *(int *)field = DERIVED;
        else
            *(double *)field = NAN;
        return HY_OK;
    }
    double x;
    int rc = read_number(c, obj, k->name, k->type, derived ? "0" : def, k->lo, k->hi, &x);
    if (rc) return rc;
    if (k->type == KT_INT)
        *(int *)field = (int)x;
    else
        *(double *)field = x;
    return HY_OK;
}

static int read_act(cfg_ctx *c, const cfg_key *k)
{
    const cJSON *act = get(c->text, k->name);
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return hy_err_set(c->err, HY_EUNSUPPORTED, "%s: hidden_act must be 'silu'", c->path);
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
    };
    size_t t = 0;
    while (t < sizeof types / sizeof *types && strcmp(types[t].type, mt->valuestring) != 0) t++;
    if (t == sizeof types / sizeof *types)
        return hy_err_set(c->err, HY_EUNSUPPORTED,
                          "%s: model_type '%s' is not supported (qwen3_next, qwen3_5_text, "
                          "qwen3_5, qwen3_5_moe_text, qwen3_5_moe, olmo_hybrid, minimax)",
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
    char undefined[400] = "", top[400] = "";
    size_t nu = 0, nt = 0;
    for (size_t i = 0; i < N_KEYS; i++) {
        const cfg_key *k = &k_keys[i];
        /* text_config is a composite's key only: a flat config's is ignored */
        bool defined = k->def[c->arch] && (c->nested || strcmp(k->name, "text_config") != 0);
        /* MiniMaxConfig's attribute_map: num_experts is num_local_experts */
        defined |= c->arch == HY_ARCH_MINIMAX && strcmp(k->name, "num_experts") == 0;
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
    const cfg_key *le = &k_keys[key_index("num_local_experts")];
    const cJSON *alias = get(c->text, "num_experts");
    if (!c->given[le - k_keys] && alias) { /* attribute_map: num_experts -> num_local_experts */
        double x;
        if ((rc = read_number(c, c->text, "num_experts", KT_INT, "8", le->lo, le->hi, &x)))
            return rc;
        cfg->n_experts = (int)x;
    }
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
    cfg->rotary_dim = (int)(cfg->head_dim * partial);
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
    cfg->norm_offset = c->arch == HY_ARCH_QWEN3_NEXT || c->arch == HY_ARCH_QWEN3_5 ||
                       c->arch == HY_ARCH_QWEN3_5_MOE;
    /* Qwen's choices; OLMo-Hybrid's own replace them */
    cfg->attn_gate = true;
    cfg->qk_norm = true;
    cfg->qk_norm_flat = false;
    cfg->lin_kind = HY_LIN_GDN;
    cfg->lin_beta_scale = 1.0f;
    cfg->lin_norm_eps = cfg->rms_eps;
    int rc;
    if (c->arch == HY_ARCH_OLMO_HYBRID && (rc = derive_olmo(c, cfg))) return rc;
    if (c->arch == HY_ARCH_MINIMAX && (rc = derive_minimax(c, cfg))) return rc;
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
        else if (c->arch != HY_ARCH_MINIMAX)
            cfg->layer_moe[i] = c->arch == HY_ARCH_QWEN3_5_MOE;
        if (!cfg->layer_moe[i] && cfg->intermediate == 0)
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
        if (!k->def[c->arch] || k->deferred) continue; /* not a key of this class */
        c->given[i] = get(k->where == AT_TOP ? root : c->text, k->name) != NULL;
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

static size_t mlp_params(const hy_model_config *c, int i, int active_only)
{
    size_t H = (size_t)c->hidden;
    if (!c->layer_moe[i]) return 3 * H * (size_t)c->intermediate;
    size_t e = active_only ? (size_t)c->top_k : (size_t)c->n_experts;
    return H * (size_t)c->n_experts + e * 3 * H * (size_t)c->moe_intermediate +
           3 * H * (size_t)c->shared_intermediate + (c->shared_intermediate ? H : 0);
}

size_t hy_config_param_count(const hy_model_config *c)
{
    size_t H = (size_t)c->hidden, n = (size_t)c->vocab * H * (c->tie_embeddings ? 1 : 2) + H;
    for (int i = 0; i < c->n_layers; i++) n += 2 * H + mixer_params(c, i) + mlp_params(c, i, 0);
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
            f += 4.0 * pairs * c->head_dim * c->n_heads;
        } else {
            /* Delta rule: read-out, correction and update, each ~2·dk·dv per token and head;
             * lightning: the decay (1), the update and the read-out (2 each). */
            const double per = c->lin_kind == HY_LIN_LIGHTNING ? 5.0 : 6.0;
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
