#!/usr/bin/env bash
# Runs the JavaScript API tests (the official openai client) against a real
# pagedllm-host serving a tiny random Llama. Used by ctest (pagedllm_js_api).
# Usage: tests/js/run_js_tests.sh HOST_BINARY PLUGIN_DIR WORK_DIR
set -euo pipefail
host=$1 plugins=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ ! -d $here/node_modules/openai ]]; then
  echo "tests/js: the openai package is not installed; run scripts/setup.sh (it runs npm ci in tests/js)" >&2
  exit 1
fi

rm -rf "$work"
mkdir -p "$work"
/usr/bin/python3 "$repo/tools/testing/make_tiny_llama.py" --max-position-embeddings 16384 "$work/tiny" >/dev/null
cat > "$work/serve.yaml" <<YAML
model: {plugin: models_llama, path: tiny}
attention: {plugin: attention_cpu}
sampler: {plugin: sampler}
cache: {block_size: 16, kv_cache_bytes: 64MiB, enable_prefix_caching: true}
scheduler: {max_num_seqs: 64, max_num_batched_tokens: 2048}
server: {host: 127.0.0.1, port: 0, shutdown_grace_period_s: 10}
plugins: {search_paths: [$plugins]}
logging: {level: warn}
YAML

cd "$here"
PAGEDLLM_HOST=$host PAGEDLLM_CONFIG=$work/serve.yaml exec node --test api.test.js concurrency.test.js
