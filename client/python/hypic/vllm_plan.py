"""What hypic.vllm decides without vLLM: the span a request's segments let it claim, the
key its composed blocks are cached under in vLLM, and the CPU attention cache's layout
read back (numpy only, so that the rules are tested where vLLM is not installed).

A request names its segments by token counts, in prompt order (`hypic_segments`); what
follows the last is its query. The daemon's Prefill needs at least one query token and
vLLM must compute at least one prompt token itself, so the claimed span [0, end) stops
one token after the segments, or one token before the prompt's end when the segments
reach it. The segments that end before the span's last token are composed by the daemon
from its entries; the tokens after them up to `end` are its query, computed in the same
pass (a last segment the span cuts is computed there, not reused).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

MAX_SEGMENTS = 4096  # the daemon's own limit is lower (limits.max_segments): it says so


class PlanError(ValueError):
    """hypic_segments that do not fit the prompt: the request is left to vLLM."""


@dataclass(frozen=True)
class Plan:
    """The claim for one prompt: `end` tokens delivered by the daemon, composed from the
    first `used` segments (their token counts `counts`) and the query tokens
    [sum(counts), end)."""

    end: int
    counts: tuple[int, ...]

    @property
    def used(self) -> int:
        return len(self.counts)

    @property
    def segments_end(self) -> int:
        return sum(self.counts)

    def split(self, tokens: Sequence[int]) -> tuple[list[list[int]], list[int]]:
        """The daemon's segments and query out of the prompt's tokens."""
        segs, at = [], 0
        for n in self.counts:
            segs.append(list(tokens[at : at + n]))
            at += n
        return segs, list(tokens[at : self.end])


def parse_segments(value: Any, prompt_len: int) -> tuple[int, ...]:
    """The token counts of hypic_segments, checked against the prompt: a list of
    positive integers whose sum is at most the prompt's length."""
    if not isinstance(value, (list, tuple)):
        raise PlanError(f"hypic_segments must be a list of token counts, not {type(value).__name__}")
    if not value:
        raise PlanError("hypic_segments is empty")
    if len(value) > MAX_SEGMENTS:
        raise PlanError(f"hypic_segments has {len(value)} segments, more than {MAX_SEGMENTS}")
    counts = []
    for i, n in enumerate(value):
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise PlanError(f"hypic_segments[{i}] is {n!r}: a segment's token count is an integer > 0")
        counts.append(n)
    total = sum(counts)
    if total > prompt_len:
        raise PlanError(f"hypic_segments add up to {total} tokens, more than the prompt's {prompt_len}")
    return tuple(counts)


def plan(counts: Sequence[int], prompt_len: int) -> Plan | None:
    """The span to claim for segments of these counts in a prompt of prompt_len tokens, or
    None when no segment would be reused (the first ends at or after the span's last token)."""
    end = min(sum(counts) + 1, prompt_len - 1)
    used, at = [], 0
    for n in counts:
        if at + n > end - 1:  # the query needs the span's last token at least
            break
        used.append(n)
        at += n
    if not used:
        return None
    return Plan(end=end, counts=tuple(used))


def cache_salt(model: str, p: Plan, seam: int | None, salt: str | None = None) -> str:
    """The cache_salt under which vLLM keeps the blocks of a request with segments: its
    chain of block hashes then differs from any plain request's and from one with other
    segments, and equals that of a request with the same tokens, model, segments, seam and
    own salt (the request's cache_salt, if it came with one), so that those share. vLLM
    limits a salt to 128 characters."""
    h = hashlib.sha256()
    h.update(f"{model}\0{seam}\0{p.end}\0{salt or ''}\0".encode())
    h.update(",".join(map(str, p.counts)).encode())
    return "hypic-pic-" + h.hexdigest()[:40]


def read_vec_kv(block: np.ndarray, block_size: int, head_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """One block of vLLM's CPU attention cache in its "vec" layout, as (K, V), each
    [block_size][heads][head_dim]: per head the block holds K transposed (element [d][o]
    at d*block_size + o) and then V token-major ([o][d]). block: [heads][2*block_size*head_dim]
    or any shape with that many elements per head, in the cache's dtype converted to
    float32 by the caller."""
    heads = block.shape[0]
    flat = block.reshape(heads, 2 * block_size * head_dim)
    k = flat[:, : block_size * head_dim].reshape(heads, head_dim, block_size).transpose(2, 0, 1)
    v = flat[:, block_size * head_dim :].reshape(heads, block_size, head_dim).transpose(1, 0, 2)
    return np.ascontiguousarray(k), np.ascontiguousarray(v)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16 (nearest even) and back to float32: what a bf16 cache holds."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)
