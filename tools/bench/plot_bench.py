#!/usr/bin/env python3
"""Draws pagedllm-bench results: plot_bench.py RESULTS.json OUT_DIR

Writes ttft.png (CDF), itl.png (CDF), e2e.png (latency against send time)
and throughput.png (output tokens per second over the run)."""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def cdf(ax, values_ms, title):
    values = sorted(values_ms)
    n = len(values)
    ax.plot(values, [(i + 1) / n for i in range(n)], drawstyle="steps-post")
    ax.set_xlabel("ms")
    ax.set_ylabel("fraction of samples")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        result = json.load(f)
    out_dir = sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    ok = [r for r in result["requests"] if r["success"]]
    if not ok:
        sys.exit("plot_bench.py: no successful request to plot")
    cfg = result["config"]
    label = f"{cfg['model']}: in {cfg['input_len']}, out {cfg['output_len']}, rate {cfg['request_rate']}, concurrency {cfg['concurrency'] or 'unlimited'}"

    fig, ax = plt.subplots(figsize=(7, 4.5))
    cdf(ax, [r["ttft_s"] * 1e3 for r in ok], f"Time to first token\n{label}")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "ttft.png"), dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    cdf(ax, [x * 1e3 for r in ok for x in r["itl_s"]], f"Inter-token latency\n{label}")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "itl.png"), dpi=120)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.scatter([r["start_s"] for r in ok], [r["e2e_s"] for r in ok], s=8)
    ax.set_xlabel("send time (s since start)")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_title(f"End-to-end latency\n{label}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "e2e.png"), dpi=120)

    # Token times: send + TTFT, then the gaps; about 40 bins over the run.
    times = []
    for r in ok:
        t = r["start_s"] + r["ttft_s"]
        times.append(t)
        for gap in r["itl_s"]:
            t += gap
            times.append(t)
    end = max(times)
    bins = 40
    width = end / bins if end > 0 else 1.0
    counts = [0] * bins
    for t in times:
        counts[min(bins - 1, int(t / width))] += 1
    # Chunks, not tokens, are timed: scale by tokens per chunk.
    scale = sum(r["output_tokens"] for r in ok) / len(times)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.bar([i * width for i in range(bins)], [c * scale / width for c in counts], width=width, align="edge")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("output tokens/s")
    ax.set_title(f"Output throughput\n{label}")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=120)
    print(f"plot_bench.py: wrote ttft.png, itl.png, e2e.png, throughput.png to {out_dir}")


if __name__ == "__main__":
    main()
