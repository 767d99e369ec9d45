"""bailing_hybrid spec checks (transformers 5.23, CPU). Run:
HF_HUB_OFFLINE=1 USE_HUB_KERNELS=NO /work/main/tools/golden/.venv/bin/python /work/notes/families/bailing_hybrid_check.py
Writes tiny checkpoints under /tmp/bhc/{A,B}."""
import os, sys, math, json, logging, importlib.util
os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("USE_HUB_KERNELS", "NO")
import torch
from transformers import BailingHybridConfig, BailingHybridForCausalLM
from transformers.models.bailing_hybrid import modeling_bailing_hybrid as M

warns = []
class Grab(logging.Handler):
    def emit(self, r): warns.append(r.getMessage())
logging.getLogger("transformers").addHandler(Grab())

A = dict(vocab_size=331, hidden_size=48, intermediate_size=96, moe_intermediate_size=24,
    num_hidden_layers=5, num_attention_heads=4, num_key_value_heads=4, head_dim=12,
    kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=10,
    num_experts=8, num_experts_per_tok=2, n_group=4, topk_group=2, n_shared_experts=1,
    routed_scaling_factor=2.5, norm_topk_prob=True, first_k_dense_replace=1, layer_group_size=3,
    short_conv_kernel_size=4, kda_safe_gate=True, kda_lower_bound=-5.0, rms_norm_eps=1e-6,
    rope_theta=10000.0, max_position_embeddings=4096, num_mtp_layers=0,
    pad_token_id=0, bos_token_id=None, eos_token_id=1, tie_word_embeddings=False)
B = dict(A, num_hidden_layers=4, layer_group_size=2, first_k_dense_replace=2, n_group=2, topk_group=1,
    num_experts_per_tok=3, head_dim=8, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4, v_head_dim=6,
    n_shared_experts=2, q_lora_rank=16, rms_norm_eps=1e-5)   # q_lora_rank is stored but ignored by HF

def init(m, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith("A_log"): p.copy_(torch.empty_like(p).uniform_(0.5, 2.0, generator=g).log())
            elif n.endswith("dt_bias"): p.copy_(torch.randn(p.shape, generator=g))
            elif "norm" in n: p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "conv1d" in n: p.copy_(0.4 * torch.randn(p.shape, generator=g))
            elif n.endswith("mlp.gate.weight"): p.copy_(1.5 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))
            elif "embed" in n: p.copy_(torch.randn(p.shape, generator=g))
            else: p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
        for n, b in m.named_buffers():
            if "e_score_correction_bias" in n: b.copy_(0.05 * torch.randn(b.shape, generator=g))

D = torch.float64
def reference(m, ids, S0=None, want_layer0=False):
    """float64 re-implementation written from the spec"""
    c = m.config; W = {k: v.to(D) for k, v in m.state_dict().items()}
    eps = c.rms_norm_eps; H = c.linear_num_heads; d = c.linear_head_dim; P = H * d; K = c.linear_conv_kernel_dim
    rms = lambda x, w, e=eps: w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + e))
    silu = lambda x: x * torch.sigmoid(x)
    L = len(ids); info = {}
    def kda(x, p, S0=None):
        pre = torch.cat([x @ W[p+"q_proj.weight"].T, x @ W[p+"k_proj.weight"].T, x @ W[p+"v_proj.weight"].T], -1)
        w = W[p+"conv1d.weight"][:, 0, :]
        pad = torch.cat([torch.zeros(K-1, 3*P, dtype=D), pre], 0)
        cv = silu(torch.stack([(pad[t:t+K] * w.T).sum(0) for t in range(L)]))
        q, k, v = [a.reshape(L, H, d) for a in cv.split(P, -1)]
        f = (x @ W[p+"forget_gate.f_proj.weight"].T).view(L, H, d) + W[p+"forget_gate.dt_bias"].view(H, d)
        gl = c.kda_lower_bound * torch.sigmoid(W[p+"forget_gate.A_log"].exp().view(H, 1) * f)
        beta = torch.sigmoid(x @ W[p+"b_proj.weight"].T)
        q = q / torch.sqrt((q*q).sum(-1, keepdim=True) + 1e-6) / math.sqrt(d)
        k = k / torch.sqrt((k*k).sum(-1, keepdim=True) + 1e-6)
        S = torch.zeros(H, d, d, dtype=D) if S0 is None else S0.clone(); T = torch.eye(d, dtype=D).repeat(H, 1, 1)
        o = torch.zeros(L, H, d, dtype=D)
        for t in range(L):
            At = (torch.eye(d, dtype=D) - beta[t][:, None, None] * k[t][:, :, None] * k[t][:, None, :]) @ torch.diag_embed(gl[t].exp())
            S = At @ S + beta[t][:, None, None] * k[t][:, :, None] * v[t][:, None, :]; T = At @ T
            o[t] = (S * q[t][:, :, None]).sum(1)
        z = (x @ W[p+"g_proj.weight"].T).view(L, H, d)
        y = rms(o, W[p+"o_norm.weight"]) * torch.sigmoid(z)
        return y.reshape(L, P) @ W[p+"o_proj.weight"].T, S, T, pre[-(K-1):]
    def mla(x, p):
        dn, dr, dv, r = c.qk_nope_head_dim, c.qk_rope_head_dim, c.v_head_dim, c.kv_lora_rank; nh = c.num_attention_heads
        q = (x @ W[p+"q_proj.weight"].T).view(L, nh, dn+dr)
        ckv = x @ W[p+"kv_a_proj_with_mqa.weight"].T
        lat = rms(ckv[:, :r], W[p+"kv_a_layernorm.weight"], 1e-6); kr = ckv[:, r:]
        inv = 1.0 / (c.rope_parameters["rope_theta"] ** (torch.arange(0, dr, 2, dtype=D) / dr))
        ang = torch.arange(L, dtype=D)[:, None] * inv; cs, sn = ang.cos(), ang.sin()
        def rope(z):  # pairs (2i,2i+1) rotated by freq i; output layout [rotated evens | rotated odds]
            a, b = z[..., 0::2], z[..., 1::2]; return torch.cat([a*cs - b*sn, b*cs + a*sn], -1)
        qr = rope(q[..., dn:].transpose(0, 1)).transpose(0, 1); krr = rope(kr)
        kv = (lat @ W[p+"kv_b_proj.weight"].T).view(L, nh, dn+dv)
        Kf = torch.cat([kv[..., :dn], krr[:, None, :].expand(L, nh, dr)], -1); V = kv[..., dn:]
        Q = torch.cat([q[..., :dn], qr], -1)
        s = torch.einsum("ihd,jhd->hij", Q, Kf) * (dn+dr) ** -0.5
        s = s.masked_fill(torch.triu(torch.ones(L, L, dtype=torch.bool), 1), -float("inf")).softmax(-1)
        o = torch.einsum("hij,jhd->ihd", s, V) * torch.sigmoid(x @ W[p+"g_proj.weight"].T)[..., None]
        return o.reshape(L, nh*dv) @ W[p+"o_proj.weight"].T
    def mlp(x, p): return (silu(x @ W[p+"gate_proj.weight"].T) * (x @ W[p+"up_proj.weight"].T)) @ W[p+"down_proj.weight"].T
    def moe(x, p):
        E, G, tk, I = c.num_local_experts, c.n_group, c.num_experts_per_tok, c.moe_intermediate_size
        s = torch.sigmoid(x @ W[p+"gate.weight"].T); sc = s + W[p+"gate.e_score_correction_bias"]
        gs = sc.view(-1, G, E//G).topk(2, -1)[0].sum(-1); gi = gs.topk(c.topk_group, -1)[1]
        gm = torch.zeros_like(gs).scatter_(1, gi, 1).repeat_interleave(E//G, 1)
        idx = sc.masked_fill(gm == 0, -float("inf")).topk(tk, -1)[1]; w = s.gather(1, idx)
        if c.norm_topk_prob: w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = w * c.routed_scaling_factor; out = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for j in range(tk):
                e = idx[t, j].item(); h = x[t] @ W[p+"experts.gate_up_proj"][e].T
                out[t] += w[t, j] * ((silu(h[:I]) * h[I:]) @ W[p+"experts.down_proj"][e].T)
        return out + mlp(x, p + "shared_experts.")
    x = W["model.embed_tokens.weight"][ids]
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        h = rms(x, W[p+"input_layernorm.weight"])
        if c.layer_types[i] == "linear_attention":
            a, S, T, tail = kda(h, p+"self_attn.")
            if i == 0:
                info.update(S=S, T=T, tail=tail, h0=h)
        else: a = mla(h, p+"self_attn.")
        x = x + a; h = rms(x, W[p+"post_attention_layernorm.weight"])
        x = x + (mlp(h, p+"mlp.") if c.mlp_layer_types[i] == "dense" else moe(h, p+"mlp."))
    info["kda0"] = kda
    return rms(x, W["model.norm.weight"]) @ W["lm_head.weight"].T, info

print("packages present:", {p: importlib.util.find_spec(p) is not None for p in ["fla", "causal_conv1d", "kernels"]})
for f in ["chunk_kimi_delta_attention", "recurrent_kimi_delta_attention", "causal_conv1d_fn", "causal_conv1d_update"]:
    fn = getattr(M, f); cv = dict(zip(fn.__code__.co_freevars, [x.cell_contents for x in fn.__closure__]))
    print(f"  {f}: is_new_implementation={cv['is_new_implementation']}")

for name, kw, seed in (("A", A, 1), ("B", B, 2)):
    torch.manual_seed(seed)
    cfg = BailingHybridConfig(**kw)
    m = BailingHybridForCausalLM(cfg); init(m, seed)
    out_dir = f"/tmp/bhc/{name}"; m.save_pretrained(out_dir)
    m = BailingHybridForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager",
                                                 experts_implementation="eager").eval()
    c = m.config
    print(f"\n== fixture {name}: layers {c.layer_types} mlp {c.mlp_layer_types}; head_dim {c.head_dim} linear_head_dim {c.linear_head_dim} q_lora_rank attr {getattr(c,'q_lora_rank',None)}")
    g = torch.Generator().manual_seed(7)
    ids_all = torch.randint(2, 331, (130,), generator=g)
    with torch.no_grad():
        for L in (1, 3, 63, 64, 65, 130):
            ids = ids_all[:L]; ref, info = reference(m, ids)
            o = m(ids[None], use_cache=True); hf = o.logits[0].to(D); cch = o.past_key_values
            st = cch.get_recurrent_state(0)[0].to(D); tail = cch.get_conv_state(0)[0, :, -(c.linear_conv_kernel_dim-1):].T.to(D)
            print(f"  L={L:3d}: |ref-HF| logits {(hf-ref).abs().max():.2e} (|logit|max {ref.abs().max():.2f}); L0 state {(st-info['S']).abs().max():.2e}; L0 conv tail {(tail[-min(L,3):]-info['tail'][-min(L,3):]).abs().max():.2e}")
        ids = ids_all[:70]
        full = m(ids[None]).logits
        o = m(ids[None, :40], use_cache=True); cch = o.past_key_values; steps = [o.logits]
        o2 = m(ids[None, 40:60], past_key_values=cch, use_cache=True); steps.append(o2.logits)
        for t in range(60, 70):
            steps.append(m(ids[None, t:t+1], past_key_values=cch, use_cache=True).logits)
        print(f"  40 prefill + 20 continuation + 10 decode vs one-shot: {(torch.cat(steps,1)-full).abs().max():.2e}")
        j = c.layer_types.index("full_attention")
        print(f"  MLA layer {j} cache: keys(latent) {tuple(cch.layers[j].keys.shape)} values(rotated k_rope) {tuple(cch.layers[j].values.shape)}")
        # chunk vs recurrent on random inputs with an initial state
        H, d = c.linear_num_heads, c.linear_head_dim; Tn = 150
        q, k, v = [torch.randn(1, Tn, H, d) for _ in range(3)]
        gg = -5 * torch.rand(1, Tn, H, d); bb = torch.rand(1, Tn, H); S0 = torch.randn(1, H, d, d)
        oc, sc = M.chunk_kimi_delta_attention(q, k, v, g=gg, beta=bb, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        orr, sr = M.recurrent_kimi_delta_attention(q, k, v, g=gg, beta=bb, initial_state=S0, output_final_state=True, use_qk_l2norm_in_kernel=True)
        print(f"  chunk vs recurrent (T=150, S0): out {(oc-orr).abs().max():.2e} state {(sc-sr).abs().max():.2e}")
        # PIC affine identity for layer 0 in float64: S_end(S0) = T S0 + S(.|0)
        _, info = reference(m, ids_all[:50]); S0 = torch.randn(H, d, d, dtype=D, generator=torch.Generator().manual_seed(3))
        _, S1, T1, _ = info["kda0"](info["h0"], "model.layers.0.self_attn.", S0=S0)
        print(f"  PIC identity (float64, 50 tokens): |S(S0) - (T S0 + S(0))| = {(S1 - (T1 @ S0 + info['S'])).abs().max():.1e}; T is dense: {bool((T1[0] - torch.diag(torch.diagonal(T1[0]))).abs().max() > 0)}")
        # MLA re-rotation: raw (pre-RoPE) key re-rotated at a new offset == HF's cached rotated key there
        raw = {}
        hk = m.model.layers[j].self_attn.kv_a_proj_with_mqa.register_forward_hook(lambda mod, i_, o_: raw.__setitem__(len(raw), o_.clone()))
        ids = ids_all[:12][None]; r = c.kv_lora_rank
        m(ids, position_ids=torch.arange(12)[None], use_cache=True)
        o = m(ids, position_ids=torch.arange(12)[None] + 777, use_cache=True); hk.remove()
        kr = raw[0][..., r:].view(1, 1, 12, -1); cos, sin = m.model.rotary_emb(kr, torch.arange(12)[None] + 777)
        _, rot = M.apply_rotary_pos_emb_interleave(kr, kr, cos, sin)
        print(f"  first-MLA raw key identical at offsets 0/777: {torch.equal(raw[0], raw[1])}; re-rotated == HF cache at 777: {torch.equal(rot, o.past_key_values.layers[j].values)}")
print("\nfallback warnings seen:")
for w in sorted(set(x for x in warns if "falling back" in x)): print("  ", w)
# both spellings
c1 = BailingHybridConfig.from_dict({**A, "num_experts_per_tok": 2, "num_experts_per_token": 3, "n_group": 4, "num_expert_group": 2})
print("both spellings -> num_experts_per_tok", c1.num_experts_per_tok, "n_group", c1.n_group)
