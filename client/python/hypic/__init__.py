"""hypic: the Python client of the HYPIC cache-tier service (hypic.v1, hypic-cached).

    import hypic
    with hypic.Client("127.0.0.1:7878") as c:
        print(c.health().models)

Client (hypic.client) has one method per RPC; HypicError is what a failed call raises;
the enums, Segment and Entry (hypic.types) are what the methods take and answer besides
the proto's messages (hypic.pb, generated from rpc/hypic.proto at install); tokenize and
detokenize are the embedded models' byte tokenizer (hypic.text). Session (hypic.transport)
is a buffer the daemon delivers states and entries into (Client.session), State
(hypic.state) a delivered state read in place as numpy views. Cluster (hypic.cluster) is a
client of every member of a cluster, routing each call to the members that own its
entries.
"""

from ._gen import hypic_pb2 as pb
from . import cluster
from .client import Client
from .cluster import Cluster
from .entry import EntryError, EntryParts, EntryShape, parse_entry
from .errors import HypicError
from .state import LayerTensor, State
from .text import detokenize, tokenize
from .transport import Session
from .types import (
    Entry,
    EventKind,
    HealthStatus,
    Mode,
    OutcomeKind,
    Segment,
    Sort,
    StateDtype,
    StateKind,
    Tier,
    Transport,
    WarmState,
)

__version__ = "0.9.0"

__all__ = [
    "Client",
    "Cluster",
    "Entry",
    "EntryError",
    "EntryParts",
    "EntryShape",
    "EventKind",
    "HealthStatus",
    "HypicError",
    "LayerTensor",
    "Mode",
    "OutcomeKind",
    "Segment",
    "Session",
    "Sort",
    "State",
    "StateDtype",
    "StateKind",
    "Tier",
    "Transport",
    "WarmState",
    "cluster",
    "detokenize",
    "parse_entry",
    "pb",
    "tokenize",
]
