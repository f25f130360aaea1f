"""Encodes and decodes a large mixed corpus with pagedllm-tokenize and with HF `tokenizers`
on every fixture in tests/fixtures/tokenizer/, and fails on the first difference.

    .venv/bin/python tools/tokenizer_fixtures/compare_large_corpus.py --bin build/bin/pagedllm-tokenize

The corpus (regenerated at run time, seeded): a sample of the Python standard library's
files (code), and word salads of prose in Latin, Cyrillic, Greek, CJK, Arabic, Hebrew and
Indic scripts, emoji with ZWJ sequences, numbers and whitespace runs, and random code
points (corpus.py). It is far larger than the committed expectations (texts.json), which
keeps the repository small. Each piece of the corpus is encoded separately (pagedllm reads
them as JSON lines: --jsonl), with special tokens as text (HF: encode_special_tokens=True),
then the ids are decoded back with both.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

from tokenizers import Tokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import make_fixtures  # noqa: E402


def large_corpus(stride, mixes):
    rng = random.Random(20251125)
    root = corpus.stdlib_dir()
    files = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in ("site-packages", "test", "tests", "idlelib"))
        files.extend(os.path.join(directory, n) for n in sorted(names) if n.endswith(".py"))
    texts = []
    for path in sorted(files)[::stride]:
        with open(path, encoding="utf-8", errors="strict") as f:
            try:
                texts.append(f.read())
            except UnicodeDecodeError:
                continue
    texts += corpus.random_mix(rng, corpus.words(), mixes) + corpus.random_codepoints(rng, mixes // 4)
    texts += corpus.PROSE + corpus.CODE + corpus.EDGE_CASES
    return texts


def run(binary, tokenizer_dir, args, lines):
    proc = subprocess.run([binary, "--tokenizer", tokenizer_dir, "--jsonl"] + args, input="".join(lines).encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{binary} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()[:2000]}")
    # Split on "\n" only: JSON leaves U+2028 and friends unescaped, and splitlines() splits there.
    return [json.loads(line) for line in proc.stdout.decode("utf-8").split("\n")[:-1]]


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="pagedllm-tokenize")
    ap.add_argument("--stride", type=int, default=6, help="every N-th standard library file")
    ap.add_argument("--mixes", type=int, default=3000, help="random mixed-script texts")
    args = ap.parse_args()

    texts = large_corpus(args.stride, args.mixes)
    size = sum(len(t.encode("utf-8")) for t in texts)
    failures = 0
    for name in make_fixtures.FIXTURES:
        start = time.monotonic()
        directory = os.path.join(make_fixtures.OUT, name)
        hf = Tokenizer.from_file(os.path.join(directory, "tokenizer.json"))
        hf.encode_special_tokens = True
        want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
        got = run(args.bin, directory, ["--no-special"], [json.dumps(t) + "\n" for t in texts])
        problems = []
        for text, w, g in zip(texts, want, got):
            if w != g:
                at = first_difference(w, g)
                problems.append(f"encode {text[:80]!r}...: ids differ at {at}: "
                                f"HF {w[at:at + 6]}, pagedllm {g[at:at + 6]}")
        want_text = hf.decode_batch(want, skip_special_tokens=False)
        got_text = run(args.bin, directory, ["--decode"], [json.dumps(w) + "\n" for w in want])
        for ids, w, g in zip(want, want_text, got_text):
            if w != g:
                at = first_difference(w, g)
                problems.append(f"decode {ids[:12]}...: text differs at char {at}: HF {w[at:at + 20]!r}, "
                                f"pagedllm {g[at:at + 20]!r}")
        tokens = sum(len(w) for w in want)
        print(f"{name}: {len(texts)} texts, {size / 1e6:.2f} MB, {tokens} tokens: "
              f"{'equal to HF' if not problems else f'{len(problems)} DIFFER'} ({time.monotonic() - start:.1f} s)")
        for problem in problems[:10]:
            print("  " + problem)
        failures += len(problems)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
