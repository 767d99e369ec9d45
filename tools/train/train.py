#!/usr/bin/env python3
"""Trains the embedded model (models/hypic-recall) from scratch on the recall task of task.py.

A byte-level Qwen3.5 text model (Qwen3_5ForCausalLM, transformers' pure-PyTorch path):
8 layers, Gated DeltaNet and full attention 3:1 (L L L F L L L F), hidden 128, ~1.7 M
parameters, vocabulary 259 (byte b is token b + 3). First a copy curriculum (repeat a random
string after '|': ten symbols and short strings, widening to the 36 of the records and longer
strings, each stage until it is learnt), then --steps of the recall task. Seeded; on a 2-core
machine it runs in under an hour (--minutes stops it early, saying so).

Writes into --out: config.json and model.safetensors (F32, save_pretrained), loss.png (the
training curve, drawn by loss_plot.py from train.json's content), train.json (settings, versions, the curve's points, held-out accuracy),
heldout.txt (the held-out requests, task.write_heldout), examples/ (one of them as files
`make run` suggests sending) and, for the C test,
--fixture: the first held-out requests with transformers' greedy answers.

Run through train.sh (it builds the pinned venv). See README.md.
"""

import os

os.environ["USE_HUB_KERNELS"] = "NO"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import argparse
import importlib.util
import json
import math
import random
import sys
import time
from pathlib import Path

for _m in ("fla", "causal_conv1d", "kernels"):
    if importlib.util.find_spec(_m) is not None:
        sys.exit(f"train: optional fast-kernel package '{_m}' is importable; the model must be "
                 f"trained on transformers' pure-PyTorch path. Use the pinned venv.")

import torch
import transformers
from transformers.models.qwen3_5 import modeling_qwen3_5 as m35

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loss_plot  # noqa: E402
import task  # noqa: E402

VOCAB = 259  # 3 specials + 256 bytes (hy_tokenize_bytes)
PAD = 0


def config():
    rd = 8  # rotary dims of head_dim 32 (partial_rotary_factor 0.25)
    half = rd // 2
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
            "mrope_section": [half - 2 * (half // 3), half // 3, half // 3],
            "mrope_interleaved": True}
    return m35.Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=128, num_hidden_layers=8,
        layer_types=["linear_attention"] * 3 + ["full_attention"] +
                    ["linear_attention"] * 3 + ["full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rope_parameters=rope,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=32,
        linear_value_head_dim=32, linear_conv_kernel_dim=4, intermediate_size=384,
        tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=8192,
        bos_token_id=None, eos_token_id=None, pad_token_id=PAD)


def fix_decays(model, decays):
    """Every Gated DeltaNet layer's value head h forgets at the fixed rate decays[h] per token:
    g = -exp(A_log) * softplus(a + dt_bias) with a = in_proj_a(x) held at 0 and dt_bias at 1,
    so A_log = log(-ln(decay) / softplus(1)). Those three are frozen."""
    sp1 = math.log1p(math.e)
    for layer in model.model.layers:
        la = getattr(layer, "linear_attn", None)
        if la is None:
            continue
        if len(decays) != la.num_v_heads:
            sys.exit(f"train: --decays has {len(decays)} values; the model has {la.num_v_heads} "
                     f"value heads per Gated DeltaNet layer")
        with torch.no_grad():
            la.dt_bias.fill_(1.0)
            la.in_proj_a.weight.zero_()
            la.A_log.copy_(torch.tensor([math.log(-math.log(d) / sp1) for d in decays]))
        for p in (la.dt_bias, la.in_proj_a.weight, la.A_log):
            p.requires_grad_(False)


def encode(text: str):
    return [b + 3 for b in text.encode("ascii")]


def batch(r: random.Random, n: int, kmin: int, kmax: int, nq: int, w_other: float,
          copy=None):
    """n training sequences with one k (little padding): ids and loss weights; with copy =
    (symbols, shortest, longest), n sequences of the copy warm-up (task.copy_text) instead
    (k is then 0)."""
    k = 0 if copy else r.randint(kmin, kmax)
    seqs = ([task.copy_text(r, r.randint(copy[1], copy[2]), copy[0]) for _ in range(n)] if copy
            else [task.training_text(r, k, nq) for _ in range(n)])
    L = max(len(t) for t, _ in seqs)
    ids = torch.full((n, L), PAD, dtype=torch.long)
    wt = torch.zeros((n, L), dtype=torch.float32)
    for i, (t, spans) in enumerate(seqs):
        e = encode(t)
        ids[i, :len(e)] = torch.tensor(e)
        wt[i, :len(e) - 1] = w_other  # position j predicts token j + 1
        for a, b in spans:
            wt[i, a - 1:b - 1] = 1.0
    return ids, wt, k


def loss_of(model, ids, wt):
    """The weighted loss, and the mean cross-entropy of the answer tokens alone."""
    logits = model(input_ids=ids).logits[:, :-1]
    tgt = ids[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1),
                                           reduction="none").view_as(tgt)
    w = wt[:, :-1]
    ans = (w == 1.0).float()
    return (ce * w).sum() / w.sum(), ((ce * ans).sum() / ans.sum()).item()


@torch.no_grad()
def exact_match(model, reqs, batch_size=16):
    """Greedy exact match of the 3-token answers, teacher-forced: greedy decoding yields the
    answer exactly when every position's argmax is the answer's token."""
    model.eval()
    right = 0
    for i in range(0, len(reqs), batch_size):
        part = reqs[i:i + batch_size]
        enc = [encode("".join(q["docs"]) + q["question"] + q["answer"]) for q in part]
        L = max(len(e) for e in enc)
        ids = torch.full((len(part), L), PAD, dtype=torch.long)
        for j, e in enumerate(enc):
            ids[j, :len(e)] = torch.tensor(e)
        pred = model(input_ids=ids).logits.argmax(-1)
        for j, e in enumerate(enc):
            n = len(e)
            right += int(torch.equal(pred[j, n - 4:n - 1], ids[j, n - 3:n]))
    model.train()
    return right / len(reqs)


@torch.no_grad()
def greedy(model, prompt_ids, n):
    ids = torch.tensor([prompt_ids])
    out = []
    for _ in range(n):
        nxt = int(model(input_ids=ids).logits[0, -1].argmax())
        out.append(nxt)
        ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="models/hypic-recall")
    ap.add_argument("--fixture", default=None,
                    help="the C test's fixture (default: tests/fixtures/recall/answers.txt when "
                         "--out is models/hypic-recall, else OUT/answers.txt: a probe never "
                         "overwrites the committed model's fixture)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1200, help="steps of the recall task")
    ap.add_argument("--minutes", type=float, default=55.0, help="stop early past this")
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=0.0, help="gradient norm clipping; 0: none")
    ap.add_argument("--kmin", type=int, default=2)
    ap.add_argument("--kmax", type=int, default=10)
    ap.add_argument("--questions", type=int, default=12, help="per training sequence (at most its records)")
    ap.add_argument("--w-other", type=float, default=0.05,
                    help="loss weight of tokens that are not answers")
    ap.add_argument("--copy-stages", default="10:8:24,20:8:24,36:8:24,36:16:48",
                    help="the copy curriculum before the recall task: symbols:shortest:longest "
                         "per stage, comma-separated; empty: none")
    ap.add_argument("--copy-advance", type=float, default=0.3,
                    help="a copy stage ends when the repeat's cross-entropy (moving mean) is below this")
    ap.add_argument("--copy-stage-max", type=int, default=500, help="steps at most per copy stage")
    ap.add_argument("--copy-mix", type=int, default=300,
                    help="recall steps during which every 4th batch is still the last copy stage")
    ap.add_argument("--decays", default="",
                    help="fixed per-token decays of the Gated DeltaNet value heads, comma-separated "
                         "(one per head, e.g. 0.5,0.9,0.97,0.99, as RetNet's fixed multi-scale "
                         "decays): A_log set from them and frozen, dt_bias and in_proj_a frozen "
                         "(in_proj_a at zero); empty: learnt, transformers' initialisation")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--heldout", type=int, default=600)
    args = ap.parse_args()

    torch.set_num_threads(os.cpu_count() or 2)
    torch.manual_seed(args.seed)
    r = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    cfg = config()
    model = m35.Qwen3_5ForCausalLM(cfg).float()
    if args.decays:
        fix_decays(model, [float(x) for x in args.decays.split(",")])
    nparam = sum(p.numel() for p in model.parameters())
    print(f"model: {nparam / 1e6:.2f} M parameters, layers {cfg.layer_types}", flush=True)
    # validation: requests like the held-out ones, from another seed
    vpath = out / ".validation.txt"
    task.write_heldout(str(vpath), args.seed + 1000, 96, ks=(2, 4, 8))
    val = task.read_heldout(str(vpath))
    vpath.unlink()

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr,
                            betas=(0.9, 0.95), weight_decay=args.weight_decay)
    stages = [tuple(int(x) for x in st.split(":")) for st in args.copy_stages.split(",") if st]
    warm = max(1, args.steps // 20)

    def recall_lr(s):
        """Step s of the recall task: a short warm-up, then cosine to 5 % over --steps."""
        if s < warm:
            return args.lr * (s + 1) / warm
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, (s - warm) /
                                                                   max(1, args.steps - warm)))))

    points, t0, toks, stopped = [], time.time(), 0, None
    stage, stage_start, ema, recall_start, stage_log = 0, 0, None, None, []
    model.train()
    step = 0
    while recall_start is None or step < recall_start + args.steps:
        if (time.time() - t0) / 60 > args.minutes:
            stopped = step
            print(f"stopping at step {step}: past --minutes {args.minutes}", flush=True)
            break
        # The copy curriculum first: the heads that find where the current tokens occurred
        # before and copy what followed them (the whole of the recall task) form in ~250 steps
        # on ten symbols and short strings, and had not in 400 on 36 symbols and strings of
        # 16-48 (tools/train/README.md); each stage widens the alphabet or the length once
        # the previous one is learnt.
        if stage < len(stages):
            lr, copy, kmax = args.lr * min(1.0, (step - stage_start + 1) / 20), stages[stage], 0
        else:
            if recall_start is None:
                recall_start = step
                print(f"recall task from step {step}", flush=True)
            rs = step - recall_start
            lr = recall_lr(rs)
            # the largest k grows from kmin + 2 to kmax over 40 % of the recall steps
            kmax = min(args.kmax, args.kmin + 2 + int((args.kmax - args.kmin) * rs /
                                                      (0.4 * args.steps)))
            copy = stages[-1] if stages and rs < args.copy_mix and step % 4 == 3 else None
        for g in opt.param_groups:
            g["lr"] = lr
        ids, wt, k = batch(r, args.batch, args.kmin, kmax, args.questions, args.w_other, copy)
        loss, ans_ce = loss_of(model, ids, wt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        toks += ids.numel()
        pt = {"step": step, "loss": round(loss.item(), 5), "k": k}
        pt["copy_ce" if copy else "answer_ce"] = round(ans_ce, 5)
        points.append(pt)
        if step % 10 == 0:
            el = time.time() - t0
            what = f"copy {copy[0]}:{copy[1]}-{copy[2]}" if copy else f"answer k {k:2d}"
            print(f"step {step:5d}  loss {loss.item():.4f}  {what} ce {ans_ce:.3f}  "
                  f"lr {lr:.2e}  {toks / el:6.0f} tok/s  {el / 60:5.1f} min", flush=True)
        if stage < len(stages):
            ema = ans_ce if ema is None else 0.9 * ema + 0.1 * ans_ce
            n = step - stage_start + 1
            if (n >= 30 and ema < args.copy_advance) or n >= args.copy_stage_max:
                learnt = ema < args.copy_advance
                stage_log.append({"stage": stages[stage], "steps": n, "ce": round(ema, 4),
                                  "learnt": learnt})
                print(f"copy stage {stages[stage]} {'learnt' if learnt else 'NOT learnt'} in "
                      f"{n} steps (repeat cross-entropy {ema:.3f})", flush=True)
                stage, stage_start, ema = stage + 1, step + 1, None
        elif (step - recall_start + 1) % args.eval_every == 0:
            em = exact_match(model, val)
            points.append({"step": step, "val_em": em})
            print(f"  validation exact match {100 * em:.1f}% ({len(val)} requests)", flush=True)
        step += 1

    train_s = time.time() - t0
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)

    # held-out requests: every k of the quality benchmark, answer position and seam cases
    task.write_heldout(str(out / "heldout.txt"), args.seed + 2000, args.heldout)
    held = task.read_heldout(str(out / "heldout.txt"))
    em_all = exact_match(model, held)
    by_k = {}
    for k in (2, 4, 8, 16):
        part = [q for q in held if len(q["docs"]) == k]
        by_k[k] = exact_match(model, part)
    print(f"held-out exact match (full recompute, greedy): {100 * em_all:.1f}% of {len(held)}; "
          + ", ".join(f"k={k}: {100 * v:.1f}%" for k, v in by_k.items()), flush=True)

    ex = task.write_examples(str(out / "examples"), held)
    print(f"examples/: a held-out request ({ex['question']} -> {ex['answer']}, in document "
          f"{ex['answer_doc'] + 1} of 4)", flush=True)

    # the C test's fixture: prompts and transformers' greedy answers
    if args.fixture:
        fx = Path(args.fixture)
    elif out.resolve() == Path("models/hypic-recall").resolve():
        fx = Path("tests/fixtures/recall/answers.txt")
    else:
        fx = out / "answers.txt"
    args.fixture = str(fx)
    fx.parent.mkdir(parents=True, exist_ok=True)
    with open(fx, "w", encoding="ascii") as f:
        f.write(f"# tools/train/train.py: held-out prompts of {out} and the\n"
                "# greedy 3-token answers transformers gives (token ids, byte b = id - 3)\n")
        for q in held[:8]:
            prompt = "".join(q["docs"]) + q["question"]
            ans = greedy(model, encode(prompt), 3)
            f.write("P " + prompt.replace("\n", "|") + "\n")
            f.write("G " + " ".join(map(str, ans)) + "\n")

    info = {
        "task": "multi-document key -> value recall (tools/train/task.py)",
        "parameters": nparam, "seed": args.seed, "steps": stopped or step, "recall_from_step": recall_start,
        "copy_curriculum": stage_log,
        "stopped_early": stopped is not None, "train_seconds": round(train_s, 1),
        "settings": vars(args), "tokens_seen": toks,
        "heldout_exact_match": em_all,
        "heldout_exact_match_by_k": {str(k): v for k, v in by_k.items()},
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                     "transformers": transformers.__version__},
        "curve": points,
    }
    (out / "train.json").write_text(json.dumps(info, indent=1) + "\n")
    loss_plot.plot(info, out.resolve().name, out / "loss.png")  # from what train.json holds
    print(f"wrote {out}/ (config.json, model.safetensors, loss.png, train.json, heldout.txt) "
          f"and {fx}; {train_s / 60:.1f} min of training", flush=True)


if __name__ == "__main__":
    main()
