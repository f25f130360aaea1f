"""Accuracy next to speed of models_llama's weight precisions (issue 19): f32, bf16 and the int8 modes
(model.options.quantization) on the embedded model.

    cmake --build build --target llama_quant_eval models_llama attention_cpu
    /work/main/.venv/bin/python tools/bench/quant_accuracy.py [--windows 16] [--speed-model DIR]

For each variant, build/bin/llama_quant_eval prefills the same windows of the pinned held-out split
(tools/train/corpus: the Python stdlib files never trained on, tokenized as tools/train/data.py does:
<|endoftext|> before each file) and returns every position's logits, then times greedy decode of one
stream. Against the f32 variant (the checkpoint's bf16 weights widened exactly) this reports the logit
deviation (max and mean |delta| over every position and vocabulary entry), top-1 agreement (argmax
equal) and the held-out perplexity of each (next-token cross entropy over every window position but
the last), with decode tok/s measured in the same run. --speed-model adds prefill tok/s (the same
windows) and decode tok/s on a larger model (no accuracy: random weights), e.g. one made by
tools/testing/make_tiny_llama.py.

bf16_exact is bf16 with model.options.cpu_bf16_compute: exact (f32 activations in every product),
where plain bf16 on a CPU with AVX512-BF16 multiplies bf16-rounded activations on vdpbf16ps. --chunk N
prefills each window N tokens a step: with N <= 16 every product runs on the few-row kernels (those
of batched decode), where the default whole window runs the GEMMs (prefill).
A variant NAME@LEVEL runs NAME with PAGEDLLM_CPU_ISA=LEVEL (llama_cpu/cpu_isa.h): bf16@avx512vnni
is the exact path too, by capping the instruction set. A variant
ct-SCHEME/NAME runs NAME on a compressed-tensors int8 checkpoint of the model (and of the speed
model), made once per run by tools/testing/make_compressed_int8_checkpoint.py --scheme SCHEME
(W8A8 or W8A16, lm_head left unquantized as llm-compressor's examples do): ct-W8A8/auto is that
checkpoint as models_llama loads it by default (its int8 matrices as stored, W8A8 on VNNI); a
SCHEME+lm_head (ct-W8A8+lm_head/auto) quantizes lm_head too, as quantization: int8 does at load.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import bpe  # noqa: E402
import corpus  # noqa: E402

VARIANTS = ["f32", "bf16", "bf16_exact", "int8_w8a8", "int8_weight_only"]


def heldout_windows(model_dir, windows, length):
    _, heldout, _ = corpus.load_corpus()
    enc = bpe.Encoder.from_file(os.path.join(model_dir, "tokenizer.json"))
    eot = enc.specials["<|endoftext|>"]
    ids = []
    for _, text in heldout:
        ids.append(eot)
        ids.extend(enc.encode(text))
        if len(ids) >= windows * length:
            break
    if len(ids) < windows * length:
        raise SystemExit(f"the held-out split has {len(ids)} tokens, fewer than {windows} x {length}")
    return np.asarray(ids[:windows * length], dtype=np.int32).reshape(windows, length)


def compressed_model(model_dir, scheme, tmp, made):
    """The compressed-tensors `scheme` checkpoint of model_dir, made into tmp on first use."""
    key = (model_dir, scheme)
    if key not in made:
        out = os.path.join(tmp, f"ct-{len(made)}")
        base, _, with_lm_head = scheme.partition("+")
        subprocess.run([sys.executable, os.path.join(ROOT, "tools", "testing", "make_compressed_int8_checkpoint.py"),
                        model_dir, out, "--scheme", base] + (["--ignore"] if with_lm_head else []),
                       check=True, capture_output=True)
        made[key] = out
    return made[key]


def run_variant(build, model_dir, variant, tokens_file, logits_file, decode_steps, threads, tmp=None, made=None,
                chunk=0):
    if variant.startswith("ct-"):
        scheme, _, variant = variant[len("ct-"):].partition("/")
        model_dir = compressed_model(model_dir, scheme, tmp, made)
    name, _, level = variant.partition("@")
    env = dict(os.environ)
    if level:
        env["PAGEDLLM_CPU_ISA"] = level
    cmd = [os.path.join(build, "bin", "llama_quant_eval"), model_dir, name, tokens_file, logits_file,
           str(decode_steps), str(threads), str(chunk)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "pagedllm-tiny"))
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--decode-steps", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="model and attention threads (0: one per core)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="prefill each window this many tokens a step (0: the whole window in one step)")
    ap.add_argument("--variants", nargs="+", default=VARIANTS)
    ap.add_argument("--speed-model", help="a larger model directory for decode tok/s only")
    ap.add_argument("--output", help="write the results as JSON here")
    args = ap.parse_args()
    if args.variants[0] != "f32":
        raise SystemExit("the first variant must be f32 (the reference)")

    tokens = heldout_windows(args.model, args.windows, args.length)
    results = {"model": args.model, "windows": args.windows, "length": args.length, "chunk": args.chunk,
               "load_average_start": os.getloadavg(), "variants": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tokens_file = os.path.join(tmp, "tokens.bin")
        with open(tokens_file, "wb") as f:
            np.asarray(tokens.shape, dtype=np.int32).tofile(f)
            tokens.tofile(f)
        empty_file = os.path.join(tmp, "empty.bin")
        np.asarray([0, 1], dtype=np.int32).tofile(empty_file)
        reference = None
        made = {}
        for variant in args.variants:
            logits_file = os.path.join(tmp, "logits.f32")
            run = run_variant(args.build, args.model, variant, tokens_file, logits_file, 0, args.threads, tmp, made,
                              args.chunk)
            # Decode alone in a process of its own (after the windows, its cache and the machine differ).
            decode = run_variant(args.build, args.model, variant, empty_file, os.devnull, args.decode_steps,
                                 args.threads, tmp, made)
            logits = np.fromfile(logits_file, dtype=np.float32).reshape(args.windows, args.length, run["vocab"])
            os.remove(logits_file)
            logp = log_softmax(logits[:, :-1])
            nll = -np.take_along_axis(logp, tokens[:, 1:, None].astype(np.int64), axis=-1).mean()
            entry = {"perplexity": float(np.exp(nll)), "decode_tok_s": decode["decode_tok_s"],
                     "prefill_tok_s": run["prefill_tok_s"]}
            if reference is None:
                reference = logits
            else:
                delta = np.abs(logits.astype(np.float64) - reference)
                entry["max_abs_logit_delta"] = float(delta.max())
                entry["mean_abs_logit_delta"] = float(delta.mean())
                entry["top1_agreement"] = float((logits.argmax(-1) == reference.argmax(-1)).mean())
            if args.speed_model:
                speed = run_variant(args.build, args.speed_model, variant, tokens_file, os.devnull,
                                    args.decode_steps, args.threads, tmp, made)
                entry["speed_model_prefill_tok_s"] = speed["prefill_tok_s"]
                entry["speed_model_decode_tok_s"] = speed["decode_tok_s"]
            results["variants"][variant] = entry
            print(variant, json.dumps(entry), flush=True)
    results["load_average_end"] = os.getloadavg()
    print(f"load average {results['load_average_start']} -> {results['load_average_end']}")
    print(f"| variant | perplexity | max abs logit delta | mean abs delta | top-1 agreement | decode tok/s |"
          + (" speed model prefill tok/s | speed model decode tok/s |" if args.speed_model else ""))
    for name, e in results["variants"].items():
        row = (f"| {name} | {e['perplexity']:.3f} | {e.get('max_abs_logit_delta', 0):.4f} | "
               f"{e.get('mean_abs_logit_delta', 0):.5f} | {100 * e.get('top1_agreement', 1):.2f} % | "
               f"{e['decode_tok_s']:.1f} |")
        if args.speed_model:
            row += f" {e['speed_model_prefill_tok_s']:.1f} | {e['speed_model_decode_tok_s']:.2f} |"
        print(row)
    if args.output:
        with open(args.output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
