"""llama.cpp (through llama-cpp-python, in process) on one stream: prefill P tokens, then D greedy decode steps;
prints and writes tokens/s. Run by tools/bench/peers.sh in its own venv.

    peers_llamacpp.py MODEL.gguf [--threads 2] [--prefill 512] [--decode 128] [--output result.json]

The prompt is P token ids drawn from the vocabulary with a fixed seed (the same rule for every engine is not
needed: the cost of a step does not depend on which tokens it sees). Prefill is one llama_decode of P tokens
(n_batch = P); decode feeds one token per step (the prompt's again: a step costs the same whichever token it
sees), each timed, and the median step gives tokens/s.
"""
import argparse
import json
import os
import time

import numpy as np
from llama_cpp import Llama


def time_prefill_and_decode(llm, prompt, decode):
    """Seconds of one eval of the whole prompt, then the median seconds of `decode` one-token steps after it (the
    prompt's tokens again: a step costs the same whichever token it sees). Also long_context_bench.py's."""
    start = time.perf_counter()
    llm.eval(prompt)
    prefill_s = time.perf_counter() - start
    steps = []
    for token in prompt[:decode]:
        start = time.perf_counter()
        llm.eval([token])
        steps.append(time.perf_counter() - start)
    return prefill_s, float(np.median(steps))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--output")
    args = ap.parse_args()
    llm = Llama(args.model, n_threads=args.threads, n_threads_batch=args.threads,
                n_ctx=args.prefill + args.decode + 16, n_batch=args.prefill, n_ubatch=args.prefill, verbose=False)
    rng = np.random.default_rng(1)
    prompt = rng.integers(16, llm.n_vocab(), size=args.prefill).tolist()
    load_start = os.getloadavg()
    prefill_s, step_s = time_prefill_and_decode(llm, prompt, args.decode)
    result = {"engine": "llama.cpp (llama-cpp-python 0.3.36, in process)", "model": args.model,
              "threads": args.threads, "prefill_tokens": args.prefill, "prefill_tok_s": args.prefill / prefill_s,
              "decode_steps": args.decode, "decode_tok_s": 1.0 / step_s,
              "load_average_start": load_start, "load_average_end": os.getloadavg()}
    print(json.dumps(result))
    if args.output:
        with open(args.output, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
