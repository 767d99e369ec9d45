"""hypic.frontend: PIC composed inside transformers' own model from the daemon's entries,
against the state the daemon delivers in mode pic for the same request.

For each checkpoint (the trained `recall`, Qwen3.5; `tiny`, Qwen3-Next; `tiny-moe`, Qwen3-Next
with MoE blocks; `tiny-olmo`, OLMo hybrid; `tiny-minimax`, MiniMax's lightning attention;
`tiny-kimi`, Kimi-Linear's KDA and MLA without positions; `tiny-nemotron`, Nemotron-H's
Mamba2, attention without positions and stateless MLP/MoE blocks; `tiny-ling`, Ling's KDA
and MLA with interleaved RoPE) four documents of their own (so no other test's entries are hits), three
warmed: the adapter's first request composes three hits and prefills the fourth, whose
entry it then has the daemon build (Warm, off the request's path); its second request
composes four hits — through a transport session this time — and its cache must equal the
state the daemon computes in mode pic for the same request to fp32 rounding, every layer,
and 32 greedy tokens decoded from each must be the same.

Run: tests/client/test_frontend.sh build/cached/hypic-cached
"""

from __future__ import annotations

from typing import Any

import pytest
import transformers_frontend as fe
from conftest import EXAMPLES, RECALL_DIR

import hypic
from hypic.frontend import Frontend

DOCS = [EXAMPLES / f"doc{i}.txt" for i in range(1, 5)]
QUESTION = EXAMPLES / "question.txt"
STEPS = 32
STATE_TOL = 1e-4  # fp32 rounding between two executors, not an approximation
ADAPTED = ("recall", "tiny", "tiny-moe", "tiny-olmo", "tiny-minimax", "tiny-kimi", "tiny-nemotron", "tiny-ling")


@pytest.mark.parametrize("name", ADAPTED)
def test_adapter_composes_the_daemons_state(daemon: Any, name: str) -> None:
    model_dir = RECALL_DIR if name == "recall" else daemon.dir / "var" / "models" / name
    model = fe.load_model(model_dir)
    # documents no other test sends: each gets a line naming this test
    segs = [list(hypic.tokenize(p.read_text() + f"(adapter {name})\n")) for p in DOCS]
    query = list(hypic.tokenize(QUESTION.read_text()))
    with hypic.Client(daemon.addr) as c:
        list(c.warm(name, segs[:3]))
        front = Frontend(c, model, name, session=None)  # over gRPC first
        first = front.prefill(segs, query)
        assert [s.kind for s in first.segments] == ["hit", "hit", "hit", "miss"]
        assert first.position == sum(map(len, segs)) + len(query)
        assert first.warm is not None
        first.warm.join(timeout=120)
        with c.session(("shm", "tcp"), 64 << 20) as sess:
            front.session = sess
            ours = front.prefill(segs, query)  # the miss built meanwhile: a hit now
            assert [s.kind for s in ours.segments] == ["hit"] * 4
            assert ours.warm is None
            resp, state = c.prefill_state(sess, name, segs, query, mode="pic", top_k=2)
            assert all(s.kind == hypic.OutcomeKind.HIT for s in resp.segments)
            assert state.position == ours.position
            theirs = fe.cache_from_state(model, state)
        front.session = None  # closed: the next fetches go over gRPC
        diff = fe.compare_caches(model, ours.cache, theirs)
        top = int(resp.top[0].token)
        print(f"\n  {name}: adapter vs daemon (pic, 4 hits): {diff}; first logit "
              f"{float(ours.logits[top]):.6f} vs {resp.top[0].logit:.6f}; composing "
              f"{sum(s.compose_ms for s in ours.segments):.1f} ms, fetching "
              f"{sum(s.fetch_ms for s in ours.segments):.1f} ms for {sum(s.bytes for s in ours.segments)} bytes")
        assert all(v < STATE_TOL for v in diff.values()), diff
        assert abs(float(ours.logits[top]) - resp.top[0].logit) < STATE_TOL
        assert int(ours.logits.argmax()) == top
        a = fe.decode(model, ours.cache, top, ours.position, STEPS).tokens
        b = fe.decode(model, theirs, top, state.position, STEPS).tokens
        assert a == b
        # and through transformers' generate(), from the adapter's cache
        out = front.generate(segs, query, max_new_tokens=STEPS, do_sample=False)
        gen = out[0, ours.position :].tolist()
        eos = model.generation_config.eos_token_id
        eos = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        assert gen == b[: len(gen)] and (len(gen) == STEPS or gen[-1] in eos)  # generate stops at EOS


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_adapter_on_each_device(daemon: Any, device: str) -> None:
    """The same composition with the model on each device torch has: the logits where
    the daemon's are, 32 tokens the same."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device here (CUDA_VISIBLE_DEVICES set to a GPU runs this)")
    name = "recall"
    model = fe.load_model(RECALL_DIR).to(device)
    segs = [list(hypic.tokenize(p.read_text() + f"(device {device})\n")) for p in DOCS]
    query = list(hypic.tokenize(QUESTION.read_text()))
    with hypic.Client(daemon.addr) as c:
        list(c.warm(name, segs))
        with Frontend(c, model, name, warm_misses=False) as front:  # its own session ("auto")
            r = front.prefill(segs, query)
            assert front.session is not None
        assert r.logits.device.type == device and [s.kind for s in r.segments] == ["hit"] * 4
        resp = c.prefill(name, segs, query, mode="pic", top_k=1)
    assert int(r.logits.argmax()) == resp.top[0].token
    assert abs(float(r.logits[resp.top[0].token]) - resp.top[0].logit) < STATE_TOL


def test_adapter_benchmark_prints_its_json(daemon: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """client/python/bench/adapter_bench.py, briefly: its last line is its JSON."""
    import importlib.util
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "adapter_bench.py"
    spec = importlib.util.spec_from_file_location("adapter_bench", path)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    args = ["--addr", daemon.addr, "--model", "recall", "--model-dir", str(RECALL_DIR)]
    bench.main(args + ["--docs", "4", "--doc-tokens", "256", "--requests", "2"])
    out = capsys.readouterr().out
    with capsys.disabled():
        print("\n" + out)
    last = json.loads(out.strip().splitlines()[-1])
    assert last["bench"] == "adapter" and last["requests"] == 2
    assert all(last["ttft_p50_ms"][k] > 0 for k in ("full", "grpc", "shm", "tcp"))
    assert last["compose_ms_per_hit_p50"] > 0 and last["bytes_per_hit"] > 0


def test_the_docs_example_runs_as_written(daemon: Any) -> None:
    """docs/frontends.md's example, its Python block as written, against this daemon."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[3]
    text = (repo / "docs" / "frontends.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/frontends.md: one Python example"
    env = {**os.environ, "HYPIC_ADDR": daemon.addr}
    p = subprocess.run([sys.executable, "-c", blocks[0]], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    print("\n" + p.stdout)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "['hit', 'hit', 'hit', 'hit']" in p.stdout
    assert "answer: 002" in p.stdout


def test_a_session_smaller_than_the_hits(daemon: Any) -> None:
    """Four hits through a session whose buffer holds two: the fetcher starts again at
    its start once the entries there are composed; the logits are the gRPC path's."""
    model = fe.load_model(RECALL_DIR)
    segs = [list(hypic.tokenize(p.read_text() + "(small session)\n")) for p in DOCS]
    query = list(hypic.tokenize(QUESTION.read_text()))
    with hypic.Client(daemon.addr) as c:
        list(c.warm("recall", segs))
        sizes = [int(s.bytes) for s in c.lookup("recall", segs).segments]
        cap = (max(sizes) + 4095) // 4096 * 4096 * 2
        assert sum(sizes) > cap
        want = Frontend(c, model, "recall", session=None, warm_misses=False).prefill(segs, query)
        with c.session(("shm", "tcp"), cap) as sess:
            assert sess.capacity < sum((x + 4095) // 4096 * 4096 for x in sizes)  # it must wrap
            got = Frontend(c, model, "recall", session=sess, warm_misses=False).prefill(segs, query)
    assert [s.kind for s in got.segments] == ["hit"] * 4
    assert torch_equal(got.logits, want.logits)


def torch_equal(a: Any, b: Any) -> bool:
    return bool((a == b).all())
