"""HypicConnector with vLLM's prefix caching on (mamba cache mode align, blocks of about
a thousand tokens): the composed state decodes as the daemon's, a second composed request
of the same segments answers the same, and no composed block answers a plain request for
the same tokens (the connector keys them apart with a salt)."""

from __future__ import annotations

from pathlib import Path

from conftest import MODELS, Daemon, make_llm
from test_connector import GREEDY, client, docs, generate, greedy_agrees, request, same_answer


def test_prefix_caching_on(daemon: Daemon, checkpoints: Path, tmp_path: Path) -> None:
    name = MODELS[0]
    daemon.start()
    llm = make_llm(checkpoints / f"{name}-tiny", daemon, name, tmp_path, prefix_caching=True)
    c = client(daemon)
    ds = docs(15)
    for _ in c.warm(name, ds):
        pass
    segs, query = request(ds, 10)
    prompt = sum(segs, []) + query
    counts = [len(s) for s in segs]
    own = generate(llm, prompt, None, salt="vllm-alone")  # computed whole, cached apart
    out = generate(llm, prompt, {"hypic_segments": counts})
    assert out.kv_transfer_params["hypic"]["claimed_tokens"] == sum(counts) + 1
    r = c.prefill(name, segs, query, mode="pic", top_k=5, max_new_tokens=GREEDY)
    assert greedy_agrees(out, list(r.generated)) >= 1
    # a second composed request of the same segments: the same answer
    again = generate(llm, prompt, {"hypic_segments": counts})
    assert list(again.outputs[0].token_ids) == list(out.outputs[0].token_ids)
    plain = generate(llm, prompt, None)
    assert plain.num_cached_tokens == 0, "a plain request was served composed blocks"
    same_answer(plain, own)
