/*
 * model: hybrid-attention checkpoints and the CPU executor that runs them.
 *
 * A model is a Hugging Face directory (config.json + safetensors) of one of
 * the supported architectures (docs/executor.md): Qwen3NextForCausalLM, Qwen3.5
 * text (qwen3_5_text, and its MoE variant qwen3_5_moe_text),
 * OlmoHybridForCausalLM (olmo_hybrid), MiniMaxForCausalLM (minimax),
 * KimiLinearForCausalLM (kimi_linear), NemotronHForCausalLM (nemotron_h) and
 * Ling's BailingMoeV3ForCausalLM (bailing_hybrid).
 * Loading validates
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

#include "hy_common.h"

#include <stdbool.h>

#define HY_MAX_LAYERS 256

typedef enum hy_arch {
    HY_ARCH_QWEN3_NEXT = 0,
    HY_ARCH_QWEN3_5,
    HY_ARCH_QWEN3_5_MOE,
    HY_ARCH_OLMO_HYBRID,
    HY_ARCH_MINIMAX,
    HY_ARCH_KIMI_LINEAR,
    HY_ARCH_NEMOTRON_H,
    HY_ARCH_BAILING_HYBRID,
    HY_ARCH_COUNT
} hy_arch;
/* The linear-attention layer a model runs: Gated DeltaNet (a dense dk×dk T
 * per head, a short conv before it), MiniMax's lightning attention (a
 * constant decay per head: a scalar T, no conv), Kimi Delta Attention (the
 * delta rule with a decay per key channel: a dense T, a short conv) or
 * Mamba2 (Nemotron-H: a decay per head and token, a scalar T, a short conv
 * over x | B | C). For Mamba2 the kernels' key is B (dk = ssm_state_size,
 * lin_k_heads = n_groups), the query C and the value dt·x (dv =
 * mamba_head_dim, lin_v_heads = mamba_num_heads): S per head is [N][P], the
 * transpose of transformers' [P][N]. */
typedef enum hy_lin_kind {
    HY_LIN_GDN = 0,
    HY_LIN_LIGHTNING,
    HY_LIN_KDA,
    HY_LIN_MAMBA2
} hy_lin_kind;
/* How an MoE layer routes: softmax over the experts, top-k (Qwen, MiniMax),
 * or DeepSeek's sigmoid scores with a bias that only selects, top-k among
 * the best groups of experts, times a routed scaling factor (Kimi). */
typedef enum hy_router_kind { HY_ROUTER_SOFTMAX = 0, HY_ROUTER_SIGMOID_GROUPED } hy_router_kind;
/* A layer's token mixer: linear attention, full attention, or none
 * (HY_LAYER_MLP: Nemotron-H's blocks that are an MLP or MoE alone; such a
 * layer keeps no state and its entry sections are empty). */
typedef enum hy_layer_kind { HY_LAYER_LINEAR = 0, HY_LAYER_ATTENTION, HY_LAYER_MLP } hy_layer_kind;
/* An MLP's (and every expert's) shape: SwiGLU, down(silu(gate x) ⊙ up x),
 * or Nemotron-H's squared ReLU without a gate, down(relu(up x)²). */
typedef enum hy_mlp_act { HY_MLP_SWIGLU = 0, HY_MLP_RELU2 } hy_mlp_act;

/* Everything the executor needs from config.json, validated. */
typedef struct hy_model_config {
    hy_arch arch;
    char arch_name[64];  /* e.g. "Qwen3NextForCausalLM" */
    char model_type[64]; /* e.g. "qwen3_next" */
    int vocab, hidden, n_layers;
    float rms_eps;
    bool norm_offset; /* zero-centred RMSNorm weights: the multiplier is 1 + w (Qwen) */
    bool tie_embeddings;
    /* full attention */
    int n_heads, n_kv_heads, head_dim, rotary_dim; /* rotary_dim 0: no positional encoding */
    double rope_theta;
    bool attn_gate;    /* a sigmoid output gate per query head (q_proj gives [query|gate]) */
    bool qk_norm;      /* RMSNorms on q and k (q_norm, k_norm) */
    bool qk_norm_flat; /* q_norm / k_norm over all heads' concatenation, not per head */
    /* multi-head latent attention (Kimi): per token one latent of kv_lora
     * values (normalised) and one key part of qk_rope values shared by the
     * heads are what is cached; kv_b_proj expands the latent to each head's
     * key part of qk_nope and its value of v_head. q_lora 0: a plain q_proj. */
    bool mla;
    int q_lora, kv_lora, qk_nope, qk_rope, v_head;
    /* Ling's MLA: RoPE on the shared key part and the queries' qk_rope part
     * (rotary_dim = qk_rope; the checkpoint's interleaved pairs are reordered
     * at load so the executor rotates halves), a sigmoid gate per head
     * (g_proj), and biases on kv_a_proj_with_mqa and the output projection */
    bool mla_head_gate, mla_bias;
    /* linear attention */
    hy_lin_kind lin_kind;
    int lin_k_heads, lin_v_heads, lin_dk, lin_dv;
    int conv_kernel;      /* 1: no conv (lightning) */
    float lin_beta_scale; /* beta = scale·sigmoid(b): 2 lets the eigenvalues reach −1 */
    float lin_norm_eps;   /* epsilon of the gated output RMSNorm */
    /* Mamba2 (Nemotron-H): dt = softplus(dt_raw + dt_bias) is clamped below
     * at dt_min for every token of a prompt (transformers' chunked scan),
     * never for a one-token decode step after a prefix (its recurrent
     * update); biases on the conv and on in_proj / out_proj; the gated
     * output norm runs over lin_k_heads groups of heads */
    float dt_min;
    bool lin_conv_bias, lin_proj_bias;
    /* KDA's forget gate: Kimi's g = −exp(A_log)·softplus(f + dt_bias), or
     * Ling's bounded (safe) g = lower_bound·sigmoid(exp(A_log)·(f + dt_bias));
     * f and the output gate from rank-d bottlenecks (Kimi) or from full-rank
     * f_proj and g_proj (Ling) */
    bool kda_safe_gate, kda_full_gates;
    float kda_lower_bound;
    /* MiniMax's residuals: each sublayer replaces the stream by
     * alpha·norm(x) + beta·f(norm(x)) instead of adding f(norm(x)) to x */
    bool scaled_residual;
    float attn_alpha, attn_beta, lin_alpha, lin_beta, mlp_alpha, mlp_beta;
    /* MLP / MoE */
    int intermediate;        /* dense MLP width */
    hy_mlp_act mlp_act;      /* every MLP's and expert's shape */
    bool mlp_bias;           /* biases on the dense MLP, the shared expert and the latent
                              * projections (Nemotron-H's mlp_bias; routed experts have none) */
    int moe_latent;          /* routed experts run in a latent of this width between
                              * fc1_latent_proj and fc2_latent_proj (Nemotron-H); 0: none */
    int n_experts, top_k;    /* 0 experts: dense everywhere */
    int moe_intermediate;    /* per routed expert */
    int shared_intermediate; /* shared expert; 0 when absent */
    bool norm_topk;
    bool shared_gated; /* the shared expert's output scaled by sigmoid(shared_expert_gate·x) */
    hy_router_kind router;
    int n_group, topk_group; /* HY_ROUTER_SIGMOID_GROUPED: groups of experts, groups kept */
    float routed_scale;      /* the routed experts' weights are multiplied by it */
    int mtp_layers;          /* multi-token-prediction layers the checkpoint may hold after the
                              * last layer (Ling: layers n_layers …): skipped, as transformers does */
    hy_layer_kind layer_kind[HY_MAX_LAYERS];
    bool layer_moe[HY_MAX_LAYERS];
    /* the layer normalises its mixer's and its MLP's outputs before adding
     * them to the residual stream (OLMo's attention layers), instead of
     * their inputs */
    bool layer_post_norm[HY_MAX_LAYERS];
    /* the layer is its token mixer alone, with no MLP sublayer (Nemotron-H's
     * Mamba2 and attention blocks) */
    bool layer_no_mlp[HY_MAX_LAYERS];
} hy_model_config;

/* Parses and validates a config.json text (path is used in messages). */
int hy_config_parse(const char *text, const char *path, hy_model_config *cfg, hy_err *err);
/* Reads DIR/config.json. */
int hy_config_load(const char *dir, hy_model_config *cfg, hy_err *err);
/* Derived sizes. */
int hy_config_conv_dim(const hy_model_config *c); /* 2·Hk·dk + Hv·dv */
/* Floats per position an attention layer keeps in its K and V rows (the
 * state's, an entry's): Hkv·hd each, or with MLA the latent (kv_lora) as K
 * and the shared key part (qk_rope) as V, as transformers' cache holds them. */
int hy_config_kv_k(const hy_model_config *c);
int hy_config_kv_v(const hy_model_config *c);
size_t hy_config_param_count(const hy_model_config *c);
size_t hy_config_linear_state_floats(const hy_model_config *c); /* S + conv, one layer */
/* Forward FLOPs of prefilling n tokens after ctx0 cached ones, last-token
 * logits only (GEMMs, attention and the delta rule; elementwise work omitted). */
double hy_config_prefill_flops(const hy_model_config *c, int64_t ctx0, int64_t n);

typedef struct hy_model hy_model;

/* How an opened model keeps its weight matrices (the projections, experts,
 * router and LM head: what decode streams once per token). */
typedef enum hy_weights {
    HY_WEIGHTS_AUTO, /* as the checkpoint holds them: BF16 stays bf16, half the bytes of
                      * fp32, widened by the products as they read (fp32 arithmetic, the
                      * F32 path's sums reordered); F32 and F16 in fp32 */
    HY_WEIGHTS_F32,  /* every checkpoint widened to fp32 */
    HY_WEIGHTS_BF16, /* as AUTO, and products of more than 4 rows multiply in bf16 where
                      * the CPU can (AVX512-BF16): activations rounded to bf16 as bf16
                      * inference rounds them, about twice sgemm's rate */
    HY_WEIGHTS_Q8,   /* quantised at load to 8 bits with an fp32 scale per 32 values
                      * (1.125 bytes a weight: decode streams 0.56 of bf16's bytes);
                      * lossy, so the model's fingerprint differs from the
                      * checkpoint's and its entries are its own */
} hy_weights;
/* "auto", "f32", "bf16" or "q8" into *out; HY_EINVAL otherwise. */
int hy_weights_parse(const char *s, hy_weights *out);

/* Opens a model directory: config, tensors, shapes; matrices kept as w says. */
int hy_model_open_with(hy_model **out, const char *dir, hy_weights w, hy_err *err);
/* hy_model_open_with(HY_WEIGHTS_AUTO). */
int hy_model_open(hy_model **out, const char *dir, hy_err *err);
/* "q8", "bf16" or "f32": the format the weight matrices are kept and read in. */
const char *hy_model_weights_name(const hy_model *m);
/* Whether the model's large products multiply in bf16 (HY_WEIGHTS_BF16 on a
 * BF16 checkpoint and a CPU with AVX512-BF16). */
bool hy_model_bf16_math(const hy_model *m);
/* Bytes of the weight matrices as kept: what a decode step streams (less
 * the experts its token does not route to). */
size_t hy_model_matrix_bytes(const hy_model *m);
void hy_model_close(hy_model *m);
const hy_model_config *hy_model_cfg(const hy_model *m);

/* --- running state ------------------------------------------------------ */
typedef struct hy_state hy_state;
int hy_state_new(const hy_model *m, hy_state **out, hy_err *err);
void hy_state_free(hy_state *s);
void hy_state_reset(hy_state *s); /* back to the empty prefix */
int hy_state_copy(hy_state *dst, const hy_state *src, hy_err *err);
int64_t hy_state_pos(const hy_state *s); /* tokens consumed */
/* Gives back the attention layers' K/V rows past max(pos, keep) positions
 * (they grow geometrically with the longest context served, and stay): a
 * state that served one long context need not hold its memory after. */
void hy_state_trim(hy_state *s, int64_t keep);
/* Positions the attention layers' K/V buffers hold now. */
int64_t hy_state_capacity(const hy_state *s);
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
/* How an MLA layer (Kimi-Linear, Ling) attends. EXPANDED: kv_b_proj expands
 * every cached latent once into per-head keys and values, kept in the state
 * (a query then costs nh·(dn + dr + dv) per key); ABSORBED: in the latent
 * space, each query absorbed through kv_b_proj's key half and each head's
 * output through its value half (nh·(2·kv_lora + dr) per key, nothing
 * expanded — what a composed hole needs). AUTO (the default) takes, per
 * pass, whichever the pass's FLOPs favour: the expansion a pass would add
 * against the extra per-key work of the latent space. The results agree to
 * fp32 rounding. */
typedef enum hy_mla_mode { HY_MLA_AUTO = 0, HY_MLA_EXPANDED, HY_MLA_ABSORBED } hy_mla_mode;
void hy_exec_set_mla_mode(hy_exec *ex, hy_mla_mode mode);
/* The mode the executor's last pass ran its MLA layers in (EXPANDED or
 * ABSORBED; AUTO before any pass or without MLA). */
hy_mla_mode hy_exec_mla_mode_used(const hy_exec *ex);

/* Where an executor computes. CPU: the CPU kernels (the default). CUDA: a
 * GPU (device ordinal N of this process) for the Gated DeltaNet family
 * (Qwen3-Next, Qwen3.5 dense and MoE): the model's weights are copied there
 * once, each pass runs its steps there over a mirror of the state, and the
 * state comes back when the pass ends (model/exec_dev.c). EMULATED: the
 * same device executor with the CUDA kernels' bodies run on the CPU, for
 * tests (slow). hy_exec_set_device refuses a model family it does not run
 * (HY_EUNSUPPORTED naming it), a build without the CUDA kernels
 * (HY_EUNSUPPORTED) and a machine without the device (HY_ENOTFOUND:
 * "no CUDA device: …"); the executor stays as it was. */
typedef enum hy_exec_device { HY_EXEC_CPU = 0, HY_EXEC_CUDA, HY_EXEC_EMULATED } hy_exec_device;
int hy_exec_set_device(hy_exec *ex, hy_exec_device kind, int device, hy_err *err);
/* "cpu", or the device's description ("cuda:0 (NVIDIA H100 80GB HBM3)"). */
const char *hy_exec_device_name(const hy_exec *ex);
/* "cpu", "cuda", "cuda:N" or "emulated"; HY_EINVAL for anything else. */
int hy_exec_device_parse(const char *s, hy_exec_device *kind, int *device);
/* The device's GEMM rates, FLOP/s, on n×n×n products as the executor's
 * products run them (fp32, and bf16 inputs with fp32 accumulation): the
 * limit a benchmark names beside its figures. HY_EINVAL on the CPU. */
int hy_exec_device_gemm_rate(hy_exec *ex, int n, double *fp32, double *bf16, hy_err *err);

/* Gives back the scratch and the RoPE table an executor sized for a context
 * longer than keep positions (they grow with the longest pass and stay);
 * the next pass sizes them again for its own. */
void hy_exec_trim(hy_exec *ex, int64_t keep);

/* A check the executor runs before each step of a pass (up to max_batch
 * tokens, every layer), in the caller's thread: true calls the pass off —
 * HY_ECANCELED, the state reset, as a pass that fails. What a service sets
 * for the call a context serves, so a caller gone (or its deadline passed)
 * frees the executor within a step instead of at the end of a long pass.
 * NULL: none (the default). */
typedef bool (*hy_cancel_fn)(void *ctx);
void hy_exec_set_cancel(hy_exec *ex, hy_cancel_fn fn, void *ctx);

/* Advances st by n tokens; when logits is not NULL writes the last token's
 * next-token logits [vocab]. Token ids outside [0, vocab) are refused before
 * any state changes. */
int hy_exec_prefill(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, float *logits,
                    hy_err *err);
/* One token (the recurrent path throughout). */
int hy_exec_decode(hy_exec *ex, hy_state *st, int32_t token, float *logits, hy_err *err);

/* --- reading the logits (model/sample.c) --- */
typedef struct hy_token_prob {
    int32_t token;
    float logit, prob; /* prob: softmax over the whole vocabulary */
} hy_token_prob;
/* The k most likely tokens of logits [vocab], most likely first (ties: the
 * lower id first), with their softmax probabilities; k <= vocab. O(vocab·log k). */
void hy_top_k(const float *logits, int vocab, int k, hy_token_prob *out);
/* Greedy continuation: out[0] = argmax(logits), then each next token
 * decoded from st after the one before, until n tokens (logits is
 * overwritten by each step's). Returns HY_OK, or the decode's error (*got
 * the tokens made before it). */
int hy_exec_greedy(hy_exec *ex, hy_state *st, float *logits, size_t n, int32_t *out, size_t *got,
                   hy_err *err);

/* Where an executor's prefill time goes, by kind of operation. Each op is
 * timed by wall clock on the calling thread around the whole (internally
 * parallel) operation, and the time between ops counts as HY_EXEC_OP_OTHER,
 * so the kinds add up to the prefill calls' wall time:
 *   GEMM        every hy_linear: projections, MLP and expert products, the
 *               router's logits, the lm_head
 *   DELTA_RULE  the chunked or recurrent delta rule over all heads
 *   ATTENTION   causal softmax attention over all (head, query block) jobs
 *   CONV        the depthwise causal conv + SiLU
 *   NORM_GATE   RMSNorms, q/k L2 norms, beta and decay gates, q/k norm with
 *               RoPE and the KV-cache write, sigmoid and SiLU gates, SwiGLU
 *   MOE_ROUTING softmax and top-k, gathering rows per expert, the weighted
 *               scatter back, the shared expert's gate
 *   OTHER       embedding lookup, residual adds, setup, the gaps between ops */
typedef enum hy_exec_op {
    HY_EXEC_OP_GEMM = 0,
    HY_EXEC_OP_DELTA_RULE,
    HY_EXEC_OP_ATTENTION,
    HY_EXEC_OP_CONV,
    HY_EXEC_OP_NORM_GATE,
    HY_EXEC_OP_MOE_ROUTING,
    HY_EXEC_OP_OTHER,
    HY_EXEC_OP_COUNT
} hy_exec_op;

/* Totals since the last hy_exec_profile_reset, over the calls made while
 * profiling was on. */
typedef struct hy_exec_prof {
    double seconds[HY_EXEC_OP_COUNT]; /* wall time per kind; they sum to total_s */
    int64_t calls[HY_EXEC_OP_COUNT];  /* timed ops per kind (OTHER: prefill calls) */
    double total_s;                   /* wall time inside hy_exec_prefill / _decode */
    double gemm_flops;                /* 2·m·n·k summed over the GEMMs */
    int64_t tokens;                   /* tokens advanced */
} hy_exec_prof;

/* Short lower-case name of an op kind ("gemm", "delta_rule", ...), as the
 * benchmark's JSON keys use it; "?" outside the enum. */
const char *hy_exec_op_name(hy_exec_op op);
/* Turns timing on or off for this executor's later calls (off at creation:
 * then each op costs one untaken branch). The figures live in the executor,
 * so executors on different threads profile independently. */
void hy_exec_set_profiling(hy_exec *ex, bool on);
void hy_exec_profile(const hy_exec *ex, hy_exec_prof *out);
void hy_exec_profile_reset(hy_exec *ex);

/* Identity of the checkpoint (SHA-256 of config.json, the safetensors files'
 * names, sizes and headers, and samples of every tensor's bytes): part of
 * every entry and cache key. */
void hy_model_fingerprint(const hy_model *m, uint8_t fp[32]);

/* --- segment entries (model/entry.c; format in docs/entry-format.md) ------
 * An entry is what HYPIC caches for one segment of n tokens: its first
 * w = min(W, n − 1) tokens are the seam, recomputed under the true prefix at
 * every reuse; the rest, the body, is cached: per linear layer the body's
 * transition operator T and its state from zero S(body|0), head by head, and
 * the conv tail [K−1][conv_dim]; per attention layer the body's canonical K
 * (after k_norm, before RoPE) and V. W = 0 (no seam) caches the whole
 * segment: the ablation `noseam`.
 *
 * Each linear head's T and S are stored in the smallest form whose error
 * stays within the entry's tolerance (model/entry_repr.c): zero, a scalar or
 * diagonal, low rank U·Vt, a scaled identity plus low rank γ·I + U·Vt, or
 * dense; fp32, or bf16 where the part allows it and the bound still holds. */
#define HY_ENTRY_VERSION 2 /* what this build writes; version 1 is still read */
#define HY_SEAM_DEFAULT  8
typedef enum hy_entry_dtype { HY_ENTRY_F32 = 0, HY_ENTRY_BF16 = 1 } hy_entry_dtype;
typedef struct hy_entry hy_entry;
typedef struct hy_entry_arrival hy_entry_arrival;

/* How an entry stores its parts. tol = 0: every head dense (T in its
 * family's shape), each part in its dtype — the version-1 entry when all
 * three are F32. tol > 0: each head in the smallest form whose bound holds:
 * for T, ‖T̃ − T‖₂ ≤ tol (the largest error T̃ makes on a unit-norm state);
 * for S(body|0), ‖S̃ − S‖_F ≤ tol·‖S‖_F; a part whose dtype is BF16 may then
 * be bf16 head by head, where the bound still holds. K and V are stored in
 * kv, whatever tol. Part of the entry's cache key. */
typedef struct hy_entry_repr {
    hy_entry_dtype s, t, kv;
    float tol;
} hy_entry_repr;
/* The exact representation with S in dtype s (version 1's choices). */
static inline hy_entry_repr hy_entry_exact(hy_entry_dtype s)
{
    return (hy_entry_repr){.s = s, .t = HY_ENTRY_F32, .kv = HY_ENTRY_F32, .tol = 0.0f};
}
static inline bool hy_entry_repr_eq(hy_entry_repr a, hy_entry_repr b)
{
    return a.s == b.s && a.t == b.t && a.kv == b.kv && a.tol == b.tol;
}
/* HY_EINVAL with the field when r is not a representation entries take:
 * dtypes F32 or BF16, tol finite in [0, 1]. */
int hy_entry_repr_check(const hy_entry_repr *r, hy_err *err);

/* The seam width of an n-token segment under setting W; HY_EUNSUPPORTED
 * (with the reason) when the segment is too short to cache: a seam narrower
 * than the conv window (K − 1) would let the body's conv read another
 * segment. Such segments are simply prefilled. */
int hy_entry_seam(const hy_model_config *c, size_t n, int W, int *w, hy_err *err);

/* Prefills the segment from st (advancing it exactly as hy_exec_prefill
 * would; logits of its last token when not NULL) and builds its entry from
 * the same activations. From an empty st this is the independent build; from
 * a request's running state, the inline build. */
int hy_entry_build(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                   hy_entry_repr repr, float *logits, hy_entry **out, hy_err *err);

/* hy_entry_build from st with on_layer(ctx, e, l) called for each layer l
 * in order, once, as soon as the entry's sections of that layer are final
 * — before the next layers run — from the thread running the build. The
 * segment must fit one step of the executor (n <= its max_batch) for layers
 * to finish one by one; a longer one finishes every layer in its last step.
 * e is the entry being built: read only its layer l. */
typedef void (*hy_entry_layer_fn)(void *ctx, const hy_entry *e, int layer);
int hy_entry_build_streamed(hy_exec *ex, hy_state *st, const int32_t *tokens, size_t n, int W,
                            hy_entry_repr repr, hy_entry_layer_fn on_layer, void *ctx,
                            hy_entry **out, hy_err *err);

/* Reuses an entry after st: recomputes the seam through every layer, then
 * composes the body (linear: S ← T·S + S_body, or S ← S + S_body when
 * !use_T, the `naive` ablation; conv state ← tail; attention: K rotated to
 * its true positions and V appended). Refuses a foreign entry. */
int hy_entry_apply(hy_exec *ex, hy_state *st, const hy_entry *e, bool use_T, hy_err *err);

void hy_entry_free(hy_entry *e);
int hy_entry_tokens(const hy_entry *e, const int32_t **tokens); /* returns n */
int hy_entry_seam_width(const hy_entry *e);
int hy_entry_body_tokens(const hy_entry *e);
int hy_entry_layers(const hy_entry *e);
size_t hy_entry_payload_bytes(const hy_entry *e);
/* What an exact entry of model config c holds (hy_entry_exact(dt)), from its
 * config alone: *constant bytes (every linear layer's T, S in dtype dt and
 * conv tail) plus
 * *per_body_token bytes for each body token (every attention layer's K and
 * V); the token ids (4 per segment token) and the serialised form's header
 * and alignment come on top. */
void hy_entry_bytes_for(const hy_model_config *c, hy_entry_dtype dt, size_t *constant,
                        size_t *per_body_token);
/* One layer's sections in bytes: a linear layer's T, S (in dt) and conv tail,
 * an attention layer's K and V per body token (MLA: the latent and the
 * shared key part). */
typedef struct hy_entry_layer_bytes {
    size_t t, s, tail, k_per_token, v_per_token;
} hy_entry_layer_bytes;
hy_entry_layer_bytes hy_entry_layer_sizes(const hy_model_config *c, hy_entry_dtype dt);
int hy_entry_seam_setting(const hy_entry *e);        /* W, the setting it was built under */
hy_entry_dtype hy_entry_dtype_of(const hy_entry *e); /* S's: the repr's s */
hy_entry_repr hy_entry_repr_of(const hy_entry *e);
int hy_entry_version(const hy_entry *e); /* the format it was read in (built: HY_ENTRY_VERSION) */
/* What a linear head's T or S is stored as; kinds in file order
 * (docs/entry-format.md). */
typedef enum hy_entry_form {
    HY_FORM_ZERO,    /* nothing: T ≈ 0 (the head forgot the prefix), or S = 0 */
    HY_FORM_SCALAR,  /* T = γ·I */
    HY_FORM_DIAG,    /* T = Diag(d) */
    HY_FORM_LOWRANK, /* U·Vt, rank r */
    HY_FORM_IPLR,    /* T = γ·I + U·Vt, rank r */
    HY_FORM_DENSE,
    HY_FORM_COUNT
} hy_entry_form;
const char *hy_entry_form_name(hy_entry_form f);
/* An entry's linear heads by form, T and S apart: how many heads and their
 * stored bytes (payload only), and the largest stated bound of each part. */
typedef struct hy_entry_census {
    int t_heads[HY_FORM_COUNT], s_heads[HY_FORM_COUNT];
    size_t t_bytes[HY_FORM_COUNT], s_bytes[HY_FORM_COUNT];
    int t_bf16, s_bf16; /* heads stored in bf16 */
    float t_bound_max, s_bound_max;
} hy_entry_census;
void hy_entry_census_of(const hy_entry *e, hy_entry_census *out);
/* The sections of the serialised form, in file order: name ("TOKENS", "T",
 * "S", "TAIL", "K", "V"), layer (-1 for TOKENS) and payload bytes. Writes at
 * most cap; returns how many there are (0 when out of memory). */
typedef struct hy_entry_section {
    const char *name;
    int layer;
    size_t bytes;
} hy_entry_section;
size_t hy_entry_sections(const hy_entry *e, hy_entry_section *out, size_t cap);

/* Serialised form: a header, a section table with an XXH3 checksum per
 * section, the sections. serialize returns a malloc'd buffer. */
int hy_entry_serialize(const hy_entry *e, void **buf, size_t *len, hy_err *err);
/* The serialised form built piece by piece, for an entry that leaves as it
 * is built (a scatter worker's Build): the total size (known as soon as the
 * entry exists when hy_entry_size_known, else only once every layer is
 * built; 0 when out of memory); layer l's sections (T, S, TAIL or K,
 * V: contiguous) copied into buf — total bytes, zeroed — at their offsets,
 * [*lo, *hi) the span written; then, once every layer is in, the TOKENS
 * section and the header with every section's checksum, over [0, *hi).
 * hy_entry_serialize is these three in one. HY_EINVAL for a layer out of
 * range, HY_ENOMEM. */
size_t hy_entry_serialized_bytes(const hy_entry *e);
/* Whether e's serialised size follows from its shapes (tol = 0) rather than
 * from the forms its heads take as they are built. Layer l's offsets are
 * known once layers before it are built either way. */
bool hy_entry_size_known(const hy_entry *e);
int hy_entry_serialize_layer(const hy_entry *e, void *buf, int layer, size_t *lo, size_t *hi);
int hy_entry_serialize_finish(const hy_entry *e, void *buf, size_t *hi); /* HY_ENOMEM */
/* Validates everything before trusting a byte: magic, version, sizes against
 * the model's config, offsets, checksums, model fingerprint. */
int hy_entry_deserialize(const hy_model *m, const void *buf, size_t len, hy_entry **out,
                         hy_err *err);
/* The same checks, but no copy: the entry's sections are buf's bytes (its
 * tokens too), which must stay valid and unchanged until hy_entry_free —
 * a store lease held that long — and start 64-byte aligned. For reuse
 * (hy_combine, hy_entry_apply); a view is never written. */
int hy_entry_view(const hy_model *m, const void *buf, size_t len, hy_entry **out, hy_err *err);

/* A view of an entry whose bytes land in buf in order while it is used (a
 * fetch overlapped with the pass that composes it): avail bytes of its len
 * are there. It needs the header, the section table and the tokens first:
 * with fewer, HY_EAGAIN and *need the bytes it takes. Then every check
 * hy_entry_view makes on them, and none yet on the layers' sections: each
 * is checked (its checksum, its head table) by hy_entry_view_landed as it
 * lands, and the executor waits for a layer's before composing it
 * (hy_entry_layer_wait). The one who fills buf calls hy_entry_view_landed
 * (or hy_entry_view_fail) until the entry is whole or failed, and only then
 * may it be freed. */
int hy_entry_view_open(const hy_model *m, const void *buf, size_t len, size_t avail, size_t *need,
                       hy_entry **out, hy_err *err);
/* The bytes [*lo, *hi) of buf that layer `layer`'s sections take (empty for
 * a layer without any, and for an entry not opened so). */
void hy_entry_layer_span(const hy_entry *e, int layer, size_t *lo, size_t *hi);
/* Bytes [0, upto) of buf have landed: each section wholly among them not
 * yet checked is, in order; a layer whose sections all passed is ready. A
 * section that fails ends the entry: the error here and for its waiters. */
int hy_entry_view_landed(hy_entry *e, size_t upto, hy_err *err);
/* The rest will not land (a read failed): its waiters get code and msg. */
void hy_entry_view_fail(hy_entry *e, int code, const char *msg);
/* Whether every section has landed and passed (always, for an entry not
 * opened by hy_entry_view_open). */
bool hy_entry_whole(const hy_entry *e);
/* Blocks until layer `layer` of e is ready, or fails with the entry's error
 * (immediately HY_OK for an entry not opened by hy_entry_view_open). */
int hy_entry_layer_wait(const hy_entry *e, int layer, hy_err *err);

/* An entry whose bytes lie in a device's memory (an hbm lease on the
 * device an executor runs on): composed where it lies, never copied to the
 * host. read copies n bytes at src (the device's memory) into dst (host)
 * and returns HY_OK or a code with err set; only what describes the entry
 * is read — the header and its section table, the tokens, each T and S
 * section's head table — into a host shadow, and every check hy_entry_view
 * makes on those bytes is made. The payloads' checksums are not recomputed
 * (their bytes never reach the host): a device copy is trusted as its tier
 * placed it, from host bytes that passed every check when they were put.
 * device: the device's ordinal, as hy_exec_set_device takes it (-1 for the
 * emulated device, whose memory is the host's). Only an executor on that
 * device composes such an entry (hy_exec_run refuses it elsewhere, naming
 * both); serialising it is refused too. dev must stay valid (its lease
 * held) until hy_entry_free. hy_exec_view_device is this with the
 * executor's own device and copies. */
typedef int (*hy_entry_read_fn)(void *ctx, void *dst, const void *src, size_t n, hy_err *err);
int hy_entry_view_device(const hy_model *m, int device, const void *dev, size_t len,
                         hy_entry_read_fn read, void *ctx, hy_entry **out, hy_err *err);
/* The ordinal of the device whose memory holds e's sections; HY_ENTRY_ON_HOST
 * for an entry in host memory. */
#define HY_ENTRY_ON_HOST (-2)
int hy_entry_device(const hy_entry *e);
/* A view of the entry whose len bytes lie at dev in the memory of the
 * device the executor runs on (hy_entry_view_device, read with the
 * executor's copies): what a service holding an hbm lease on that device
 * composes in place. HY_EINVAL on the CPU. */
int hy_exec_view_device(hy_exec *ex, const void *dev, size_t len, hy_entry **out, hy_err *err);

/* Cache key: SHA-256 over (tenant, model fingerprint, key version, W, S's
 * dtype, the rest of the representation unless it is exact with T and K/V
 * in F32 — so a version-1 entry keeps its key —, token ids as little-endian
 * u32). */
int hy_entry_key(const char *tenant, const uint8_t model_fp[32], int W, hy_entry_repr repr,
                 const int32_t *tokens, size_t n, uint8_t key[32]);

/* --- the combiner (model/combiner.c) -------------------------------------
 * A request is [segment_1 … segment_k, query]. Modes, all on the same
 * executor so comparisons are fair:
 *   full    no reuse: every token is prefilled;
 *   prefix  the prefix-cache baseline: the state after the longest run of
 *           leading segments seen before (one checkpoint per segment
 *           boundary, in a hy_prefix_cache) is restored, the rest prefilled;
 *   pic     HYPIC: a segment with an entry is reused (seam recomputed, body
 *           composed); a miss is prefilled under its true prefix and its
 *           entry built inline;
 *   noseam  pic with W = 0 entries (ablation);
 *   naive   pic without T: S ← S + S_body (ablation; wrong for decaying layers).
 * Then the query is prefilled and the first generated token's logits returned. */
typedef enum hy_mode {
    HY_MODE_FULL = 0,
    HY_MODE_PREFIX,
    HY_MODE_PIC,
    HY_MODE_NOSEAM,
    HY_MODE_NAIVE,
    HY_MODE_COUNT
} hy_mode;
const char *hy_mode_name(hy_mode mode);
int hy_mode_parse(const char *s, hy_mode *out);

typedef struct hy_segment {
    const int32_t *tokens;
    size_t n;
    const hy_entry *entry; /* a cached entry of exactly these tokens, or NULL (a miss) */
} hy_segment;

/* State checkpoints at segment boundaries for the `prefix` mode, keyed by
 * the chain of segment contents, evicted least-recently-used past max_bytes. */
typedef struct hy_prefix_cache hy_prefix_cache;
int hy_prefix_cache_new(size_t max_bytes, hy_prefix_cache **out, hy_err *err);
void hy_prefix_cache_free(hy_prefix_cache *pc);

typedef struct hy_request {
    const hy_segment *segs;
    size_t nsegs;
    const int32_t *query;
    size_t nq; /* must be >= 1: the logits come from the query's last token */
    hy_mode mode;
    int W;                   /* seam of the entries used and built (pic, naive); noseam uses 0 */
    hy_entry_repr repr;      /* how entries built inline are stored */
    hy_prefix_cache *prefix; /* required by HY_MODE_PREFIX */
    /* Entries built inline come back unfinished — their heads not yet in
     * their forms, K/V not yet in their dtype — to be finished
     * (hy_entry_finish) before any other use: what choosing the forms costs
     * (an SVD per head) leaves the pass's critical path, the first token. */
    bool defer_builds;
} hy_request;

typedef struct hy_result {
    hy_entry **built; /* [nsegs], filled for pic-family modes: entries built
                       * inline for misses (the caller owns them), else NULL */
    int hits, misses, uncacheable, prefix_segments;
    int64_t prefilled; /* tokens that went through the forward pass */
    /* Wall seconds: restoring a prefix checkpoint (`prefix`); the forward
     * pass over every computed token — one layer-major pass per request in
     * `full` and the pic family (seams, misses with their inline builds,
     * uncacheable segments and the query together, hits' bodies composed in
     * place), segment by segment after the checkpoint in `prefix`; and the
     * part of it spent composing hits' bodies (pic family). */
    double restore_s, forward_s, compose_s;
    /* hy_combine_stream only: seconds spent waiting for the next segment in
     * order (not in forward_s), and the forward passes it took. */
    double wait_s;
    int passes;
    /* seconds the pass waited for hits' layers still landing (within
     * forward_s): entries fetched while it runs */
    double arrival_s;
} hy_result;

/* Finishes an entry hy_combine built inline under defer_builds (its heads'
 * forms chosen, its K/V rounded); a no-op for any other. HY_ENOMEM. */
int hy_entry_finish(hy_entry *e, hy_err *err);

/* Runs a request from the empty state (st is reset first). built must hold
 * nsegs pointers or be NULL (entries built inline are then freed). */
int hy_combine(hy_exec *ex, hy_state *st, const hy_request *rq, float *logits, hy_result *res,
               hy_err *err);

/* What the streaming combiner learns of segment i of its request: with
 * wait, block until it is known; then HY_OK with *entry its entry, to
 * compose (it must stay valid until hy_combine_stream returns), or NULL: the
 * combiner computes the segment itself (a miss built inline, or prefilled
 * when too short to cache). Without wait: HY_EAGAIN when it is not known
 * yet, else the same. Any other code (err set) ends the request, e.g. a
 * request cancelled while it waited. */
typedef int (*hy_segment_await_fn)(void *ctx, size_t i, bool wait, const hy_entry **entry,
                                   hy_err *err);

/* The pic family (pic, noseam, naive) with entries that arrive while the
 * request runs — from scatter workers (docs/scheduler.md). The result is
 * hy_combine's with segs[i].entry the entry await gave (the segs' own entry
 * fields are not read): segments are composed in request order, and every
 * run of segments whose fate is known when the combiner gets to them goes
 * through one forward pass together, so a segment is composed as soon as it
 * and all before it are known — no barrier on the whole request — and the
 * query follows the last one. Other modes are HY_EINVAL. */
int hy_combine_stream(hy_exec *ex, hy_state *st, const hy_request *rq, hy_segment_await_fn await,
                      void *ctx, float *logits, hy_result *res, hy_err *err);

/* Bytes a state holds now (S, conv and the K/V of every position). */
size_t hy_state_bytes(const hy_state *s);

/* A state laid out for a client (the service's return_state): per layer in
 * order, a linear layer's conv window then S, an attention layer's K then V
 * over positions [0, pos); fp32, row-major, each tensor at an offset aligned
 * to HY_STATE_ALIGN from the layout's start. */
#define HY_STATE_ALIGN 256
typedef enum hy_state_part {
    HY_PART_CONV = 1, /* [K-1][conv_dim], oldest first */
    HY_PART_S = 2,    /* [Hv][dk][dv] */
    HY_PART_K = 3,    /* [pos][Hkv][hd], rotated */
    HY_PART_V = 4,    /* [pos][Hkv][hd] */
} hy_state_part;
typedef struct hy_state_tensor {
    int layer;
    hy_state_part part;
    int ndim;
    uint64_t shape[3];
    uint64_t offset, bytes;
} hy_state_tensor;
/* Fills out[0 .. 2·n_layers) for a state at position pos and returns how
 * many; *total: the bytes from the layout's start to its last tensor's end. */
int hy_state_layout(const hy_model_config *c, int64_t pos, hy_state_tensor *out, uint64_t *total);
/* Where tensor t's floats are in st (NULL when t does not fit st). */
const float *hy_state_part_data(hy_state *st, const hy_state_tensor *t);

/* --- generated checkpoints --------------------------------------------- */
/* Names of the built-in presets, NULL-terminated. */
extern const char *const hy_presets[];
/* Writes DIR/config.json and DIR/model.safetensors: a randomly initialised
 * model of the preset in the real on-disk format. dtype: "F32" or "BF16". */
int hy_model_init(const char *preset, uint64_t seed, const char *dir, const char *dtype,
                  hy_err *err);

#endif
