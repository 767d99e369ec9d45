"""PIC inside a frontend's own model, on its own device: the *entries* way to use HYPIC.

The daemon holds each segment's entry (docs/entry-format.md); this module fetches them and
composes them in torch inside a transformers model of a supported architecture (Qwen3-Next,
Qwen3.5 dense and MoE, OLMo hybrid, MiniMax, Kimi-Linear, Nemotron-H, Ling), on whatever
device the model is on. For a request
[segments..., query] it

- looks the segments up in one Lookup (their keys under the daemon's seam setting and
  representation) and fetches every hit's entry in request order on a thread of its own,
  beside the model's forward — through a transport session when one is given
  (`get_entry_into`: the daemon writes it into the session's buffer, parsed there in
  place), else over gRPC — and reads it with hypic.parse_entry, every byte checked;
- runs the request through the model's own forward, segment by segment, on one cache: a
  miss is prefilled under its true prefix (exact for this request); a hit's seam (its first
  w tokens) is prefilled the same way and its body composed — per linear layer and value
  head S <- T.S + S_body in the head's stored form, the conv window <- the entry's tail —
  and, per attention layer, the body's canonical K rotated by the model's own RoPE to its
  true positions and appended with V to the model's cache (an MLA layer's latent and
  shared key part, the latter rotated where the model rotates it: Ling);
- asks the daemon to build the misses' entries (Warm) on a thread of its own, off the
  request's path, so that the next request hits;
- answers the model's own cache, the query's last logits and what each segment was, ready
  for generate() or a decode loop at the next position.

torch and transformers are needed (the `frontend` extra); the same code runs on CPU and
CUDA, torch operations only.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .client import Client
from .entry import AttentionLayer, EntryParts, EntryShape, Form, Head, LinearLayer, parse_entry
from .transport import Session

SUPPORTED = (
    "qwen3_next",
    "qwen3_5_text",
    "qwen3_5",
    "qwen3_5_moe_text",
    "qwen3_5_moe",
    "olmo_hybrid",
    "minimax",
    "kimi_linear",
    "nemotron_h",
    "bailing_hybrid",
)
# families whose forward keeps the recurrent state in fp32 whatever the model's dtype
FP32_STATE = ("kimi_linear", "bailing_hybrid", "nemotron_h")


@dataclass
class SegmentResult:
    kind: str  # "hit" (composed from its entry) or "miss" (prefilled here)
    tokens: int
    computed: int = 0  # tokens through the model's forward: a hit's seam, a miss's all
    bytes: int = 0  # the entry's, for a hit
    fetch_ms: float = 0.0  # fetching and checking it (beside the forward)
    wait_ms: float = 0.0  # what the request waited for it
    compose_ms: float = 0.0  # the body's composition, for a hit (its seam not counted)


@dataclass
class Result:
    cache: Any  # the model's cache after [segments..., query]
    logits: torch.Tensor  # the query's last position, [vocab]
    position: int  # tokens consumed: the next token goes at this position
    segments: list[SegmentResult] = field(default_factory=list)
    lookup_ms: float = 0.0
    forward_ms: float = 0.0  # the model's forwards (seams, misses, query)
    total_ms: float = 0.0
    warm: threading.Thread | None = None  # the misses' builds, running on the daemon


def _text_config(model: Any) -> Any:
    return model.config.get_text_config(decoder=True)


def _inner(model: Any) -> Any:
    """The text model under a causal-LM head: what holds rotary_emb."""
    m = model.model
    return getattr(m, "language_model", m)


def _minimax_cache(first_attention: int) -> Any:
    """transformers' MiniMaxCache counting positions in its first attention layer: the
    stock one counts them in layer 0, a lightning layer that keeps no K, so a forward after
    a composed body (its K in the attention layers, nothing in layer 0) would be masked as
    if nothing came before."""
    from transformers.models.minimax.modeling_minimax import MiniMaxCache

    class Counted(MiniMaxCache):  # type: ignore[misc]
        def _at(self, layer_idx: int) -> int:
            return first_attention if layer_idx == 0 else layer_idx

        def get_seq_length(self, layer_idx: int = 0) -> int:
            return int(super().get_seq_length(self._at(layer_idx)))

        def get_mask_sizes(self, query_length: int, layer_idx: int) -> tuple[int, int]:
            return super().get_mask_sizes(query_length, self._at(layer_idx))  # type: ignore[no-any-return]

        def get_query_offset(self, layer_idx: int) -> Any:
            return super().get_query_offset(self._at(layer_idx))

    return Counted()


class _Fetcher(threading.Thread):
    """Fetches a request's hits in request order, beside the model's forward: through
    the session into successive offsets of its buffer (from its start again once every
    entry before has been composed, when the next does not fit), or over gRPC; each
    parsed (every byte checked) as it comes."""

    def __init__(self, front: "Frontend", hits: list[tuple[int, bytes, int]]) -> None:
        super().__init__(daemon=True, name="hypic-fetch")
        self.front, self.hits = front, hits
        self.cv = threading.Condition()
        self.got: dict[int, tuple[EntryParts, int, float] | BaseException] = {}
        self.composed = 0
        self.stopping = False

    def run(self) -> None:
        f, sess, off = self.front, self.front.session, 0
        for n, (i, key, size) in enumerate(self.hits):
            t0 = time.perf_counter()
            try:
                need = (size + 4095) // 4096 * 4096
                if sess is not None and 0 < need <= sess.capacity:
                    if off + need > sess.capacity:  # from the start, once the ones there are composed
                        with self.cv:
                            while self.composed < n and not self.stopping:
                                self.cv.wait()
                        off = 0
                    if self.stopping:
                        return
                    meta, view = f.client.get_entry_into(sess, f.name, key, off, tenant=f.tenant)
                    got: tuple[EntryParts, int, float] | BaseException = (
                        parse_entry(view, f.shape),
                        int(meta.bytes),
                        (time.perf_counter() - t0) * 1e3,
                    )
                    off += need
                else:
                    e = f.client.get_entry(f.name, key, tenant=f.tenant)
                    got = (parse_entry(e.data, f.shape), len(e.data), (time.perf_counter() - t0) * 1e3)
            except BaseException as x:  # the request raises it when it gets there
                got = x
            with self.cv:
                self.got[i] = got
                self.cv.notify_all()

    def take(self, i: int) -> tuple[EntryParts, int, float]:
        with self.cv:
            while i not in self.got:
                self.cv.wait()
            got = self.got.pop(i)
        if isinstance(got, BaseException):
            raise got
        return got

    def composed_one(self) -> None:
        with self.cv:
            self.composed += 1
            self.cv.notify_all()

    def stop(self) -> None:
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        self.join()


class Frontend:
    """PIC for one transformers model against one daemon model name.

    client: a hypic.Client; model: the transformers model (eval mode, any device); name:
    the daemon's name for the same checkpoint; session: a transport session to fetch
    entries through, "auto" (the default: one of its own, opened on the first request —
    shm when the daemon is on this host, else TCP — and closed by close()), or None
    (gRPC); warm_misses: build the misses' entries on the daemon after each request (off
    the request's path). A context manager."""

    def __init__(
        self,
        client: Client,
        model: Any,
        name: str,
        *,
        session: Session | str | None = "auto",
        warm_misses: bool = True,
        tenant: str = "",
    ) -> None:
        cfg = _text_config(model)
        if cfg.model_type not in SUPPORTED:
            raise ValueError(f"model type {cfg.model_type!r}: the adapter composes {', '.join(SUPPORTED)}")
        self.client, self.model, self.name = client, model, name
        if isinstance(session, str) and session != "auto":
            raise ValueError(f"session: {session!r} is not a Session, 'auto' or None")
        self._auto = session == "auto"
        self.session: Session | None = None if self._auto else session  # type: ignore[assignment]
        self.warm_misses, self.tenant = warm_misses, tenant
        self.shape = EntryShape.from_config(cfg.to_dict())
        self.device = next(model.parameters()).device
        self.minimax = cfg.model_type == "minimax"  # lightning states in MiniMaxCache, no conv
        self.mamba2 = cfg.model_type == "nemotron_h"  # S per head [P][N] in its cache, ours [N][P]
        self.mla = self.shape.v_dim != 0  # Kimi-Linear, Ling: latents and shared key parts
        self.state_dtype = torch.float32 if cfg.model_type in FP32_STATE else model.dtype
        self.first_attention = self.shape.layers.index("attention") if "attention" in self.shape.layers else 0
        inner = _inner(model)
        self._rotary = getattr(inner, "rotary_emb", None)  # Kimi-Linear and Nemotron-H: no positions
        mod = sys.modules[type(inner).__module__]
        self._interleaved = self.mla and self._rotary is not None  # Ling: DeepSeek's pairs
        self._apply_rope = getattr(
            mod, "apply_rotary_pos_emb_interleave" if self._interleaved else "apply_rotary_pos_emb", None
        )
        rope = getattr(cfg, "rope_parameters", None) or {}
        self._mrope = bool(rope.get("mrope_section"))

    def close(self) -> None:
        """Closes the session the adapter opened itself ("auto"); idempotent."""
        if self._auto and self.session is not None:
            self.session.close()
            self.session = None

    def __enter__(self) -> "Frontend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    AUTO_CAPACITY = 64 << 20  # the buffer of the session "auto" opens

    def _session(self) -> None:
        """With "auto": the best transport the daemon offers this process, opened once."""
        if self._auto and self.session is None:
            self.session = self.client.session(("shm", "tcp"), self.AUTO_CAPACITY, tenant=self.tenant)

    # ---- composing ----------------------------------------------------------------------

    def _t(self, x: np.ndarray | None) -> torch.Tensor:
        """A copy on the model's device (an entry's fp32 parts are views of bytes that a
        session's next transfer overwrites)."""
        assert x is not None
        t = torch.tensor(np.asarray(x, dtype=np.float32))
        if self.device.type == "cuda":  # through pinned memory: the copy to the device is a DMA
            return t.pin_memory().to(self.device, non_blocking=True)
        return t.to(self.device)

    def _apply_t(self, h: Head, s: torch.Tensor) -> torch.Tensor:
        """T~.s for one head's state s [dk][dv]."""
        if h.form == Form.ZERO:
            return torch.zeros_like(s)
        if h.form == Form.SCALAR:
            return h.gamma * s
        if h.form == Form.DIAG:
            return self._t(h.diag)[:, None] * s
        if h.form in (Form.LOWRANK, Form.IPLR):
            out = self._t(h.u) @ (self._t(h.vt) @ s)
            return out + h.gamma * s if h.form == Form.IPLR else out
        return self._t(h.dense) @ s

    def _s_body(self, h: Head) -> torch.Tensor | None:
        if h.form == Form.ZERO:
            return None
        if h.form == Form.LOWRANK:
            return self._t(h.u) @ self._t(h.vt)
        return self._t(h.dense)

    def _state(self, cache: Any, i: int) -> torch.Tensor | None:
        """Linear layer i's recurrent state in cache, [Hv][dk][dv] in our orientation (a
        view), or None (none yet)."""
        if self.minimax:
            x = cache.get_linear_cache(i)
            return x[0] if isinstance(x, torch.Tensor) else None
        lc = cache.layers[i]
        if not lc.is_recurrent_states_initialized[0]:
            return None
        s = lc.recurrent_states[0][0]
        return s.transpose(-1, -2) if self.mamba2 else s

    def _set_state(self, cache: Any, i: int, s: torch.Tensor) -> None:
        """Linear layer i's recurrent state <- s [Hv][dk][dv] (ours), in the cache's dtype
        and orientation."""
        if self.mamba2:
            s = s.transpose(-1, -2).contiguous()
        s = s.unsqueeze(0).to(self.state_dtype)
        if self.minimax:
            cache.set_linear_cache(i, s)
        else:
            cache.update_recurrent_state(s, i)

    def new_cache(self) -> Any:
        """An empty cache of the class the model's forward works with."""
        if self.minimax:
            return _minimax_cache(self.first_attention)
        from transformers import DynamicCache

        return DynamicCache(config=self.model.config)

    def _rope_k(self, k: torch.Tensor, first: int) -> torch.Tensor:
        """k [1][Hkv][nb][hd] (canonical) rotated to positions first.. as the model's
        forward rotates its keys; as it is for a model without positions."""
        if self._rotary is None:
            return k
        nb = k.shape[2]
        pos = torch.arange(first, first + nb, device=self.device).view(1, -1)
        if self._mrope:  # text: the same position in every section
            pos = pos[None].expand(3, 1, -1)
        cos, sin = self._rotary(k, pos)
        if self._interleaved:
            # ours is the shared key part with its pairs in halves (the daemon's loader
            # reorders the checkpoint's interleaved rows); interleaved again, the model's
            # own function rotates it into the halves its cache keeps
            h = k.shape[-1] // 2
            k = torch.stack((k[..., :h], k[..., h:]), dim=-1).flatten(-2)
        _, rotated = self._apply_rope(k, k, cos.to(k.dtype), sin.to(k.dtype))
        return rotated

    def _compose(self, cache: Any, parts: EntryParts, first: int) -> None:
        """The body of a hit into cache: its tokens at positions first.."""
        for i, layer in enumerate(parts.layers):
            if isinstance(layer, LinearLayer):
                prev = self._state(cache, i)
                if prev is not None:
                    S = prev.float()
                else:  # no prefix yet (a segment of W = 0 first): the state is zero
                    S = torch.zeros(self.shape.v_heads, self.shape.dk, self.shape.dv, device=self.device)
                out = torch.empty_like(S)
                for h, (t, s) in enumerate(zip(layer.t, layer.s)):
                    x = self._apply_t(t, S[h])
                    sb = self._s_body(s)
                    out[h] = x if sb is None else x + sb
                self._set_state(cache, i, out)
                if self.minimax:  # no conv
                    continue
                # the conv window: the body's last K-1 inputs (appended, the window keeps them)
                tail = self._t(layer.tail).T.unsqueeze(0).to(self.model.dtype)  # [1][conv_dim][K-1]
                cache.update_conv_state(tail.contiguous(), i, conv_kernel_size=self.shape.conv_kernel)
            elif isinstance(layer, AttentionLayer):
                k = self._t(layer.k).permute(1, 0, 2).unsqueeze(0).to(self.model.dtype)
                v = self._t(layer.v).permute(1, 0, 2).unsqueeze(0).to(self.model.dtype)
                if self.mla:  # the latent as it is; the shared key part is what RoPE turns
                    cache.update(k.contiguous(), self._rope_k(v, first).contiguous(), i)
                else:
                    cache.update(self._rope_k(k, first).contiguous(), v.contiguous(), i)
            # (None: a block that keeps no state, Nemotron-H's MLP and MoE)

    # ---- a request ----------------------------------------------------------------------

    @torch.no_grad()
    def _forward(self, cache: Any, ids: Sequence[int], first: int) -> torch.Tensor:
        n = len(ids)
        r = self.model(
            input_ids=torch.tensor([list(ids)], device=self.device),
            position_ids=torch.arange(first, first + n, device=self.device).view(1, -1),
            past_key_values=cache,
            use_cache=True,
        )
        return r.logits[0, -1]

    @torch.no_grad()
    def generate(self, segments: Sequence[Sequence[int]], query: Sequence[int], **kwargs: Any) -> torch.Tensor:
        """transformers' generate() after the request: everything but the query's last
        token composed and prefilled here (prefill), that token and what follows decoded
        by generate() from the model's cache. kwargs go to generate (max_new_tokens,
        do_sample, ...); answers its output ids, the prompt's included."""
        if not query:
            raise ValueError("query: at least one token, whose logits answer")
        r = self.prefill(segments, query[:-1])
        prompt = [t for s in segments for t in s] + list(query)
        ids = torch.tensor([prompt], device=self.device)
        return self.model.generate(input_ids=ids, past_key_values=r.cache, **kwargs)

    @torch.no_grad()
    def prefill(self, segments: Sequence[Sequence[int]], query: Sequence[int]) -> Result:
        """The request [segments..., query] through the model, hits composed from their
        entries: the model's cache, the query's logits (empty for no query) and each
        segment's outcome."""
        t0 = time.perf_counter()
        segs = [list(s) for s in segments]
        look = self.client.lookup(self.name, segs, tenant=self.tenant) if segs else None
        t1 = time.perf_counter()
        cache = self.new_cache()
        res = Result(cache=cache, logits=torch.empty(0), position=0, lookup_ms=(t1 - t0) * 1e3)
        hits = [(i, st.key, int(st.bytes)) for i, st in enumerate(look.segments) if st.hit] if look else []
        if hits:
            self._session()
        fetcher = _Fetcher(self, hits)
        fetcher.start()
        pos, misses, fwd = 0, [], 0.0
        try:
            for i, ids in enumerate(segs):
                out = SegmentResult("miss", len(ids))
                parts = None
                if look is not None and look.segments[i].hit:
                    w0 = time.perf_counter()
                    parts, out.bytes, out.fetch_ms = fetcher.take(i)
                    out.wait_ms = (time.perf_counter() - w0) * 1e3
                    if parts.tokens.tolist() != ids:  # the daemon's entry must be this segment's
                        raise ValueError(f"segments[{i}]: the entry's tokens are not the segment's")
                if parts is None:
                    out.computed = len(ids)
                    f0 = time.perf_counter()
                    self._forward(cache, ids, pos)
                    fwd += time.perf_counter() - f0
                    misses.append(ids)
                else:
                    out.kind = "hit"
                    out.computed = parts.seam
                    if parts.seam:
                        f0 = time.perf_counter()
                        self._forward(cache, ids[: parts.seam], pos)
                        fwd += time.perf_counter() - f0
                    c0 = time.perf_counter()
                    self._compose(cache, parts, pos + parts.seam)
                    out.compose_ms = (time.perf_counter() - c0) * 1e3
                    fetcher.composed_one()
                pos += len(ids)
                res.segments.append(out)
        finally:
            fetcher.stop()
        if query:
            f0 = time.perf_counter()
            res.logits = self._forward(cache, list(query), pos)
            fwd += time.perf_counter() - f0
        res.position = pos + len(query)
        res.forward_ms = fwd * 1e3
        res.total_ms = (time.perf_counter() - t0) * 1e3
        if misses and self.warm_misses:
            res.warm = threading.Thread(target=self._warm, args=(misses,), daemon=True)
            res.warm.start()
        return res

    def _warm(self, misses: list[list[int]]) -> None:
        try:
            for _ in self.client.warm(self.name, misses, tenant=self.tenant):
                pass
        except Exception as e:  # off the request's path: the next request misses again
            print(f"hypic.frontend: warming {len(misses)} misses failed: {e}", file=sys.stderr)
