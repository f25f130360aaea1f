"""Summarises and plots tools/bench/peers.sh's results: a table (stdout) and a PNG.

    plot_peers.py RESULTS_DIR OUT.png

Server runs (pagedllm-bench JSON: NAME-1.json, NAME-8.json, NAME-32.json) give output tokens/s per workload and,
for one stream, prefill tok/s (prompt tokens / mean TTFT) and decode tok/s (output tokens after the first / the
time after it); in-process runs (peers_llamacpp.py, peers_transformers.py: NAME-1.json with prefill_tok_s and
decode_tok_s) give one stream only.
"""
import glob
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def one_stream(d):
    if "summary" not in d:
        return d["prefill_tok_s"], d["decode_tok_s"]
    reqs = [r for r in d["requests"] if r["success"]]
    ttft = sum(r["ttft_s"] for r in reqs) / len(reqs)
    decode = sum((r["output_tokens"] - 1) / (r["e2e_s"] - r["ttft_s"]) for r in reqs) / len(reqs)
    return reqs[0]["input_tokens"] / ttft, decode


def main():
    results, out = sys.argv[1], sys.argv[2]
    engines = {}
    for path in sorted(glob.glob(os.path.join(results, "*-*.json"))):
        name, streams = os.path.basename(path)[:-5].rsplit("-", 1)
        with open(path) as f:
            d = json.load(f)
        e = engines.setdefault(name, {})
        if streams == "1":
            e["prefill"], e["decode"] = one_stream(d)
        else:
            e[f"out{streams}"] = d["summary"]["output_throughput"]
    print("| engine | prefill tok/s (1 stream) | decode tok/s (1 stream) | out tok/s, 8 streams | 32 streams |")
    print("|---|---|---|---|---|")
    for name, e in engines.items():
        cells = [f"{e[k]:.1f}" if k in e else "-" for k in ("prefill", "decode", "out8", "out32")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    metrics = [("prefill", "prefill tok/s, 1 stream"), ("decode", "decode tok/s, 1 stream"),
               ("out8", "output tok/s, 8 streams"), ("out32", "output tok/s, 32 streams")]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4))
    names = list(engines)
    for ax, (key, title) in zip(axes, metrics):
        values = [engines[n].get(key, 0.0) for n in names]
        ax.barh(names, values, color=["C0" if n.startswith("pagedllm") else "C1" for n in names])
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=8)
        for i, v in enumerate(values):
            ax.text(v, i, f" {v:.1f}" if v else " not run", va="center", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
