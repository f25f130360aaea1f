#!/usr/bin/env bash
# EAGLE under tensor parallelism on the CPU (docs/tensor-parallel.md): the embedded model at batch 1
# through the one-shot CLI ('def fibonacci(n):', TOKENS greedy tokens), four configurations in one
# run — TP = 1 and TP = 2 (mpirun -np 2), each without EAGLE (configs/tiny.yaml) and with it
# (configs/eagle.yaml: K = 3, a 1024-token draft vocabulary) — with the same CPU threads in all
# (THREADS, default 2: one rank of 2 threads, or two ranks of 1). The configurations run
# interleaved, REPEATS times (default 5), and the report gives each one's median decode tokens/s
# and mean acceptance length, and the ratios against TP = 1 without EAGLE measured in the same run:
# compare ratios, not absolute numbers, and run it on a quiet machine (it prints the load average).
# Usage: [REPEATS=N] [TOKENS=N] [THREADS=N] [BIN=dir] [MPIRUN="mpirun ..."] tools/bench/tp_eagle_bench.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${BIN:-build/bin}
repeats=${REPEATS:-5}
tokens=${TOKENS:-256}
threads=${THREADS:-2}
read -r -a mpirun <<<"${MPIRUN:-mpirun --oversubscribe --allow-run-as-root}"
if ((threads < 2 || threads % 2 != 0)); then
  echo "THREADS must be even and at least 2 (two ranks of THREADS/2), got $threads" >&2
  exit 2
fi
configs=(tp1-plain tp1-eagle tp2-plain tp2-eagle)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

run() {  # run CONFIG: prints "<decode tok/s> <acceptance length or ->"
  local config=configs/tiny.yaml tp=1 per_rank=$threads
  if [[ $1 == *eagle ]]; then config=configs/eagle.yaml; fi
  if [[ $1 == tp2-* ]]; then tp=2 per_rank=$((threads / 2)); fi
  local command=("$bin/pagedllm-host" --config "$config" --set "model.options.num_threads=$per_rank"
    --prompt "def fibonacci(n):" --temperature 0 --max-tokens "$tokens" --ignore-eos)
  if [[ $1 == *eagle ]]; then command+=(--set "speculative.options.num_threads=$per_rank"); fi
  if ((tp > 1)); then command=("${mpirun[@]}" -np 2 "${command[@]}" --set parallel.tensor_parallel_size=2); fi
  "${command[@]}" >/dev/null 2>"$tmp/stderr" || { cat "$tmp/stderr" >&2; exit 1; }
  local rate length
  rate=$(grep -o 'then [0-9.]* tok/s' "$tmp/stderr" | awk '{print $2}')
  length=$(grep -o 'mean acceptance length [0-9.]*' "$tmp/stderr" | awk '{print $4}' || true)  # none without EAGLE
  echo "$rate ${length:--}"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $threads threads per configuration"
for ((r = 0; r < repeats; ++r)); do
  # The order rotates, so that no configuration always follows the same one.
  for ((i = 0; i < 4; ++i)); do
    name=${configs[$(((i + r) % 4))]}
    run "$name" >>"$tmp/$name"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
baseline=$(cut -d' ' -f1 "$tmp/tp1-plain" | median)
printf '%-10s %22s %10s %26s\n' config "median decode tok/s" ratio "mean acceptance length"
for name in "${configs[@]}"; do
  rate=$(cut -d' ' -f1 "$tmp/$name" | median)
  length=$(cut -d' ' -f2 "$tmp/$name" | head -1)
  printf '%-10s %22.1f %9.2fx %26s\n' "$name" "$rate" "$(echo "$rate $baseline" | awk '{print $1 / $2}')" "$length"
done
echo "(decode tok/s: pagedllm-host's 'then N tok/s' after the first token, median of $repeats; ratio: against" \
  "tp1-plain's median in this run)"
