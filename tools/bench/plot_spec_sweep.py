"""Draws tools/bench/spec_bench.sh runs side by side: plot_spec_sweep.py OUT.png LABEL=DIR [LABEL=DIR ...]

Each DIR is a spec_bench.sh output directory (its summary.json, written by
spec_bench_report.py). One group of bars per run: EAGLE's output tokens/s over
plain's, measured in the same run, for the CLI at batch 1 and the server bench
with random and code prompts at concurrency 1, 8 and 64; the number over a server
bar is its mean acceptance length; a configuration a run did not measure has no bar."""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) < 3 or any("=" not in a for a in sys.argv[2:]):
        sys.exit(__doc__)
    runs = []
    for arg in sys.argv[2:]:
        label, directory = arg.rsplit("=", 1)
        with open(os.path.join(directory, "summary.json")) as f:
            runs.append((label, json.load(f)))
    series = [("CLI, batch 1", lambda s: s["cli"])] + [
        (f"server, {w} prompts, concurrency {c}", lambda s, key=f"{w}-c{c}": s["server"].get(key))
        for w in ("random", "code") for c in (1, 8, 64)]
    series = [(name, pick) for name, pick in series if any(pick(s) for _, s in runs)]
    fig, ax = plt.subplots(figsize=(max(7.0, 2.2 + 2.4 * len(runs)), 4.8))
    width = 0.8 / len(series)
    for i, (name, pick) in enumerate(series):
        xs = [r + (i - (len(series) - 1) / 2) * width for r in range(len(runs))]
        bars = ax.bar(xs, [pick(s)["ratio"] if pick(s) else float("nan") for _, s in runs], width, label=name)
        if i > 0:  # the server's mean acceptance length over its bars
            for bar, (_, s) in zip(bars, runs):
                if pick(s):
                    ax.annotate(f"{pick(s)['mean_acceptance_length']:.1f}",
                                (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                                fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([label for label, _ in runs])
    ax.set_ylabel("EAGLE tokens/s / plain tokens/s (same run)")
    ax.set_title("EAGLE speedup, embedded model on the CPU", fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=4)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(sys.argv[1], dpi=120)
    print(f"wrote {sys.argv[1]}")


if __name__ == "__main__":
    main()
