#!/usr/bin/env bash
# Sets up, builds and runs the main job with the default config. Until the
# engine and HTTP server land, the main job is --check: validate the config,
# load every plugin it names and print a summary.
# Usage: scripts/serve.sh [extra pagedllm-host arguments, e.g. --set key=value]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cmake -S . -B build -G Ninja >/dev/null
cmake --build build --parallel "$(nproc)"
exec build/bin/pagedllm-host --config configs/serve.yaml --check "$@"
