"""pagedllm-router on a shared-prefix workload: prefix affinity against round-robin over the same replicas.

Starts --replicas pagedllm-host processes (--config, default configs/tiny.yaml; --threads threads each) and,
in turn, a router with each policy in front of them. A run is --system-prompts system prompts, each shared by
--users users who each ask one question (the order shuffled), sent by --concurrency clients at once, streamed.
Every run's prompts carry a tag of their own, so no run finds a prefix an earlier run left in a replica's
cache. The policies alternate for --rounds rounds. Prints per policy the mean, p50 and p99 time to first token
and the throughput and the replicas' prefix-cache hit rate (prompt tokens served from the cache), then
affinity / round-robin ratios, with the load average around the runs.

    scripts/python.sh tools/bench/router_bench.py --host build/core/host/pagedllm-host \\
        --router build/core/router/pagedllm-router
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (http://\S+)")


def start(args, name):
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    for line in process.stdout:
        found = LISTENING.search(line)
        if found:
            # Keep draining stdout so the process never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, found.group(1)
    sys.exit(f"{name} exited before listening (exit code {process.wait()})")


def wait_until_up(url, replicas):
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, timeout=10, trust_env=False) as client:
        while time.monotonic() < deadline:
            response = client.get("/health")
            if response.status_code == 200 and response.json().get("replicas_up") == replicas:
                return
            time.sleep(0.1)
    sys.exit("the router did not see every replica up within 60 s")


def system_prompt(tag, index, words):
    rng = random.Random(index)
    vocabulary = ["parse", "token", "cache", "block", "prefix", "route", "replica", "stream", "model", "batch",
                  "queue", "value", "index", "table", "check", "write", "read", "merge", "split", "count"]
    body = " ".join(rng.choice(vocabulary) for _ in range(words))
    return f"# run {tag}, system prompt {index}: you review Python code.\n# {body}\n"


def one_request(url, model, prompt, max_tokens):
    """(time to first token, output tokens) of one streamed completion."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    first = None
    tokens = 0
    with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
        with client.stream("POST", "/v1/completions", json=body) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[len("data: "):])
                if first is None and event.get("choices") and event["choices"][0].get("text"):
                    first = time.perf_counter() - started
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
    return first if first is not None else time.perf_counter() - started, tokens


def run_workload(url, model, tag, options):
    prompts = [system_prompt(tag, s, options.system_words) + f"def user_{tag}_{s}_{u}(x):  # question {u}\n"
               for s in range(options.system_prompts) for u in range(options.users)]
    random.Random(tag).shuffle(prompts)
    started = time.perf_counter()
    with ThreadPoolExecutor(options.concurrency) as pool:
        results = list(pool.map(lambda p: one_request(url, model, p, options.max_tokens), prompts))
    elapsed = time.perf_counter() - started
    return [ttft for ttft, _ in results], sum(tokens for _, tokens in results), elapsed


def prefix_cache_tokens(replica_urls):
    """(hit, queried) prompt tokens of the replicas' prefix caches so far, summed over the replicas."""
    hits = queried = 0
    for url in replica_urls:
        with httpx.Client(base_url=url, timeout=60, trust_env=False) as client:
            for line in client.get("/metrics").text.split("\n"):
                if line.startswith("pagedllm:prefix_cache_hits_total{"):
                    hits += float(line.rsplit(" ", 1)[1])
                elif line.startswith("pagedllm:prefix_cache_queries_total{"):
                    queried += float(line.rsplit(" ", 1)[1])
    return hits, queried


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", required=True, help="the pagedllm-host binary")
    parser.add_argument("--router", required=True, help="the pagedllm-router binary")
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"), help="the replicas' config")
    parser.add_argument("--model-path", default=str(ROOT / "models" / "pagedllm-tiny"),
                        help="the model the config serves (the router renders prompts with its tokenizer)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="model and attention threads per replica")
    parser.add_argument("--system-prompts", type=int, default=4)
    parser.add_argument("--users", type=int, default=12, help="requests per system prompt")
    parser.add_argument("--system-words", type=int, default=150, help="words of each system prompt")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2, help="runs per policy, alternating")
    parser.add_argument("--json", help="also write the results here")
    options = parser.parse_args()

    replicas = []
    routers = []
    work_dir = tempfile.TemporaryDirectory(prefix="router_bench_")
    try:
        for _ in range(options.replicas):
            replicas.append(start([options.host, "--config", options.config, "--set", "server.port=0",
                                   "--set", "logging.level=warn",
                                   "--set", f"model.options.num_threads={options.threads}",
                                   "--set", f"attention.options.num_threads={options.threads}"], "pagedllm-host"))
        work = Path(work_dir.name)
        urls = {}
        for policy in ("prefix_affinity", "round_robin"):
            config = work / f"{policy}.yaml"
            config.write_text(f"model: {{path: {Path(options.model_path).resolve()}}}\n"
                              "replicas:\n" + "".join(f"  - url: {url}\n" for _, url in replicas) +
                              f"routing: {{policy: {policy}}}\n"
                              "server: {port: 0}\nlogging: {level: warn}\n")
            process, url = start([options.router, "--config", str(config)], "pagedllm-router")
            routers.append(process)
            wait_until_up(url, options.replicas)
            urls[policy] = url
        with httpx.Client(base_url=urls["round_robin"], timeout=60, trust_env=False) as client:
            model = client.get("/v1/models").json()["data"][0]["id"]

        load_before = os.getloadavg()
        replica_urls = [url for _, url in replicas]
        with httpx.Client(base_url=urls["round_robin"], timeout=60, trust_env=False) as client:
            probe = system_prompt("round_robin-0", 0, options.system_words) + "def user_0_0_0(x):  # question 0\n"
            prompt_tokens = client.post("/tokenize", json={"prompt": probe}).json()["count"]
        results = {policy: {"ttft": [], "tokens": 0, "seconds": 0.0, "hit": 0.0, "queried": 0.0} for policy in urls}
        for round_number in range(options.rounds):
            for policy in ("round_robin", "prefix_affinity"):
                hit_before, queried_before = prefix_cache_tokens(replica_urls)
                ttft, tokens, seconds = run_workload(urls[policy], model, f"{policy}-{round_number}", options)
                hit_after, queried_after = prefix_cache_tokens(replica_urls)
                results[policy]["ttft"] += ttft
                results[policy]["tokens"] += tokens
                results[policy]["seconds"] += seconds
                results[policy]["hit"] += hit_after - hit_before
                results[policy]["queried"] += queried_after - queried_before
        load_after = os.getloadavg()
    finally:
        for process in routers + [process for process, _ in replicas]:
            process.terminate()
            process.wait(timeout=60)
        work_dir.cleanup()

    summary = {}
    for policy, r in results.items():
        summary[policy] = {
            "requests": len(r["ttft"]),
            "ttft_mean_s": statistics.mean(r["ttft"]),
            "ttft_p50_s": percentile(r["ttft"], 0.50),
            "ttft_p99_s": percentile(r["ttft"], 0.99),
            "output_tokens_per_s": r["tokens"] / r["seconds"],
            "requests_per_s": len(r["ttft"]) / r["seconds"],
            "prefix_cache_hit_rate": r["hit"] / r["queried"] if r["queried"] else 0.0,
        }
    print(f"{options.replicas} replicas x {options.threads} thread(s), {options.system_prompts} system prompts x "
          f"{options.users} users, {options.system_words} words each, max_tokens {options.max_tokens}, "
          f"concurrency {options.concurrency}, {options.rounds} rounds per policy; prompts of {prompt_tokens} tokens")
    print(f"{'policy':<16} {'TTFT mean':>10} {'p50':>8} {'p99':>8} {'tok/s':>8} {'req/s':>7} {'cache hits':>10}")
    for policy, s in summary.items():
        print(f"{policy:<16} {s['ttft_mean_s'] * 1000:>8.1f}ms {s['ttft_p50_s'] * 1000:>6.1f}ms "
              f"{s['ttft_p99_s'] * 1000:>6.1f}ms {s['output_tokens_per_s']:>8.1f} {s['requests_per_s']:>7.2f} "
              f"{s['prefix_cache_hit_rate'] * 100:>9.1f}%")
    a, b = summary["prefix_affinity"], summary["round_robin"]
    ratios = {"ttft_mean": a["ttft_mean_s"] / b["ttft_mean_s"], "ttft_p50": a["ttft_p50_s"] / b["ttft_p50_s"],
              "ttft_p99": a["ttft_p99_s"] / b["ttft_p99_s"],
              "throughput": a["output_tokens_per_s"] / b["output_tokens_per_s"]}
    print("affinity / round-robin: " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
    print(f"load average (1, 5, 15 min): before {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}, "
          f"after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f} on {os.cpu_count()} CPUs")
    if options.json:
        Path(options.json).write_text(json.dumps({"options": vars(options), "summary": summary, "ratios": ratios,
                                                  "load_before": load_before, "load_after": load_after}, indent=2))


if __name__ == "__main__":
    main()
