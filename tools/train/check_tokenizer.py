"""Checks that pagedllm's C++ tokenizer encodes exactly like HF `tokenizers` (the reference;
transformers' AutoTokenizer for the special tokens it adds) and like the training tools'
encoder (bpe.Encoder) with a tokenizer written by train_tokenizer.py, and that all
round-trip.

    scripts/python.sh tools/train/check_tokenizer.py --tokenizer models/pagedllm-tiny \
        --bin build/bin/pagedllm-tokenize [--all]

Texts: the held-out files of the pinned corpus (--all: every file), plus edge cases.
With special tokens the C++ ids must be AutoTokenizer's (the post-processor's BOS); with
--no-special exactly HF's ids (special tokens in the text are text), which bpe.Encoder
must give too; --decode must give the text back, as HF's decode does. Exit status 0 when
everything matches.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import transformers  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

EDGE_CASES = [
    "", " ", "\n", "\n\n\n", "def fibonacci(n):", "    return x  \n\t\tpass\r\n",
    "I'm don't you'll we've they're", "x = 1_000_000 + 3.14e-10j",
    "héllo wörld — ünïcödé ÄÖÜ 你好 🙂🚀", "<|endoftext|> is text unless parsed",
    "a" * 300, " " * 40 + "x",
]


def run(binary, tokenizer, args, values):
    """One pagedllm-tokenize --jsonl process for all `values` (texts, or id lists with --decode)."""
    lines = "".join(json.dumps(v) + "\n" for v in values)
    proc = subprocess.run([binary, "--tokenizer", tokenizer, "--jsonl"] + args, input=lines.encode("utf-8"),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} {' '.join(args)} failed: {proc.stderr.decode()}")
    # Split on "\n" only: JSON leaves U+2028 and friends unescaped.
    return [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n")[:-1]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True, help="model directory or tokenizer.json")
    ap.add_argument("--bin", required=True, help="pagedllm-tokenize binary")
    ap.add_argument("--archive", default=corpus.DEFAULT_ARCHIVE)
    ap.add_argument("--all", action="store_true", help="every corpus file, not only the held-out ones")
    args = ap.parse_args()

    tj = args.tokenizer if args.tokenizer.endswith(".json") else os.path.join(args.tokenizer, "tokenizer.json")
    enc = bpe.Encoder.from_file(tj)
    hf = Tokenizer.from_file(tj)
    hf.encode_special_tokens = True
    auto = transformers.AutoTokenizer.from_pretrained(os.path.dirname(tj), local_files_only=True)
    auto.model_max_length = 1 << 30  # whole files, not model inputs: no length warning
    train, heldout, _ = corpus.load_corpus(args.archive)
    texts = [(f"edge case {i}", t) for i, t in enumerate(EDGE_CASES)] + heldout + (train if args.all else [])
    failures, tokens, nbytes = 0, 0, 0
    all_with_special = run(args.bin, args.tokenizer, [], [text for _, text in texts])
    all_plain = run(args.bin, args.tokenizer, ["--no-special"], [text for _, text in texts])
    all_decoded = run(args.bin, args.tokenizer, ["--decode"], all_plain)
    for (name, text), with_special, plain, decoded in zip(texts, all_with_special, all_plain, all_decoded):
        want = hf.encode(text, add_special_tokens=False).ids
        want_special = auto(text, split_special_tokens=True)["input_ids"]
        problems = []
        if plain != want:
            first = next((i for i, (a, b) in enumerate(zip(plain, want)) if a != b), min(len(plain), len(want)))
            problems.append(f"ids differ at {first} (C++ {plain[first:first + 5]}, HF {want[first:first + 5]})")
        if enc.encode(text) != want:
            problems.append("bpe.Encoder (the training tools' encoder) differs from HF")
        if with_special != want_special:
            problems.append(f"ids with special tokens differ from AutoTokenizer's ({with_special[:3]}... vs "
                            f"{want_special[:3]}...)")
        if decoded != text or hf.decode(want) != text or enc.decode(want) != text:
            problems.append("decode does not give the text back")
        if problems:
            failures += 1
            print(f"FAIL {name}: " + "; ".join(problems))
        tokens += len(want)
        nbytes += len(text.encode("utf-8"))
    print(f"{len(texts)} texts, {nbytes} bytes, {tokens} tokens ({nbytes / max(1, tokens):.3f} bytes/token): "
          f"{'all match' if not failures else f'{failures} FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
