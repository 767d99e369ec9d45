#!/usr/bin/env python3
"""Draws a trained model's loss.png from what its train.json records.

train.py calls plot() at the end of a run; run on its own, this redraws a committed model's
curve from its committed train.json without training again:

    python3 tools/train/loss_plot.py models/hypic-recall [models/hypic-recall-long ...]

(matplotlib, as pinned in requirements.txt). The title names the model (its directory) and
what sets it apart: its decays (learnt, or fixed by --decays), its steps and its held-out
exact match. The legend sits below the axes, where it covers no point.
"""

import json
import sys
from pathlib import Path


def title_of(info, name):
    decays = info.get("settings", {}).get("decays")
    heads = f"decays fixed at {decays}" if decays else "decays learnt"
    held = info.get("heldout_exact_match")
    held_s = f"; held-out exact match {100 * held:.1f} %" if held is not None else ""
    return (f"{name}: training loss and validation exact match\n"
            f"{info['parameters'] / 1e6:.2f} M parameters, Gated DeltaNet {heads}\n"
            f"copy curriculum, then recall from step {info['recall_from_step']}{held_s}")


def plot(info, name, path):
    """Writes path (PNG): info is train.json's content, name the model's name."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    points = info["curve"]
    fig, ax = plt.subplots(figsize=(7, 4.8))
    s = [p["step"] for p in points if "loss" in p]
    ax.plot(s, [p["loss"] for p in points if "loss" in p], lw=0.8, label="training loss")
    ax.set_xlabel("step")
    ax.set_ylabel("weighted cross-entropy (nats)")
    ax.set_yscale("log")
    ax.axvline(info["recall_from_step"], color="0.6", lw=0.8, ls=":",
               label="recall task from here")
    ax2 = ax.twinx()
    e = [p for p in points if "val_em" in p]
    ax2.plot([p["step"] for p in e], [100 * p["val_em"] for p in e], "o-", color="C1",
             label="validation exact match")
    ax2.set_ylabel("exact match (%)")
    ax2.set_ylim(-5, 105)  # points at 0 or 100 % off the frame
    ax.set_title(title_of(info, name), fontsize=9)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(dirs):
    if not dirs:
        sys.exit("usage: loss_plot.py MODEL_DIR...  (redraws MODEL_DIR/loss.png from its "
                 "train.json)")
    for d in map(Path, dirs):
        info = json.loads((d / "train.json").read_text())
        plot(info, d.resolve().name, d / "loss.png")
        print(f"{d}/loss.png from {d}/train.json ({len(info['curve'])} points)")


if __name__ == "__main__":
    main(sys.argv[1:])
