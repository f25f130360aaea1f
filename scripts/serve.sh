#!/usr/bin/env bash
# Sets up, builds and runs the main job: serving the embedded model
# (models/pagedllm-tiny) on the CPU with configs/serve.yaml, an OpenAI-compatible
# API on http://127.0.0.1:8000 until Ctrl-C.
# Usage: scripts/serve.sh [extra pagedllm-host arguments, e.g. --set server.port=9000,
#                          or --prompt "def fibonacci(n):" for one completion]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja >/dev/null
cmake --build build --parallel "$(nproc)"
exec build/bin/pagedllm-host --config configs/serve.yaml "$@"
