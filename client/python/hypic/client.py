"""Client: one blocking method per RPC of hypic.v1.Cache (rpc/hypic.proto).

The Python counterpart of libhypic-client (client/include/hypic_client.h): a channel to
hypic-cached with the tenant's bearer token and a per-call deadline; each method builds
its request from Python arguments (hypic.types), makes the call and answers the
response message, or raises HypicError with gRPC's status name and the server's
message. The proto's comments are the contract and docs/api.md documents every field,
limit and status; the methods only say how their arguments map.

How a method is called is read from the service's descriptor, not written per method:
`call(name, request)` sends any RPC the generated stubs know, with the token and the
deadline, as unary, server stream (an iterator) or client stream (an iterator of
requests in) by the method's own shape. A typed method is a few lines over it, so an
RPC the proto gains is callable at once and wrapped when someone needs its arguments
spelt out.

Streams: warm and watch return iterators; leaving one early (break, close, garbage)
cancels the call, as a non-zero return from the C callbacks does. Errors of a stream
are raised where the iteration reaches them.

Threads: one Client may be used by several threads at once (a gRPC channel is
thread-safe); close it (or use `with`) when done.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from typing import Any, cast

import grpc

from ._gen import hypic_pb2 as pb
from ._gen import hypic_pb2_grpc as pb_grpc
from .errors import HypicError, client_error
from .state import State, state_views
from .transport import DEFAULT_CAPACITY, Session, offers_of, open_session
from .types import (
    Entry,
    Mode,
    SegmentLike,
    Sort,
    StateDtype,
    Tier,
    TokenIds,
    Transport,
    to_enum,
    to_ids,
    to_key,
    to_segments,
    wire,
)

DEFAULT_TARGET = "127.0.0.1:7878"
MAX_MESSAGE = 64 << 20  # bytes per message each way, the daemon's default limits.max_message
META_ROOM = 64 << 10  # what PutEntry's first chunk keeps for the metadata (as the C client)
_SERVICE = pb.DESCRIPTOR.services_by_name["Cache"]

# Each RPC of hypic.v1.Cache that has a typed method, and that method. Any RPC of the
# generated stubs works through call() at once; wrapping a new one is a method below
# and a row here (tests/test_client.py checks the rows against the proto and Client).
METHODS: dict[str, str] = {
    "Lookup": "lookup",
    "Warm": "warm",
    "Prefill": "prefill",
    "GetEntry": "get_entry",
    "PutEntry": "put_entry",
    "Invalidate": "invalidate",
    "List": "list",
    "Inspect": "inspect",
    "Watch": "watch",
    "Stats": "stats",
    "GetPolicy": "get_policy",
    "SetPolicy": "set_policy",
    "Health": "health",
    "OpenTransport": "open_transport",
    "CloseTransport": "close_transport",
    "Build": "build",
    "Pin": "pin",
    "Unpin": "unpin",
}
_DEFAULT: Any = object()  # "the client's timeout" (None means no deadline)


class Client:
    """A connection to hypic-cached.

    target: "host:port" of its gRPC listener. token: the tenant's bearer token (None or
    "": send none, for a daemon with no tokens configured). tls_root_pem: the PEM
    certificate(s) of the CA the server's certificate chains to (bytes or str): TLS;
    None: plaintext (unless tls_server_name is set: TLS with the system's CAs).
    tls_server_name: the name the server's certificate must carry instead of target's
    host. timeout: seconds per call (None: no deadline). tls_cert_pem, tls_key_pem: this
    client's certificate chain and private key (PEM, both or neither), for a daemon with
    tls.client_ca (mutual TLS). Nothing is sent until the first call, so a server that is
    not there shows as UNAVAILABLE on that call, after it was tried again for up to 1 s
    (a call whose connection could not be made never reached the server, and is made again
    on a fresh connection: one failed dial costs a pause, not an error).
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        token: str | None = None,
        tls_root_pem: bytes | str | None = None,
        tls_server_name: str | None = None,
        timeout: float | None = 30.0,
        *,
        max_message: int = MAX_MESSAGE,
        tls_cert_pem: bytes | str | None = None,
        tls_key_pem: bytes | str | None = None,
    ) -> None:
        if not target:
            raise client_error("target is empty")
        if (tls_cert_pem is None) != (tls_key_pem is None):
            raise client_error("tls_cert_pem and tls_key_pem go together (both or neither)")
        if tls_cert_pem is not None and tls_root_pem is None and not tls_server_name:
            raise client_error("a client certificate needs TLS (tls_root_pem)")
        self.target = target
        self.timeout = timeout
        self.max_message = max_message
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", max_message),
            ("grpc.max_send_message_length", max_message),
            # A connection of this client's own (gRPC would share one among a process's
            # channels to the target), so that a channel made anew after a failed dial
            # dials anew (_redial); one connection attempt may take 5 s, not gRPC's 20.
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.min_reconnect_backoff_ms", _CONNECT_TIMEOUT_MS),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ]
        if tls_root_pem is not None or tls_server_name:
            roots = None
            if tls_root_pem is not None:
                roots = tls_root_pem.encode() if isinstance(tls_root_pem, str) else bytes(tls_root_pem)
                if b"-----BEGIN CERTIFICATE-----" not in roots:
                    raise client_error("tls_root_pem holds no PEM certificate")
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            mine = [p.encode() if isinstance(p, str) else p for p in (tls_key_pem, tls_cert_pem)]
            for what, pem in zip(("tls_key_pem", "tls_cert_pem"), mine):
                if pem is not None and b"-----BEGIN " not in pem:
                    raise client_error(f"{what} holds no PEM block")
            creds = grpc.ssl_channel_credentials(
                root_certificates=roots, private_key=mine[0], certificate_chain=mine[1]
            )
            self._new_channel = lambda: grpc.secure_channel(target, creds, options)
        else:
            self._new_channel = lambda: grpc.insecure_channel(target, options)
        self._lock = threading.Lock()
        self._channel = self._new_channel()
        self._stub = pb_grpc.CacheStub(self._channel)

    def _redial(self, stub: Any) -> None:
        """Replaces the channel whose dial failed (stub its) with a fresh one. gRPC keeps a
        channel whose connection failed in TRANSIENT_FAILURE until a later attempt succeeds,
        failing every call at once with the old failure meanwhile (its backoff, 1-2 s; the
        whole connect timeout when the next attempt hangs); a fresh channel dials at once.
        The old one has no live connection, so nothing in flight on it is lost."""
        with self._lock:
            if self._stub is not stub:  # another thread did it
                return
            old = self._channel
            self._channel = self._new_channel()
            self._stub = pb_grpc.CacheStub(self._channel)
        old.close()

    def _retrying(self, attempt: Callable[[Any, float | None], Any], t: float | None) -> Any:
        """attempt(stub, timeout) again on a fresh channel while it fails because its
        connection could not be made (the call never left this process): after 50, 100,
        200, 400 ms, within _DIAL_RETRY_S of the start and within the timeout t. One
        failed dial (refused while the server starts, reset under load) costs a pause,
        not an error; a server that is not there is reported within that time."""
        t0 = time.monotonic()
        pause = 0.05
        while True:
            stub = self._stub
            left = None if t is None else t - (time.monotonic() - t0)
            try:
                return attempt(stub, left)
            except HypicError as e:
                after = time.monotonic() - t0 + pause
                if not _dial_failed(e) or after > _DIAL_RETRY_S or (t is not None and after >= t):
                    raise
            self._redial(stub)
            time.sleep(pause)
            pause *= 2

    def close(self) -> None:
        """Closes the channel; calls in flight end CANCELLED."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- any method -----------------------------------------------------------------

    def call(self, method: str, request: Any, *, timeout: float | None = _DEFAULT) -> Any:
        """Calls the RPC `method` ("Lookup", ...) of hypic.v1.Cache with a request message
        (an iterator of them for a client stream). Answers the response, or an iterator
        over a server stream's messages. timeout: seconds (None: none; default: the
        client's); for a stream it bounds the whole stream."""
        m = _SERVICE.methods_by_name.get(method)
        if m is None:
            raise client_error(f"no method '{method}' in hypic.v1.Cache")
        t = self.timeout if timeout is _DEFAULT else timeout
        if m.client_streaming:  # the requests are an iterator: one try
            fn = getattr(self._stub, method)
            if m.server_streaming:
                return _iterate(fn(request, timeout=t, metadata=self._metadata))
            try:
                return fn(request, timeout=t, metadata=self._metadata)
            except grpc.RpcError as e:
                raise HypicError.from_rpc(e) from None
        if m.server_streaming:
            return self._stream(method, request, t)

        def unary(stub: Any, left: float | None) -> Any:
            try:
                return getattr(stub, method)(request, timeout=left, metadata=self._metadata)
            except grpc.RpcError as e:
                raise HypicError.from_rpc(e) from None

        return self._retrying(unary, t)

    def _stream(self, method: str, request: Any, t: float | None) -> Iterator[Any]:
        """A server stream, started now (a Watch sees what happens from here on); when it
        ends before its first message because its dial failed, it is made again under
        _retrying for what is left of t."""
        t0 = time.monotonic()
        stub = self._stub
        call = getattr(stub, method)(request, timeout=t, metadata=self._metadata)

        def first(stub: Any, left: float | None) -> tuple[Iterator[Any], list[Any]]:
            it = _iterate(getattr(stub, method)(request, timeout=left, metadata=self._metadata))
            return it, list(itertools.islice(it, 1))

        def messages() -> Iterator[Any]:
            it = _iterate(call)
            try:
                head = list(itertools.islice(it, 1))
            except HypicError as e:
                if not _dial_failed(e):
                    raise
                self._redial(stub)
                left = None if t is None else t - (time.monotonic() - t0)
                it, head = self._retrying(first, left)
            yield from head
            yield from it

        return messages()

    # ---- Lookup, Warm, Prefill --------------------------------------------------------

    def lookup(
        self,
        model: str,
        segments: Sequence[SegmentLike],
        *,
        seam: int | None = None,
        dtype: StateDtype | int | str | None = None,
        lease_ms: int = 0,
        tenant: str = "",
    ) -> pb.LookupResponse:
        """Which segments are cached, in request order, and how many leading ones hit.
        seam: W the entries were built with (None: the server's). lease_ms > 0 leases
        every hit for that long."""
        rq = pb.LookupRequest(
            model=model,
            segments=to_segments(segments),
            dtype=wire(to_enum(StateDtype, dtype, "dtype", StateDtype.UNSPECIFIED)),
            lease_ms=lease_ms,
            tenant=tenant,
        )
        if seam is not None:
            rq.seam = seam
        return cast(pb.LookupResponse, self.call("Lookup", rq))

    def warm(
        self,
        model: str,
        segments: Sequence[SegmentLike],
        *,
        seam: int | None = None,
        dtype: StateDtype | int | str | None = None,
        tenant: str = "",
    ) -> Iterator[pb.WarmProgress]:
        """Builds and stores each segment's entry (segments by tokens or text: a key
        alone cannot be built); yields a WarmProgress per segment as each is done.
        Iterate it to the end (list(...) when the progress is not wanted): an iterator
        left early cancels the call, and the server stops before its next segment."""
        rq = pb.WarmRequest(
            model=model,
            segments=to_segments(segments),
            dtype=wire(to_enum(StateDtype, dtype, "dtype", StateDtype.UNSPECIFIED)),
            tenant=tenant,
        )
        if seam is not None:
            rq.seam = seam
        return cast(Iterator[pb.WarmProgress], self.call("Warm", rq))

    def prefill(
        self,
        model: str,
        segments: Sequence[SegmentLike],
        query: TokenIds | str,
        *,
        mode: Mode | int | str | None = None,
        seam: int | None = None,
        top_k: int = 0,
        max_new_tokens: int = 0,
        dtype: StateDtype | int | str | None = None,
        tenant: str = "",
    ) -> pb.PrefillResponse:
        """Runs [segments..., query] with cache reuse. mode: "pic" (None: the server's
        default, pic), "full", "prefix", "noseam", "naive". Answers the first token's
        top_k candidates (0: the server's default), max_new_tokens greedy tokens, an
        outcome per segment and the timings (timings.ttft_ms)."""
        rq = _prefill_request(model, segments, query, mode, seam, top_k, max_new_tokens, dtype, tenant)
        return cast(pb.PrefillResponse, self.call("Prefill", rq))

    def prefill_state(
        self,
        session: Session,
        model: str,
        segments: Sequence[SegmentLike],
        query: TokenIds | str,
        *,
        state_offset: int = 0,
        mode: Mode | int | str | None = None,
        seam: int | None = None,
        top_k: int = 0,
        max_new_tokens: int = 0,
        dtype: StateDtype | int | str | None = None,
        tenant: str = "",
    ) -> tuple[pb.PrefillResponse, State]:
        """prefill, and the running state after [segments..., query] (before any greedy
        continuation) delivered into session's buffer at state_offset: answers the
        response and a State of numpy views of the buffer (hypic.state), once the reply is
        OK and the session has the transfer's completion. The State is valid until the
        session's next transfer. The daemon's refusals: a session that is not there (or
        closed) NOT_FOUND, a state that does not fit at the offset RESOURCE_EXHAUSTED."""
        rq = _prefill_request(model, segments, query, mode, seam, top_k, max_new_tokens, dtype, tenant)
        rq.return_state = True
        rq.transport_session = session.id
        rq.state_offset = state_offset
        gen = session.begin_transfer()
        r = cast(pb.PrefillResponse, self.call("Prefill", rq))
        if not r.HasField("state"):
            raise client_error("Prefill: the reply has no state delivery", "INTERNAL")
        session.wait(r.state.transfer, self._transfer_timeout())
        return r, state_views(session, r.state, gen)

    def _transfer_timeout(self) -> float:
        """How long a transfer's completion may lag its reply (the C client's: the call's
        deadline, else 10 s)."""
        return self.timeout if self.timeout else 10.0

    # ---- transport sessions -------------------------------------------------------------

    def open_transport(
        self,
        offers: Sequence[Transport | int | str | pb.TransportOffer],
        capacity: int = DEFAULT_CAPACITY,
        *,
        tenant: str = "",
    ) -> pb.OpenTransportResponse:
        """OpenTransport: offers best first, each a kind ("tcp", "shm", a Transport) with a
        buffer of capacity bytes, or a TransportOffer as it is. Answers the offer taken,
        the session id, its secret and how to attach; nothing is attached (session()
        does all of it)."""
        rq = pb.OpenTransportRequest(offers=offers_of(offers, capacity), tenant=tenant)
        return cast(pb.OpenTransportResponse, self.call("OpenTransport", rq))

    def close_transport(self, session: Session | int, *, tenant: str = "") -> None:
        """CloseTransport: ends the session (a Session or its id) on the daemon's side."""
        sid = session.id if isinstance(session, Session) else int(session)
        self.call("CloseTransport", pb.CloseTransportRequest(session=sid, tenant=tenant))

    def session(
        self,
        kinds: Sequence[Transport | int | str] | str = ("shm", "tcp"),
        capacity: int = DEFAULT_CAPACITY,
        *,
        tenant: str = "",
        cuda: object = None,
    ) -> Session:
        """A transport session with a buffer of capacity bytes, attached (hypic.transport):
        kinds best first, "shm" left out when the daemon is not on this host; RDMA is not
        available from Python. "cuda_ipc" delivers into GPU memory on the daemon's node:
        into `cuda` (a torch CUDA tensor of at least capacity bytes) or a uint8 tensor
        allocated on the current device; it is left out, saying why (passed_over), where
        torch or a GPU is missing. A context manager; close() ends it. INVALID_ARGUMENT
        "client: ..." for a kind that is not tcp, shm or cuda_ipc; UNAVAILABLE when the
        attach fails."""
        return open_session(self, kinds, capacity, tenant, cuda)

    def get_entry_into(
        self, session: Session, model: str, key: bytes, offset: int = 0, *, tenant: str = ""
    ) -> tuple[pb.EntryMeta, memoryview]:
        """get_entry through a session: the serialised entry is written into its buffer at
        offset; answers the metadata and a memoryview of those bytes in the buffer (valid
        until the session's next transfer). A key that is not cached is NOT_FOUND."""
        rq = pb.GetEntryRequest(
            model=model, key=to_key(key, "key"), tenant=tenant, transport_session=session.id, offset=offset
        )
        session.begin_transfer()
        replies = list(self.call("GetEntry", rq))
        if len(replies) != 1 or not replies[0].HasField("meta") or not replies[0].HasField("delivery"):
            raise client_error("GetEntry: no reply with meta and delivery", "INTERNAL")
        meta, d = replies[0].meta, replies[0].delivery
        session.wait(d.transfer, self._transfer_timeout())
        if d.bytes != meta.bytes or d.offset + d.bytes > session.capacity:
            raise client_error(
                f"GetEntry: {d.bytes} bytes delivered at {d.offset}, meta.bytes {meta.bytes}", "INTERNAL"
            )
        return meta, memoryview(session.buffer)[d.offset : d.offset + d.bytes]

    # ---- entries ------------------------------------------------------------------------

    def get_entry(self, model: str, key: bytes, *, tenant: str = "") -> Entry:
        """A stored entry's metadata and serialised bytes, its chunks joined. INTERNAL
        "client: ..." when the chunks do not add up to meta.bytes."""
        rq = pb.GetEntryRequest(model=model, key=to_key(key, "key"), tenant=tenant)
        return self._entry_stream("GetEntry", rq)

    def build(
        self,
        model: str,
        tokens: TokenIds | str,
        *,
        seam: int | None = None,
        dtype: StateDtype | str | int = StateDtype.UNSPECIFIED,
        tags: Sequence[str] = (),
        tenant: str = "",
    ) -> Entry:
        """Build: one segment's entry built on the server (a scatter worker, or any daemon)
        from the empty state and streamed back unstored, as an Entry that put_entry stores
        (on this server or another)."""
        rq = pb.BuildRequest(
            model=model,
            tokens=pb.Tokens(ids=to_ids(tokens, "tokens")),
            dtype=wire(to_enum(StateDtype, dtype, "dtype", StateDtype.UNSPECIFIED)),
            tags=list(tags),
            tenant=tenant,
        )
        if seam is not None:
            rq.seam = seam
        return self._entry_stream("Build", rq)

    def _entry_stream(self, name: str, rq: Any) -> Entry:
        """A stream of EntryChunk (GetEntry, Build): meta first; each piece at its
        offset when it has one (Build sends layers as they are built, the header
        last), else right after the previous; no overlap, every byte once."""
        meta: pb.EntryMeta | None = None
        data = bytearray()
        spans: list[tuple[int, int]] = []
        got = nxt = 0
        for i, chunk in enumerate(self.call(name, rq)):
            if chunk.HasField("meta") != (i == 0):
                raise client_error(
                    "the first chunk has no meta" if i == 0 else f"chunk {i} carries meta",
                    "INTERNAL",
                )
            if i == 0:
                meta = chunk.meta
            assert meta is not None
            lo = chunk.offset if chunk.WhichOneof("placement") == "offset" else nxt
            hi = lo + len(chunk.data)
            if hi > meta.bytes:
                raise client_error(f"chunk {i} ends at {hi}, past meta.bytes {meta.bytes}", "INTERNAL")
            if any(a < hi and lo < b for a, b in spans):
                raise client_error(f"chunk {i} overlaps bytes already received", "INTERNAL")
            if len(data) < hi:
                data.extend(bytes(hi - len(data)))
            data[lo:hi] = chunk.data
            spans.append((lo, hi))
            got += len(chunk.data)
            nxt = hi
        if meta is None:
            raise client_error("the stream had no chunk", "INTERNAL")
        if got != meta.bytes or len(data) != meta.bytes:
            raise client_error(f"the chunks hold {got} bytes, meta.bytes {meta.bytes}", "INTERNAL")
        return Entry(meta=meta, data=bytes(data))

    def put_entry(
        self,
        entry: Entry | pb.EntryMeta,
        data: bytes | None = None,
        *,
        model: str | None = None,
        chunk_size: int = 1 << 20,
    ) -> pb.PutEntryResponse:
        """Stores a serialised entry: an Entry (as get_entry returns it), or its meta and
        data. The server reads meta's model (model= overrides it), tags, tenant and key
        (optional, checked) and derives the rest; meta.bytes is sent as len(data).
        Sent in chunks of chunk_size bytes, the first carrying meta."""
        if isinstance(entry, Entry):
            meta, payload = entry.meta, entry.data if data is None else data
        elif data is None:
            raise client_error("put_entry: meta without data")
        else:
            meta, payload = entry, data
        if not 0 < chunk_size <= self.max_message - META_ROOM:
            raise client_error(f"chunk_size {chunk_size} is not in 1..{self.max_message - META_ROOM}")
        m = pb.EntryMeta()
        m.CopyFrom(meta)
        m.bytes = len(payload)
        if model is not None:
            m.model = model
        return cast(pb.PutEntryResponse, self.call("PutEntry", _chunks(m, bytes(payload), chunk_size)))

    def invalidate(
        self,
        *,
        key: bytes | None = None,
        tag: str | None = None,
        model: str | None = None,
        all_of_tenant: bool = False,
        tenant: str = "",
    ) -> int:
        """Removes the caller's entries by exactly one of key, tag, model or
        all_of_tenant; answers how many were removed (0 for another tenant's key)."""
        targets = [t for t in (key, tag, model) if t is not None] + ([True] if all_of_tenant else [])
        if len(targets) > 1:
            raise client_error("invalidate: one of key, tag, model, all_of_tenant, not several")
        rq = pb.InvalidateRequest(tenant=tenant)
        if key is not None:
            rq.key = to_key(key, "key")
        elif tag is not None:
            rq.tag = tag
        elif model is not None:
            rq.model = model
        elif all_of_tenant:
            rq.all_of_tenant = True
        return int(self.call("Invalidate", rq).removed)

    def pin(
        self,
        *,
        key: bytes | None = None,
        tag: str | None = None,
        ttl_ms: int = 0,
        tenant: str = "",
    ) -> pb.PinResponse:
        """Pins the caller's entry key, or every entry tagged tag: not evicted nor
        expired until unpinned (ttl_ms 0) or for ttl_ms. RESOURCE_EXHAUSTED past the
        tenant's pin cap (the response's tenant_pin_cap), with nothing pinned."""
        if (key is None) == (tag is None):
            raise client_error("pin: one of key, tag")
        rq = pb.PinRequest(ttl_ms=ttl_ms, tenant=tenant)
        if key is not None:
            rq.key = to_key(key, "key")
        else:
            rq.tag = tag
        return self.call("Pin", rq)

    def unpin(
        self,
        *,
        key: bytes | None = None,
        tag: str | None = None,
        all_of_tenant: bool = False,
        tenant: str = "",
    ) -> int:
        """Lifts the pins of key, of the entries tagged tag, or all of the tenant's;
        answers how many were unpinned."""
        targets = [t for t in (key, tag) if t is not None] + ([True] if all_of_tenant else [])
        if len(targets) != 1:
            raise client_error("unpin: one of key, tag, all_of_tenant")
        rq = pb.UnpinRequest(tenant=tenant)
        if key is not None:
            rq.key = to_key(key, "key")
        elif tag is not None:
            rq.tag = tag
        else:
            rq.all_of_tenant = True
        return int(self.call("Unpin", rq).unpinned)

    def list(
        self,
        *,
        model: str = "",
        tag: str = "",
        tier: Tier | int | str | None = None,
        sort: Sort | int | str | None = None,
        descending: bool = False,
        page_size: int = 0,
        page_token: str = "",
        tenant: str = "",
    ) -> pb.ListResponse:
        """One page of the caller's entries, filtered (model, tag, tier: None is any) and
        sorted ("key", "bytes", "hits", "age"); pass next_page_token back as page_token
        for the next (empty on the last page). list_all follows the pages."""
        rq = pb.ListRequest(
            tier=wire(to_enum(Tier, tier, "tier", Tier.NONE)),
            tag=tag,
            model=model,
            sort=wire(to_enum(Sort, sort, "sort", Sort.KEY)),
            descending=descending,
            page_size=page_size,
            page_token=page_token,
            tenant=tenant,
        )
        return cast(pb.ListResponse, self.call("List", rq))

    def list_all(self, **filters: Any) -> Iterator[pb.EntryMeta]:
        """Every entry list(**filters) would page through, one page per call. Each page is
        the store as it is then: a store that changes meanwhile may skip or repeat one."""
        token = filters.pop("page_token", "")
        while True:
            page = self.list(page_token=token, **filters)
            yield from page.entries
            token = page.next_page_token
            if not token:
                return

    def inspect(self, key: bytes, *, verify: bool = False, tenant: str = "") -> pb.InspectResponse:
        """An entry's metadata, seam and sections; verify: report the checksums checked."""
        rq = pb.InspectRequest(key=to_key(key, "key"), verify=verify, tenant=tenant)
        return cast(pb.InspectResponse, self.call("Inspect", rq))

    def watch(
        self,
        *,
        model: str = "",
        tenant: str = "",
        heartbeats: bool = False,
        timeout: float | None = None,
    ) -> Iterator[pb.WatchEvent]:
        """Stored and removed events of the caller's entries (model: only its), from now
        on, until the server ends the stream or the timeout (default: none) passes.
        Heartbeats (KIND_HEARTBEAT, every 5 s of silence) are skipped unless asked for."""
        rq = pb.WatchRequest(model=model, tenant=tenant)
        events: Generator[pb.WatchEvent, None, None] = self.call("Watch", rq, timeout=timeout)
        return events if heartbeats else _without_heartbeats(events)

    # ---- the server ---------------------------------------------------------------------

    def stats(self) -> pb.StatsResponse:
        """The store's counters per tier (the whole store for admin tenants)."""
        return cast(pb.StatsResponse, self.call("Stats", pb.StatsRequest()))

    def get_policy(self, tier: Tier | int | str) -> pb.Policy:
        """A tier's ("hbm", "host", "nvme") eviction and admission policy."""
        rq = pb.GetPolicyRequest(tier=wire(to_enum(Tier, tier, "tier", Tier.NONE)))
        return cast(pb.Policy, self.call("GetPolicy", rq))

    def set_policy(self, tier: Tier | int | str, *, evict: str, admit: str, min_tokens: int = 0) -> pb.Policy:
        """Replaces a tier's policy (admin tenants only); answers the policy now in force.
        evict: lru | lfu | s3fifo | gdsf | hybrid; admit: always | second-hit | tinylfu |
        min-tokens (with min_tokens)."""
        policy = pb.Policy(
            tier=wire(to_enum(Tier, tier, "tier", Tier.NONE)), evict=evict, admit=admit, min_tokens=min_tokens
        )
        return cast(pb.Policy, self.call("SetPolicy", pb.SetPolicyRequest(policy=policy)))

    def health(self) -> pb.HealthResponse:
        """Whether the server is serving, its version and its models (no token needed)."""
        return cast(pb.HealthResponse, self.call("Health", pb.HealthRequest()))


def _prefill_request(
    model: str,
    segments: Sequence[SegmentLike],
    query: TokenIds | str,
    mode: Mode | int | str | None,
    seam: int | None,
    top_k: int,
    max_new_tokens: int,
    dtype: StateDtype | int | str | None,
    tenant: str,
) -> pb.PrefillRequest:
    """Prefill's request from prefill's (and prefill_state's) arguments."""
    rq = pb.PrefillRequest(
        model=model,
        segments=to_segments(segments),
        query=to_ids(query, "query"),
        mode=wire(to_enum(Mode, mode, "mode", Mode.UNSPECIFIED)),
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        dtype=wire(to_enum(StateDtype, dtype, "dtype", StateDtype.UNSPECIFIED)),
        tenant=tenant,
    )
    if seam is not None:
        rq.seam = seam
    return rq


_CONNECT_TIMEOUT_MS = 5000  # one connection attempt, at most (libhypic-client's too)
_DIAL_RETRY_S = 1.0  # how long a call whose dial failed is tried again (as libhypic-client)


def _dial_failed(e: HypicError) -> bool:
    """Whether a call failed because its channel could not connect: gRPC's pick failure,
    raised before anything was sent."""
    return e.code == "UNAVAILABLE" and e.message.startswith("failed to connect to all addresses")


def _iterate(call: Any) -> Iterator[Any]:
    """A server stream's messages; its error raised as HypicError; cancelled when left."""
    try:
        yield from call
    except grpc.RpcError as e:
        raise HypicError.from_rpc(e) from None
    finally:
        call.cancel()


def _without_heartbeats(events: Generator[pb.WatchEvent, None, None]) -> Iterator[pb.WatchEvent]:
    """Watch's events less its heartbeats; leaving it leaves (cancels) the stream too."""
    try:
        for e in events:
            if e.kind != pb.WatchEvent.KIND_HEARTBEAT:
                yield e
    finally:
        events.close()


def _chunks(meta: pb.EntryMeta, data: bytes, size: int) -> Iterable[pb.EntryChunk]:
    """PutEntry's stream: meta with the first piece, then the rest in order."""
    yield pb.EntryChunk(meta=meta, data=data[:size])
    for off in range(size, len(data), size):
        yield pb.EntryChunk(data=data[off : off + size])
