"""The cluster's placement rule, as the daemons compute it (rpc/include/hy_cluster.h).

An entry's owners are the top ``r`` live members by rendezvous (highest-random-weight)
hashing of its 32-byte key: a member's score is the first 8 bytes, big-endian, of SHA-256
over ``b"hypic-owner\\0"``, the key and the member's id. A client that knows the members
sends Lookup, GetEntry and PutEntry straight to an owner.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

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
