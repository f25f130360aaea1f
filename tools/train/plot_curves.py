"""Draws the loss curves of a training run from its log.jsonl files (matplotlib, Agg).

    scripts/python.sh tools/train/plot_curves.py --target build-train/target/log.jsonl \
        --eagle build-train/eagle/log.jsonl --out docs/training
"""
import argparse
import json
import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def last_run(records):
    """Records of the last started run (a resumed run continues it)."""
    start = max(i for i, r in enumerate(records) if r.get("event") == "start")
    return records[start:]


def plot_target(records, out):
    train = [r for r in records if "loss" in r and "step" in r]
    ev = [r for r in records if "eval_loss" in r]
    tokens_per_step = train[0]["tokens"] / train[0]["step"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot([r["tokens"] / 1e6 for r in train], [r["loss"] for r in train], label="train (mean of 10 steps)", lw=1)
    ax.plot([r["step"] * tokens_per_step / 1e6 for r in ev], [r["eval_loss"] for r in ev], "o-",
            label="held-out (15 files, 55.8k tokens)", ms=4)
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("cross-entropy (nats / token)")
    ax.set_title("pagedllm-tiny: LlamaForCausalLM, 8.4M params, CPU (1 thread)")
    ax.set_ylim(1.0, min(9.5, max(r["loss"] for r in train) + 0.2))
    ax.grid(alpha=0.3)
    ax.legend()
    secax = ax.secondary_yaxis("right", functions=(lambda x: x, lambda x: x))
    secax.set_yticks([math.log(p) for p in (4, 8, 16, 32, 64, 128, 256, 1024, 4096)])
    secax.set_yticklabels(["4", "8", "16", "32", "64", "128", "256", "1024", "4096"])
    secax.set_ylabel("perplexity")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_eagle(records, out):
    train = [r for r in records if "smooth_l1" in r]
    ev = [r for r in records if "eval_loss" in r]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6))
    for ax, key, title in zip(axes, ("smooth_l1", "ce", "top1"),
                              ("feature SmoothL1", "CE vs target distribution", "top-1 = target argmax")):
        ax.plot([r["step"] for r in train], [r[key] for r in train], lw=1, label="train")
        ax.plot([r["step"] for r in ev], [r["eval_" + key] for r in ev], "o-", ms=4, label="held-out")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("pagedllm-tiny-eagle: EAGLE-1 head (one step ahead, teacher-forced features)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", help="log.jsonl of train.py")
    ap.add_argument("--eagle", help="log.jsonl of train_eagle.py")
    ap.add_argument("--out", required=True, help="directory for the PNG files")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.target:
        plot_target(last_run(read(args.target)), os.path.join(args.out, "target-loss.png"))
    if args.eagle:
        plot_eagle(last_run(read(args.eagle)), os.path.join(args.out, "eagle-loss.png"))


if __name__ == "__main__":
    main()
