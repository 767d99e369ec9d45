/*
 * Private to model/: the weight layouts the executor computes with, and the
 * running state. Checkpoint tensors are widened to fp32 and rearranged at load
 * time into these layouts, so the forward pass never branches on the
 * checkpoint's flavour; a BF16 checkpoint's weight matrices are then narrowed
 * back to bf16 in the same layouts (weights.c), which only the products read.
 */
#ifndef HY_MODEL_INTERNAL_H
#define HY_MODEL_INTERNAL_H

#include "hy_kernels.h"
#include "hy_model.h"
#include "safetensors_internal.h"

/* The kernels' family of a model's linear layers, and the shape of its T. */
static inline hy_la_family hy_lin_family(const hy_model_config *c)
{
    return c->lin_kind == HY_LIN_LIGHTNING ? HY_LA_LIGHTNING
           : c->lin_kind == HY_LIN_KDA     ? HY_LA_KDA
           : c->lin_kind == HY_LIN_MAMBA2  ? HY_LA_MAMBA2
                                           : HY_LA_GDN;
}
static inline hy_la_tkind hy_lin_tkind(const hy_model_config *c)
{
    return hy_la_t_kind(hy_lin_family(c));
}

/* A family's row of model.c's table: what its checkpoints name the parts
 * around the layers, and its layers' loaders (model.c's own). init.c writes
 * generated checkpoints under the same names. */
typedef struct hy_family {
    const char *name;            /* for messages: "Qwen3-Next" */
    const char *released_prefix; /* where released files keep the text model: "model.",
                                    Nemotron-H's "backbone." (model. is read too) */
    const char *embed;           /* the embedding, after the prefix */
    const char *embed_released;  /* its released name when transformers' differs, or NULL */
    const char *final_norm;      /* the norm before the LM head */
    const char *attn_module; /* a full-attention layer's module: self_attn, Nemotron-H's mixer */
    bool block_norm;         /* one norm per block (Nemotron-H), not one per sublayer */
    bool zero_centred_norms; /* RMSNorm weights stored as w, applied as 1 + w (Qwen) */
    const struct hy_family_loaders *load;
} hy_family;
const hy_family *hy_family_of(hy_arch a);

/* An MLP from and to width D (the hidden size, or an expert's latent). */
typedef struct hy_mlp_w {
    int inter;
    float *w_gu;   /* SwiGLU: [2·inter][D], gate_proj rows then up_proj rows; relu²: [inter][D] */
    float *w_down; /* [D][inter] */
    float *b_up;   /* [inter] (relu² with biases), else NULL */
    float *b_down; /* [D] or NULL */
} hy_mlp_w;

typedef struct hy_gdn_w {
    float *w_in;    /* [conv_dim + Vd + 2·Hv][H]: rows q | k | v | z | b | a */
    float *conv_w;  /* [K][conv_dim] */
    float *neg_A;   /* [Hv] = −exp(A_log) */
    float *dt_bias; /* [Hv] */
    float *norm_w;  /* [dv], plain weight of the gated RMSNorm */
    float *w_out;   /* [H][Vd] */
} hy_gdn_w;

/* MiniMax's lightning attention (heads = lin_v_heads, d = lin_dk = lin_dv). */
typedef struct hy_light_w {
    float *w_in;   /* [4·heads·d][H]: qkv_proj rows ([q|k|v] per head), then output_gate rows */
    float *norm_w; /* [heads·d], plain weight of the output RMSNorm */
    float *w_out;  /* [H][heads·d] */
    float *g0;     /* [heads]: the constant log-decay −slope_rate of each head */
} hy_light_w;

/* Mamba2 (Nemotron-H; nh = lin_v_heads heads of P = lin_dv channels, I =
 * nh·P, G = lin_k_heads groups of B and C of N = lin_dk, C = I + 2·G·N). */
typedef struct hy_mamba_w {
    float *w_in;    /* [I + C + nh][hidden]: in_proj's rows z | x B C | dt */
    float *b_in;    /* [I + C + nh] (use_bias) or NULL */
    float *conv_w;  /* [K][C] */
    float *conv_b;  /* [C] (use_conv_bias) or NULL */
    float *neg_A;   /* [nh] = −exp(A_log) */
    float *dt_bias; /* [nh] */
    float *D;       /* [nh]: the skip, y += D·x */
    float *norm_w;  /* [I], plain weight of the group-wise gated RMSNorm */
    float *w_out;   /* [hidden][I] */
    float *b_out;   /* [hidden] (use_bias) or NULL */
} hy_mamba_w;

/* Kimi Delta Attention (heads H = lin_v_heads, d = lin_dk = lin_dv, Q = H·d;
 * Kimi's gate bottlenecks f_a / g_a are d wide, Ling's f_proj / g_proj full
 * rank: kda_full_gates). */
typedef struct hy_kda_w {
    float *w_in;    /* Kimi [3Q + 2d + H][hidden]: q | k | v | f_a | g_a | b rows;
                     * Ling [5Q + H][hidden]: q | k | v | f | g | b */
    float *w_fb;    /* [Q][d]: f_b_proj (Kimi), else NULL */
    float *w_gb;    /* [Q][d]: g_b_proj (Kimi), else NULL */
    float *conv_w;  /* [K][3Q] */
    float *neg_A;   /* [H] = −exp(A_log) */
    float *dt_bias; /* [Q] */
    float *norm_w;  /* [d], plain weight of the gated output RMSNorm */
    float *w_out;   /* [hidden][Q] */
} hy_kda_w;

/* Multi-head latent attention (nh = n_heads; dn, dr, dv = qk_nope, qk_rope,
 * v_head; R = kv_lora). */
typedef struct hy_mla_w {
    float *w_a;     /* [Qa + R + dr (+ nh)][hidden]: q_proj (Qa = nh(dn+dr)) or q_a_proj (Qa =
                     * q_lora) rows, then kv_a_proj_with_mqa rows, then with mla_head_gate
                     * g_proj's; with RoPE each head's query rope rows and the shared key's
                     * are reordered from interleaved pairs (x0, x1), (x2, x3)... to halves
                     * x0 x2 ... | x1 x3 ..., so rotating halves is the checkpoint's rotation
                     * of pairs, and the rotated key lands in transformers' cache layout */
    float *b_kva;   /* [R + dr] (mla_bias), reordered likewise, or NULL */
    float *b_o;     /* [hidden] (mla_bias) or NULL */
    float *q_norm;  /* [q_lora]: q_a_layernorm (with q_lora) */
    float *w_qb;    /* [nh(dn+dr)][q_lora]: q_b_proj (with q_lora) */
    float *kv_norm; /* [R]: kv_a_layernorm */
    float *w_kvb;   /* [nh(dn+dv)][R]: kv_b_proj, per head k_nope | v */
    float *w_o;     /* [hidden][nh·dv] */
} hy_mla_w;

typedef struct hy_attn_w {
    float *w_qkv;   /* [2·Hq·hd + 2·Hkv·hd][H]: q_proj rows ([query|gate] per head), k, v */
    float *q_norm1; /* [hd], 1 + weight */
    float *k_norm1; /* [hd], 1 + weight */
    float *w_o;     /* [H][Hq·hd] */
} hy_attn_w;

typedef struct hy_layer_w {
    hy_layer_kind kind;
    bool moe;
    float *in_norm1, *post_norm1; /* [H], 1 + weight */
    hy_gdn_w gdn;
    hy_light_w light;
    hy_kda_w kda;
    hy_mamba_w mamba;
    hy_attn_w attn;
    hy_mla_w mla;
    hy_mlp_w mlp;       /* dense MLP */
    float *router;      /* [E][H] */
    float *router_bias; /* [E]: a sigmoid router's selection bias (e_score_correction_bias) */
    hy_mlp_w *experts;  /* [E] */
    hy_mlp_w shared;    /* inter 0 when absent */
    float *shared_gate; /* [H] or NULL */
    hy_mlp_w latent;    /* moe_latent: fc1_latent_proj as w_gu [L][H] (b_up [L]) and
                         * fc2_latent_proj as w_down [H][L] (b_down [H]); inter = L */
} hy_layer_w;

typedef struct hy_owned {
    void *p;
    size_t bytes;
} hy_owned;

/* A buffer of matrices kept in q8 (weights.c): n values, their scales. */
typedef struct hy_q8buf {
    const int8_t *q;
    size_t n;
    const float *scale;
} hy_q8buf;

struct hy_model {
    hy_model_config cfg;
    uint8_t fingerprint[32]; /* hy_model_fingerprint */
    float *embed;            /* [V][H] */
    float *lm_head;          /* [V][H]; == embed when tied */
    float *final_norm1;      /* [H], 1 + weight */
    hy_layer_w *layers;
    float *rope_inv_freq; /* [rotary_dim / 2] */
    /* Whether the weight matrices (every field hy_model_matrices lists) hold
     * bf16 values in place of fp32 ones: a BF16 checkpoint's own bytes, half
     * of fp32's, which the forward's products widen as they read them. The
     * fields keep their float * type; only forward.c's linear() reads them. */
    bool w_bf16;
    bool bf16_math;  /* w_bf16 and hy_linear_bf16's bf16 arithmetic (HY_WEIGHTS_BF16) */
    bool bf16_asked; /* w_bf16 and HY_WEIGHTS_BF16: bf16 arithmetic wherever it can run */
    /* Whether they hold q8 values (HY_WEIGHTS_Q8): the fields point at each
     * matrix's first 8-bit value; q8 [n_q8] lists the buffers by address,
     * for hy_model_q8_matrix to find a matrix's scales. */
    bool w_q8;
    hy_q8buf *q8;
    size_t n_q8;
    hy_owned *owned; /* every buffer the model frees, with its size */
    size_t n_owned, cap_owned;
};

/* The addresses of every weight-matrix field of m (the operands of the
 * forward's linear(); MLA's kv_b_proj, which it also slices per head, is not
 * one): at most cap written, the count returned. */
size_t hy_model_matrices(hy_model *m, float ***slots, size_t cap);
/* Keeps m's matrices in bf16 when every value is one (a BF16 checkpoint's):
 * each buffer holding matrices is narrowed into a new one of half the size
 * and the old freed. HY_OK with m->w_bf16 set, HY_OK unchanged when some
 * value is not a bf16 one, or HY_ENOMEM (m unchanged). */
int hy_model_narrow(hy_model *m, hy_err *err);
/* Quantises m's matrices (whatever the checkpoint held) to q8: each buffer
 * holding matrices rewritten as 8-bit values and one fp32 scale per 32 of
 * them (HY_Q8_BLOCK), the old freed. HY_OK with m->w_q8 set, or HY_ENOMEM
 * (m unchanged). */
int hy_model_quantize_q8(hy_model *m, hy_err *err);
/* Matrix w (a field hy_model_matrices lists) of a q8 model, for hy_linear_q8. */
void hy_model_q8_matrix(const hy_model *m, const float *w, hy_q8w *out);

struct hy_state {
    const hy_model *m;
    int64_t pos;
    float **S, **conv; /* per layer; NULL for attention layers */
    float **k, **v;    /* per layer; NULL for linear layers; [kv_cap][Hkv][hd], or MLA's
                        * [kv_cap][kv_lora] latent and [kv_cap][qk_rope] shared key */
    float **x;         /* per MLA layer: [kv_cap][hy_state_x_row] every head's key, then
                        * every head's value, expanded from k and v; NULL otherwise */
    int64_t x_valid;   /* x holds the expansion of positions [0, x_valid): passes that
                        * attend in the latent space (HY_MLA_ABSORBED) expand nothing */
    int64_t kv_cap;
    /* The version of its contents: a new value, from one counter for every
     * state, each time they may change on the host (a CPU pass, a reset, a
     * copy, a writable pointer handed out: hy_state_touch). A device
     * executor's mirror of the state is current while this is the value it
     * saw when its last pass ended. */
    uint64_t version;
};
/* A new version for s (its contents change, or may, on the host). */
void hy_state_touch(hy_state *s);

/* Floats of an MLA layer's expanded row (0 without MLA). */
size_t hy_state_x_row(const hy_model_config *c);

/* What a forward pass records for an entry while it runs (model/entry.c)
 * over one segment, positions [start − w, end): from `start` (the body's
 * first token) on, per linear layer the transition operator of the tokens
 * since (T, advanced in place from I) and per attention layer the canonical K
 * (after k_norm, before RoPE) and V of each token. Per linear layer S_w
 * receives the state at `start`, and at `end` is replaced in place by the
 * body's zero-start state S_body = S_end − T·S_w; `tail` receives the conv
 * state at `end`. The seam's tokens run as usual in the same forward steps,
 * so neither the seam nor the build costs a pass over the weights of its own. */
typedef struct hy_capture {
    int64_t start, end;
    float **S_w;       /* per layer: [Hv][dk][dv] (NULL for attention) */
    float **T;         /* per layer: [Hv] × T's floats (dk×dk, or 1: hy_lin_tkind), advanced in
                        * place; NULL for attention */
    double **logdecay; /* per layer: [Hv], Σ of the body's scalar log-decays — the γ of
                        * T = γ·Π(I − β k kᵀ) — where the family has them (GDN), else NULL */
    float **K, **V;    /* per layer: [end − start][Hkv][hd], row = position − start */
    float **tail;      /* per layer: [K−1][conv_dim] */
} hy_capture;

/* One piece of a forward pass (hy_exec_run): a run of n computed tokens —
 * recording an entry when cap is set — or a hole: a cached entry's body, its
 * nb positions composed instead of computed (linear layers S ← T·S + S_body,
 * or S ← S + S_body without T; conv state ← its tail; attention layers get
 * its K rotated to the hole's positions, and its V). */
typedef struct hy_piece {
    const int32_t *tokens; /* a run when not NULL */
    size_t n;
    hy_capture *cap;
    const hy_entry *hole; /* a hole when tokens is NULL */
    bool use_T;
} hy_piece;

/* Advances st over the pieces in order, layer by layer over all their
 * computed tokens in steps of at most max_batch of them: each projection is
 * one GEMM per step, whatever mix of runs and holes the step holds. logits
 * (when not NULL) are the last token's, and then the last piece must be a
 * run. *compose_s (when not NULL) gains the time spent composing holes (the
 * threads' seconds in composition ÷ the threads, plus the hole K/V writes).
 * Token ids and entries are checked before any state changes. A hole whose
 * entry is still landing (hy_entry_view_open) is waited for layer by layer;
 * one that fails to land fails the call, and st is reset: nothing of the
 * pass stays. */
int hy_exec_run(hy_exec *ex, hy_state *st, const hy_piece *pieces, size_t np, float *logits,
                double *compose_s, hy_err *err);

/* Called by hy_exec_run in its own thread after each layer's mixer (linear
 * or attention) of each step, with the position the step ends at: that
 * layer's state — and a capture's sections of it — hold every row up to
 * there. NULL: no hook. */
/* Seconds the last hy_exec_run waited for holes' layers to land. */
double hy_exec_arrival_wait_s(const hy_exec *ex);

typedef void (*hy_layer_hook_fn)(void *ctx, int layer, int64_t end);
void hy_exec_set_layer_hook(hy_exec *ex, hy_layer_hook_fn fn, void *ctx);

/* Whether e's sections have the shapes model config c reads and writes
 * through. */
bool hy_entry_fits(const hy_entry *e, const hy_model_config *c);

/* Starts building the entry of the segment tokens[0, n) that will run from
 * position pos under seam setting W: allocates it and a capture whose start
 * is its body's first position (T at I). Refuses a segment too short to cache
 * (hy_entry_seam's error) or out-of-vocabulary ids. */
int hy_entry_build_begin(const hy_model *m, int64_t pos, const int32_t *tokens, size_t n, int W,
                         hy_entry_repr repr, hy_entry **e, hy_capture **cap, hy_err *err);
/* Layer l's captured T, S_body and K/V, final, stored in the entry in its
 * representation (encoded, rounded) and the capture's buffers of it freed;
 * HY_ENOMEM. Idempotent: a layer done is skipped. */
int hy_entry_build_layer(hy_entry *e, hy_capture *cap, int layer);
/* After the pass over the segment: every layer not done yet (above), then
 * the capture freed (e stays the caller's). */
int hy_entry_build_end(hy_entry *e, hy_capture *cap);

/* An executor's profile (hy_exec_set_profiling). Time is attributed by a
 * cursor: each mark adds the wall time since `last` to one kind and moves
 * `last` on, so every second between a call's start and its end lands in
 * exactly one kind. Written only by the thread running the executor. */
typedef struct hy_exec_stats {
    bool on;
    double last; /* hy_now_s() of the latest mark */
    hy_exec_prof prof;
} hy_exec_stats;

/* One linear head's T or S(body|0) as an entry stores it (entry_repr.c). */
typedef struct hy_head_rep {
    uint8_t form;   /* hy_entry_form */
    uint8_t dtype;  /* hy_entry_dtype of the payload */
    uint16_t rank;  /* LOWRANK, IPLR */
    float gamma;    /* SCALAR, IPLR */
    float bound;    /* T: ≥ ‖T̃ − T‖₂; S: ‖S̃ − S‖_F / ‖S‖_F */
    uint32_t bytes; /* of the payload */
    const void *p;  /* the payload: DIAG [dk]; LOWRANK, IPLR U [rows][r] then Vt [r][cols];
                     * DENSE [rows][cols] (T: rows = cols = dk; S: dk × dv) */
} hy_head_rep;

struct hy_entry {
    hy_model_config cfg; /* the shapes its sections have (from its model) */
    int W, w, n, nb;     /* seam setting, seam width, segment and body tokens */
    hy_entry_repr repr;  /* how it is stored */
    int version;         /* the format it was read in; HY_ENTRY_VERSION when built */
    uint8_t model_fp[32];
    int n_layers;
    int32_t *tokens;       /* [n], the whole segment */
    hy_head_rep *th;       /* [n_layers][Hv]: each linear layer's heads' T */
    hy_head_rep *sh;       /* [n_layers][Hv]: their S(body|0) */
    void **T, **S;         /* per linear layer: the bytes th's and sh's payloads point into
                            * (owned; a view's point into its buffer) */
    float **tail;          /* per linear layer: [K-1][conv_dim] */
    void **K, **V;         /* per attention layer: [nb][Hkv][hd] in repr.kv, K canonical */
    bool view;             /* the sections (tokens included) point into a buffer
                            * the entry does not own (hy_entry_view) */
    hy_entry_arrival *arr; /* a view whose bytes still land (hy_entry_view_open) */
    /* A view whose sections lie in a device's memory (hy_entry_view_device):
     * every section pointer points into shadow, a host buffer of the entry's
     * length holding only what describes it (header, section table, tokens,
     * the T and S head tables), and stands for the byte at the same offset
     * from dev. NULL for an entry in host memory. */
    unsigned char *shadow;
    size_t shadow_len;
    const unsigned char *dev;
    int dev_index;       /* the device's ordinal (-1: the emulated device) */
    hy_capture *pending; /* built inline, not finished (hy_request.defer_builds) */
};
void hy_entry_arrival_free(hy_entry_arrival *a);
/* Where a section pointer of a device-resident entry points on its device
 * (p itself for an entry in host memory; NULL stays NULL). */
static inline const void *hy_entry_dev_addr(const hy_entry *e, const void *p)
{
    if (!e->dev || !p) return p;
    return e->dev + ((const unsigned char *)p - e->shadow);
}

/* --- head representations (entry_repr.c) --- */
/* Bytes of a head's payload. */
size_t hy_rep_payload_bytes(int form, int dtype, int rank, int rows, int cols);
/* Chooses head T's form under repr (tol, and bf16 when repr.t allows) and
 * writes it: *out with out->p a malloc'd payload (NULL when empty) the caller
 * frees. T: hy_la_t_size() floats of the family's kind; loggamma: log of the
 * head's scalar decay over the body (NAN when the family has none). */
int hy_rep_encode_t(hy_la_tkind kind, int dk, const float *T, double loggamma,
                    const hy_entry_repr *repr, hy_head_rep *out);
/* The same for S(body|0) [dk][dv] under repr.s and tol. */
int hy_rep_encode_s(int dk, int dv, const float *S, const hy_entry_repr *repr, hy_head_rep *out);
/* Floats of scratch hy_rep_apply needs per thread. */
size_t hy_rep_apply_scratch(hy_la_tkind kind, int dk, int dv);
/* S ← T̃·S + S̃ for one head (use_T false: S ← S + S̃, the naive ablation).
 * S: [dk][dv] fp32. */
void hy_rep_apply(hy_la_tkind kind, int dk, int dv, const hy_head_rep *t, const hy_head_rep *s,
                  bool use_T, float *S, float *work);
/* A layer's T or S section (version 2): heads × 16-byte records, then each
 * head's payload at a multiple of 16. Bytes of it; written into dst. */
size_t hy_rep_section_bytes(const hy_head_rep *h, int heads);
void hy_rep_section_write(const hy_head_rep *h, int heads, void *dst);
/* Bytes of the table of `heads` heads a T or S section starts with. */
size_t hy_rep_table_bytes(int heads);
/* Parses and checks a version-2 section of len bytes: forms the part and
 * family allow, ranks, payload sizes, bounds; out[h].p point into sec. */
int hy_rep_section_parse(const void *sec, size_t len, int heads, bool is_t, hy_la_tkind kind,
                         int dk, int dv, hy_head_rep *out, hy_err *err);

/* Allocates an entry of n tokens with seam w for model m (sections
 * uninitialised), or with view only its section pointer arrays (all NULL). */
int hy_entry_alloc(const hy_model *m, int W, int w, int n, hy_entry_repr repr, bool view,
                   hy_entry **out, hy_err *err);

/* The table of config.json keys the loader reads (model/config.c), rendered
 * as the Markdown table docs/config-keys.md holds. Returns its length, or
 * HY_ERANGE when it needs more than cap bytes. */
int hy_config_keys_markdown(char *buf, size_t cap);

/* Grows the KV cache of every attention layer to hold at least `need`
 * positions. */
int hy_state_reserve(hy_state *s, int64_t need, hy_err *err);

#endif
