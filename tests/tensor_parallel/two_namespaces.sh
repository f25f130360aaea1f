#!/usr/bin/env bash
# Tensor parallelism across two "machines" (docs/tensor-parallel.md): rank 0 and rank 1 of
# `mpirun -np 2 pagedllm-host` in two network namespaces with their own host names, joined only by
# a veth pair (10.77.0.1 and .2); mpirun reaches the second through an rsh agent that enters its
# namespace (as ssh would enter another machine), and the ranks talk over TCP on the veth link only
# (btl tcp,self: no shared memory). One-shot greedy output must equal one process's (TP = 1).
#
# usage: two_namespaces.sh PAGEDLLM_HOST MODEL_DIR [MPIRUN]
# Needs root with CAP_NET_ADMIN (ip netns); exits 77 (skipped) where namespaces cannot be made.
set -euo pipefail
host_bin=$1 model=$2 mpirun=${3:-mpirun}
tag=$$
ns_a=pllm-a-$tag ns_b=pllm-b-$tag
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! command -v ip >/dev/null || ! ip netns add "$ns_a" 2>/dev/null; then
  echo "SKIPPED: cannot create network namespaces here (needs iproute2 and CAP_NET_ADMIN)"
  exit 77
fi
ip netns add "$ns_b"
ip link add "pv$tag-a" type veth peer name "pv$tag-b"
ip link set "pv$tag-a" netns "$ns_a"
ip link set "pv$tag-b" netns "$ns_b"
ip -n "$ns_a" addr add 10.77.0.1/24 dev "pv$tag-a"
ip -n "$ns_b" addr add 10.77.0.2/24 dev "pv$tag-b"
for ns in "$ns_a" "$ns_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$ns_a" link set "pv$tag-a" up
ip -n "$ns_b" link set "pv$tag-b" up

# mpirun's rsh agent is called as "<agent> <host> <command line>": run the line in that host's namespace,
# under its own host name (Open MPI tells nodes apart by name).
cat > "$work/agent.sh" <<AGENT
#!/bin/sh
host=\$1; shift
case \$host in
  10.77.0.1) ns=$ns_a name=node-a ;;
  10.77.0.2) ns=$ns_b name=node-b ;;
  *) echo "agent: unknown host \$host" >&2; exit 1 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$name; \$*"
AGENT
chmod +x "$work/agent.sh"

cat > "$work/tp.yaml" <<CONFIG
model: {plugin: models_llama, path: $model, options: {num_threads: 1}}
device: cpu
attention: {plugin: attention_cpu}
sampler: {plugin: sampler}
cache: {block_size: 16, kv_cache_bytes: 8MiB, swap_space: 8MiB}
parallel: {tensor_parallel_size: 2, backend: mpi, options: {timeout_seconds: 30}}
CONFIG
generate=(--config "$work/tp.yaml" --prompt "def fibonacci(n):" --temperature 0 --max-tokens 32 --ignore-eos)

"$host_bin" "${generate[@]}" --set parallel.tensor_parallel_size=1 >"$work/tp1.out" 2>"$work/tp1.err"
start=$(date +%s%N)
if ! timeout 120 ip netns exec "$ns_a" unshare --uts sh -c "hostname node-a; exec \"\$@\"" sh \
    "$mpirun" --allow-run-as-root --host 10.77.0.1,10.77.0.2 -np 2 --mca plm_rsh_agent "$work/agent.sh" \
    --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 \
    -x OMPI_ALLOW_RUN_AS_ROOT=1 -x OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$host_bin" "${generate[@]}" >"$work/tp2.out" 2>"$work/tp2.err"; then
  echo "FAILED: TP = 2 across the namespaces"; cat "$work/tp2.err"; exit 1
fi
milliseconds=$(( ($(date +%s%N) - start) / 1000000 ))
if ! grep -q "\[rank 1\] \[worker\] \[info\] rank 1 of 2 ready (pid [0-9]* on node-b)" "$work/tp2.err"; then
  echo "FAILED: rank 1 did not run on node-b"; cat "$work/tp2.err"; exit 1
fi
if ! grep -q "\[rank 1\] \[worker\] \[info\] stopped by rank 0 after 32 steps" "$work/tp2.err"; then
  echo "FAILED: rank 1 did not run rank 0's 32 steps"; cat "$work/tp2.err"; exit 1
fi
if ! cmp -s "$work/tp1.out" "$work/tp2.out"; then
  echo "FAILED: TP = 2 across two namespaces differs from TP = 1"
  diff "$work/tp1.out" "$work/tp2.out" || true
  exit 1
fi
echo "TP = 2 across two network namespaces over TCP on a veth pair (${milliseconds} ms): output equals TP = 1's"
