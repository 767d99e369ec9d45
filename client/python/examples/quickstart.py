"""Quickstart: two documents cached once, then asked about in either order.

Against `make run`'s daemon (hypic-cached on 127.0.0.1:7878 serving the embedded model
`recall`, which answers `?KEY` with the three digits its documents give KEY):

    python3 client/python/examples/quickstart.py [--addr HOST:PORT] [--token T]

It checks the daemon's health, warms two documents of models/hypic-recall/examples,
then prefills [documents..., question] in both orders, in mode pic (the cached
documents reused wherever they sit) and full (everything recomputed), and prints
each answer with its time to first token.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import hypic

EXAMPLES = Path(__file__).resolve().parents[3] / "models" / "hypic-recall" / "examples"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--addr", default=os.environ.get("HYPIC_ADDR", "127.0.0.1:7878"))
    ap.add_argument("--token", default=os.environ.get("HYPIC_TOKEN"))
    ap.add_argument("--model", default="recall")
    ap.add_argument("--examples", type=Path, default=EXAMPLES, help="doc1.txt, doc2.txt, question.txt")
    args = ap.parse_args()

    docs = {name: (args.examples / name).read_text() for name in ("doc1.txt", "doc2.txt")}
    question = (args.examples / "question.txt").read_text()

    with hypic.Client(args.addr, token=args.token) as c:
        h = c.health()
        print(
            f"{args.addr}: {hypic.HealthStatus(h.status).name.lower()}, version {h.version}, "
            f"models {', '.join(h.models)}"
        )

        for p in c.warm(args.model, [hypic.Segment(text, tags=[name]) for name, text in docs.items()]):
            print(
                f"warm {list(docs)[p.index]}: {hypic.WarmState(p.state).name.lower()}, "
                f"{p.bytes} bytes, key {p.key.hex()[:16]}…, {p.ms:.1f} ms"
            )

        print(f"question {question!r}")
        for order in (["doc1.txt", "doc2.txt"], ["doc2.txt", "doc1.txt"]):
            for mode in ("pic", "full"):
                r = c.prefill(args.model, [docs[n] for n in order], question, mode=mode, max_new_tokens=3)
                kinds = ",".join(hypic.OutcomeKind(s.kind).name.lower() for s in r.segments)
                print(
                    f"  {' + '.join(order):20} {mode:4}: answer {hypic.detokenize(r.generated)!r} "
                    f"(p={r.top[0].prob:.2f})  ttft {r.timings.ttft_ms:6.2f} ms  "
                    f"{r.tokens_computed:3} tokens computed  segments {kinds}"
                )


if __name__ == "__main__":
    try:
        main()
    except hypic.HypicError as e:
        raise SystemExit(f"quickstart: {e.code}: {e.message}")
