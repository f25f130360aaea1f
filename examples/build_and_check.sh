#!/usr/bin/env bash
# Builds every example as a third party would and checks each against the
# in-tree plugin it could replace:
#   1. installs the SDK from a pagedllm build tree into a scratch prefix
#      (cmake --install <build> --component sdk);
#   2. configures and builds each example directory on its own against that
#      prefix (find_package(PagedLLM)), with warnings as errors; the C example
#      with C alone and nlohmann_json hidden, and a C++ example with
#      nlohmann_json hidden must fail naming the package to install;
#   3. checks them through the host and pagedllm-attn-bench:
#      - example_attention vs attention_cpu: pagedllm-attn-bench over f32 and
#        bf16 cases (outputs within the bench's per-dtype tolerance; the speed
#        ratio is printed), then a greedy generation with it, equal to attention_cpu's;
#      - example_llama vs models_llama: the same greedy completions of
#        configs/tiny.yaml's model (models_llama is itself checked against HF
#        transformers, tests/plugins/models_llama);
#      - example_sampler vs sampler: the same completions, greedy and seeded
#        (temperature, top-p, top-k, min-p, repetition penalty), and the same
#        logprobs (the same documented pipeline and random stream);
#      - example_prompt_lookup: greedy output equal to the plain engine's
#        (lossless), with its acceptance printed;
#      - example_llama as spec_eagle's target (its hidden rows and get_tensor
#        feed the EAGLE head): greedy output equal, acceptance printed;
#      - all four C++ examples in one engine: greedy output equal;
#      - example_c_sampler vs sampler: the same greedy completion; a sampled
#        request is refused with its message.
# Usage: examples/build_and_check.sh <source dir> <build dir>   (the build needs
# pagedllm-host, pagedllm-attn-bench and the in-tree plugins)
set -euo pipefail
source_dir=$(cd "$1" && pwd)
build_dir=$(cd "$2" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

host="$build_dir/bin/pagedllm-host"
bench="$build_dir/bin/pagedllm-attn-bench"
prefix="$work/prefix"
step() { echo "== $* ($SECONDS s)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

step "install the SDK into a scratch prefix"
cmake --install "$build_dir" --component sdk --prefix "$prefix" >/dev/null

# configure <example dir> <build dir> <cmake args...>: a third party's build, which must not see
# the host build's flags (sanitizers, say): only the SDK prefix.
configure() {
  local src=$1 out=$2; shift 2
  env -u CXXFLAGS -u CFLAGS -u LDFLAGS cmake -S "$src" -B "$out" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
    -DCMAKE_CXX_FLAGS="-Wall -Wextra -Wpedantic -Wshadow" -DCMAKE_C_FLAGS="-Wall -Wextra -Wpedantic" "$@"
}

# build_example <example dir> <build dir> <cmake args...>: configure and build, the log shown on failure.
build_example() {
  local src=$1 out=$2; shift 2
  if ! { configure "$src" "$out" "$@" && cmake --build "$out"; } >"$out.log" 2>&1; then
    cat "$out.log"
    fail "building $src"
  fi
}

for example in paged_attention llama_model sampler prompt_lookup_speculator; do
  step "build examples/$example"
  build_example "$source_dir/examples/$example" "$work/$example"
done
step "build examples/c_sampler with a C compiler only, without nlohmann_json"
build_example "$source_dir/examples/c_sampler" "$work/c_sampler" -DCMAKE_CXX_COMPILER=/nonexistent/c++ \
  -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON

step "a C++ plugin without nlohmann_json is refused, naming the package"
if configure "$source_dir/examples/sampler" "$work/no_json" -DCMAKE_DISABLE_FIND_PACKAGE_nlohmann_json=ON \
  >"$work/no_json.log" 2>&1; then
  fail "find_package(PagedLLM) succeeded without nlohmann_json"
fi
grep -q "nlohmann-json3-dev" "$work/no_json.log" || { cat "$work/no_json.log"; fail "no hint at nlohmann-json3-dev"; }

attention="$work/paged_attention/example_attention.so"
model="$work/llama_model/example_llama.so"
sampler="$work/sampler/example_sampler.so"
speculator="$work/prompt_lookup_speculator/example_prompt_lookup.so"
c_sampler="$work/c_sampler/example_c_sampler.so"
tiny="$source_dir/configs/tiny.yaml"
prompt=$'class Stack:\n    def __init__(self):\n        self.items = []\n\n'
prompt+=$'    def push(self, item):\n        self.items.append(item)\n\n    def pop(self):\n'

step "every example loads (pagedllm-host --check)"
"$host" --config "$tiny" --check --set "attention.plugin=$attention" --set "attention.options={}" \
  --set "model.plugin=$model" --set "sampler.plugin=$sampler" | grep -E "example_(attention|llama|sampler) "
"$host" --config "$tiny" --check --set "sampler.plugin=$c_sampler" | grep -E "example_c_sampler "

# generate <file> <args...>: one completion of $prompt to <file> (its stats line to <file>.log).
generate() {
  local out=$1; shift
  "$host" --config "$tiny" --prompt "$prompt" --max-tokens 64 --log-level warn "$@" >"$out" 2>"$out.log" ||
    { cat "$out.log"; fail "pagedllm-host $*"; }
}
same() {  # same <what> <a> <b>
  cmp -s "$2" "$3" || { diff "$2" "$3" || true; fail "$1: the outputs differ"; }
  echo "$1: equal ($(wc -c <"$2") bytes)"
}

step "example_attention vs attention_cpu (pagedllm-attn-bench)"
"$bench" --a attention_cpu --b "$attention" --dtype f32,bf16 --workload decode,prefill,mixed --context 64,300 \
  --gqa 1,4 --head-dim 64 --batch 4 --chunk 32 --reps 1 --warmup 0

step "example_attention and example_llama vs attention_cpu and models_llama: greedy completions"
generate "$work/plain.txt" --temperature 0
generate "$work/attention.txt" --temperature 0 --set "attention.plugin=$attention" --set "attention.options={}"
same "greedy, example_attention" "$work/plain.txt" "$work/attention.txt"
generate "$work/model.txt" --temperature 0 --set "model.plugin=$model"
same "greedy, example_llama" "$work/plain.txt" "$work/model.txt"

step "example_sampler vs sampler: greedy and seeded completions"
generate "$work/sampler.txt" --temperature 0 --set "sampler.plugin=$sampler"
same "greedy, example_sampler" "$work/plain.txt" "$work/sampler.txt"
for params in "--temperature 0.8 --seed 7" "--temperature 1.2 --top-p 0.9 --top-k 40 --seed 12" \
  "--temperature 0.7 --min-p 0.05 --repetition-penalty 1.3 --seed 3"; do
  # (Seeds chosen so that each completion runs to --max-tokens: under the 2.0 draw, seed 11 with
  # top-p and top-k sampled an end-of-sequence first and compared a single token.)
  # shellcheck disable=SC2086  # $params is a list of flags
  generate "$work/seeded_a.txt" $params
  # shellcheck disable=SC2086
  generate "$work/seeded_b.txt" $params --set "sampler.plugin=$sampler"
  same "seeded ($params), example_sampler" "$work/seeded_a.txt" "$work/seeded_b.txt"
done

step "example_c_sampler vs sampler"
generate "$work/c_sampler.txt" --temperature 0 --set "sampler.plugin=$c_sampler"
same "greedy, example_c_sampler" "$work/plain.txt" "$work/c_sampler.txt"
if "$host" --config "$tiny" --prompt "x" --max-tokens 4 --temperature 0.5 --log-level warn \
  --set "sampler.plugin=$c_sampler" >"$work/refused.txt" 2>&1; then
  fail "example_c_sampler accepted a sampled request"
fi
grep -q "samples greedily only" "$work/refused.txt" || { cat "$work/refused.txt"; fail "no refusal message"; }
echo "sampled request refused: $(grep -o "example_c_sampler samples greedily only[^\"]*" "$work/refused.txt" | head -1)"

step "example_prompt_lookup: lossless against the plain engine"
generate "$work/spec.txt" --temperature 0 --set "speculative.plugin=$speculator" \
  --set "speculative.draft=$source_dir/models/pagedllm-tiny" --set "speculative.num_speculative_tokens=3"
same "greedy, example_prompt_lookup" "$work/plain.txt" "$work/spec.txt"
grep "speculative:" "$work/spec.txt.log"

step "example_llama under spec_eagle: its hidden rows and shared tensors (get_tensor) feed EAGLE's draft"
generate "$work/eagle.txt" --temperature 0 --set "model.plugin=$model" \
  --set "speculative.plugin=spec_eagle" --set "speculative.draft=$source_dir/models/pagedllm-tiny-eagle" \
  --set "speculative.num_speculative_tokens=3"
same "greedy, example_llama + spec_eagle" "$work/plain.txt" "$work/eagle.txt"
grep "speculative:" "$work/eagle.txt.log"

step "every slot third-party: example_llama, example_attention, example_sampler, example_prompt_lookup"
generate "$work/all.txt" --temperature 0 --set "model.plugin=$model" --set "attention.plugin=$attention" \
  --set "attention.options={}" --set "sampler.plugin=$sampler" --set "speculative.plugin=$speculator" \
  --set "speculative.draft=$source_dir/models/pagedllm-tiny"
same "greedy, all examples" "$work/plain.txt" "$work/all.txt"

step "all examples built and checked"
