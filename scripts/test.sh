#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: the README's test command and
# what CI runs. A normal build first, then the same suite under ASan+UBSan, then
# a short smoke of every fuzz target and the threaded tests under ThreadSanitizer
# (docs/reliability.md).
# Usage: scripts/test.sh [--no-sanitize] [extra ctest arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=1
if [[ ${1:-} == --no-sanitize ]]; then sanitize=0; shift; fi

scripts/setup.sh

# A full run writes about 15 GB here (.venv 7 GB, four build trees); a full disk shows up much
# later as a compiler's "No space left on device", so say it first.
free_gb=$(df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }')
if ((free_gb < 16)); then
  echo "test.sh: warning: ${free_gb} GB free in $PWD; a full run needs about 15 GB" >&2
fi

jobs=$(nproc)
# ccache (installed by setup.sh) keeps compiled objects across builds and checkouts: paths
# under the checkout are hashed relative to it, so a fresh clone elsewhere hits the cache.
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
build() {  # build <dir> <extra cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -G Ninja -DPAGEDLLM_WERROR=ON \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache "$@" >/dev/null
  cmake --build "$dir" --parallel "$jobs"
}
run_tests() {  # run_tests <dir> <ctest args...>
  local dir=$1; shift
  ctest --test-dir "$dir" --output-on-failure --parallel "$jobs" "$@"
}

# The ThreadSanitizer subset (docs/reliability.md): test executables, by ctest prefix.
tsan_tests=(test_server test_serve_signals test_scheduler test_engine test_sampler test_attention_cpu
            test_models_llama test_spec_eagle test_llama_cpu_kernels test_thread_pool)
# Left out, each exercising the same pool code as a case that runs: the three largest attention
# comparisons (5 minutes under TSan; the windowed one walks the same items with other bounds); models_llama's oracle comparisons but two (mixed batches,
# greedy decoding through the paged cache), 12 - 24 s each under TSan; spec_eagle's chi-square
# statistics (no thread pool); llama_cpu's two float64 comparisons over every level and dtype
# (2.5 - 3.5 minutes each under TSan), whose pool code the "same bits alone or in a batch" cases run.
tsan_exclude='test_attention_cpu:paged attention equals dense attention, (f32|long prefill chunks)$'
tsan_exclude+='|test_attention_cpu:paged attention equals dense attention under a sliding window'
tsan_exclude+='|test_models_llama:(16-bit checkpoints|models_llama: (a single prefill|the same prompt as a chunked'
tsan_exclude+='|decode steps after|f16 and bf16|llama3 RoPE|checkpoints written by|linear RoPE|logits and hidden'
tsan_exclude+='|the comparison detects))|test_spec_eagle:spec_eagle: verify.s output distribution'
tsan_exclude+='|test_llama_cpu_kernels:llama_cpu: (int8 linear|linear\(\) matches a float64)'

echo "== build (RelWithDebInfo)"
build build -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== tests"
run_tests build "$@"

if ((sanitize)); then
  echo "== build (ASan+UBSan)"
  build build-asan -DCMAKE_BUILD_TYPE=Debug -DPAGEDLLM_SANITIZE=ON -DPAGEDLLM_ENABLE_CUDA=OFF
  echo "== tests under ASan+UBSan"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 run_tests build-asan "$@"

  # Every fuzz target for a few seconds (built alone: the targets and the libraries they link),
  # replaying tools/fuzz/regressions first: what fuzzing found stays fixed.
  echo "== fuzz smoke (tools/fuzz/run.sh ${PAGEDLLM_FUZZ_SMOKE_S:-5}: clang, libFuzzer, ASan+UBSan)"
  FUZZ_JOBS=$jobs tools/fuzz/run.sh "${PAGEDLLM_FUZZ_SMOKE_S:-5}"

  # The tests whose code shares state across threads (the engine thread, the HTTP server's
  # I/O threads, the plugins' thread pools), built alone under ThreadSanitizer.
  echo "== build (ThreadSanitizer: ${tsan_tests[*]})"
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDLLM_SANITIZE_THREAD=ON \
    -DPAGEDLLM_ENABLE_CUDA=OFF -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
  cmake --build build-tsan --parallel "$jobs" --target "${tsan_tests[@]}"
  echo "== threaded tests under ThreadSanitizer"
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/tools/tsan/suppressions.txt" \
    run_tests build-tsan -R "^($(IFS='|'; echo "${tsan_tests[*]}")):" -E "$tsan_exclude"
fi
