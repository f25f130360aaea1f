#!/usr/bin/env bash
# The CUDA device tests at their GPU-sized shapes under the CUDA emulator
# (nightly-style: CI runs them at smaller shapes, tests/support/cuda_device.h
# emulated_small_shapes), then attention_cuda against attention_cpu through
# pagedllm-attn-bench on contexts of 4096 and 8192 (CI: 200 and 2100). Needs an
# emulated build (PAGEDLLM_CUDA_EMULATION=ON, the default). Hours on 2 cores.
# Usage: scripts/cuda_emulation_full.sh [build dir] [extra ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
PAGEDLLM_CUDA_EMULATION_FULL=1 ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" \
  -R 'test_(attention|models_llama|spec_eagle|speculative_greedy|engine)_cuda|test_cuda_emulation|attn_bench_cuda_emulated' \
  "$@"
# Randomized paged batches (permuted block tables, partly filled last blocks):
# every workload, GQA 1/4/8, head_dim 128, block sizes 16 and 32, f32 and bf16, split-K over
# 8 and 16 partitions. Exit status non-zero when any case is out of tolerance.
"$build/bin/pagedllm-attn-bench" --plugin-dir "$build/plugins" --a attention_cpu --b attention_cuda \
  --device-b cuda:0 --workload decode,mixed,prefill --context 4096,8192 --gqa 1,4,8 --head-dim 128 \
  --block-size 16,32 --dtype f32,bf16 --kv-heads 2 --batch 4 --chunk 64 --reps 1 --warmup 0
