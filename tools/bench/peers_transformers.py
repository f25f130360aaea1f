"""HF transformers (LlamaForCausalLM, eager, in process) on one stream: prefill P tokens with a KV cache, then D
greedy decode steps; prints and writes tokens/s. Run by tools/bench/peers.sh in its own venv.

    peers_transformers.py MODEL_DIR [--dtype bf16|f32] [--threads 2] [--prefill 512] [--decode 128] [--output F]
"""
import argparse
import json
import os
import time

import torch
from transformers import LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--output")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(16, model.config.vocab_size, (1, args.prefill), generator=gen)
    load_start = os.getloadavg()
    with torch.inference_mode():
        start = time.perf_counter()
        out = model(prompt, use_cache=True, logits_to_keep=1)
        prefill_s = time.perf_counter() - start
        past, steps = out.past_key_values, []
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        for _ in range(args.decode):
            start = time.perf_counter()
            out = model(token, past_key_values=past, use_cache=True)
            steps.append(time.perf_counter() - start)
            past, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
    steps.sort()
    result = {"engine": f"transformers {__import__('transformers').__version__} eager {args.dtype}",
              "model": args.model, "threads": args.threads, "prefill_tokens": args.prefill,
              "prefill_tok_s": args.prefill / prefill_s, "decode_steps": args.decode,
              "decode_tok_s": 1.0 / steps[len(steps) // 2], "load_average_start": load_start,
              "load_average_end": os.getloadavg()}
    print(json.dumps(result))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
