"""hypic.cluster against the C rule (rpc/include/hy_cluster.h): the same score for the
vector tests/rpc/test_rendezvous.c checks, and the promises of rendezvous hashing."""

import hashlib
import struct

import pytest

from hypic import cluster


def key_of(i: int) -> bytes:
    return hashlib.sha256(struct.pack("<I", i)).digest()


def test_the_vector_the_c_test_checks() -> None:
    # tests/rpc/test_rendezvous.c, test_score_is_the_documented_hash
    assert cluster.score(key_of(7), "node-a") == 5752632589512009862


def test_owners_ranked_and_clipped() -> None:
    ids = ["a", "b", "c", "d", "e"]
    for k in range(100):
        key = key_of(k)
        top = cluster.owners(key, ids, 3)
        assert len(set(top)) == 3
        scores = [cluster.score(key, ids[i]) for i in top]
        assert scores == sorted(scores, reverse=True)
        assert cluster.owners(key, ids, 1) == top[:1]
        assert sorted(cluster.owners(key, ids, 9)) == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError):
        cluster.score(b"short", "a")


def test_a_join_moves_a_quarter_to_the_newcomer() -> None:
    ids = ["hypic-0", "hypic-1", "hypic-2", "hypic-3"]
    moved = 0
    for k in range(4000):
        before = ids[cluster.owners(key_of(k), ids[:3])[0]]
        after = ids[cluster.owners(key_of(k), ids)[0]]
        if before != after:
            assert after == "hypic-3"
            moved += 1
    assert 0.22 < moved / 4000 < 0.28
