"""Writes a compressed-tensors int8 checkpoint of a Llama checkpoint, as llm-compressor would: the fixture of
models_llama's pre-quantized loading (plugins/models_llama/README.md, "Pre-quantized checkpoints").

    make_compressed_int8_checkpoint.py IN_DIR OUT_DIR [--scheme W8A8|W8A16] [--format FORMAT] [--ignore NAME ...]

The compressed-tensors package does every step llm-compressor does for these schemes except the calibration
loop, which round-to-nearest int8 weights do not need: its preset scheme (INT8_W8A8: int8 weights symmetric per
output channel, int8 activations dynamic per token; W8A16: the same weights, float activations) is applied to
every Linear but those ignored (lm_head by default, as llm-compressor's examples do), each weight's scale comes
from compressed_tensors' calculate_qparams over the row's min and max (what llm-compressor's memoryless min-max
observer feeds it: s = max |w| / 127.5, q = round(w / s) clamped to [-128, 127], s in the model's dtype),
and ModelCompressor compresses and saves the model and writes config.json's quantization_config. FORMAT is
int-quantized (W8A8's default), pack-quantized (W8A16's default: four values to an int32) or naive-quantized.
"""
import argparse
import os
import shutil

import torch
from compressed_tensors.compressors import ModelCompressor
from compressed_tensors.quantization import (QuantizationConfig, QuantizationScheme, QuantizationStatus,
                                             apply_quantization_config, preset_name_to_scheme)
from compressed_tensors.quantization.utils import calculate_qparams
from transformers import LlamaForCausalLM

DEFAULT_FORMAT = {"W8A8": "int-quantized", "W8A16": "pack-quantized"}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("in_dir")
    p.add_argument("out_dir")
    p.add_argument("--scheme", choices=sorted(DEFAULT_FORMAT), default="W8A8")
    p.add_argument("--format", choices=["int-quantized", "pack-quantized", "naive-quantized"])
    p.add_argument("--ignore", nargs="*", default=["lm_head"])
    args = p.parse_args()
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(args.in_dir, dtype="auto")
    scheme = preset_name_to_scheme(args.scheme, ["Linear"])
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=args.ignore,
                                quantization_status=QuantizationStatus.INITIALIZED)
    apply_quantization_config(model, config)
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "quantization_scheme", None) is None:
                continue
            w = module.weight
            scale, zero_point = calculate_qparams(w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True),
                                                  module.quantization_scheme.weights)
            module.weight_scale.copy_(scale)
            module.weight_zero_point.copy_(zero_point)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=args.format
                                                       or DEFAULT_FORMAT[args.scheme])
    compressor.compress_model(model)
    model.save_pretrained(args.out_dir)
    compressor.update_config(args.out_dir)
    for name in os.listdir(args.in_dir):
        if not name.endswith(".safetensors") and name not in ("config.json", "model.safetensors.index.json"):
            if not os.path.exists(os.path.join(args.out_dir, name)):
                shutil.copy(os.path.join(args.in_dir, name), os.path.join(args.out_dir, name))


if __name__ == "__main__":
    main()
