"""Writes the int8 quantization of a Llama checkpoint as the f32 checkpoint it stands for: the oracle side of
models_llama's quantization: int8_* tests, computed independently of the plugin in numpy float64.

    quantize_int8_checkpoint.py IN_DIR OUT_DIR

Every decoder matrix (q/k/v/o, gate/up/down) and lm_head (a tied model's: the embedding, written as an
lm_head.weight of its own, with tie_word_embeddings turned off) is quantized per output row, symmetric:
s = max |w| / 127 in float64, q = rint(w / s) (half to even), and written as q * f32(s) rounded to f32 (what
the plugin multiplies by, per output: sum(a q) * f32(s)). The embedding and the norms are copied as f32.
"""
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

QUANTIZED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def quantize_dequantize(w):
    w = w.astype(np.float64)
    s = np.abs(w).max(axis=1, keepdims=True) / 127.0
    q = np.where(s > 0, np.rint(w / np.where(s > 0, s, 1.0)), 0.0)
    return (q * s.astype(np.float32).astype(np.float64)).astype(np.float32)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    tensors = {}
    for name in sorted(os.listdir(src)):
        if name.endswith(".safetensors"):
            for key, value in load_file(os.path.join(src, name)).items():
                tensors[key] = value.astype(np.float32)  # f32 or f16 (numpy has no bf16)
    out = {}
    for key, value in tensors.items():
        out[key] = quantize_dequantize(value) if key.split(".")[-2] in QUANTIZED else value
    if "lm_head.weight" in tensors:
        out["lm_head.weight"] = quantize_dequantize(tensors["lm_head.weight"])
    else:
        out["lm_head.weight"] = quantize_dequantize(tensors["model.embed_tokens.weight"])
        config["tie_word_embeddings"] = False
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "model.safetensors"))
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    for name in os.listdir(src):
        if not name.endswith(".safetensors") and name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy(os.path.join(src, name), os.path.join(dst, name))


if __name__ == "__main__":
    main()
