#!/usr/bin/env python3
"""Two tiny random hybrid checkpoints that vLLM (CPU) and hypic-cached both load.

    /work/vl/venv/bin/python tools/vllm/make_checkpoints.py OUT_DIR [--seed 1] [--verify]

writes, from the seed alone (the same seed gives the same bytes):

  OUT_DIR/qwen35-tiny/     Qwen3.5 text model: config.json with model_type
                           `qwen3_5_text` and architectures `Qwen3_5ForCausalLM`
                           (the text-only entry of vLLM's registry, served by
                           vllm/model_executor/models/qwen3_5.py; transformers'
                           Qwen3_5TextConfig / Qwen3_5ForCausalLM), dense MLPs,
                           separate in_proj_qkv / in_proj_z / in_proj_b / in_proj_a.
  OUT_DIR/qwen3next-tiny/  Qwen3-Next (`qwen3_next`, `Qwen3NextForCausalLM`):
                           packed in_proj_qkvz / in_proj_ba and a mixture of experts
                           in every layer (vLLM's Qwen3-Next has no dense-MLP path:
                           num_experts=0 fails there), 8 experts, 2 per token, one
                           gated shared expert.

Each folder holds config.json, generation_config.json, model.safetensors (every
tensor bf16, the experts one tensor per expert and projection as the published
Qwen3-Next checkpoints store them), tokenizer.json and tokenizer_config.json.

Why these shapes:
  * 4 layers, 3 linear_attention then 1 full_attention (the attention layer last,
    the hybrid period of the real models in miniature), hidden 128, vocab 512.
  * linear_key_head_dim = linear_value_head_dim = 128: vLLM's CPU gated-delta-net
    kernel takes no other head size. 2 key heads and 4 value heads, so the
    per-key-head packing of in_proj_qkvz and the value-head grouping are
    exercised (one key head would hide a wrong layout).
  * full attention: 2 query heads, 1 KV head, head_dim 64 (a size vLLM's CPU
    attention supports), partial rotary 0.25 as the real models.
  * bf16 weights: vLLM's CPU GDN path asserts bf16 activations, so the model is
    served with dtype bfloat16; hypic-cached computes in fp32 from these same
    bf16 weights.

Initialisation (all from --seed; every tensor drawn by its own generator seeded
from the seed, the model's name and the tensor's name, so nothing depends on
transformers' init order; the same seed writes the same bytes):
  * projections N(0, --init-std 0.04): transformers' 0.02 leaves the output
    mostly a function of the last token's embedding; much above 0.05 the model
    turns chaotic and bf16 (vLLM) and fp32 (hypic) part ways within 16 greedy
    tokens more often (measured against transformers in bf16 and fp32);
  * embeddings N(0, 1); LM head N(0, --lm-head-std 0.3) with a log-normal scale
    per row (--lm-head-row-spread 0.5: some tokens "popular", which widens the
    gap between the best and the second-best logit), minus --lm-head-self 0.3 of
    each row's norm along its own token's embedding (otherwise a popular token
    often predicts itself and greedy output sticks on it: "w307 w307 w307 ...");
    logits come out with a standard deviation of about 4.5;
  * MoE router N(0, --router-std 0.3): decisive expert choices, so bf16 and fp32
    rarely route a token differently;
  * RMSNorm weights 1 + N(0, 0.1) in each norm's stored convention (the (1 + w)
    norms store w, the gated norm of the linear layers stores 1 + w): all-zero
    norm weights, transformers' init, would not catch a convention error;
  * A_log = log U(1, 16); dt_bias = softplus⁻¹ of a log-uniform step in
    [0.001, 0.1] (Mamba's init: per-token decays, at a = 0, from nearly 1 to e^-1.6,
    some heads carrying context across thousands of tokens); causal conv
    N(0, 0.5); every other tensor N(0, --init-std).
  On a random 3000-token prompt the top-1 minus top-2 logit margin (fp32) has
  a median of about 3 and a 10th percentile of about 0.45; about 1% of
  positions are closer than 0.05 (--verify prints these).

The tokenizer is a `tokenizers` WordLevel model over the whole vocabulary
(id 0 `<|endoftext|>`, the EOS; id 1 `<unk>`; id i ≥ 2 the word `w<i>`) with a
Metaspace pre-tokenizer and decoder, so text round-trips as "w17 w300 ..." and
vLLM's OpenAI server detokenizes any id. Send token-id prompts; set ignore_eos
when comparing a fixed number of greedy tokens.

Serving them with vLLM 0.32 on CPU (as measured with these folders):
  LLM(model=DIR, dtype="bfloat16", max_model_len=8192, enforce_eager=True), with
  VLLM_CPU_KVCACHE_SPACE=1 (GiB) in the environment and the script's work under
  `if __name__ == "__main__":` (the engine's processes are spawned). The OpenAI
  server: `python -m vllm.entrypoints.openai.api_server --model DIR ...` (the
  venv's `vllm` command stops on "No package metadata was found for vllm").
  With enable_prefix_caching=True vLLM sets mamba_cache_mode "align" and an
  attention block of 1152 tokens (the mamba page size rounded up): hits come in
  whole 1152-token blocks (2304 of a 3000-token prompt), and a request sent right
  after the identical one found nothing cached; one request later it hits.
  vLLM's logits are bf16 (the best ones here lie near 20 to 28, where bf16 steps
  by 0.125): two candidates can tie exactly, and vLLM then takes the lower id
  where an fp32 executor takes the larger logit. A greedy comparison should stop
  at (or accept either token of) a step whose vLLM top-2 logprobs are equal.

--verify reloads each folder with transformers (fp32), checks its logits equal
those of the in-memory model (the expert split and names round-trip), and
prints the top-1 minus top-2 logit margin over every position of a random
prompt.
"""

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

VOCAB = 512
LAYER_TYPES = ["linear_attention"] * 3 + ["full_attention"]

COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    num_hidden_layers=len(LAYER_TYPES),
    layer_types=LAYER_TYPES,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=64,
    linear_num_key_heads=2,
    linear_num_value_heads=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    eos_token_id=0,
    bos_token_id=None,
    pad_token_id=None,
)

MODELS = {
    "qwen35-tiny": dict(arch="Qwen3_5ForCausalLM", extra=dict(intermediate_size=256)),
    # The published shape of the smallest Qwen3.5 (Qwen3.5-0.8B's model card: hidden 1024,
    # 24 layers as 6 x (3 Gated DeltaNet + 1 gated attention), 8 query and 2 KV heads of
    # 256, FFN 3584, vocabulary 248 320; 16 linear heads of 128 for keys and values,
    # RoPE theta 1e7 on a quarter of each head) with random weights: the benchmark's
    # real-shape model, where prefill and not Python decides TTFT. Built only when asked
    # for (--only): about 0.9 B parameters, 1.8 GB in bf16. Its LM head is untied (the
    # same FLOPs a token as a tied one).
    "qwen35-0.8b-shape": dict(
        arch="Qwen3_5ForCausalLM",
        default=False,
        shape=dict(
            vocab_size=248320,
            hidden_size=1024,
            num_hidden_layers=24,
            layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 6,
            num_attention_heads=8,
            num_key_value_heads=2,
            head_dim=256,
            linear_num_key_heads=16,
            linear_num_value_heads=16,
            rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        ),
        extra=dict(intermediate_size=3584),
    ),
    "qwen3next-tiny": dict(
        arch="Qwen3NextForCausalLM",
        extra=dict(
            intermediate_size=256,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=96,
            shared_expert_intermediate_size=96,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
        ),
    ),
}


def make_config(name, init_std):
    from transformers import Qwen3_5TextConfig, Qwen3NextConfig

    spec = MODELS[name]
    cls = Qwen3_5TextConfig if spec["arch"] == "Qwen3_5ForCausalLM" else Qwen3NextConfig
    cfg = cls(**{**COMMON, **spec.get("shape", {})}, **spec["extra"], initializer_range=init_std)
    cfg.architectures = [spec["arch"]]
    return cfg


def make_model(cfg):
    from transformers import Qwen3_5ForCausalLM, Qwen3NextForCausalLM

    cls = Qwen3_5ForCausalLM if cfg.model_type == "qwen3_5_text" else Qwen3NextForCausalLM
    torch.manual_seed(0)  # transformers' own init, which fill() overwrites, repeatable all the same
    return cls(cfg).float().eval()


def tensor_rng(seed, name):
    """A generator of its own for each tensor: the draw depends on (seed, name) only."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    g = torch.Generator()
    g.manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))
    return g


def draw(model_name, name, shape, seed, args):
    g = tensor_rng(seed, f"{model_name}/{name}")

    def normal(std, mean=0.0):
        return torch.randn(shape, generator=g) * std + mean

    leaf = name.rsplit(".", 1)[-1]
    if name.endswith("linear_attn.norm.weight"):  # gated RMSNorm: y = w * x̂ * silu(z)
        return normal(0.1, 1.0)
    if "norm" in name and leaf == "weight":  # (1 + w) RMSNorms: w stored
        return normal(0.1)
    if leaf == "A_log":
        return torch.empty(shape).uniform_(1.0, 16.0, generator=g).log()
    if leaf == "dt_bias":
        dt = torch.exp(torch.empty(shape).uniform_(math.log(1e-3), math.log(1e-1), generator=g))
        return dt + torch.log(-torch.expm1(-dt))  # softplus⁻¹(dt)
    if "conv1d" in name:
        return normal(0.5)
    if name.startswith("model.embed_tokens"):
        return normal(1.0)
    if name.startswith("lm_head"):
        row_scale = torch.exp(torch.randn(shape[0], 1, generator=g) * args.lm_head_row_spread)
        return normal(args.lm_head_std) * row_scale
    if name.endswith("mlp.gate.weight"):  # the MoE router
        return normal(args.router_std)
    return normal(args.init_std)


def fill(model_name, model, seed, args):
    params = dict(model.named_parameters())
    drawn = {name: draw(model_name, name, tuple(p.shape), seed, args) for name, p in sorted(params.items())}
    # Each token's own LM-head row loses part of its embedding's direction: the
    # residual stream carries the current token's embedding to the last norm, so
    # without this a popular token often predicts itself and greedy decoding sticks
    # on it ("w307 w307 w307 ...") after a token or two.
    emb, head = drawn["model.embed_tokens.weight"], drawn["lm_head.weight"]
    unit = emb / emb.norm(dim=1, keepdim=True)
    drawn["lm_head.weight"] = head - args.lm_head_self * head.norm(dim=1, keepdim=True) * unit
    with torch.no_grad():
        for name, p in params.items():
            # rounded to bf16 once: the fp32 model here is exactly the checkpoint
            p.copy_(drawn[name].to(torch.bfloat16).float())


def checkpoint_tensors(model, cfg):
    """The state dict as published checkpoints name it, every tensor bf16."""
    out = {}
    for name, t in model.state_dict().items():
        if name.endswith("mlp.experts.gate_up_proj"):  # [E][2I][H]: gate rows, then up
            base = name[: -len("gate_up_proj")]
            inter = cfg.moe_intermediate_size
            for e in range(t.shape[0]):
                out[f"{base}{e}.gate_proj.weight"] = t[e, :inter]
                out[f"{base}{e}.up_proj.weight"] = t[e, inter:]
        elif name.endswith("mlp.experts.down_proj"):  # [E][H][I]
            base = name[: -len("down_proj")]
            for e in range(t.shape[0]):
                out[f"{base}{e}.down_proj.weight"] = t[e]
        else:
            out[name] = t
    return {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in out.items()}


def write_tokenizer(folder, vocab_size):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    specials = ["<|endoftext|>", "<unk>"]
    vocab = {tok: i for i, tok in enumerate(specials)}
    for i in range(len(specials), vocab_size):
        vocab[f"\u2581w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="always")
    tok.add_special_tokens(specials)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "eos_token": "<|endoftext|>",
                "unk_token": "<unk>",
                "pad_token": "<|endoftext|>",
                "bos_token": None,
                "model_max_length": 32768,
                "clean_up_tokenization_spaces": False,
            },
            indent=2,
        )
        + "\n"
    )


def build(name, out_dir, args):
    cfg = make_config(name, args.init_std)
    model = make_model(cfg)
    fill(name, model, args.seed, args)
    folder = out_dir / name
    folder.mkdir(parents=True, exist_ok=True)
    conf = cfg.to_dict()
    conf["dtype"] = "bfloat16"
    conf.pop("transformers_version", None)  # the bytes depend on the seed, not the library
    (folder / "config.json").write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")
    (folder / "generation_config.json").write_text(
        json.dumps({"eos_token_id": 0, "do_sample": False}, indent=2) + "\n"
    )
    save_file(checkpoint_tensors(model, cfg), str(folder / "model.safetensors"), metadata={"format": "pt"})
    write_tokenizer(folder, cfg.vocab_size)
    return model


def verify(name, folder, model, seed, length):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    g = torch.Generator().manual_seed(seed + 1000)
    ids = torch.randint(2, VOCAB, (1, length), generator=g)
    with torch.no_grad():
        want = model(ids).logits[0].float()
        reloaded = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
        got = reloaded(ids).logits[0].float()
    diff = (want - got).abs().max().item()
    top2 = want.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).sort().values
    lp = torch.log_softmax(want, -1)

    def q(f):
        return margin[min(len(margin) - 1, int(f * len(margin)))].item()

    tok = AutoTokenizer.from_pretrained(str(folder))
    text = tok.decode(ids[0, :6].tolist())
    back = tok(text, add_special_tokens=False)["input_ids"]
    print(
        f"{name}: reload max|Δlogit| {diff:.2e}; logits std {want.std().item():.2f}; "
        f"top1-top2 margin over {length} positions: p10 {q(0.1):.3f} median {q(0.5):.3f} "
        f"p90 {q(0.9):.3f} (< 0.05: {(margin < 0.05).float().mean().item():.1%}); "
        f"top-1 prob median {lp.max(-1).values.exp().median().item():.2f}; "
        f"tokenizer {text!r} -> {back == ids[0, :6].tolist()}",
        flush=True,
    )
    return diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", choices=sorted(MODELS), action="append")
    ap.add_argument("--init-std", type=float, default=0.04)
    ap.add_argument("--lm-head-std", type=float, default=0.3)
    ap.add_argument("--lm-head-row-spread", type=float, default=0.5)
    ap.add_argument("--router-std", type=float, default=0.3)
    ap.add_argument("--lm-head-self", type=float, default=0.3)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--verify-len", type=int, default=1024)
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    bad = 0
    for name in args.only or sorted(m for m in MODELS if MODELS[m].get("default", True)):
        model = build(name, args.out_dir, args)
        print(f"wrote {args.out_dir / name}", flush=True)
        if args.verify and verify(name, args.out_dir / name, model, args.seed, args.verify_len) > 1e-4:
            print(f"{name}: the reloaded checkpoint does not reproduce the model", file=sys.stderr)
            bad = 1
    return bad


if __name__ == "__main__":
    sys.exit(main())
