"""A segment entry read in Python: the bytes GetEntry returns, checked and decoded.

An entry (docs/entry-format.md) holds what reusing a segment after any prefix needs: its
token ids, and per layer either a linear layer's parts — the body's transition operator T
and its state from zero S_body, one per value head, each in a head form (zero, scalar,
diag, lowrank, iplr, dense; fp32 or bf16), and the conv tail — or an attention layer's
canonical K (after k_norm, before RoPE) and V of the body's tokens. Composing a hit is
then, per linear head, S <- T.S + S_body, the conv state <- the tail, and per attention
layer the body's K rotated to its true positions and appended with V.

`parse_entry(buf, shape)` (an EntryParts) checks every field before it trusts it — magic, version, the
header's checksum (XXH3-64) and sizes, each section's kind, layer, bounds, alignment,
length and checksum, each head record's form, dtype, rank and payload size, the padding,
the token ids against the vocabulary — and raises EntryError naming what failed. The
arrays it returns are numpy views of buf where the bytes are fp32 (no copy), widened
copies where they are bf16. `EntryShape.from_config` gives the shape from a model's
config.json (a dict, or a transformers config's to_dict()): which layers are linear,
their head counts and dimensions, the conv window, the attention layers' heads.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

import numpy as np
import xxhash

MAGIC = b"HYPICENT"
HEADER_BYTES = 104
SECTION_BYTES = 32
RECORD_BYTES = 16


class Form(IntEnum):
    ZERO = 0
    SCALAR = 1
    DIAG = 2
    LOWRANK = 3
    IPLR = 4
    DENSE = 5


class Kind(IntEnum):
    TOKENS = 1
    T = 2
    S = 3
    TAIL = 4
    K = 5
    V = 6


class EntryError(ValueError):
    """An entry that failed a check: the message names the field and the limit."""


def _head_dim(c: dict[str, Any]) -> int:
    """An attention head's width: head_dim, else hidden_size over the heads."""
    return int(c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"])


@dataclass(frozen=True)
class EntryShape:
    """What an entry's sections hold for one model. layers[i] is "linear", "attention" or
    "none" (a block that keeps no state: Nemotron-H's MLP and MoE blocks, no sections); a
    linear layer has v_heads heads of T [dk][dk] and S [dk][dv] (t_family "dense": the
    delta-rule families; "scalar"/"diag": Mamba2, lightning), a conv tail
    [conv_kernel-1][conv_dim]; an attention layer K of [kv_heads][head_dim] and V of
    [kv_heads][v_dim or head_dim] per body token (an MLA layer: one "head", K its latent
    of kv_lora_rank, V its shared key part of qk_rope_head_dim, before RoPE). vocab bounds
    the token ids (0: unchecked)."""

    layers: tuple[str, ...]
    dk: int
    dv: int
    v_heads: int
    conv_kernel: int
    conv_dim: int
    kv_heads: int
    head_dim: int
    t_family: str = "dense"
    vocab: int = 0
    v_dim: int = 0  # V's row per head when it is not head_dim's (MLA)

    @property
    def v_cols(self) -> int:
        return self.v_dim or self.head_dim

    @staticmethod
    def from_config(config: dict[str, Any]) -> "EntryShape":
        """From a Qwen3-Next, Qwen3.5 (a vision-language one's text_config), OLMo hybrid,
        MiniMax, Kimi-Linear, Nemotron-H or Ling config: config.json as released, or a
        transformers config's to_dict()."""
        c = config.get("text_config") or config
        arch = c.get("model_type")
        vocab = int(c.get("vocab_size", 0))
        if arch == "nemotron_h":
            return EntryShape._nemotron_h(c, vocab)
        if arch in ("kimi_linear", "bailing_hybrid"):
            return EntryShape._kda_mla(c, arch, vocab)
        n = int(c["num_hidden_layers"])
        if arch == "minimax":  # lightning heads: scalar decay, no conv
            hd = _head_dim(c)
            kinds = tuple("attention" if t == "full_attention" else "linear" for t in c["layer_types"])
            return EntryShape(
                layers=kinds,
                dk=hd,
                dv=hd,
                v_heads=int(c["num_attention_heads"]),
                conv_kernel=1,
                conv_dim=0,
                kv_heads=int(c["num_key_value_heads"]),
                head_dim=hd,
                t_family="scalar",
                vocab=vocab,
            )
        types = c.get("layer_types")
        if types is None:
            every = int(c.get("full_attention_interval", 4))
            types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        if len(types) != n:
            raise EntryError(f"config: layer_types has {len(types)} entries, num_hidden_layers is {n}")
        kinds = tuple("attention" if t == "full_attention" else "linear" for t in types)
        dk, dv = int(c["linear_key_head_dim"]), int(c["linear_value_head_dim"])
        hk, hv = int(c["linear_num_key_heads"]), int(c["linear_num_value_heads"])
        head_dim = _head_dim(c)
        return EntryShape(
            layers=kinds,
            dk=dk,
            dv=dv,
            v_heads=hv,
            conv_kernel=int(c["linear_conv_kernel_dim"]),
            conv_dim=2 * hk * dk + hv * dv,
            kv_heads=int(c["num_key_value_heads"]),
            head_dim=head_dim,
            vocab=vocab,
        )

    @staticmethod
    def _nemotron_h(c: dict[str, Any], vocab: int) -> "EntryShape":
        """Mamba2 heads (T a scalar per head, S [ssm_state_size][mamba_head_dim]: the key
        is B), GQA without positions, and MLP / MoE blocks that keep nothing."""
        types = c.get("layers_block_type") or c.get("layer_types")
        if types is None:
            pattern = c.get("hybrid_override_pattern", "ME*-")
            names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
            if any(ch not in names for ch in pattern):
                raise EntryError(f"config: hybrid_override_pattern {pattern!r}: blocks are M, *, - or E")
            types = [names[ch] for ch in pattern]
        kind = {"linear_attention": "linear", "full_attention": "attention", "mlp": "none", "moe": "none"}
        if any(t not in kind for t in types):
            raise EntryError(f"config: layers_block_type {types}: blocks are {', '.join(kind)}")
        heads, p, n = int(c["mamba_num_heads"]), int(c["mamba_head_dim"]), int(c["ssm_state_size"])
        return EntryShape(
            layers=tuple(kind[t] for t in types),
            dk=n,
            dv=p,
            v_heads=heads,
            conv_kernel=int(c.get("conv_kernel", 4)),
            conv_dim=heads * p + 2 * int(c["n_groups"]) * n,
            kv_heads=int(c["num_key_value_heads"]),
            head_dim=_head_dim(c),
            t_family="scalar",
            vocab=vocab,
        )

    @staticmethod
    def _kda_mla(c: dict[str, Any], arch: str, vocab: int) -> "EntryShape":
        """Kimi-Linear and Ling: KDA heads (T dense, a conv over q | k | v) and MLA layers
        whose entry holds the latent and the shared key part per token. Kimi's nested
        linear_attn_config wins over the flat keys; Ling's head_dim, as released, is the KDA
        heads' width (its transformers config sets it to qk_rope_head_dim and keeps the
        width as linear_head_dim)."""
        n = int(c["num_hidden_layers"])
        nested = c.get("linear_attn_config") or {}
        d = int(nested.get("head_dim") or c.get("linear_head_dim") or c.get("head_dim") or 128)
        h = int(nested.get("num_heads") or c.get("linear_num_heads") or c["num_attention_heads"])
        k = int(
            nested.get("short_conv_kernel_size")
            or c.get("linear_conv_kernel_dim")
            or c.get("short_conv_kernel_size")
            or 4
        )
        types = c.get("layer_types")
        if types is None and arch == "kimi_linear":
            if "kda_layers" in nested and "full_attn_layers" in nested:  # 1-indexed
                full = {int(x) - 1 for x in nested["full_attn_layers"]}
                types = ["full_attention" if i in full else "linear_attention" for i in range(n)]
            else:
                types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
        elif types is None:
            every = int(c.get("layer_group_size", 6))
            types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
        if len(types) != n:
            raise EntryError(f"config: layer_types has {len(types)} entries, num_hidden_layers is {n}")
        return EntryShape(
            layers=tuple("attention" if t == "full_attention" else "linear" for t in types),
            dk=d,
            dv=d,
            v_heads=h,
            conv_kernel=k,
            conv_dim=3 * h * d,
            kv_heads=1,
            head_dim=int(c.get("kv_lora_rank", 512)),
            v_dim=int(c.get("qk_rope_head_dim", 64)),
            vocab=vocab,
        )


@dataclass
class Head:
    """One linear head's T or S_body in its stored form, its values fp32.

    zero: nothing; scalar: gamma (T = gamma.I); diag: `diag` [dk]; lowrank: `u` [rows][r],
    `vt` [r][cols] (X = u.vt); iplr: T = gamma.I + u.vt; dense: `dense` [rows][cols].
    `bound` is what the entry states: for T, ||T~ - T||_F (for scalar and diag the exact
    spectral norm); for S, ||S~ - S||_F over ||S||_F's tolerance."""

    form: Form
    rows: int
    cols: int
    gamma: float = 0.0
    bound: float = 0.0
    rank: int = 0
    diag: np.ndarray | None = None
    u: np.ndarray | None = None
    vt: np.ndarray | None = None
    dense: np.ndarray | None = None

    def to_dense(self) -> np.ndarray:
        """The head's matrix, [rows][cols] fp32."""
        x = np.zeros((self.rows, self.cols), dtype=np.float32)
        if self.form in (Form.SCALAR, Form.IPLR):
            np.fill_diagonal(x, self.gamma)
        if self.form == Form.DIAG:
            assert self.diag is not None
            np.fill_diagonal(x, self.diag)
        elif self.form in (Form.LOWRANK, Form.IPLR):
            assert self.u is not None and self.vt is not None
            x += self.u @ self.vt
        elif self.form == Form.DENSE:
            assert self.dense is not None
            x[...] = self.dense
        return x

    def apply(self, s: np.ndarray) -> np.ndarray:
        """T~.s for a state s [dk][dv] of this head (T only)."""
        if self.form == Form.ZERO:
            return np.zeros_like(s)
        if self.form == Form.SCALAR:
            return self.gamma * s
        if self.form == Form.DIAG:
            assert self.diag is not None
            return self.diag[:, None] * s
        if self.form in (Form.LOWRANK, Form.IPLR):
            assert self.u is not None and self.vt is not None
            out = self.u @ (self.vt @ s)
            return out + self.gamma * s if self.form == Form.IPLR else out
        assert self.dense is not None
        return self.dense @ s


@dataclass
class LinearLayer:
    t: list[Head]
    s: list[Head]
    tail: np.ndarray  # [conv_kernel-1][conv_dim]

    def compose(self, state: np.ndarray) -> np.ndarray:
        """The state after the body from the state before it, [v_heads][dk][dv]."""
        out = np.empty_like(state)
        for h, (t, s) in enumerate(zip(self.t, self.s)):
            out[h] = t.apply(state[h]) + s.to_dense()
        return out


@dataclass
class AttentionLayer:
    k: np.ndarray  # [nb][kv_heads][head_dim], canonical: before RoPE (MLA: the latent)
    v: np.ndarray  # [nb][kv_heads][v_cols] (MLA: the shared key part, before RoPE)


@dataclass
class EntryParts:
    """An entry's header fields, its tokens and its layers' parts (LinearLayer,
    AttentionLayer, or None for a block that keeps no state; in model order)."""

    version: int
    W: int  # the seam setting it was built under
    seam: int  # w: the seam's tokens, recomputed at every reuse
    tokens: np.ndarray  # [n] int32
    body: int  # nb = n - w
    s_dtype: int
    t_dtype: int
    kv_dtype: int
    tolerance: float
    fingerprint: bytes
    layers: list[LinearLayer | AttentionLayer | None] = field(default_factory=list)


def _f32(buf: memoryview, off: int, count: int, dtype: int, what: str) -> np.ndarray:
    if dtype == 0:
        return np.frombuffer(buf, dtype="<f4", count=count, offset=off)
    if dtype == 1:
        raw = np.frombuffer(buf, dtype="<u2", count=count, offset=off)
        return (raw.astype(np.uint32) << 16).view(np.float32)
    raise EntryError(f"{what}: dtype {dtype} is neither 0 (f32) nor 1 (bf16)")


def _payload_elems(form: Form, rank: int, rows: int, cols: int) -> int:
    if form == Form.DIAG:
        return rows
    if form in (Form.LOWRANK, Form.IPLR):
        return rank * (rows + cols)
    if form == Form.DENSE:
        return rows * cols
    return 0


def _pad16(x: int) -> int:
    return (x + 15) & ~15


def _zero(buf: memoryview, lo: int, hi: int, what: str) -> None:
    if hi > lo and any(buf[lo:hi]):
        raise EntryError(f"{what}: padding is not zero")


def _heads(
    buf: memoryview, off: int, length: int, part: str, layer: int, shape: EntryShape, version: int, dtype: int
) -> list[Head]:
    is_t = part == "T"
    rows, cols = shape.dk, shape.dk if is_t else shape.dv
    n = shape.v_heads
    where = f"layer {layer} {part}"
    if version == 1:  # every head dense, T fp32 in the family's shape, S in S's dtype
        if is_t and shape.t_family != "dense":
            per = 1 if shape.t_family == "scalar" else rows
            want = n * per * 4
        else:
            per = rows * cols
            want = n * per * (2 if (not is_t and dtype == 1) else 4)
        if length != want:
            raise EntryError(f"{where}: {length} bytes, version 1 holds {want}")
        vals = _f32(buf, off, n * per, 0 if is_t else dtype, where)
        out = []
        for h in range(n):
            v = vals[h * per : (h + 1) * per]
            if per == 1:
                out.append(Head(Form.SCALAR, rows, cols, gamma=float(v[0])))
            elif per == rows and is_t and shape.t_family != "dense":
                out.append(Head(Form.DIAG, rows, cols, diag=v))
            else:
                out.append(Head(Form.DENSE, rows, cols, dense=v.reshape(rows, cols)))
        return out
    table = n * RECORD_BYTES
    if length < table:
        raise EntryError(f"{where}: {length} bytes, its {n} head records alone are {table}")
    at = off + _pad16(table)
    heads = []
    allowed = (
        {Form.ZERO, Form.SCALAR, Form.LOWRANK, Form.IPLR, Form.DENSE}
        if is_t and shape.t_family == "dense"
        else {Form.ZERO, Form.SCALAR, Form.DIAG}
        if is_t
        else {Form.ZERO, Form.LOWRANK, Form.DENSE}
    )
    for h in range(n):
        form_b, dt, rank, gamma, bound, nbytes = struct.unpack_from("<BBHffI", buf, off + h * RECORD_BYTES)
        what = f"{where} head {h}"
        try:
            form = Form(form_b)
        except ValueError:
            raise EntryError(f"{what}: form {form_b} is not one of 0..5") from None
        if form not in allowed:
            raise EntryError(f"{what}: form {form.name.lower()} is not taken by this part")
        if dt not in (0, 1):
            raise EntryError(f"{what}: dtype {dt} is neither 0 (f32) nor 1 (bf16)")
        ranked = form in (Form.LOWRANK, Form.IPLR)
        if ranked and not 0 < rank <= min(rows, cols):
            raise EntryError(f"{what}: rank {rank} is outside 1..{min(rows, cols)}")
        if not (math.isfinite(gamma) and math.isfinite(bound)) or bound < 0:
            raise EntryError(f"{what}: gamma {gamma} or bound {bound} is not a finite (non-negative) number")
        elems = _payload_elems(form, rank, rows, cols)
        want = elems * (2 if dt == 1 else 4)
        if nbytes != want:
            raise EntryError(f"{what}: {nbytes} payload bytes, form {form.name.lower()} of rank {rank} needs {want}")
        if at + _pad16(nbytes) > off + length:
            raise EntryError(f"{what}: its payload runs past the section's {length} bytes")
        vals = _f32(buf, at, elems, dt, what) if elems else None
        _zero(buf, at + nbytes, at + _pad16(nbytes), what)
        head = Head(form, rows, cols, gamma=gamma, bound=bound, rank=rank if ranked else 0)
        if form == Form.DIAG:
            head.diag = vals
        elif ranked:
            assert vals is not None
            head.u = vals[: rows * rank].reshape(rows, rank)
            head.vt = vals[rows * rank :].reshape(rank, cols)
        elif form == Form.DENSE:
            assert vals is not None
            head.dense = vals.reshape(rows, cols)
        heads.append(head)
        at += _pad16(nbytes)
    _zero(buf, off + table, off + _pad16(table), f"{where} records")
    if at != off + length:
        raise EntryError(f"{where}: the payloads fill {at - off} of its {length} bytes")
    return heads


def parse_entry(data: bytes | bytearray | memoryview, shape: EntryShape) -> EntryParts:
    """The entry in data, every byte checked (EntryError naming what failed)."""
    buf = memoryview(data).cast("B")
    size = len(buf)
    if size < HEADER_BYTES:
        raise EntryError(f"{size} bytes: shorter than the {HEADER_BYTES}-byte header")
    if bytes(buf[:8]) != MAGIC:
        raise EntryError("magic: not HYPICENT")
    version, hdr, nsec = struct.unpack_from("<III", buf, 8)
    if version not in (1, 2):
        raise EntryError(f"version {version}: only 1 and 2 are read")
    if nsec > 4096 or hdr != HEADER_BYTES + SECTION_BYTES * nsec or hdr > size:
        raise EntryError(f"header bytes {hdr} with {nsec} sections do not fit a {size}-byte entry")
    if version == 1:
        (s_dtype,) = struct.unpack_from("<I", buf, 20)
        t_dtype = kv_dtype = 0
    else:
        s_dtype, t_dtype, kv_dtype, pad = struct.unpack_from("<BBBB", buf, 20)
        if pad:
            raise EntryError("offset 23: not zero")
    W, w, n, nb, nlayers = struct.unpack_from("<IIIII", buf, 24)
    (tol,) = struct.unpack_from("<f", buf, 44)
    fingerprint = bytes(buf[48:80])
    hsum, total, reserved = struct.unpack_from("<QQQ", buf, 80)
    head = bytearray(buf[:hdr])
    head[80:88] = bytes(8)
    if xxhash.xxh3_64_intdigest(bytes(head)) != hsum:
        raise EntryError("the header's checksum fails")
    if total != size:
        raise EntryError(f"total bytes {total}, the buffer holds {size} (truncated?)")
    if reserved or (version == 1 and tol != 0.0):
        raise EntryError("reserved fields (offsets 44, 96) are not zero")
    if version == 2 and not (0.0 <= tol <= 1.0):
        raise EntryError(f"tolerance {tol} is outside 0..1")
    for what, dt in (("S", s_dtype), ("T", t_dtype), ("K/V", kv_dtype)):
        if dt not in (0, 1):
            raise EntryError(f"dtype of {what}: {dt} is neither 0 (f32) nor 1 (bf16)")
    if nlayers != len(shape.layers):
        raise EntryError(f"{nlayers} layers, the model has {len(shape.layers)}")
    if n == 0 or w + nb != n or (W and w != min(W, n - 1)) or (not W and w != 0):
        raise EntryError(f"seam {w}, tokens {n}, body {nb}: not the seam rule's for W = {W}")
    per_token = 4 + sum(shape.kv_heads * (shape.head_dim + shape.v_cols) * 2 for k in shape.layers if k == "attention")
    if n * 4 > size or nb * (per_token - 4) > size:
        raise EntryError(f"{n} tokens and a body of {nb}: more than {size} bytes can hold")
    # the sections, in order: TOKENS, then per layer T, S, TAIL or K, V
    want: list[tuple[Kind, int]] = [(Kind.TOKENS, 0)]
    for i, k in enumerate(shape.layers):
        if k == "linear":
            want += [(Kind.T, i), (Kind.S, i), (Kind.TAIL, i)]
        elif k == "attention":
            want += [(Kind.K, i), (Kind.V, i)]
    if nsec != len(want):
        raise EntryError(f"{nsec} sections, this model's entry has {len(want)}")
    end = hdr
    kv = 2 if kv_dtype == 1 else 4
    entry = EntryParts(version, W, w, np.zeros(0, np.int32), nb, s_dtype, t_dtype, kv_dtype, tol, fingerprint)
    pending_t: list[Head] = []
    pending_s: list[Head] = []
    pending_k: np.ndarray | None = None
    for i, (kind, layer) in enumerate(want):
        k_b, l_b, off, length, csum = struct.unpack_from("<IIQQQ", buf, HEADER_BYTES + SECTION_BYTES * i)
        where = f"section {i} ({kind.name} of layer {layer})"
        if k_b != kind or (kind != Kind.TOKENS and l_b != layer):
            raise EntryError(f"{where}: it says kind {k_b}, layer {l_b}")
        if off % 64 or off < end or off + length > size:
            raise EntryError(f"{where}: at {off} for {length} bytes: unaligned, overlapping or outside the entry")
        end = off + length
        if xxhash.xxh3_64_intdigest(buf[off : off + length]) != csum:
            raise EntryError(f"{where}: its checksum fails")
        if kind == Kind.TOKENS:
            if length != 4 * n:
                raise EntryError(f"{where}: {length} bytes for {n} tokens")
            tok = np.frombuffer(buf, dtype="<u4", count=n, offset=off)
            if shape.vocab and n and int(tok.max()) >= shape.vocab:
                raise EntryError(f"{where}: token id {int(tok.max())} is outside the vocabulary of {shape.vocab}")
            entry.tokens = tok.astype(np.int32)
        elif kind in (Kind.T, Kind.S):
            dt = s_dtype if kind == Kind.S else t_dtype
            heads = _heads(buf, off, length, kind.name, layer, shape, version, dt)
            if kind == Kind.T:
                pending_t = heads
            else:
                pending_s = heads
        elif kind == Kind.TAIL:
            rows = shape.conv_kernel - 1
            if length != rows * shape.conv_dim * 4:
                raise EntryError(f"{where}: {length} bytes, the tail is [{rows}][{shape.conv_dim}] f32")
            tail = np.frombuffer(buf, dtype="<f4", count=rows * shape.conv_dim, offset=off)
            entry.layers += [None] * (layer - len(entry.layers))  # the stateless blocks before it
            entry.layers.append(LinearLayer(pending_t, pending_s, tail.reshape(rows, shape.conv_dim)))
        else:
            cols = shape.head_dim if kind == Kind.K else shape.v_cols
            count = nb * shape.kv_heads * cols
            if length != count * kv:
                raise EntryError(f"{where}: {length} bytes for {nb} rows of [{shape.kv_heads}][{cols}]")
            x = _f32(buf, off, count, kv_dtype, where).reshape(nb, shape.kv_heads, cols)
            if kind == Kind.K:
                pending_k = x
            else:
                assert pending_k is not None
                entry.layers += [None] * (layer - len(entry.layers))
                entry.layers.append(AttentionLayer(pending_k, x))
    entry.layers += [None] * (len(shape.layers) - len(entry.layers))  # stateless blocks at the end
    _zero(buf, end, size, "after the last section")
    return entry
