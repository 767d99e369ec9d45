"""Writes a Qwen3-Next checkpoint (config.json + model.safetensors, Hugging Face
names, as `hypic-model init` makes them) as a GGUF file that stock llama.cpp's
`qwen3next` architecture loads, in F32 or BF16.

    python hf_to_gguf.py DIR OUT.gguf [--type F32|BF16]

Written for the anchor (tools/anchor/llamacpp.sh), against the `gguf` package of
the llama.cpp the anchor builds; it is not llama.cpp's convert_hf_to_gguf.py
(which needs torch and a tokenizer) but follows the same conventions, which
llama.cpp's qwen3next graph (src/models/qwen3next.cpp) assumes:

  - the zero-centred RMSNorm weights (input_layernorm, post_attention_layernorm,
    model.norm, q_norm, k_norm) are stored as 1 + w; the gated norm of the
    linear layers (linear_attn.norm) is plain w and stored as is;
  - A_log is stored as A = -exp(A_log) (ssm_a), dt_bias as ssm_dt.bias;
  - in_proj_qkvz, per key head [q, k, v, z] in Hugging Face's layout, is split
    into attn_qkv (all q heads, all k heads, all v heads: the conv's channel
    order) and attn_gate (z); in_proj_ba stays per key head [b, a] (ssm_ba);
  - conv1d [C, 1, K] becomes [C, K]; experts are stacked into [E, I, H].

llama.cpp's qwen3next has MoE on every layer. A dense MLP layer (the first layer
of our MoE presets, mlp_only_layers) is carried exactly by the MoE block: the
shared expert is the MLP (padded with zero rows to the shared width, which must
be at least the MLP's), its down projection doubled because the shared expert's
gate is sigmoid(0) = 1/2 with a zero gate vector; the routed experts and the
router are zero, so whichever experts are picked add 0. llama.cpp then computes
that layer's (zero) routed experts too: a small extra cost in its timings.

The vocabulary is the byte tokenizer of our embedded models (token = byte + 3;
0, 1, 2 = <unk>, <s>, </s>), which is exactly SentencePiece's byte-fallback
layout, padded with unused tokens to the model's vocab_size.
"""

import argparse
import json
import os
import struct
import sys

import numpy as np
import gguf

T = gguf.MODEL_TENSOR


def fail(msg):
    sys.exit(f"hf_to_gguf: {msg}")


def read_safetensors(path):
    """name -> float32 array of every tensor in a .safetensors file (F32 or BF16)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        a, b = meta["data_offsets"]
        buf = raw[base + a : base + b]
        if meta["dtype"] == "F32":
            t = buf.view(np.float32)
        elif meta["dtype"] == "BF16":
            t = (buf.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            fail(f"{path}: tensor {name} has dtype {meta['dtype']} (F32 or BF16 only)")
        out[name] = np.array(t, dtype=np.float32).reshape(meta["shape"])
    return out


def config_value(cfg, key, default=None):
    """A key of config.json, looked up at the top level, then in rope_parameters."""
    if key in cfg:
        return cfg[key]
    rp = cfg.get("rope_parameters") or {}
    if key in rp:
        return rp[key]
    if default is None:
        fail(f"config.json has no '{key}'")
    return default


def vocabulary(n):
    """Tokens, scores and types of the byte tokenizer padded to n tokens."""
    if n < 259:
        fail(f"vocab_size {n} < 259: the byte tokenizer needs 3 specials + 256 bytes")
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    toks += [f"<unused{i}>" for i in range(n - 259)]
    types += [gguf.TokenType.UNUSED] * (n - 259)
    return toks, [0.0] * n, types


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["F32", "BF16"], default="F32")
    args = ap.parse_args()

    with open(os.path.join(args.dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3_next":
        fail(f"{args.dir}: model_type {cfg.get('model_type')!r}, only qwen3_next converts")
    w = read_safetensors(os.path.join(args.dir, "model.safetensors"))

    H = cfg["hidden_size"]
    L = cfg["num_hidden_layers"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim", H // nh)
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    if dk != dv:
        fail(f"linear key head dim {dk} != value head dim {dv}: llama.cpp's qwen3next needs them equal")
    E = cfg.get("num_experts", 0)
    if E == 0:
        fail("num_experts is 0: llama.cpp's qwen3next refuses a model without experts "
             "(use a MoE preset, e.g. hypic-model init --preset small-moe)")
    if not cfg.get("norm_topk_prob", True):
        fail("norm_topk_prob false: llama.cpp's qwen3next always renormalises the top-k weights")
    I_moe, I_sh = cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]
    interval = cfg.get("full_attention_interval", 4)
    types = cfg.get("layer_types") or [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(L)]
    step = cfg.get("decoder_sparse_step", 1)
    dense = set(cfg.get("mlp_only_layers") or [])
    dense |= {i for i in range(L) if not ((i + 1) % step == 0)}
    vocab = cfg["vocab_size"]
    tied = cfg.get("tie_word_embeddings", False)

    qtype = gguf.GGMLQuantizationType.BF16 if args.type == "BF16" else gguf.GGMLQuantizationType.F32
    wr = gguf.GGUFWriter(args.out, "qwen3next")
    wr.add_name(f"hypic {cfg.get('hypic_preset', 'checkpoint')}")
    wr.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if args.type == "BF16" else gguf.LlamaFileType.ALL_F32)
    wr.add_context_length(cfg.get("max_position_embeddings", 262144))
    wr.add_embedding_length(H)
    wr.add_block_count(L)
    wr.add_feed_forward_length(cfg.get("intermediate_size", I_sh))
    wr.add_head_count(nh)
    wr.add_head_count_kv(nkv)
    wr.add_key_length(hd)
    wr.add_value_length(hd)
    wr.add_rope_freq_base(float(config_value(cfg, "rope_theta")))
    wr.add_rope_dimension_count(int(hd * config_value(cfg, "partial_rotary_factor", 0.25)))
    wr.add_layer_norm_rms_eps(cfg.get("rms_norm_eps", 1e-6))
    wr.add_expert_count(E)
    wr.add_expert_used_count(cfg["num_experts_per_tok"])
    wr.add_expert_feed_forward_length(I_moe)
    wr.add_expert_shared_feed_forward_length(I_sh)
    wr.add_ssm_conv_kernel(cfg.get("linear_conv_kernel_dim", 4))
    wr.add_ssm_state_size(dk)
    wr.add_ssm_group_count(nk)
    wr.add_ssm_time_step_rank(nv)
    wr.add_ssm_inner_size(dv * nv)
    wr.add_full_attention_interval(interval)
    wr.add_recurrent_layers([t == "linear_attention" for t in types])
    toks, scores, ttypes = vocabulary(vocab)
    wr.add_tokenizer_model("llama")
    wr.add_token_list(toks)
    wr.add_token_scores(scores)
    wr.add_token_types(ttypes)
    wr.add_unk_token_id(0)
    wr.add_bos_token_id(cfg.get("bos_token_id", 1))
    wr.add_eos_token_id(cfg.get("eos_token_id", 2))
    wr.add_add_bos_token(False)

    used, written = set(), []

    def get(name):
        if name not in w:
            fail(f"model.safetensors has no {name}")
        used.add(name)
        return w[name]

    def put(kind, t, bid=None, suffix=".weight", keep_f32=False):
        name = gguf.TENSOR_NAMES[kind].format(bid=bid) + suffix
        written.append(name)
        t = np.ascontiguousarray(t, dtype=np.float32)
        # as convert_hf_to_gguf.py: 1-D tensors, the conv and the routers stay F32
        if qtype == gguf.GGMLQuantizationType.F32 or keep_f32 or t.ndim <= 1:
            wr.add_tensor(name, t)
        else:
            wr.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)

    put(T.TOKEN_EMBD, get("model.embed_tokens.weight"))
    put(T.OUTPUT_NORM, get("model.norm.weight") + 1)
    if not tied:
        put(T.OUTPUT, get("lm_head.weight"))
    r = nv // nk
    for i in range(L):
        p = f"model.layers.{i}."
        put(T.ATTN_NORM, get(p + "input_layernorm.weight") + 1, i)
        put(T.ATTN_POST_NORM, get(p + "post_attention_layernorm.weight") + 1, i)
        if types[i] == "full_attention":
            a = p + "self_attn."
            put(T.ATTN_Q, get(a + "q_proj.weight"), i)  # per head [q, gate], as llama.cpp splits it
            put(T.ATTN_K, get(a + "k_proj.weight"), i)
            put(T.ATTN_V, get(a + "v_proj.weight"), i)
            put(T.ATTN_OUT, get(a + "o_proj.weight"), i)
            put(T.ATTN_Q_NORM, get(a + "q_norm.weight") + 1, i)
            put(T.ATTN_K_NORM, get(a + "k_norm.weight") + 1, i)
        else:
            a = p + "linear_attn."
            qkvz = get(a + "in_proj_qkvz.weight").reshape(nk, 2 * dk + 2 * r * dv, H)
            q, k, v, z = np.split(qkvz, [dk, 2 * dk, 2 * dk + r * dv], axis=1)
            put(T.ATTN_QKV, np.concatenate([x.reshape(-1, H) for x in (q, k, v)]), i)
            put(T.ATTN_GATE, z.reshape(-1, H), i)
            put(T.SSM_BETA_ALPHA, get(a + "in_proj_ba.weight"), i)
            conv = get(a + "conv1d.weight")
            put(T.SSM_CONV1D, conv.reshape(conv.shape[0], conv.shape[-1]), i, keep_f32=True)
            put(T.SSM_DT, get(a + "dt_bias"), i, suffix=".bias")
            put(T.SSM_A, -np.exp(get(a + "A_log")), i, suffix="")
            put(T.SSM_NORM, get(a + "norm.weight"), i)
            put(T.SSM_OUT, get(a + "out_proj.weight"), i)
        m = p + "mlp."
        if i in dense:
            gate, up, down = (get(m + f"{x}_proj.weight") for x in ("gate", "up", "down"))
            n = gate.shape[0]
            if n > I_sh:
                fail(f"layer {i}: a dense MLP of {n} > the shared expert's {I_sh} cannot be carried")
            pad = ((0, I_sh - n), (0, 0))
            put(T.FFN_GATE_SHEXP, np.pad(gate, pad), i)
            put(T.FFN_UP_SHEXP, np.pad(up, pad), i)
            put(T.FFN_DOWN_SHEXP, np.pad(2 * down, ((0, 0), (0, I_sh - n))), i)
            put(T.FFN_GATE_INP_SHEXP, np.zeros(H, np.float32), i)
            put(T.FFN_GATE_INP, np.zeros((E, H), np.float32), i, keep_f32=True)
            for kind, shape in ((T.FFN_GATE_EXP, (E, I_moe, H)), (T.FFN_UP_EXP, (E, I_moe, H)),
                                (T.FFN_DOWN_EXP, (E, H, I_moe))):
                put(kind, np.zeros(shape, np.float32), i)
        else:
            put(T.FFN_GATE_INP, get(m + "gate.weight"), i, keep_f32=True)
            for kind, x in ((T.FFN_GATE_EXP, "gate"), (T.FFN_UP_EXP, "up"), (T.FFN_DOWN_EXP, "down")):
                put(kind, np.stack([get(m + f"experts.{e}.{x}_proj.weight") for e in range(E)]), i)
            s = m + "shared_expert."
            put(T.FFN_GATE_SHEXP, get(s + "gate_proj.weight"), i)
            put(T.FFN_UP_SHEXP, get(s + "up_proj.weight"), i)
            put(T.FFN_DOWN_SHEXP, get(s + "down_proj.weight"), i)
            put(T.FFN_GATE_INP_SHEXP, get(m + "shared_expert_gate.weight").reshape(H), i)
    left = sorted(set(w) - used - ({"lm_head.weight"} if tied else set()))
    if left:
        fail(f"tensors not converted: {', '.join(left[:5])}{' ...' if len(left) > 5 else ''}")

    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    print(f"hf_to_gguf: {args.out}: {len(written)} tensors, {args.type}")


if __name__ == "__main__":
    main()
