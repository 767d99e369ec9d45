"""HypicConnector: position-independent caching inside an unmodified vLLM.

vLLM loads it through its KV connector API:

    --kv-transfer-config '{"kv_connector": "HypicConnector",
        "kv_connector_module_path": "hypic.vllm", "kv_role": "kv_both",
        "kv_connector_extra_config": {"address": "127.0.0.1:7878", "model": "qwen35",
                                      "token": "..."}}'

A request names its segments with `kv_transfer_params: {"hypic_segments": [n1, n2, ...]}`
(token counts in prompt order; what follows is the query). For such a request the
scheduler side asks the daemon which segments it holds (one Lookup, leasing the hits),
and claims the span hypic.vllm_plan.plan gives when at least one of them is a hit. The
worker side then runs Prefill (mode pic, return_state) into a shared-memory transport
session on a thread of its own and, once the state is there, writes it into the
request's blocks in vLLM's layout: each full-attention layer's K and V into its paged
blocks, each linear layer's conv window and recurrent state into its state slot. vLLM
computes the rest of the prompt from that state.

Loads are asynchronous (the request waits in WAITING_FOR_REMOTE_KVS): that is the only
path on which vLLM takes a failed load back, so anything that goes wrong after the claim
(the daemon gone, an entry evicted since the Lookup, a state whose shapes differ) is
reported as a failed receive and vLLM computes the request itself; the load failure
policy is set to "recompute" for that. The blocks of a composed request are cached by
vLLM under a salt of their own (hypic.vllm_plan.cache_salt), never as an exact prefix.
Segments of a request the connector declined (no hit) are warmed on the daemon after
the request, off its path.

The layout guard refuses to start (ValueError naming what differs) on a vLLM version,
platform, model type or cache layout it was not written for: a cache written in the
wrong layout raises nothing and only gives wrong tokens.

kv_connector_extra_config:
    address       the daemon's gRPC address (host:port)       required
    model         the model's name as the daemon serves it     required
    token         the tenant's bearer token                    optional
    tls_root, tls_cert, tls_key   PEM files (as hypic.Client)  optional
    tls_server_name                                            optional
    timeout_s     per call (default 30); the scheduler's Lookup: lookup_timeout_s (2)
    retry_after_s after a Lookup found no daemon, requests are left to vLLM at once
                  for this long (default 5)
    lease_ms      how long the Lookup leases the hits (default 5000; the daemon caps it)
    warm_misses   warm a declined request's segments (default true)
    dump_dir      diagnostics: for requests whose kv_transfer_params carry
                  "hypic_dump": NAME, the state read back from vLLM's cache after a
                  load (NAME.loaded.npz) or after vLLM's own prefill (NAME.computed.npz)
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import os
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from vllm.v1.kv_cache_interface import AttentionSpec, MambaSpec

from . import vllm_plan
from .client import Client
from .errors import HypicError
from .types import OutcomeKind

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

log = logging.getLogger("hypic.vllm")
if not log.handlers:  # vLLM's own loggers do not propagate to the root logger
    _h = logging.StreamHandler()
    _h.setFormatter(logging.Formatter("%(levelname)s %(asctime)s [hypic.vllm] %(message)s", "%m-%d %H:%M:%S"))
    log.addHandler(_h)
    log.setLevel(logging.INFO)
    log.propagate = False

# The vLLM releases whose cache layouts this module was checked against (make e2e).
KNOWN_VLLM = ("0.32.0",)
# Text model types whose linear layers are Gated DeltaNet with this state layout.
KNOWN_MODELS = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# The worker side's last loads, for a benchmark in vLLM's process
# (VLLM_ENABLE_V1_MULTIPROCESSING=0): (request id, tokens, Prefill ms, write ms), the
# write being the part of vLLM's step the load takes.
LOAD_TIMES: collections.deque[tuple[str, int, float, float]] = collections.deque(maxlen=1024)


def _layer_index(name: str) -> int:
    m = _LAYER.search(name)
    if not m:
        raise ValueError(f"HypicConnector: cannot tell the layer index of vLLM layer '{name}'")
    return int(m.group(1))


@dataclass
class _Load:
    """A claimed request, as the worker needs it."""

    req_id: str
    tokens: list[int]  # the prompt's first `end` tokens
    counts: tuple[int, ...]
    end: int
    start: int  # tokens vLLM had already (its own prefix cache): K/V written from here
    block_ids: list[list[int]]  # per KV cache group
    hits: tuple[bool, ...]  # per used segment, as the Lookup answered
    dump: str = ""


@dataclass
class _Dump:
    req_id: str
    name: str
    tokens: int
    block_ids: list[list[int]]


@dataclass
class HypicMeta(KVConnectorMetadata):
    loads: list[_Load] = field(default_factory=list)
    dumps: list[_Dump] = field(default_factory=list)
    idle: bool = False  # the step computes nothing (every request waits, on a load or else)


@dataclass
class _Claim:
    plan: vllm_plan.Plan
    hits: tuple[bool, ...]
    start: int


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ValueError(f"HypicConnector: kv_connector_extra_config.{what}: {path}: {e.strerror}") from e


def _client(extra: dict[str, Any], timeout: float | None = None) -> Client:
    for k in ("address", "model"):
        if not extra.get(k):
            raise ValueError(f"HypicConnector: kv_connector_extra_config.{k} is required")
    return Client(
        extra["address"],
        token=extra.get("token") or None,
        tls_root_pem=_read(extra["tls_root"], "tls_root") if extra.get("tls_root") else None,
        tls_server_name=extra.get("tls_server_name") or None,
        tls_cert_pem=_read(extra["tls_cert"], "tls_cert") if extra.get("tls_cert") else None,
        tls_key_pem=_read(extra["tls_key"], "tls_key") if extra.get("tls_key") else None,
        timeout=timeout if timeout is not None else float(extra.get("timeout_s", 30.0)),
    )


@dataclass(frozen=True)
class _Shapes:
    """What each layer's cache must look like for this model (from its config)."""

    kernel: int
    conv_dim: int
    hv: int
    dk: int
    dv: int
    hkv: int
    head_dim: int


def _shapes(vllm_config: VllmConfig) -> _Shapes:
    c = vllm_config.model_config.hf_text_config
    mt = getattr(c, "model_type", "")
    if mt not in KNOWN_MODELS:
        raise ValueError(
            f"HypicConnector: model_type '{mt}' is not one whose cache layout this connector knows "
            f"({', '.join(KNOWN_MODELS)})"
        )
    hk, hv = c.linear_num_key_heads, c.linear_num_value_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    return _Shapes(
        kernel=c.linear_conv_kernel_dim,
        conv_dim=2 * hk * dk + hv * dv,
        hv=hv,
        dk=dk,
        dv=dv,
        hkv=c.num_key_value_heads,
        head_dim=getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads,
    )


def _guard(vllm_config: VllmConfig, kv_cache_config: KVCacheConfig | None) -> _Shapes:
    """Refuses (ValueError) what this connector was not checked against."""
    if vllm.__version__ not in KNOWN_VLLM:
        raise ValueError(
            f"HypicConnector: vLLM {vllm.__version__} is not a version whose cache layout this "
            f"connector was checked against ({', '.join(KNOWN_VLLM)})"
        )
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        raise ValueError(
            "HypicConnector: only vLLM's CPU backend's cache layout is known to this version "
            f"(this platform: {current_platform.device_name}); see docs/frontends.md"
        )
    pc = vllm_config.parallel_config
    if pc.tensor_parallel_size != 1 or pc.pipeline_parallel_size != 1:
        raise ValueError("HypicConnector: tensor and pipeline parallel size must be 1")
    from vllm.model_executor.layers.mamba.mamba_utils import is_conv_state_dim_first

    if is_conv_state_dim_first():
        raise ValueError(
            "HypicConnector: the conv state layout is DS (VLLM_SSM_CONV_STATE_LAYOUT); "
            "this connector writes the SD layout ([kernel-1][conv_dim]) only"
        )
    sh = _shapes(vllm_config)
    if sh.dk != sh.dv:
        raise ValueError(f"HypicConnector: linear key head dim {sh.dk} != value head dim {sh.dv}")
    if kv_cache_config is None:
        return sh
    for gi, g in enumerate(kv_cache_config.kv_cache_groups):
        s = g.kv_cache_spec
        where = f"KV cache group {gi} ({', '.join(g.layer_names)})"
        if isinstance(s, MambaSpec):
            want = ((sh.kernel - 1, sh.conv_dim), (sh.hv, sh.dv, sh.dk))
            got = tuple(tuple(x) for x in s.shapes)
            if got != want:
                raise ValueError(f"HypicConnector: {where}: state shapes {got}, expected {want}")
            if s.dtypes[0] != torch.bfloat16 or s.dtypes[1] not in (torch.float32, torch.bfloat16):
                raise ValueError(
                    f"HypicConnector: {where}: state dtypes {s.dtypes}, expected (bfloat16, float32 or bfloat16)"
                )
            if s.num_speculative_blocks:
                raise ValueError(f"HypicConnector: {where}: speculative decoding is not supported")
        elif isinstance(s, AttentionSpec):
            if type(s).__name__ != "FullAttentionSpec" or getattr(s, "sliding_window", None):
                raise ValueError(f"HypicConnector: {where}: {type(s).__name__} is not full attention")
            if (s.num_kv_heads, s.head_size) != (sh.hkv, sh.head_dim) or s.dtype != torch.bfloat16:
                raise ValueError(
                    f"HypicConnector: {where}: {s.num_kv_heads} kv heads x {s.head_size} in {s.dtype}, "
                    f"expected {sh.hkv} x {sh.head_dim} in torch.bfloat16 (--kv-cache-dtype auto, "
                    "--dtype bfloat16)"
                )
        else:
            raise ValueError(f"HypicConnector: {where}: a {type(s).__name__} is not a cache this connector fills")
    return sh


class HypicConnector(KVConnectorBase_V1, SupportsHMA):
    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig):
        super().__init__(vllm_config, role, kv_cache_config)
        self.extra = dict(self._kv_transfer_config.kv_connector_extra_config or {})
        self.shapes = _guard(vllm_config, kv_cache_config)
        self.model = str(self.extra.get("model", ""))
        # the scheduler's Lookup holds up vLLM's whole scheduling step: a short deadline
        self.client = _client(
            self.extra, float(self.extra.get("lookup_timeout_s", 2.0)) if role == KVConnectorRole.SCHEDULER else None
        )
        cc = vllm_config.cache_config
        self.block_size = cc.block_size
        self.align = cc.mamba_cache_mode == "align"
        self.prefix_caching = bool(cc.enable_prefix_caching)
        self.groups = list(kv_cache_config.kv_cache_groups) if kv_cache_config else []
        self.dump_dir = str(self.extra.get("dump_dir", ""))
        if role == KVConnectorRole.SCHEDULER:
            if self._kv_transfer_config.kv_load_failure_policy != "recompute":
                # a failed load must be recomputed by vLLM, never answered with an error
                self._kv_transfer_config.kv_load_failure_policy = "recompute"
                log.info("kv_load_failure_policy set to 'recompute': a failed load is computed by vLLM")
            self.lease_ms = int(self.extra.get("lease_ms", 5000))
            self.warm_misses = bool(self.extra.get("warm_misses", True))
            self._claims: dict[str, _Claim] = {}
            self._declined: dict[str, str] = {}  # req_id -> why (returned with the request)
            self._failed: set[str] = set()
            self._to_warm: dict[str, tuple[int, ...]] = {}  # req_id -> its segments' counts
            self._pending: list[_Load] = []
            self._dumps: dict[str, tuple[str, int]] = {}  # req_id -> (dump name, prompt tokens)
            self._warm_q: queue.Queue[list[list[int]]] = queue.Queue(maxsize=64)
            self._warmer: threading.Thread | None = None
            # after a Lookup that found no daemon, none is tried for this long: requests
            # are left to vLLM at once instead of each waiting out a dial
            self.retry_after_s = float(self.extra.get("retry_after_s", 5.0))
            self._down: tuple[float, str] | None = None  # (when, why)
        else:
            self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="hypic-load")
            self._inflight: dict[str, tuple[_Load, concurrent.futures.Future[Any]]] = {}
            self._done: set[str] = set()
            self._failed_w: set[str] = set()
            self._session: Any = None
            self._layers: dict[str, Any] | None = None
        log.info(
            "HypicConnector (%s) for model '%s' at %s: block size %d, mamba cache mode %s, prefix caching %s",
            "scheduler" if role == KVConnectorRole.SCHEDULER else "worker",
            self.model,
            self.extra.get("address"),
            self.block_size,
            cc.mamba_cache_mode,
            "on" if self.prefix_caching else "off",
        )

    @property
    def requires_kv_delivery(self) -> bool:
        return False  # a best-effort cache: nothing is handed off

    # ---- scheduler side -----------------------------------------------------------------

    def _decline(self, request: Request, why: str, warn: bool = False) -> tuple[int, bool]:
        if request.request_id not in self._declined:
            (log.warning if warn else log.debug)("request %s left to vLLM: %s", request.request_id, why)
        self._declined[request.request_id] = why
        return 0, False

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        rid = request.request_id
        params = request.kv_transfer_params or {}
        if "hypic_dump" in params and self.dump_dir:
            self._dumps[rid] = (str(params["hypic_dump"]), len(request.prompt_token_ids or []))
        if "hypic_segments" not in params:
            return 0, False
        if rid in self._failed:  # its load failed: vLLM computes it (asked again after the failure)
            self._claims.pop(rid, None)
            return 0, False
        c = self._claims.get(rid)
        if c is None:
            if rid in self._declined:
                return 0, False
            prompt = request.prompt_token_ids or []
            try:
                counts = vllm_plan.parse_segments(params["hypic_segments"], len(prompt))
            except vllm_plan.PlanError as e:
                return self._decline(request, str(e), warn=True)
            p = vllm_plan.plan(counts, len(prompt))
            if p is None:
                return self._decline(request, "no whole segment before the prompt's last token")
            if p.end <= num_computed_tokens:
                return self._decline(request, f"vLLM's own prefix cache has {num_computed_tokens} tokens")
            segs, _ = p.split(prompt)
            if self._down is not None:
                ago = time.monotonic() - self._down[0]
                if ago < self.retry_after_s:
                    return self._decline(
                        request, f"the daemon was unavailable {ago:.1f} s ago ({self._down[1]}); tried again after "
                        f"{self.retry_after_s:g} s"
                    )
                self._down = None
            try:
                lr = self.client.lookup(self.model, segs, lease_ms=self.lease_ms)
            except HypicError as e:
                if e.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                    self._down = (time.monotonic(), e.code)
                return self._decline(request, f"Lookup failed: {e}", warn=True)
            hits = tuple(bool(s.hit) for s in lr.segments)
            if len(hits) != len(segs):
                return self._decline(request, f"Lookup answered {len(hits)} segments for {len(segs)}", warn=True)
            if not any(hits):
                self._declined[rid] = "no segment is cached (warmed after the request)"
                if self.warm_misses:
                    self._to_warm[rid] = counts
                return 0, False
            c = _Claim(plan=p, hits=hits, start=num_computed_tokens)
            self._claims[rid] = c
            log.info(
                "request %s: claiming %d tokens (%d of %d segments hit, %d tokens from vLLM's cache)",
                rid,
                p.end - num_computed_tokens,
                sum(hits),
                len(hits),
                num_computed_tokens,
            )
        return c.plan.end - num_computed_tokens, True

    def get_loaded_kv_cache_group_ids(self, request: Request) -> tuple[int, ...]:
        """None: vLLM zeroes every new block before the load writes into it. The load
        writes the claimed tokens only, and the rest of the last block must not hold
        what the memory held before (the CPU attention kernel reads whole tiles: stale
        NaNs there made the 13th decoded token NaN)."""
        return ()

    def on_new_request(self, request: Request) -> None:
        """A request with segments is keyed apart in vLLM's prefix cache from the start,
        before vLLM looks its blocks up: whatever it computes may rest on a composed state,
        so its blocks must never answer a plain request (or one of other segments), while a
        request of the same segments shares them. vLLM mixes cache_salt into the first
        block's hash; the request's hashes are made anew with the salt."""
        if not self.prefix_caching:
            return
        params = request.kv_transfer_params or {}
        if "hypic_segments" not in params:
            return
        prompt = request.prompt_token_ids or []
        try:
            p = vllm_plan.plan(vllm_plan.parse_segments(params["hypic_segments"], len(prompt)), len(prompt))
        except vllm_plan.PlanError:
            return  # left to vLLM as it is (get_num_new_matched_tokens says why)
        if p is None:
            return
        request.cache_salt = vllm_plan.cache_salt(self.model, p, None, request.cache_salt)
        request.block_hashes = []
        request.update_block_hashes()

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        if num_external_tokens <= 0:
            return
        c = self._claims.get(request.request_id)
        if c is None:
            return
        p = c.plan
        self._pending.append(
            _Load(
                req_id=request.request_id,
                tokens=list(request.prompt_token_ids[: p.end]),
                counts=p.counts,
                end=p.end,
                start=c.start,
                block_ids=[list(x) for x in blocks.get_block_ids()],
                hits=c.hits,
                dump=self._dumps.get(request.request_id, ("", 0))[0],
            )
        )

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        m = HypicMeta(loads=self._pending, idle=scheduler_output.total_num_scheduled_tokens == 0)
        self._pending = []
        if self._dumps:  # requests vLLM computes whose prefill ends in this step
            so = scheduler_output
            steps = [(r.req_id, r.num_computed_tokens, r.block_ids) for r in so.scheduled_new_reqs]
            cr = so.scheduled_cached_reqs
            bs = so.kv_connector_block_state
            for i, rid in enumerate(cr.req_ids):
                if rid in self._dumps and bs is not None:
                    steps.append((rid, cr.num_computed_tokens[i], bs.get_block_ids(rid)))
            for rid, nc, ids in steps:
                if rid not in self._dumps or rid in self._claims or ids is None:
                    continue
                name, plen = self._dumps[rid]
                if nc + so.num_scheduled_tokens.get(rid, 0) == plen:
                    m.dumps.append(_Dump(rid, name, plen, [list(x) for x in ids]))
        return m

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        for rid in connector_output.failed_recving or ():
            self._failed.add(rid)

    def request_finished_all_groups(self, request: Request, block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        rid = request.request_id
        self._dumps.pop(rid, None)
        c = self._claims.pop(rid, None)
        failed = rid in self._failed
        self._failed.discard(rid)
        why = self._declined.pop(rid, None)
        counts = self._to_warm.pop(rid, None)
        params = request.kv_transfer_params or {}
        if "hypic_segments" not in params:
            return False, None
        if c is not None and not failed:
            out = {"claimed_tokens": c.plan.end - c.start, "segments_used": c.plan.used, "hits": sum(c.hits)}
        elif failed:
            out = {"claimed_tokens": 0, "declined": "the load failed: vLLM computed the request"}
        else:
            out = {"claimed_tokens": 0, "declined": why or "not claimed"}
            if counts is not None:
                self._warm_later(request, counts)
        return False, {"hypic": out}

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self.request_finished_all_groups(request, (block_ids,))

    def _warm_later(self, request: Request, counts: tuple[int, ...]) -> None:
        segs, _ = vllm_plan.Plan(end=sum(counts), counts=counts).split(request.prompt_token_ids)
        try:
            self._warm_q.put_nowait(segs)
        except queue.Full:
            log.warning("warm queue full: the segments of request %s are not warmed", request.request_id)
            return
        if self._warmer is None:
            self._warmer = threading.Thread(target=self._warm_loop, name="hypic-warm", daemon=True)
            self._warmer.start()

    def _warm_loop(self) -> None:
        client = _client(self.extra)  # the warm's own deadline (timeout_s), not the Lookup's
        while True:
            segs = self._warm_q.get()
            try:
                for _ in client.warm(self.model, segs):
                    pass
            except HypicError as e:
                log.warning("Warm of %d segments failed: %s", len(segs), e)

    # ---- worker side --------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        pass  # the typed views are taken from the forward context (_typed_layers)

    def _typed_layers(self) -> dict[str, Any]:
        """vLLM layer name -> the layer object, whose kv_cache is the typed cache."""
        if self._layers is None:
            ctx = self._vllm_config.compilation_config.static_forward_context
            names = [n for g in self.groups for n in g.layer_names]
            missing = [n for n in names if n not in ctx]
            if missing:
                raise ValueError(f"HypicConnector: layers {missing} are not in vLLM's forward context")
            self._layers = {n: ctx[n] for n in names}
        return self._layers

    def _group_of(self) -> dict[str, int]:
        return {n: gi for gi, g in enumerate(self.groups) for n in g.layer_names}

    def _drop_session(self) -> None:
        if self._session is not None:
            try:
                self._session.close()
            except HypicError:
                pass
            self._session = None

    def _ensure_session(self, need: int) -> Any:
        if self._session is not None and (self._session.closed or self._session.capacity < need):
            self._drop_session()
        if self._session is None:
            cap = max(need, 64 << 20)
            self._session = self.client.session(("shm", "tcp"), cap)
        return self._session

    def _state_bytes(self, tokens: int) -> int:
        s = self.shapes
        lin = att = 0
        for g in self.groups:
            for _ in g.layer_names:
                if isinstance(g.kv_cache_spec, MambaSpec):
                    lin += ((s.kernel - 1) * s.conv_dim + s.hv * s.dk * s.dv) * 4 + 512
                else:
                    att += 2 * tokens * s.hkv * s.head_dim * 4 + 512
        return lin + att + (1 << 20)

    def _fetch(self, ld: _Load) -> tuple[dict[int, dict[str, np.ndarray]], float]:
        """On the load thread: Prefill into the session; answers each layer's tensors (copies:
        the session's buffer is reused by the next load) and the call's seconds."""
        t0 = time.perf_counter()
        segs, query = vllm_plan.Plan(ld.end, ld.counts).split(ld.tokens)
        need = self._state_bytes(ld.end)
        try:
            r, st = self.client.prefill_state(self._ensure_session(need), self.model, segs, query, mode="pic")
        except HypicError as e:
            if "transport_session" not in str(e):
                raise
            # the daemon no longer has the session (it restarted, or the session's
            # connection broke): once more on a new one
            self._drop_session()
            r, st = self.client.prefill_state(self._ensure_session(need), self.model, segs, query, mode="pic")
        for i, (o, hit) in enumerate(zip(r.segments, ld.hits)):
            if hit and o.kind != OutcomeKind.HIT:
                raise RuntimeError(f"segment {i}'s entry was evicted between the claim and the load")
        if st.position != ld.end:
            raise RuntimeError(f"the daemon delivered the state after {st.position} tokens, not {ld.end}")
        layers = {i: {k: np.array(a, copy=True) for k, a in st.layer(i).items()} for i in range(st.num_layers)}
        if not st.valid:
            raise RuntimeError("the transport session was overwritten while the state was read")
        return layers, time.perf_counter() - t0

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, HypicMeta)
        for ld in meta.loads:
            self._inflight[ld.req_id] = (ld, self._pool.submit(self._fetch, ld))

    def wait_for_layer_load(self, layer_name: str) -> None:
        pass  # whole requests are loaded before they run (asynchronous loads)

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        pass  # entries are built by the daemon (Warm, Prefill), not captured from vLLM

    def wait_for_save(self) -> None:
        meta = self._get_connector_metadata()
        if isinstance(meta, HypicMeta) and meta.dumps:
            for d in meta.dumps:
                self._dump(d.name + ".computed", d.tokens, d.block_ids, 0)

    def _slot(self, ids: list[int], end: int) -> list[int]:
        """The state slots of a linear layer's group that must hold the state after `end`
        tokens: the request's one slot, or in align mode the block for position end-1
        and the running block vLLM continues from."""
        if not self.align:
            return [ids[0]]
        slots = {ids[(end - 1) // self.block_size]}
        live = [b for b in ids if b]
        if live:
            slots.add(live[-1])
        return sorted(slots)

    def _write(self, ld: _Load, layers: dict[int, dict[str, np.ndarray]]) -> None:
        """The state into the request's blocks (the main thread, between steps)."""
        from vllm import _custom_ops as ops

        s = self.shapes
        gof = self._group_of()
        for name, layer in self._typed_layers().items():
            li = _layer_index(name)
            got = layers.get(li, {})
            ids = ld.block_ids[gof[name]]
            kv = layer.kv_cache
            if isinstance(kv, (list, tuple)):
                conv, S = got.get("conv"), got.get("S")
                if conv is None or S is None:
                    raise RuntimeError(f"layer {li} ({name}): the daemon delivered no linear state")
                if conv.shape != (s.kernel - 1, s.conv_dim) or S.shape != (s.hv, s.dk, s.dv):
                    raise RuntimeError(
                        f"layer {li} ({name}): the daemon's state is conv {conv.shape}, S {S.shape}; vLLM's is "
                        f"conv {(s.kernel - 1, s.conv_dim)}, S {(s.hv, s.dk, s.dv)}"
                    )
                c_t = torch.from_numpy(conv).to(kv[0].dtype)
                # vLLM's CPU GDN kernels read a slot as [Hv][dk][dv] (the daemon's order)
                s_t = torch.from_numpy(S).to(kv[1].dtype).reshape(-1)
                for b in self._slot(ids, ld.end):
                    kv[0][b].copy_(c_t)
                    kv[1][b].view(-1).copy_(s_t)
            else:
                K, V = got.get("K"), got.get("V")
                if K is None or V is None:
                    raise RuntimeError(f"layer {li} ({name}): the daemon delivered no K/V")
                if K.shape != (ld.end, s.hkv, s.head_dim) or V.shape != K.shape:
                    raise RuntimeError(
                        f"layer {li} ({name}): the daemon's K/V are {K.shape}; vLLM's layer wants "
                        f"{(ld.end, s.hkv, s.head_dim)}"
                    )
                pos = np.arange(ld.start, ld.end)
                blocks = np.asarray(ids, dtype=np.int64)[pos // self.block_size]
                slots = torch.from_numpy(blocks * self.block_size + pos % self.block_size)
                nb, h, bs, _ = kv.shape
                kc, vc = kv.view(nb, h, 2 * bs, -1).chunk(2, dim=2)
                ops.cpu_attn_reshape_and_cache(
                    torch.from_numpy(np.ascontiguousarray(K[ld.start :])).to(kv.dtype),
                    torch.from_numpy(np.ascontiguousarray(V[ld.start :])).to(kv.dtype),
                    kc,
                    vc,
                    slots,
                    layer.isa,
                )

    def _dump(self, name: str, tokens: int, block_ids: list[list[int]], start: int) -> None:
        """Diagnostics: the request's state as vLLM's cache holds it, read back (npz):
        L{i}.conv, L{i}.S ([Hv][dk][dv]) and L{i}.K, L{i}.V ([tokens][Hkv][head_dim]),
        widened to float32; dtype.conv and dtype.S name what the cache keeps them in
        ("bfloat16", or "float32" for S where vLLM keeps it so), K and V being bfloat16."""
        s = self.shapes
        out: dict[str, np.ndarray] = {}
        gof = self._group_of()
        for lname, layer in self._typed_layers().items():
            li = _layer_index(lname)
            ids = block_ids[gof[lname]]
            kv = layer.kv_cache
            if isinstance(kv, (list, tuple)):
                b = self._slot(ids, tokens)[-1]
                out[f"L{li}.conv"] = kv[0][b].float().numpy().copy()
                out[f"L{li}.S"] = kv[1][b].float().reshape(s.hv, s.dk, s.dv).numpy().copy()
                out["dtype.conv"] = np.array(str(kv[0].dtype).removeprefix("torch."))
                out["dtype.S"] = np.array(str(kv[1].dtype).removeprefix("torch."))
            else:
                if getattr(layer, "isa", "vec") != "vec":
                    log.warning("dump: attention layout '%s' cannot be read back; layer %d left out", layer.isa, li)
                    continue
                ks, vs = [], []
                for j in range((tokens + self.block_size - 1) // self.block_size):
                    k, v = vllm_plan.read_vec_kv(kv[ids[j]].float().numpy(), self.block_size, s.head_dim)
                    ks.append(k)
                    vs.append(v)
                out[f"L{li}.K"] = np.concatenate(ks)[:tokens]
                out[f"L{li}.V"] = np.concatenate(vs)[:tokens]
        path = os.path.join(self.dump_dir, name + ".npz")
        np.savez(path, tokens=np.int64(tokens), **out)
        log.info("dump: %s (%d tokens)", path, tokens)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        meta = self._get_connector_metadata() if self.has_connector_metadata() else None
        if self._inflight and isinstance(meta, HypicMeta) and meta.idle:
            # nothing else to compute: wait a little for a load rather than return at once,
            # or vLLM steps again at once, idle, and takes a core from the daemon's Prefill
            # (the load took 1.9 s inside vLLM against 0.83 s alone on 2 cores)
            concurrent.futures.wait(
                [f for _, f in self._inflight.values()], timeout=0.02, return_when=concurrent.futures.FIRST_COMPLETED
            )
        for rid, (ld, fut) in list(self._inflight.items()):
            if not fut.done():
                continue
            del self._inflight[rid]
            t0 = time.perf_counter()
            try:
                layers, fetch_s = fut.result()
                self._write(ld, layers)
            except (HypicError, RuntimeError, ValueError, OSError) as e:
                log.warning("request %s: the load failed, vLLM computes it: %s", rid, e)
                self._failed_w.add(rid)
            else:
                write_s = time.perf_counter() - t0
                LOAD_TIMES.append((rid, ld.end, fetch_s * 1e3, write_s * 1e3))
                log.info(
                    "request %s: state after %d tokens loaded (Prefill %.1f ms, written in %.1f ms)",
                    rid,
                    ld.end,
                    fetch_s * 1e3,
                    write_s * 1e3,
                )
                if ld.dump and self.dump_dir:
                    self._dump(ld.dump + ".loaded", ld.end, ld.block_ids, ld.start)
            self._done.add(rid)
        done, self._done = self._done, set()
        return None, (done or None)

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        _, done = self.get_finished(finished_req_ids)
        failed, self._failed_w = self._failed_w, set()
        return KVConnectorTransferResults(finished_recving=set(done or ()), failed_recving=failed)

    def shutdown(self) -> None:
        if self._role != KVConnectorRole.SCHEDULER:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._drop_session()
        self.client.close()
