"""The Python face of hypic.v1's types: enums, segments, entries.

Enums are IntEnums with the proto's values and names less their prefix (Tier.HOST is
TIER_HOST = 2), so they compare equal to the ints in response messages
(`r.segments[0].kind == OutcomeKind.HIT`). tests/test_client.py checks that each one
matches its proto enum, so an enum the proto extends fails there first.

Arguments are taken in the forms a caller has at hand and turned into messages here:
an enum as a member, its int, or its name in any case ("pic", "host", "bf16"); a
segment as token ids (a list, a range, a 1-D integer numpy array), a 32-byte key, a
text (the embedded byte tokenizer, hypic.text), or a Segment carrying any of those
with tags.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

import numpy as np

from ._gen import hypic_pb2 as pb
from .errors import client_error
from .text import tokenize

KEY_BYTES = 32


class Tier(IntEnum):
    NONE = 0
    HBM = 1
    HOST = 2
    NVME = 3


class Mode(IntEnum):
    UNSPECIFIED = 0  # the server's default (pic)
    FULL = 1
    PREFIX = 2
    PIC = 3
    NOSEAM = 4
    NAIVE = 5


class StateDtype(IntEnum):
    UNSPECIFIED = 0  # the server's default (pic.dtype)
    F32 = 1
    BF16 = 2


class WarmState(IntEnum):
    UNSPECIFIED = 0
    BUILT = 1
    CACHED = 2
    UNCACHEABLE = 3
    NOT_ADMITTED = 4
    FAILED = 5


class OutcomeKind(IntEnum):
    UNSPECIFIED = 0
    HIT = 1
    MISS = 2
    UNCACHEABLE = 3
    PREFIX = 4


class EventKind(IntEnum):
    UNSPECIFIED = 0
    STORED = 1
    REMOVED = 2
    HEARTBEAT = 3


class Sort(IntEnum):
    KEY = 0
    BYTES = 1
    HITS = 2
    AGE = 3


class HealthStatus(IntEnum):
    UNSPECIFIED = 0
    SERVING = 1
    NOT_SERVING = 2


class Transport(IntEnum):
    NONE = 0
    TCP = 1
    SHM = 2
    RDMA = 3
    CUDA_IPC = 4


class StateKind(IntEnum):
    """A delivered state tensor's part (StateTensor.Kind): a linear layer's conv window and
    S, an attention layer's K and V."""

    UNSPECIFIED = 0
    CONV = 1
    S = 2
    K = 3
    V = 4


# Each enum beside the proto enum it mirrors and that enum's value prefix.
PROTO_ENUMS: dict[type[IntEnum], tuple[object, str]] = {
    Tier: (pb.Tier, "TIER_"),
    Mode: (pb.Mode, "MODE_"),
    StateDtype: (pb.StateDtype, "STATE_DTYPE_"),
    WarmState: (pb.WarmProgress.State, "STATE_"),
    OutcomeKind: (pb.SegmentOutcome.Kind, "KIND_"),
    EventKind: (pb.WatchEvent.Kind, "KIND_"),
    Sort: (pb.ListRequest.Sort, "SORT_"),
    HealthStatus: (pb.HealthResponse.Status, "STATUS_"),
    Transport: (pb.Transport, "TRANSPORT_"),
    StateKind: (pb.StateTensor.Kind, "KIND_"),
}

E = TypeVar("E", bound=IntEnum)


def wire(value: IntEnum) -> Any:
    """An enum as a message field takes it (the generated stubs type fields with the
    proto's own enum classes, which an IntEnum is not)."""
    return int(value)


def to_enum(cls: type[E], value: E | int | str | None, what: str, default: E) -> E:
    """value as a member of cls: a member, its int or its name (any case); None: default."""
    if value is None:
        return default
    if isinstance(value, str):
        try:
            return cls[value.upper().replace("-", "_")]
        except KeyError:
            names = ", ".join(m.name.lower() for m in cls)
            raise client_error(f"{what}: '{value}' is not one of {names}") from None
    try:
        return cls(value)
    except ValueError:
        raise client_error(f"{what}: {value!r} is not a {cls.__name__}") from None


# ---- token ids and segments ------------------------------------------------------------

TokenIds = Sequence[int] | np.ndarray


def to_ids(x: TokenIds | str, what: str) -> list[int]:
    """Token ids as the uint32 list a message takes; a str is tokenised (hypic.text)."""
    if isinstance(x, str):
        return tokenize(x)
    a = np.asarray(x)
    if a.size == 0:
        return []
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise client_error(f"{what}: token ids are a flat sequence of integers, not {a.dtype}{list(a.shape)}")
    if int(a.min()) < 0 or int(a.max()) > 0xFFFFFFFF:
        raise client_error(f"{what}: a token id outside 0..2^32-1")
    ids: list[int] = a.astype(np.uint32).tolist()
    return ids


def to_key(x: bytes | bytearray | memoryview, what: str) -> bytes:
    """A 32-byte entry key, as Lookup, Warm, List and friends return it."""
    k = bytes(x)
    if len(k) != KEY_BYTES:
        raise client_error(f"{what}: a key is {KEY_BYTES} bytes, not {len(k)}")
    return k


@dataclass(frozen=True)
class Segment:
    """One segment of a prompt with tags (attached to its entry when it is stored).

    ref: token ids, a 32-byte key (bytes), or a text for the embedded byte tokenizer."""

    ref: TokenIds | bytes | str
    tags: Sequence[str] = ()


SegmentLike = Segment | TokenIds | bytes | str


def to_segment(x: SegmentLike, i: int) -> pb.Segment:
    tags: Sequence[str] = ()
    if isinstance(x, Segment):
        tags = x.tags
        x = x.ref
    if isinstance(tags, str):  # a lone tag would otherwise become one tag per character
        tags = [tags]
    what = f"segments[{i}]"
    if isinstance(x, (bytes, bytearray, memoryview)):
        return pb.Segment(key=to_key(x, what), tags=list(tags))
    return pb.Segment(tokens=pb.Tokens(ids=to_ids(x, what)), tags=list(tags))


def to_segments(xs: Sequence[SegmentLike] | Segment | bytes | str) -> list[pb.Segment]:
    """Segments of a request. A lone text, key or Segment is one segment. A flat list of
    ints is refused, as it could mean one segment or one per id: wrap it as [ids]."""
    if isinstance(xs, (str, bytes, bytearray, memoryview, Segment)):
        return [to_segment(xs, 0)]
    if isinstance(xs, np.ndarray) or (len(xs) > 0 and isinstance(xs[0], (int, np.integer))):
        raise client_error("segments: a flat list of token ids; pass a list of segments ([ids])")
    return [to_segment(x, i) for i, x in enumerate(xs)]


# ---- results -----------------------------------------------------------------------------


@dataclass
class Entry:
    """A serialised entry (docs/entry-format.md) and its metadata, as GetEntry returns it
    and PutEntry takes it."""

    meta: pb.EntryMeta
    data: bytes = field(repr=False)

    @property
    def key(self) -> bytes:
        return self.meta.key
