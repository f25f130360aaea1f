#!/usr/bin/env bash
# Sets up, builds and runs the main job: serving the default model
# (SmolLM2-135M-Instruct, a Q4_1 GGUF file scripts/setup.sh installs) on the CPU with
# configs/serve.yaml, an OpenAI-compatible API on http://127.0.0.1:8000 until Ctrl-C.
# Builds only what serving needs (pagedllm-host and the plugins configs/serve.yaml
# names); scripts/test.sh or `cmake --build build` builds the rest.
# Usage: scripts/serve.sh [extra pagedllm-host arguments, e.g. --set server.port=9000,
#                          or --prompt "The capital of France is" for one completion]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --serve-only
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build --parallel "$(nproc)" --target pagedllm-host models_llama attention_cpu sampler constraint_xgrammar
exec build/bin/pagedllm-host --config configs/serve.yaml "$@"
