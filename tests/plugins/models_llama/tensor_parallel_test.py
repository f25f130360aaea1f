"""models_llama split over MPI ranks (TP = N) against the whole model (TP = 1): tensor_parallel_check.cpp
under mpirun, on the embedded model and on random-weight save_pretrained checkpoints
(tools/testing/make_tiny_llama.py) with 8 kv heads and with 2 (at TP = 4: each kv head on two ranks), and on
the embedded model as a compressed-tensors W8A8 checkpoint (tools/testing/make_compressed_int8_checkpoint.py),
each rank copying its block of the stored int8 rows and scales; on GGUF files of Q8_0 and Q4_0 blocks held as
stored (split on block boundaries); and on checkpoints of the other families
(tools/testing/hf_oracle.py's presets qwen3_bias and llama_bias: q/k/v biases split by heads like their rows,
o_proj / down_proj biases added once to the ranks' sum, gate/up biases split by columns, q/k norms whole; gemma3:
its single kv head on both ranks, the attention and MLP outputs normed after the ranks' sum; phi3: each rank's
heads of the fused qkv_proj's q, k and v blocks, its columns of gate_up_proj's gate and up blocks). W8A8 runs weight-only: W8A8 quantizes each
rank's slice of the o_proj / down_proj input with a scale of its own (as vLLM's row-parallel layers do), which
TP = 1's whole-row scale does not reproduce (logits 0.07-0.13 apart, against 6e-7 weight-only).

With --cuda: the CUDA split instead (tensor_parallel_check's "cuda": both ranks on cuda:0 in f32, collectives_mpi
staging through host memory, against TP = 1 on cuda:0 and the CPU split) on the random models with 8 kv heads and
with 2 (bf16 checkpoint, tied embedding), and on qwen3_bias, gemma3 and phi3, at TP = 2.

usage: tensor_parallel_test.py [--cuda] --check BIN --python PY --source-dir DIR -- MPIEXEC ARGS (without -np)...
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", required=True)
    parser.add_argument("--python", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--cuda", action="store_true")
    parser.add_argument("mpiexec", nargs="+")
    args = parser.parse_args()
    source = Path(args.source_dir)
    # The f32 tolerance holds on the exact path: with activations rounded to bf16 (cpu_bf16_compute's
    # default) a TP sum's other f32 order flips roundings, which moves logits by 2^-8 of an activation.
    one_thread = '{"num_threads": 1, "cpu_bf16_compute": "exact"}'

    with tempfile.TemporaryDirectory() as tmp:
        def random_model(name, *flags):
            out = Path(tmp) / name
            subprocess.run([args.python, str(source / "tools/testing/make_tiny_llama.py"), str(out), *flags],
                           check=True, capture_output=True)
            return out

        def preset_model(preset):
            out = Path(tmp) / preset
            subprocess.run([args.python, str(source / "tools/testing/hf_oracle.py"), "make", "--preset", preset,
                            str(out)], check=True, capture_output=True)
            return out

        if args.cuda:
            # The same models with heads of 32 (attention_cuda's smallest head_dim).
            kv8 = random_model("kv8-cuda", "--num-heads", "8", "--num-kv-heads", "8", "--head-dim", "32",
                               "--hidden-size", "64", "--intermediate-size", "96", "--num-layers", "2",
                               "--vocab-size", "1001", "--seed", "3")
            kv2 = random_model("kv2-cuda", "--num-heads", "8", "--num-kv-heads", "2", "--head-dim", "32",
                               "--hidden-size", "64", "--intermediate-size", "96", "--num-layers", "2",
                               "--vocab-size", "998", "--dtype", "bf16", "--tie-word-embeddings", "--seed", "4")
            run_cases(args, [(2, kv8, 4, one_thread, "cuda"), (2, kv2, 4, one_thread, "cuda"),
                             (2, preset_model("qwen3_bias"), 4, one_thread, "cuda"),
                             (2, preset_model("gemma3"), 4, one_thread, "cuda"),
                             (2, preset_model("phi3"), 4, one_thread, "cuda")])
            return
        # Vocabularies that do not divide by the ranks: the last rank's shard is shorter (padded in the gather).
        kv8 = random_model("kv8", "--num-heads", "8", "--num-kv-heads", "8", "--head-dim", "8",
                           "--hidden-size", "64", "--intermediate-size", "96", "--num-layers", "2",
                           "--vocab-size", "1001", "--seed", "3")
        kv2 = random_model("kv2", "--num-heads", "8", "--num-kv-heads", "2", "--head-dim", "8",
                           "--hidden-size", "64", "--intermediate-size", "96", "--num-layers", "2",
                           "--vocab-size", "998", "--dtype", "bf16", "--tie-word-embeddings", "--seed", "4")
        w8a8 = Path(tmp) / "pagedllm-tiny-w8a8"
        subprocess.run([args.python, str(source / "tools/testing/make_compressed_int8_checkpoint.py"),
                        str(source / "models/pagedllm-tiny"), str(w8a8), "--scheme", "W8A8"],
                       check=True, capture_output=True)
        weight_only = '{"num_threads": 1, "quantization": "int8_weight_only"}'
        # GGUF files held as stored blocks (tools/testing/gguf_oracle.py's random models): every rank's column
        # blocks of o_proj / down_proj are whole blocks (32 and 64 columns of Q8_0 / Q4_0), so each rank's
        # activation blocks are TP = 1's and the ranks' sums add up to its outputs.
        gguf_dir = Path(tmp) / "gguf"
        subprocess.run([args.python, str(source / "tools/testing/gguf_oracle.py"), "make", str(gguf_dir)],
                       check=True, capture_output=True)
        run_cases(args, [
            (2, gguf_dir / "tiny-q8_0.gguf", 6, one_thread),
            (2, gguf_dir / "tiny-spm.gguf", 6, one_thread),
        ])
        run_cases(args, [
            (2, source / "models/pagedllm-tiny", 6, one_thread),
            (2, kv8, 8, one_thread),
            (2, kv2, 8, one_thread),
            (4, kv2, 4, one_thread),  # 4 ranks, 2 kv heads: each replicated on two ranks
            (2, w8a8, 6, weight_only),
            (2, preset_model("qwen3_bias"), 6, one_thread),
            (2, preset_model("llama_bias"), 6, one_thread),
            (2, preset_model("gemma3"), 6, one_thread),
            (2, preset_model("phi3"), 6, one_thread),
        ])


def run_cases(args, cases):
    for ranks, model, steps, options, *device in cases:
        start = time.monotonic()
        command = [args.mpiexec[0], "-np", str(ranks), *args.mpiexec[1:], args.check, str(model), str(steps),
                   options, *device]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            sys.exit(f"FAILED: TP = {ranks} on {model.name}: exit {done.returncode}\n{output}")
        print(f"TP = {ranks} on {model.name} ({time.monotonic() - start:.1f} s): "
              f"{done.stdout.strip().splitlines()[-1]}")


if __name__ == "__main__":
    main()
