#!/usr/bin/env bash
# Run on the dev machine before a GPU session: builds the CUDA tree for the GPU
# (real nvcc, sm_90a, Release: no emulation) and packs what the GPU stages of
# tools/gpu/validate.sh run into .gpu-build/ (git-ignored), for a call to carry.
#
# Why build here: a lent machine gives a session 15 minutes of device time,
# start and idle included, and a build on it would spend most of them. nvcc
# compiles for a GPU it does not have, so the tree is built here, where time is
# not counted, and the GPU machine only runs it.
#
#   tools/gpu/pack_build.sh            # builds build-gpu, writes .gpu-build/
#   run(command="tools/gpu/validate.sh unpack env test attn e2e eagle sanitize", carry=[".gpu-build"])
#
# .gpu-build/ holds:
#   build.tar.xz   build-gpu without objects and static libraries: the binaries, the
#                  plugins and the ctest files (which name this tree's absolute paths)
#   lib.tar.xz     lib/: the shared libraries the binaries need that the GPU machine's
#                  image lacks (yaml-cpp, spdlog, fmt, OpenBLAS, ...), found with ldd; CUDA's
#                  own libraries (cuBLAS, NCCL) are the image's. Compressed, as OpenBLAS alone
#                  would otherwise take half of what a call may carry
#   ROOT           this checkout's absolute path: the unpack stage links it to the copy
#                  on the GPU machine, so that the ctest files' paths resolve there
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=${BUILD:-build-gpu}
PACK=.gpu-build

# The targets the GPU stages use: the host, the benchmarks, every plugin, the test
# binaries whose cases need a device, and the fixture plugins those tests load.
targets=(pagedllm-host pagedllm-attn-bench pagedllm-bench
  attention_cpu attention_cuda models_llama sampler spec_eagle constraint_xgrammar
  collectives_nccl collectives_check
  test_attention_cuda test_sampler test_models_llama_cuda test_spec_eagle test_spec_eagle_cuda
  test_speculative_greedy_cuda test_engine_cuda test_attn_bench)

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# -g1: line tables, so that a crash's stack (validate.sh's test stage) names files and lines.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-g1 -DPAGEDLLM_ENABLE_CUDA=ON \
  -DPAGEDLLM_CUDA_EMULATION=OFF -DCMAKE_CUDA_ARCHITECTURES=90a -DPAGEDLLM_BUILD_TESTS=ON \
  "${launcher[@]}" >/dev/null
mapfile -t fixtures < <(ninja -C "$BUILD" -t targets all | grep -oE '^fixture_[a-z0-9_]+[a-z0-9]:' | tr -d : | sort -u)
ninja -C "$BUILD" "${targets[@]}" "${fixtures[@]}"

rm -rf "$PACK"
staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$PACK" "$staging/lib"
echo "$ROOT" >"$PACK/ROOT"
tar -C "$ROOT" -cJf "$PACK/build.tar.xz" \
  --exclude='*.o' --exclude='*.a' --exclude=CMakeFiles --exclude='.ninja_*' \
  --exclude=build.ninja --exclude=compile_commands.json --exclude='xgrammar*' --exclude=Testing \
  "$BUILD"

# Libraries the image lacks: everything ldd resolves outside glibc, the compiler's
# runtime and CUDA (the GPU machine has its own, matching its driver).
find "$BUILD/bin" "$BUILD/plugins" "$BUILD/tests" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
  xargs -0 ldd 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so|libnccl|libcublas|libmpi|libopen-|libpmix|libhwloc|libevent|libz\.so|libudev|libltdl' |
  while read -r lib; do cp -L "$lib" "$staging/lib/"; done
tar -C "$staging" -cJf "$PACK/lib.tar.xz" lib
du -sh "$PACK" "$PACK"/* | sed 's/^/  /'
# What a call carries: the tracked tree, the untracked files git does not ignore, and $PACK.
# The device tool refuses more than 64 MiB (with -g1 on 2026-11-26: 26 MB + 29 MB).
travelling=$( (git ls-files -z --cached --others --exclude-standard; find "$PACK" -type f -print0) |
  xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {sum += $1} END {print sum}')
echo "a call carrying $PACK sends $((travelling / 1048576)) MiB of the 64 MiB it may"
if ((travelling > 64 * 1048576)); then
  echo "too much to carry: drop -g1 from the configure line above, or carry less" >&2
  exit 1
fi
