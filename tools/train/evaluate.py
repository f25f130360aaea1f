"""Evaluates the exported target (models/pagedllm-tiny): held-out loss / perplexity / bits
per byte on the pinned held-out split, and greedy completions of fixed prompts.

    scripts/python.sh tools/train/evaluate.py --model models/pagedllm-tiny --out build-train/eval.json

The weights are read from model.safetensors (bf16) and computed in fp32.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

PROMPTS = [
    "def fibonacci(n):",
    "import os\nimport sys\n\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "    def __repr__(self):",
    "# Read a JSON file and return its contents\ndef load_json(path):",
]


def heldout_loss(torch, model, stream, seq_len, batch=8):
    import torch.nn.functional as F
    nwin = (len(stream) - 1) // seq_len
    total, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, nwin, batch):
            x = torch.stack([stream[j * seq_len:j * seq_len + seq_len + 1] for j in range(i, min(nwin, i + batch))])
            logits = model(x[:, :-1])
            total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1),
                                     reduction="sum").item()
            count += x[:, 1:].numel()
    return total / count, count


def greedy(torch, model, ids, max_new, eos_ids):
    ids = list(ids)
    limit = model.config.max_position_embeddings
    with torch.no_grad():
        for _ in range(max_new):
            if len(ids) >= limit:
                break
            nxt = int(model(torch.tensor([ids]))[0, -1].argmax())
            ids.append(nxt)
            if nxt in eos_ids:
                break
    return ids


def sample(torch, model, ids, max_new, eos_ids, temperature, top_p, gen):
    """Temperature + nucleus sampling with a seeded generator (generation_config.json's defaults)."""
    ids = list(ids)
    limit = model.config.max_position_embeddings
    with torch.no_grad():
        for _ in range(max_new):
            if len(ids) >= limit:
                break
            probs = torch.softmax(model(torch.tensor([ids]))[0, -1] / temperature, dim=-1)
            sorted_p, order = probs.sort(descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < top_p
            sorted_p = sorted_p * keep
            nxt = int(order[torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=gen)])
            ids.append(nxt)
            if nxt in eos_ids:
                break
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, help="JSON file for the results")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--archive", default=None)
    ap.add_argument("--sample-seed", type=int, default=0, help="seed of the sampled completions")
    args = ap.parse_args()
    torch = common.set_threads(args.threads)
    import bpe
    import data
    import hf_load

    t0 = time.time()
    model, cfg = hf_load.load_target(args.model)
    enc = bpe.Encoder.from_file(os.path.join(args.model, "tokenizer.json"))
    archive = args.archive or data.corpus.DEFAULT_ARCHIVE
    _, held_ids, info = data.token_streams(os.path.join(args.model, "tokenizer.json"),
                                           os.path.join(os.path.dirname(os.path.abspath(args.out))), archive)
    held = torch.from_numpy(held_ids).long()
    results = {"model": args.model, "torch": torch.__version__, "heldout": {}}
    for seq_len in sorted({256, cfg.max_position_embeddings}):
        loss, n = heldout_loss(torch, model, held, seq_len)
        # bits per byte: total nats over the held-out tokens scored, per byte they cover
        # (approximately: the scored tokens are all but the first of each window).
        bpb = loss * n / math.log(2) / (info["heldout_bytes"] * n / (len(held) - 1))
        results["heldout"][str(seq_len)] = {"loss": round(loss, 4), "ppl": round(math.exp(loss), 3),
                                            "bits_per_byte": round(bpb, 4), "tokens": n}
        print(f"held-out, windows of {seq_len}: loss {loss:.4f}, ppl {math.exp(loss):.2f}, "
              f"{bpb:.3f} bits/byte over {n} tokens", flush=True)
    with open(os.path.join(args.model, "generation_config.json")) as f:
        eos = json.load(f)["eos_token_id"]
    eos = set(eos if isinstance(eos, list) else [eos])
    results["greedy"] = []
    for prompt in PROMPTS:
        ids = [cfg.bos_token_id] + enc.encode(prompt)
        out = greedy(torch, model, ids, args.max_new_tokens, eos)
        completion = enc.decode([i for i in out[len(ids):] if i not in eos])
        results["greedy"].append({"prompt": prompt, "prompt_ids": ids, "completion": completion,
                                  "completion_ids": out[len(ids):]})
        print(f"--- {prompt!r}\n{prompt}{completion}\n", flush=True)
    with open(os.path.join(args.model, "generation_config.json")) as f:
        gc = json.load(f)
    results["sampled"] = {"temperature": gc["temperature"], "top_p": gc["top_p"], "seed": args.sample_seed,
                          "completions": []}
    gen = torch.Generator().manual_seed(args.sample_seed)
    for prompt in PROMPTS:
        ids = [cfg.bos_token_id] + enc.encode(prompt)
        out = sample(torch, model, ids, args.max_new_tokens, eos, gc["temperature"], gc["top_p"], gen)
        completion = enc.decode([i for i in out[len(ids):] if i not in eos])
        results["sampled"]["completions"].append({"prompt": prompt, "completion": completion})
        print(f"--- sampled {prompt!r}\n{prompt}{completion}\n", flush=True)
    results["seconds"] = round(time.time() - t0, 1)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
