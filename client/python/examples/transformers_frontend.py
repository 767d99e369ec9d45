"""An inference frontend that decodes with transformers from the state hypic-cached delivers.

The point of return_state (docs/transports.md): the frontend does not prefill. It asks
hypic-cached for the running state after [segments..., query] — computed in full or
composed from cached segments (pic) — receives it into its own shared memory, turns it
into transformers' cache object for the same checkpoint, and decodes from there with the
model's own forward. Run against a daemon serving a Qwen3-Next / Qwen3.5 checkpoint
(the `tiny` preset, models/hypic-recall) or one of the other hybrid families' (OLMo
hybrid, MiniMax, Kimi-Linear, Nemotron-H), with the pinned stack of
client/python/requirements-e2e.txt (pure PyTorch: no flash-linear-attention, no
causal-conv1d):

    python client/python/examples/transformers_frontend.py --addr 127.0.0.1:7878 \\
        --model recall --model-dir models/hypic-recall \\
        --segment models/hypic-recall/examples/doc{1,2,3,4}.txt \\
        --query models/hypic-recall/examples/question.txt [--mode full pic] [--steps 32]

For each mode it prints what it decoded next to transformers' own prefill-and-decode of
the same prompt (the reference), token for token, then one JSON line per mode.

The mapping from our layout to transformers' DynamicCache (transformers 5.23,
cache_utils.py; its layers follow config.layer_types, so cache layer i is model layer i):

    ours                          transformers (batch 1)
    conv [K-1][conv_dim]          LinearAttentionLayer.conv_states[0]: [1, conv_dim, K], the
      oldest first                  last K conv inputs; the decode step (causal_conv1d_update)
                                    reads only the newest K-1, so ours goes in transposed
                                    with a zero column in front (update_conv_state pads it)
    S [Hv][dk][dv]                .recurrent_states[0]: [1, Hv, dk, dv], as it is
    S [H][N][P] (Mamba2)          .recurrent_states[0]: [1, H, P, N] (mamba_head_dim, then
                                    ssm_state_size): ours transposed per head
    K, V [pos][Hkv][hd]           DynamicLayer.keys/.values: [1, Hkv, pos, hd] (K already
      (K after k_norm and RoPE)     normed and rotated in both; Nemotron-H has neither)
    (nothing: an MLP or MoE       DummyLayer, which keeps nothing and which
      block of Nemotron-H)          DynamicCache(config=...) makes for "moe" and "mlp"

The conv kernel K is config.linear_conv_kernel_dim, Nemotron-H's config.conv_kernel.

has_previous_state is set by the first update_conv_state, so the next forward takes the
single-token decode path. Positions continue at the state's: the first decoded token is
the argmax of Prefill's logits (its top[0]) at position pos, fed with position_ids = pos,
the next at pos+1, and so on.

The tensors are copied out of the shared buffer into the cache: the decode updates conv
and S in place, and the buffer belongs to the session (the next transfer writes over it).
"""

from __future__ import annotations

import os

# The reference path: never hub kernels, never the network, never a GPU.
os.environ.setdefault("USE_HUB_KERNELS", "NO")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import argparse
import importlib.util
import json
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORBIDDEN = ("fla", "causal_conv1d", "kernels")  # fast kernels: not the reference path
for _m in FORBIDDEN:
    if importlib.util.find_spec(_m) is not None:
        sys.exit(f"transformers_frontend: '{_m}' is importable; use the pinned venv (requirements-e2e.txt)")

import numpy as np
import torch
from transformers import AutoModelForCausalLM, DynamicCache

import hypic

TIE_GAP = 1e-3  # a logit margin under this is a near tie for fp32 executors to disagree on


# ---- the model and its cache ----------------------------------------------------------


def load_model(model_dir: str | Path) -> Any:
    """The checkpoint the daemon serves, as transformers reads it: fp32, eager attention."""
    # one thread: these models are small, and on a busy 2-core machine two threads that
    # wait for each other are 5 to 40 times slower than one
    torch.set_num_threads(1)
    m = AutoModelForCausalLM.from_pretrained(
        str(model_dir), dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return m.eval()


def _layer_types(model: Any) -> list[str]:
    """Per layer: "linear_attention", "full_attention", or (Nemotron-H, whose
    layers_block_type answers to layer_types too) "moe" / "mlp", blocks that keep no state."""
    return list(model.config.get_text_config(decoder=True).layer_types)


STATELESS = ("moe", "mlp")  # layer types without state: nothing delivered, a DummyLayer in the cache


def _minimax(model: Any) -> bool:
    """MiniMax keeps its lightning layers' states in a cache class of its own
    (MiniMaxCache.linear_cache[i]: [1, heads, d, d], our S as it is; no conv)."""
    return model.config.model_type == "minimax"


def _mamba2(model: Any) -> bool:
    """Nemotron-H: Mamba2 layers, whose S transformers keeps per head as [P][N], ours [N][P]."""
    return model.config.model_type == "nemotron_h"


def _conv_kernel(model: Any) -> int:
    """The linear layers' conv kernel (MiniMax's lightning layers have no conv: 1)."""
    if _minimax(model):
        return 1
    cfg = model.config.get_text_config(decoder=True)
    return int(cfg.conv_kernel if _mamba2(model) else cfg.linear_conv_kernel_dim)


def new_cache(model: Any) -> DynamicCache:
    """An empty cache of the class model's forward works with."""
    if _minimax(model):
        from transformers.models.minimax.modeling_minimax import MiniMaxCache

        return MiniMaxCache()
    return DynamicCache(config=model.config)


def cache_from_state(model: Any, state: hypic.State) -> DynamicCache:
    """transformers' cache for model holding our state (the mapping in the module's doc)."""
    minimax, mamba2 = _minimax(model), _mamba2(model)
    kernel = _conv_kernel(model)
    types = _layer_types(model)
    if state.num_layers != len(types):
        raise ValueError(f"the state has {state.num_layers} layers, the model {len(types)}")
    cache = new_cache(model)
    for i, kind in enumerate(types):
        parts = state.layer(i)
        if kind in STATELESS:
            if parts:
                raise ValueError(f"layer {i}: {kind} keeps no state, the state has {sorted(parts)}")
            continue  # DynamicCache(config=...) made it a DummyLayer: nothing to set
        if kind == "linear_attention" and minimax:
            cache.set_linear_cache(i, torch.tensor(parts["S"]).unsqueeze(0))
        elif kind == "linear_attention":
            conv = torch.tensor(parts["conv"]).T.unsqueeze(0)  # [1, conv_dim, K-1], a copy
            if conv.shape[-1] != kernel - 1:
                raise ValueError(f"layer {i}: conv window of {conv.shape[-1]}, kernel {kernel}")
            cache.update_conv_state(conv.contiguous(), i, conv_kernel_size=kernel)
            S = torch.tensor(parts["S"])
            if mamba2:  # ours [H][N][P], transformers' [H][P][N]
                S = S.transpose(-1, -2).contiguous()
            cache.update_recurrent_state(S.unsqueeze(0), i)
        elif kind == "full_attention":
            k = torch.tensor(parts["K"]).permute(1, 0, 2).unsqueeze(0).contiguous()
            v = torch.tensor(parts["V"]).permute(1, 0, 2).unsqueeze(0).contiguous()
            cache.update(k, v, i)
        else:
            raise ValueError(f"layer {i}: layer type {kind!r} is not in our state's layout")
    # (MiniMaxCache counts positions in layer 0, which a lightning layer 0 leaves empty)
    if "full_attention" in types and not minimax and cache.get_seq_length() != state.position:
        raise ValueError(f"cache holds {cache.get_seq_length()} positions, the state {state.position}")
    return cache


def compare_caches(model: Any, ours: DynamicCache, ref: DynamicCache) -> dict[str, float]:
    """Largest |ours - reference| per part over every layer that keeps a state (conv: the K-1
    columns a decode step reads; S in transformers' orientation in both, Mamba2's included)."""
    worst = {"conv": 0.0, "S": 0.0, "K": 0.0, "V": 0.0}
    for i, kind in enumerate(_layer_types(model)):
        if kind in STATELESS:
            continue
        if kind == "linear_attention" and _minimax(model):
            worst["S"] = max(worst["S"], float((ours.linear_cache[i] - ref.linear_cache[i]).abs().max()))
            continue
        a, b = ours.layers[i], ref.layers[i]
        if kind == "linear_attention":
            pairs = [
                ("conv", a.conv_states[0][..., 1:], b.conv_states[0][..., 1:]),
                ("S", a.recurrent_states[0], b.recurrent_states[0]),
            ]
        else:
            pairs = [("K", a.keys, b.keys), ("V", a.values, b.values)]
        for name, x, y in pairs:
            worst[name] = max(worst[name], float((x - y).abs().max()))
    return worst


# ---- decoding -------------------------------------------------------------------------


@dataclass
class Decode:
    tokens: list[int] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list, repr=False)  # before each token (from the 2nd)


def margin(logits: np.ndarray) -> float:
    """top-1 minus top-2 logit."""
    two = np.partition(logits, -2)[-2:]
    return float(two[1] - two[0])


@torch.no_grad()
def decode(model: Any, cache: DynamicCache, first: int, position: int, steps: int) -> Decode:
    """Greedy: first, then steps-1 more, each fed at the next position."""
    out = Decode(tokens=[first])
    tok, pos = first, position
    while len(out.tokens) < steps:
        r = model(
            input_ids=torch.tensor([[tok]]),
            position_ids=torch.tensor([[pos]]),
            past_key_values=cache,
            use_cache=True,
        )
        logits = r.logits[0, -1].float().numpy()
        out.logits.append(logits)
        tok, pos = int(logits.argmax()), pos + 1
        out.tokens.append(tok)
    return out


@torch.no_grad()
def reference(model: Any, prompt: Sequence[int], steps: int) -> tuple[Decode, DynamicCache, np.ndarray]:
    """transformers' own: the whole prompt in one forward, then greedy with its own cache.
    Also answers its cache after the prompt (a copy, before the decode) and the prompt's
    last logits."""
    cache = new_cache(model)
    r = model(input_ids=torch.tensor([list(prompt)]), past_key_values=cache, use_cache=True)
    logits = r.logits[0, -1].float().numpy()
    snapshot = _copy_cache(model, cache)
    d = decode(model, cache, int(logits.argmax()), len(prompt), steps)
    return d, snapshot, logits


def _copy_cache(model: Any, c: DynamicCache) -> DynamicCache:
    out = new_cache(model)
    minimax = _minimax(model)
    kernel = _conv_kernel(model)
    for i, kind in enumerate(_layer_types(model)):
        if kind in STATELESS:
            continue
        if kind == "linear_attention" and minimax:
            out.set_linear_cache(i, c.linear_cache[i].clone())
            continue
        layer = c.layers[i]
        if kind == "linear_attention":
            out.update_conv_state(layer.conv_states[0].clone(), i, conv_kernel_size=kernel)
            out.update_recurrent_state(layer.recurrent_states[0].clone(), i)
        else:
            out.update(layer.keys.clone(), layer.values.clone(), i)
    return out


# ---- one run --------------------------------------------------------------------------


@dataclass
class Outcome:
    model: str
    mode: str
    transport: str
    prompt_tokens: int
    position: int
    steps: int
    tokens: list[int]
    reference: list[int]
    equal: int  # positions where tokens and reference agree
    first_divergence: int | None  # the first step (0: Prefill's own token) where they differ
    state_max_abs_diff: dict[str, float]  # ours vs transformers' cache after the prompt
    first_logit_diff: float  # |Prefill's top logit - transformers' logit of that token|
    divergence: dict[str, Any] | None  # at first_divergence: the logits of both, the gaps
    min_reference_margin: float  # smallest top-1 - top-2 gap of the reference over the steps
    segments: list[str]  # outcome per segment (hit, miss, ...)
    prefill_ms: float  # Prefill + the state's transfer
    cache_ms: float
    decode_ms: float

    @property
    def exact(self) -> bool:
        return self.equal == self.steps


def run(
    client: hypic.Client,
    session: hypic.Session,
    model: Any,
    name: str,
    segments: Sequence[Sequence[int]],
    query: Sequence[int],
    mode: str,
    steps: int = 32,
    ref: tuple[Decode, DynamicCache, np.ndarray] | None = None,
) -> Outcome:
    """Asks the daemon for the state after [segments..., query] in mode, decodes steps
    tokens from it, and compares with transformers' own decode of the same prompt (ref,
    when the caller has it already for this prompt)."""
    prompt = [t for s in segments for t in s] + list(query)
    t0 = time.perf_counter()
    r, state = client.prefill_state(session, name, [list(s) for s in segments], list(query), mode=mode, top_k=2)
    t1 = time.perf_counter()
    cache = cache_from_state(model, state)
    t2 = time.perf_counter()
    position = state.position
    ours = decode(model, cache, int(r.top[0].token), position, steps)
    t3 = time.perf_counter()
    ref_decode, ref_cache, ref_logits = ref if ref is not None else reference(model, prompt, steps)
    ours_cache = cache_from_state(model, state) if state.valid else None
    diff = compare_caches(model, ours_cache, ref_cache) if ours_cache is not None else {}
    equal = sum(a == b for a, b in zip(ours.tokens, ref_decode.tokens))
    first_div = next((i for i, (a, b) in enumerate(zip(ours.tokens, ref_decode.tokens)) if a != b), None)
    div = None
    if first_div is not None:
        div = explain(first_div, ours, ref_decode, r, ref_logits)
    margins = [margin(ref_logits)] + [margin(x) for x in ref_decode.logits]
    return Outcome(
        model=name,
        mode=mode,
        transport=session.kind.name.lower(),
        prompt_tokens=len(prompt),
        position=position,
        steps=steps,
        tokens=ours.tokens,
        reference=ref_decode.tokens,
        equal=equal,
        first_divergence=first_div,
        state_max_abs_diff=diff,
        first_logit_diff=abs(float(r.top[0].logit) - float(ref_logits[r.top[0].token])),
        divergence=div,
        min_reference_margin=min(margins),
        segments=[hypic.OutcomeKind(s.kind).name.lower() for s in r.segments],
        prefill_ms=(t1 - t0) * 1e3,
        cache_ms=(t2 - t1) * 1e3,
        decode_ms=(t3 - t2) * 1e3,
    )


def explain(step: int, ours: Decode, ref: Decode, r: Any, ref_logits: np.ndarray) -> dict[str, Any]:
    """Why the two decodes part at step: both logit vectors there (step 0: Prefill's top-2
    against transformers' prompt logits), each one's margin between the two tokens."""
    a, b = ours.tokens[step], ref.tokens[step]
    if step == 0:
        top = {t.token: float(t.logit) for t in r.top}
        return {
            "step": 0,
            "ours": a,
            "reference": b,
            "ours_gap": top.get(a, float("nan")) - top.get(b, float("nan")),
            "reference_gap": float(ref_logits[b] - ref_logits[a]),
            "max_logit_diff": None,
        }
    x, y = ours.logits[step - 1], ref.logits[step - 1]
    return {
        "step": step,
        "ours": a,
        "reference": b,
        "ours_gap": float(x[a] - x[b]),  # how much ours prefers its token
        "reference_gap": float(y[b] - y[a]),  # how much the reference prefers its own
        "max_logit_diff": float(np.abs(x - y).max()),  # the same tokens before: the states' difference
    }


def summary(o: Outcome) -> str:
    verdict = "EXACT" if o.exact else f"{o.equal}/{o.steps} equal, first divergence at step {o.first_divergence}"
    lines = [
        (
            f"{o.model} mode {o.mode} over {o.transport}: {o.prompt_tokens} prompt tokens, state at position "
            f"{o.position}, segments {', '.join(o.segments)}"
        ),
        f"  decoded    {hypic.detokenize(o.tokens)!r}",
        f"  reference  {hypic.detokenize(o.reference)!r}",
        f"  {verdict}; state vs transformers' own (max |diff|): "
        + ", ".join(f"{k} {v:.2e}" for k, v in o.state_max_abs_diff.items())
        + f"; first logit {o.first_logit_diff:.2e}; smallest reference margin {o.min_reference_margin:.2e}",
        f"  prefill+transfer {o.prefill_ms:.1f} ms, cache {o.cache_ms:.1f} ms, decode {o.decode_ms:.1f} ms",
    ]
    if o.divergence:
        d = o.divergence
        lines.append(
            f"  at step {d['step']}: ours {d['ours']} by {d['ours_gap']:.3e}, reference {d['reference']} by "
            f"{d['reference_gap']:.3e}"
            + (f", logits differ by at most {d['max_logit_diff']:.3e}" if d["max_logit_diff"] is not None else "")
        )
    return "\n".join(lines)


def to_json(o: Outcome) -> str:
    d = asdict(o)
    d["exact"] = o.exact
    d["text"], d["reference_text"] = hypic.detokenize(o.tokens), hypic.detokenize(o.reference)
    return json.dumps(d, sort_keys=True)


# ---- the command ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> list[Outcome]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=os.environ.get("HYPIC_ADDR", "127.0.0.1:7878"))
    ap.add_argument("--token", default=os.environ.get("HYPIC_TOKEN"))
    ap.add_argument("--model", required=True, help="the model's name at the daemon")
    ap.add_argument("--model-dir", required=True, type=Path, help="its checkpoint (config.json, model.safetensors)")
    ap.add_argument("--segment", nargs="+", type=Path, default=[], help="document files, byte-tokenized")
    ap.add_argument("--query", type=Path, help="the query file (default: --text)")
    ap.add_argument("--text", default="?", help="the query as text")
    ap.add_argument("--mode", nargs="+", default=["full", "pic"], choices=["full", "pic", "prefix", "noseam", "naive"])
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--shuffle-seed", type=int, default=7, help="pic: the segments' order (-1: as given)")
    ap.add_argument("--transport", default="shm,tcp")
    ap.add_argument("--json-only", action="store_true")
    args = ap.parse_args(argv)

    docs = [hypic.tokenize(p.read_text()) for p in args.segment]
    query = hypic.tokenize(args.query.read_text() if args.query else args.text)
    model = load_model(args.model_dir)
    out: list[Outcome] = []
    with hypic.Client(args.addr, token=args.token) as c, c.session(args.transport, 64 << 20) as s:
        for mode in args.mode:
            segs = docs
            if mode != "full":
                if docs:
                    list(c.warm(args.model, docs))  # the documents cached first
                if args.shuffle_seed >= 0:
                    segs = docs[:]
                    random.Random(args.shuffle_seed).shuffle(segs)
            o = run(c, s, model, args.model, segs, query, mode, args.steps)
            out.append(o)
            if not args.json_only:
                print(summary(o))
            print(to_json(o), flush=True)
    return out


if __name__ == "__main__":
    results = main()
    sys.exit(0 if all(o.exact for o in results if o.mode == "full") else 1)
