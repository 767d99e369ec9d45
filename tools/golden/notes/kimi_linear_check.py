# Verification script for /work/notes/families/kimi_linear.md (transformers 5.23.0, CPU).
# Run: HF_HUB_OFFLINE=1 USE_HUB_KERNELS=NO /work/main/tools/golden/.venv/bin/python kimi_linear_check.py
import json, logging, math, os, shutil, sys
import torch
import transformers
from transformers import KimiLinearConfig, KimiLinearForCausalLM, AutoConfig
from transformers.utils import import_utils
from transformers.integrations import hub_kernels
import transformers.models.kimi_linear.modeling_kimi_linear as mk

torch.manual_seed(0)
torch.set_num_threads(2)
OUT = "/tmp/kl/fixture"

# ---------------- 1. static pure-torch proof
assert not import_utils.is_flash_linear_attention_available()
assert not import_utils.is_causal_conv1d_available()
assert not import_utils.is_kernels_available()
assert hub_kernels._kernels_enabled is False
for fname in ("causal_conv1d_fn", "causal_conv1d_update", "chunk_kimi_delta_attention",
              "recurrent_kimi_delta_attention"):
    f = getattr(mk, fname)
    cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
    assert cells["is_new_implementation"] is False, fname
    assert cells["implementation"] is cells["torch_function"], fname
    assert cells["torch_function"].__module__ == mk.__name__, fname
assert mk.KimiLinearDeltaAttention.forward.__module__ == mk.__name__
print("[1] static pure-torch checks OK")

class Cap(logging.Handler):
    def __init__(s): super().__init__(logging.WARNING); s.msgs = []
    def emit(s, r): s.msgs.append(r.getMessage())
cap = Cap(); logging.getLogger("transformers").addHandler(cap)

# ---------------- 2. tiny config, written as a released-style config.json (1-indexed lists)
def tiny_json(q_lora=None):
    return {
        "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear",
        "vocab_size": 331, "hidden_size": 48, "intermediate_size": 64, "moe_intermediate_size": 16,
        "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 4,
        "kv_lora_rank": 24, "q_lora_rank": q_lora, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
        "v_head_dim": 12, "head_dim": 72, "mla_use_nope": True,
        "linear_attn_config": {"kda_layers": [1, 3, 4], "full_attn_layers": [2, 5],
                               "num_heads": 4, "head_dim": 8, "short_conv_kernel_size": 4},
        "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
        "num_expert_group": 4, "topk_group": 2, "moe_renormalize": True,
        "moe_router_activation_func": "sigmoid", "routed_scaling_factor": 2.446,
        "first_k_dense_replace": 1, "moe_layer_freq": 1, "use_grouped_topk": True,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
        "model_max_length": 4096, "num_nextn_predict_layers": 0,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "use_cache": True,
    }
os.makedirs("/tmp/kl/cfg", exist_ok=True)
json.dump(tiny_json(), open("/tmp/kl/cfg/config.json", "w"))
cfg = AutoConfig.from_pretrained("/tmp/kl/cfg")
assert cfg.layer_types == ["linear_attention", "full_attention", "linear_attention",
                           "linear_attention", "full_attention"], cfg.layer_types
assert cfg.mlp_layer_types == ["dense", "sparse", "sparse", "sparse", "sparse"]
assert (cfg.n_group, cfg.topk_group, cfg.num_local_experts, cfg.num_experts_per_tok,
        cfg.n_shared_experts, cfg.norm_topk_prob) == (4, 2, 8, 2, 1, True)
assert (cfg.linear_num_heads, cfg.linear_head_dim, cfg.linear_conv_kernel_dim) == (4, 8, 4)
assert cfg.head_dim == 72 and cfg.qk_head_dim == 24
print("[2] config parse OK", cfg.layer_types, cfg.mlp_layer_types)

# ---------------- 3. build model with O(1) activations
def build(cfg):
    m = KimiLinearForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("A_log"):
                p.copy_(torch.empty_like(p).uniform_(0.05, 1.0).log())
            elif n.endswith("dt_bias"):
                p.copy_(torch.randn_like(p) * 0.5 - 1.0)
            elif "norm" in n:
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif n.endswith("conv1d.weight"):
                p.copy_(torch.randn_like(p) * 0.35)
            elif n.endswith("gate.weight"):
                p.copy_(torch.randn_like(p) * 1.5 / math.sqrt(p.shape[-1]))
            elif p.dim() >= 2:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
        for n, b in m.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.05)
    return m

m0 = build(cfg)
shutil.rmtree(OUT, ignore_errors=True)
m0.save_pretrained(OUT)
from safetensors import safe_open
saved = sorted(safe_open(f"{OUT}/model.safetensors", "pt").keys())
assert "model.layers.0.block_sparse_moe.gate_proj.weight" in saved      # dense MLP saved under block_sparse_moe!
assert "model.layers.1.block_sparse_moe.experts.7.w3.weight" in saved
assert "model.layers.0.self_attn.q_conv1d.weight" in saved and "model.layers.0.self_attn.A_log" in saved
print("[3] saved", len(saved), "tensors; config.json keys:", sorted(json.load(open(f"{OUT}/config.json"))))
model = KimiLinearForCausalLM.from_pretrained(OUT, dtype=torch.float32, attn_implementation="eager",
                                              experts_implementation="eager").eval()
assert model.config._experts_implementation == "eager"
sd0, sd1 = m0.state_dict(), model.state_dict()
assert all(torch.equal(sd0[k], sd1[k]) for k in sd0), "reload mismatch"

# also: checkpoint with dense layer under `mlp.` (released naming) loads identically
from safetensors.torch import save_file, load_file
raw = load_file(f"{OUT}/model.safetensors")
raw2 = {k.replace("layers.0.block_sparse_moe.", "layers.0.mlp."): v for k, v in raw.items()}
os.makedirs("/tmp/kl/fixture_mlp", exist_ok=True)
shutil.copy(f"{OUT}/config.json", "/tmp/kl/fixture_mlp/config.json")
save_file(raw2, "/tmp/kl/fixture_mlp/model.safetensors", metadata={"format": "pt"})
m2 = KimiLinearForCausalLM.from_pretrained("/tmp/kl/fixture_mlp", dtype=torch.float32).eval()
assert all(torch.equal(sd0[k], m2.state_dict()[k]) for k in sd0)
print("[3b] released-style `mlp.` dense keys load OK")

# ---------------- 4. independent float64 reference
D = torch.float64
def rms(x, w, eps): return w.to(D) * (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps))
def silu(x): return x * torch.sigmoid(x)
def l2n(x): return x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)

def ref_forward(model, ids, state=None):
    c = model.config; P = {k: v.to(D) for k, v in model.state_dict().items()}
    T = len(ids); x = P["model.embed_tokens.weight"][ids]
    state = state if state is not None else {}
    K = c.linear_conv_kernel_dim; H = c.linear_num_heads; dk = c.linear_head_dim
    for l, lt in enumerate(c.layer_types):
        p = lambda s: P[f"model.layers.{l}.{s}"]
        h = rms(x, p("input_layernorm.weight"), c.rms_norm_eps)
        if lt == "linear_attention":
            st = state.setdefault(l, {"tail": torch.zeros(K - 1, 3 * H * dk, dtype=D),
                                      "S": torch.zeros(H, dk, dk, dtype=D)})
            pre = torch.cat([h @ p("self_attn.q_proj.weight").T, h @ p("self_attn.k_proj.weight").T,
                             h @ p("self_attn.v_proj.weight").T], -1)       # [T, 3*H*dk]
            full = torch.cat([st["tail"], pre], 0)
            W = p("self_attn.conv1d.weight")[:, 0, :]                      # [C, K]
            conv = torch.stack([(full[t:t + K] * W.T).sum(0) for t in range(T)])
            st["tail"] = full[-(K - 1):]
            conv = silu(conv)
            q, k, v = conv.split(H * dk, -1)
            q, k, v = (z.view(T, H, dk) for z in (q, k, v))
            f = h @ p("self_attn.forget_gate.f_a_proj.weight").T @ p("self_attn.forget_gate.f_b_proj.weight").T
            f = (f + p("self_attn.forget_gate.dt_bias")).view(T, H, dk)
            sp = torch.where(f > 20, f, torch.log(1 + torch.exp(f)))
            g = -torch.exp(p("self_attn.forget_gate.A_log").view(1, H, 1)) * sp
            beta = torch.sigmoid(h @ p("self_attn.b_proj.weight").T)        # [T, H]
            q = l2n(q) / math.sqrt(dk); k = l2n(k)
            S = st["S"]; o = torch.zeros(T, H, dk, dtype=D)
            for t in range(T):
                S = torch.exp(g[t])[:, :, None] * S                          # decay on the dk (row) index
                S = S + beta[t][:, None, None] * k[t][:, :, None] * (v[t] - torch.einsum("hk,hkv->hv", k[t], S))[:, None, :]
                o[t] = torch.einsum("hk,hkv->hv", q[t], S)
            st["S"] = S
            gate = (h @ p("self_attn.g_a_proj.weight").T @ p("self_attn.g_b_proj.weight").T).view(T, H, dk)
            o = rms(o, p("self_attn.o_norm.weight"), c.rms_norm_eps) * torch.sigmoid(gate)
            a = o.reshape(T, -1) @ p("self_attn.o_proj.weight").T
        else:
            st = state.setdefault(l, {"lat": torch.zeros(0, c.kv_lora_rank, dtype=D),
                                      "rot": torch.zeros(0, c.qk_rope_head_dim, dtype=D)})
            nh, dn, dr, dv = c.num_attention_heads, c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim
            if c.q_lora_rank is None: qs = h @ p("self_attn.q_proj.weight").T
            else: qs = rms(h @ p("self_attn.q_a_proj.weight").T, p("self_attn.q_a_layernorm.weight"), 1e-6) @ p("self_attn.q_b_proj.weight").T
            qs = qs.view(T, nh, dn + dr)
            ckv = h @ p("self_attn.kv_a_proj_with_mqa.weight").T
            lat = rms(ckv[:, :c.kv_lora_rank], p("self_attn.kv_a_layernorm.weight"), 1e-6)
            st["lat"] = torch.cat([st["lat"], lat]); st["rot"] = torch.cat([st["rot"], ckv[:, c.kv_lora_rank:]])
            kv = (st["lat"] @ p("self_attn.kv_b_proj.weight").T).view(-1, nh, dn + dv)
            kn, vv = kv[..., :dn], kv[..., dn:]
            N = kv.shape[0]; past = N - T
            sc = (torch.einsum("thd,shd->hts", qs[..., :dn], kn) + torch.einsum("thd,sd->hts", qs[..., dn:], st["rot"])) / math.sqrt(dn + dr)
            mask = torch.arange(N)[None, :] > (torch.arange(T)[:, None] + past)
            sc = sc.masked_fill(mask, -math.inf).softmax(-1)
            a = torch.einsum("hts,shd->thd", sc, vv).reshape(T, -1) @ p("self_attn.o_proj.weight").T
        x = x + a
        h = rms(x, p("post_attention_layernorm.weight"), c.rms_norm_eps)
        if c.mlp_layer_types[l] == "dense":
            y = (silu(h @ p("mlp.gate_proj.weight").T) * (h @ p("mlp.up_proj.weight").T)) @ p("mlp.down_proj.weight").T
        else:
            E, G = c.num_local_experts, c.n_group
            s = torch.sigmoid(h @ p("mlp.gate.weight").T); sc = s + p("mlp.gate.e_score_correction_bias")
            gs = sc.view(T, G, E // G).topk(2, -1)[0].sum(-1)
            gi = gs.topk(c.topk_group, -1)[1]
            gm = torch.zeros_like(gs).scatter_(1, gi, 1).bool()
            sc = sc.masked_fill(~gm.repeat_interleave(E // G, 1), -math.inf)
            ti = sc.topk(c.num_experts_per_tok, -1)[1]
            tw = s.gather(1, ti)
            if c.norm_topk_prob: tw = tw / (tw.sum(-1, keepdim=True) + 1e-20)
            tw = tw * c.routed_scaling_factor
            gu, dn_ = p("mlp.experts.gate_up_proj"), p("mlp.experts.down_proj")
            I = c.moe_intermediate_size
            y = torch.zeros_like(h)
            for t in range(T):
                for j in range(ti.shape[1]):
                    e = ti[t, j]; z = gu[e] @ h[t]
                    y[t] += tw[t, j] * (dn_[e] @ (silu(z[:I]) * z[I:]))
            y = y + (silu(h @ p("mlp.shared_experts.gate_proj.weight").T) * (h @ p("mlp.shared_experts.up_proj.weight").T)) @ p("mlp.shared_experts.down_proj.weight").T
        x = x + y
    x = rms(x, P["model.norm.weight"], c.rms_norm_eps)
    return x @ P["lm_head.weight"].T, state

V = cfg.vocab_size
g = torch.Generator().manual_seed(1)
with torch.no_grad():
    for n in (1, 3, 63, 64, 65, 130):
        ids = torch.randint(0, V, (n,), generator=g)
        o = model(input_ids=ids[None], use_cache=True)
        r, st = ref_forward(model, ids)
        err = (o.logits[0].double() - r).abs().max().item()
        cache = o.past_key_values
        serr = max((cache.get_recurrent_state(l)[0].double() - st[l]["S"]).abs().max().item()
                   for l in (0, 2, 3))
        print(f"[4] prefill {n:4d}: logits max|HF-ref64| {err:.2e}  state {serr:.2e}  |logit|max {r.abs().max():.2f}")
        assert err < 1e-4 and serr < 1e-4
    # cache layout
    l0 = cache.layers[0]; l1 = cache.layers[1]
    print("[4] cache types", [type(x).__name__ for x in cache.layers])
    print("[4] KDA conv_state", tuple(cache.get_conv_state(0).shape), "recurrent", tuple(cache.get_recurrent_state(0).shape),
          cache.get_recurrent_state(0).dtype)
    print("[4] MLA keys", tuple(l1.keys.shape), "values", tuple(l1.values.shape))
    # conv_state holds the last K pre-conv inputs (q|k|v concatenated on channels)
    h0 = model.model.layers[0].input_layernorm(model.model.embed_tokens(ids[None]))
    pre = torch.cat([model.model.layers[0].self_attn.q_proj(h0), model.model.layers[0].self_attn.k_proj(h0),
                     model.model.layers[0].self_attn.v_proj(h0)], -1)[0]
    assert torch.allclose(cache.get_conv_state(0)[0].T, pre[-4:], atol=1e-6)
    lat = model.model.layers[1]  # MLA: keys are the kv_a_layernorm'd latent
    # decode: prompt 40 + 30 steps vs one-shot prefill of 70, vs ref
    ids = torch.randint(0, V, (70,), generator=g)
    o = model(input_ids=ids[None, :40], use_cache=True); cache = o.past_key_values
    rows = [o.logits[0, -1]]
    for t in range(40, 70):
        o = model(input_ids=ids[None, t:t + 1], past_key_values=cache, use_cache=True); rows.append(o.logits[0, -1])
    rows = torch.stack(rows)
    full = model(input_ids=ids[None], use_cache=True)
    r, _ = ref_forward(model, ids)
    print(f"[5] decode vs one-shot {(rows - full.logits[0, 39:]).abs().max():.2e}, vs ref64 {(rows.double() - r[39:]).abs().max():.2e}")
    # multi-token continuation (chunk path with initial_state and conv history)
    o = model(input_ids=ids[None, :40], use_cache=True); cache = o.past_key_values
    o2 = model(input_ids=ids[None, 40:70], past_key_values=cache, use_cache=True)
    print(f"[5] 40+30 continuation vs one-shot {(o2.logits[0] - full.logits[0, 40:]).abs().max():.2e}")
    # chunked vs recurrent torch functions directly
    B, T, H, dk = 1, 150, 3, 8
    q, k, v = (torch.randn(B, T, H, dk) for _ in range(3)); gg = -torch.rand(B, T, H, dk) * 2; bb = torch.rand(B, T, H)
    S0 = torch.randn(B, H, dk, dk)
    oc, sc_ = mk.chunk_kimi_delta_attention.__wrapped__(q, k, v, gg, bb, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    orr, sr = mk.recurrent_kimi_delta_attention.__wrapped__(q, k, v, gg, bb, S0, True, use_qk_l2norm_in_kernel=True)
    print(f"[6] chunk vs recurrent: out {(oc - orr).abs().max():.2e} state {(sc_ - sr).abs().max():.2e}")
    # PIC: affine map S_end = T S_0 + S(C|0), T = prod (I - b k k^T) diag(exp g)
    qd, kd, vd, gd, bd = (z.double() for z in (q, k, v, gg, bb))
    kd = l2n(kd)
    Tm = torch.eye(dk, dtype=D).repeat(H, 1, 1)
    for t in range(T):
        A = (torch.eye(dk, dtype=D) - bd[0, t][:, None, None] * kd[0, t][:, :, None] * kd[0, t][:, None, :]) @ torch.diag_embed(torch.exp(gd[0, t]))
        Tm = A @ Tm
    _, s_zero = mk.recurrent_kimi_delta_attention.__wrapped__(q.double(), k.double(), v.double(), gg.double(), bb.double(), None, True, use_qk_l2norm_in_kernel=True)
    _, s_full = mk.recurrent_kimi_delta_attention.__wrapped__(q.double(), k.double(), v.double(), gg.double(), bb.double(), S0.double(), True, use_qk_l2norm_in_kernel=True)
    print(f"[7] PIC affine check |S_full - (T S0 + S_zero)| = {(s_full[0] - (Tm @ S0[0].double() + s_zero[0])).abs().max():.2e}")

# ---------------- 8. fallback warnings
need = ["`causal_conv1d_fn` is falling back", "`causal_conv1d_update` is falling back",
        "`chunk_kda` is falling back", "`fused_recurrent_kda` is falling back"]
for s in need:
    hits = [m for m in cap.msgs if m.startswith(s)]
    assert hits, s
    print("[8]", hits[0])

# ---------------- 9. quirks
c9 = KimiLinearConfig(**{**{k: v for k, v in cfg.to_dict().items() if k in ("vocab_size", "hidden_size")},
                         "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
                         "num_attention_heads": 4, "num_key_value_heads": 2, "kv_lora_rank": 8,
                         "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "linear_num_heads": 2,
                         "linear_head_dim": 8, "num_local_experts": 4, "moe_intermediate_size": 8, "intermediate_size": 16,
                         "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2})
try:
    KimiLinearForCausalLM(c9).eval()(input_ids=torch.tensor([[1, 2, 3]]))
    print("[9] kv_heads != heads: ran")
except Exception as e:
    print("[9] kv_heads != heads fails:", type(e).__name__, str(e)[:120])
c10 = KimiLinearConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                       kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8, linear_num_heads=2,
                       linear_head_dim=8, num_local_experts=4, moe_intermediate_size=8, intermediate_size=16,
                       pad_token_id=0, bos_token_id=1, eos_token_id=2)
print("[9] default layer_types for 2 layers:", c10.layer_types)
try:
    KimiLinearForCausalLM(c10).eval()(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)
    print("[9] all-KDA model with cache: ran")
except Exception as e:
    print("[9] all-KDA model with cache fails:", type(e).__name__, str(e)[:100])
c11 = KimiLinearConfig(**{**c10.to_dict(), "tie_word_embeddings": True})
m11 = KimiLinearForCausalLM(c11)
print("[9] tie_word_embeddings=True ties lm_head:", m11.lm_head.weight.data_ptr() == m11.model.embed_tokens.weight.data_ptr())
c12 = KimiLinearConfig(**{**c10.to_dict(), "attention_bias": True, "q_lora_rank": 6, "layer_types": ["linear_attention", "full_attention"]})
print("[9] attention_bias=True, q_lora_rank=6 MLA params:",
      [(n, tuple(p.shape)) for n, p in KimiLinearForCausalLM(c12).model.layers[1].self_attn.named_parameters()])
print("[9] _keep_in_fp32_modules:", KimiLinearForCausalLM._keep_in_fp32_modules, getattr(KimiLinearForCausalLM, "_keep_in_fp32_modules_strict", None))
# q_lora variant vs reference
json.dump(tiny_json(q_lora=20), open("/tmp/kl/cfg/config.json", "w"))
mq = build(AutoConfig.from_pretrained("/tmp/kl/cfg"))
with torch.no_grad():
    ids = torch.randint(0, V, (20,), generator=g)
    r, _ = ref_forward(mq, ids)
    print(f"[9] q_lora_rank=20 variant: max|HF-ref64| {(mq(input_ids=ids[None]).logits[0].double() - r).abs().max():.2e}")
print("ALL DONE")
