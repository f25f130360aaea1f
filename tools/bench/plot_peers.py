"""Summarises and plots tools/bench/peers.sh's results: a table (stdout) and a PNG.

    plot_peers.py RESULTS_DIR OUT.png

Server runs (pagedllm-bench JSON: NAME-1.json, NAME-8.json, NAME-32.json, NAME-shared_prefix.json) give output
tokens/s per workload (and the shared-prefix workload's mean TTFT) and, for one stream, prefill tok/s (prompt tokens /
mean TTFT) and decode tok/s (output tokens after the first / the time after it); in-process runs (peers_llamacpp.py,
peers_transformers.py: NAME-1.json with prefill_tok_s and decode_tok_s) give one stream only. The EAGLE workload's
runs (RESULTS_DIR/eagle/NAME-code_cN.json) get a table of their own: output tok/s, mean TTFT and mean end-to-end
latency (a speculative step streams several tokens in one chunk, so inter-token gaps are not comparable).
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
    # Requests whose output had text (ttft_s 0: none did, so there is no first token to time).
    reqs = [r for r in d["requests"] if r["success"] and r["ttft_s"] > 0]
    if not reqs:
        return float("nan"), float("nan")
    ttft = sum(r["ttft_s"] for r in reqs) / len(reqs)
    decode = sum((r["output_tokens"] - 1) / (r["e2e_s"] - r["ttft_s"]) for r in reqs) / len(reqs)
    return reqs[0]["input_tokens"] / ttft, decode


def eagle_table(directory):
    paths = sorted(glob.glob(os.path.join(directory, "*-*.json")))
    if not paths:
        return
    print("\n| EAGLE workload: engine | prompts | out tok/s | mean TTFT ms | mean E2E ms |")
    print("|---|---|---|---|---|")
    for path in paths:
        name, workload = os.path.basename(path)[:-5].rsplit("-", 1)
        with open(path) as f:
            summary = json.load(f)["summary"]
        print(f"| {name} | {workload} | {summary['output_throughput']:.1f} | {summary['ttft_s']['mean'] * 1000:.1f} "
              f"| {summary['e2e_s']['mean'] * 1000:.1f} |")


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
        elif streams == "shared_prefix":
            e["prefix_out"] = d["summary"]["output_throughput"]
            e["prefix_ttft"] = d["summary"]["ttft_s"]["mean"] * 1000
        else:
            e[f"out{streams}"] = d["summary"]["output_throughput"]
    print("| engine | prefill tok/s (1 stream) | decode tok/s (1 stream) | out tok/s, 8 streams | 32 streams "
          "| shared prefix: out tok/s | mean TTFT ms |")
    print("|---|---|---|---|---|---|---|")
    for name, e in engines.items():
        cells = [f"{e[k]:.1f}" if k in e else "-"
                 for k in ("prefill", "decode", "out8", "out32", "prefix_out", "prefix_ttft")]
        print(f"| {name} | " + " | ".join(cells) + " |")
    eagle_table(os.path.join(results, "eagle"))
    metrics = [("prefill", "prefill tok/s, 1 stream"), ("decode", "decode tok/s, 1 stream"),
               ("out8", "output tok/s, 8 streams"), ("out32", "output tok/s, 32 streams"),
               ("prefix_out", "output tok/s, shared prefix")]
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
