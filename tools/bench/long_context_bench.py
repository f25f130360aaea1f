"""Long-context benchmark (issue 19): pagedllm against llama.cpp at contexts of 1k-16k tokens, one sequence, on a
model of the peers' shape. Not part of CI (minutes per context on 2 cores).

    scripts/python.sh tools/bench/long_context_bench.py [--contexts 1024,4096,8192,16384] [--layers 4]
        [--threads 2] [--chunk 2048] [--decode 32] [--attention [LABEL=]PATH ...] [--skip-llamacpp] [--out DIR]
    scripts/python.sh tools/bench/long_context_bench.py --plot RESULTS.json [--png docs/long-context.png]

What it measures, per context length C, with the same thread count for every engine:
  - prefill: the time to prefill a C-token prompt in chunks of --chunk tokens (pagedllm: one chunk per step, as
    the scheduler splits a long prompt; llama.cpp: n_batch = --chunk, its default n_ubatch 512), and C / that time;
  - decode: the median time of --decode one-token steps right after that prompt (context C .. C + decode), as
    tokens/s;
  - attention alone (pagedllm): `pagedllm-attn-bench`'s median run() of one decode step at context C with the
    model's attention shape (num_kv_heads, GQA group, head_dim, bf16 cache, block 16, the same threads), times the
    number of layers, and its share of pagedllm's decode step: what dominates a step at that context.
pagedllm runs through build/bin/llama_long_context (models_llama + the attention plugin, in process, the KV cache
in the model's dtype, bf16). Each --attention [LABEL=]PATH (an attention_cpu.so of another build, the file named
attention_cpu.so; the first pagedllm run uses build/plugins') is a further pagedllm run, for before/after
comparisons in one session. llama.cpp runs in process through llama-cpp-python (the project's venv pins 0.3.36) on
the same model converted to GGUF f16 by tools/bench/hf_to_gguf.py, n_ctx = the longest context + decode + 16, KV
cache f16 (its default). The slowest part is prefill at 16k (minutes per engine on 2 loaded cores): --contexts and
--layers 2 shorten a check.

The model: tools/testing/make_tiny_llama.py with Llama-3.2-1B's layer shape (hidden 2048, intermediate 8192,
32 / 8 heads of 64, vocab 32000), --layers of them, bf16, random weights, max_position_embeddings 32768 (written
once to OUT/model-<layers>l, reused). Prints one JSON line per measurement and a table; writes OUT/results.json
(with the load average before and after every measurement, and the machine's CPU). --plot draws decode tok/s and
prefill time against context for every engine in a results file.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, "build", "bin")
SHAPE = {"hidden": 2048, "intermediate": 8192, "heads": 32, "kv_heads": 8, "head_dim": 64, "vocab": 32000}
MAX_POSITIONS = 32768


def log(message):
    print(message, file=sys.stderr, flush=True)


def make_model(out, layers):
    model = os.path.join(out, f"model-{layers}l")
    if not os.path.exists(os.path.join(model, "config.json")):
        log(f"writing the model to {model}")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "testing", "make_tiny_llama.py"), model,
                        "--dtype", "bf16", "--hidden-size", str(SHAPE["hidden"]),
                        "--intermediate-size", str(SHAPE["intermediate"]), "--num-layers", str(layers),
                        "--num-heads", str(SHAPE["heads"]), "--num-kv-heads", str(SHAPE["kv_heads"]),
                        "--head-dim", str(SHAPE["head_dim"]), "--vocab-size", str(SHAPE["vocab"]),
                        "--max-position-embeddings", str(MAX_POSITIONS)], check=True, stdout=subprocess.DEVNULL)
    gguf = os.path.join(out, f"model-{layers}l-f16.gguf")
    if not os.path.exists(gguf):
        log(f"converting to {gguf}")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "bench", "hf_to_gguf.py"), model, gguf,
                        "--type", "f16"], check=True, stdout=subprocess.DEVNULL)
    return model, gguf


def split_label(attention):
    """--attention LABEL=PATH or PATH: (label, path); (None, None) for the build's own plugin."""
    if attention is None:
        return None, None
    label, sep, path = attention.partition("=")
    return (label, path) if sep else (path, path)


def run_pagedllm(model, contexts, args, attention):
    label, attention = split_label(attention)
    tool = os.path.join(BIN, "llama_long_context")
    if not os.path.exists(tool):
        raise SystemExit(f"{tool} is missing: cmake --build build --target llama_long_context")
    cmd = ["nice", "-n", str(args.nice), tool, model, ",".join(map(str, contexts)), str(args.chunk),
           str(args.decode), str(args.threads)] + ([attention] if attention else [])
    log("running " + " ".join(cmd))
    proc = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    rows = []
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        row["engine"] = "pagedllm" if not attention else f"pagedllm ({label})"
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def attention_alone(contexts, args, attention, layers):
    """Median run() of one decode step at each context with the model's attention shape, through
    pagedllm-attn-bench; both of its sides are the same build, so the minimum of the two medians is kept."""
    tool = os.path.join(BIN, "pagedllm-attn-bench")
    if not os.path.exists(tool):
        log(f"{tool} is missing: no attention-alone times")
        return {}
    spec = (split_label(attention)[1] or "attention_cpu") + ":" + json.dumps({"num_threads": args.threads})
    out = os.path.join(args.out, "attn-bench.json")
    cmd = ["nice", "-n", str(args.nice), tool, "--a", spec, "--b", spec, "--workload", "decode", "--batch", "1",
           "--context", ",".join(map(str, contexts)), "--gqa", str(SHAPE["heads"] // SHAPE["kv_heads"]),
           "--head-dim", str(SHAPE["head_dim"]), "--kv-heads", str(SHAPE["kv_heads"]), "--block-size", "16",
           "--dtype", "bf16", "--reps", "10", "--json", out]
    log("running " + " ".join(cmd))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(out) as f:
        report = json.load(f)
    seconds = {}
    for case in report["cases"]:
        per_layer = min(case["a"]["time_ms_median"], case["b"]["time_ms_median"]) / 1e3
        seconds[case["context"]] = per_layer * layers
    return seconds


def run_llamacpp(gguf, contexts, args):
    try:
        from llama_cpp import Llama
    except ImportError as e:
        raise SystemExit(f"llama-cpp-python is not installed in {sys.executable} ({e}); use --skip-llamacpp")
    import llama_cpp
    import numpy as np
    from peers_llamacpp import time_prefill_and_decode  # this folder: the same timing as peers.sh's in-process run
    os.nice(args.nice)
    llm = Llama(gguf, n_threads=args.threads, n_threads_batch=args.threads, n_ctx=max(contexts) + args.decode + 16,
                n_batch=args.chunk, verbose=False)
    rng = np.random.default_rng(1)
    rows = []
    for context in contexts:
        prompt = rng.integers(16, llm.n_vocab(), size=context).tolist()
        llm.reset()
        llm._ctx.kv_cache_clear()
        load_start = os.getloadavg()
        prefill_s, step_s = time_prefill_and_decode(llm, prompt, args.decode)
        row = {"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__}, f16 GGUF, f16 KV)",
               "context": context, "chunk": args.chunk, "prefill_s": round(prefill_s, 4),
               "prefill_tok_s": round(context / prefill_s, 2), "decode_steps": args.decode,
               "decode_tok_s": round(1.0 / step_s, 3), "threads": args.threads,
               "load_average_start": [round(x, 2) for x in load_start],
               "load_average_end": [round(x, 2) for x in os.getloadavg()]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def print_table(rows):
    print(f"{'engine':<60} {'context':>7} {'prefill s':>9} {'prefill tok/s':>13} {'decode tok/s':>12} "
          f"{'attn ms/step':>12} {'attn share':>10} load")
    for r in rows:
        attn = r.get("attention_decode_s")
        share = f"{100 * attn * r['decode_tok_s']:.1f} %" if attn else "-"
        attn_ms = f"{attn * 1e3:.2f}" if attn else "-"
        print(f"{r['engine'][:60]:<60} {r['context']:>7} {r['prefill_s']:>9.2f} {r['prefill_tok_s']:>13.1f} "
              f"{r['decode_tok_s']:>12.2f} {attn_ms:>12} {share:>10} "
              f"{r['load_average_start'][0]:.1f}->{r['load_average_end'][0]:.1f}")


def plot(results_path, png):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    with open(results_path) as f:
        results = json.load(f)
    engines = []
    for r in results["rows"]:
        if r["engine"] not in engines:
            engines.append(r["engine"])
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for engine in engines:
        rows = sorted((r for r in results["rows"] if r["engine"] == engine), key=lambda r: r["context"])
        label = results.get("labels", {}).get(engine, engine)
        x = [r["context"] for r in rows]
        left.plot(x, [r["decode_tok_s"] for r in rows], marker="o", label=label)
        right.plot(x, [r["prefill_s"] for r in rows], marker="o", label=label)
    for ax, title, ylabel in ((left, "decode after a prompt of that length", "decode tokens/s (median step)"),
                              (right, "prefill of the prompt", "prefill seconds")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    right.set_yscale("log")
    left.legend(fontsize=8)
    load = results.get("load_average", "")
    fig.suptitle(f"{results['model']}, {results['threads']} threads each; load average {load}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    log(f"wrote {png}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="1024,4096,8192,16384")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=2048, help="prefill tokens per step / llama.cpp's n_batch")
    ap.add_argument("--decode", type=int, default=32, help="decode steps timed after each prompt")
    ap.add_argument("--attention", action="append", default=[],
                    help="[LABEL=]PATH: a further attention_cpu.so (another build) to run pagedllm with; "
                         "repeatable")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument("--nice", type=int, default=10, help="niceness of every measured process")
    ap.add_argument("--out", default=os.path.join(ROOT, "build-peers", "long-context"))
    ap.add_argument("--plot", metavar="RESULTS.json", help="only plot a results file")
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "long-context.png"))
    args = ap.parse_args()
    if args.plot:
        plot(args.plot, args.png)
        return
    contexts = [int(c) for c in args.contexts.split(",")]
    if max(contexts) + args.decode > MAX_POSITIONS:
        raise SystemExit(f"--contexts: the longest context plus --decode exceeds the model's {MAX_POSITIONS} positions")
    os.makedirs(args.out, exist_ok=True)
    model, gguf = make_model(args.out, args.layers)
    results = {"model": f"random Llama-3.2-1B-shape, {args.layers} layers, bf16 (llama.cpp: f16 GGUF)",
               "threads": args.threads, "chunk": args.chunk, "decode_steps": args.decode,
               "cpu": platform.processor() or platform.machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                                                         time.gmtime()),
               "rows": []}
    for attention in [None] + args.attention:
        rows = run_pagedllm(model, contexts, args, attention)
        alone = attention_alone(contexts, args, attention, args.layers)
        for r in rows:
            if r["context"] in alone:
                r["attention_decode_s"] = alone[r["context"]]
        results["rows"] += rows
    if not args.skip_llamacpp:
        results["rows"] += run_llamacpp(gguf, contexts, args)
    results["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    loads = [x for r in results["rows"] for x in (r["load_average_start"][0], r["load_average_end"][0])]
    results["load_average"] = f"{min(loads):.1f}-{max(loads):.1f}"
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=1)
    print_table(results["rows"])
    log(f"wrote {path}")


if __name__ == "__main__":
    main()
