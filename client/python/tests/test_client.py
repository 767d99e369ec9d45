"""hypic.Client against a live hypic-cached (conftest.py starts it): every RPC of
hypic.v1.Cache, the statuses the daemon answers, tokens and tenants over TLS, and the
point of the cache: on the trained model `recall`, pic over cached documents in any
order answers what full recompute answers.

Run: tests/client/test_python.sh build/cached/hypic-cached (makes the venv, installs, runs
this), or in a venv with the package installed: HYPIC_CACHED=... pytest -q client/python/tests
"""

from __future__ import annotations

import random
import socket
import threading
import time
from concurrent import futures

import grpc
import numpy as np
import pytest
from conftest import ALICE, BOB, EXAMPLES, TLS, Daemon, tls_client

import hypic
from hypic import pb
from hypic._gen import hypic_pb2_grpc
from hypic.client import METHODS
from hypic.types import PROTO_ENUMS, to_segments

MODEL = "recall"
DOCS = [(EXAMPLES / f"doc{i}.txt").read_text() for i in range(1, 5)]
QUESTION = (EXAMPLES / "question.txt").read_text()  # "?KYW": doc1 holds KYW002
ANSWER = "002"


def code_of(excinfo: pytest.ExceptionInfo[hypic.HypicError]) -> str:
    return excinfo.value.code


def warm_docs(c: hypic.Client, tags: bool = True) -> list[pb.WarmProgress]:
    segs = [hypic.Segment(d, tags=[f"doc{i}", "set"]) if tags else d for i, d in enumerate(DOCS)]
    return list(c.warm(MODEL, segs))


# ---- without a daemon ------------------------------------------------------------------


def test_enums_mirror_the_proto() -> None:
    for cls, (proto_enum, prefix) in PROTO_ENUMS.items():
        want = {name[len(prefix) :]: num for name, num in proto_enum.items()}  # type: ignore[attr-defined]
        assert {m.name: m.value for m in cls} == want, cls.__name__


def test_the_method_table_matches_the_proto() -> None:
    rpcs = pb.DESCRIPTOR.services_by_name["Cache"].methods_by_name
    for rpc, method in METHODS.items():
        assert rpc in rpcs and callable(getattr(hypic.Client, method)), rpc
    # the RPCs of the contract this client was written against all have their method;
    # one the proto gains later is reachable through Client.call until it is wrapped
    assert set(METHODS) >= {
        "Lookup",
        "Warm",
        "Prefill",
        "GetEntry",
        "PutEntry",
        "Invalidate",
        "List",
        "Inspect",
        "Watch",
        "Stats",
        "GetPolicy",
        "SetPolicy",
        "Health",
    }
    stub = hypic_pb2_grpc.CacheStub(grpc.insecure_channel("127.0.0.1:1"))
    for rpc in set(rpcs) - set(METHODS):
        assert callable(getattr(stub, rpc))


def test_tokenize_is_the_c_byte_tokenizer() -> None:
    assert hypic.tokenize("Hi!") == [75, 108, 36]  # docs/api.md's example
    assert hypic.tokenize("é") == [0xC3 + 3, 0xA9 + 3]  # UTF-8 bytes, each + 3
    assert hypic.tokenize("") == []
    assert hypic.detokenize(hypic.tokenize("KYW002; é\n")) == "KYW002; é\n"
    assert hypic.detokenize([0, 51, 300]) == "<0>0<300>"
    with pytest.raises(hypic.HypicError) as e:
        hypic.tokenize("a\0b")
    assert code_of(e) == "INVALID_ARGUMENT" and e.value.message.startswith("client: ")


def test_segment_forms() -> None:
    key = bytes(range(32))
    segs = to_segments(
        [[5, 6, 7], np.arange(3, 9, dtype=np.int32), range(4, 7), key, "ab", hypic.Segment("ab", tags=["t"])]
    )
    assert list(segs[0].tokens.ids) == [5, 6, 7]
    assert list(segs[1].tokens.ids) == [3, 4, 5, 6, 7, 8]
    assert list(segs[2].tokens.ids) == [4, 5, 6]
    assert segs[3].WhichOneof("ref") == "key" and segs[3].key == key
    assert list(segs[4].tokens.ids) == [100, 101]
    assert list(segs[5].tags) == ["t"]
    assert len(to_segments("one text")) == 1
    for bad in ([1, 2, 3], [b"short"], [[1.5]], [[-1]], [[2**32]], [np.zeros((2, 2), dtype=np.int64)]):
        with pytest.raises(hypic.HypicError) as e:
            to_segments(bad)  # type: ignore[arg-type]
        assert code_of(e) == "INVALID_ARGUMENT" and "client: " in e.value.message


def test_arguments_refused_before_sending() -> None:
    c = hypic.Client("127.0.0.1:1")  # nothing listens: a refusal here never reaches it
    for call in (
        lambda: c.prefill(MODEL, ["x"], "?", mode="fast"),
        lambda: c.list(tier="floppy"),
        lambda: c.lookup(MODEL, ["x"], dtype=7),
        lambda: c.invalidate(tag="a", all_of_tenant=True),
        lambda: c.inspect(b"1234"),
        lambda: c.call("Frobnicate", pb.HealthRequest()),
        lambda: hypic.Client("127.0.0.1:1", tls_root_pem=b"not a certificate"),
    ):
        with pytest.raises(hypic.HypicError) as e:
            call()
        assert code_of(e) == "INVALID_ARGUMENT" and e.value.message.startswith("client: ")
    c.close()


def test_unreachable_server_is_unavailable() -> None:
    with hypic.Client("127.0.0.1:1", timeout=5) as c:
        with pytest.raises(hypic.HypicError) as e:
            c.health()
        assert code_of(e) == "UNAVAILABLE"


# ---- every RPC -------------------------------------------------------------------------


def test_health(client: hypic.Client) -> None:
    h = client.health()
    assert h.status == hypic.HealthStatus.SERVING
    assert h.version and list(h.models) == [MODEL]


def test_warm_builds_then_finds_cached(client: hypic.Client) -> None:
    first = warm_docs(client)
    assert [p.index for p in first] == [0, 1, 2, 3]
    assert all(p.state == hypic.WarmState.BUILT and p.tier == hypic.Tier.HOST for p in first)
    assert all(len(p.key) == 32 and p.bytes > 0 and p.ms > 0 for p in first)
    again = warm_docs(client)
    assert [p.state for p in again] == [hypic.WarmState.CACHED] * 4
    assert [p.key for p in again] == [p.key for p in first]
    short = list(client.warm(MODEL, ["ab"]))  # n <= conv kernel - 1: no entry
    assert short[0].state == hypic.WarmState.UNCACHEABLE and short[0].error


def test_warm_stream_left_early_is_cancelled(client: hypic.Client) -> None:
    progress = client.warm(MODEL, DOCS)
    assert next(progress).index == 0
    progress.close()  # cancels the call: the server stops before its next segment
    assert client.health().status == hypic.HealthStatus.SERVING


def test_lookup(client: hypic.Client) -> None:
    keys = [p.key for p in warm_docs(client)]
    r = client.lookup(MODEL, [DOCS[0], DOCS[1], "a segment nobody warmed"])
    assert [s.hit for s in r.segments] == [True, True, False]
    assert r.leading_hits == 2 and r.leading_tokens == len(DOCS[0].encode()) + len(DOCS[1].encode())
    assert [s.key for s in r.segments[:2]] == keys[:2]
    assert r.segments[0].tier == hypic.Tier.HOST and r.segments[2].tier == hypic.Tier.NONE
    assert r.lease_id == 0
    by_key = client.lookup(MODEL, [keys[3]], lease_ms=100)
    assert by_key.segments[0].hit and by_key.lease_id != 0
    other_w = client.lookup(MODEL, [DOCS[0]], seam=4)  # W is part of the key
    assert not other_w.segments[0].hit


def test_pic_over_shuffled_cached_segments_answers_as_full(client: hypic.Client) -> None:
    warm_docs(client)
    rng = random.Random(7)
    for _ in range(4):
        order = DOCS[:]
        rng.shuffle(order)
        full = client.prefill(MODEL, order, QUESTION, mode="full", max_new_tokens=3)
        pic = client.prefill(MODEL, order, QUESTION, mode=hypic.Mode.PIC, max_new_tokens=3)
        assert all(s.kind == hypic.OutcomeKind.HIT for s in pic.segments)
        assert pic.top[0].token == full.top[0].token
        assert hypic.detokenize(full.generated) == ANSWER
        assert hypic.detokenize(pic.generated) == ANSWER
        assert pic.tokens_computed < full.tokens_computed


def test_prefill_every_mode(client: hypic.Client) -> None:
    warm_docs(client)
    for mode in ("full", "prefix", "pic", "noseam", "naive"):
        r = client.prefill(MODEL, DOCS, QUESTION, mode=mode, top_k=4, max_new_tokens=2)
        assert len(r.top) == 4 and len(r.generated) == 2 and len(r.segments) == 4, mode
        assert r.generated[0] == r.top[0].token
        assert all(a.prob >= b.prob for a, b in zip(r.top, r.top[1:]))
        assert r.tokens_computed > 0 and r.timings.total_ms > 0 and r.timings.ttft_ms > 0
    again = client.prefill(MODEL, DOCS, QUESTION, mode="prefix")  # the same leading segments
    assert all(s.kind == hypic.OutcomeKind.PREFIX for s in again.segments)
    default = client.prefill(MODEL, DOCS, hypic.tokenize(QUESTION))  # unspecified: pic; top_k 0: 5
    assert len(default.top) == 5 and all(s.kind == hypic.OutcomeKind.HIT for s in default.segments)


def test_seam_and_dtype_are_part_of_the_key(client: hypic.Client) -> None:
    default = warm_docs(client, tags=False)  # S may be bf16 (pic.dtype), the server's default
    f32 = list(client.warm(MODEL, DOCS, dtype="f32"))
    assert all(p.state == hypic.WarmState.BUILT for p in f32)
    assert all(a.key != b.key and a.bytes > b.bytes for a, b in zip(f32, default))
    assert client.inspect(default[0].key).dtype == hypic.StateDtype.BF16
    assert client.inspect(f32[0].key).dtype == hypic.StateDtype.F32
    r = client.prefill(MODEL, DOCS[::-1], QUESTION, dtype=hypic.StateDtype.F32, max_new_tokens=3)
    assert all(s.kind == hypic.OutcomeKind.HIT for s in r.segments)
    assert hypic.detokenize(r.generated) == ANSWER
    w0 = client.prefill(MODEL, DOCS, QUESTION, seam=0, max_new_tokens=3)  # W = 0: other keys
    assert all(s.kind == hypic.OutcomeKind.MISS and s.stored for s in w0.segments)
    noseam = client.prefill(MODEL, DOCS[::-1], QUESTION, mode="noseam", max_new_tokens=3)
    assert all(s.kind == hypic.OutcomeKind.HIT for s in noseam.segments)  # the W = 0 entries
    narrow = client.prefill(MODEL, DOCS, QUESTION, seam=2)  # 0 < W < K - 1: nothing cacheable
    assert all(s.kind == hypic.OutcomeKind.UNCACHEABLE for s in narrow.segments)


def test_prefill_builds_misses_inline(client: hypic.Client) -> None:
    r = client.prefill(MODEL, [hypic.Segment(DOCS[0], tags=["inline"])], QUESTION)
    assert r.segments[0].kind == hypic.OutcomeKind.MISS and r.segments[0].stored
    assert [e.key for e in client.list_all(tag="inline")] == [r.segments[0].key]
    by_key = client.prefill(MODEL, [r.segments[0].key], QUESTION)
    assert by_key.segments[0].kind == hypic.OutcomeKind.HIT


def test_get_and_put_entry(client: hypic.Client) -> None:
    key = warm_docs(client)[1].key
    e = client.get_entry(MODEL, key)
    assert e.key == key and len(e.data) == e.meta.bytes > 0
    assert e.meta.model == MODEL and e.meta.tenant == "default" and list(e.meta.tags) == ["doc1", "set"]
    assert e.meta.tokens == len(DOCS[1].encode()) and len(e.meta.model_fingerprint) == 32
    assert client.invalidate(key=key) == 1
    with pytest.raises(hypic.HypicError) as nf:
        client.get_entry(MODEL, key)
    assert code_of(nf) == "NOT_FOUND"
    placed = client.put_entry(e, chunk_size=4096)  # many chunks
    assert placed.key == key and placed.placed == hypic.Tier.HOST
    assert client.get_entry(MODEL, key).data == e.data
    corrupt = bytearray(e.data)
    corrupt[len(corrupt) // 2] ^= 0x40
    with pytest.raises(hypic.HypicError) as bad:
        client.put_entry(e.meta, bytes(corrupt))
    assert code_of(bad) == "INVALID_ARGUMENT" and "validation" in bad.value.message
    assert client.inspect(key, verify=True).verified  # the stored one is intact
    with pytest.raises(hypic.HypicError) as other:
        client.put_entry(e, model="nosuch")
    assert code_of(other) == "NOT_FOUND"


def test_build(client: hypic.Client) -> None:
    text = "a segment built without being stored, then put where it is wanted"
    e = client.build(MODEL, text, tags=["built"])
    assert len(e.data) == e.meta.bytes > 0 and len(e.key) == 32
    assert e.meta.tokens == len(text.encode()) and list(e.meta.tags) == ["built"]
    assert not client.lookup(MODEL, [text]).segments[0].hit  # Build stores nothing
    assert client.put_entry(e).key == e.key
    assert client.lookup(MODEL, [text]).segments[0].hit
    with pytest.raises(hypic.HypicError) as short:
        client.build(MODEL, "abc")  # no body: kernel - 1 tokens
    assert code_of(short) == "INVALID_ARGUMENT" and "tokens" in short.value.message


def test_inspect(client: hypic.Client) -> None:
    key = warm_docs(client)[0].key
    r = client.inspect(key, verify=True)
    n = len(DOCS[0].encode())
    assert r.meta.key == key and r.verified and r.format_version == 2
    assert r.HasField("repr") and 0.0 <= r.repr.tolerance <= 1.0
    assert r.seam == 8 and r.seam_tokens == 8 and r.body_tokens == n - 8
    assert r.sections[0].name == "TOKENS" and r.sections[0].layer == -1
    assert all(s.checksum_ok for s in r.sections)
    assert {s.name for s in r.sections} == {"TOKENS", "T", "S", "TAIL", "K", "V"}
    assert not client.inspect(key).verified
    with pytest.raises(hypic.HypicError) as e:
        client.inspect(bytes(32))
    assert code_of(e) == "NOT_FOUND"


def test_list_pages_sorts_and_filters(client: hypic.Client) -> None:
    keys = {p.key for p in warm_docs(client)}
    page = client.list(page_size=1)
    assert page.total == 4 and len(page.entries) == 1 and page.next_page_token
    assert {e.key for e in client.list_all(page_size=1)} == keys
    by_bytes = client.list(sort="bytes", descending=True).entries
    assert [e.bytes for e in by_bytes] == sorted((e.bytes for e in by_bytes), reverse=True)
    assert client.list(tag="doc2").total == 1
    assert client.list(tier="host", model=MODEL).total == 4
    assert client.list(tier=hypic.Tier.NVME).total == 0
    with pytest.raises(hypic.HypicError) as e:
        client.list(page_token="not a token")
    assert code_of(e) == "INVALID_ARGUMENT"


def test_watch_sees_stores_and_removals(client: hypic.Client) -> None:
    events = client.watch(model=MODEL, timeout=30)
    time.sleep(1)  # the stream starts when the server has opened it: no replay
    (p,) = client.warm(MODEL, [hypic.Segment(DOCS[2], tags=["watched"])])
    client.invalidate(tag="watched")
    stored, removed = next(events), next(events)
    events.close()
    assert stored.kind == hypic.EventKind.STORED and stored.meta.key == p.key
    assert list(stored.meta.tags) == ["watched"]
    assert removed.kind == hypic.EventKind.REMOVED and removed.reason == "invalidated"


def test_watch_heartbeat_and_deadline(client: hypic.Client) -> None:
    beat = next(client.watch(heartbeats=True, timeout=15))  # 5 to 6 s of silence
    assert beat.kind == hypic.EventKind.HEARTBEAT and not beat.HasField("meta")
    with pytest.raises(hypic.HypicError) as e:
        next(client.watch(timeout=1))
    assert code_of(e) == "DEADLINE_EXCEEDED"


def test_invalidate(client: hypic.Client) -> None:
    warm_docs(client)
    assert client.invalidate(tag="doc0") == 1
    assert client.invalidate(tag="set") == 3
    list(client.warm(MODEL, DOCS[:2]))
    assert client.invalidate(model=MODEL) == 2
    list(client.warm(MODEL, DOCS[:1]))
    assert client.invalidate(all_of_tenant=True) == 1
    assert client.list().total == 0
    with pytest.raises(hypic.HypicError) as e:
        client.invalidate()
    assert code_of(e) == "INVALID_ARGUMENT" and "no target" in e.value.message


def test_pin(client: hypic.Client) -> None:
    warm_docs(client)
    r = client.pin(tag="doc0")
    assert r.pinned == 1 and r.bytes > 0 and r.until_unix_ns == 2**64 - 1
    assert r.tenant_pinned_bytes == r.bytes and r.tenant_pin_cap > r.bytes
    (m,) = client.list(tag="doc0").entries
    assert m.pinned_until_unix_ns == 2**64 - 1
    # a later pin sets the time of every entry it names, doc0's too
    soft = client.pin(tag="set", ttl_ms=60_000)
    assert soft.pinned == len(DOCS) and soft.until_unix_ns < 2**64 - 1
    (m,) = client.list(tag="doc0").entries
    assert m.pinned_until_unix_ns == soft.until_unix_ns
    assert client.unpin(tag="doc0") == 1
    assert client.unpin(all_of_tenant=True) == len(DOCS) - 1
    assert all(e.pinned_until_unix_ns == 0 for e in client.list().entries)
    with pytest.raises(hypic.HypicError) as e:
        client.pin(tag="no-such-tag")
    assert code_of(e) == "NOT_FOUND"
    with pytest.raises(hypic.HypicError):
        client.pin()


def test_stats(client: hypic.Client) -> None:
    warm_docs(client)
    s = client.stats()
    tiers = {t.tier: t for t in s.tiers}
    assert set(tiers) == {hypic.Tier.HBM, hypic.Tier.HOST, hypic.Tier.NVME}
    assert tiers[hypic.Tier.HOST].present and tiers[hypic.Tier.HOST].capacity == 64 << 20
    assert not tiers[hypic.Tier.NVME].present and tiers[hypic.Tier.NVME].why_absent
    assert s.entries == 4 and s.requests_in_flight == 0  # not counting this call


def test_policy(client: hypic.Client) -> None:
    before = client.get_policy("host")
    assert before.tier == hypic.Tier.HOST and before.evict == "gdsf" and before.admit == "always"
    try:
        now = client.set_policy(hypic.Tier.HOST, evict="lru", admit="min-tokens", min_tokens=8)
        assert (now.evict, now.admit, now.min_tokens) == ("lru", "min-tokens", 8)
        assert client.get_policy("HOST").evict == "lru"
        with pytest.raises(hypic.HypicError) as e:
            client.set_policy("host", evict="bogus", admit="always")
        assert code_of(e) == "INVALID_ARGUMENT"
    finally:
        client.set_policy("host", evict=before.evict, admit=before.admit, min_tokens=before.min_tokens)
    with pytest.raises(hypic.HypicError) as e:
        client.get_policy("nvme")  # this daemon has no NVMe tier
    assert code_of(e) == "FAILED_PRECONDITION"


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, code, says",
    [
        (lambda c: c.lookup("nosuch", DOCS), "NOT_FOUND", "is not served here"),
        (lambda c: c.lookup("", DOCS), "INVALID_ARGUMENT", "field 'model' is empty"),
        (lambda c: c.lookup(MODEL, []), "INVALID_ARGUMENT", "field 'segments' is empty"),
        (lambda c: c.lookup(MODEL, [[3, 300]]), "INVALID_ARGUMENT", "outside the vocabulary"),
        (lambda c: c.lookup(MODEL, DOCS, seam=65), "INVALID_ARGUMENT", "field 'seam'"),
        (lambda c: c.lookup(MODEL, [[]]), "INVALID_ARGUMENT", "no tokens"),
        (lambda c: c.lookup(MODEL, DOCS, lease_ms=10**6), "INVALID_ARGUMENT", "lease_ms"),
        (lambda c: list(c.warm(MODEL, [bytes(32)])), "INVALID_ARGUMENT", "needs its tokens"),
        (lambda c: c.prefill(MODEL, DOCS, []), "INVALID_ARGUMENT", "field 'query' is empty"),
        (lambda c: c.prefill(MODEL, DOCS, "?", top_k=1000), "INVALID_ARGUMENT", "top_k"),
        (lambda c: c.prefill(MODEL, [bytes(32)], "?"), "NOT_FOUND", "is not cached"),
        (lambda c: c.lookup(MODEL, DOCS, tenant="mallory"), "PERMISSION_DENIED", "tenant"),
        (lambda c: c.get_policy(hypic.Tier.NONE), "INVALID_ARGUMENT", "name a tier"),
        (lambda c: c.list(page_size=5000), "INVALID_ARGUMENT", "page_size"),
    ],
)
def test_server_refusals(client: hypic.Client, call, code: str, says: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(hypic.HypicError) as e:
        call(client)
    assert code_of(e) == code and says in e.value.message, e.value


def test_deadline(daemon: Daemon) -> None:
    with hypic.Client(daemon.addr, timeout=0.001) as c:
        with pytest.raises(hypic.HypicError) as e:
            c.prefill(MODEL, DOCS * 8, QUESTION, mode="full")
        assert code_of(e) == "DEADLINE_EXCEEDED"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _health_server(port: int) -> grpc.Server:
    """A server of Health alone (an empty HealthResponse) on the port."""
    srv = grpc.server(futures.ThreadPoolExecutor(2))
    h = grpc.method_handlers_generic_handler(
        "hypic.v1.Cache", {"Health": grpc.unary_unary_rpc_method_handler(lambda rq, ctx: b"")}
    )
    srv.add_generic_rpc_handlers((h,))
    srv.add_insecure_port(f"127.0.0.1:{port}")
    srv.start()
    return srv


def test_server_late() -> None:
    """Nothing listening: UNAVAILABLE with the dial's reason, well within the deadline; a
    server that starts listening 300 ms into a call, or comes back after it went: served
    within the call's deadline. Before, a refused dial failed the call and every call after
    it for gRPC's backoff (1-2 s), with the first failure's message."""
    port = _free_port()
    with hypic.Client(f"127.0.0.1:{port}", timeout=5) as c:
        t0 = time.monotonic()
        with pytest.raises(hypic.HypicError) as e:
            c.health()
        assert code_of(e) == "UNAVAILABLE" and "refused" in e.value.message
        assert time.monotonic() - t0 < 2.5
        holder: list[grpc.Server] = []
        starter = threading.Timer(0.3, lambda: holder.append(_health_server(port)))
        starter.start()
        t0 = time.monotonic()
        c.health()
        assert time.monotonic() - t0 < 2.5
        starter.join()
        srv = holder[0]
        for _ in range(3):
            srv.stop(None).wait()
            with pytest.raises(hypic.HypicError):
                c.health()
            srv = _health_server(port)
            t0 = time.monotonic()
            c.health()
            assert time.monotonic() - t0 < 2.5
        srv.stop(None)


def test_generic_call_and_threads(client: hypic.Client) -> None:
    r = client.call("Health", pb.HealthRequest())
    assert isinstance(r, pb.HealthResponse) and r.status == hypic.HealthStatus.SERVING
    warm_docs(client)
    answers: list[str] = []

    def ask() -> None:
        answers.append(
            hypic.detokenize(client.prefill(MODEL, DOCS[::-1], QUESTION, max_new_tokens=3).generated)
        )

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [ANSWER] * 4


# ---- TLS, tokens and tenants -------------------------------------------------------------


def test_tls_and_bearer_tokens(secure_daemon: Daemon) -> None:
    with tls_client(secure_daemon, None) as anon:
        assert anon.health().status == hypic.HealthStatus.SERVING  # Health needs no token
        with pytest.raises(hypic.HypicError) as e:
            anon.stats()
        assert code_of(e) == "UNAUTHENTICATED" and "no bearer token" in e.value.message
    with tls_client(secure_daemon, "not-a-token-of-this-server") as wrong:
        with pytest.raises(hypic.HypicError) as e:
            wrong.stats()
        assert code_of(e) == "UNAUTHENTICATED"
    with hypic.Client(secure_daemon.addr, token=ALICE, timeout=5) as plain:
        with pytest.raises(hypic.HypicError) as e:
            plain.health()
        assert code_of(e) == "UNAVAILABLE"
    with tls_client(secure_daemon, ALICE, ca="other-ca.pem") as untrusting:
        with pytest.raises(hypic.HypicError) as e:
            untrusting.health()
        assert code_of(e) == "UNAVAILABLE"
    ca = (TLS / "ca.pem").read_bytes()
    with hypic.Client(secure_daemon.addr, token=ALICE, tls_root_pem=ca, tls_server_name="localhost") as named:
        assert named.health().status == hypic.HealthStatus.SERVING
    with hypic.Client(secure_daemon.addr, tls_root_pem=ca, tls_server_name="other.example", timeout=5) as bad:
        with pytest.raises(hypic.HypicError) as e:
            bad.health()
        assert code_of(e) == "UNAVAILABLE"


def test_mutual_tls(mtls_daemon: Daemon) -> None:
    ca = (TLS / "members-ca.pem").read_bytes()
    cert, key = (TLS / "member.pem").read_bytes(), (TLS / "member.key").read_bytes()
    with hypic.Client(mtls_daemon.addr, token=ALICE, tls_root_pem=ca, tls_cert_pem=cert, tls_key_pem=key) as c:
        assert c.health().status == hypic.HealthStatus.SERVING
        assert c.list().total >= 0
    with hypic.Client(mtls_daemon.addr, token=ALICE, tls_root_pem=ca, timeout=5) as bare:
        with pytest.raises(hypic.HypicError) as e:
            bare.health()
        assert code_of(e) == "UNAVAILABLE"  # refused at the handshake: no certificate
    stranger = (TLS / "stranger.pem").read_bytes(), (TLS / "stranger.key").read_bytes()
    with hypic.Client(
        mtls_daemon.addr, token=ALICE, tls_root_pem=ca, tls_cert_pem=stranger[0], tls_key_pem=stranger[1], timeout=5
    ) as other:
        with pytest.raises(hypic.HypicError) as e:
            other.health()
        assert code_of(e) == "UNAVAILABLE"  # a certificate of another authority
    with pytest.raises(hypic.HypicError) as e:
        hypic.Client(mtls_daemon.addr, tls_root_pem=ca, tls_cert_pem=cert)
    assert "both or neither" in e.value.message


def test_tenants_are_isolated(secure_daemon: Daemon) -> None:
    with tls_client(secure_daemon, ALICE) as alice, tls_client(secure_daemon, BOB) as bob:
        alice.invalidate(all_of_tenant=True)
        bob.invalidate(all_of_tenant=True)
        key = warm_docs(alice)[0].key
        assert alice.list().total == 4 and alice.get_entry(MODEL, key).meta.tenant == "alice"
        assert bob.list().total == 0
        assert not bob.lookup(MODEL, [key]).segments[0].hit
        assert not bob.lookup(MODEL, [DOCS[0]]).segments[0].hit  # another tenant, another key
        for call in (lambda: bob.inspect(key), lambda: bob.get_entry(MODEL, key)):
            with pytest.raises(hypic.HypicError) as e:
                call()
            assert code_of(e) == "NOT_FOUND"
        assert bob.invalidate(key=key) == 0
        assert alice.inspect(key).meta.key == key
        with pytest.raises(hypic.HypicError) as e:
            bob.list(tenant="alice")
        assert code_of(e) == "PERMISSION_DENIED"
        assert bob.list(tenant="bob").total == 0
        with pytest.raises(hypic.HypicError) as e:
            bob.set_policy("host", evict="lru", admit="always")
        assert code_of(e) == "PERMISSION_DENIED"
        assert bob.stats().entries == 0 and alice.stats().entries == 4
        entry = alice.get_entry(MODEL, key)
        entry.meta.tenant = ""
        with pytest.raises(hypic.HypicError) as e:
            bob.put_entry(entry)  # alice's key is not the key of these tokens for bob
        assert code_of(e) == "INVALID_ARGUMENT" and "meta.key" in e.value.message
        entry.meta.key = b""  # PutEntry stamps the caller's tenant: bob's copy has bob's key
        copied = bob.put_entry(entry)
        assert copied.key != key and bob.list().total == 1
