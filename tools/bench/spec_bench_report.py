"""Summarises tools/bench/spec_bench.sh. The CLI runs (batch 1): median decode
tokens/s with and without EAGLE, the inter-token latency that is (1 / rate), whether
every run printed the same text, and the acceptance the EAGLE runs report. The
servers, per kind of prompt (random, code) and concurrency: output tokens/s, time per
output token (TPOT: (E2E - TTFT) / (output tokens - 1), mean over requests) and
the gap between streamed chunks (ITL), with speculation (eagle) and without
(plain), each the median over the run's repeats, the ratios of the medians, and
the acceptance from the eagle servers' /metrics summed over the repeats: mean
acceptance length (1 + accepted / verifications), draft acceptance rate
(accepted / proposed) and, per draft position i, the share of verifications
that accepted the draft at i. The same numbers go to OUT_DIR/summary.json
(tools/bench/plot_spec_sweep.py draws several runs' side by side)."""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    with open(path) as f:
        d = json.load(f)
    s = d["summary"]
    reqs = [r for r in d["requests"] if r.get("error") in (None, "")]
    tpots = []
    for r in reqs:
        n = r.get("output_tokens", 0)
        if n > 1 and r.get("ttft_s") is not None and r.get("e2e_s") is not None:
            tpots.append((r["e2e_s"] - r["ttft_s"]) / (n - 1))
    tpot = sum(tpots) / len(tpots) if tpots else float("nan")
    return s["output_throughput"], tpot, s["itl_s"]["mean"]


def medians(out, name, workload, c):
    runs = [load(p) for p in sorted(glob.glob(os.path.join(out, f"{name}-{workload}-c{c}-r*.json")))]
    if not runs:
        sys.exit(f"spec_bench_report: no {name}-{workload}-c{c}-r*.json in {out}")
    return tuple(statistics.median(run[i] for run in runs) for i in range(3)), len(runs)


def acceptance(out, workload, c):
    totals, per_position = {}, {}
    for path in glob.glob(os.path.join(out, f"eagle-{workload}-c{c}-r*.metrics")):
        for line in open(path):
            m = re.match(r"(pagedllm:spec_decode_\w+)(\{[^}]*\})? (\S+)", line)
            if not m:
                continue
            position = re.search(r'position="(\d+)"', m.group(2) or "")
            if position:
                i = int(position.group(1))
                per_position[i] = per_position.get(i, 0.0) + float(m.group(3))
            else:
                totals[m.group(1)] = totals.get(m.group(1), 0.0) + float(m.group(3))
    drafts = totals.get("pagedllm:spec_decode_num_drafts_total", 0)
    accepted = totals.get("pagedllm:spec_decode_num_accepted_tokens_total", 0)
    proposed = totals.get("pagedllm:spec_decode_num_draft_tokens_total", 0)
    nan = float("nan")
    return (1 + accepted / drafts if drafts else nan, accepted / proposed if proposed else nan,
            [per_position[i] / drafts if drafts else nan for i in sorted(per_position)])


def cli(out):
    rates, texts, accept = {"plain": [], "eagle": []}, set(), ""
    for name in rates:
        for path in sorted(glob.glob(os.path.join(out, f"cli-{name}-r*.txt"))):
            log = open(path).read()
            rates[name].append(float(re.search(r"then ([0-9.]+) tok/s", log).group(1)))
            texts.add(open(path[:-4] + ".out").read())
            found = re.search(r"mean acceptance length ([0-9.]+).*by draft position: (.*)", log)
            if found:
                accept = f"mean acceptance length {found.group(1)}, by draft position {found.group(2).strip()}"
    if not rates["plain"] or not rates["eagle"]:
        return None
    plain, eagle = statistics.median(rates["plain"]), statistics.median(rates["eagle"])
    print(f"CLI, batch 1, {len(rates['plain'])} runs each: median decode {plain:.0f} tok/s plain, {eagle:.0f} with "
          f"EAGLE ({eagle / plain:.2f}x); inter-token latency {1e3 / plain:.2f} ms vs {1e3 / eagle:.2f} ms; "
          f"{'identical text' if len(texts) == 1 else 'TEXTS DIFFER'}; {accept}")
    print(f"  runs plain: {' '.join(f'{r:.0f}' for r in rates['plain'])}; "
          f"with EAGLE: {' '.join(f'{r:.0f}' for r in rates['eagle'])}\n")
    return {"plain_tok_s": plain, "eagle_tok_s": eagle, "ratio": eagle / plain, "identical_text": len(texts) == 1}


def main():
    out = sys.argv[1]
    summary = {"cli": cli(out), "server": {}}
    print("| prompts | concurrency | repeats | output tok/s plain | with EAGLE | ratio | TPOT ms plain | with EAGLE "
          "| ratio | chunk gap ms plain | with EAGLE | mean acceptance length | draft acceptance rate | by position |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for workload in ("random", "code"):
        for c in (1, 8, 64):
            p, n = medians(out, "plain", workload, c)
            e, _ = medians(out, "eagle", workload, c)
            mal, rate, per_position = acceptance(out, workload, c)
            positions = " / ".join(f"{x:.2f}" for x in per_position)
            print(f"| {workload} | {c} | {n} | {p[0]:.0f} | {e[0]:.0f} | {e[0] / p[0]:.2f}x | {p[1] * 1e3:.2f} | "
                  f"{e[1] * 1e3:.2f} | {e[1] / p[1]:.2f}x | {p[2] * 1e3:.2f} | {e[2] * 1e3:.2f} | {mal:.2f} | "
                  f"{rate:.0%} | {positions} |")
            summary["server"][f"{workload}-c{c}"] = {
                "plain_tok_s": p[0], "eagle_tok_s": e[0], "ratio": e[0] / p[0], "tpot_ms_plain": p[1] * 1e3,
                "tpot_ms_eagle": e[1] * 1e3, "mean_acceptance_length": mal, "acceptance_by_position": per_position}
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
