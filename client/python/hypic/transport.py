"""Transport sessions: a buffer of this process that hypic-cached writes states and entries into.

The Python side of docs/transports.md (the contract) and client/session.c (the C client
this mirrors). `Client.session(kinds, capacity)` calls OpenTransport with one offer per
kind, best first; the daemon takes the first it can serve, and the session attaches:

  shm  a memfd of `capacity` bytes, mapped here, is passed over the daemon's Unix socket
       (`shm_socket`) with the HELLO frame (SCM_RIGHTS). The daemon maps the same pages
       and writes into them in place: this process copies nothing. A thread reads the
       DONE/FAIL frames that follow on the socket.
  tcp  a connection to the daemon's data port (`tcp_port`, on the gRPC target's host),
       HELLO, ACK; a thread reads the frames and receives each DATA frame's bytes
       straight into the buffer (an anonymous mapping) at the frame's offset.

  cuda_ipc  a torch CUDA tensor of `capacity` bytes (the caller's, or allocated here on
       the current device) is offered by its CUDA IPC handle, its GPU's PCI bus id and
       its offset in the handle's allocation (torch's own storage sharing gives all
       three). A daemon on this node opens the handle and copies into the tensor; it
       waits for its copies before replying, so the reply is the completion: no attach,
       no thread. `buffer` is then the tensor, and a State's arrays are torch views of it.
       Offered only when asked for (Client.session(cuda=...) or the kind named), and left
       out, saying why, where torch or a GPU is missing.

RDMA needs libibverbs and a registered buffer, which this package does not have: it is
never offered from Python (the C client and hypicctl offer it). shm is offered only when
the daemon is on this host (the target is a loopback address or this host's name), as
the C client decides.

Frames are 32 bytes, little-endian: magic "HYTP", type, transfer id, offset, length
(transport/include/hy_transport.h). HELLO carries the session id in the id field and the
16-byte secret OpenTransport answered in offset and length; the ACK's length is 0, or
the daemon's refusal (minus an hy error code).

A transfer is the client's when both the gRPC reply is OK and this session's thread has
seen its DONE: `wait(xfer)` gives the second (Client.prefill_state and get_entry_into
call it). The buffer is valid for reading after that and until the session's next
transfer writes over it.

Closing: CloseTransport (best effort: the daemon also drops a session whose connection
closes), the thread stopped, the buffer unmapped. numpy arrays and memoryviews over the
buffer keep the mapping alive after close (it is unmapped when the last of them goes),
so a view never points at freed memory; nothing writes into it any more.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket
import struct
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._gen import hypic_pb2 as pb
from .errors import HypicError, client_error
from .types import Transport, to_enum, wire

if TYPE_CHECKING:
    from .client import Client

MAGIC = 0x50545948  # "HYTP"
FRAME_BYTES = 32
SECRET_BYTES = 16
HELLO, ACK, DATA, DONE, FAIL = 1, 2, 3, 4, 5
_FRAME = struct.Struct("<IIQQQ")  # magic, type, xfer, offset, length
_KEEP_DONE = 64  # completions remembered, as the C receiver keeps them
DEFAULT_CAPACITY = 64 << 20
# hy_err codes (common/include/hy_common.h) an ACK may carry, negated.
_HY_ERRORS = {
    1: "invalid argument (wrong secret)",
    2: "out of memory",
    3: "I/O error",
    4: "malformed HELLO",
    5: "no such pending session",
    6: "unsupported",
    7: "out of range",
}


@dataclass(frozen=True)
class Frame:
    type: int
    xfer: int
    offset: int
    length: int

    def pack(self) -> bytes:
        return _FRAME.pack(MAGIC, self.type, self.xfer, self.offset, self.length)

    @classmethod
    def unpack(cls, b: bytes | bytearray) -> Frame:
        magic, typ, xfer, off, n = _FRAME.unpack(b)
        if magic != MAGIC or not HELLO <= typ <= FAIL:
            raise ValueError(f"not a transport frame (magic {magic:#x}, type {typ})")
        return cls(typ, xfer, off, n)


def hello(session: int, secret: bytes) -> bytes:
    """The attach frame: session id, then the 16-byte secret verbatim in offset and length."""
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"a secret is {SECRET_BYTES} bytes, not {len(secret)}")
    return struct.pack("<IIQ", MAGIC, HELLO, session) + secret


def is_local_host(host: str) -> bool:
    """Whether a target host is this machine: loopback names and addresses, or its own name
    (client/session.c's local_host)."""
    h = host.strip("[]")
    return h in ("localhost", "::1", socket.gethostname()) or h.startswith("127.")


def split_target(target: str) -> str:
    """The host of a gRPC target "host:port", "[v6]:port", "dns:///host:port" (a unix: target
    is this host)."""
    if target.startswith(("unix:", "unix-abstract:")):
        return "localhost"  # a Unix socket: the daemon is on this host
    t = target.split("///", 1)[-1]
    if t.startswith("["):
        return t[1 : t.index("]")]
    return t.rsplit(":", 1)[0] if ":" in t else t


def _recv_exactly(sock: socket.socket, view: memoryview) -> None:
    """Fills view from sock; ConnectionError when the peer closes first."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the daemon closed the connection")
        got += n


class Session:
    """An attached transport session: `buffer` (a mmap of `capacity` bytes) is written by the
    daemon; `wait(xfer)` tells when a transfer is whole. Made by Client.session; a context
    manager (close on exit). One transfer at a time (the daemon serialises them)."""

    def __init__(
        self,
        client: Client,
        accept: pb.OpenTransportResponse,
        capacity: int,
        passed_over: str,
        tenant: str = "",
        device_buffer: object = None,
    ) -> None:
        self.client = client
        self.id = int(accept.session)
        self.kind = Transport(accept.kind)
        self.capacity = capacity
        self.passed_over = passed_over
        self.tenant = tenant
        self._cv = threading.Condition()
        self._done: OrderedDict[int, Frame] = OrderedDict()
        self._dead = ""  # why the connection is gone ("" while it is up)
        self._closing = False
        self.generation = 0  # transfers asked of this session so far (State.valid)
        self._sock: socket.socket | None = None
        self._fd = -1
        self.buffer: mmap.mmap
        if self.kind == Transport.CUDA_IPC:
            if device_buffer is None:
                raise ValueError("the server took cuda_ipc, which was not offered")
            self.buffer = device_buffer  # a torch uint8 tensor on the GPU
        elif self.kind == Transport.SHM:
            # the daemon maps these same pages (MAP_SHARED over the memfd); it takes only
            # a memfd sealed at exactly this size, so that neither side can shrink it
            # under the other's mapping
            self._fd = os.memfd_create(f"hypic-session-{self.id}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(self._fd, capacity)
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.buffer = mmap.mmap(self._fd, capacity)
        else:
            self.buffer = mmap.mmap(-1, capacity)
        self._thread = threading.Thread(target=self._read_frames, name=f"hypic-session-{self.id}", daemon=True)

    # ---- attach ----------------------------------------------------------------------

    def _attach(self, accept: pb.OpenTransportResponse, host: str) -> None:
        if self.kind == Transport.CUDA_IPC:
            return  # nothing to attach: the daemon opened the handle at OpenTransport
        if len(accept.secret) != SECRET_BYTES:
            raise ConnectionError(f"the server sent a {len(accept.secret)}-byte secret, not {SECRET_BYTES}")
        frame = hello(self.id, accept.secret)
        if self.kind == Transport.SHM:
            where = accept.shm_socket
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock = s
            s.settimeout(10.0)
            s.connect(where)
            socket.send_fds(s, [frame], [self._fd])
            os.close(self._fd)  # the mapping and the daemon hold the pages now
            self._fd = -1
        elif self.kind == Transport.TCP:
            where = f"{host}:{accept.tcp_port}"
            s = socket.create_connection((host, accept.tcp_port), timeout=10.0)
            self._sock = s
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(frame)
        else:
            raise ConnectionError(f"the server took transport {self.kind.name.lower()}, which was not offered")
        ack = bytearray(FRAME_BYTES)
        _recv_exactly(s, memoryview(ack))
        f = Frame.unpack(ack)
        if f.type != ACK:
            raise ConnectionError(f"{where}: frame type {f.type}, want ACK ({ACK})")
        if f.length != 0:
            why = _HY_ERRORS.get(f.length, f"error {-f.length}")
            raise ConnectionError(
                f"{where}: the server refused to attach session {self.id} ({why}): "
                "check the id and secret OpenTransport returned, and that it has not expired"
            )
        s.settimeout(None)  # the reader blocks until frames come or close() shuts it down
        self._thread.start()

    # ---- the reader -----------------------------------------------------------------

    def _read_frames(self) -> None:
        assert self._sock is not None
        s, kind = self._sock, self.kind.name.lower()
        head = bytearray(FRAME_BYTES)
        buf = memoryview(self.buffer)
        try:
            while True:
                _recv_exactly(s, memoryview(head))
                f = Frame.unpack(head)
                if f.type == DATA:
                    if self.kind != Transport.TCP:
                        raise ConnectionError(f"{kind}: a DATA frame on a transport without them")
                    if f.offset > self.capacity or f.length > self.capacity - f.offset:
                        raise ConnectionError(
                            f"{kind}: DATA frame of {f.length} bytes at {f.offset} is outside "
                            f"the {self.capacity}-byte buffer"
                        )
                    _recv_exactly(s, buf[f.offset : f.offset + f.length])
                elif f.type in (DONE, FAIL):
                    with self._cv:
                        self._done[f.xfer] = f
                        while len(self._done) > _KEEP_DONE:
                            self._done.popitem(last=False)
                        self._cv.notify_all()
                else:
                    raise ConnectionError(f"{kind}: unexpected frame type {f.type}")
        except (OSError, ValueError) as e:
            with self._cv:
                self._dead = "the session was closed" if self._closing else f"{kind}: {e}"
                self._cv.notify_all()
        finally:
            buf.release()

    def wait(self, xfer: int, timeout: float | None = 10.0) -> tuple[int, int]:
        """Blocks until transfer xfer is complete: answers (offset, bytes) as its DONE says.
        HypicError UNAVAILABLE "client: ..." when it failed, the connection dropped, or
        timeout seconds (None: no limit) passed. Completions of other transfers that
        arrive meanwhile are remembered (the last 64)."""

        if self.kind == Transport.CUDA_IPC:
            return 0, 0  # the daemon synchronised before its OK reply: nothing to wait for

        def settled() -> bool:
            return xfer in self._done or bool(self._dead)

        with self._cv:
            ok = self._cv.wait_for(settled, timeout)
            f = self._done.get(xfer)
            dead = self._dead
        where = f"client: transfer {xfer} on session {self.id}"
        if f is not None and f.type == DONE:
            return f.offset, f.length
        if f is not None:
            raise client_error(f"{where}: transfer {xfer} failed", "UNAVAILABLE")
        if not ok:
            raise client_error(f"{where}: no completion in {timeout} s", "UNAVAILABLE")
        raise client_error(f"{where}: {dead}", "UNAVAILABLE")

    def begin_transfer(self) -> int:
        """Marks that a call is about to write the buffer (States of earlier transfers stop
        being valid); answers the new generation."""
        self.generation += 1
        return self.generation

    # ---- closing ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closing

    def close(self) -> None:
        """CloseTransport (best effort), then the connection, the thread and the mapping.
        Idempotent."""
        if self._closing:
            return
        self._closing = True
        try:
            self.client.close_transport(self.id, tenant=self.tenant)
        except (HypicError, ValueError):
            pass  # refused, or the client's channel is closed: the daemon also ends a session
            # whose connection closes
        self._disconnect()

    def _disconnect(self) -> None:
        self._closing = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            if self._thread.is_alive():
                self._thread.join(5.0)
            self._sock.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self.kind == Transport.CUDA_IPC:
            return  # the tensor is the caller's (or goes with its last reference)
        try:
            self.buffer.close()
        except BufferError:
            pass  # views of it are alive: the mapping goes with the last of them

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closing else "open"
        return f"Session(id={self.id}, kind={self.kind.name.lower()}, capacity={self.capacity}, {state})"


def parse_kinds(kinds: Sequence[Transport | int | str] | str) -> list[Transport]:
    """The kinds to offer, best first: names, ints or members; "shm,tcp" as one string.
    INVALID_ARGUMENT "client: ..." for an unknown kind, one given twice, RDMA or none."""
    items: Sequence[Transport | int | str] = kinds.split(",") if isinstance(kinds, str) else kinds
    out: list[Transport] = []
    for k in items:
        if isinstance(k, str) and k.strip().lower() not in ("tcp", "shm", "rdma", "cuda_ipc"):
            raise client_error(f"transport '{k}' is not tcp, shm, rdma or cuda_ipc")
        t = to_enum(Transport, k.strip() if isinstance(k, str) else k, "transport", Transport.NONE)
        if t == Transport.NONE:
            raise client_error(f"transport {k!r} is not tcp, shm, rdma or cuda_ipc")
        if t == Transport.RDMA:
            raise client_error("transport rdma is not available from Python (use the C client or hypicctl)")
        if t in out:
            raise client_error(f"transport {t.name.lower()} given twice")
        out.append(t)
    if not out:
        raise client_error("no transport to offer")
    return out


def cuda_offer(capacity: int, tensor: object = None) -> tuple[pb.TransportOffer, object]:
    """A cuda_ipc offer for tensor (a torch CUDA tensor of at least capacity bytes; None: a
    uint8 tensor of capacity bytes allocated on the current device) and the uint8 view the
    daemon will write into. ValueError saying why when this process cannot offer one (no
    torch, no GPU, a tensor on the CPU or too small, not contiguous)."""
    try:
        import torch
    except ImportError:
        raise ValueError("no torch to hold GPU memory (pip install torch)") from None
    if tensor is None:
        if not torch.cuda.is_available():
            raise ValueError("no CUDA device (torch.cuda.is_available() is False)")
        tensor = torch.empty(capacity, dtype=torch.uint8, device="cuda")
    t = tensor
    if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
        raise ValueError("the buffer must be a torch tensor on a CUDA device")
    if not t.is_contiguous():
        raise ValueError("the buffer tensor must be contiguous")
    if t.numel() * t.element_size() < capacity:
        raise ValueError(f"the buffer tensor holds {t.numel() * t.element_size()} bytes, fewer than {capacity}")
    view = t.view(torch.uint8).reshape(-1)[:capacity]
    # torch's own sharing (torch.multiprocessing's): the allocation's IPC handle, and the
    # storage's offset in that allocation
    shared = t.untyped_storage()._share_cuda_()
    handle, storage_offset = bytes(shared[1]), int(shared[3])
    props = torch.cuda.get_device_properties(t.device)
    bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    offset = storage_offset + t.storage_offset() * t.element_size()
    peer = pb.CudaIpcPeer(handle=handle, pci_bus_id=bus, offset=offset)
    return pb.TransportOffer(kind=wire(Transport.CUDA_IPC), capacity=capacity, cuda_ipc=peer), view


def open_session(
    client: Client,
    kinds: Sequence[Transport | int | str] | str,
    capacity: int,
    tenant: str = "",
    cuda: object = None,
) -> Session:
    """Client.session: offers, OpenTransport, attach (module docstring)."""
    wanted = parse_kinds(kinds)
    if not 0 < capacity:
        raise client_error(f"a session buffer of {capacity} bytes")
    host = split_target(client.target)
    passed: list[str] = []
    offers: list[Transport | pb.TransportOffer] = []
    device_buffer = None
    for k in wanted:
        if k == Transport.SHM and not is_local_host(host):
            passed.append(f"shm (the server, {host}, is not on this host)")
            continue
        if k == Transport.CUDA_IPC:
            try:
                offer, device_buffer = cuda_offer(capacity, cuda)
            except (ValueError, RuntimeError) as e:
                passed.append(f"cuda_ipc (this client: {e})")
                continue
            offers.append(offer)
            continue
        offers.append(k)
    if not offers:
        raise client_error("nothing to offer: " + "; ".join(passed), "FAILED_PRECONDITION")
    accept = client.open_transport(offers, capacity, tenant=tenant)
    if accept.passed_over:
        passed.append(accept.passed_over)
    try:
        s = Session(client, accept, capacity, "; ".join(passed), tenant, device_buffer)
    except (OSError, ValueError) as e:  # no memory for the buffer, a kind this client lacks
        try:
            client.close_transport(accept.session, tenant=tenant)
        except HypicError:
            pass
        raise client_error(f"transport session {accept.session}: {e}", "UNAVAILABLE") from None
    try:
        s._attach(accept, host)
    except (OSError, ValueError) as e:
        s.close()
        raise client_error(f"attaching transport session {s.id} ({s.kind.name.lower()}): {e}", "UNAVAILABLE") from None
    return s


def offers_of(kinds: Sequence[Transport | int | str | pb.TransportOffer], capacity: int) -> list[pb.TransportOffer]:
    """OpenTransport's offers: a TransportOffer as it is, anything else a kind with capacity."""
    out = []
    for k in kinds:
        if isinstance(k, pb.TransportOffer):
            out.append(k)
        else:
            out.append(
                pb.TransportOffer(kind=wire(to_enum(Transport, k, "transport", Transport.NONE)), capacity=capacity)
            )
    return out
