#!/usr/bin/env bash
# Speculative decoding benchmark on the CPU: the embedded model served with its
# EAGLE-1 head (configs/eagle.yaml) and without (configs/serve.yaml), the same
# pagedllm-bench workload against each, at concurrency 1 and under load, in one
# run (this machine is noisy: compare ratios, not absolute numbers).
# Usage: tools/bench/spec_bench.sh [OUT_DIR] (default build/spec-bench)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/spec-bench}
mkdir -p "$out"

serve() {  # serve NAME CONFIG: starts a host on a free port, sets $url and $pid
  build/bin/pagedllm-host --config "$2" --set server.port=0 --set logging.level=warn >"$out/$1.log" 2>&1 &
  pid=$!
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$out/$1.log" | head -1 || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "spec_bench: $2 did not start:" >&2; cat "$out/$1.log" >&2; exit 1
}

for concurrency in 1 8; do
  requests=$((concurrency == 1 ? 8 : 48))
  for name in plain eagle; do
    config=configs/serve.yaml
    [[ $name == eagle ]] && config=configs/eagle.yaml
    serve "$name" "$config"
    echo "== $name, concurrency $concurrency ($requests requests, 64 prompt + 128 output tokens, greedy)"
    build/bin/pagedllm-bench --url "$url" --num-requests "$requests" --input-len 64 --output-len 128 \
      --concurrency "$concurrency" --seed 1 --json "$out/$name-c$concurrency.json" | tail -n +1
    curl -s "$url/metrics" | grep '^pagedllm:spec_decode' >"$out/$name-c$concurrency.metrics" || true
    kill -TERM "$pid"; wait "$pid" || true
  done
done
/usr/bin/python3 tools/bench/spec_bench_report.py "$out"
