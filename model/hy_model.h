/*
 * model: hybrid-attention checkpoints and the CPU executor that runs them.
 *
 * A model is a Hugging Face directory (config.json + safetensors) of one of
 * the supported architectures (DESIGN.md §7): Qwen3NextForCausalLM and Qwen3.5
 * text (qwen3_5_text, and its MoE variant qwen3_5_moe_text). Loading validates
 * the config and every tensor the architecture needs (presence, shape, dtype)
 * and widens the weights to fp32 in the executor's own layouts.
 *
 * The executor advances a running state (hy_state) by a run of tokens:
 * per linear layer the delta-rule state S [Hv][dk][dv] and the conv state
 * [K-1][conv_dim]; per attention layer the rotated K and V of every position
 * so far. Prefill and decode are the same call; the state can be copied,
 * which is how callers keep checkpoints of it.
 */
#ifndef HY_MODEL_H
#define HY_MODEL_H

#include "common/hy_common.h"

#include <stdbool.h>

#define HY_MAX_LAYERS 256

typedef enum hy_arch { HY_ARCH_QWEN3_NEXT = 0, HY_ARCH_QWEN3_5, HY_ARCH_QWEN3_5_MOE } hy_arch;
typedef enum hy_layer_kind { HY_LAYER_LINEAR = 0, HY_LAYER_ATTENTION } hy_layer_kind;

/* Everything the executor needs from config.json, validated. */
typedef struct hy_model_config {
    hy_arch arch;
    char arch_name[64];  /* e.g. "Qwen3NextForCausalLM" */
    char model_type[64]; /* e.g. "qwen3_next" */
    int vocab, hidden, n_layers;
    float rms_eps;
    bool tie_embeddings;
    /* full attention */
    int n_heads, n_kv_heads, head_dim, rotary_dim;
    double rope_theta;
    /* linear attention (Gated DeltaNet) */
    int lin_k_heads, lin_v_heads, lin_dk, lin_dv, conv_kernel;
    /* MLP / MoE */
    int intermediate;        /* dense MLP width */
    int n_experts, top_k;    /* 0 experts: dense everywhere */
    int moe_intermediate;    /* per routed expert */
    int shared_intermediate; /* shared expert; 0 when absent */
    bool norm_topk;
    hy_layer_kind layer_kind[HY_MAX_LAYERS];
    bool layer_moe[HY_MAX_LAYERS];
} hy_model_config;

/* Parses and validates a config.json text (path is used in messages). */
int hy_config_parse(const char *text, const char *path, hy_model_config *cfg, hy_err *err);
/* Reads DIR/config.json. */
int hy_config_load(const char *dir, hy_model_config *cfg, hy_err *err);
/* Derived sizes. */
int hy_config_conv_dim(const hy_model_config *c); /* 2·Hk·dk + Hv·dv */
size_t hy_config_param_count(const hy_model_config *c);
size_t hy_config_linear_state_floats(const hy_model_config *c); /* S + conv, one layer */
/* Forward FLOPs of prefilling n tokens after ctx0 cached ones, last-token
 * logits only (GEMMs, attention and the delta rule; elementwise work omitted). */
double hy_config_prefill_flops(const hy_model_config *c, int64_t ctx0, int64_t n);

typedef struct hy_model hy_model;

/* Opens a model directory: config, tensors, shapes. */
int hy_model_open(hy_model **out, const char *dir, hy_err *err);
void hy_model_close(hy_model *m);
const hy_model_config *hy_model_cfg(const hy_model *m);

/* --- running state ------------------------------------------------------ */
typedef struct hy_state hy_state;
int hy_state_new(const hy_model *m, hy_state **out, hy_err *err);
void hy_state_free(hy_state *s);
void hy_state_reset(hy_state *s); /* back to the empty prefix */
int hy_state_copy(hy_state *dst, const hy_state *src, hy_err *err);
int64_t hy_state_pos(const hy_state *s); /* tokens consumed */
/* Views into the state of layer i (NULL when the layer has no such part). */
float *hy_state_S(hy_state *s, int layer);    /* [Hv][dk][dv] */
float *hy_state_conv(hy_state *s, int layer); /* [K-1][conv_dim], oldest first */
float *hy_state_k(hy_state *s, int layer);    /* [pos][Hkv][hd], rotated */
float *hy_state_v(hy_state *s, int layer);    /* [pos][Hkv][hd] */

/* --- executor ----------------------------------------------------------- */
typedef enum hy_gdn_mode { HY_GDN_CHUNKED = 0, HY_GDN_RECURRENT } hy_gdn_mode;

typedef struct hy_exec hy_exec;
/* max_batch: tokens per forward step (a longer prefill runs in steps of this
 * size; 0 picks 1024); activations are sized for it once per call. */
int hy_exec_new(const hy_model *m, int max_batch, hy_exec **out, hy_err *err);
void hy_exec_free(hy_exec *ex);
void hy_exec_set_gdn_mode(hy_exec *ex, hy_gdn_mode mode);

/* Advances st by n tokens; when logits is not NULL writes the last token's
 * next-token logits [vocab]. Token ids outside [0, vocab) are refused before
 * any state changes. */
int hy_exec_prefill(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, float *logits,
                    hy_err *err);
/* One token (the recurrent path throughout). */
int hy_exec_decode(hy_exec *ex, hy_state *st, int32_t token, float *logits, hy_err *err);

/* --- generated checkpoints --------------------------------------------- */
/* Names of the built-in presets, NULL-terminated. */
extern const char *const hy_presets[];
/* Writes DIR/config.json and DIR/model.safetensors: a randomly initialised
 * model of the preset in the real on-disk format. dtype: "F32" or "BF16". */
int hy_model_init(const char *preset, uint64_t seed, const char *dir, const char *dtype,
                  hy_err *err);

/* Byte-level tokenizer of the embedded models: UTF-8 bytes + 3. */
size_t hy_tokenize_bytes(const char *text, int32_t *out, size_t cap, int vocab);

#endif
