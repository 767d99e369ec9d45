/*
 * config.json of the supported hybrid architectures, parsed into one
 * validated hy_model_config. Keys and defaults follow transformers'
 * Qwen3NextConfig / Qwen3_5TextConfig; sizes have no defaults (a checkpoint
 * must state them). A Qwen3.5 vision-language config nests the text model
 * under "text_config"; that object is used when present. Every refusal names
 * the file, the key and the limit.
 */
#include "hy_model.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    const cJSON *obj;
    const char *path;
    hy_err *err;
} cfg_ctx;

/* Reads integer key into *out: required (no default) unless has_def. */
static int get_int(cfg_ctx *c, const char *key, int has_def, long def, long lo, long hi, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (!has_def)
            return hy_err_set(c->err, HY_EINVAL, "%s: required key '%s' is missing", c->path, key);
        *out = (int)def;
        return HY_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be an integer", c->path, key);
    if (v->valuedouble < (double)lo || v->valuedouble > (double)hi)
        return hy_err_set(c->err, HY_ERANGE, "%s: '%s' = %.0f is outside [%ld, %ld]", c->path, key,
                          v->valuedouble, lo, hi);
    *out = (int)v->valuedouble;
    return HY_OK;
}

static int get_num(cfg_ctx *c, const cJSON *obj, const char *key, double def, double lo, double hi,
                   double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return HY_OK;
    }
    if (!cJSON_IsNumber(v))
        return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be a number", c->path, key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return hy_err_set(c->err, HY_ERANGE, "%s: '%s' = %g is outside [%g, %g]", c->path, key,
                          v->valuedouble, lo, hi);
    *out = v->valuedouble;
    return HY_OK;
}

static int get_bool(cfg_ctx *c, const char *key, bool def, bool *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(c->obj, key);
    if (!v || cJSON_IsNull(v)) {
        *out = def;
        return HY_OK;
    }
    if (!cJSON_IsBool(v))
        return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be true or false", c->path, key);
    *out = cJSON_IsTrue(v);
    return HY_OK;
}

/* RoPE: transformers 5 keeps theta and the partial factor in "rope_parameters";
 * older files have them at top level. Only plain RoPE is supported; M-RoPE
 * sections are accepted because for text every section sees the same position,
 * which makes it plain RoPE. */
static int parse_rope(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    double theta, partial;
    if ((rc = get_num(c, c->obj, "rope_theta", 10000.0, 1.0, 1e12, &theta))) return rc;
    if ((rc = get_num(c, c->obj, "partial_rotary_factor", 0.25, 0.0, 1.0, &partial))) return rc;
    const char *keys[] = {"rope_parameters", "rope_scaling"};
    for (int i = 0; i < 2; i++) {
        const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c->obj, keys[i]);
        if (!rp || cJSON_IsNull(rp)) continue;
        if (!cJSON_IsObject(rp))
            return hy_err_set(c->err, HY_EINVAL, "%s: '%s' must be an object", c->path, keys[i]);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (!ty) ty = cJSON_GetObjectItemCaseSensitive(rp, "type");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default") != 0))
            return hy_err_set(c->err, HY_EUNSUPPORTED,
                              "%s: %s.rope_type '%s' is not supported (only 'default')", c->path,
                              keys[i], cJSON_IsString(ty) ? ty->valuestring : "?");
        if ((rc = get_num(c, rp, "rope_theta", theta, 1.0, 1e12, &theta))) return rc;
        if ((rc = get_num(c, rp, "partial_rotary_factor", partial, 0.0, 1.0, &partial))) return rc;
    }
    cfg->rope_theta = theta;
    cfg->rotary_dim = (int)(cfg->head_dim * partial);
    if (cfg->rotary_dim < 2 || cfg->rotary_dim % 2)
        return hy_err_set(c->err, HY_EINVAL,
                          "%s: head_dim %d x partial_rotary_factor %g gives %d rotary dims; need "
                          "an even number >= 2",
                          c->path, cfg->head_dim, partial, cfg->rotary_dim);
    return HY_OK;
}

static int parse_layers(cfg_ctx *c, hy_model_config *cfg)
{
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c->obj, "layer_types");
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
    } else {
        int interval, rc;
        if ((rc = get_int(c, "full_attention_interval", 1, 4, 1, HY_MAX_LAYERS, &interval)))
            return rc;
        for (int i = 0; i < cfg->n_layers; i++)
            cfg->layer_kind[i] = (i + 1) % interval == 0 ? HY_LAYER_ATTENTION : HY_LAYER_LINEAR;
    }
    return HY_OK;
}

static int parse_moe(cfg_ctx *c, hy_model_config *cfg)
{
    int rc;
    bool qwen3_next = cfg->arch == HY_ARCH_QWEN3_NEXT;
    if (cfg->arch == HY_ARCH_QWEN3_5) return HY_OK; /* dense everywhere */
    /* Qwen3NextConfig's defaults apply when a key is absent (512 experts,
     * top-10, width 512, shared 512); the Qwen3.5 MoE text config must state them. */
    const int d = qwen3_next;
    if ((rc = get_int(c, "num_experts", d, 512, qwen3_next ? 0 : 1, 4096, &cfg->n_experts)))
        return rc;
    if (cfg->n_experts == 0) return HY_OK;
    if ((rc = get_int(c, "num_experts_per_tok", d, HY_MIN(10, cfg->n_experts), 1, cfg->n_experts,
                      &cfg->top_k)))
        return rc;
    if ((rc = get_int(c, "moe_intermediate_size", d, 512, 1, 1 << 20, &cfg->moe_intermediate)))
        return rc;
    if ((rc = get_int(c, "shared_expert_intermediate_size", 1, d ? 512 : 0, 0, 1 << 20,
                      &cfg->shared_intermediate)))
        return rc;
    if ((rc = get_bool(c, "norm_topk_prob", true, &cfg->norm_topk))) return rc;
    /* Qwen3.5 MoE routes every layer (transformers ignores mlp_only_layers
     * there); Qwen3-Next routes layer i when (i + 1) % decoder_sparse_step == 0
     * and i is not in mlp_only_layers. */
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_moe[i] = true;
    if (!qwen3_next) return HY_OK;
    int step = 1;
    if ((rc = get_int(c, "decoder_sparse_step", 1, 1, 1, HY_MAX_LAYERS, &step))) return rc;
    for (int i = 0; i < cfg->n_layers; i++) cfg->layer_moe[i] = (i + 1) % step == 0;
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(c->obj, "mlp_only_layers");
    if (mo && !cJSON_IsNull(mo)) {
        if (!cJSON_IsArray(mo))
            return hy_err_set(c->err, HY_EINVAL, "%s: 'mlp_only_layers' must be an array", c->path);
        for (const cJSON *e = mo->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= cfg->n_layers ||
                e->valuedouble != floor(e->valuedouble))
                return hy_err_set(
                    c->err, HY_ERANGE, "%s: mlp_only_layers holds %g, not a layer index in [0, %d)",
                    c->path, cJSON_IsNumber(e) ? e->valuedouble : -1.0, cfg->n_layers);
            cfg->layer_moe[(int)e->valuedouble] = false;
        }
    }
    return HY_OK;
}

int hy_config_parse(const char *text, const char *path, hy_model_config *cfg, hy_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return hy_err_set(err, HY_EFORMAT, "%s: not a well-formed JSON object", path);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    cfg_ctx c = {cJSON_IsObject(tc) ? tc : root, path, err};
    int rc = HY_OK;

    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const cJSON *a0 = cJSON_IsArray(archs) ? cJSON_GetArrayItem(archs, 0) : NULL;
    snprintf(cfg->arch_name, sizeof cfg->arch_name, "%s",
             cJSON_IsString(a0) ? a0->valuestring : "(none)");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c.obj, "model_type");
    if (!cJSON_IsString(mt)) {
        rc = hy_err_set(err, HY_EINVAL, "%s: 'model_type' is missing", path);
        goto out;
    }
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", mt->valuestring);
    if (strcmp(mt->valuestring, "qwen3_next") == 0)
        cfg->arch = HY_ARCH_QWEN3_NEXT;
    else if (strcmp(mt->valuestring, "qwen3_5_text") == 0 ||
             strcmp(mt->valuestring, "qwen3_5") == 0)
        cfg->arch = HY_ARCH_QWEN3_5;
    else if (strcmp(mt->valuestring, "qwen3_5_moe_text") == 0 ||
             strcmp(mt->valuestring, "qwen3_5_moe") == 0)
        cfg->arch = HY_ARCH_QWEN3_5_MOE;
    else {
        rc = hy_err_set(err, HY_EUNSUPPORTED,
                        "%s: model_type '%s' is not supported (qwen3_next, qwen3_5_text, "
                        "qwen3_5_moe_text)",
                        path, mt->valuestring);
        goto out;
    }
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c.obj, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0)) {
        rc = hy_err_set(err, HY_EUNSUPPORTED, "%s: hidden_act must be 'silu'", path);
        goto out;
    }
    bool abias = false;
    if ((rc = get_bool(&c, "attention_bias", false, &abias))) goto out;
    if (abias) {
        rc = hy_err_set(err, HY_EUNSUPPORTED, "%s: attention_bias true is not supported", path);
        goto out;
    }
    double eps;
    if ((rc = get_int(&c, "vocab_size", 0, 0, 1, 1 << 24, &cfg->vocab)) ||
        (rc = get_int(&c, "hidden_size", 0, 0, 1, 1 << 16, &cfg->hidden)) ||
        (rc = get_int(&c, "num_hidden_layers", 0, 0, 1, HY_MAX_LAYERS, &cfg->n_layers)) ||
        (rc = get_int(&c, "intermediate_size", cfg->arch == HY_ARCH_QWEN3_5_MOE, 0, 0, 1 << 20,
                      &cfg->intermediate)) ||
        (rc = get_int(&c, "num_attention_heads", 0, 0, 1, 1024, &cfg->n_heads)) ||
        (rc = get_int(&c, "num_key_value_heads", 0, 0, 1, 1024, &cfg->n_kv_heads)) ||
        (rc = get_int(&c, "head_dim", 1, 256, 2, 4096, &cfg->head_dim)) ||
        (rc = get_int(&c, "linear_num_key_heads", 0, 0, 1, 1024, &cfg->lin_k_heads)) ||
        (rc = get_int(&c, "linear_num_value_heads", 0, 0, 1, 1024, &cfg->lin_v_heads)) ||
        (rc = get_int(&c, "linear_key_head_dim", 0, 0, 1, 1024, &cfg->lin_dk)) ||
        (rc = get_int(&c, "linear_value_head_dim", 0, 0, 1, 1024, &cfg->lin_dv)) ||
        (rc = get_int(&c, "linear_conv_kernel_dim", 1, 4, 1, 16, &cfg->conv_kernel)) ||
        (rc = get_num(&c, c.obj, "rms_norm_eps", 1e-6, 0.0, 1.0, &eps)) ||
        (rc = get_bool(&c, "tie_word_embeddings", false, &cfg->tie_embeddings)))
        goto out;
    if (!cJSON_GetObjectItemCaseSensitive(c.obj, "tie_word_embeddings") && c.obj != root &&
        (rc = get_bool(&(cfg_ctx){root, path, err}, "tie_word_embeddings", false,
                       &cfg->tie_embeddings)))
        goto out;
    cfg->rms_eps = (float)eps;
    if (cfg->n_heads % cfg->n_kv_heads) {
        rc = hy_err_set(err, HY_EINVAL,
                        "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d",
                        path, cfg->n_heads, cfg->n_kv_heads);
        goto out;
    }
    if (cfg->lin_v_heads % cfg->lin_k_heads) {
        rc = hy_err_set(err, HY_EINVAL,
                        "%s: linear_num_value_heads %d is not a multiple of "
                        "linear_num_key_heads %d",
                        path, cfg->lin_v_heads, cfg->lin_k_heads);
        goto out;
    }
    if ((rc = parse_rope(&c, cfg)) || (rc = parse_layers(&c, cfg)) || (rc = parse_moe(&c, cfg)))
        goto out;
    for (int i = 0; i < cfg->n_layers; i++)
        if (!cfg->layer_moe[i] && cfg->intermediate == 0) {
            rc = hy_err_set(
                err, HY_EINVAL, "%s: layer %d has a dense MLP but 'intermediate_size' is %s", path,
                i, cJSON_GetObjectItemCaseSensitive(c.obj, "intermediate_size") ? "0" : "missing");
            goto out;
        }
out:
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
    if (c->layer_kind[i] == HY_LAYER_LINEAR) {
        size_t cd = (size_t)hy_config_conv_dim(c), vd = (size_t)c->lin_v_heads * c->lin_dv;
        return H * (cd + vd + 2 * (size_t)c->lin_v_heads) + cd * (size_t)c->conv_kernel +
               2 * (size_t)c->lin_v_heads + (size_t)c->lin_dv + vd * H;
    }
    size_t qd = (size_t)c->n_heads * c->head_dim, kd = (size_t)c->n_kv_heads * c->head_dim;
    return H * (2 * qd + 2 * kd) + qd * H + 2 * (size_t)c->head_dim;
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
            /* Delta rule: read-out, correction and update, each ~2·dk·dv per token and head. */
            f += 6.0 * (double)n * c->lin_v_heads * c->lin_dk * c->lin_dv;
        }
    }
    return f;
}
