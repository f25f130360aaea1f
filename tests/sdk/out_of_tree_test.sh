#!/usr/bin/env bash
# Installs the SDK from the build tree into a scratch prefix, builds a
# third-party plugin project against it with find_package(PagedLLM), and checks
# that the host loads that plugin and refuses one claiming a newer SDK minor.
# Usage: out_of_tree_test.sh <source dir> <build dir>
set -euo pipefail
source_dir=$1
build_dir=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cmake --install "$build_dir" --component sdk --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/pagedllm/sdk.h"
# The third-party build must not see the host's compiler flags (e.g. sanitizers).
env -u CXXFLAGS -u CFLAGS -u LDFLAGS cmake -S "$source_dir/tests/sdk/out_of_tree" -B "$work/build" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/build" >/dev/null

host="$build_dir/bin/pagedllm-host"
config="$source_dir/configs/serve.yaml"

out=$("$host" --config "$config" --check --set "sampler.plugin=$work/build/oot_sampler.so")
echo "$out"
grep -q "oot_sampler .* sampler .* 2.0.0" <<<"$out"

set +e
err=$("$host" --config "$config" --check --set "sampler.plugin=$work/build/oot_newer_minor.so" 2>&1 >/dev/null)
status=$?
set -e
echo "$err"
test "$status" -eq 2
sdk=$(sed -n 's/^#define PLLM_SDK_VERSION_\(MAJOR\|MINOR\) \([0-9]*\)$/\2/p' "$source_dir/sdk/include/pagedllm/sdk/version.h" | paste -sd.)
newer="${sdk%.*}.$(( ${sdk#*.} + 1 ))"
grep -q "built against pagedllm SDK $newer, newer than this host's SDK $sdk" <<<"$err"
echo "out-of-tree plugin: loaded; newer-minor plugin: refused"
