"""hypic.vllm_plan: the span HypicConnector claims for a request's segments, the salt its
blocks are cached under in vLLM, and the CPU attention layout read back. No vLLM needed."""

from __future__ import annotations

import numpy as np
import pytest

from hypic import vllm_plan as vp


def test_claim_stops_one_token_after_the_segments() -> None:
    p = vp.plan([300, 200, 250], 800)
    assert p is not None
    assert (p.end, p.counts, p.segments_end) == (751, (300, 200, 250), 750)
    tokens = list(range(800))
    segs, query = p.split(tokens)
    assert [len(s) for s in segs] == [300, 200, 250]
    assert segs[1][0] == 300 and query == [750]


def test_segments_reaching_the_prompt_end() -> None:
    # vLLM computes the last token; the last segment, cut by the span, is the query
    p = vp.plan([300, 200], 500)
    assert p is not None and p.end == 499 and p.counts == (300,)
    assert len(p.split(list(range(500)))[1]) == 199
    p = vp.plan([300, 200], 501)  # a one-token query is vLLM's: the daemon's query is the cut segment
    assert p is not None and p.end == 500 and p.counts == (300,)
    p = vp.plan([300, 200], 502)  # two: one for the daemon, one for vLLM
    assert p is not None and p.end == 501 and p.counts == (300, 200)


def test_nothing_to_reuse() -> None:
    assert vp.plan([10], 10) is None  # the only segment ends at the prompt's end
    assert vp.plan([9], 10) is None  # one query token, and vLLM must compute it
    assert vp.plan([8], 10) is not None
    assert vp.plan([5], 2) is None


@pytest.mark.parametrize(
    "value, why",
    [
        ("300", "must be a list"),
        ([], "empty"),
        ([300, 0], "hypic_segments[1] is 0"),
        ([300, -1], "hypic_segments[1] is -1"),
        ([300, 2.5], "hypic_segments[1] is 2.5"),
        ([True], "hypic_segments[0] is True"),
        ([600, 300], "add up to 900 tokens, more than the prompt's 800"),
        ([1] * (vp.MAX_SEGMENTS + 1), "more than"),
    ],
)
def test_bad_segments_are_named(value: object, why: str) -> None:
    with pytest.raises(vp.PlanError, match=why.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        vp.parse_segments(value, 800)


def test_salt_tells_compositions_apart() -> None:
    a = vp.cache_salt("m", vp.Plan(751, (300, 200, 250)), None)
    assert a == vp.cache_salt("m", vp.Plan(751, (300, 200, 250)), None)
    assert a != vp.cache_salt("m", vp.Plan(751, (300, 450)), None)
    assert a != vp.cache_salt("m2", vp.Plan(751, (300, 200, 250)), None)
    assert a != vp.cache_salt("m", vp.Plan(751, (300, 200, 250)), 8)
    assert a != vp.cache_salt("m", vp.Plan(751, (300, 200, 250)), None, "user-salt")
    assert len(a) <= 128 and not set(a) & set("@/\\\0")


def test_vec_layout_read_back() -> None:
    bs, heads, hd = 4, 2, 3
    k = np.arange(bs * heads * hd, dtype=np.float32).reshape(bs, heads, hd)
    v = -k
    block = np.zeros((heads, 2 * bs * hd), np.float32)
    for h in range(heads):
        for o in range(bs):
            for d in range(hd):
                block[h, d * bs + o] = k[o, h, d]  # K transposed
                block[h, bs * hd + o * hd + d] = v[o, h, d]  # then V token-major
    k2, v2 = vp.read_vec_kv(block, bs, hd)
    assert np.array_equal(k2, k) and np.array_equal(v2, v)


def test_bf16_round() -> None:
    x = np.array([1.0, 1.00390625, 1.01171875, -3.14159, 0.0], np.float32)
    y = vp.bf16_round(x)
    assert y[0] == 1.0 and y[1] == 1.0  # a tie goes to the even mantissa
    assert y[2] == np.float32(1.015625)
    assert abs(y[3] - x[3]) <= abs(x[3]) * 2.0**-8 and y[4] == 0.0
