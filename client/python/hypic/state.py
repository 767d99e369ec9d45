"""A delivered running state, read in place: numpy views of a transport session's buffer.

Prefill with return_state writes the state after [segments..., query] into a session's
buffer and its reply's `state` (a Delivery) lists where each tensor lies
(docs/transports.md, "The state's layout"): per layer, a linear layer's conv window then
its S, an attention layer's K then V, and nothing for a layer that keeps no state (a
Nemotron-H block that is an MLP or MoE alone); fp32, row-major, each 256-byte aligned
relative to the delivery's offset. The delivery's `layers` is the model's layer count.

    kind  shape                      what
    conv  [kernel-1][conv_dim]       the causal conv's last kernel-1 inputs, oldest row first;
                                     its channels: q | k | v (Gated DeltaNet and the other
                                     delta-rule layers), x | B | C (Mamba2)
    S     [Hv][dk][dv]               the recurrent state of each value head: the delta-rule
                                     matrix (Gated DeltaNet); MiniMax's lightning matrix (its
                                     conv is empty, [0][conv_dim]); for Mamba2 [heads][ssm_state_size][mamba_head_dim],
                                     i.e. transformers' per-head [head_dim][state] transposed
    K     [pos][Hkv][head_dim]       keys, after k_norm and RoPE at their positions where the
                                     model has them (Nemotron-H: neither); MLA (Kimi): one
                                     [pos][1][kv_lora], the normalised latent that kv_b_proj
                                     expands into every head's key and value
    V     [pos][Hkv][head_dim]       values; MLA: one [pos][1][qk_rope], the key part every head
                                     shares (unrotated: Kimi's MLA has no positional encoding)

A cuda_ipc session's state is in GPU memory: its arrays are torch views of the session's
CUDA tensor instead (float32, the same shapes).

The arrays are np.frombuffer views of the buffer, read-only, never copies: a State is
only valid until the session's next transfer (the daemon writes the next state or entry
over the same bytes) — `valid` says whether that has happened. Copy what must outlive
it (`arr.copy()`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ._gen import hypic_pb2 as pb
from .errors import client_error
from .types import StateDtype, StateKind, Transport

if TYPE_CHECKING:
    from .transport import Session

ALIGN = 256  # every tensor's offset, relative to the delivery's


def torch_float32() -> object:
    """torch.float32, imported only for a state in GPU memory (cuda_ipc)."""
    import torch

    return torch.float32
_NAMES = {StateKind.CONV: "conv", StateKind.S: "S", StateKind.K: "K", StateKind.V: "V"}


class LayerTensor(NamedTuple):
    """One tensor of a state: (layer, kind, array), as a tuple unpacks."""

    layer: int
    kind: StateKind
    array: np.ndarray


@dataclass
class State:
    """The state a Prefill delivered: `tensors` in the delivery's order, `position` tokens
    consumed, `num_layers` the model's layers. `layer(i)` gives one layer's parts by name
    ("conv" and "S", "K" and "V", or none for a layer that keeps no state)."""

    delivery: pb.Delivery
    tensors: list[LayerTensor]
    session: Session = field(repr=False)
    generation: int = field(repr=False)

    @property
    def position(self) -> int:
        return int(self.delivery.position)

    @property
    def transfer(self) -> int:
        return int(self.delivery.transfer)

    @property
    def num_layers(self) -> int:
        """The model's layer count, as the delivery says it (`layers`); from a daemon that
        does not send it, one more than the last layer with a tensor."""
        if self.delivery.layers:
            return int(self.delivery.layers)
        return 1 + max((t.layer for t in self.tensors), default=-1)

    @property
    def valid(self) -> bool:
        """False once the session has started another transfer or was closed: the views
        then show whatever the buffer holds now."""
        return not self.session.closed and self.session.generation == self.generation

    def layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i's parts: {"conv": ..., "S": ...} (linear), {"K": ..., "V": ...} (attention),
        or {} for a layer that keeps no state (a block that is an MLP or MoE alone).
        IndexError outside [0, num_layers)."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"the state has no layer {i} (layers 0..{self.num_layers - 1})")
        return {_NAMES[t.kind]: t.array for t in self.tensors if t.layer == i}

    def is_linear(self, i: int) -> bool:
        """Whether layer i keeps a recurrent state S (a linear layer)."""
        return "S" in self.layer(i)


def state_views(session: Session, d: pb.Delivery, generation: int) -> State:
    """The State of delivery d as views of session.buffer. INTERNAL "client: ..." when the
    layout does not add up (a tensor past the buffer, a size that is not its shape's, an
    offset that is not aligned, a dtype other than fp32)."""
    out: list[LayerTensor] = []
    for i, t in enumerate(d.tensors):
        what = f"state tensor {i} (layer {t.layer})"
        if t.dtype not in (StateDtype.UNSPECIFIED, StateDtype.F32):
            raise client_error(f"{what}: dtype {StateDtype(t.dtype).name}, not fp32", "INTERNAL")
        try:
            kind = StateKind(t.kind)
        except ValueError:
            raise client_error(f"{what}: unknown kind {t.kind}", "INTERNAL") from None
        shape = tuple(int(s) for s in t.shape)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 0
        if count * 4 != t.bytes:
            raise client_error(f"{what}: {t.bytes} bytes for shape {list(shape)}", "INTERNAL")
        if t.offset + t.bytes > session.capacity:
            raise client_error(
                f"{what}: {t.bytes} bytes at {t.offset} past the {session.capacity}-byte buffer", "INTERNAL"
            )
        if (t.offset - d.offset) % ALIGN:
            raise client_error(f"{what}: offset {t.offset} is not {ALIGN}-byte aligned", "INTERNAL")
        if session.kind == Transport.CUDA_IPC:  # torch views of the GPU buffer
            buf = session.buffer
            a = buf[int(t.offset) : int(t.offset) + int(t.bytes)].view(torch_float32()).reshape(shape)
            out.append(LayerTensor(int(t.layer), kind, a))
            continue
        a = np.frombuffer(session.buffer, np.float32, count, int(t.offset)).reshape(shape)
        a.flags.writeable = False
        out.append(LayerTensor(int(t.layer), kind, a))
    return State(delivery=d, tensors=out, session=session, generation=generation)
