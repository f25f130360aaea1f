"""Plots pagedllm-attn-bench JSON: time per run() call and effective KV
bandwidth vs context length, for both backends, one column per workload.

usage: scripts/python.sh tools/attn_bench/plot_attn_bench.py RESULTS.json OUT.png

Cases that differ only in context are one line; other dimensions (GQA,
head_dim, block size, dtype) become separate lines, labelled by them. A side
on a CUDA device gets its measured copy bandwidth as a dotted line on the
bandwidth plot.
Needs matplotlib (Debian: python3-matplotlib).
"""

import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        results = json.load(f)
    label = {}
    for side in ("a", "b"):
        spec = results[side]
        opts = json.dumps(spec["options"], separators=(",", ":")) if spec["options"] else ""
        device = spec.get("device", "cpu")  # files from before --device-a/--device-b have none
        label[side] = f"{side}: {spec['plugin']} {opts}".strip() + ("" if device == "cpu" else f" on {device}")

    workloads = []
    series = defaultdict(list)  # (workload, variant) -> [case]
    for case in results["cases"]:
        if case.get("status") == "unsupported":  # refused by a side: nothing was timed
            continue
        if case["workload"] not in workloads:
            workloads.append(case["workload"])
        variant = f"gqa={case['gqa']} hd={case['head_dim']} bs={case['block_size']} {case['dtype']}"
        series[(case["workload"], variant)].append(case)
    variants = sorted({v for (_, v) in series})

    fig, axes = plt.subplots(2, len(workloads), figsize=(max(7.0, 5.5 * len(workloads)), 9), squeeze=False)
    markers = {"a": "o--", "b": "s-"}
    for col, workload in enumerate(workloads):
        ax_time, ax_bw = axes[0][col], axes[1][col]
        for vi, variant in enumerate(variants):
            cases = sorted(series.get((workload, variant), []), key=lambda c: c["context"])
            if not cases:
                continue
            ctx = [c["context"] for c in cases]
            color = f"C{vi % 10}"
            for side in ("a", "b"):
                line_label = f"{side} {variant}" if len(variants) > 1 else label[side]
                ax_time.plot(ctx, [c[side]["time_ms_median"] for c in cases], markers[side], color=color,
                             label=line_label)
                ax_bw.plot(ctx, [c[side]["kv_bandwidth_gbs"] for c in cases], markers[side], color=color,
                           label=line_label)
        for side in ("a", "b"):
            copy_gbs = results[side].get("copy_bandwidth_gbs", 0)
            if copy_gbs > 0:
                ax_bw.axhline(copy_gbs, linestyle=":", color="gray",
                              label=f"{side}: device-to-device copy {copy_gbs:.0f} GB/s")
        first = next(c for c in results["cases"] if c["workload"] == workload)
        ax_time.set_title(f"{workload}: {first['num_seqs']} seqs, {first['num_tokens']} new tokens")
        for ax in (ax_time, ax_bw):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("context length (tokens)")
            ax.grid(True, which="both", alpha=0.3)
        ax_time.set_yscale("log")
        ax_time.set_ylabel("time per run() call, median (ms)")
        ax_bw.set_ylabel("effective KV bandwidth (GB/s)")
        ax_time.legend(fontsize=7)
        ax_bw.legend(fontsize=7)
    fig.suptitle(f"pagedllm-attn-bench\n{label['a']}\nvs {label['b']}\n"
                 f"(o-- = a, s- = b; {results['reps']} timed calls per point, "
                 f"{results['hardware_threads']} hardware threads)", fontsize=10)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
