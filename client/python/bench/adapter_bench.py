"""What PIC through hypic.frontend costs a frontend, against transformers' own prefill.

A frontend that composes entries in its own model (hypic.frontend) pays, per request: one
Lookup, each hit's entry fetched (over gRPC, or a transport session: shm on this host, TCP)
and checked — on a thread beside the forward, so what it costs the request is the wait —,
its body composed in torch, and the model's forward over what is left — every hit's seam,
the misses, the query. The baseline is transformers' prefill of the whole
prompt in one forward on the same device. Both end at the query's logits (TTFT).

    python client/python/bench/adapter_bench.py --addr 127.0.0.1:7878 --model recall \\
        --model-dir models/hypic-recall [--docs 8] [--doc-tokens 512] [--requests 5]

Every document is warmed first, so each request is all hits. Each request runs the four
configurations — full prefill, the adapter fetching over gRPC, over shm, over TCP — in an
order that rotates, so that a noisy machine's drift falls on all alike; the figures are
medians over the requests. It prints a summary, then one JSON object as its last line.
The limit next to the TTFT ratio: the tokens the full prefill computes over those the
adapter computes (seams and query), which bounds the speed-up when both run at the same
rate per token and fetching and composing cost nothing.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

import torch

import hypic
from hypic.frontend import Frontend

CONFIGS = ("full", "grpc", "shm", "tcp")


def load(model_dir: str, device: str) -> Any:
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", local_files_only=True
    )
    return m.eval().to(device)


@torch.no_grad()
def full_prefill(model: Any, prompt: list[int], device: str) -> float:
    """transformers' own prefill of the prompt: seconds to the last logits."""
    from transformers import DynamicCache

    t0 = time.perf_counter()
    r = model(input_ids=torch.tensor([prompt], device=device), past_key_values=DynamicCache(config=model.config))
    r.logits[0, -1].float().cpu()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", required=True)
    ap.add_argument("--model", default="recall")
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--doc-tokens", type=int, default=512)
    ap.add_argument("--query-tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch's threads (1: the e2e stack's setting)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    model = load(a.model_dir, a.device)
    vocab = int(model.config.get_text_config(decoder=True).vocab_size)
    rng = random.Random(11)
    docs = [[rng.randrange(3, vocab) for _ in range(a.doc_tokens)] for _ in range(a.docs)]
    query = [rng.randrange(3, vocab) for _ in range(a.query_tokens)]
    prompt = [t for d in docs for t in d] + query
    ttft: dict[str, list[float]] = {c: [] for c in CONFIGS}
    fetch: dict[str, list[float]] = {c: [] for c in CONFIGS[1:]}
    wait: dict[str, list[float]] = {c: [] for c in CONFIGS[1:]}
    compose: list[float] = []
    hit_bytes: list[int] = []
    computed = 0
    with hypic.Client(a.addr) as c:
        print(f"warming {a.docs} documents of {a.doc_tokens} tokens on {a.addr} ...", flush=True)
        list(c.warm(a.model, docs))
        sessions = {k: c.session((k,), 64 << 20) for k in ("shm", "tcp")}
        try:
            fronts = {
                "grpc": Frontend(c, model, a.model, session=None, warm_misses=False),
                **{k: Frontend(c, model, a.model, session=s, warm_misses=False) for k, s in sessions.items()},
            }
            for cfg in CONFIGS:  # one unmeasured round: caches, allocators, the sessions' first use
                full_prefill(model, prompt, a.device) if cfg == "full" else fronts[cfg].prefill(docs, query)
            for q in range(a.requests):
                order = CONFIGS[q % 4 :] + CONFIGS[: q % 4]
                for cfg in order:
                    if cfg == "full":
                        ttft["full"].append(full_prefill(model, prompt, a.device) * 1e3)
                        continue
                    r = fronts[cfg].prefill(docs, query)
                    if a.device != "cpu":
                        torch.cuda.synchronize()
                    if any(s.kind != "hit" for s in r.segments):
                        sys.exit(f"adapter_bench: a segment missed ({[s.kind for s in r.segments]})")
                    ttft[cfg].append(r.total_ms)
                    fetch[cfg] += [s.fetch_ms for s in r.segments]
                    wait[cfg] += [s.wait_ms for s in r.segments]
                    if cfg == "shm":
                        compose += [s.compose_ms for s in r.segments]
                        hit_bytes += [s.bytes for s in r.segments]
                        computed = sum(s.computed for s in r.segments) + len(query)
        finally:
            for s in sessions.values():
                s.close()
    med = {k: statistics.median(v) for k, v in ttft.items()}
    out = {
        "bench": "adapter",
        "model": a.model,
        "device": a.device,
        "threads": a.threads,
        "docs": a.docs,
        "doc_tokens": a.doc_tokens,
        "prompt_tokens": len(prompt),
        "requests": a.requests,
        "ttft_p50_ms": {k: round(v, 2) for k, v in med.items()},
        "full_over_adapter_shm": round(med["full"] / med["shm"], 3),
        "fetch_ms_per_hit_p50": {k: round(statistics.median(v), 3) for k, v in fetch.items()},
        "wait_ms_per_hit_p50": {k: round(statistics.median(v), 3) for k, v in wait.items()},
        "compose_ms_per_hit_p50": round(statistics.median(compose), 3),
        "bytes_per_hit": int(statistics.median(hit_bytes)),
        "token_bound": round(len(prompt) / max(1, computed), 2),
    }
    print(f"\n{a.docs} hits of {a.doc_tokens} tokens and a {a.query_tokens}-token query on '{a.model}' ({a.device}, "
          f"{a.threads} torch thread(s)); medians over {a.requests} requests, the four configurations rotated:")
    for k in CONFIGS:
        extra = ""
        if k != "full":
            extra = (f"   fetch {out['fetch_ms_per_hit_p50'][k]:.3f} ms a hit, beside the forward; "
                     f"waited for {out['wait_ms_per_hit_p50'][k]:.3f} ms")
        print(f"  {k:5s} TTFT {med[k]:9.2f} ms" + extra)
    print(f"  composing a hit in torch: {out['compose_ms_per_hit_p50']:.3f} ms; an entry is {out['bytes_per_hit']} bytes")
    print(f"  full prefill over the adapter (shm): {out['full_over_adapter_shm']:.2f}x; the token bound "
          f"(prompt tokens over those the adapter computes) is {out['token_bound']:.1f}x")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
