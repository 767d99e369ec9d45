"""The anchor's table and its one-line JSON summary (tools/anchor/llamacpp.sh).

    python summarize.py RESULTS_DIR KEY=VALUE...

RESULTS_DIR holds, per round R, llama-FORMAT-rR.jsonl (llama-bench -o jsonl)
and ours-rR.log / ours-bf16-rR.log / ours-q8-rR.log (hypic-bench executor's
stdout on the F32 checkpoint, the BF16 one, and the F32 one quantised to q8,
whose last line is its JSON object), and agreement-FORMAT-PROMPT.json (compare_logits.py). The KEY=VALUE
pairs (version, commit, threads, cpu, ...) are copied into the JSON; `tg` is
the number of tokens decoded, `lengths` the prefill lengths (comma-separated).

Figures are tokens per second, the median over the rounds. The ratios are our
best format over llama.cpp's best format at each figure (> 1: we are faster),
and each of our formats over llama.cpp's nearest (F32/F32, BF16/BF16, Q8/Q8_0).
"""

import glob
import json
import os
import re
import statistics
import sys

FORMATS = ["F32", "BF16", "Q8_0"]


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: summarize.py RESULTS_DIR KEY=VALUE...")
    d = sys.argv[1]
    meta = dict(a.split("=", 1) for a in sys.argv[2:])
    lengths = [int(x) for x in meta.pop("lengths").split(",")]
    tg = int(meta.pop("tg"))
    cols = [f"pp{n}" for n in lengths] + [f"tg{tg}"]

    llama, build = {}, None
    for fmt in FORMATS:
        samples = {c: [] for c in cols}
        for path in sorted(glob.glob(os.path.join(d, f"llama-{fmt}-r*.jsonl"))):
            with open(path) as f:
                for line in f:
                    t = json.loads(line)
                    build = build or t.get("build_commit")
                    c = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
                    if c in samples:
                        samples[c].append(t["avg_ts"])
        if any(samples.values()):
            llama[fmt] = {c: round(statistics.median(v), 1) for c, v in samples.items() if v}
    ours = {}
    for fmt, pattern in (("F32", "ours-r*.log"), ("BF16", "ours-bf16-r*.log"),
                         ("Q8", "ours-q8-r*.log")):
        ours_s = {c: [] for c in cols}
        for path in sorted(glob.glob(os.path.join(d, pattern))):
            with open(path) as f:
                j = json.loads(f.read().strip().splitlines()[-1])
            for n in lengths:
                ours_s[f"pp{n}"].append(j[f"prefill_tok_s_{n}"])
            ours_s[f"tg{tg}"].append(j["decode_tok_s"])
        if any(ours_s.values()):
            ours[fmt] = {c: round(statistics.median(v), 1) for c, v in ours_s.items() if v}

    # each side's best format per figure, and ours over theirs
    best, ours_best, ratio = {}, {}, {}
    for c in cols:
        have = [(llama[f][c], f) for f in llama if c in llama[f]]
        mine = [(ours[f][c], f) for f in ours if c in ours[f]]
        if have and mine:
            v, f = max(have)
            w, g = max(mine)
            best[c], ours_best[c] = f, g
            ratio[c] = round(w / v, 3)
    nearest = {"F32": "F32", "BF16": "BF16", "Q8": "Q8_0"}
    same = {f"{f}_over_{g}": {("decode" if c.startswith("tg") else "prefill_" + c[2:]):
                              round(ours[f][c] / llama[g][c], 3)
                              for c in cols if c in ours[f] and c in llama[g]}
            for f, g in nearest.items() if f in ours and g in llama}

    agreement = {}
    # llama.cpp's format against our F32, and its BF16 against our BF16 checkpoint
    pairs = [(fmt, f"agreement-{fmt}-*.json") for fmt in FORMATS]
    pairs.append(("BF16_vs_hypic_BF16", "agreement-BF16-hypicBF16-*.json"))
    pairs.append(("Q8_0_vs_hypic_Q8", "agreement-Q8_0-hypicQ8-*.json"))
    pairs.append(("F32_vs_hypic_Q8", "agreement-hypicQ8-F32-*.json"))
    for fmt, pattern in pairs:
        runs = []
        for path in sorted(glob.glob(os.path.join(d, pattern))):
            if fmt in FORMATS and "-hypic" in path:
                continue
            with open(path) as f:
                runs.append(json.load(f))
        if runs:
            agreement[fmt] = {"prompts": len(runs),
                              "top10_identical": all(r["top10_identical"] for r in runs),
                              "top1_identical": all(r["top1_identical"] for r in runs),
                              "min_top10_overlap": min(r["top10_overlap"] for r in runs),
                              "max_abs_logit_diff": max(r["max_abs_logit_diff"] for r in runs),
                              "logits_compared": runs[0]["compared"]}

    print(f"\nllama.cpp {meta.get('llama_cpp_commit', '?')[:12]} (llama-cpp-python "
          f"{meta.get('llama_cpp_python', '?')}) against hypic, {meta.get('threads')} threads, "
          f"{meta.get('cpu')}; tokens/s, median of {meta.get('rounds')} rounds")
    print(f"{'':22}" + "".join(f"{c:>10}" for c in cols))
    for fmt, row in llama.items():
        print(f"{'llama.cpp ' + fmt:22}" + "".join(f"{row.get(c, float('nan')):10.1f}" for c in cols))
    for fmt, row in ours.items():
        print(f"{'hypic ' + fmt:22}" + "".join(f"{row.get(c, float('nan')):10.1f}" for c in cols))
    print(f"{'best hypic / best llama':22}" + "".join(
        f"{ratio[c]:9.2f}x" if c in ratio else f"{'-':>10}" for c in cols))
    print(f"{'  (llama.cpp format)':22}" + "".join(f"{best.get(c, '-'):>10}" for c in cols))
    print(f"{'  (hypic format)':22}" + "".join(f"{ours_best.get(c, '-'):>10}" for c in cols))
    for k, row in same.items():
        print(f"{k.replace('_over_', ' / llama '):22}" + "".join(
            f"{row[key]:9.2f}x" if key in row else f"{'-':>10}"
            for key in (("decode" if c.startswith("tg") else "prefill_" + c[2:]) for c in cols)))
    for fmt, a in agreement.items():
        who = fmt.replace("_vs_hypic_", " vs hypic ") if "_vs_" in fmt \
            else f"{fmt:5} vs hypic F32"
        print(f"agreement {who} ({a['prompts']} prompts): top-10 identical "
              f"{'yes' if a['top10_identical'] else 'NO'}, top-1 "
              f"{'yes' if a['top1_identical'] else 'NO'}, max |logit diff| over our top "
              f"{a['logits_compared']}: {a['max_abs_logit_diff']:.6f}")

    out = {"bench": "llamacpp_anchor"}
    for k, v in meta.items():
        out[k] = int(v) if re.fullmatch(r"\d+", v) else (v == "true" if v in ("true", "false") else v)
    out.update({"llama_bench_build_commit": build, "lengths": lengths, "tg_tokens": tg, "llamacpp": llama, "ours": ours,
                "best_llamacpp_format": best, "best_hypic_format": ours_best,
                "ratio_ours_over_best": {("decode" if c.startswith("tg") else "prefill_" + c[2:]): r
                                         for c, r in ratio.items()},
                "ratio_same_format": same,
                "agreement": agreement})
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
