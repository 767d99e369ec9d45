"""The cluster's placement rule, as the daemons compute it (cluster/include/hy_cluster.h), and
Cluster: a client of every member that sends each call where it is answered.

An entry's owners are the top ``r`` live members by rendezvous (highest-random-weight)
hashing of its 32-byte key: a member's score is the first 8 bytes, big-endian, of SHA-256
over ``b"hypic-owner\\0"``, the key and the member's id. A client that knows the members
sends Lookup, GetEntry and PutEntry straight to an owner.

Cluster knows the members from a static list or from etcd, where each daemon registers
under a lease (rpc/etcd.proto is the slice of etcd's API read here: Range and Watch);
it holds one hypic.Client per member and routes: entries and keyed lookups to their
owners, everything else to the members in turn, moving past a member that is gone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from ._gen import etcd_pb2 as epb
from ._gen import hypic_pb2 as pb
from .client import Client
from .errors import HypicError, client_error
from .types import Entry, Segment, SegmentLike, StateDtype, TokenIds, to_enum, to_key, to_segments, wire

T = TypeVar("T")
_DOMAIN = b"hypic-owner\x00"
OWNERS_MAX = 64  # replicas an entry may have (HY_OWNERS_MAX)


def score(key: bytes, member_id: str) -> int:
    """The member's score for the key (hy_rendezvous_score)."""
    if len(key) != 32:
        raise ValueError(f"a key is 32 bytes, not {len(key)}")
    ident = member_id.encode()[:63]
    return int.from_bytes(hashlib.sha256(_DOMAIN + key + ident).digest()[:8], "big")


def owners(key: bytes, member_ids: Sequence[str], r: int = 1) -> list[int]:
    """The indexes into ``member_ids`` of the key's top ``min(r, len, 64)`` members by
    score, best first; ties go to the smaller id (hy_rendezvous_owners)."""
    ranked = sorted(
        range(len(member_ids)),
        key=lambda i: (-score(key, member_ids[i]), member_ids[i].encode()),
    )
    return ranked[: max(0, min(r, len(member_ids), OWNERS_MAX))]


# ---- Cluster: a client that routes to owners -------------------------------------------


class Cluster:
    """The members of a hypic-cached cluster, and calls routed to the members that own
    the entries they name (docs/api.md, cluster mode).

    members: the static set, {id: address}, as the daemons' cluster.members; or etcd:
    the endpoints ("host:port") of the etcd the daemons register in, each member under
    ``prefix + id`` with a lease: the set is read (Range) and then followed (Watch, in a
    background thread that reads it again when the stream breaks), so members() follows
    joins and deaths. replicas: the daemons' cluster.replicas, what owners() ranks.
    token and client_kwargs (tls_root_pem, timeout, ...) go to each member's Client.
    etcd_tls_root_pem (with etcd_tls_cert_pem and etcd_tls_key_pem for an etcd that asks
    for client certificates, and etcd_tls_server_name for a certificate that does not name
    the endpoint's host): etcd over TLS; etcd_user and etcd_password: a user of etcd's
    own (its auth API), which needs only read access to the prefix. The members' seal on
    their registrations (cluster.secret) is theirs alone: a client trusts the set as far
    as etcd's access control goes, and a member's certificate (tls_root_pem) proves it is
    one.

    Any member answers any call, passing it on to the owners itself; routing here only
    saves that hop. A member that is gone (UNAVAILABLE) is a miss for get_entry and
    lookup, never an error; calls that any member can answer move on to the next.
    Threads: one Cluster may be used by several at once. close() (or `with`) ends the
    watch and closes every member's Client.
    """

    def __init__(
        self,
        members: Mapping[str, str] | None = None,
        *,
        etcd: Sequence[str] | str | None = None,
        prefix: str = "/hypic/members/",
        replicas: int = 1,
        token: str | None = None,
        etcd_tls_root_pem: bytes | None = None,
        etcd_tls_cert_pem: bytes | None = None,
        etcd_tls_key_pem: bytes | None = None,
        etcd_tls_server_name: str | None = None,
        etcd_user: str | None = None,
        etcd_password: str | None = None,
        **client_kwargs: Any,
    ) -> None:
        if (members is None) == (etcd is None):
            raise client_error("Cluster: give members or etcd endpoints, one of them")
        if replicas < 1:
            raise client_error(f"Cluster: replicas {replicas} is not at least 1")
        self.replicas = replicas
        self._token = token
        self._client_kwargs = client_kwargs
        self._lock = threading.Lock()
        self._members: dict[str, str] = {}
        self._clients: dict[str, Client] = {}
        self._retired: list[Client] = []  # clients of an address a member left: closed by close()
        self._rr = itertools.count()
        self._watch: _EtcdWatch | None = None
        if members is not None:
            self._members = {str(k): str(v) for k, v in members.items()}
            if not self._members:
                raise client_error("Cluster: no members")
        else:
            eps = [e for e in (etcd.split(",") if isinstance(etcd, str) else etcd or []) if e]
            if not eps:
                raise client_error("Cluster: no etcd endpoints")
            access = _EtcdAccess(
                etcd_tls_root_pem,
                etcd_tls_cert_pem,
                etcd_tls_key_pem,
                etcd_tls_server_name,
                etcd_user,
                etcd_password,
            )
            self._watch = _EtcdWatch(eps, prefix, self._set_members, access)

    # ---- the view ------------------------------------------------------------------------

    def members(self) -> dict[str, str]:
        """The live members as last seen: a copy, {id: address}."""
        with self._lock:
            return dict(self._members)

    def owners(self, key: bytes) -> list[str]:
        """The ids of key's owners in the current view, best first (the daemons' rule)."""
        ids = sorted(self.members())
        return [ids[i] for i in owners(to_key(key, "key"), ids, self.replicas)]

    def client(self, member_id: str) -> Client:
        """The Client of a member of the view (made once, closed by close()); NOT_FOUND
        "client: ..." for an id the view does not hold."""
        with self._lock:
            addr = self._members.get(member_id)
            if addr is None:
                raise client_error(f"no member '{member_id}' in the cluster's view", "NOT_FOUND")
            c = self._clients.get(member_id)
            if c is None or c.target != addr:
                if c is not None:
                    self._retired.append(c)
                c = Client(addr, token=self._token, **self._client_kwargs)
                self._clients[member_id] = c
            return c

    def _set_members(self, members: dict[str, str]) -> None:
        with self._lock:
            self._members = members

    def _round_robin(self) -> list[str]:
        """Every member, starting with the next in turn."""
        ids = sorted(self.members())
        if not ids:
            return []
        at = next(self._rr) % len(ids)
        return ids[at:] + ids[:at]

    # ---- routed calls --------------------------------------------------------------------

    def get_entry(self, model: str, key: bytes, *, tenant: str = "") -> Entry:
        """Client.get_entry from key's owners in turn: a gone one (UNAVAILABLE) or one
        without it (NOT_FOUND) passes to the next. Each answers by its own view of the
        owners (a member without the entry asks the others), so that a view here that
        lags the members' still finds the entry; local_only is for members only. NOT_FOUND
        when none has it."""
        key = to_key(key, "key")
        own = self.owners(key)
        miss: HypicError | None = None
        for mid in own:
            rq = pb.GetEntryRequest(model=model, key=key, tenant=tenant)
            try:
                return self.client(mid)._entry_stream("GetEntry", rq)
            except HypicError as e:
                if _gone(e, self, mid):
                    continue
                if e.code != "NOT_FOUND":
                    raise
                miss = e
        raise miss or HypicError("NOT_FOUND", f"key is not cached (its owners {own} are gone)")

    def put_entry(
        self, entry: Entry | pb.EntryMeta, data: bytes | None = None, **kw: Any
    ) -> pb.PutEntryResponse:
        """Client.put_entry (same arguments) to the first of the key's owners that takes it
        (a gone one passes to the next); the daemon puts it to the other owners in the
        background. An entry whose meta has no key goes to any member, which passes it
        on. UNAVAILABLE when no owner could be reached."""
        meta = entry.meta if isinstance(entry, Entry) else entry
        order = self.owners(meta.key) if meta.key else self._round_robin()
        return self._first_available(order, lambda c: c.put_entry(entry, data, **kw))

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
        """Client.lookup across the members: a segment given by key goes to its owner
        (the next owner when that one is gone; a miss when all are), segments given by
        tokens to one member in turn (which asks their owners); one Lookup per member,
        the answers merged back in request order and leading_hits/leading_tokens counted
        over the whole. lease_ms: each member leases its own hits; lease_id is the lease
        of the member that answered the first segment (the others lapse after lease_ms)."""
        segs = to_segments(segments)
        dt = wire(to_enum(StateDtype, dtype, "dtype", StateDtype.UNSPECIFIED))
        out: list[pb.SegmentStatus | None] = [None] * len(segs)
        leases: dict[int, int] = {}  # first segment of a group -> its lease
        gone: set[str] = set()
        anyone = self._round_robin()
        pending = list(range(len(segs)))
        last: HypicError | None = None
        while pending:
            groups: dict[str, list[int]] = {}
            for i in pending:
                by_key = segs[i].WhichOneof("ref") == "key"
                cands = [m for m in (self.owners(segs[i].key) if by_key else anyone) if m not in gone]
                if cands:
                    groups.setdefault(cands[0], []).append(i)
                elif by_key:
                    out[i] = pb.SegmentStatus(key=segs[i].key, hit=False)
                else:
                    raise last or HypicError("UNAVAILABLE", "client: the cluster has no members")
            pending = []
            for mid, idx in groups.items():
                rq = pb.LookupRequest(
                    model=model, segments=[segs[i] for i in idx], dtype=dt, lease_ms=lease_ms, tenant=tenant
                )
                if seam is not None:
                    rq.seam = seam
                try:
                    r = self.client(mid).call("Lookup", rq)
                except HypicError as e:
                    if not _gone(e, self, mid):
                        raise
                    gone.add(mid)
                    pending += idx
                    last = e
                    continue
                if len(r.segments) != len(idx):
                    said = f"Lookup: {mid} answered {len(r.segments)} of {len(idx)} segments"
                    raise client_error(said, "INTERNAL")
                for i, st in zip(idx, r.segments):
                    out[i] = st
                if r.lease_id:
                    leases[idx[0]] = r.lease_id
            pending.sort()
        resp = pb.LookupResponse(segments=out)
        for st in resp.segments:
            if not st.hit:
                break
            resp.leading_hits += 1
            resp.leading_tokens += st.tokens
        if leases:
            resp.lease_id = leases.get(0, leases[min(leases)])
        return resp

    def prefill(
        self, model: str, segments: Sequence[SegmentLike], query: TokenIds | str, **kw: Any
    ) -> pb.PrefillResponse:
        """Client.prefill (same arguments) on the members in turn; on UNAVAILABLE (a member
        just gone) once on each other member, then the error."""
        return self._first_available(self._round_robin(), lambda c: c.prefill(model, segments, query, **kw))

    def warm(
        self, model: str, segments: Sequence[SegmentLike] | SegmentLike, **kw: Any
    ) -> Iterator[pb.WarmProgress]:
        """Client.warm (same arguments) on the members in turn (each stores an entry at its
        owners). On UNAVAILABLE, the segments not reported yet go to the next member, once
        to each; progress indexes are the request's."""
        lone = isinstance(segments, (str, bytes, bytearray, memoryview, Segment))
        segs: list[SegmentLike] = [segments] if lone else list(segments)  # type: ignore[list-item, arg-type]
        to_segments(segs)  # refuse bad arguments now, not at the first next()
        return self._warm(self._round_robin(), model, segs, kw)

    def _warm(
        self, order: list[str], model: str, segs: list[SegmentLike], kw: dict[str, Any]
    ) -> Iterator[pb.WarmProgress]:
        pending = list(range(len(segs)))
        last: HypicError | None = None
        for mid in order:
            done: set[int] = set()
            stream: Iterator[pb.WarmProgress] | None = None
            try:
                stream = self.client(mid).warm(model, [segs[i] for i in pending], **kw)
                for p in stream:
                    if p.index < len(pending):
                        done.add(p.index)
                        p.index = pending[p.index]
                    yield p
                return
            except HypicError as e:
                if not _gone(e, self, mid):
                    raise
                last = e
                pending = [pending[j] for j in range(len(pending)) if j not in done]
            finally:
                if stream is not None:
                    stream.close()  # type: ignore[attr-defined]
        raise last or HypicError("UNAVAILABLE", "client: the cluster has no members")

    def _first_available(self, order: list[str], fn: Callable[[Client], T]) -> T:
        """fn on the first member of order that can be reached."""
        last: HypicError | None = None
        for mid in order:
            try:
                return fn(self.client(mid))
            except HypicError as e:
                if not _gone(e, self, mid):
                    raise
                last = e
        raise last or HypicError("UNAVAILABLE", "client: the cluster has no members")

    # ---- the end -------------------------------------------------------------------------

    def close(self) -> None:
        """Ends the watch and closes every member's Client; calls in flight end CANCELLED."""
        if self._watch is not None:
            self._watch.close()
        with self._lock:
            clients = list(self._clients.values()) + self._retired
            self._clients, self._retired = {}, []
        for c in clients:
            c.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gone(e: HypicError, cl: Cluster, member_id: str) -> bool:
    """Whether e says the member is gone: unreachable, or left the view meanwhile."""
    return e.code == "UNAVAILABLE" or (e.code == "NOT_FOUND" and member_id not in cl.members())


# ---- etcd: the members' registrations, followed ------------------------------------------


def _prefix_end(prefix: bytes) -> bytes:
    """etcd's range_end for every key with this prefix: its last byte below 0xff plus one
    (what follows dropped); "\\0" (every key) for a prefix of 0xff bytes only."""
    p = bytearray(prefix)
    while p:
        if p[-1] < 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return b"\0"


class _EtcdAccess:
    """How etcd is reached: plaintext or TLS, and as a user of its own or as nobody.

    With a user, each channel asks for a token (Auth.Authenticate) before its first call,
    sends it as etcd's "token" metadata, and asks again once when etcd answers
    UNAUTHENTICATED (a token expires, and every one is dropped when auth is turned off and
    on again).
    """

    def __init__(
        self,
        root_pem: bytes | None,
        cert_pem: bytes | None,
        key_pem: bytes | None,
        server_name: str | None,
        user: str | None,
        password: str | None,
    ) -> None:
        if (cert_pem is None) != (key_pem is None):
            raise client_error("Cluster: etcd_tls_cert_pem and etcd_tls_key_pem go together")
        if (cert_pem is not None or server_name) and root_pem is None:
            raise client_error("Cluster: etcd's client certificate or server name needs etcd_tls_root_pem")
        if password is not None and not user:
            raise client_error("Cluster: etcd_password without etcd_user")
        self._creds = (
            grpc.ssl_channel_credentials(root_pem, key_pem, cert_pem) if root_pem is not None else None
        )
        self._server_name = server_name
        self.user = user
        self._password = password or ""
        self._token: str | None = None
        self._mu = threading.Lock()

    def channel(self, endpoint: str) -> grpc.Channel:
        opts: list[tuple[str, Any]] = [
            ("grpc.keepalive_time_ms", 10000),
            ("grpc.keepalive_timeout_ms", 5000),
        ]
        if self._creds is None:
            return grpc.insecure_channel(endpoint, opts)
        if self._server_name:
            opts.append(("grpc.ssl_target_name_override", self._server_name))
        return grpc.secure_channel(endpoint, self._creds, opts)

    def forget(self) -> None:
        """Drops the token (a new channel, or etcd refused it): the next call asks again."""
        with self._mu:
            self._token = None

    def metadata(self, ch: grpc.Channel) -> list[tuple[str, str]]:
        """What a call on ch carries: the token, asked for when there is none."""
        if not self.user:
            return []
        with self._mu:
            tok = self._token
        if tok is None:
            auth = ch.unary_unary(
                "/etcdserverpb.Auth/Authenticate",
                request_serializer=epb.AuthenticateRequest.SerializeToString,
                response_deserializer=epb.AuthenticateResponse.FromString,
            )
            try:
                r = auth(epb.AuthenticateRequest(name=self.user, password=self._password), timeout=5.0)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.UNAVAILABLE:
                    raise
                raise HypicError(
                    "INVALID_ARGUMENT" if e.code() == grpc.StatusCode.INVALID_ARGUMENT else "UNAVAILABLE",
                    f"client: etcd: Authenticate as user '{self.user}': {e.details()}",
                ) from None
            if not r.token:
                raise HypicError(
                    "UNAVAILABLE",
                    f"client: etcd: Authenticate as user '{self.user}': no token came (is auth enabled?)",
                )
            tok = r.token
            with self._mu:
                self._token = tok
        return [("token", tok)]


class _EtcdWatch:
    """The members registered under a prefix in etcd, kept current by a thread.

    Each member's key is prefix + id, its value JSON {"id", "address", ...} (what the
    daemons put, cached/cluster.c). The set is read with one Range, then followed with a
    Watch from the revision after it; when the stream breaks (etcd restarted, an endpoint
    gone, the revision compacted), the thread reads the set again from the next endpoint
    and watches again. publish(members) gets every new set.
    """

    RETRY_S = (0.1, 2.0)  # back-off between attempts: first, at most

    def __init__(
        self,
        endpoints: Sequence[str],
        prefix: str,
        publish: Callable[[dict[str, str]], None],
        access: _EtcdAccess,
    ) -> None:
        self._eps = [e.split("://", 1)[-1] for e in endpoints]
        self._access = access
        self._at = 0
        self._prefix = prefix.encode()
        self._end = _prefix_end(self._prefix)
        self._publish = publish
        self._stop = threading.Event()
        self._mu = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._call: Any = None  # the Watch stream in progress, for close() to cancel
        self._members: dict[str, str] = {}
        rev, err = None, HypicError("UNAVAILABLE", "")
        for _ in self._eps:  # the first read is synchronous: the view is known on return
            try:
                rev = self._range()
                break
            except grpc.RpcError as e:
                err = HypicError.from_rpc(e)
                self._next_endpoint()
            except HypicError as e:
                if e.code == "INVALID_ARGUMENT":  # etcd refused the user: so will the others
                    self._close_channel()
                    raise
                err = e
                self._next_endpoint()
        if rev is None:
            self._close_channel()
            said = f"client: no etcd endpoint of {self._eps} answered: {err.message}"
            raise HypicError("UNAVAILABLE", said)
        self._thread = threading.Thread(
            target=self._follow, args=(rev,), name="hypic-etcd-watch", daemon=True
        )
        self._thread.start()

    def _chan(self) -> grpc.Channel:
        with self._mu:
            if self._channel is None:
                self._channel = self._access.channel(self._eps[self._at])
                self._access.forget()  # a token is per endpoint: ask this one
            return self._channel

    def _close_channel(self) -> None:
        with self._mu:
            ch, self._channel = self._channel, None
        if ch is not None:
            ch.close()

    def _next_endpoint(self) -> None:
        self._close_channel()
        self._at = (self._at + 1) % len(self._eps)

    def _range(self) -> int:
        """Reads every registration; publishes the set; answers the revision read at."""
        ch = self._chan()
        rng = ch.unary_unary(
            "/etcdserverpb.KV/Range",
            request_serializer=epb.RangeRequest.SerializeToString,
            response_deserializer=epb.RangeResponse.FromString,
        )
        rq = epb.RangeRequest(key=self._prefix, range_end=self._end)
        try:
            r = rng(rq, timeout=5.0, metadata=self._access.metadata(ch))
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAUTHENTICATED or not self._access.user:
                raise
            self._access.forget()  # the token went stale: ask once more
            r = rng(rq, timeout=5.0, metadata=self._access.metadata(ch))
        members: dict[str, str] = {}
        for kv in r.kvs:
            m = self._member_of(kv)
            if m:
                members[m[0]] = m[1]
        self._members = members
        self._publish(dict(members))
        return int(r.header.revision)

    def _member_of(self, kv: epb.KeyValue) -> tuple[str, str] | None:
        """A registration's (id, address); None for a value that is not one."""
        try:
            info = json.loads(kv.value)
            ident = str(info.get("id") or kv.key[len(self._prefix) :].decode())
            return (ident, str(info["address"])) if info.get("address") else None
        except (ValueError, KeyError, AttributeError, UnicodeDecodeError):
            return None

    def _follow(self, rev: int) -> None:
        """The thread: watch from rev + 1; when the stream ends, read again and repeat."""
        pause = self.RETRY_S[0]
        while not self._stop.is_set():
            try:
                if rev:
                    self._watch(rev + 1)
                    pause = self.RETRY_S[0]  # it ran: the next failure starts the back-off over
            except (grpc.RpcError, HypicError):
                pass
            rev = 0
            if self._stop.wait(pause):
                return
            pause = min(pause * 2, self.RETRY_S[1])
            self._next_endpoint()
            try:
                rev = self._range()
            except (grpc.RpcError, HypicError):
                continue

    def _watch(self, start: int) -> None:
        """One Watch stream, its events applied, until it ends (or close() cancels it)."""
        ended = threading.Event()

        def requests() -> Iterator[epb.WatchRequest]:
            create = epb.WatchCreateRequest(key=self._prefix, range_end=self._end, start_revision=start)
            yield epb.WatchRequest(create_request=create)
            while not ended.wait(0.5) and not self._stop.is_set():
                pass  # the send side stays open while the stream runs

        ch = self._chan()
        watch = ch.stream_stream(
            "/etcdserverpb.Watch/Watch",
            request_serializer=epb.WatchRequest.SerializeToString,
            response_deserializer=epb.WatchResponse.FromString,
        )
        call = watch(requests(), metadata=self._access.metadata(ch))
        with self._mu:
            self._call = call
        try:
            if self._stop.is_set():
                return
            for resp in call:
                if resp.canceled or resp.compact_revision:
                    return  # compacted past us, or refused: read again
                changed = False
                for ev in resp.events:
                    ident = ev.kv.key[len(self._prefix) :].decode(errors="replace")
                    if ev.type == epb.Event.DELETE:
                        changed |= self._members.pop(ident, None) is not None
                        continue
                    m = self._member_of(ev.kv)
                    if m and self._members.get(m[0]) != m[1]:
                        self._members[m[0]] = m[1]
                        changed = True
                if changed:
                    self._publish(dict(self._members))
        finally:
            ended.set()
            call.cancel()
            with self._mu:
                self._call = None

    def close(self) -> None:
        self._stop.set()
        with self._mu:
            call = self._call
        if call is not None:
            call.cancel()
        self._thread.join(5.0)
        self._close_channel()
