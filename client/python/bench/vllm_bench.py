"""TTFT of vLLM (CPU) alone, vLLM with HypicConnector, and the daemon's own pic, on the
same requests: documents in shuffled orders and a question.

    VLLM_CPU_KVCACHE_SPACE=1 python client/python/bench/vllm_bench.py \\
        --addr 127.0.0.1:7878 --model qwen35 --model-dir DIR [--docs 8] [--doc-tokens 512] \\
        [--requests 5] [--token T]

Run with vLLM's environment (tools/vllm/venv.sh) against a hypic-cached that serves DIR as
--model. vLLM runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with prefix caching
on, one engine with the connector: a request without hypic_segments is vLLM alone (its own
prefix cache), the same request with them goes through the connector. Every document is
warmed first. Each request (its own shuffled order, so vLLM's prefix cache rarely covers
more than the first document) runs three ways, in an order that rotates so that a noisy
machine's drift falls on all alike:
  - vllm: vLLM alone, max_tokens 1 (the time to the first token);
  - connector: the same with the segments: Lookup, the daemon's Prefill into shm, the
    state written into vLLM's cache, vLLM's forward over the rest;
  - daemon: the daemon's Prefill (pic, top_k 1), as a client sees it.
The figures are medians over the requests; also the fraction of the prompt vLLM computed
(vllm: less its prefix-cache hit; connector: less the tokens claimed), and the load's
times (the daemon's Prefill; the write into vLLM's cache, the part of vLLM's step it
takes). Then the executors alone on the whole prompt: vLLM's prefill (prefix caching
bypassed with a salt of its own) against the daemon's mode full; vLLM's bf16 against the
daemon's fp32 arithmetic from the same bf16 weights. The limit beside the connector's
ratio: the prompt's tokens over those vLLM computes after the load, which bounds it when
the load costs nothing. The last line is one JSON object.
"""

from __future__ import annotations

import os

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

import hypic


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default="127.0.0.1:7878")
    ap.add_argument("--model", required=True, help="the daemon's name of the checkpoint")
    ap.add_argument("--model-dir", required=True, help="the checkpoint's folder, for vLLM")
    ap.add_argument("--token", default="")
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--doc-tokens", type=int, default=512)
    ap.add_argument("--query-tokens", type=int, default=16)
    ap.add_argument("--requests", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)

    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt

    from hypic import vllm as hv

    c = hypic.Client(a.addr, token=a.token or None, timeout=600)
    rng = random.Random(a.seed)
    vocab = 500
    docs = [[rng.randrange(2, vocab) for _ in range(a.doc_tokens)] for _ in range(a.docs)]
    t0 = time.perf_counter()
    for _ in c.warm(a.model, docs):
        pass
    print(f"warmed {a.docs} documents of {a.doc_tokens} tokens in {time.perf_counter() - t0:.1f} s", file=sys.stderr)

    llm = LLM(
        model=a.model_dir,
        dtype="bfloat16",
        max_model_len=max(8192, a.docs * a.doc_tokens + a.query_tokens + 64),
        enforce_eager=True,
        enable_prefix_caching=True,
        seed=0,
        kv_transfer_config=KVTransferConfig(
            kv_connector="HypicConnector",
            kv_connector_module_path="hypic.vllm",
            kv_role="kv_both",
            kv_connector_extra_config={"address": a.addr, "model": a.model, "token": a.token},
        ),
    )
    sp1 = SamplingParams(max_tokens=1, temperature=0)

    def vllm_run(prompt: list[int], params: dict[str, Any] | None, salt: str | None = None) -> tuple[float, Any]:
        sp = sp1.clone()
        if params:
            sp.extra_args = {"kv_transfer_params": params}
        tp = TokensPrompt(prompt_token_ids=prompt, cache_salt=salt) if salt else TokensPrompt(prompt_token_ids=prompt)
        t = time.perf_counter()
        o = llm.generate([tp], sp, use_tqdm=False)[0]
        return (time.perf_counter() - t) * 1e3, o

    # one request of each kind first: vLLM's and the daemon's first calls pay set-up
    warm_segs = docs[:2]
    vllm_run(sum(warm_segs, []) + [5] * a.query_tokens, None, salt="bench-warm-up")
    vllm_run(sum(warm_segs, []) + [5] * a.query_tokens, {"hypic_segments": [len(d) for d in warm_segs]})
    c.prefill(a.model, warm_segs, [5] * a.query_tokens, mode="pic", top_k=1)

    ttft: dict[str, list[float]] = {"vllm": [], "connector": [], "daemon": []}
    computed: dict[str, list[float]] = {"vllm": [], "connector": []}
    loads: list[tuple[float, float]] = []
    def shuffled() -> tuple[list[list[int]], list[int], list[int]]:
        """The documents in an order of their own, a question, and the whole prompt."""
        order = list(range(a.docs))
        rng.shuffle(order)
        segs = [docs[j] for j in order]
        query = [rng.randrange(2, vocab) for _ in range(a.query_tokens)]
        return segs, query, sum(segs, []) + query

    for i in range(a.requests):
        segs, query, prompt = shuffled()
        counts = [len(s) for s in segs]
        kinds = ["vllm", "connector", "daemon"]
        kinds = kinds[i % 3 :] + kinds[: i % 3]
        for k in kinds:
            if k == "vllm":
                ms, o = vllm_run(prompt, None)
                computed["vllm"].append((len(prompt) - (o.num_cached_tokens or 0)) / len(prompt))
            elif k == "connector":
                n = len(hv.LOAD_TIMES)
                ms, o = vllm_run(prompt, {"hypic_segments": counts})
                claimed = o.kv_transfer_params["hypic"]["claimed_tokens"]
                if not claimed:
                    print(f"request {i}: not claimed: {o.kv_transfer_params}", file=sys.stderr)
                computed["connector"].append((len(prompt) - claimed) / len(prompt))
                for _, _, f, w in list(hv.LOAD_TIMES)[n:]:
                    loads.append((f, w))
            else:
                t = time.perf_counter()
                c.prefill(a.model, segs, query, mode="pic", top_k=1)
                ms = (time.perf_counter() - t) * 1e3
            ttft[k].append(ms)
        print(f"request {i + 1}/{a.requests}: " + ", ".join(f"{k} {ttft[k][-1]:.1f} ms" for k in ttft), file=sys.stderr)

    # the executors on the whole prompt, alternating
    full: dict[str, list[float]] = {"vllm_prefill": [], "daemon_full": []}
    for i in range(a.requests):
        segs, query, prompt = shuffled()
        for k in (["vllm_prefill", "daemon_full"] if i % 2 == 0 else ["daemon_full", "vllm_prefill"]):
            if k == "vllm_prefill":
                ms, _ = vllm_run(prompt, None, salt=f"bench-full-{i}")
            else:
                t = time.perf_counter()
                c.prefill(a.model, segs, query, mode="full", top_k=1)
                ms = (time.perf_counter() - t) * 1e3
            full[k].append(ms)

    med = {k: statistics.median(v) for k, v in ttft.items()}
    medf = {k: statistics.median(v) for k, v in full.items()}
    frac = {k: statistics.median(v) for k, v in computed.items()}
    p_tokens = a.docs * a.doc_tokens + a.query_tokens
    bound = 1.0 / frac["connector"] if frac["connector"] > 0 else float("inf")
    fetch_ms = statistics.median([f for f, _ in loads]) if loads else 0.0
    write_ms = statistics.median([w for _, w in loads]) if loads else 0.0
    print(f"\n{a.model}: {a.docs} documents x {a.doc_tokens} tokens + {a.query_tokens}-token query "
          f"({p_tokens} tokens), {a.requests} requests, medians, CPU threads: vLLM's default")
    print(f"  vLLM alone (its prefix cache on):   {med['vllm']:9.1f} ms   computed {frac['vllm'] * 100:5.1f} % of the prompt")
    print(f"  vLLM + HypicConnector:              {med['connector']:9.1f} ms   computed {frac['connector'] * 100:5.1f} %")
    print(f"    the load: daemon Prefill {fetch_ms:.1f} ms, written into vLLM's cache in {write_ms:.1f} ms (inside its step)")
    print(f"  the daemon's own pic:               {med['daemon']:9.1f} ms")
    print(f"  vLLM alone / connector: {med['vllm'] / med['connector']:.2f}x "
          f"(bound when the load is free: {bound:.0f}x, prompt tokens over tokens vLLM computes)")
    print(f"  executors on the whole prompt: vLLM prefill {medf['vllm_prefill']:.1f} ms, daemon full "
          f"{medf['daemon_full']:.1f} ms (vLLM / daemon {medf['vllm_prefill'] / medf['daemon_full']:.2f}x; "
          "vLLM bf16, the daemon fp32 from the same bf16 weights)")
    print(json.dumps({
        "bench": "vllm_connector",
        "model": a.model,
        "docs": a.docs,
        "doc_tokens": a.doc_tokens,
        "query_tokens": a.query_tokens,
        "requests": a.requests,
        "ttft_p50_ms": {k: round(v, 2) for k, v in med.items()},
        "vllm_over_connector": round(med["vllm"] / med["connector"], 3),
        "token_bound": round(bound, 1),
        "fraction_computed_by_vllm": {k: round(v, 4) for k, v in frac.items()},
        "load_p50_ms": {"daemon_prefill": round(fetch_ms, 2), "write_in_step": round(write_ms, 2)},
        "whole_prompt_p50_ms": {k: round(v, 2) for k, v in medf.items()},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
