"""The layout guard: HypicConnector refuses, naming what differs, a vLLM version, model
type or cache shape it was not checked against (a wrong layout would only give wrong
tokens). Checked on stand-ins of vLLM's config objects; no engine runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

import vllm
from hypic import vllm as hv
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec


def config(**text: Any) -> Any:
    c = dict(
        model_type="qwen3_5_text",
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        num_key_value_heads=1,
        num_attention_heads=2,
        head_dim=64,
        hidden_size=128,
    )
    c.update(text)
    return SimpleNamespace(
        model_config=SimpleNamespace(hf_text_config=SimpleNamespace(**c)),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1),
    )


def groups(conv: tuple[int, ...] = (3, 1024), ssm: tuple[int, ...] = (4, 128, 128), heads: int = 1) -> Any:
    mamba = MambaSpec(block_size=1152, shapes=(conv, ssm), dtypes=(torch.bfloat16, torch.float32))
    attn = FullAttentionSpec(block_size=1152, num_kv_heads=heads, head_size=64, dtype=torch.bfloat16)
    return SimpleNamespace(
        kv_cache_groups=[
            SimpleNamespace(kv_cache_spec=mamba, layer_names=["model.layers.0.linear_attn"]),
            SimpleNamespace(kv_cache_spec=attn, layer_names=["model.layers.3.self_attn.attn"]),
        ]
    )


def test_the_known_layout_passes() -> None:
    sh = hv._guard(config(), groups())
    assert (sh.conv_dim, sh.hv, sh.dk, sh.hkv, sh.head_dim) == (1024, 4, 128, 1, 64)


@pytest.mark.parametrize(
    "cfg, grp, why",
    [
        (config(model_type="qwen3"), groups(), "model_type 'qwen3' is not one whose cache layout"),
        (config(), groups(conv=(1024, 3)), "state shapes ((1024, 3), (4, 128, 128)), expected ((3, 1024), (4, 128, 128))"),
        (config(), groups(ssm=(4, 64, 128)), "expected ((3, 1024), (4, 128, 128))"),
        (config(), groups(heads=2), "2 kv heads x 64 in torch.bfloat16, expected 1 x 64"),
        (config(linear_value_head_dim=64), groups(), "linear key head dim 128 != value head dim 64"),
    ],
)
def test_what_differs_is_named(cfg: Any, grp: Any, why: str) -> None:
    with pytest.raises(ValueError, match=None) as e:
        hv._guard(cfg, grp)
    assert why in str(e.value)


def test_an_unknown_vllm_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    with pytest.raises(ValueError) as e:
        hv._guard(config(), groups())
    assert "vLLM 0.33.0 is not a version whose cache layout this connector was checked against (0.32.0)" in str(e.value)
