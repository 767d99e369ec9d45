#!/usr/bin/env python3
"""Golden reference fixtures for HYPIC from Hugging Face transformers' pure-PyTorch
Qwen3-Next / Qwen3.5 / OLMo-Hybrid / MiniMax / Kimi-Linear / Nemotron-H / Ling (bailing_hybrid)
implementations.

For each tiny, randomly initialised model this writes, into <out>/<name>/:
  config.json, model.safetensors   -- written by save_pretrained (the real on-disk format)
  golden.safetensors               -- reference logits / recurrent states / conv states
  golden.json                      -- versions, seed, layer map, layouts, sanity results

The goldens are computed from the model *reloaded from those files* with
from_pretrained(dtype=float32), so a BF16/F16 checkpoint is evaluated in fp32 on exactly
the rounded values that are on disk.

Four fixtures pin how transformers *reads config.json* where a reader could go wrong:
a Qwen3.5 MoE config.json saying norm_topk_prob=false (ignored: the router always
renormalises), one without shared_expert_intermediate_size (default 512), and two nested
vision-language checkpoints whose top-level tie_word_embeddings disagrees with
text_config's (the top-level flag decides). Likewise nemotron_h_legacy's config.json is
written the way released Nemotron-H checkpoints carry it (hybrid_override_pattern, the
legacy mamba_* names, a bare Infinity), and nemotron_h_dtclamp pins the dt clamp that the
Mamba2 prefill applies and the one-token decode does not. `ling`'s config.json is written
as Ling-3.0's released one (no layer_types / mlp_layer_types / linear_* keys, head_dim = the
KDA head dim, the release's key spellings), `ling_b`'s as save_pretrained writes it plus keys
transformers ignores (q_lora_rank, partial_rotary_factor, rope_interleave, SwiGLU limits).

Run through make_golden.sh (it builds the pinned venv). See README.md.
"""

import os

# Belt and braces: never use hub kernels, never touch the network, never use a GPU.
os.environ["USE_HUB_KERNELS"] = "NO"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import argparse
import importlib.util
import json
import logging
import math
import shutil
import sys
from pathlib import Path

# --------------------------------------------------------------------------------------
# 1. The optional fast kernels must not even be installed.
# --------------------------------------------------------------------------------------
FORBIDDEN_MODULES = ("fla", "causal_conv1d", "kernels", "mamba_ssm")
for _m in FORBIDDEN_MODULES:
    if importlib.util.find_spec(_m) is not None:
        sys.exit(f"make_golden: optional fast-kernel package '{_m}' is importable; "
                 f"the goldens must come from the pure-PyTorch path. Use the pinned venv.")

import numpy
import safetensors
import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoConfig
from transformers.models.qwen3_5 import configuration_qwen3_5 as c35
from transformers.models.qwen3_5_moe import configuration_qwen3_5_moe as c35moe
from transformers.integrations import hub_kernels
from transformers.models.qwen3_5 import modeling_qwen3_5 as m35
from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m35moe
from transformers.models.qwen3_next import modeling_qwen3_next as mnext
from transformers.models.olmo_hybrid import modeling_olmo_hybrid as molmo
from transformers.models.minimax import modeling_minimax as mminimax
from transformers.models.kimi_linear import modeling_kimi_linear as mkimi
from transformers.models.nemotron_h import modeling_nemotron_h as mnemo
from transformers.models.bailing_hybrid import modeling_bailing_hybrid as mbh
from transformers.utils import import_utils

SEED = 20240611
PREFILL_LENS = (1, 63, 64, 65, 300)
DECODE_PROMPT = 64
DECODE_STEPS = 20
SANITY_TOL = 1e-4
MIN_ROUTER_MARGIN = 1e-5      # top-k vs (k+1)-th router probability gap; guards against near ties
MAX_SEED_ATTEMPTS = 20
MAX_MODEL_DIR_BYTES = 1_000_000
MAX_TOTAL_BYTES = 16_000_000  # every family's fixtures together (they live in git)

FAST_PATH_FUNCS = ("causal_conv1d_fn", "causal_conv1d_update",
                   "torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")
FALLBACK_WARNINGS = ("`causal_conv1d_fn` is falling back", "`causal_conv1d_update` is falling back",
                     "`chunk_gated_delta_rule` is falling back",
                     "`fused_recurrent_gated_delta_rule` is falling back")

KIMI_FAST_PATH_FUNCS = ("causal_conv1d_fn", "causal_conv1d_update", "chunk_kimi_delta_attention",
                        "recurrent_kimi_delta_attention")
KIMI_FALLBACK_WARNINGS = ("`chunk_kda` is falling back", "`fused_recurrent_kda` is falling back")

# Nemotron-H's Mamba2 mixer: the conv (causal_conv1d) and the SSD scan / one-token state
# update (mamba_ssm), plus the fused split-conv-scan used only in training without a cache.
NEMOTRON_FAST_PATH_FUNCS = ("causal_conv1d_fn", "causal_conv1d_update",
                            "mamba2_split_conv1d_scan_combined", "mamba2_selective_state_update",
                            "mamba2_chunk_scan")
NEMOTRON_FALLBACK_WARNINGS = ("`causal_conv1d_fn` is falling back",
                              "`causal_conv1d_update` is falling back",
                              "`mamba_chunk_scan_combined` is falling back",
                              "`selective_state_update` is falling back")
CLAMP_MIN_DIFF = 1e-3  # a dt-clamp fixture's decode must miss the one-shot prefill by more

# Ling (bailing_hybrid): the same four wrapped KDA functions as Kimi's (KIMI_FAST_PATH_FUNCS),
# each with its own notice: the conv pair and the chunked / recurrent KDA.
BAILING_FALLBACK_WARNINGS = ("`causal_conv1d_fn` is falling back",
                             "`causal_conv1d_update` is falling back",
                             "`chunk_kda` is falling back", "`fused_recurrent_kda` is falling back")


# --------------------------------------------------------------------------------------
# 2. Static proof that the modeling modules bound the torch fallbacks.
# --------------------------------------------------------------------------------------
def assert_pure_torch_static():
    assert not import_utils.is_flash_linear_attention_available(), "fla available"
    assert not import_utils.is_causal_conv1d_available(), "causal_conv1d available"
    assert not import_utils.is_kernels_available(), "kernels available"
    assert not import_utils.is_mamba_2_ssm_available(), "mamba_ssm available"
    assert hub_kernels._kernels_enabled is False, "hub kernels enabled"
    for mod, funcs in ((mnext, FAST_PATH_FUNCS), (m35, FAST_PATH_FUNCS), (m35moe, FAST_PATH_FUNCS),
                       (molmo, FAST_PATH_FUNCS), (mkimi, KIMI_FAST_PATH_FUNCS),
                       (mnemo, NEMOTRON_FAST_PATH_FUNCS), (mbh, KIMI_FAST_PATH_FUNCS)):
        for fname in funcs:
            f = getattr(mod, fname)
            # use_kernel_func_from_hub_with_fallback() returns a closure `wrapped` over
            # (implementation, torch_function, is_new_implementation).  The pure path is
            # implementation is torch_function, defined in the modeling module itself.
            cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
            assert cells["is_new_implementation"] is False, (mod.__name__, fname)
            assert cells["implementation"] is cells["torch_function"], (mod.__name__, fname)
            assert cells["torch_function"].__module__ == mod.__name__, (mod.__name__, fname)
    for cls, mod in ((mnext.Qwen3NextGatedDeltaNet, mnext), (m35.Qwen3_5GatedDeltaNet, m35),
                     (m35moe.Qwen3_5MoeGatedDeltaNet, m35moe),
                     (molmo.OlmoHybridGatedDeltaNet, molmo),
                     (mkimi.KimiLinearDeltaAttention, mkimi),
                     (mnemo.NemotronHMamba2Mixer, mnemo),
                     (mbh.BailingHybridDeltaAttention, mbh)):
        assert cls.forward.__module__ == mod.__name__, cls  # not kernelized / replaced


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


# --------------------------------------------------------------------------------------
# 3. Model specifications.
# --------------------------------------------------------------------------------------
def _rope(theta, head_dim, factor, mrope=False):
    r = {"rope_type": "default", "rope_theta": float(theta), "partial_rotary_factor": factor}
    if mrope:  # Qwen3.5 text configs carry M-RoPE sections; text-only positions make them moot.
        half = int(head_dim * factor) // 2
        s = [half - 2 * (half // 3), half // 3, half // 3]
        r.update({"mrope_section": s, "mrope_interleaved": True})
    return r


# Shared by the config-semantics fixtures: a small Qwen3.5 text model, and a tiny vision
# tower for the composite ones (its weights are saved but never run by the goldens).
_TEXT35 = dict(
    vocab_size=331, hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    rope_parameters=_rope(10000, 16, 0.25, mrope=True),
    linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
    rms_norm_eps=1e-6, max_position_embeddings=4096,
)
_VISION = dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=2,
               temporal_patch_size=2, spatial_merge_size=2, out_hidden_size=32,
               num_position_embeddings=16)

# Nemotron-H: one mixer per block, the block kinds spelt as the released configs'
# hybrid_override_pattern (M = Mamba2, * = attention, - = MLP, E = MoE).
NEMO_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}


def _blocks(pattern):
    return [NEMO_BLOCKS[c] for c in pattern]


_NEMO = dict(
    vocab_size=331, hidden_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    intermediate_size=64, mamba_num_heads=8, mamba_head_dim=8, n_groups=2, ssm_state_size=16,
    conv_kernel=4, chunk_size=16, n_routed_experts=8, num_experts_per_tok=2,
    moe_intermediate_size=32, moe_shared_expert_intermediate_size=24, n_group=2, topk_group=1,
    routed_scaling_factor=2.5, norm_topk_prob=True, tie_word_embeddings=False,
    layer_norm_epsilon=1e-5,
)

SPECS = [
    dict(
        name="qwen3next_moe",
        family="qwen3_next",
        cls=mnext.Qwen3NextForCausalLM,
        cfg_cls=mnext.Qwen3NextConfig,
        storage=torch.float32,
        # config.json: layer_types removed, full_attention_interval=3 written instead
        on_disk_interval=3,
        cfg=dict(
            vocab_size=331, hidden_size=48, num_hidden_layers=6, full_attention_interval=3,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            rope_parameters=_rope(10000, 16, 0.25),
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            intermediate_size=40, decoder_sparse_step=1, mlp_only_layers=[1],
            num_experts=6, num_experts_per_tok=2, norm_topk_prob=True,
            moe_intermediate_size=12, shared_expert_intermediate_size=16,
            tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=4096,
        ),
    ),
    dict(
        name="qwen3next_dense",
        family="qwen3_next",
        cls=mnext.Qwen3NextForCausalLM,
        cfg_cls=mnext.Qwen3NextConfig,
        storage=torch.bfloat16,
        # config.json: neither layer_types nor full_attention_interval (default interval 4)
        on_disk_interval=None,
        cfg=dict(
            vocab_size=331, hidden_size=80, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            rope_parameters=_rope(1000000, 32, 0.25),
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            intermediate_size=96, decoder_sparse_step=1, mlp_only_layers=[0, 1, 2, 3],
            num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
            moe_intermediate_size=16, shared_expert_intermediate_size=16,
            tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=4096,
        ),
    ),
    dict(
        name="qwen35_dense",
        family="qwen3_5",
        cls=m35.Qwen3_5ForCausalLM,
        cfg_cls=m35.Qwen3_5TextConfig,
        storage=torch.float16,
        on_disk_interval="keep",  # explicit (irregular) layer_types stay in config.json
        cfg=dict(
            vocab_size=331, hidden_size=80, num_hidden_layers=5,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=32,
            rope_parameters=_rope(1000000, 32, 0.25, mrope=True),
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=32, linear_conv_kernel_dim=4,
            intermediate_size=64, tie_word_embeddings=False, rms_norm_eps=1e-6,
            max_position_embeddings=4096,
        ),
    ),
    dict(
        name="qwen35_moe",
        family="qwen3_5",
        cls=m35moe.Qwen3_5MoeForCausalLM,
        cfg_cls=m35moe.Qwen3_5MoeTextConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        cfg=dict(
            vocab_size=331, hidden_size=48, num_hidden_layers=4,
            layer_types=["linear_attention", "linear_attention", "linear_attention",
                         "full_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            rope_parameters=_rope(10000, 16, 0.25, mrope=True),
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=16, shared_expert_intermediate_size=24,
            tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=4096,
        ),
    ),
] + [
    # ---- config-semantics fixtures: how transformers reads config.json ------------------
    # SPECS index fixes the seed (SEED + 100 * index): new fixtures go at the end so the
    # seeds of the ones above never change.
    dict(
        name="qwen35_moe_norm_topk_false",
        family="qwen3_5",
        cls=m35moe.Qwen3_5MoeForCausalLM,
        cfg_cls=m35moe.Qwen3_5MoeTextConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        # Qwen3_5MoeTextConfig has no norm_topk_prob: the key is kept as an attribute that
        # Qwen3_5MoeTopKRouter never reads (it always divides by the top-k sum).
        config_edit={"set": {"norm_topk_prob": False}},
        check_router_sums=True,
        cfg=dict(_TEXT35, num_hidden_layers=3,
                 layer_types=["linear_attention", "linear_attention", "full_attention"],
                 num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16,
                 shared_expert_intermediate_size=24, tie_word_embeddings=False),
    ),
    dict(
        name="qwen35_moe_shared_default",
        family="qwen3_5",
        cls=m35moe.Qwen3_5MoeForCausalLM,
        cfg_cls=m35moe.Qwen3_5MoeTextConfig,
        storage=torch.bfloat16,
        on_disk_interval="keep",
        # built with the class default (512) and the key then removed from config.json:
        # the reload must take 512 again
        config_edit={"drop": ["shared_expert_intermediate_size"]},
        expect_attrs={"shared_expert_intermediate_size": 512},
        cfg=dict(_TEXT35, num_hidden_layers=3,
                 layer_types=["linear_attention", "full_attention", "linear_attention"],
                 num_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
                 tie_word_embeddings=False),
    ),
    dict(
        name="qwen35_nested_tie_top",
        family="qwen3_5",
        cls=m35.Qwen3_5ForConditionalGeneration,
        cfg_cls=c35.Qwen3_5Config,
        storage=torch.float32,
        on_disk_interval="keep",
        # the composite ties by its own flag: no lm_head.weight in the file
        composite=dict(tie_word_embeddings=True, vision_config=_VISION),
        cfg=dict(_TEXT35, num_hidden_layers=4,
                 layer_types=["linear_attention", "linear_attention", "full_attention",
                              "linear_attention"],
                 intermediate_size=48, tie_word_embeddings=False),
    ),
    dict(
        name="qwen35_moe_nested_untie_top",
        family="qwen3_5",
        cls=m35moe.Qwen3_5MoeForConditionalGeneration,
        cfg_cls=c35moe.Qwen3_5MoeConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        # text_config says tie, the composite does not: lm_head.weight is its own matrix
        composite=dict(tie_word_embeddings=False, vision_config=_VISION),
        cfg=dict(_TEXT35, num_hidden_layers=3,
                 layer_types=["full_attention", "linear_attention", "linear_attention"],
                 num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                 shared_expert_intermediate_size=16, tie_word_embeddings=True),
    ),
] + [
    # ---- OLMo-Hybrid: Gated DeltaNet with beta up to 2, plain GQA, post-normed attention --
    dict(
        name="olmo_hybrid",
        family="olmo_hybrid",
        cls=molmo.OlmoHybridForCausalLM,
        cfg_cls=molmo.OlmoHybridConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        cfg=dict(
            vocab_size=331, hidden_size=48, num_hidden_layers=5, intermediate_size=64,
            layer_types=["linear_attention", "full_attention", "linear_attention",
                         "linear_attention", "full_attention"],
            num_attention_heads=4, num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            linear_num_key_heads=2, linear_num_value_heads=4,
            linear_key_head_dim=16, linear_value_head_dim=32, linear_conv_kernel_dim=4,
            linear_allow_neg_eigval=True, tie_word_embeddings=False, rms_norm_eps=1e-6,
            pad_token_id=None, eos_token_id=None, max_position_embeddings=4096,
        ),
    ),
    dict(
        name="olmo_hybrid_defaults",
        family="olmo_hybrid",
        cls=molmo.OlmoHybridForCausalLM,
        cfg_cls=molmo.OlmoHybridConfig,
        storage=torch.bfloat16,
        # config.json keeps none of the keys OlmoHybridConfig derives: layer_types (every
        # fourth layer attends), the linear heads (= num_attention_heads), their widths
        # (int(0.75 hidden / heads), twice that) and num_key_value_heads (= heads); head_dim,
        # not a field of the class, is still read by the attention (getattr)
        on_disk_interval="keep",
        config_edit={"drop": ["layer_types", "linear_num_key_heads", "linear_num_value_heads",
                              "linear_key_head_dim", "linear_value_head_dim",
                              "num_key_value_heads"]},
        expect_attrs={"head_dim": 24, "linear_key_head_dim": 12, "linear_value_head_dim": 24,
                      "linear_num_key_heads": 4, "num_key_value_heads": 4},
        cfg=dict(
            vocab_size=331, hidden_size=64, num_hidden_layers=4, intermediate_size=48,
            num_attention_heads=4, head_dim=24,  # not hidden / heads (16)
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            linear_conv_kernel_dim=4, linear_allow_neg_eigval=False,
            tie_word_embeddings=True, rms_norm_eps=1e-5,
            pad_token_id=None, eos_token_id=None, max_position_embeddings=4096,
        ),
    ),
    dict(
        name="olmo_hybrid_nope",
        family="olmo_hybrid",
        cls=molmo.OlmoHybridForCausalLM,
        cfg_cls=molmo.OlmoHybridConfig,
        storage=torch.float16,
        on_disk_interval="keep",
        # a null RoPE base: no positional encoding at all (NoPE), attention first
        cfg=dict(
            vocab_size=331, hidden_size=32, num_hidden_layers=3, intermediate_size=40,
            layer_types=["full_attention", "linear_attention", "linear_attention"],
            num_attention_heads=4, num_key_value_heads=1, head_dim=8,
            rope_parameters={"rope_type": "default", "rope_theta": None},
            linear_num_key_heads=1, linear_num_value_heads=2,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4,
            tie_word_embeddings=False, rms_norm_eps=1e-6,
            pad_token_id=None, eos_token_id=None, max_position_embeddings=4096,
        ),
    ),
] + [
    # ---- MiniMax: lightning attention (a constant decay per head), GQA, MoE, alpha/beta ---
    # Layer 0 attends: transformers 5.23 takes the decode position from layer 0's cache,
    # which a lightning layer 0 leaves at 0 (docs/models.md).
    dict(
        name="minimax",
        family="minimax",
        cls=mminimax.MiniMaxForCausalLM,
        cfg_cls=mminimax.MiniMaxConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        cfg=dict(
            vocab_size=331, hidden_size=48, intermediate_size=24, num_hidden_layers=5,
            layer_types=["full_attention", "linear_attention", "linear_attention",
                         "full_attention", "linear_attention"],
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, block_size=16,
            num_local_experts=4, num_experts_per_tok=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            full_attn_alpha_factor=1.7, full_attn_beta_factor=0.9, linear_attn_alpha_factor=1.3,
            linear_attn_beta_factor=1.1, mlp_alpha_factor=1.5, mlp_beta_factor=0.8,
            rms_norm_eps=1e-5, tie_word_embeddings=False,
            pad_token_id=None, bos_token_id=None, eos_token_id=None, max_position_embeddings=4096,
        ),
    ),
    dict(
        name="minimax_defaults",
        family="minimax",
        cls=mminimax.MiniMaxForCausalLM,
        cfg_cls=mminimax.MiniMaxConfig,
        storage=torch.bfloat16,
        on_disk_interval="keep",
        # config.json without layer_types (F L F L), head_dim null (hidden / heads), the
        # experts under their alias num_experts; rope_parameters with a partial_rotary_factor
        # that 5.23 ignores (the whole head rotates); tied; the decay tables dropped
        drop_tensors=("self_attn.slope_rate", "self_attn.query_decay", "self_attn.key_decay",
                      "self_attn.diagonal_decay"),
        config_edit={"drop": ["layer_types", "num_local_experts"],
                     "set": {"num_experts": 6, "head_dim": None,
                             "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                 "partial_rotary_factor": 0.5}}},
        expect_attrs={"num_local_experts": 6, "head_dim": None},
        cfg=dict(
            vocab_size=331, hidden_size=32, intermediate_size=16, num_hidden_layers=4,
            num_attention_heads=2, num_key_value_heads=1, block_size=16,
            num_local_experts=6, num_experts_per_tok=2,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            rms_norm_eps=1e-5, tie_word_embeddings=True,
            pad_token_id=None, bos_token_id=None, eos_token_id=None, max_position_embeddings=4096,
        ),
    ),
] + [
    # ---- Kimi-Linear: KDA (a decay per key channel), MLA without RoPE, DeepSeek MoE ---------
    # config.json as released: the 1-indexed layer lists of linear_attn_config, no
    # layer_types or mlp_layer_types (first_k_dense_replace decides), Kimi's key names
    dict(
        name="kimi_linear",
        family="kimi_linear",
        cls=mkimi.KimiLinearForCausalLM,
        cfg_cls=mkimi.KimiLinearConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        config_edit={"drop": ["layer_types", "mlp_layer_types"]},
        cfg=dict(
            vocab_size=331, hidden_size=48, num_hidden_layers=5, intermediate_size=64,
            linear_attn_config={"kda_layers": [1, 3, 4], "full_attn_layers": [2, 5],
                                "num_heads": 4, "head_dim": 8, "short_conv_kernel_size": 4},
            num_attention_heads=4, num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=24,
            qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, head_dim=72,
            num_experts=8, num_experts_per_token=2, num_shared_experts=1,
            moe_intermediate_size=16, num_expert_group=4, topk_group=2, moe_renormalize=True,
            routed_scaling_factor=2.446, first_k_dense_replace=1, rms_norm_eps=1e-5,
            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        ),
    ),
    # q through the LoRA bottleneck, an explicit mlp_layer_types with a dense layer mid-stack,
    # the dense layers' tensors under `mlp.` (the released naming; save_pretrained writes
    # `block_sparse_moe.`), transformers' alias names, one group, BF16, layer_types given
    dict(
        name="kimi_linear_qlora",
        family="kimi_linear",
        cls=mkimi.KimiLinearForCausalLM,
        cfg_cls=mkimi.KimiLinearConfig,
        storage=torch.bfloat16,
        on_disk_interval="keep",
        rename_dense_mlp=True,
        config_edit={"drop": ["num_experts_per_token", "num_shared_experts", "moe_renormalize"],
                     "set": {"num_experts_per_tok": 2, "n_shared_experts": 2,
                             "norm_topk_prob": False}},
        expect_attrs={"num_experts_per_token": 2, "num_shared_experts": 2,
                      "moe_renormalize": False},
        cfg=dict(
            vocab_size=331, hidden_size=32, num_hidden_layers=4, intermediate_size=40,
            layer_types=["full_attention", "linear_attention", "linear_attention",
                         "full_attention"],
            mlp_layer_types=["sparse", "dense", "sparse", "dense"],
            linear_num_heads=2, linear_head_dim=16, linear_conv_kernel_dim=3,
            num_attention_heads=2, num_key_value_heads=2, q_lora_rank=20, kv_lora_rank=16,
            qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=16,
            num_experts=6, num_experts_per_token=2, num_shared_experts=2,
            moe_intermediate_size=12, num_expert_group=1, topk_group=1, moe_renormalize=False,
            routed_scaling_factor=1.5, rms_norm_eps=1e-6,
            tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        ),
    ),
] + [
    # ---- Nemotron-H: Mamba2 (a scalar decay per head, B/C groups), NoPE GQA, relu² MLP,
    # DeepSeek-style sigmoid MoE; one mixer per block. The state is written [H][N][P].
    # As save_pretrained writes it: layers_block_type (a list), backbone.* per-expert tensors.
    dict(
        name="nemotron_h",
        family="nemotron_h",
        cls=mnemo.NemotronHForCausalLM,
        cfg_cls=mnemo.NemotronHConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        cfg=dict(_NEMO, layers_block_type=_blocks("M-M*EME*M")),
    ),
    # config.json as released checkpoints carry it: hybrid_override_pattern + num_hidden_layers
    # instead of layers_block_type, the legacy mamba_* names instead of the new ones (each
    # differs from the class default, so a reader that misses the alias gets another model),
    # and the bare (non-JSON) literal Infinity in time_step_limit. Experts in a latent space,
    # no top-k renormalisation, in/out_proj and MLP biases, no conv bias, one expert group,
    # conv kernel 3, three B/C groups, BF16.
    dict(
        name="nemotron_h_legacy",
        family="nemotron_h",
        cls=mnemo.NemotronHForCausalLM,
        cfg_cls=mnemo.NemotronHConfig,
        storage=torch.bfloat16,
        on_disk_interval="keep",
        config_edit={"drop": ["layers_block_type", "mtp_layers_block_type", "n_groups",
                              "conv_kernel", "chunk_size", "time_step_min", "use_conv_bias",
                              "time_step_limit"],
                     "set": {"hybrid_override_pattern": "*MEM-EM", "num_hidden_layers": 7,
                             "mamba_n_groups": 3, "mamba_d_conv": 3, "mamba_chunk_size": 8,
                             "mamba_dt_min": 0.002, "mamba_conv_bias": False},
                     # written into config.json verbatim (not JSON: Python's json reads it)
                     "raw": {"time_step_limit": "[0.0, Infinity]"}},
        expect_attrs={"layers_block_type": _blocks("*MEM-EM"), "num_hidden_layers": 7,
                      "n_groups": 3, "conv_kernel": 3, "chunk_size": 8, "time_step_min": 0.002,
                      "use_conv_bias": False, "moe_latent_size": 24, "norm_topk_prob": False,
                      "use_bias": True, "mlp_bias": True, "n_group": 1,
                      "time_step_limit": [0.0, math.inf]},
        cfg=dict(
            vocab_size=331, hidden_size=40, layers_block_type=_blocks("*MEM-EM"),
            num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=48,
            mamba_num_heads=6, mamba_head_dim=8, n_groups=3, ssm_state_size=8, conv_kernel=3,
            chunk_size=8, time_step_min=0.002, use_conv_bias=False, use_bias=True,
            mlp_bias=True, n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=16,
            moe_shared_expert_intermediate_size=20, moe_latent_size=24, n_group=1, topk_group=1,
            routed_scaling_factor=1.5, norm_topk_prob=False, tie_word_embeddings=False,
            layer_norm_epsilon=1e-5,
        ),
    ),
    # The dt clamp: the chunked scan (every prefill, a 1-token one too) clamps
    # dt = softplus(.) >= time_step_min, the one-token decode update does not. Two heads of
    # layer 0 (one per B/C group) get dt_bias -9 (dt ~ 1e-4), so their prefill dt are clamped
    # and their decode dt are not: the decode rows must miss a one-shot prefill of the same
    # tokens (asserted > CLAMP_MIN_DIFF). time_step_min 0.002 (not the default 0.001), so the
    # floor's value is read from config.json.
    dict(
        name="nemotron_h_dtclamp",
        family="nemotron_h",
        cls=mnemo.NemotronHForCausalLM,
        cfg_cls=mnemo.NemotronHConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        dt_bias_override={"layer": 0, "heads": (1, 6), "value": -9.0},
        clamp_asymmetry=True,
        cfg=dict(_NEMO, layers_block_type=_blocks("M*M-"), time_step_min=0.002),
    ),
] + [
    # ---- Ling (bailing_hybrid, BailingMoeV3ForCausalLM): KDA with the bounded "safe" gate,
    # MLA with interleaved RoPE and a sigmoid gate per head (no q-LoRA path), DeepSeek-V3 MoE.
    # KDA layer i is "full_attention" (MLA) iff (i+1) % layer_group_size == 0.
    # config.json as Ling-3.0 is released: neither layer_types nor mlp_layer_types
    # (layer_group_size 3 gives K K M K K, the trailing partial group all KDA;
    # first_k_dense_replace 1 gives D S S S S), no linear_head_dim / linear_num_heads /
    # linear_conv_kernel_dim (head_dim is the KDA head dim, as released; transformers then
    # rewrites head_dim to qk_rope_head_dim), rope_theta without rope_parameters, and the
    # release's spellings where transformers takes two (num_experts_per_tok, n_group,
    # norm_topk_prob, max_position_embeddings; save_pretrained writes num_experts_per_token,
    # num_expert_group, moe_renormalize, model_max_length), the release's architecture name.
    # moe_intermediate_size 16 (not 24, as first planned): with 24 the F32 fixture exceeds
    # MAX_MODEL_DIR_BYTES.
    dict(
        name="ling",
        family="bailing_hybrid",
        cls=mbh.BailingHybridForCausalLM,
        cfg_cls=mbh.BailingHybridConfig,
        storage=torch.float32,
        on_disk_interval="keep",
        config_edit={"drop": ["layer_types", "mlp_layer_types", "linear_head_dim",
                              "linear_num_heads", "linear_conv_kernel_dim", "rope_parameters",
                              "num_experts_per_token", "num_expert_group", "moe_renormalize",
                              "model_max_length"],
                     "set": {"architectures": ["BailingMoeV3ForCausalLM"], "head_dim": 12,
                             "num_experts_per_tok": 2, "n_group": 4, "norm_topk_prob": True,
                             "max_position_embeddings": 4096}},
        expect_attrs={"layer_types": ["linear_attention", "linear_attention", "full_attention",
                                      "linear_attention", "linear_attention"],
                      "mlp_layer_types": ["dense", "sparse", "sparse", "sparse", "sparse"],
                      "linear_head_dim": 12, "head_dim": 8, "linear_num_heads": 4,
                      "linear_conv_kernel_dim": 4, "num_local_experts": 8,
                      "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2,
                      "n_shared_experts": 1, "norm_topk_prob": True,
                      "max_position_embeddings": 4096, "kda_safe_gate": True,
                      "attention_bias": False,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        cfg=dict(
            vocab_size=331, hidden_size=48, intermediate_size=96, moe_intermediate_size=16,
            num_hidden_layers=5, layer_group_size=3, first_k_dense_replace=1,
            num_attention_heads=4, num_key_value_heads=4, head_dim=12,
            kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=10,
            num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
            routed_scaling_factor=2.5, norm_topk_prob=True, short_conv_kernel_size=4,
            kda_safe_gate=True, kda_lower_bound=-5.0, rms_norm_eps=1e-6, rope_theta=10000.0,
            max_position_embeddings=4096, num_mtp_layers=0, pad_token_id=0, bos_token_id=None,
            eos_token_id=1, tie_word_embeddings=False,
        ),
    ),
    # config.json as save_pretrained writes it (layer_types K M K M and mlp_layer_types D D S S
    # kept, linear_head_dim 8 beside head_dim = qk_rope_head_dim 4) plus keys transformers
    # stores and never reads: q_lora_rank 16 (it has no q-LoRA path; the file has q_proj only),
    # a top-level partial_rotary_factor 0.5 (folded into rope_parameters, ignored by the
    # default RoPE: all of qk_rope_head_dim rotates), rope_interleave, and per-layer SwiGLU
    # limits small enough to bite had they been applied (recorded in sanity). The softplus
    # KDA gate (kda_safe_gate false), biases on kv_a_proj_with_mqa and the MLA output
    # projection (attention_bias), kda_lower_bound -3 (read by the safe gate only), the
    # release's rope_theta 6e6, rms_norm_eps 1e-5 (kv_a_layernorm stays at 1e-6), BF16.
    dict(
        name="ling_b",
        family="bailing_hybrid",
        cls=mbh.BailingHybridForCausalLM,
        cfg_cls=mbh.BailingHybridConfig,
        storage=torch.bfloat16,
        on_disk_interval="keep",
        config_edit={"set": {"partial_rotary_factor": 0.5, "rope_interleave": True,
                             "expert_swiglu_limit_list": [0, 0, 1.5, 1.5],
                             "share_expert_swiglu_limit_list": [0, 0, 2.0, 2.0]}},
        expect_attrs={"layer_types": ["linear_attention", "full_attention", "linear_attention",
                                      "full_attention"],
                      "mlp_layer_types": ["dense", "dense", "sparse", "sparse"],
                      "linear_head_dim": 8, "head_dim": 4, "linear_num_heads": 4,
                      "q_lora_rank": 16, "kda_safe_gate": False, "kda_lower_bound": -3.0,
                      "attention_bias": True,
                      "rope_parameters": {"rope_type": "default", "rope_theta": 6000000.0,
                                          "partial_rotary_factor": 0.5},
                      "rope_interleave": True, "num_experts_per_tok": 3, "n_group": 2,
                      "topk_group": 1, "n_shared_experts": 2, "rms_norm_eps": 1e-5,
                      "expert_swiglu_limit_list": [0, 0, 1.5, 1.5],
                      "share_expert_swiglu_limit_list": [0, 0, 2.0, 2.0]},
        cfg=dict(
            vocab_size=331, hidden_size=48, intermediate_size=96, moe_intermediate_size=24,
            num_hidden_layers=4, layer_group_size=2, first_k_dense_replace=2,
            num_attention_heads=4, num_key_value_heads=4, head_dim=8, q_lora_rank=16,
            kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=6,
            attention_bias=True,
            num_experts=8, num_experts_per_tok=3, n_group=2, topk_group=1, n_shared_experts=2,
            routed_scaling_factor=2.5, norm_topk_prob=True, short_conv_kernel_size=4,
            kda_safe_gate=False, kda_lower_bound=-3.0, rms_norm_eps=1e-5, rope_theta=6000000.0,
            max_position_embeddings=4096, num_mtp_layers=0, pad_token_id=0, bos_token_id=None,
            eos_token_id=1, tie_word_embeddings=False,
        ),
    ),
]


# --------------------------------------------------------------------------------------
# 4. Deterministic, non-degenerate initialisation (every parameter is overwritten).
# --------------------------------------------------------------------------------------
ZERO_CENTRED_NORMS = ("input_layernorm.weight", "post_attention_layernorm.weight",
                      "q_norm.weight", "k_norm.weight")
# OLMo-Hybrid's RMSNorms multiply by the plain weight (no 1 + w)
PLAIN_NORMS = ZERO_CENTRED_NORMS + ("post_feedforward_layernorm.weight", "linear_attn.o_norm.weight",
                                    "self_attn.norm.weight")  # MiniMax's lightning output norm


@torch.no_grad()
def init_params(model, gen):
    def randn(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    tied = bool(model.config.tie_word_embeddings)  # a composite's own flag decides
    plain = model.config.model_type in ("olmo_hybrid", "minimax", "kimi_linear")
    nemo = model.config.model_type == "nemotron_h"
    bailing = model.config.model_type == "bailing_hybrid"
    handled = set()
    for name, p in model.named_parameters():
        shp = tuple(p.shape)
        full_name = name
        name = name.replace("model.language_model.", "model.", 1)
        if nemo:
            v = _nemotron_init(name, shp, randn, gen)
        elif bailing:
            v = _bailing_init(name, shp, randn, gen)
        elif name.startswith("model.visual."):
            v = randn(shp, 0.02)                     # vision tower: saved, never run
        elif plain and (name.endswith(PLAIN_NORMS) or name == "model.norm.weight"):
            v = randn(shp, 0.1, 1.0)                 # used as w
        elif name.endswith(ZERO_CENTRED_NORMS) or name == "model.norm.weight":
            v = randn(shp, 0.1)                      # used as (1 + w)
        elif name.endswith("linear_attn.norm.weight"):
            v = randn(shp, 0.1, 1.0)                 # gated RMSNorm: plain weight
        elif plain and name.endswith(("o_norm.weight", "q_a_layernorm.weight",
                                      "kv_a_layernorm.weight")):
            v = randn(shp, 0.1, 1.0)                 # Kimi's KDA output norm, MLA latent norms
        elif name.endswith(("linear_attn.A_log", "forget_gate.A_log")):
            v = (torch.rand(shp, generator=gen) * 0.95 + 0.05).log()   # A in [0.05, 1)
        elif name.endswith("linear_attn.dt_bias"):
            v = randn(shp, 0.5)
        elif name.endswith("forget_gate.dt_bias"):
            v = randn(shp, 0.5, -1.0)                # KDA: softplus(f + dt_bias) per channel
        elif name.endswith(("linear_attn.conv1d.weight", "self_attn.conv1d.weight")):
            v = randn(shp, 0.35)                     # [conv_dim, 1, K]
        elif name == "model.embed_tokens.weight":
            # tied: the embedding is also the LM head, keep logits O(1)
            v = randn(shp, 2.0 / math.sqrt(shp[-1]) if tied else 1.0)
        elif name.endswith("mlp.gate.weight"):      # MoE router [E, H]
            v = randn(shp, 1.5 / math.sqrt(shp[-1]))
        elif name.endswith(("experts.gate_up_proj", "experts.down_proj")) or (
                len(shp) == 2 and name.endswith(".weight")):
            v = randn(shp, 1.0 / math.sqrt(shp[-1]))  # Linear / expert [.., out, in]
        else:
            raise RuntimeError(f"no init rule for parameter {name} {shp}")
        p.copy_(v)
        handled.add(full_name)
    assert handled == {n for n, _ in model.named_parameters()}
    for name, b in model.named_buffers():  # DeepSeek's selection bias (a persistent buffer)
        if name.endswith("e_score_correction_bias"):
            b.copy_(randn(tuple(b.shape), 0.05))


def _nemotron_init(name, shp, randn, gen):
    """Nemotron-H (in-memory names: model.embeddings, model.layers.{i}.norm / .mixer.*,
    model.norm_f, lm_head; the experts fused [E, out, in]). Every RMSNorm multiplies by the
    plain weight; dt_bias N(-2.5, 0.5) keeps every dt well above time_step_min, so the
    clamped prefill and the unclamped decode agree (asserted)."""
    if name.endswith("mixer.A_log"):
        return (torch.rand(shp, generator=gen) * 0.95 + 0.05).log()   # A in [0.05, 1)
    if name.endswith("mixer.dt_bias"):
        return randn(shp, 0.5, -2.5)
    if name.endswith("mixer.D"):
        return randn(shp, 1.0)
    if name.endswith(("norm.weight", "norm_f.weight")):  # block norms, gated norm, norm_f
        return randn(shp, 0.1, 1.0)
    if name.endswith("mixer.conv1d.weight"):
        return randn(shp, 0.35)                            # [conv_dim, 1, K]
    if name.endswith("mixer.conv1d.bias"):
        return randn(shp, 0.1)
    if name.endswith(".bias"):  # in/out_proj (use_bias), MLP / shared / latent (mlp_bias)
        return randn(shp, 0.1)
    if name.endswith("mixer.gate.weight"):                 # router [E, hidden]
        return randn(shp, 1.5 / math.sqrt(shp[-1]))
    if name == "model.embeddings.weight":                  # never tied (no effect for this class)
        return randn(shp, 1.0)
    if name.endswith(("experts.up_proj", "experts.down_proj")) or (
            len(shp) == 2 and name.endswith(".weight")):
        return randn(shp, 1.0 / math.sqrt(shp[-1]))        # Linear / expert [.., out, in]
    raise RuntimeError(f"no init rule for parameter {name} {shp}")


def _bailing_init(name, shp, randn, gen):
    """Ling (bailing_hybrid; in-memory names: model.embed_tokens, self_attn.forget_gate.*,
    self_attn.conv1d, fused experts [E, out, in]). Every RMSNorm multiplies by the plain
    weight (block norms, model.norm, the KDA o_norm, the MLA kv_a_layernorm): N(1, 0.1).
    A = exp(A_log) ~ U(0.5, 2) and dt_bias N(0, 1), so the gate sigmoid(A·(f + dt_bias))
    spans its range (the class default, A in [1, 16] and dt_bias ~ -7..-2, gives g ~ 0)."""
    if name.endswith("forget_gate.A_log"):                 # [H]
        return (torch.rand(shp, generator=gen) * 1.5 + 0.5).log()
    if name.endswith("forget_gate.dt_bias"):               # [H*d]
        return randn(shp, 1.0)
    if name.endswith(("layernorm.weight", "o_norm.weight")) or name == "model.norm.weight":
        return randn(shp, 0.1, 1.0)
    if name.endswith("self_attn.conv1d.weight"):           # [3P, 1, K], no bias
        return randn(shp, 0.4)
    if name.endswith(".bias"):                             # attention_bias: kv_a_proj, o_proj
        return randn(shp, 0.1)
    if name.endswith("mlp.gate.weight"):                   # router [E, hidden]
        return randn(shp, 1.5 / math.sqrt(shp[-1]))
    if name == "model.embed_tokens.weight":                # never tied (no effect for this class)
        return randn(shp, 1.0)
    if name.endswith(("experts.gate_up_proj", "experts.down_proj")) or (
            len(shp) == 2 and name.endswith(".weight")):
        return randn(shp, 1.0 / math.sqrt(shp[-1]))        # Linear / expert [.., out, in]
    raise RuntimeError(f"no init rule for parameter {name} {shp}")


# --------------------------------------------------------------------------------------
# 5. Golden computation.
# --------------------------------------------------------------------------------------
class RouterMargin:
    """Records the smallest gap between the k-th and (k+1)-th routing probability."""

    def __init__(self, model):
        self.min = math.inf
        self.max_sum_dev = 0.0  # max |sum of a token's top-k routing weights - 1|
        self.weight_sums = (math.inf, -math.inf)  # Nemotron-H: range of a token's top-k sum
        self.handles = []
        for mod in model.modules():
            if type(mod).__name__.endswith("TopKRouter"):
                self.handles.append(mod.register_forward_hook(self._hook))
            elif type(mod).__name__ in ("KimiLinearTopkRouter", "NemotronHTopkRouter",
                                        "BailingHybridTopkRouter"):
                # same DeepSeek-V3 routing: sigmoid + selection bias, top-2 group scores
                self.handles.append(mod.register_forward_hook(self._grouped_hook))

    def _grouped_hook(self, mod, inp, out):
        """DeepSeek's router: the gap between the k-th and (k+1)-th biased score among the
        groups kept, and between the last group kept and the next."""
        s = torch.sigmoid(out[0].float()) + mod.e_score_correction_bias.float()
        E, G, kg, k = s.shape[-1], mod.num_group, mod.topk_group, mod.top_k
        grp = s.view(-1, G, E // G).topk(2, dim=-1).values.sum(-1)
        if kg < G:
            gt = torch.topk(grp, kg + 1, dim=-1).values
            self.min = min(self.min, float((gt[:, -2] - gt[:, -1]).min()))
        keep = torch.zeros_like(grp).scatter_(1, torch.topk(grp, kg, dim=-1).indices, 1.0)
        masked = s.masked_fill(~keep.bool().repeat_interleave(E // G, dim=1), float("-inf"))
        top = torch.topk(masked, min(k + 1, kg * (E // G)), dim=-1).values
        if top.shape[-1] > k:
            self.min = min(self.min, float((top[:, k - 1] - top[:, k]).min()))
        if type(mod).__name__ in ("NemotronHTopkRouter", "BailingHybridTopkRouter"):
            # out = (logits, weights, indices)
            ws = out[1].float().sum(-1)
            self.weight_sums = (min(self.weight_sums[0], float(ws.min())),
                                max(self.weight_sums[1], float(ws.max())))

    def _hook(self, mod, inp, out):
        probs = torch.softmax(out[0].float(), dim=-1)
        top = torch.topk(probs, mod.top_k + 1, dim=-1).values
        self.min = min(self.min, float((top[:, -2] - top[:, -1]).min()))
        self.max_sum_dev = max(self.max_sum_dev, float((out[1].float().sum(-1) - 1).abs().max()))


def lin_dims(cfg):
    """(K, Hk, Hv, dk, dv) of a model's linear layers: MiniMax's lightning attention has
    num_attention_heads heads of head_dim keys and values and no conv (K = 1)."""
    if cfg.model_type == "minimax":
        hd = cfg.head_dim or cfg.hidden_size // cfg.num_attention_heads
        return 1, cfg.num_attention_heads, cfg.num_attention_heads, hd, hd
    if cfg.model_type in ("kimi_linear", "bailing_hybrid"):  # KDA: q, k and v share the
        # heads and the width (Ling: linear_head_dim = config.json's linear_head_dim, else its
        # head_dim; linear_num_heads = num_attention_heads)
        H, d = cfg.linear_num_heads, cfg.linear_head_dim
        return cfg.linear_conv_kernel_dim, H, H, d, d
    if cfg.model_type == "nemotron_h":  # Mamba2: B/C ("keys") in G groups of N, x ("values")
        # in H heads of P; conv_dim = 2·G·N + H·P; the state is written [H][N][P]
        return (cfg.conv_kernel, cfg.n_groups, cfg.mamba_num_heads, cfg.ssm_state_size,
                cfg.mamba_head_dim)
    return (cfg.linear_conv_kernel_dim, cfg.linear_num_key_heads, cfg.linear_num_value_heads,
            cfg.linear_key_head_dim, cfg.linear_value_head_dim)


def block_types(cfg):
    """Per-layer kinds: Nemotron-H keeps them in layers_block_type (layer_types is its alias)."""
    if cfg.model_type == "nemotron_h":
        return list(cfg.layers_block_type)
    return list(cfg.layer_types)


@torch.no_grad()
def lin_states(cache, lin_layers, K, transpose=False):
    """transpose: Nemotron-H's cache holds the Mamba2 state [B, H, P, N]; HYPIC keeps
    S[key dim][value dim], i.e. [H][N][P]."""
    st, cv = {}, {}
    if K == 1:  # MiniMax: the state is in linear_cache ([B, H, d, d]); there is no conv
        for i in lin_layers:
            st[i] = cache.linear_cache[i][0].detach().clone().float().contiguous()
        return st, cv
    for i in lin_layers:
        s = cache.get_recurrent_state(i)   # [B, Hv, dk, dv]
        c = cache.get_conv_state(i)        # [B, conv_dim, K]  (last K pre-conv inputs)
        assert c.shape[-1] == K, c.shape
        s = s[0].transpose(-1, -2) if transpose else s[0]
        st[i] = s.detach().clone().float().contiguous()
        cv[i] = c[0, :, -(K - 1):].detach().clone().float().contiguous()
    return st, cv


class DtMonitor:
    """Nemotron-H: dt = softplus(in_proj's last H outputs + dt_bias) per token and head, seen
    by every Mamba2 mixer, by phase ("prefill": the prefills and the decode prompt, "decode":
    the one-token steps with a state, "oneshot": the 84-token sanity prefill). The chunked
    scan (prefill, oneshot) clamps dt at time_step_min; the decode update does not."""

    def __init__(self, model, floor):
        self.floor = floor
        self.phase = None
        self.stats = {}  # phase -> [min dt, count of dt < floor, count of dt]
        self.handles = []
        for mod in model.modules():
            if isinstance(mod, mnemo.NemotronHMamba2Mixer):
                self.handles.append(mod.in_proj.register_forward_hook(
                    lambda m, i, o, mix=mod: self._hook(mix, o)))

    def _hook(self, mix, out):
        dt = torch.nn.functional.softplus(out[..., -mix.num_heads:].float() + mix.dt_bias.float())
        st = self.stats.setdefault(self.phase, [math.inf, 0, 0])
        st[0] = min(st[0], float(dt.min()))
        st[1] += int((dt < self.floor).sum())
        st[2] += dt.numel()

    def summary(self):
        return {ph: {"min_dt": v[0], "dt_below_time_step_min": v[1], "dt_count": v[2]}
                for ph, v in self.stats.items()}


class BailingMonitor:
    """Ling: the range of the KDA forget gate g over every (token, head, channel) seen (the safe
    gate keeps it in (kda_lower_bound, 0); the softplus gate is unbounded below), and, where
    config.json carries SwiGLU limits (which transformers ignores), what a clamp at them would
    have met: per MoE layer, the largest silu(gate) and |up| over the experts each token was
    routed to and over the shared experts, and how many such rows exceed the limit."""

    def __init__(self, model, cfg):
        self.g = [math.inf, -math.inf]
        self.swiglu = {}
        self.handles = []
        el = getattr(cfg, "expert_swiglu_limit_list", None)
        sl = getattr(cfg, "share_expert_swiglu_limit_list", None)
        for i, layer in enumerate(model.model.layers):
            if isinstance(layer.self_attn, mbh.BailingHybridDeltaAttention):
                self.handles.append(layer.self_attn.forget_gate.register_forward_hook(self._gate))
            if isinstance(layer.mlp, mbh.BailingHybridMoE) and el is not None and sl is not None:
                self.handles.append(layer.mlp.experts.register_forward_pre_hook(
                    lambda m, a, i=i: self._experts(m, a, f"layer {i} experts", el[i])))
                self.handles.append(layer.mlp.shared_experts.register_forward_pre_hook(
                    lambda m, a, i=i: self._shared(m, a, f"layer {i} shared_experts", sl[i])))

    def _gate(self, mod, inp, out):
        self.g = [min(self.g[0], float(out.min())), max(self.g[1], float(out.max()))]

    def _stat(self, key, limit, gate, up):
        act = torch.nn.functional.silu(gate.float())
        st = self.swiglu.setdefault(key, {"limit": limit, "max_silu_gate": -math.inf,
                                          "max_abs_up": 0.0, "rows": 0, "rows_over_limit": 0})
        st["max_silu_gate"] = max(st["max_silu_gate"], float(act.max()))
        st["max_abs_up"] = max(st["max_abs_up"], float(up.abs().max()))
        st["rows"] += act.shape[0]
        if limit > 0:
            st["rows_over_limit"] += int(((act > limit) | (up.abs() > limit)).any(-1).sum())

    def _experts(self, mod, args, key, limit):
        h, idx = args[0], args[1]                       # [T, hidden], [T, top_k]
        gu = torch.einsum("tkoh,th->tko", mod.gate_up_proj[idx], h)
        im = mod.intermediate_dim
        self._stat(key, limit, gu[..., :im].reshape(-1, im), gu[..., im:].reshape(-1, im))

    def _shared(self, mod, args, key, limit):
        h = args[0].reshape(-1, args[0].shape[-1])
        self._stat(key, limit, mod.gate_proj(h), mod.up_proj(h))


def _assert_bailing_model(cfg, text_model):
    """Ling's reload: the interleaved default RoPE over all of qk_rope_head_dim (a
    partial_rotary_factor is not applied), the MLA scale, the KDA and MLA shapes."""
    rot = text_model.rotary_emb
    assert type(rot) is mbh.BailingHybridRotaryEmbedding and rot.rope_type == "default"
    dr, dn = cfg.qk_rope_head_dim, cfg.qk_nope_head_dim
    assert cfg.head_dim == dr, (cfg.head_dim, dr)  # post-init; what the default RoPE init reads
    theta = cfg.rope_parameters["rope_theta"]
    want = 1.0 / (theta ** (torch.arange(0, dr, 2, dtype=torch.float) / dr))
    assert rot.inv_freq.numel() == dr // 2 and torch.equal(rot.inv_freq, want), rot.inv_freq
    assert rot.attention_scaling == 1.0
    # the pairs (2i, 2i+1) rotate (DeepSeek's interleaved layout), not the halves
    assert "apply_rotary_pos_emb_interleave" in mbh.BailingHybridAttention.forward.__code__.co_names
    assert cfg.num_key_value_heads == cfg.num_attention_heads  # transformers' eager attention needs it
    for i, layer in enumerate(text_model.layers):
        att = layer.self_attn
        if cfg.layer_types[i] == "full_attention":
            assert isinstance(att, mbh.BailingHybridAttention), (i, type(att))
            assert att.scaling == (dn + dr) ** -0.5, att.scaling   # default RoPE: no mscale
            assert att.kv_a_layernorm.variance_epsilon == 1e-6     # not rms_norm_eps
            assert (att.o_proj.bias is not None) == bool(cfg.attention_bias)
            assert (att.kv_a_proj_with_mqa.bias is not None) == bool(cfg.attention_bias)
            assert att.q_proj.out_features == cfg.num_attention_heads * (dn + dr)  # no q-LoRA
        else:
            assert isinstance(att, mbh.BailingHybridDeltaAttention), (i, type(att))
            assert (att.num_heads, att.head_dim) == (cfg.linear_num_heads, cfg.linear_head_dim)
            assert att.forget_gate.safe_gate == cfg.kda_safe_gate
            assert att.o_norm.variance_epsilon == cfg.rms_norm_eps
        mlp_kind = cfg.mlp_layer_types[i]
        assert isinstance(layer.mlp, mbh.BailingHybridMoE if mlp_kind == "sparse"
                          else mbh.BailingHybridMLP), (i, mlp_kind)


@torch.no_grad()
def compute_golden(model, cfg, lin_layers, gen, monitor=None):
    K, Hk, Hv, dk, dv = lin_dims(cfg)
    conv_dim = 2 * Hk * dk + Hv * dv
    V = cfg.vocab_size
    tr = cfg.model_type == "nemotron_h"  # Mamba2: [H, P, N] in the cache, written [H, N, P]
    out = {}

    def fwd(ids, cache=None, phase="prefill"):
        if monitor is not None:
            monitor.phase = phase
        return model(input_ids=ids[None].long(), past_key_values=cache, use_cache=True)

    for n in PREFILL_LENS:
        tok = torch.randint(0, V, (n,), generator=gen, dtype=torch.int64)
        o = fwd(tok)
        st, cv = lin_states(o.past_key_values, lin_layers, K, tr)
        out[f"prefill.{n}.tokens"] = tok.to(torch.int32)
        out[f"prefill.{n}.logits"] = o.logits[0, -1].float().contiguous()
        for i in lin_layers:
            assert st[i].shape == (Hv, dk, dv), st[i].shape
            out[f"prefill.{n}.state.{i}"] = st[i]
            if K > 1:
                assert cv[i].shape == (conv_dim, K - 1)
                out[f"prefill.{n}.conv.{i}"] = cv[i]
        if n < K - 1:  # nothing before the first token: left zero padding
            assert torch.all(cv[lin_layers[0]][:, : K - 1 - n] == 0)

    total = DECODE_PROMPT + DECODE_STEPS
    tok = torch.randint(0, V, (total,), generator=gen, dtype=torch.int64)
    o = fwd(tok[:DECODE_PROMPT])
    cache = o.past_key_values
    rows = [o.logits[0, -1].float()]
    for t in range(DECODE_PROMPT, total):
        o = fwd(tok[t:t + 1], cache, "decode")
        assert o.logits.shape[1] == 1
        rows.append(o.logits[0, -1].float())
    st, _ = lin_states(cache, lin_layers, K, tr)
    out["decode.tokens"] = tok.to(torch.int32)
    out["decode.logits"] = torch.stack(rows).contiguous()
    for i in lin_layers:
        out[f"decode.state.{i}"] = st[i]

    # Sanity: one-shot prefill of all 84 tokens (chunked path) vs the recurrent decode path.
    full = fwd(tok, phase="oneshot")
    fst, _ = lin_states(full.past_key_values, lin_layers, K, tr)
    sanity = {
        "last_logits_max_abs_diff": float((full.logits[0, -1] - rows[-1]).abs().max()),
        "all_decode_rows_max_abs_diff": float(
            (full.logits[0, DECODE_PROMPT - 1:] - out["decode.logits"]).abs().max()),
        "final_state_max_abs_diff": max(float((fst[i] - st[i]).abs().max()) for i in lin_layers),
        "logits_abs_max": float(out["decode.logits"].abs().max()),
        "logits_std": float(out["decode.logits"].std()),
    }
    return out, sanity


# --------------------------------------------------------------------------------------
# 6. Build one fixture directory.
# --------------------------------------------------------------------------------------
class NearTie(Exception):
    pass


def dir_bytes(p):
    return sum(f.stat().st_size for f in Path(p).rglob("*") if f.is_file())


def build(spec, root, seed, capture):
    name = spec["name"]
    d = Path(root) / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    composite = spec.get("composite")
    if composite:
        cfg = spec["cfg_cls"](text_config=dict(spec["cfg"]), **composite)
    else:
        cfg = spec["cfg_cls"](**spec["cfg"])
    expected_types = block_types(cfg.get_text_config())
    model = spec["cls"](cfg).to(torch.float32)
    init_params(model, gen)
    dto = spec.get("dt_bias_override")
    if dto:  # Nemotron-H's dt-clamp fixture: a few heads with a tiny dt
        with torch.no_grad():
            for h in dto["heads"]:
                model.model.layers[dto["layer"]].mixer.dt_bias[h] = dto["value"]
    model.to(spec["storage"]).save_pretrained(d, safe_serialization=True)
    del model

    # Tensors the fixture's checkpoint must not carry (MiniMax's decay tables in BF16:
    # transformers loads them as stored, rounded, and its block prefill then disagrees with
    # its own decode; absent, it recomputes them in fp32).
    drop = spec.get("drop_tensors")
    if drop:
        st_path = d / "model.safetensors"
        tensors = load_file(st_path)
        kept = {k: v for k, v in tensors.items() if not any(k.endswith(x) for x in drop)}
        assert len(kept) < len(tensors)
        save_file(kept, str(st_path), metadata={"format": "pt"})

    # Kimi's dense layers as the released checkpoint names them (`mlp.`), which transformers
    # loads as it loads its own `block_sparse_moe.`
    if spec.get("rename_dense_mlp"):
        st_path = d / "model.safetensors"
        tensors = load_file(st_path)
        dense = (".block_sparse_moe.gate_proj.", ".block_sparse_moe.up_proj.",
                 ".block_sparse_moe.down_proj.")
        renamed = {next((k.replace(".block_sparse_moe.", ".mlp.") for x in dense if x in k), k): v
                   for k, v in tensors.items()}
        assert sum(".mlp." in k for k in renamed) >= 3, sorted(renamed)
        save_file(renamed, str(st_path), metadata={"format": "pt"})

    # Rewrite the layer pattern in config.json the way real Qwen3-Next checkpoints carry it.
    cpath = d / "config.json"
    cj = json.loads(cpath.read_text())
    if spec["on_disk_interval"] != "keep":
        cj.pop("layer_types", None)
        if spec["on_disk_interval"] is not None:
            cj["full_attention_interval"] = spec["on_disk_interval"]
        cpath.write_text(json.dumps(cj, indent=2, sort_keys=True) + "\n")
    # The config-semantics fixtures: the keys whose reading is under test.
    edit = spec.get("config_edit")
    if edit:
        for k in edit.get("drop", ()):
            assert k in cj, k
            del cj[k]
        cj.update(edit.get("set", {}))
        raw_keys = edit.get("raw", {})
        # keys whose value is written verbatim, e.g. Nemotron-H's bare `Infinity` (not JSON,
        # but what released config.json files carry and Python's json reads): each is
        # dumped as a marker string that the verbatim text then replaces
        assert not set(raw_keys) & set(cj), raw_keys
        cj.update({k: f"@@raw:{k}@@" for k in raw_keys})
        text = json.dumps(cj, indent=2, sort_keys=True) + "\n"
        if raw_keys:
            for k, raw in raw_keys.items():
                assert text.count(f'"@@raw:{k}@@"') == 1
                text = text.replace(f'"@@raw:{k}@@"', raw)
                assert f'"{k}": {raw}' in text
            cj = json.loads(text)  # Python's reading of it (Infinity -> inf)
        cpath.write_text(text)
    if composite:
        assert "text_config" in cj and cj["model_type"] == spec["cfg_cls"].model_type, cj
        assert cj["tie_word_embeddings"] == composite["tie_word_embeddings"]
        assert cj["text_config"]["tie_word_embeddings"] == spec["cfg"]["tie_word_embeddings"]
        assert cj["tie_word_embeddings"] != cj["text_config"]["tie_word_embeddings"]

    # Reload exactly what is on disk, in fp32, eager attention, eager experts.
    kw = dict(dtype=torch.float32, attn_implementation="eager", local_files_only=True)
    if ("moe" in spec["cls"].__name__.lower() or "num_experts" in cj
            or spec["family"] in ("minimax", "kimi_linear", "nemotron_h", "bailing_hybrid")):
        kw["experts_implementation"] = "eager"
    model = spec["cls"].from_pretrained(d, **kw).eval()
    top_cfg = model.config
    assert type(top_cfg) is spec["cfg_cls"], type(top_cfg)
    assert AutoConfig.from_pretrained(d).model_type == spec["cfg_cls"].model_type
    cfg = top_cfg.get_text_config()  # the text model's settings (itself when not composite)
    assert (cfg is not top_cfg) == bool(composite)
    text_model = model.model.language_model if composite else model.model
    assert block_types(cfg) == expected_types, (block_types(cfg), expected_types)
    for k, want in spec.get("expect_attrs", {}).items():
        assert getattr(cfg, k) == want, (k, getattr(cfg, k), want)
    assert cfg._attn_implementation == "eager", cfg._attn_implementation
    if "experts_implementation" in kw:
        assert cfg._experts_implementation == "eager", cfg._experts_implementation
    assert getattr(model, "_use_kernels", False) is False
    if spec["family"] == "minimax":  # the whole head rotates, partial_rotary_factor or not
        hd = cfg.head_dim or cfg.hidden_size // cfg.num_attention_heads
        assert text_model.rotary_emb.inv_freq.numel() == hd // 2
    elif spec["family"] == "kimi_linear":  # no positional encoding anywhere
        assert getattr(text_model, "rotary_emb", None) is None
    elif spec["family"] == "nemotron_h":  # no positional encoding anywhere (NoPE attention)
        assert type(text_model) is mnemo.NemotronHModel  # `model.`, not `backbone.`, in memory
        assert getattr(text_model, "rotary_emb", None) is None
        assert not any("rotary" in type(m).__name__.lower() for m in model.modules())
        assert not model.training  # the fused split-conv-scan branch runs only in training
    elif spec["family"] == "bailing_hybrid":  # interleaved RoPE over qk_rope_head_dim, MLA only
        _assert_bailing_model(cfg, text_model)
    elif spec["family"] == "olmo_hybrid":  # the whole head rotates, or nothing (NoPE)
        hd = getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads)
        if cfg.rope_parameters.get("rope_theta") is None:
            assert text_model.rotary_emb is None
        else:
            assert text_model.rotary_emb.inv_freq.numel() == hd // 2
    else:
        rot_dim = int(cfg.head_dim * cfg.rope_parameters["partial_rotary_factor"])
        assert rot_dim < cfg.head_dim and text_model.rotary_emb.inv_freq.numel() == rot_dim // 2
    for pn, p in model.named_parameters():
        assert p.dtype == torch.float32, (pn, p.dtype)
    # Everything on disk must equal the fp32 model (which therefore holds the rounded values).
    disk = load_file(d / "model.safetensors")
    for tn, t in disk.items():
        assert t.dtype == spec["storage"], (tn, t.dtype)
    params = dict(model.named_parameters())
    if spec["storage"] != torch.float32:
        for pn, p in params.items():
            assert torch.equal(p, p.to(spec["storage"]).float()), f"{pn} not storage-rounded"
    # Tying: a composite's own flag decides (PreTrainedModel.get_expanded_tied_weights_keys
    # reads self.config, the composite config), never text_config's.
    tied = model.lm_head.weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()
    assert tied == bool(top_cfg.tie_word_embeddings), (tied, top_cfg.tie_word_embeddings)
    assert ("lm_head.weight" in disk) == (not top_cfg.tie_word_embeddings)
    if composite:
        assert any(k.startswith("model.visual.") for k in disk)
        assert all(k.startswith(("model.visual.", "model.language_model.", "lm_head."))
                   for k in disk)

    types = block_types(cfg)
    lin_layers = [i for i, t in enumerate(types) if t == "linear_attention"]
    full_layers = [i for i, t in enumerate(types) if t == "full_attention"]
    nemo = spec["family"] == "nemotron_h"
    bailing = spec["family"] == "bailing_hybrid"
    margin = RouterMargin(model)
    dtmon = DtMonitor(model, cfg.time_step_min) if nemo else None
    bmon = BailingMonitor(model, cfg) if bailing else None
    golden, sanity = compute_golden(model, cfg, lin_layers,
                                    torch.Generator().manual_seed(seed + 1), dtmon)
    sanity["min_router_margin"] = None if margin.min == math.inf else margin.min
    if bailing:
        for h in bmon.handles:
            h.remove()
        # Σ top-k weights = routed_scaling_factor (norm_topk_prob)
        assert margin.weight_sums[0] != math.inf and cfg.norm_topk_prob
        sanity["router_weight_sum_range"] = list(margin.weight_sums)
        assert max(abs(w - cfg.routed_scaling_factor) for w in margin.weight_sums) < 1e-5
        sanity["kda_gate_range"] = bmon.g
        if cfg.kda_safe_gate:  # lower_bound·sigmoid(·) in (lower_bound, 0)
            assert cfg.kda_lower_bound < bmon.g[0] and bmon.g[1] <= 0, bmon.g
        else:  # -exp(A_log)·softplus(·): below lower_bound too (a clamp there would bite)
            assert bmon.g[0] < cfg.kda_lower_bound and bmon.g[1] <= 0, bmon.g
        if bmon.swiglu:  # limits that transformers ignores, and that would have clamped
            sanity["swiglu_limits_ignored"] = bmon.swiglu
            for part in ("experts", "shared_experts"):
                assert any(v["rows_over_limit"] > 0 for k, v in bmon.swiglu.items()
                           if k.endswith(" " + part)), (part, bmon.swiglu)
    if nemo:
        for h in dtmon.handles:
            h.remove()
        sanity["dt"] = dtmon.summary()
        if margin.weight_sums[0] != math.inf:  # Σ top-k weights = routed_scaling_factor iff
            sanity["router_weight_sum_range"] = list(margin.weight_sums)  # norm_topk_prob
            if cfg.norm_topk_prob:
                assert max(abs(w - cfg.routed_scaling_factor) for w in margin.weight_sums) < 1e-5
    if spec.get("check_router_sums"):
        # the router renormalised whatever config.json says
        assert getattr(cfg, "norm_topk_prob") is False, "config.json's key was not kept"
        assert 0.0 <= margin.max_sum_dev < 1e-5, margin.max_sum_dev
        sanity["router_weight_sum_max_abs_dev"] = margin.max_sum_dev
    for h in margin.handles:
        h.remove()
    if sanity["min_router_margin"] is not None and sanity["min_router_margin"] <= MIN_ROUTER_MARGIN:
        raise NearTie(f"{name}: near-tie in MoE routing ({sanity['min_router_margin']:.2e}) with seed {seed}")
    if spec.get("clamp_asymmetry"):
        # Nemotron-H's dt clamp: prefill dt below the floor were clamped, decode dt below it
        # were not, and that shows in the logits: decode must NOT match the one-shot prefill
        dts = sanity["dt"]
        assert dts["prefill"]["dt_below_time_step_min"] > 0, dts
        assert dts["decode"]["dt_below_time_step_min"] > 0, dts
        assert sanity["all_decode_rows_max_abs_diff"] > CLAMP_MIN_DIFF, sanity
    else:
        if nemo:  # no dt reached the clamp, so the chunked and the decode path may agree
            assert all(v["dt_below_time_step_min"] == 0 for v in sanity["dt"].values()), sanity
        assert sanity["last_logits_max_abs_diff"] < SANITY_TOL, sanity
        assert sanity["all_decode_rows_max_abs_diff"] < SANITY_TOL, sanity

    save_file(golden, str(d / "golden.safetensors"),
              # one key only: safetensors serialises metadata from a hash map (random order)
              metadata={"generator": f"tools/golden/make_golden.py {name}"})

    K, Hk, Hv, dk, dv = lin_dims(cfg)
    tj = cj.get("text_config", cj) if composite else cj  # the text model's keys on disk
    meta = {
        "model": name,
        "architecture": spec["cls"].__name__,
        "model_type": cfg.model_type,
        "storage_dtype": str(spec["storage"]).replace("torch.", ""),
        "compute_dtype": "float32",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "safetensors": safetensors.__version__, "numpy": numpy.__version__},
        "seed": seed,
        "token_seed": seed + 1,
        "layer_types": list(cfg.layer_types),
        "linear_layers": lin_layers,
        "full_attention_layers": full_layers,
        "config_json_layer_pattern": ("layer_types" if "layer_types" in tj else
                                      f"full_attention_interval={tj.get('full_attention_interval', 'default(4)')}"),
        "prefill_lengths": list(PREFILL_LENS),
        "decode": {"prompt": DECODE_PROMPT, "steps": DECODE_STEPS},
        "layouts": {
            "state": f"[Hv={Hv}, dk={dk}, dv={dv}] fp32; S[h,i,j], i=key dim, j=value dim; "
                     "o_t[h,j]=sum_i S[h,i,j]*q_t[h//(Hv/Hk),i]; update S += k[i]*delta[j]",
            "conv": f"[conv_dim={2 * Hk * dk + Hv * dv}, K-1={K - 1}] last K-1 pre-conv inputs, oldest "
                    f"first (zeros if fewer tokens); channels = q[Hk*dk] | k[Hk*dk] | v[Hv*dv], "
                    "each head-major (head*d + i); same order as conv1d.weight",
            "value_head_to_key_head": "h -> h // (Hv/Hk)",
        },
        "sanity": sanity,
        "weights": {k: list(v.shape) for k, v in sorted(disk.items())},
    }
    if edit or composite:  # only the config-semantics fixtures carry this
        meta["config_semantics"] = {
            "config_json_edits": edit or {},
            "top_level_tie_word_embeddings": top_cfg.tie_word_embeddings,
            "text_config_tie_word_embeddings": cfg.tie_word_embeddings if composite else None,
            "lm_head_tied_to_embedding": tied,
            "shared_expert_intermediate_size": getattr(cfg, "shared_expert_intermediate_size", None),
            "norm_topk_prob_attribute": getattr(cfg, "norm_topk_prob", None),
            "config_json_model_type": top_cfg.model_type,
        }
    if nemo:
        meta = nemotron_meta(meta, cfg, tj, spec, tied)
    if bailing:
        meta = bailing_meta(meta, cfg, tj, spec, tied)
    # (Nemotron-H, Ling: strict JSON, no bare Infinity in golden.json)
    (d / "golden.json").write_text(json.dumps(meta, indent=2, allow_nan=not (nemo or bailing))
                                   + "\n")

    for f in d.iterdir():
        f.chmod(0o644)  # safetensors writes 0600
    size = dir_bytes(d)
    print(f"[{name}] {spec['cls'].__name__} ({cfg.model_type}), storage {meta['storage_dtype']}, "
          f"layers {cfg.hybrid_override_pattern if nemo else ''.join('L' if t == 'linear_attention' else 'F' for t in cfg.layer_types)}")
    print(f"[{name}] decode-vs-prefill: last-logits max|diff| = {sanity['last_logits_max_abs_diff']:.3e}, "
          f"all rows {sanity['all_decode_rows_max_abs_diff']:.3e}, "
          f"final state {sanity['final_state_max_abs_diff']:.3e}; "
          f"logits std {sanity['logits_std']:.3f}; router margin {sanity['min_router_margin']}")
    print(f"[{name}] fixture size {size} bytes "
          f"(model.safetensors {(d / 'model.safetensors').stat().st_size}, "
          f"golden.safetensors {(d / 'golden.safetensors').stat().st_size})")
    assert size < MAX_MODEL_DIR_BYTES, f"{name}: {size} bytes >= {MAX_MODEL_DIR_BYTES}"
    return size


def _finite(v):
    """JSON-safe: non-finite floats as strings ("Infinity"), tuples as lists."""
    if isinstance(v, float) and not math.isfinite(v):
        return "Infinity" if v > 0 else ("-Infinity" if v < 0 else "NaN")
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def nemotron_meta(meta, cfg, tj, spec, tied):
    """golden.json for Nemotron-H: the block pattern, the Mamba2 layouts, and for the legacy
    config.json what transformers read from it."""
    K, G, H, N, P = lin_dims(cfg)
    I, conv_dim = H * P, H * P + 2 * G * N
    items = list(meta.items())
    at = [k for k, _ in items].index("layer_types") + 1
    items.insert(at, ("hybrid_override_pattern", cfg.hybrid_override_pattern))
    meta = dict(items)
    meta["config_json_layer_pattern"] = (
        "layers_block_type" if "layers_block_type" in tj else
        f"hybrid_override_pattern={tj['hybrid_override_pattern']}")
    meta["layouts"] = {
        "state": f"[H={H}, N={N}, P={P}] fp32 (mamba_num_heads, ssm_state_size, mamba_head_dim); "
                 "S[h,n,p] = transformers' ssm state [h,p,n] transposed: n = B/C state index "
                 "(key dim), p = channel of head h (value dim). Head h reads B/C group "
                 "g = h // (H/G). Per token: S[h] = exp(dt_h*A_h)*S[h] + dt_h*B_g[n]*x_h[p]; "
                 "y_h[p] = sum_n S[h,n,p]*C_g[n] + D_h*x_h[p]; A = -exp(A_log), "
                 "dt = softplus(dt_raw + dt_bias), clamped below at time_step_min in the "
                 "chunked scan (every prefill) and not in the one-token decode step",
        "conv": f"[conv_dim={conv_dim}, K-1={K - 1}] last K-1 pre-conv, pre-SiLU xBC inputs, "
                f"oldest first (zeros if fewer tokens); channels = x[H*P={I}] (head-major, "
                f"h*P+p) | B[G*N={G * N}] (group-major, g*N+n) | C[G*N={G * N}]; same order "
                "as conv1d.weight; dt is not convolved",
        "value_head_to_key_head": "h -> h // (H/G) (mamba head -> B/C group)",
        "in_proj_rows": f"z[I={I}] | xBC[conv_dim={conv_dim}] | dt[H={H}]",
        "lin_dims": f"(K, Hk, Hv, dk, dv) = (conv_kernel, n_groups, mamba_num_heads, "
                    f"ssm_state_size, mamba_head_dim) = ({K}, {G}, {H}, {N}, {P})",
    }
    if spec.get("config_edit"):
        meta["config_semantics"] = {
            "config_json_edits": spec["config_edit"],
            "read_by_transformers": {k: _finite(getattr(cfg, k)) for k in spec["expect_attrs"]},
            "lm_head_tied_to_embedding": tied,
            "config_json_model_type": cfg.model_type,
        }
    if spec.get("dt_bias_override"):
        meta["dt_bias_override"] = dict(spec["dt_bias_override"],
                                        heads=list(spec["dt_bias_override"]["heads"]))
    meta["sanity"] = dict(meta["sanity"], decode_matches_prefill=not spec.get("clamp_asymmetry"))
    return meta


def bailing_meta(meta, cfg, tj, spec, tied):
    """golden.json for Ling (bailing_hybrid): where config.json put the layer pattern and the
    KDA head dim, the KDA / MLA / MoE layouts, and what transformers read from config.json."""
    K, H, _, d, _ = lin_dims(cfg)
    P = H * d
    dn, dr, dv, r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    items = list(meta.items())
    at = [k for k, _ in items].index("layer_types") + 1
    items.insert(at, ("mlp_layer_types", list(cfg.mlp_layer_types)))
    meta = dict(items)
    meta["config_json_layer_pattern"] = (
        "layer_types" if "layer_types" in tj else
        f"layer_group_size={tj['layer_group_size']} (layer i is full_attention iff "
        "(i+1) % layer_group_size == 0; a trailing partial group is all linear_attention)")
    meta["config_json_mlp_pattern"] = (
        "mlp_layer_types" if "mlp_layer_types" in tj else
        f"first_k_dense_replace={tj['first_k_dense_replace']} (layers i < it are dense)")
    meta["config_json_kda_head_dim"] = (
        f"linear_head_dim={tj['linear_head_dim']} (head_dim={tj['head_dim']} is "
        "qk_rope_head_dim, as save_pretrained writes it)" if "linear_head_dim" in tj else
        f"head_dim={tj['head_dim']} (as released; transformers then sets head_dim := "
        "qk_rope_head_dim)")
    g = (f"g = kda_lower_bound * sigmoid(exp(A_log[h]) * a), kda_lower_bound={cfg.kda_lower_bound}"
         if cfg.kda_safe_gate else
         "g = -exp(A_log[h]) * softplus(a) (kda_safe_gate false; kda_lower_bound not read)")
    meta["layouts"] = {
        "state": f"[H={H}, d={d}, d={d}] fp32 = transformers' get_recurrent_state(i)[0] as is "
                 "(no transpose): S[h,i,j], i = key channel, j = value channel. Per token: "
                 "S[h] = Diag(exp(g_t[h,:])) S[h] (row i decays by its own channel's g), then "
                 "S[h] += beta_h * k^[i] * (v[j] - sum_i S[h,i,j] k^[i]); "
                 "o[h,j] = sum_i S[h,i,j] q^[i] / sqrt(d); "
                 "q^, k^ = x / sqrt(sum x^2 + 1e-6) over d "
                 f"(after the conv); beta = sigmoid(b_proj h); a = f_proj h + dt_bias (per channel "
                 f"h*d + i); {g}",
        "conv": f"[3P={3 * P}, K-1={K - 1}] = get_conv_state(i)[0, :, -(K-1):]: the last K-1 "
                "pre-conv, pre-SiLU projections, oldest first (zeros if fewer tokens; the "
                "oldest of transformers' K columns is never read again); channels "
                f"q[P={P}] | k[P] | v[P], each head-major (h*d + i): the rows of conv1d.weight "
                "[3P, 1, K], on disk q_conv1d | k_conv1d | v_conv1d [P, 1, K] each; no conv bias, "
                "SiLU after the conv",
        "value_head_to_key_head": "h -> h (q, k and v share H heads of d)",
        "lin_dims": f"(K, Hk, Hv, dk, dv) = (linear_conv_kernel_dim, linear_num_heads, "
                    f"linear_num_heads, linear_head_dim, linear_head_dim) = ({K}, {H}, {H}, "
                    f"{d}, {d})",
        "mla": f"layers {[i for i, t in enumerate(cfg.layer_types) if t == 'full_attention']}: "
               f"{cfg.num_attention_heads} heads; q_proj rows per head [nope {dn} | rope {dr}] "
               f"(no q-LoRA); kv_a_proj_with_mqa rows [latent {r} | k_rope {dr}], the latent "
               "RMS-normed by kv_a_layernorm with eps 1e-6 (not rms_norm_eps), k_rope shared by "
               f"the heads; kv_b_proj rows per head [k_nope {dn} | v {dv}]; RoPE interleaved "
               f"(pairs 2i, 2i+1 rotate by pos * theta^(-2i/{dr}), theta "
               f"{cfg.rope_parameters['rope_theta']:g}, over all {dr} rope dims; transformers "
               "writes the rotated pairs de-interleaved, evens then odds, in q and k alike, so "
               "dot products are those of the interleaved rotation), scale "
               f"({dn}+{dr})^-0.5; output per head times sigmoid(g_proj h)[h]; no state in the "
               "fixture",
        "moe": "sigmoid(gate.weight h) + e_score_correction_bias (on disk gate.expert_bias) "
               f"chooses: {cfg.n_group} groups scored by their top-2, {cfg.topk_group} kept, "
               f"top-{cfg.num_experts_per_tok} experts; weights = unbiased sigmoid / their sum "
               f"(+1e-20) * {cfg.routed_scaling_factor}; plus shared experts of width "
               f"moe_intermediate_size * n_shared_experts = "
               f"{cfg.moe_intermediate_size * cfg.n_shared_experts}, ungated",
    }
    meta["config_semantics"] = {
        "config_json_edits": spec.get("config_edit", {}),
        "read_by_transformers": {k: _finite(getattr(cfg, k)) for k in spec["expect_attrs"]},
        "lm_head_tied_to_embedding": tied,
        "config_json_model_type": cfg.model_type,
        "config_json_architectures": tj.get("architectures"),
    }
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "tests/fixtures/golden"))
    ap.add_argument("--only", nargs="*", help="subset of model names")
    args = ap.parse_args()

    transformers.utils.logging.disable_progress_bar()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    assert_pure_torch_static()
    capture = _Capture()
    logging.getLogger("transformers").addHandler(capture)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    total = 0
    for k, spec in enumerate(SPECS):
        if args.only and spec["name"] not in args.only:
            continue
        # Deterministic seed schedule; a seed whose MoE routing has a near tie (top-k vs
        # (k+1)-th probability closer than MIN_ROUTER_MARGIN) is skipped for the next one.
        for attempt in range(MAX_SEED_ATTEMPTS):
            try:
                total += build(spec, out, SEED + 100 * k + attempt, capture)
                break
            except NearTie as e:
                print(f"[{spec['name']}] {e}; trying the next seed")
        else:
            sys.exit(f"{spec['name']}: no seed without routing near-ties")

    # Runtime proof: each fast-path call site went through the torch fallback wrapper
    # (MiniMax has none: its lightning attention is plain PyTorch in the modeling file).
    built = {spec["family"] for spec in SPECS if not args.only or spec["name"] in args.only}
    if built & {"qwen3_next", "qwen3_5", "olmo_hybrid"}:
        for w in FALLBACK_WARNINGS:
            assert any(w in m for m in capture.messages), f"no fallback notice for {w}"
        print(f"pure-PyTorch path confirmed ({len(FALLBACK_WARNINGS)} fallback notices seen)")
    if "kimi_linear" in built:
        for w in KIMI_FALLBACK_WARNINGS:
            assert any(w in m for m in capture.messages), f"no fallback notice for {w}"
        print(f"Kimi's pure-PyTorch KDA confirmed ({len(KIMI_FALLBACK_WARNINGS)} notices seen)")
    if "nemotron_h" in built:
        for w in NEMOTRON_FALLBACK_WARNINGS:
            assert any(w in m for m in capture.messages), f"no fallback notice for {w}"
        print(f"Nemotron-H's pure-PyTorch Mamba2 confirmed ({len(NEMOTRON_FALLBACK_WARNINGS)} "
              "notices seen)")
    if "bailing_hybrid" in built:
        for w in BAILING_FALLBACK_WARNINGS:
            assert any(w in m for m in capture.messages), f"no fallback notice for {w}"
        print(f"Ling's pure-PyTorch KDA confirmed ({len(BAILING_FALLBACK_WARNINGS)} notices seen)")
    print(f"total fixture size {total} bytes in {out}")
    if not args.only:
        assert dir_bytes(out) < MAX_TOTAL_BYTES


if __name__ == "__main__":
    main()
