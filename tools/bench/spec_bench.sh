#!/usr/bin/env bash
# Speculative decoding benchmark on the CPU: the embedded model with its EAGLE-1
# head (configs/eagle.yaml) and without (configs/tiny.yaml), in one run:
#   1. batch 1 through the one-shot CLI: 'def fibonacci(n):', 256 greedy tokens;
#   2. pagedllm-bench against a server of each, at concurrency 1, 8 and 64 (64 prompt
#      + 128 greedy output tokens), with two kinds of prompts: "random", tokens of
#      an English text drawn one by one (a context no model can continue well:
#      the worst case for drafting), and "code", windows of tools/train/train.py
#      (Python the embedded model was not trained on, read in order).
# This machine is noisy, so every configuration runs REPEATS times (default 3;
# the CLI, which is quick, 3 x REPEATS), plain and EAGLE interleaved (the order
# alternates between repeats), and the report takes medians: compare ratios,
# not absolute numbers.
# Usage: [REPEATS=N] [BIN=dir] [EAGLE_SET="key=value ..."] tools/bench/spec_bench.sh [OUT_DIR]
#   (default OUT_DIR build/spec-bench); EAGLE_SET overrides configs/eagle.yaml's keys for the
#   EAGLE runs, e.g. EAGLE_SET="speculative.num_speculative_tokens=2".
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-build/bin}  # where pagedllm-host and pagedllm-bench are
out=${1:-build/spec-bench}
repeats=${REPEATS:-3}
mkdir -p "$out"
rm -f "$out"/cli-*.txt "$out"/plain-*-c*-r*.* "$out"/eagle-*-c*-r*.*

order() {  # order REPEAT: the two configurations, their order alternating
  if ((${1} % 2 == 0)); then echo "eagle plain"; else echo "plain eagle"; fi
}
config_of() { if [[ $1 == eagle ]]; then echo configs/eagle.yaml; else echo configs/tiny.yaml; fi; }
eagle_set=()
for setting in ${EAGLE_SET:-}; do eagle_set+=(--set "$setting"); done
overrides_of() { if [[ $1 == eagle ]]; then echo "${eagle_set[@]}"; fi; }

pid=
trap 'if [[ -n $pid ]]; then kill -TERM "$pid" 2>/dev/null || true; fi' EXIT  # no server outlives a failed run

serve() {  # serve NAME CONFIG: starts a host on a free port, sets $url and $pid
  # The log goes first: the shell truncates it only once the child runs, and
  # the previous server's address must not be read in between.
  rm -f "$out/$1.log"
  # shellcheck disable=SC2046 # the overrides are words
  "$bin/pagedllm-host" --config "$2" $(overrides_of "$1") --set server.port=0 --set logging.level=warn \
    >"$out/$1.log" 2>&1 &
  pid=$!
  url=
  for _ in $(seq 600); do
    url=$(grep -o 'http://[0-9.:]*' "$out/$1.log" 2>/dev/null | head -1 || true)
    [[ -n $url ]] && return
    sleep 0.1
  done
  echo "spec_bench: $2 did not start:" >&2; cat "$out/$1.log" >&2; exit 1
}

for repeat in $(seq $((3 * repeats))); do
  for name in $(order "$repeat"); do
    # shellcheck disable=SC2046 # the overrides are words
    "$bin/pagedllm-host" --config "$(config_of "$name")" $(overrides_of "$name") --set logging.level=warn \
      --prompt 'def fibonacci(n):' \
      --max-tokens 256 --temperature 0 >"$out/cli-$name-r$repeat.out" 2>"$out/cli-$name-r$repeat.txt"
    echo "== CLI $name, repeat $repeat: $(grep -o 'then [0-9.]* tok/s' "$out/cli-$name-r$repeat.txt")"
  done
done

prompts_of() { if [[ $1 == code ]]; then echo --prompt-file tools/train/train.py; fi; }
for workload in random code; do
  for concurrency in 1 8 64; do
    requests=$((concurrency == 1 ? 8 : concurrency == 8 ? 48 : 128))
    for repeat in $(seq "$repeats"); do
      for name in $(order "$repeat"); do
        serve "$name" "$(config_of "$name")"
        run="$name-$workload-c$concurrency-r$repeat"
        echo "== $name, $workload prompts, concurrency $concurrency, repeat $repeat ($requests requests, 64 prompt + 128 output tokens, greedy)"
        # shellcheck disable=SC2046 # the options are words
        "$bin/pagedllm-bench" --url "$url" --num-requests "$requests" --input-len 64 --output-len 128 \
          --concurrency "$concurrency" --seed 1 $(prompts_of "$workload") --json "$out/$run.json" | tail -n +1
        curl -s "$url/metrics" | grep '^pagedllm:spec_decode' >"$out/$run.metrics" || true
        kill -TERM "$pid"; wait "$pid" || true
      done
    done
  done
done
scripts/python.sh tools/bench/spec_bench_report.py "$out"
