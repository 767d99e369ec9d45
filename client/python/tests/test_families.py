"""Every hybrid family through the Python client: one daemon serves a generated preset of
each (conftest.FAMILIES), and per model the calls a frontend makes behave alike: Warm builds
and then finds the documents, Lookup hits them, Prefill in pic mode hits them and computes
only seams and the query, the full-mode state arrives over shared memory with the layer kinds
of that family's config.json, entries round-trip through GetEntry / PutEntry / Build, and
invalidating one model leaves the others' entries."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from conftest import FAMILIES, Daemon

import hypic

DOCS = [
    "the state of each segment is cached once and composed wherever it appears " * 3,
    "a second document, reused after the first or before it, in any order " * 3,
]
QUESTION = "\nQ: which document?"
SEAM = 8


# the parts of a delivered state per layer kind (MiniMax's lightning conv: [0][conv_dim])
PARTS = {"linear_attention": {"conv", "S"}, "full_attention": {"K", "V"}, "moe": set(), "mlp": set()}
NEMOTRON_PATTERN = {"M": "linear_attention", "*": "full_attention", "E": "moe", "-": "mlp"}


def layer_kinds(config: dict[str, Any]) -> list[str]:
    """Each layer's kind, as transformers reads the family's config.json."""
    if "layer_types" in config:
        return list(config["layer_types"])
    if "layers_block_type" in config:  # Nemotron-H as transformers saves it (legacy names remapped)
        legacy = {"mamba": "linear_attention", "attention": "full_attention"}
        return [legacy.get(k, k) for k in config["layers_block_type"]]
    if "hybrid_override_pattern" in config:  # Nemotron-H as released: one character a block
        return [NEMOTRON_PATTERN[c] for c in config["hybrid_override_pattern"]]
    if "layer_group_size" in config:  # Ling as released: the last layer of each group is MLA
        g = config["layer_group_size"]
        return ["full_attention" if (i + 1) % g == 0 else "linear_attention" for i in range(config["num_hidden_layers"])]
    # Kimi-Linear's release: 1-indexed lists of its MLA layers
    mla = set(config["linear_attn_config"]["full_attn_layers"])
    return ["full_attention" if i + 1 in mla else "linear_attention" for i in range(config["num_hidden_layers"])]


@pytest.fixture(scope="module")
def client(family_daemon: Daemon):  # type: ignore[no-untyped-def]
    with hypic.Client(family_daemon.addr, timeout=60) as c:
        yield c


@pytest.mark.parametrize("model", FAMILIES)
def test_a_family_through_every_call(client: hypic.Client, family_daemon: Daemon, model: str) -> None:
    assert model in client.health().models
    built = list(client.warm(model, DOCS))
    assert [p.state for p in built] == [hypic.WarmState.BUILT] * 2
    assert [p.state for p in client.warm(model, DOCS)] == [hypic.WarmState.CACHED] * 2
    r = client.lookup(model, [*DOCS, "nobody warmed this one"])
    assert [s.hit for s in r.segments] == [True, True, False]
    pic = client.prefill(model, DOCS[::-1], QUESTION, top_k=3, max_new_tokens=1)
    assert all(s.kind == hypic.OutcomeKind.HIT for s in pic.segments)
    assert pic.tokens_computed == 2 * SEAM + len(QUESTION.encode())
    full = client.prefill(model, DOCS[::-1], QUESTION, mode="full", top_k=3, max_new_tokens=1)
    assert full.tokens_computed == sum(len(d.encode()) for d in DOCS) + len(QUESTION.encode())

    config = json.loads((family_daemon.dir / "var" / "models" / model / "config.json").read_text())
    kinds = layer_kinds(config)
    with client.session(["shm"], 16 << 20) as s:
        _, st = client.prefill_state(s, model, DOCS, QUESTION, mode="full")
        assert st.position == full.tokens_computed and st.num_layers == len(kinds)
        if config.get("model_type") == "nemotron_h":
            assert st.num_layers == 6 and st.delivery.layers == 6
        with pytest.raises(IndexError):
            st.layer(st.num_layers)
        for i, kind in enumerate(kinds):
            parts = st.layer(i)
            assert set(parts) == PARTS[kind], (model, i, kind)
            assert st.is_linear(i) == (kind == "linear_attention"), (model, i)
            assert all(np.isfinite(a).all() for a in parts.values())
            if kind == "full_attention" and "kv_lora_rank" in config:  # MLA: latent, shared key
                assert parts["K"].shape[-1] == config["kv_lora_rank"], parts["K"].shape
                assert parts["V"].shape[-1] == config["qk_rope_head_dim"], parts["V"].shape
            if kind == "linear_attention" and config.get("model_type") == "nemotron_h":  # Mamba2
                h, n, p, g = (config[k] for k in ("mamba_num_heads", "ssm_state_size", "mamba_head_dim", "n_groups"))
                assert parts["S"].shape == (h, n, p), parts["S"].shape  # [H][N][P]
                assert parts["conv"].shape == (config["conv_kernel"] - 1, h * p + 2 * g * n), parts["conv"].shape
        assert {t.layer for t in st.tensors} == {i for i, k in enumerate(kinds) if PARTS[k]}

    e = client.get_entry(model, built[0].key)
    assert e.meta.model == model and len(e.data) == e.meta.bytes > 0
    assert client.put_entry(e).key == e.key
    assert client.inspect(e.key, verify=True).verified
    b = client.build(model, "a segment built by the client's request, long enough for a body")
    assert b.meta.model == model and len(b.data) > 0


def test_invalidating_one_family_leaves_the_others(client: hypic.Client) -> None:
    keys = {m: [p.key for p in client.warm(m, DOCS)] for m in FAMILIES}
    assert client.invalidate(model=FAMILIES[0]) >= 2
    assert not any(s.hit for s in client.lookup(FAMILIES[0], DOCS).segments)
    for m in FAMILIES[1:]:
        r = client.lookup(m, DOCS)
        assert all(s.hit for s in r.segments) and [s.key for s in r.segments] == keys[m]
