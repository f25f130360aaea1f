#!/usr/bin/env python3
"""Structured output's cost per decode step (docs/benchmarks.md "Structured output").

Starts pagedllm-host on a config (default configs/serve.yaml: SmolLM2-135M, vocabulary 49152),
then, for each batch size, sends that many concurrent completions of the same length (greedy,
ignore_eos, max_tokens tokens) unconstrained, with a regex and with a JSON schema, interleaved over
several rounds. The step time is the mean inter-token latency the server reports (/metrics:
pagedllm:inter_token_latency_seconds sum / count over the round): with every sequence decoding,
one token per sequence per step. Prints a Markdown table of medians and ratios to the unconstrained
step of the same batch size, measured in the same run.

Usage: structured_output_bench.py --host build/bin/pagedllm-host [--config configs/serve.yaml]
       [--batches 1 32] [--max-tokens 64] [--rounds 3]
"""
import argparse
import concurrent.futures
import json
import os
import statistics
import sys

from served_host import metric_samples, served_host

REGEX = r"[a-z ,.]*"
SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}, "n": {"type": "integer"}},
          "required": ["text", "n"]}
MODES = {
    "none": {},
    "regex": {"structured_outputs": {"regex": REGEX}},
    "json_schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}},
}


def histogram(client, name):
    """(sum, count) of a histogram on /metrics."""
    samples = metric_samples(client)
    return samples.get(name + "_sum", 0.0), samples.get(name + "_count", 0.0)


def round_step_ms(client, model, batch, max_tokens, extra):
    body = {"model": model, "prompt": "Write a short note:", "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **extra}
    before = histogram(client, "pagedllm:inter_token_latency_seconds")
    with concurrent.futures.ThreadPoolExecutor(batch) as pool:
        responses = list(pool.map(lambda _: client.post("/v1/completions", json=body), range(batch)))
    for r in responses:
        if r.status_code != 200:
            sys.exit(f"request failed: {r.status_code} {r.text}")
        if r.json()["usage"]["completion_tokens"] != max_tokens:
            sys.exit(f"expected {max_tokens} tokens: {r.text}")
    after = histogram(client, "pagedllm:inter_token_latency_seconds")
    return 1000.0 * (after[0] - before[0]) / (after[1] - before[1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", required=True)
    parser.add_argument("--config", default="configs/serve.yaml")
    parser.add_argument("--set", action="append", default=[], help="a --set override for the host")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = {}
    with served_host(args.host, args.config, args.set) as (client, model):
        for mode in MODES.values():  # warm-up: grammar compilation (cached afterwards), first allocations
            round_step_ms(client, model, 2, 8, mode)
        for batch in args.batches:
            for _ in range(args.rounds):
                for name, mode in MODES.items():
                    results.setdefault((batch, name), []).append(
                        round_step_ms(client, model, batch, args.max_tokens, mode))
    load = os.getloadavg()
    print(f"config {args.config}, {args.max_tokens} tokens per sequence, {args.rounds} rounds, "
          f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n")
    print("| batch | constraint | step (ms, median) | rounds (ms) | vs unconstrained |")
    print("|---|---|---|---|---|")
    for batch in args.batches:
        base = statistics.median(results[(batch, "none")])
        for name in MODES:
            values = results[(batch, name)]
            median = statistics.median(values)
            print(f"| {batch} | {name} | {median:.2f} | {', '.join(f'{v:.1f}' for v in values)} | "
                  f"{median / base:.2f}x |")
    json.dump({f"{b}/{n}": v for (b, n), v in results.items()}, sys.stderr)


if __name__ == "__main__":
    main()
