"""hypic.parse_entry on the daemon's entries: the compact ones (the default
representation, tolerance 0.03, bf16) against the exact ones of the same segments from a
second daemon — every head within the bound the entry states, the conv tails equal, K/V
within bf16's rounding —, the version-1 fixtures, and bytes that must be refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import COMMON, EXAMPLES, MODEL_DIR, REPO, Daemon, start_daemon, stop_daemon

import hypic
from hypic.entry import AttentionLayer, Form, LinearLayer

SHAPE = hypic.EntryShape.from_config(json.loads((MODEL_DIR / "config.json").read_text()))
DOCS = [EXAMPLES / f"doc{i}.txt" for i in (1, 2, 3, 4)]


@pytest.fixture(scope="module")
def exact_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """The same model, its entries exact (tolerance 0, every part fp32)."""
    d = start_daemon(
        tmp_path_factory.mktemp("exact"),
        COMMON + "pic: {tolerance: 0, dtype: f32, t_dtype: f32, kv_dtype: f32}\n",
    )
    try:
        yield d
    finally:
        stop_daemon(d)


def entries(d: Daemon) -> list[bytes]:
    """The entries of the example documents, warmed on d."""
    with hypic.Client(d.addr) as c:
        texts = [p.read_text() for p in DOCS]
        keys = [p.key for p in c.warm("recall", texts)]
        return [c.get_entry("recall", k).data for k in keys]


def test_compact_within_the_stated_bounds(daemon: Daemon, exact_daemon: Daemon) -> None:
    forms: dict[str, int] = {}
    for compact, exact in zip(entries(daemon), entries(exact_daemon), strict=True):
        a, b = hypic.parse_entry(compact, SHAPE), hypic.parse_entry(exact, SHAPE)
        assert (a.version, b.version) == (2, 2)
        assert a.tolerance == pytest.approx(0.03) and b.tolerance == 0.0
        assert (a.s_dtype, a.t_dtype, a.kv_dtype) == (1, 1, 1)
        assert np.array_equal(a.tokens, b.tokens) and a.body == b.body and a.seam == b.seam
        rng = np.random.default_rng(7)
        for la, lb in zip(a.layers, b.layers, strict=True):
            if isinstance(la, LinearLayer):
                assert isinstance(lb, LinearLayer)
                assert np.array_equal(la.tail, lb.tail)
                for t, te, s, se in zip(la.t, lb.t, la.s, lb.s, strict=True):
                    forms[t.form.name] = forms.get(t.form.name, 0) + 1
                    assert te.form == Form.DENSE and se.form == Form.DENSE
                    T, Te = t.to_dense(), te.to_dense()
                    # what the entry states is ||T~ - T||_F, measured on what it stores
                    assert np.linalg.norm(T - Te) <= t.bound * (1 + 1e-3) + 1e-6
                    S, Se = s.to_dense(), se.to_dense()
                    assert np.linalg.norm(S - Se) <= 0.03 * np.linalg.norm(Se) * (1 + 1e-3) + 1e-6
                # composing in the heads' forms is the dense formula
                st = rng.standard_normal((SHAPE.v_heads, SHAPE.dk, SHAPE.dv)).astype(np.float32)
                want = np.stack([t.to_dense() @ st[h] + s.to_dense() for h, (t, s) in enumerate(zip(la.t, la.s))])
                np.testing.assert_allclose(la.compose(st), want, rtol=1e-5, atol=1e-5)
            else:
                assert isinstance(la, AttentionLayer) and isinstance(lb, AttentionLayer)
                for x, y in ((la.k, lb.k), (la.v, lb.v)):
                    assert x.shape == (a.body, SHAPE.kv_heads, SHAPE.head_dim)
                    np.testing.assert_allclose(x, y, rtol=2**-8, atol=1e-6)
    print("T head forms at tolerance 0.03:", forms)


def test_version_1_fixtures(family_daemon: Daemon) -> None:
    """tests/fixtures/entry-v1: the tiny preset's entries before version 2, read into
    dense heads; their 40 tokens are (i * 37 + 11) % vocab."""
    tiny = hypic.EntryShape.from_config(json.loads((family_daemon.dir / "var/models/tiny/config.json").read_text()))
    for name, s_dtype in (("f32", 0), ("bf16", 1)):
        raw = (REPO / "tests/fixtures/entry-v1" / f"entry-v1-tiny-{name}.bin").read_bytes()[32:]
        e = hypic.parse_entry(raw, tiny)
        assert e.version == 1 and e.s_dtype == s_dtype and e.W == 8
        assert e.tokens.tolist() == [(i * 37 + 11) % tiny.vocab for i in range(40)]
        lin = [x for x in e.layers if isinstance(x, LinearLayer)]
        assert lin and all(h.form == Form.DENSE for x in lin for h in x.t + x.s)


def test_refused(daemon: Daemon) -> None:
    good = entries(daemon)[0]
    hypic.parse_entry(good, SHAPE)
    def flip(b: bytes, at: int, bit: int) -> bytes:
        return b[:at] + bytes([b[at] ^ bit]) + b[at + 1 :]

    cases = {
        "a flipped byte in a section": (lambda b: flip(b, len(b) // 2, 0x5A), "checksum fails"),
        "truncated": (lambda b: b[:-64], "total bytes"),
        "a flipped byte in the header": (lambda b: flip(b, 30, 1), "header's checksum"),
        "not an entry": (lambda b: b"NOTANENT" + b[8:], "magic"),
        "shorter than a header": (lambda b: b[:50], "shorter than"),
    }
    for cut, says in cases.values():
        with pytest.raises(hypic.EntryError, match=says):
            hypic.parse_entry(cut(good), SHAPE)
    other = hypic.EntryShape(**{**SHAPE.__dict__, "layers": SHAPE.layers[:-1]})
    with pytest.raises(hypic.EntryError, match="layers"):
        hypic.parse_entry(good, other)
    assert Path(MODEL_DIR).exists()


@pytest.mark.parametrize("name", ["tiny-nemotron", "tiny-kimi", "tiny-ling", "tiny-minimax", "tiny-olmo"])
def test_every_family_parses(family_daemon: Daemon, name: str) -> None:
    """Each hybrid family's entry read with the shape its config.json gives: a section
    pair per attention layer (MLA: the latent as K, the shared key part as V), a triple
    per linear layer, nothing for Nemotron-H's MLP and MoE blocks (None in their place),
    and the tokens the segment's."""
    cfg = json.loads((family_daemon.dir / f"var/models/{name}/config.json").read_text())
    shape = hypic.EntryShape.from_config(cfg)
    text = DOCS[0].read_text()
    with hypic.Client(family_daemon.addr) as c:
        (p,) = list(c.warm(name, [text]))
        e = hypic.parse_entry(c.get_entry(name, p.key).data, shape)
    assert e.tokens.tolist() == hypic.tokenize(text)
    assert len(e.layers) == len(shape.layers)
    for kind, layer in zip(shape.layers, e.layers, strict=True):
        if kind == "none":
            assert layer is None
        elif kind == "linear":
            assert isinstance(layer, LinearLayer) and len(layer.t) == shape.v_heads
            assert layer.tail.shape == (shape.conv_kernel - 1, shape.conv_dim)
            assert all(s.rows == shape.dk and s.cols == shape.dv for s in layer.s)
        else:
            assert isinstance(layer, AttentionLayer)
            assert layer.k.shape == (e.body, shape.kv_heads, shape.head_dim)
            assert layer.v.shape == (e.body, shape.kv_heads, shape.v_cols)
    if name == "tiny-nemotron":  # "M-M*ME"
        assert shape.layers == ("linear", "none", "linear", "attention", "linear", "none")
        assert shape.t_family == "scalar"
        assert all(t.form in (Form.SCALAR, Form.ZERO) for x in e.layers if isinstance(x, LinearLayer) for t in x.t)
    if name in ("tiny-kimi", "tiny-ling"):
        assert shape.kv_heads == 1 and shape.head_dim == cfg["kv_lora_rank"] and shape.v_cols == cfg["qk_rope_head_dim"]
