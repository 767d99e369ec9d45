"""Transport sessions from Python against a live hypic-cached (conftest.py starts it): the
running state after [segments..., query] delivered over shm and over TCP into this
process's buffer, read in place as numpy views laid out as docs/transports.md says;
GetEntry into a session; and the refusals, which leave the daemon serving.

The C side checks the delivered values against its own executor
(tests/cached/test_state_delivery.c); here the two transports must agree bit for bit, and
the layout must be the model's.

Run: tests/client/test_python.sh build/cached/hypic-cached
"""

from __future__ import annotations

import json
import mmap
import socket
import threading

import numpy as np
import pytest
from conftest import EXAMPLES, MODEL_DIR

import hypic
from hypic import pb
from hypic.state import ALIGN, LayerTensor, State
from hypic.transport import ACK, DATA, DONE, FAIL, HELLO, Frame, Session, hello, is_local_host, split_target

MODEL = "recall"
DOCS = [(EXAMPLES / f"doc{i}.txt").read_text() for i in range(1, 5)]
QUESTION = (EXAMPLES / "question.txt").read_text()
CFG = json.loads((MODEL_DIR / "config.json").read_text())
TOKENS = sum(len(hypic.tokenize(d)) for d in DOCS) + len(hypic.tokenize(QUESTION))


def code_of(excinfo: pytest.ExceptionInfo[hypic.HypicError]) -> str:
    return excinfo.value.code


def whole_state(st: hypic.State) -> list[np.ndarray]:
    return [t.array.copy() for t in st.tensors]


# ---- without a daemon ------------------------------------------------------------------


def test_frames_are_the_wire_format() -> None:
    secret = bytes(range(16))
    h = hello(7, secret)
    assert len(h) == 32 and h[:4] == b"HYTP" and h[4:8] == bytes([HELLO, 0, 0, 0])
    assert h[8:16] == (7).to_bytes(8, "little") and h[16:] == secret
    f = Frame(DONE, 3, 256, 4096)
    assert Frame.unpack(f.pack()) == f and len(f.pack()) == 32
    with pytest.raises(ValueError):
        Frame.unpack(b"XXXX" + f.pack()[4:])
    with pytest.raises(ValueError):
        Frame.unpack(Frame(FAIL + 1, 0, 0, 0).pack())


def test_shm_only_to_this_host() -> None:
    assert split_target("127.0.0.1:7878") == "127.0.0.1"
    assert split_target("[::1]:7878") == "::1"
    assert split_target("dns:///localhost:7878") == "localhost"
    assert split_target("unix:/run/hypic.sock") == "localhost"
    for h in ("127.0.0.1", "127.1.2.3", "localhost", "::1"):
        assert is_local_host(h), h
    assert not is_local_host("10.1.2.3") and not is_local_host("cache.example")
    c = hypic.Client("198.51.100.7:1")  # never reached: the client refuses first
    with pytest.raises(hypic.HypicError) as e:
        c.session(["shm"])
    assert code_of(e) == "FAILED_PRECONDITION" and "not on this host" in e.value.message
    c.close()


@pytest.mark.parametrize(
    "kinds, says",
    [
        (["udp"], "not tcp, shm, rdma or cuda_ipc"),
        ("shm,carrier-pigeon", "not tcp, shm, rdma or cuda_ipc"),
        (["tcp", "tcp"], "given twice"),
        (["rdma", "tcp"], "not available from Python"),
        ([], "no transport"),
        ([7], "not a Transport"),
    ],
)
def test_bad_kinds_are_refused_before_sending(kinds, says: str) -> None:  # type: ignore[no-untyped-def]
    c = hypic.Client("127.0.0.1:1")  # nothing listens there
    with pytest.raises(hypic.HypicError) as e:
        c.session(kinds)
    assert code_of(e) == "INVALID_ARGUMENT" and e.value.message.startswith("client: ")
    assert says in e.value.message
    c.close()


def fake_daemon(script: list[bytes], ack: int = 0) -> tuple[int, threading.Thread, list[bytes]]:
    """A data port that takes one attach, answers ACK(ack), then sends script's frames and
    bytes: the reader's side of the wire without a daemon, failures included."""
    lsock = socket.create_server(("127.0.0.1", 0))
    hellos: list[bytes] = []

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn, lsock:
            hellos.append(conn.recv(32, socket.MSG_WAITALL))
            conn.sendall(Frame(ACK, 5, 5, ack).pack())
            for part in script:
                conn.sendall(part)
            conn.recv(1)  # until the client hangs up

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return lsock.getsockname()[1], t, hellos


def test_the_tcp_reader_places_data_and_reports_failures() -> None:
    secret = bytes(range(100, 116))
    port, t, hellos = fake_daemon(
        [
            Frame(DATA, 1, 8, 4).pack() + b"abcd",
            Frame(DONE, 1, 8, 4).pack(),
            Frame(FAIL, 2, 0, 0).pack(),
            Frame(DATA, 3, 4096 - 2, 4).pack(),  # past the 4096-byte buffer: the session is dead
        ]
    )
    c = hypic.Client("127.0.0.1:1", timeout=1)  # CloseTransport at close goes nowhere
    accept = pb.OpenTransportResponse(kind=pb.TRANSPORT_TCP, session=5, secret=secret, tcp_port=port)
    s = Session(c, accept, 4096, "")
    s._attach(accept, "127.0.0.1")
    assert s.wait(1, 5.0) == (8, 4) and s.buffer[8:12] == b"abcd"
    with pytest.raises(hypic.HypicError, match="transfer 2 failed") as e:
        s.wait(2, 5.0)
    assert code_of(e) == "UNAVAILABLE"
    with pytest.raises(hypic.HypicError, match="outside the 4096-byte buffer"):
        s.wait(3, 5.0)
    assert s.wait(1, 0) == (8, 4)  # completions are remembered
    assert hellos == [hello(5, secret)]
    s.close()
    t.join(5)
    c.close()

    port, t, _ = fake_daemon([], ack=5)  # refused: no such pending session
    accept.tcp_port = port
    s = Session(c, accept, 4096, "")
    with pytest.raises(ConnectionError, match="refused to attach session 5 .no such pending session"):
        s._attach(accept, "127.0.0.1")
    s._disconnect()
    t.join(5)


# ---- deliveries ------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["shm", "tcp"])
def test_a_state_is_delivered(client: hypic.Client, kind: str) -> None:
    plain = client.prefill(MODEL, DOCS, QUESTION, mode="full", top_k=3)
    with client.session([kind], 8 << 20) as s:
        assert s.kind == hypic.Transport[kind.upper()] and s.id > 0 and s.passed_over == ""
        r, st = client.prefill_state(s, MODEL, DOCS, QUESTION, mode="full", top_k=3, max_new_tokens=3)
        d = r.state
        assert d.transport == s.kind and d.session == s.id and d.transfer == st.transfer
        assert d.bytes > 0 and d.offset == 0 and st.position == TOKENS
        # the state is the one before the continuation, and asking for it changes no answer
        assert [t.token for t in r.top] == [t.token for t in plain.top]
        assert hypic.detokenize(r.generated) == "002"
        assert st.valid and all(np.isfinite(t.array).all() for t in st.tensors)
        assert any(np.abs(t.array).sum() > 0 for t in st.tensors)


def test_cuda_ipc_falls_back_or_delivers_into_the_gpu(client: hypic.Client) -> None:
    """cuda_ipc offered first: where this process has no torch or no GPU it is left out,
    saying why, and tcp serves; with one, the state lands in a CUDA tensor and equals the
    one tcp delivers."""
    with client.session(["tcp"], 8 << 20) as t:
        _, want = client.prefill_state(t, MODEL, DOCS, QUESTION, mode="full")
        want_arrays = [x.array.copy() for x in want.tensors]
    with client.session(["cuda_ipc", "tcp"], 8 << 20) as s:
        if s.kind != hypic.Transport.CUDA_IPC:
            assert s.kind == hypic.Transport.TCP and "cuda_ipc (this client: " in s.passed_over
            print(f"cuda_ipc delivery skipped: {s.passed_over}")
            return
        _, got = client.prefill_state(s, MODEL, DOCS, QUESTION, mode="full")
        for g, w in zip(got.tensors, want_arrays, strict=True):
            np.testing.assert_array_equal(g.array.cpu().numpy(), w)


def test_a_cuda_ipc_offer_the_daemon_cannot_open_falls_back(client: hypic.Client) -> None:
    """A well-formed handle no process exported (or a daemon without CUDA): the next offer
    is taken and passed_over says why; a malformed one is refused naming its field."""
    peer = pb.CudaIpcPeer(handle=b"\x07" * 64, pci_bus_id="0000:3b:00.0")
    offer = pb.TransportOffer(kind=pb.TRANSPORT_CUDA_IPC, capacity=1 << 20, cuda_ipc=peer)
    a = client.open_transport([offer, "tcp"], 1 << 20)
    assert a.kind == pb.TRANSPORT_TCP and "cuda_ipc (" in a.passed_over
    client.close_transport(a.session)
    bad = pb.TransportOffer(
        kind=pb.TRANSPORT_CUDA_IPC, capacity=1 << 20, cuda_ipc=pb.CudaIpcPeer(handle=b"\x07" * 8)
    )
    with pytest.raises(hypic.HypicError) as e:
        client.open_transport([bad, "tcp"], 1 << 20)
    assert code_of(e) == "INVALID_ARGUMENT" and "offers[0].cuda_ipc.handle" in e.value.message


def test_shm_and_tcp_deliver_the_same_bytes(client: hypic.Client) -> None:
    got = {}
    for kind in ("shm", "tcp"):
        with client.session([kind], 8 << 20) as s:
            _, st = client.prefill_state(s, MODEL, DOCS, QUESTION, mode="full", top_k=1)
            got[kind] = (whole_state(st), [(t.layer, t.kind) for t in st.tensors])
    assert got["shm"][1] == got["tcp"][1]
    for a, b in zip(got["shm"][0], got["tcp"][0]):
        assert a.tobytes() == b.tobytes()  # bit-identical: the same request in mode full


def test_the_layout_is_the_models(client: hypic.Client) -> None:
    k = CFG["linear_conv_kernel_dim"]
    hk, dk = CFG["linear_num_key_heads"], CFG["linear_key_head_dim"]
    hv, dv = CFG["linear_num_value_heads"], CFG["linear_value_head_dim"]
    hkv, hd = CFG["num_key_value_heads"], CFG["head_dim"]
    conv_dim = 2 * hk * dk + hv * dv
    with client.session(capacity=8 << 20) as s:
        assert s.kind == hypic.Transport.SHM  # the default offers shm first, and this is its host
        r, st = client.prefill_state(s, MODEL, DOCS, QUESTION, mode="full", state_offset=4096)
        d = r.state
        assert st.num_layers == CFG["num_hidden_layers"] and len(st.tensors) == 2 * st.num_layers
        assert d.offset == 4096
        end = d.offset
        for i, kind in enumerate(CFG["layer_types"]):
            parts = st.layer(i)
            if kind == "linear_attention":
                assert st.is_linear(i) and list(parts) == ["conv", "S"]
                assert parts["conv"].shape == (k - 1, conv_dim) and parts["S"].shape == (hv, dk, dv)
            else:
                assert not st.is_linear(i) and list(parts) == ["K", "V"]
                assert parts["K"].shape == parts["V"].shape == (st.position, hkv, hd)
        for t in d.tensors:  # in order, aligned, inside the delivery, not overlapping
            assert (t.offset - d.offset) % ALIGN == 0 and t.offset >= end
            assert t.dtype == pb.STATE_DTYPE_F32 and t.bytes == 4 * int(np.prod(t.shape))
            end = t.offset + t.bytes
        assert end <= d.offset + d.bytes <= s.capacity
        with pytest.raises(IndexError):
            st.layer(st.num_layers)


def test_a_layer_without_tensors_and_an_older_daemon() -> None:
    """Delivery.layers counts a layer that keeps no state (Nemotron-H's MLP or MoE blocks):
    in range it is {}, outside it IndexError; from a daemon that does not send the count, it
    is one more than the last layer with a tensor."""
    a = np.zeros((2, 3), np.float32)
    kinds = [hypic.StateKind.CONV, hypic.StateKind.S, hypic.StateKind.K, hypic.StateKind.V]
    tensors = [LayerTensor(layer, k, a) for layer, k in zip([0, 0, 2, 2], kinds)]
    st = State(delivery=pb.Delivery(layers=4), tensors=tensors, session=None, generation=0)  # type: ignore[arg-type]
    assert st.num_layers == 4 and st.layer(1) == {} == st.layer(3)
    assert st.is_linear(0) and not st.is_linear(1) and list(st.layer(2)) == ["K", "V"]
    for i in (-1, 4):
        with pytest.raises(IndexError):
            st.layer(i)
    old = State(delivery=pb.Delivery(), tensors=tensors, session=None, generation=0)  # type: ignore[arg-type]
    assert old.num_layers == 3 and old.layer(1) == {}
    with pytest.raises(IndexError):
        old.layer(3)


def test_the_arrays_are_views_of_the_buffer(client: hypic.Client) -> None:
    with client.session(["tcp"], 8 << 20) as s:
        _, st = client.prefill_state(s, MODEL, DOCS, QUESTION, mode="full")
        raw = np.frombuffer(s.buffer, np.uint8)
        for t in st.tensors:
            assert np.shares_memory(t.array, raw)
            base = t.array
            while isinstance(base, np.ndarray):
                base = base.base
            assert isinstance(base, memoryview) and base.obj is s.buffer  # no copy between the socket and the array
            assert not t.array.flags.writeable
            off = st.delivery.tensors[st.tensors.index(t)].offset
            assert t.array.ctypes.data == raw.ctypes.data + off
        first = whole_state(st)
        # the next transfer writes over the same bytes: the first State is no longer valid,
        # and its views show the second state (layer 0's S lies at the same offset in both)
        _, st2 = client.prefill_state(s, MODEL, DOCS[:2], QUESTION, mode="full")
        assert st2.valid and not st.valid and st2.position < TOKENS
        s0, s0_2 = st.layer(0)["S"], st2.layer(0)["S"]
        assert np.shares_memory(s0, s0_2) and np.array_equal(s0, s0_2)
        assert not np.array_equal(first[1], s0_2)
        kept = st2.tensors[0].array
    # closed: the views keep the mapping alive, so reading them is safe
    assert not st2.valid and np.isfinite(kept).all()


def test_get_entry_into_gives_get_entrys_bytes(client: hypic.Client) -> None:
    keys = [p.key for p in client.warm(MODEL, DOCS)]
    with client.session(["shm", "tcp"], 4 << 20) as s:
        for kind_offset, key in zip((0, 8192), keys[:2]):
            streamed = client.get_entry(MODEL, key)
            meta, view = client.get_entry_into(s, MODEL, key, kind_offset)
            assert meta.key == key and meta.bytes == len(streamed.data) == len(view)
            assert bytes(view) == streamed.data
            assert view.obj is s.buffer
            view.release()
        with pytest.raises(hypic.HypicError) as e:
            client.get_entry_into(s, MODEL, bytes(32))  # not cached: a miss
        assert code_of(e) == "NOT_FOUND"
    with client.session(["tcp"], 4 << 20) as s:
        meta, view = client.get_entry_into(s, MODEL, keys[3])
        assert bytes(view) == client.get_entry(MODEL, keys[3]).data
        view.release()


# ---- refusals ----------------------------------------------------------------------------


def raw_prefill(c: hypic.Client, session: int, offset: int = 0) -> pb.PrefillResponse:
    rq = pb.PrefillRequest(
        model=MODEL,
        segments=[pb.Segment(tokens=pb.Tokens(ids=hypic.tokenize(DOCS[0])))],
        query=hypic.tokenize(QUESTION),
        mode=pb.MODE_FULL,
        return_state=True,
        transport_session=session,
        state_offset=offset,
    )
    return c.call("Prefill", rq)


def test_refusals_leave_the_daemon_serving(client: hypic.Client) -> None:
    with pytest.raises(hypic.HypicError) as e:
        raw_prefill(client, 0)  # return_state without a session
    assert code_of(e) == "INVALID_ARGUMENT"
    with pytest.raises(hypic.HypicError) as e:
        raw_prefill(client, 987654321)  # no such session
    assert code_of(e) == "NOT_FOUND"

    s = client.session(["tcp"], 1 << 20)
    with pytest.raises(hypic.HypicError) as e:
        client.prefill_state(s, MODEL, DOCS, QUESTION, state_offset=s.capacity - 256)
    assert code_of(e) == "RESOURCE_EXHAUSTED" and "bytes" in e.value.message
    with pytest.raises(hypic.HypicError) as e:
        client.get_entry_into(s, MODEL, next(iter(client.warm(MODEL, DOCS[:1]))).key, s.capacity + 1)
    assert code_of(e) == "RESOURCE_EXHAUSTED"
    _, st = client.prefill_state(s, MODEL, DOCS[:1], QUESTION, mode="full")  # still usable
    assert st.position == len(hypic.tokenize(DOCS[0] + QUESTION))
    s.close()
    s.close()  # idempotent
    with pytest.raises(hypic.HypicError) as e:
        client.prefill_state(s, MODEL, DOCS, QUESTION)  # closed: the daemon's answer
    assert code_of(e) == "NOT_FOUND"
    with pytest.raises(hypic.HypicError) as e:
        client.close_transport(s.id)
    assert code_of(e) == "NOT_FOUND"

    tiny = client.session(["shm"], 4096)  # a buffer too small for the state
    with pytest.raises(hypic.HypicError) as e:
        client.prefill_state(tiny, MODEL, DOCS, QUESTION)
    assert code_of(e) == "RESOURCE_EXHAUSTED"
    tiny.close()
    assert client.health().status == hypic.HealthStatus.SERVING


def test_open_transport_directly(client: hypic.Client) -> None:
    a = client.open_transport(["tcp"], 1 << 20)
    assert a.kind == pb.TRANSPORT_TCP and a.session > 0 and len(a.secret) == 16 and a.tcp_port > 0
    client.close_transport(a.session)
    a = client.open_transport([hypic.Transport.SHM, "tcp"], 1 << 20)
    assert a.kind == pb.TRANSPORT_SHM and a.shm_socket and a.passed_over == ""
    client.close_transport(a.session)
    with pytest.raises(hypic.HypicError) as e:
        client.open_transport(["rdma", "tcp"], 1 << 20)  # an RDMA offer needs a queue pair
    assert code_of(e) == "INVALID_ARGUMENT" and "rdma" in e.value.message
    stats = client.stats().transport
    assert stats.tcp_port > 0 and stats.shm_socket
    assert {k.kind for k in stats.kinds} >= {pb.TRANSPORT_TCP, pb.TRANSPORT_SHM}


def test_a_wrong_secret_is_refused_at_the_attach(client: hypic.Client) -> None:
    for kind in ("tcp", "shm"):
        a = client.open_transport([kind], 1 << 20)
        forged = pb.OpenTransportResponse()
        forged.CopyFrom(a)
        forged.secret = bytes(16)
        s = Session(client, forged, 1 << 20, "")
        with pytest.raises(ConnectionError, match=f"refused to attach session {a.session}"):
            s._attach(forged, "127.0.0.1")
        s._disconnect()
        # the session is still the rightful client's to attach
        good = Session(client, a, 1 << 20, "")
        good._attach(a, "127.0.0.1")
        _, st = client.prefill_state(good, MODEL, DOCS[:1], QUESTION, mode="full")
        assert st.position == len(hypic.tokenize(DOCS[0] + QUESTION))
        with pytest.raises(hypic.HypicError) as e:
            good.wait(st.transfer + 1000, timeout=0.2)  # never sent: no completion
        assert code_of(e) == "UNAVAILABLE" and "no completion" in e.value.message
        good.close()


def test_a_mapping_outlives_close_only_through_its_views(client: hypic.Client) -> None:
    s = client.session(["shm"], 1 << 20)
    buf = s.buffer
    s.close()
    assert isinstance(buf, mmap.mmap) and buf.closed  # no view: unmapped at once
