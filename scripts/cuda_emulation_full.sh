#!/usr/bin/env bash
# The CUDA device tests at their GPU-sized shapes under the CUDA emulator
# (nightly-style: CI runs them at smaller shapes, tests/support/cuda_device.h
# emulated_small_shapes). Needs an emulated build (PAGEDLLM_CUDA_EMULATION=ON,
# the default). Usage: scripts/cuda_emulation_full.sh [build dir] [extra ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
PAGEDLLM_CUDA_EMULATION_FULL=1 ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)" \
  -R 'test_attention_cuda|test_models_llama_cuda|test_spec_eagle_cuda|test_speculative_greedy_cuda|test_cuda_emulation' "$@"
