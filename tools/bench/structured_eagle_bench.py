#!/usr/bin/env python3
"""Structured output under EAGLE (docs/structured-output.md "Cost under speculative decoding").

Starts pagedllm-host on configs/eagle.yaml (the embedded model and its EAGLE head) with the
constraint plugin, then sends greedy completions of code prompts one at a time (concurrency 1)
or CONCURRENCY at a time, in four modes interleaved over several rounds:

  unconstrained, EAGLE      the plain speculative request
  unconstrained, no EAGLE   the same with "speculative_decoding": false
  constrained, EAGLE        a JSON schema (response_format), speculating: masked drafts
  constrained, no EAGLE     the same schema, one token per step

Greedy output is the same with and without speculation (the engine's lossless rule), so each
pair generates the same tokens and their times compare directly. Reports output tokens per second
(completion tokens over the wall time of the batch of requests), the mean acceptance length of the
speculative modes (from /metrics) and ratios within the same run.

Usage: structured_eagle_bench.py --host build/bin/pagedllm-host [--config configs/eagle.yaml]
       [--set plugins.search_paths=[build/plugins]] [--concurrency 1 8] [--rounds 5] [--passes 2]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys
import time

from served_host import metric_samples, served_host

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "def quicksort(items):\n    if len(items) <= 1:",
    "for i in range(10):",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    "result = {}\nfor key, value in items:",
    "if __name__ == '__main__':",
]
# A function description as a tool call would carry it: bounded, so every request completes.
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z_]{1,16}$"},
        "args": {"type": "array", "items": {"type": "string", "pattern": "^[a-z_]{1,12}$"}, "maxItems": 3},
        "returns": {"type": "string", "pattern": "^[a-z_ ]{1,24}$"},
    },
    "required": ["name", "args", "returns"],
    "additionalProperties": False,
}
MODES = {
    "unconstrained, EAGLE": {"max_tokens": 64, "ignore_eos": True},
    "unconstrained, no EAGLE": {"max_tokens": 64, "ignore_eos": True, "speculative_decoding": False},
    "constrained, EAGLE": {"max_tokens": 96, "response_format": {
        "type": "json_schema", "json_schema": {"name": "function", "schema": SCHEMA}}},
    "constrained, no EAGLE": {"max_tokens": 96, "speculative_decoding": False, "response_format": {
        "type": "json_schema", "json_schema": {"name": "function", "schema": SCHEMA}}},
}


def counters(client):
    samples = metric_samples(client)
    return {name: samples.get(f"pagedllm:spec_decode_{name}_total", 0.0)
            for name in ("num_drafts", "num_accepted_tokens")}


def run_round(client, model, concurrency, mode, passes):
    """Every prompt `passes` times, `concurrency` at a time: (completion tokens, seconds, acceptance length
    or None)."""
    before = counters(client)

    def one(prompt):
        r = client.post("/v1/completions", json={"model": model, "prompt": prompt, "temperature": 0, **mode})
        if r.status_code != 200:
            sys.exit(f"request failed: {r.status_code} {r.text}")
        return r.json()

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        responses = list(pool.map(one, PROMPTS * passes))
    seconds = time.perf_counter() - started
    if "response_format" in mode:
        for r in responses:
            if r["choices"][0]["finish_reason"] != "stop":
                sys.exit(f"a constrained request did not finish: {r}")
            json.loads(r["choices"][0]["text"])  # the schema itself is checked by the API tests
    after = counters(client)
    drafts = after.get("num_drafts", 0) - before.get("num_drafts", 0)
    accepted = after.get("num_accepted_tokens", 0) - before.get("num_accepted_tokens", 0)
    tokens = sum(r["usage"]["completion_tokens"] for r in responses)
    return tokens, seconds, (1 + accepted / drafts) if drafts else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", required=True)
    parser.add_argument("--config", default="configs/eagle.yaml")
    parser.add_argument("--set", action="append", default=[], help="a --set override for the host")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=2, help="times each prompt is sent in a round")
    args = parser.parse_args()
    # Compact JSON (no whitespace runs between tokens): the greedy model would otherwise spend its
    # max_tokens on newlines, and every request must finish for the pairs to compare.
    overrides = ["constraint.plugin=constraint_xgrammar", "constraint.options.any_whitespace=false", *args.set]
    results = {}
    with served_host(args.host, args.config, overrides) as (client, model):
        for mode in MODES.values():  # warm-up: grammar compilation (cached afterwards), first allocations
            run_round(client, model, 8, mode, 1)
        for concurrency in args.concurrency:
            for _ in range(args.rounds):
                for name, mode in MODES.items():
                    results.setdefault((concurrency, name), []).append(
                        run_round(client, model, concurrency, mode, args.passes))
    load = os.getloadavg()
    print(f"config {args.config}, {len(PROMPTS)} prompts x {args.passes} a round, {args.rounds} rounds, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| concurrency | mode | output tok/s (median) | rounds | tokens a round | mean acceptance length | "
          "vs the same without EAGLE |")
    print("|---|---|---|---|---|---|---|")
    for concurrency in args.concurrency:
        rates = {name: [t / s for t, s, _ in results[(concurrency, name)]] for name in MODES}
        for name in MODES:
            runs = results[(concurrency, name)]
            median = statistics.median(rates[name])
            lengths = [a for _, _, a in runs if a is not None]
            acceptance = f"{statistics.median(lengths):.2f}" if lengths else "-"
            base_name = name.replace("EAGLE", "no EAGLE") if "no EAGLE" not in name else name
            ratio = median / statistics.median(rates[base_name])
            print(f"| {concurrency} | {name} | {median:.0f} | {', '.join(f'{r:.0f}' for r in rates[name])} | "
                  f"{runs[0][0]} | {acceptance} | {ratio:.2f}x |")
    json.dump({f"{c}/{n}": v for (c, n), v in results.items()}, sys.stderr)


if __name__ == "__main__":
    main()
