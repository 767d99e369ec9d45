"""Compares the next-token logits of llama.cpp (llama-logits: every "id logit")
with ours (`hypic-model run --top K`: rank, token, logit, probability) after the
same prompt, for the anchor (tools/anchor/llamacpp.sh).

    python compare_logits.py LLAMA.txt OURS.txt

Prints one JSON object: whether the top-10 ids are identical and in the same
order, whether the top token is, and the largest |logit difference| over the K
tokens we printed (our top K; ours are printed to 4 decimals).
"""

import json
import re
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare_logits.py LLAMA.txt OURS.txt")
    theirs = {}
    with open(sys.argv[1]) as f:
        for line in f:
            i, v = line.split()
            theirs[int(i)] = float(v)
    ours = []
    with open(sys.argv[2]) as f:
        for line in f:
            m = re.match(r"^\s*\d+\s+(\d+)\s+(-?[0-9.]+(?:e[-+]?\d+)?)\s", line)
            if m:
                ours.append((int(m.group(1)), float(m.group(2))))
    if len(ours) < 10 or len(theirs) < 10:
        sys.exit(f"compare_logits: too few logits ({len(ours)} ours, {len(theirs)} llama.cpp's)")
    top_theirs = sorted(theirs, key=lambda i: -theirs[i])[:10]
    top_ours = [i for i, _ in ours[:10]]
    diff = max(abs(v - theirs[i]) for i, v in ours)
    print(json.dumps({"top10_identical": top_ours == top_theirs,
                      "top1_identical": top_ours[0] == top_theirs[0],
                      "top10_overlap": len(set(top_ours) & set(top_theirs)),
                      "max_abs_logit_diff": round(diff, 6), "compared": len(ours),
                      "top10_ours": top_ours, "top10_llamacpp": top_theirs}))


if __name__ == "__main__":
    main()
