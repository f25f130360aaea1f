#!/bin/sh
# Reproduces models/pagedllm-tiny and models/pagedllm-tiny-eagle from the pinned corpus,
# plus the numbers and plots in docs/training.md. Run from the repository root:
#
#   tools/train/run_all.sh                        # CPU, one thread (as committed)
#   DEVICE=cuda THREADS=8 TRAIN_ARGS="--hidden 384 ..." tools/train/run_all.sh
#                                                 # GPU machine (see docs/training.md)
#
# Every step is deterministic for a given machine and torch version (seeds: train.py 1234,
# train_eagle.py 4321; the tokenizer has no randomness). Intermediate files go to $WORK;
# train.py and train_eagle.py resume from their checkpoints there when rerun.
set -eu

PY=${PY:-.venv/bin/python}   # the project's Python (scripts/setup.sh)
DEVICE=${DEVICE:-cpu}
THREADS=${THREADS:-1}
WORK=${WORK:-build-train}
MODEL=${MODEL:-models/pagedllm-tiny}
EAGLE=${EAGLE:-models/pagedllm-tiny-eagle}
DOCS=${DOCS:-docs/training}
TRAIN_ARGS=${TRAIN_ARGS:-}   # extra flags for train.py (model size, steps, ...); none = as committed
EAGLE_ARGS=${EAGLE_ARGS:-}   # extra flags for train_eagle.py

# 0. The corpus archive is committed; on a Debian 12 machine it can be rebuilt and compared
#    (elsewhere /usr/lib/python3.11 differs, and the committed archive is what counts).
if [ -d /usr/lib/python3.11 ] && [ "${CHECK_CORPUS:-1}" = 1 ]; then
  "$PY" tools/train/build_corpus.py --check || echo "note: this machine's stdlib differs from the pinned corpus; using the committed archive"
fi

# 1. Tokenizer (byte-level BPE, 8192 tokens), a few seconds.
"$PY" tools/train/train_tokenizer.py --out "$WORK/tokenizer"

# 2. Target model: 1300 steps x 4096 tokens (5.3M tokens, ~2.3 epochs).
"$PY" tools/train/train.py --tokenizer "$WORK/tokenizer" --out "$WORK/target" \
  --device "$DEVICE" --threads "$THREADS" $TRAIN_ARGS
"$PY" tools/train/export_hf.py --ckpt "$WORK/target/final.pt" --tokenizer "$WORK/tokenizer" --out "$MODEL"
"$PY" tools/train/evaluate.py --model "$MODEL" --out "$WORK/eval.json" --threads "$THREADS"

# 3. EAGLE-1 head on the exported target's features, then its offline acceptance.
"$PY" tools/train/train_eagle.py --target "$MODEL" --out "$WORK/eagle" --export "$EAGLE" \
  --device "$DEVICE" --threads "$THREADS" $EAGLE_ARGS
# The tokens by corpus frequency, for spec_eagle's draft_vocab_size (the draft's reduced lm_head).
"$PY" tools/train/draft_vocab.py --target "$MODEL" --out "$EAGLE" --cache "$WORK/target"

# 4. Plots and the logs/results that docs/training.md quotes.
mkdir -p "$DOCS"
"$PY" tools/train/plot_curves.py --target "$WORK/target/log.jsonl" --eagle "$WORK/eagle/log.jsonl" --out "$DOCS"
cp "$WORK/target/log.jsonl" "$DOCS/target-log.jsonl"
cp "$WORK/eagle/log.jsonl" "$DOCS/eagle-log.jsonl"
cp "$WORK/eval.json" "$DOCS/eval.json"
cp "$WORK/eagle/acceptance.json" "$DOCS/eagle-acceptance.json"
cp "$WORK/tokenizer/tokenizer_stats.json" "$DOCS/tokenizer-stats.json"

# 5. The C++ tokenizer must encode exactly like the Python encoder (needs a build).
if [ -x build/bin/pagedllm-tokenize ]; then
  "$PY" tools/train/check_tokenizer.py --tokenizer "$MODEL" --bin build/bin/pagedllm-tokenize
fi
du -sh models
