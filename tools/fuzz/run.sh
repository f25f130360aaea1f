#!/usr/bin/env bash
# Builds the libFuzzer targets (tools/fuzz, clang, ASan+UBSan, into build-fuzz)
# and runs each for SECONDS (default 60), one after the other, seeded from the
# repository's real files (make_corpus.py) plus the corpus earlier runs grew
# (build-fuzz/corpus) and the regression inputs of past findings
# (tools/fuzz/regressions/<target>, replayed first by libFuzzer). Prints each
# target's executions and coverage; exits non-zero on any finding, whose input
# is left in build-fuzz/artifacts/.
#
# Usage: tools/fuzz/run.sh [SECONDS] [TARGET...]   (targets without the fuzz_ prefix)
# Env:   FUZZ_BUILD_DIR (build-fuzz), FUZZ_JOBS (build parallelism, nproc),
#        FUZZ_RUNS (also stop a target after this many executions, SECONDS still the cap),
#        FUZZ_NO_BUILD=1 (use the targets already built).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
seconds=${1:-60}
[[ $# -gt 0 ]] && shift
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=(config openai_request http safetensors gguf model_config tokenizer_load tokenizer_roundtrip chat_template draft_vocab
           tool_call_parser)
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
python=${PAGEDLLM_PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}

if [[ ${FUZZ_NO_BUILD:-0} != 1 ]]; then
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DPAGEDLLM_FUZZ=ON -DPAGEDLLM_BUILD_TESTS=OFF -DPAGEDLLM_ENABLE_CUDA=OFF -DPAGEDLLM_PYTHON="$python" \
    "${launcher[@]}" >/dev/null
  cmake --build "$build" --target pagedllm_fuzz --parallel "${FUZZ_JOBS:-$(nproc)}"
fi

# Targets that read files write them to $TMPDIR: memory, where there is some, is faster.
[[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]] && export TMPDIR=/dev/shm
"$python" tools/fuzz/make_corpus.py "$build/seeds" >/dev/null
mkdir -p "$build/artifacts"
declare -A dicts=([config]=yaml [openai_request]=json [http]=http [model_config]=json [tokenizer_load]=json
                  [chat_template]=json [draft_vocab]=json [safetensors]=json [tool_call_parser]=json)
failed=()
printf '%-22s %12s %8s %8s %s\n' target executions cov ft result
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  mkdir -p "$corpus"
  cp -n "$build/seeds/$t"/* "$corpus"/ 2>/dev/null || true
  args=(-timeout=10 -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$build/artifacts/$t-")
  args+=(-max_total_time="$seconds")
  [[ -n ${FUZZ_RUNS:-} ]] && args+=(-runs="$FUZZ_RUNS")
  [[ -n ${dicts[$t]:-} ]] && args+=(-dict=tools/fuzz/dict/${dicts[$t]}.dict)
  dirs=("$corpus")
  [[ -d tools/fuzz/regressions/$t ]] && dirs+=("tools/fuzz/regressions/$t")
  log=$build/fuzz-$t.log
  if "$build/fuzz/fuzz_$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1; then result=ok; else result="FAILED ($log)"; failed+=("$t"); fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1 || true)
  cov=$( (grep -o 'cov: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  ft=$( (grep -o 'ft: [0-9]*' "$log" || true) | tail -1 | cut -d' ' -f2)
  printf '%-22s %12s %8s %8s %s\n' "$t" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$result"
done
if ((${#failed[@]})); then
  for t in "${failed[@]}"; do
    echo "--- $build/fuzz-$t.log (the finding) ---" >&2
    grep -v -E '^#[0-9]+' "$build/fuzz-$t.log" | grep -v -E '^ +#[0-9]+ 0x[0-9a-f]+ in (fuzzer::|__|std::|main |_start)' | tail -40 >&2
  done
  echo "fuzz findings in: ${failed[*]} (inputs in $build/artifacts/; logs named above)" >&2
  exit 1
fi
