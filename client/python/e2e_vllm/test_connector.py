"""HypicConnector inside vLLM (CPU) against hypic-cached, on both tiny hybrids.

- the state vLLM's cache holds after a load equals the daemon's pic state (bf16 where
  vLLM's cache is bf16, the recurrent state exactly), and vLLM's own state after its
  prefill equals the daemon's full state (which pins the layouts: a transposed S or a
  permuted conv channel gives errors of the state's own size);
- the first token's top 5 and 16 greedy tokens equal the daemon's pic answer;
- fail-closed: the daemon stopped, a token it does not know, a model it does not serve,
  an entry evicted between the claim and the load: vLLM's own answer, the cause named,
  and the next request claims again;
- a request whose segments the daemon did not hold is left to vLLM, and its segments are
  warmed after it.
test_prefix_caching.py: the same with vLLM's prefix caching on.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import MODEL, MODELS, OTHER_TOKEN, RETRY_AFTER_S, TOKEN, Daemon, make_llm

import hypic
from hypic import vllm_plan

N_DOCS = 6
GREEDY = 16


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def has(self, text: str) -> bool:
        return any(text in m for m in self.lines)


@pytest.fixture()
def records() -> Iterator[Records]:
    h = Records()
    lg = logging.getLogger("hypic.vllm")
    lg.addHandler(h)
    yield h
    lg.removeHandler(h)


def docs(seed: int, n: int = N_DOCS) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, 512) for _ in range(rng.randrange(200, 400))] for _ in range(n)]


def request(ds: list[list[int]], seed: int) -> tuple[list[list[int]], list[int]]:
    """The documents in a shuffled order and a 20-token question."""
    rng = random.Random(seed)
    order = list(range(len(ds)))
    rng.shuffle(order)
    return [ds[i] for i in order], [rng.randrange(2, 512) for _ in range(20)]


def client(d: Daemon) -> hypic.Client:
    return hypic.Client(d.addr, token=TOKEN, timeout=60)


def generate(llm: Any, prompt: list[int], params: dict[str, Any] | None, salt: str | None = None) -> Any:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    sp = SamplingParams(
        max_tokens=GREEDY,
        temperature=0,
        logprobs=5,
        ignore_eos=True,
        extra_args={"kv_transfer_params": params} if params else None,
    )
    tp = TokensPrompt(prompt_token_ids=prompt, cache_salt=salt) if salt else TokensPrompt(prompt_token_ids=prompt)
    return llm.generate([tp], sp, use_tqdm=False)[0]


def top(out: Any, step: int = 0) -> list[tuple[int, float]]:
    lp = out.outputs[0].logprobs[step]
    return sorted(((k, v.logprob) for k, v in lp.items()), key=lambda kv: -kv[1])[:5]


def same_answer(a: Any, b: Any) -> None:
    """Two vLLM answers computed alike: the same tokens and logprobs."""
    assert list(a.outputs[0].token_ids) == list(b.outputs[0].token_ids)
    assert top(a) == top(b)


# vLLM's logits are bf16: 0.125 apart where the best ones lie (about 16 to 32)
BF16_LOGIT = 0.25


def greedy_agrees(vllm_out: Any, daemon_tokens: list[int]) -> int:
    """How many of the greedy tokens agree (answered). They must all agree up to a step
    where the daemon's token is vLLM's second and vLLM's top two are within bf16 rounding
    of each other (vLLM's bf16 logits cannot tell them apart as the daemon's fp32 do); the
    two decodes go apart there, and the comparison stops."""
    got = list(vllm_out.outputs[0].token_ids)
    assert len(got) == len(daemon_tokens)
    for i, (g, w) in enumerate(zip(got, daemon_tokens)):
        if g != w:
            t = top(vllm_out, i)
            assert len(t) > 1 and w == t[1][0] and t[0][1] - t[1][1] <= BF16_LOGIT, (
                f"token {i}: vLLM {g}, daemon {w}; vLLM's top there: {t}"
            )
            return i
    return len(got)


@pytest.fixture(scope="module")
def engine(daemon: Daemon, checkpoints: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Path]:
    """vLLM (prefix caching off: mamba cache mode none) on MODEL, with the connector."""
    dump = tmp_path_factory.mktemp(f"dump-{MODEL}")
    daemon.start()
    return MODEL, make_llm(checkpoints / f"{MODEL}-tiny", daemon, MODEL, dump, prefix_caching=False), dump


def compare_state(st: hypic.State, npz: Path, exact: bool) -> dict[str, float]:
    """Each layer's tensors: exact (vLLM's cache holds the daemon's values, rounded to
    bf16 where the cache keeps a tensor in bf16 — conv, K and V always; S in float32 or
    bf16 as vLLM chose on this machine, the dump says which) or within 10 % of the
    tensor's largest value (vLLM's own bf16 computation against the daemon's fp32)."""
    z = np.load(npz)
    worst: dict[str, float] = {}
    for i in range(st.num_layers):
        for kind, a in st.layer(i).items():
            b = z[f"L{i}.{kind}"]
            assert b.shape == a.shape, f"layer {i} {kind}: {b.shape} vs {a.shape}"
            if exact:
                kept = str(z[f"dtype.{kind}"]) if f"dtype.{kind}" in z else "bfloat16"
                want = a if kept == "float32" else vllm_plan.bf16_round(a)
                err = float(np.abs(b - want).max())
                assert err == 0.0, f"layer {i} {kind}: vLLM's cache differs from the daemon's state by {err}"
            else:
                err = float(np.abs(b - a).max()) / max(float(np.abs(a).max()), 1e-6)
                assert err < 0.1, f"layer {i} {kind}: relative difference {err:.3f}"
            worst[f"L{i}.{kind}"] = err
    return worst


def test_composed_state_and_decode(engine: tuple[str, Any, Path], daemon: Daemon) -> None:
    name, llm, dump = engine
    c = client(daemon)
    ds = docs(11)
    for _ in c.warm(name, ds):
        pass
    for k in range(2):  # two orders of the same documents
        segs, query = request(ds, 100 + k)
        prompt = sum(segs, []) + query
        counts = [len(s) for s in segs]
        out = generate(llm, prompt, {"hypic_segments": counts, "hypic_dump": f"pic{k}"})
        claim = out.kv_transfer_params["hypic"]
        assert claim == {"claimed_tokens": sum(counts) + 1, "segments_used": N_DOCS, "hits": N_DOCS}
        # the state vLLM's cache held after the load is the daemon's pic state
        with c.session(("shm",), 64 << 20) as sess:
            _, st = c.prefill_state(sess, name, segs, query[:1], mode="pic")
            compare_state(st, dump / f"pic{k}.loaded.npz", exact=True)
        # the first token and the greedy decode are the daemon's pic answer
        r = c.prefill(name, segs, query, mode="pic", top_k=5, max_new_tokens=GREEDY)
        want = [(t.token, math.log(t.prob)) for t in r.top]
        got = top(out)
        assert [t for t, _ in got] == [t for t, _ in want]
        for (t, a), (_, b) in zip(got, want):
            assert abs(a - b) <= BF16_LOGIT, f"token {t}: vLLM logprob {a:.4f}, daemon {b:.4f}"
        agreed = greedy_agrees(out, list(r.generated))
        assert agreed >= 1
        print(f"{name} order {k}: top-5 equal, {agreed}/{GREEDY} greedy tokens equal")


def test_vllm_state_is_the_daemons_full_state(engine: tuple[str, Any, Path], daemon: Daemon) -> None:
    """vLLM's own prefill leaves the state the daemon computes in mode full: the layouts
    the connector writes are vLLM's."""
    name, llm, dump = engine
    c = client(daemon)
    segs, query = request(docs(12), 7)
    prompt = sum(segs, []) + query
    generate(llm, prompt, {"hypic_dump": "own"})
    with c.session(("shm",), 64 << 20) as sess:
        _, st = c.prefill_state(sess, name, segs, query, mode="full")
        worst = compare_state(st, dump / "own.computed.npz", exact=False)
    print(f"{name}: vLLM's own state against the daemon's full state, relative: {worst}")


def test_fail_closed(engine: tuple[str, Any, Path], daemon: Daemon, records: Records, monkeypatch: pytest.MonkeyPatch) -> None:
    name, llm, _ = engine
    ds = docs(13)
    segs, query = request(ds, 8)
    prompt = sum(segs, []) + query
    counts = [len(s) for s in segs]
    pic = {"hypic_segments": counts}
    own = generate(llm, prompt, None)  # vLLM alone
    c = client(daemon)
    for _ in c.warm(name, ds):
        pass

    def declined(out: Any) -> str:
        h = out.kv_transfer_params["hypic"]
        assert h["claimed_tokens"] == 0, h
        return str(h["declined"])

    try:
        daemon.stop()
        out = generate(llm, prompt, pic)
        same_answer(out, own)
        assert "Lookup failed: UNAVAILABLE" in declined(out)
        # for retry_after_s no Lookup is tried: the next request is left to vLLM at once
        out = generate(llm, prompt, pic)
        same_answer(out, own)
        assert "the daemon was unavailable" in declined(out)
        assert f"tried again after {RETRY_AFTER_S} s" in declined(out)
        time.sleep(RETRY_AFTER_S)

        daemon.start(token=OTHER_TOKEN)
        out = generate(llm, prompt, pic)
        same_answer(out, own)
        assert "Lookup failed: UNAUTHENTICATED" in declined(out)

        daemon.start(names=tuple(m + "-other" for m in MODELS))
        out = generate(llm, prompt, pic)
        same_answer(out, own)
        why = declined(out)
        assert "Lookup failed: NOT_FOUND" in why and name in why
    finally:
        daemon.start()
    c = client(daemon)
    for _ in c.warm(name, ds):
        pass

    # an entry evicted after the claim: the worker finds it missing in Prefill's outcomes
    from hypic.vllm import HypicConnector

    fetch = HypicConnector._fetch

    def evict_first(self: HypicConnector, ld: Any) -> Any:
        seg = list(ld.tokens[: ld.counts[0]])
        key = c.lookup(name, [seg]).segments[0].key
        assert c.invalidate(key=key) == 1
        return fetch(self, ld)

    monkeypatch.setattr(HypicConnector, "_fetch", evict_first)
    out = generate(llm, prompt, pic)
    same_answer(out, own)
    assert "the load failed" in declined(out)
    assert records.has("segment 0's entry was evicted between the claim and the load")
    monkeypatch.setattr(HypicConnector, "_fetch", fetch)

    # and vLLM goes on: the next request claims again
    for _ in c.warm(name, ds):
        pass
    out = generate(llm, prompt, pic)
    assert out.kv_transfer_params["hypic"]["claimed_tokens"] == sum(counts) + 1


def test_misses_are_warmed_after(engine: tuple[str, Any, Path], daemon: Daemon) -> None:
    name, llm, _ = engine
    c = client(daemon)
    ds = docs(14)
    segs, query = request(ds, 9)
    prompt = sum(segs, []) + query
    counts = [len(s) for s in segs]
    out = generate(llm, prompt, {"hypic_segments": counts})
    assert "no segment is cached" in out.kv_transfer_params["hypic"]["declined"]
    deadline = time.monotonic() + 60
    while not all(s.hit for s in c.lookup(name, segs).segments):
        assert time.monotonic() < deadline, "the declined request's segments were not warmed in 60 s"
        time.sleep(0.2)
    out = generate(llm, prompt, {"hypic_segments": counts})
    assert out.kv_transfer_params["hypic"]["claimed_tokens"] == sum(counts) + 1
