"""Ranks the vocabulary by frequency in the training corpus, for spec_eagle's draft vocabulary.

Writes <draft>/draft_vocab.json: "token_ids" (every token id, most frequent in the training
split first; ties by id) and their "counts", plus the corpus and tokenizer digests it was counted
on. spec_eagle's `draft_vocab_size: N` option drafts over the first N (plugins/spec_eagle/
draft_vocab.h). Prints how much of the training and held-out text the top N cover.

    scripts/python.sh tools/train/draft_vocab.py --target models/pagedllm-tiny \\
        --out models/pagedllm-tiny-eagle [--cache build-train/target]
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True, help="the target model directory (its tokenizer.json)")
    ap.add_argument("--out", required=True, help="the draft directory to write draft_vocab.json into")
    ap.add_argument("--cache", default="build-train/target", help="where the corpus encoding is cached")
    args = ap.parse_args()

    with open(os.path.join(args.target, "config.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    train, heldout, info = data.token_streams(os.path.join(args.target, "tokenizer.json"), args.cache)
    counts = np.bincount(train, minlength=vocab_size)
    if len(counts) != vocab_size:
        sys.exit(f"draft_vocab: the corpus has token ids >= vocab_size {vocab_size}")
    order = np.lexsort((np.arange(vocab_size), -counts))  # most frequent first, ties by id
    held_counts = np.bincount(heldout, minlength=vocab_size)
    for n in (256, 512, 1024, 2048, 4096):
        top = order[:n]
        print(f"top {n:5d}: {counts[top].sum() / counts.sum():.4f} of training tokens, "
              f"{held_counts[top].sum() / held_counts.sum():.4f} of held-out tokens")
    out = {
        "description": "token ids by descending frequency in the training split (ties by id), "
                       "for spec_eagle's draft_vocab_size; written by tools/train/draft_vocab.py",
        "corpus_sha256": info["corpus_sha256"],
        "tokenizer_sha256": info["tokenizer_sha256"],
        "train_tokens": int(counts.sum()),
        "token_ids": [int(t) for t in order],
        "counts": [int(counts[t]) for t in order],
    }
    path = os.path.join(args.out, "draft_vocab.json")
    with open(path, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
