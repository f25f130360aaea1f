#!/usr/bin/env bash
# The GPU validation run: build with CUDA, run the GPU tests, A/B the attention
# backends, compare greedy output on the GPU with the CPU path, and greedy output
# with EAGLE speculation on the GPU with greedy output without it. Written for
# the lent GPU machine (one H100/H200, 16 cores, nothing downloadable, at most
# 10 minutes a call); docs/gpu-validation.md says how a session calls it and
# where its numbers are recorded.
#
#   tools/gpu/validate.sh [STAGE...]      # default: env deps configure build test attn e2e eagle tp
#   stages: unpack env deps configure build test crash attn e2e eagle tp sanitize
#   (crash: the H100 crash's diagnostic, about a minute; run it alone: unpack crash)
#
# Two ways to get the build. `deps configure build` make it on the GPU machine (minutes of
# device time). `unpack` takes the one tools/gpu/pack_build.sh built on the dev machine and the
# call carried in .gpu-build/ (seconds): with 15 minutes of device time a session, that is
# the way to call it:
#   run(command="tools/gpu/validate.sh unpack env test e2e eagle tp attn sanitize", carry=[".gpu-build"])
#
# Results go to $OUT (the device tool's folder; default build-gpu/out), as at most
# 8 files: summary.md (one line per stage and the numbers), build.log (configure and
# build only: not with unpack), test.log, crash.log, attn_bench.log, attn_bench_quick.json,
# attn_bench_decode.json, e2e.log (the e2e, eagle and tp stages write there), sanitize.log.
# A failing stage is marked FAIL in the summary and the run goes on to the next
# one; the exit status is 1 when any stage failed.
#
# Contracts with code written elsewhere, by name:
#   - GPU tests are ctest tests whose names contain "cuda" or "CUDA" (test_attention_cuda,
#     models_llama's CUDA cases, test_sampler's CUDA cases); a GPU test that prints "SKIPPED: no CUDA device"
#     here counts as a failure, since this machine has one. The tensor-parallel ones among them
#     (TP_TESTS: they start ranks with mpiexec) run in the tp stage instead.
#   - pagedllm-attn-bench runs side B on a GPU with `--device-b cuda:0`. The stage
#     reads `pagedllm-attn-bench --help` first; without that flag it is marked FAIL
#     ("no --device-b") and nothing is run.
#   - configs/serve-cuda.yaml is configs/tiny.yaml on cuda:0 with attention_cuda and
#     dtype f32, so greedy outputs must be equal.
#   - configs/eagle-cuda.yaml is serve-cuda.yaml plus a speculative: section
#     (spec_eagle), so its greedy output must equal serve-cuda.yaml's (test_speculative_greedy_cuda
#     checks the same inside one engine; this stage checks it through pagedllm-host).
#
# Dependencies: the machine has CUDA, CMake, ninja and a compiler, but not Boost,
# yaml-cpp, spdlog, fmt, nlohmann-json, Catch2 or OpenBLAS. tools/gpu/pack_deps.sh,
# run on the dev machine, puts their Debian packages in .gpu-deps/, which the call
# carries; the deps stage unpacks them under /tmp/pagedllm-deps (never into /).
#
# Environment: BUILD (default build-gpu), CUDA_ARCH (default 90a), JOBS (default 16),
# TEST_EXCLUDE (a ctest -E regex: GPU tests the test stage leaves out),
# BUDGET_S (seconds for the whole run, default 560: a stage that cannot start with
# at least a minute left is marked "not run" so the call ends inside its 10 minutes).
# shellcheck disable=SC2317  # the stage functions are called through `stage NAME FUNCTION`
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

OUT=${OUT:-build-gpu/out}
BUILD=${BUILD:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90a}
JOBS=${JOBS:-16}
BUDGET_S=${BUDGET_S:-560}
DEPS_PREFIX=/tmp/pagedllm-deps
mkdir -p "$OUT"
SUMMARY=$OUT/summary.md
STARTED=$SECONDS
FAILED=0
PROMPTS=(
  "def fibonacci(n):"
  "import os
import sys


def main():"
  "class Stack:
    def __init__(self):"
  "# Read a JSON file and return its contents
def load_json(path):"
  "for i in range(10):
    print(i"
)

note() { printf '%s\n' "$*" >>"$SUMMARY"; }

seconds_left() { echo $((BUDGET_S - (SECONDS - STARTED))); }

# stage NAME FUNCTION: runs FUNCTION, records PASS/FAIL and its duration.
stage() {
  local name=$1 fn=$2 left
  left=$(seconds_left)
  if ((left < 60)); then
    note "| $name | not run | ${left} s of the budget left: rerun with \`tools/gpu/validate.sh $name ...\` |"
    FAILED=1
    return
  fi
  local t0=$SECONDS detail
  echo "== $name" >&2
  # The whole output goes to stderr (the call's output tail); the last line is the detail.
  if detail=$("$fn" 2>&1 | tee /dev/stderr | tail -n 1; exit "${PIPESTATUS[0]}"); then
    note "| $name | PASS | $((SECONDS - t0)) s | $detail |"
  else
    note "| $name | **FAIL** | $((SECONDS - t0)) s | $detail |"
    FAILED=1
  fi
}

# ---- stages: each prints its one-line result last and returns non-zero on failure ----

env_stage() {
  {
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo 'unknown (no .git in the copy)')$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
    echo "- device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
    echo "- nvcc: $(nvcc --version 2>&1 | grep -o 'release [0-9.]*' || echo missing)"
    echo "- c++: $(c++ --version 2>&1 | head -1)"
    echo "- cmake: $(cmake --version 2>&1 | head -1), ninja: $(ninja --version 2>&1 || echo missing)"
    echo "- cores: $(nproc)"
  } >>"$SUMMARY.env"
  if ! command -v nvidia-smi >/dev/null || ! command -v nvcc >/dev/null || ! command -v cmake >/dev/null; then
    echo "nvidia-smi, nvcc or cmake missing"
    return 1
  fi
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1
}

deps_stage() {
  if ! ls .gpu-deps/*.deb >/dev/null 2>&1; then
    echo "no .gpu-deps/*.deb: relying on system packages (run tools/gpu/pack_deps.sh and carry .gpu-deps)"
    return 0
  fi
  mkdir -p "$DEPS_PREFIX"
  for deb in .gpu-deps/*.deb; do dpkg -x "$deb" "$DEPS_PREFIX" || return 1; done
  # Debian's OpenBLASConfig.cmake names /usr absolutely; point it at the unpacked copy.
  sed -i "s#/usr/#$DEPS_PREFIX/usr/#g" "$DEPS_PREFIX"/usr/lib/x86_64-linux-gnu/openblas-pthread/cmake/openblas/OpenBLASConfig.cmake
  echo "unpacked the packages of .gpu-deps into $DEPS_PREFIX"
}

# Makes the unpacked packages (or pack_build.sh's libraries) visible to CMake, the
# compiler and the loader.
use_deps() {
  local cuda_libs=/usr/local/cuda/lib64 nccl
  # NCCL is not in the image's CUDA tree but in its PyTorch's wheels (nvidia-nccl-cu13).
  nccl=$(find /opt/torch/.venv/lib -maxdepth 5 -path '*/site-packages/nvidia/nccl/lib' 2>/dev/null | head -n 1)
  export LD_LIBRARY_PATH=$PWD/.gpu-build/lib:$cuda_libs${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  [[ -d $DEPS_PREFIX/usr ]] || return 0
  export CMAKE_PREFIX_PATH=$DEPS_PREFIX/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export OpenBLAS_DIR=$DEPS_PREFIX/usr/lib/x86_64-linux-gnu/openblas-pthread/cmake/openblas
  export CPATH=$DEPS_PREFIX/usr/include${CPATH:+:$CPATH}
  local lib=$DEPS_PREFIX/usr/lib/x86_64-linux-gnu
  export LIBRARY_PATH=$lib:$lib/openblas-pthread${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$lib:$lib/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

# The tree tools/gpu/pack_build.sh built on the dev machine. Its ctest files name that
# machine's checkout by absolute path: a link from there to this copy makes them resolve.
unpack_stage() {
  [[ -f .gpu-build/build.tar.xz ]] || {
    echo "no .gpu-build/build.tar.xz: run tools/gpu/pack_build.sh on the dev machine and carry .gpu-build"
    return 1
  }
  tar -xJf .gpu-build/build.tar.xz && tar -C .gpu-build -xJf .gpu-build/lib.tar.xz || return 1
  local root
  root=$(cat .gpu-build/ROOT)
  if [[ $root != "$PWD" ]]; then
    [[ -e $root ]] && { echo "$root (where the tree was built) exists here and is not this copy ($PWD)"; return 1; }
    mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root" || return 1
  fi
  [[ -x $BUILD/bin/pagedllm-host ]] || { echo "the archive holds no $BUILD/bin/pagedllm-host"; return 1; }
  # The oracle tests run the Python the tree was configured with ($root/.venv/bin/python, not
  # carried): here it is the image's python3, which has torch, transformers and numpy. A
  # script, not a link: a linked interpreter would take .venv for its prefix and lose them.
  if [[ ! -e $root/.venv/bin/python ]]; then
    mkdir -p "$root/.venv/bin" && printf '#!/bin/sh\nexec python3 "$@"\n' >"$root/.venv/bin/python" &&
      chmod +x "$root/.venv/bin/python" || return 1
  fi
  echo "unpacked $BUILD in $PWD (built at $root, $(find .gpu-build/lib -type f | wc -l) carried libraries)"
}

configure_stage() {
  local generator=Ninja
  command -v ninja >/dev/null || generator="Unix Makefiles"
  cmake -S . -B "$BUILD" -G "$generator" -DCMAKE_BUILD_TYPE=Release -DPAGEDLLM_ENABLE_CUDA=ON -DPAGEDLLM_CUDA_EMULATION=OFF \
    -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DPAGEDLLM_BUILD_TESTS=ON >"$OUT/build.log" 2>&1 || {
    tail -n 20 "$OUT/build.log"
    echo "cmake configure failed (build.log)"
    return 1
  }
  echo "configured $BUILD ($generator, CUDA arch $CUDA_ARCH)"
}

build_stage() {
  local left=$(($(seconds_left) - 30))
  timeout "$left" cmake --build "$BUILD" -j "$JOBS" >>"$OUT/build.log" 2>&1 || {
    grep -E 'error|Error' "$OUT/build.log" | head -n 20
    echo "build failed or ran out of time (build.log)"
    return 1
  }
  echo "built with -j$JOBS"
}

test_stage() {
  local left=$(($(seconds_left) - 30))
  # A test that crashes leaves a core; cuda-gdb (the image has no gdb) adds every thread's
  # stack to test.log. The binaries carry line tables (pack_build.sh builds with -g1).
  local cores=/tmp/pagedllm-cores
  mkdir -p "$cores"
  ulimit -c unlimited
  echo "$cores/core.%e.%p" 2>/dev/null >/proc/sys/kernel/core_pattern || echo "cannot set core_pattern: no backtraces"
  # The tensor-parallel tests run in the tp stage.
  local exclude=$TP_TESTS
  [[ -n ${TEST_EXCLUDE:-} ]] && exclude="$TP_TESTS|$TEST_EXCLUDE"
  # 100 s a test: the slowest GPU case that passed on an H100 took 120 s (split-K, TEST_EXCLUDE
  # leaves it out); a hang costs no more than that.
  timeout "$left" ctest --test-dir "$BUILD" -R 'cuda|CUDA' -E "$exclude" --output-on-failure --timeout 100 \
    >"$OUT/test.log" 2>&1
  local status=$?
  # A test that timed out is run once more alone and stopped with SIGSEGV after 40 s, so that
  # its core shows where each thread waits.
  local hung
  while IFS= read -r hung; do
    local binary=${hung%%:*} name=${hung#*:}
    echo "== $hung timed out: run again alone, stopped after 40 s for its stacks" >>"$OUT/test.log"
    timeout -s SEGV 40 "$BUILD/bin/$binary" "${name//,/\\,}" >/dev/null 2>&1
  done < <(sed -nE 's/.*Test +#[0-9]+: (.*[^ ]) \.+\*\*\*Timeout.*/\1/p' "$OUT/test.log")
  local core
  for core in "$cores"/core.*; do
    [[ -e $core ]] || continue
    # %e is the first 15 characters of the program's name.
    local comm=${core#"$cores"/core.}
    local program
    program=$(find "$BUILD/bin" -maxdepth 1 -name "${comm%.*}*" -type f | head -n 1)
    {
      echo "== the stacks of ${program:-an unknown program} at its crash ($core)"
      timeout 60 cuda-gdb -batch -ex 'thread apply all bt' "$program" "$core"
    } >>"$OUT/test.log" 2>&1
  done
  local listed
  listed=$(grep -cE 'Test +#' "$OUT/test.log")
  if ((listed == 0)); then
    echo "no ctest test matches 'cuda|CUDA' (test.log)"
    return 1
  fi
  if grep -q 'SKIPPED: no CUDA device\|Not Run\|\*\*\*Skipped' "$OUT/test.log"; then
    echo "$listed GPU tests, but some skipped on a machine with a GPU (test.log)"
    return 1
  fi
  grep -E 'tests passed|tests failed' "$OUT/test.log" | tail -n 1
  return "$status"
}

# The H100 crash (docs/gpu-validation.md, "The H100 crash"): test_engine_cuda's first CPU-then-CUDA
# case died with SIGSEGV in 2026-11-26's calls after its CPU engine had unloaded models_llama.so and
# its CUDA engine had loaded it again. The host now keeps plugins that link CUDA loaded
# (core/plugin/plugin_library.cpp); PAGEDLLM_UNLOAD_CUDA_PLUGINS=1 unloads them as before. About a
# minute: the case and the case that hung after it with the fix, then the case without it (as it
# was; with CUDA_MODULE_LOADING=EAGER; with one OpenBLAS thread), each 30 s at most with its .so
# loads and unloads (LD_DEBUG=files), then the first run that failed under cuda-gdb, which prints
# every thread's stack at the fault (or at 45 s, for a hang). Everything goes to crash.log.
CRASH_CASE='engine on CUDA equals the CPU engine: one prefill per prompt, then decodes'
HANG_CASE='engine on CUDA equals the CPU engine: chunked prefill with a 16-token budget'
RELOAD_CASE='engines on the CPU, on CUDA, then on the CPU again in one process: plugins with CUDA stay loaded'

# crash_run LABEL CASE [VAR=VALUE...]: runs CASE of test_engine_cuda once with the variables set
# and prints LABEL and how it ended; its output tail and .so loads and unloads go to crash.log.
crash_run() {
  local label=$1 name=$2 debug=/tmp/pagedllm-ld-debug.$1
  shift 2
  rm -f "$debug".*
  local t0=$SECONDS output status
  # test_engine_cuda's ctest environment (tests/fidelity/CMakeLists.txt) plus the run's own.
  output=$(timeout 30 env PAGEDLLM_CPU_ISA=avx512vnni LD_DEBUG=files LD_DEBUG_OUTPUT="$debug" "$@" \
    "$BUILD/bin/test_engine_cuda" "${name//,/\\,}" 2>&1)
  status=$?
  local outcome="exit $status"
  case $status in
    0) outcome=passed ;;
    124) outcome="hung (stopped after 30 s)" ;;
    134) outcome=SIGABRT ;;
    139) outcome=SIGSEGV ;;
  esac
  {
    echo "== crash $label: $outcome in $((SECONDS - t0)) s: ${*:-no variables}, case \"$name\""
    printf '%s\n' "$output" | tail -n 12
    echo "-- its plugins' and CUDA's libraries loaded (init) and unloaded (fini), in order:"
    cat "$debug".* 2>/dev/null |
      grep -E 'calling (init|fini): .*(models_llama|sampler|attention_c|libcudart|libcublas|libcuda\.so|libopenblas)' |
      sed -E 's/^ *[0-9]+: *//'
  } >>"$OUT/crash.log"
  rm -f "$debug".*
  echo "$label: $outcome"
  [[ $status -eq 0 ]]
}

crash_stage() {
  [[ -x $BUILD/bin/test_engine_cuda ]] || { echo "$BUILD/bin/test_engine_cuda not built"; return 1; }
  echo "== crash stage (docs/gpu-validation.md, \"The H100 crash\")" >"$OUT/crash.log"
  local unpin=PAGEDLLM_UNLOAD_CUDA_PLUGINS=1 results="" pinned_failed=0 debug_label="" debug_case="" debug_vars=()
  local item label name r
  # With the fix, the crash's case, the case that hung after it, and CPU, CUDA, CPU again: all must pass.
  for item in "pinned|$CRASH_CASE" "pinned-chunked|$HANG_CASE" "pinned-reload|$RELOAD_CASE"; do
    label=${item%%|*} name=${item#*|}
    if ! r=$(crash_run "$label" "$name"); then
      pinned_failed=1
      [[ -n $debug_label ]] || { debug_label=$label debug_case=$name; }
    fi
    results+="$r; "
  done
  # Without it: the crash as it was, then with eager module loading, then with one OpenBLAS thread.
  if ! r=$(crash_run unpinned "$CRASH_CASE" "$unpin"); then
    [[ -n $debug_label ]] || { debug_label=unpinned debug_case=$CRASH_CASE debug_vars=("$unpin"); }
  fi
  results+="$r; "
  r=$(crash_run unpinned-eager "$CRASH_CASE" "$unpin" CUDA_MODULE_LOADING=EAGER)
  results+="$r; "
  r=$(crash_run unpinned-1-blas-thread "$CRASH_CASE" "$unpin" OPENBLAS_NUM_THREADS=1)
  results+="$r"
  if [[ -n $debug_label ]]; then
    # The first run that failed, again under cuda-gdb, with the carried libraries on the loader
    # path (use_deps exported LD_LIBRARY_PATH): at the fault it prints the faulting instructions,
    # that thread's stack, where each library is mapped and every thread's stack. A hang is
    # interrupted after 45 s (SIGINT stops the program; the batch goes on).
    # shellcheck disable=SC2016  # $pc is cuda-gdb's
    {
      echo "== crash $debug_label under cuda-gdb: ${debug_vars[*]:-no variables}, case \"$debug_case\""
      timeout -s INT -k 20 45 env PAGEDLLM_CPU_ISA=avx512vnni "${debug_vars[@]}" \
        cuda-gdb -batch -ex 'set pagination off' -ex 'set confirm off' -ex run -ex 'x/4i $pc' -ex bt \
        -ex 'info sharedlibrary' -ex 'thread apply all bt' \
        --args "$BUILD/bin/test_engine_cuda" "${debug_case//,/\\,}"
    } >>"$OUT/crash.log" 2>&1
  fi
  echo "$results (crash.log)"
  ((pinned_failed == 0))
}

attn_stage() {
  local bench=$BUILD/bin/pagedllm-attn-bench
  [[ -x $bench ]] || { echo "$bench not built"; return 1; }
  if ! "$bench" --help 2>&1 | grep -q -- '--device-b'; then
    echo "pagedllm-attn-bench has no --device-b: attention_cuda cannot be A/B'd yet"
    return 1
  fi
  local status=0 left=$(($(seconds_left) - 20))
  {
    echo "== quick suite: attention_cpu (a) vs attention_cuda on cuda:0 (b), f32"
    timeout "$left" "$bench" --a attention_cpu --b attention_cuda --device-b cuda:0 --suite quick \
      --json "$OUT/attn_bench_quick.json" || status=1
    echo "== decode bandwidth, bf16 KV, 16 sequences"
    timeout "$(($(seconds_left) - 20))" "$bench" --a attention_cpu --b attention_cuda --device-b cuda:0 --workload decode \
      --context 1024,4096,16384,32768 --gqa 4 --head-dim 128 --dtype bf16 --batch 16 --reps 10 \
      --json "$OUT/attn_bench_decode.json" || status=1
  } >"$OUT/attn_bench.log" 2>&1
  if ((status == 0)); then
    echo "both runs within tolerance (attn_bench.log)"
  else
    echo "a case differs or a run failed (attn_bench.log)"
  fi
  return "$status"
}

# compare_greedy LABEL_A CONFIG_A LABEL_B CONFIG_B: every prompt greedily through
# pagedllm-host with both configs (64 tokens; B at log level info, so its load and
# KV sizing lines land in e2e.log); both texts, their times and where they part go
# to e2e.log. Prints how many prompts gave equal texts.
compare_greedy() {
  local label_a=$1 config_a=$2 label_b=$3 config_b=$4 host=$BUILD/bin/pagedllm-host equal=0 i=0
  for prompt in "${PROMPTS[@]}"; do
    i=$((i + 1))
    local args=(--prompt "$prompt" --max-tokens 64 --temperature 0 --ignore-eos)
    local a b t0=$SECONDS
    echo "== $label_a vs $label_b, prompt $i: $(printf '%q' "$prompt")" >>"$OUT/e2e.log"
    a=$("$host" --config "$config_a" --log-level warn "${args[@]}" 2>>"$OUT/e2e.log")
    local a_s=$((SECONDS - t0))
    t0=$SECONDS
    b=$("$host" --config "$config_b" --log-level info "${args[@]}" 2>>"$OUT/e2e.log")
    local b_status=$? b_s=$((SECONDS - t0))
    {
      echo "-- $label_a ${a_s} s, $label_b ${b_s} s, $label_b exit $b_status"
      echo "-- $label_a:"; printf '%s\n' "$a"
      echo "-- $label_b:"; printf '%s\n' "$b"
    } >>"$OUT/e2e.log"
    if [[ $b_status -eq 0 && "$a" == "$b" ]]; then
      equal=$((equal + 1))
    else
      # Where the texts part: a near-tie flipped by f32 rounding shows as a late split.
      local n=0
      while ((n < ${#a} && n < ${#b})) && [[ "${a:n:1}" == "${b:n:1}" ]]; do n=$((n + 1)); done
      echo "   differs from character $n of ${#a}" >>"$OUT/e2e.log"
    fi
  done
  echo "$equal"
}

e2e_stage() {
  [[ -x $BUILD/bin/pagedllm-host ]] || { echo "$BUILD/bin/pagedllm-host not built"; return 1; }
  : >"$OUT/e2e.log"
  local equal
  equal=$(compare_greedy cpu configs/tiny.yaml gpu configs/serve-cuda.yaml)
  echo "$equal of ${#PROMPTS[@]} prompts: GPU greedy text equals the CPU's (64 tokens each; e2e.log)"
  ((equal == ${#PROMPTS[@]}))
}

eagle_stage() {
  [[ -x $BUILD/bin/pagedllm-host ]] || { echo "$BUILD/bin/pagedllm-host not built"; return 1; }
  # The CUDA draft head's worst error against the CPU head, per variant (the test's stdout).
  if [[ -x $BUILD/bin/test_spec_eagle_cuda ]]; then
    "$BUILD/bin/test_spec_eagle_cuda" 2>&1 | grep -E 'spec_eagle CUDA vs CPU head|SKIPPED|FAILED|passed' >>"$OUT/e2e.log"
  fi
  # At info the EAGLE run logs the draft head's load line (device, dtype, draft vocabulary).
  local equal
  equal=$(compare_greedy gpu configs/serve-cuda.yaml eagle configs/eagle-cuda.yaml)
  echo "$equal of ${#PROMPTS[@]} prompts: EAGLE greedy text on the GPU equals plain greedy on the GPU (e2e.log)"
  ((equal == ${#PROMPTS[@]}))
}

# Tensor parallelism on CUDA ranks (docs/tensor-parallel.md): two ranks on the one GPU with backend
# mpi (collectives_mpi staging each collective through pinned host memory; NCCL refuses two ranks on
# one device) — the collectives on device buffers, the split model against TP = 1 on the GPU and the
# CPU split, and the engine's greedy output over TP = 2 against TP = 1, all on cuda:0.
TP_TESTS='collectives_mpi:correctness_cuda|models_llama:tensor_parallel_cuda|tensor_parallel:engine_cuda'
tp_stage() {
  command -v mpiexec >/dev/null || { echo "no mpiexec on this machine (Open MPI): the ranks cannot start"; return 1; }
  local left=$(($(seconds_left) - 30))
  echo "== tp: $TP_TESTS" >>"$OUT/e2e.log"
  timeout "$left" ctest --test-dir "$BUILD" -R "$TP_TESTS" --output-on-failure --timeout 120 -V \
    >>"$OUT/e2e.log" 2>&1
  local status=$?
  grep -E 'TP = 2 on |greedy .* on cuda:0|collectives_check .*passed' "$OUT/e2e.log" | tail -n 6
  grep -E 'tests passed|tests failed' "$OUT/e2e.log" | tail -n 1
  return "$status"
}

# compute-sanitizer over the GPU test binaries: memcheck (out-of-bounds and misaligned
# accesses, leaks of device memory) on each, racecheck (shared-memory hazards) on the
# attention kernels, the ones that share memory between a block's threads. Each run is
# cut at a third of what is left of the budget; a cut run counts as a failure.
sanitize_stage() {
  command -v compute-sanitizer >/dev/null || { echo "compute-sanitizer is not on this machine"; return 1; }
  local log=$OUT/sanitize.log status=0 runs=0
  : >"$log"
  local plan=(
    "memcheck test_attention_cuda --leak-check full"
    "racecheck test_attention_cuda"
    "memcheck test_models_llama_cuda --leak-check full"
    "memcheck test_spec_eagle_cuda --leak-check full"
  )
  for item in "${plan[@]}"; do
    read -r tool binary extra <<<"$item"
    local left=$(($(seconds_left) / 3))
    if ((left < 20)); then
      echo "-- $tool $binary: not run (budget)" >>"$log"
      status=1
      continue
    fi
    echo "== compute-sanitizer --tool $tool $extra $binary (cut at $left s)" >>"$log"
    # shellcheck disable=SC2086  # extra is zero or more options
    timeout "$left" compute-sanitizer --tool "$tool" $extra --error-exitcode 3 "$BUILD/bin/$binary" >>"$log" 2>&1
    local code=$?
    echo "-- exit $code" >>"$log"
    ((code == 0)) || status=1
    runs=$((runs + 1))
  done
  grep -E '^== |ERROR SUMMARY|^-- ' "$log"
  echo "$runs sanitizer runs, $( ((status == 0)) && echo 'no errors' || echo 'errors or cut runs') (sanitize.log)"
  return "$status"
}

# ---- run ----
stages=("$@")
((${#stages[@]})) || stages=(env deps configure build test attn e2e eagle tp)
: >"$SUMMARY.env"
{
  echo "# GPU validation"
  echo
} >"$SUMMARY"
note "| stage | result | time | detail |"
note "| --- | --- | --- | --- |"
use_deps
for s in "${stages[@]}"; do
  case $s in
    unpack | env | deps | configure | build | test | crash | attn | e2e | eagle | tp | sanitize)
      stage "$s" "${s}_stage"
      [[ $s == deps ]] && use_deps
      ;;
    *)
      note "| $s | **FAIL** | 0 s | unknown stage (unpack env deps configure build test crash attn e2e eagle tp sanitize) |"
      FAILED=1
      ;;
  esac
done
{
  echo
  cat "$SUMMARY.env"
  echo "- budget: $((SECONDS - STARTED)) s of $BUDGET_S s used"
} >>"$SUMMARY"
rm -f "$SUMMARY.env"
cat "$SUMMARY"
exit $FAILED
