#!/usr/bin/python3
"""Summarises tools/bench/spec_bench.sh: per concurrency, output tokens/s, time per
output token (TPOT: (E2E - TTFT) / (output tokens - 1), mean over requests) and
the gap between streamed chunks (ITL), with speculation (eagle) and without
(plain), the ratios, and the acceptance from the eagle server's /metrics."""
import json
import os
import re
import sys


def load(out, name, c):
    with open(os.path.join(out, f"{name}-c{c}.json")) as f:
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


def acceptance(out, c):
    path = os.path.join(out, f"eagle-c{c}.metrics")
    values = {}
    for line in open(path):
        m = re.match(r"(pagedllm:spec_decode_\w+)(\{[^}]*\})? (\S+)", line)
        if m:
            key = m.group(1) + re.sub(r',?model_name="[^"]*"', "", m.group(2) or "").replace("{}", "")
            values[key] = float(m.group(3))
    drafts = values.get("pagedllm:spec_decode_num_drafts_total", 0)
    accepted = values.get("pagedllm:spec_decode_num_accepted_tokens_total", 0)
    proposed = values.get("pagedllm:spec_decode_num_draft_tokens_total", 0)
    return (1 + accepted / drafts if drafts else float("nan"), accepted / proposed if proposed else float("nan"))


def main():
    out = sys.argv[1]
    rows = []
    for c in (1, 8):
        p = load(out, "plain", c)
        e = load(out, "eagle", c)
        mal, rate = acceptance(out, c)
        rows.append((c, p, e, mal, rate))
    print("| concurrency | output tok/s plain | with EAGLE | ratio | TPOT ms plain | with EAGLE | ratio "
          "| chunk gap ms plain | with EAGLE | mean acceptance length | draft acceptance rate |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for c, p, e, mal, rate in rows:
        print(f"| {c} | {p[0]:.0f} | {e[0]:.0f} | {e[0] / p[0]:.2f}x | {p[1] * 1e3:.2f} | {e[1] * 1e3:.2f} | "
              f"{e[1] / p[1]:.2f}x | {p[2] * 1e3:.2f} | {e[2] * 1e3:.2f} | {mal:.2f} | {rate:.0%} |")


if __name__ == "__main__":
    main()
