"""The independent oracle for the GGUF reader's tests (tests/sdk/gguf_test.cpp): gguf-py.

Usage:
  gguf_oracle.py write OUT.gguf MANIFEST.json VALUES.f32 [--alignment N] [--version V]
      Writes OUT.gguf with gguf-py's GGUFWriter: metadata of every GGUF value type (nested
      arrays included) and tensors of F32, F16, BF16, Q8_0, Q4_0, Q4_1 (quantized by
      gguf.quants.quantize) and Q4_K, Q5_K, Q6_K (random bytes of the block shape, with
      finite f16 scales). Then reads it back with gguf-py's GGUFReader and writes what that
      reader sees: MANIFEST.json (version, alignment, data offset, metadata with types and
      values, each tensor's name, ggml dims, type, offset) and VALUES.f32, each tensor's
      gguf.quants.dequantize output as little-endian f32, in manifest order.
      --version 2 rewrites the version field (v2 and v3 share the layout for little-endian).
  gguf_oracle.py sizes
      Prints gguf-py's GGML_QUANT_SIZES as JSON: {type id: [block size, bytes per block]}.
"""

import argparse
import json
import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize, quantize

K_QUANTS = {T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}  # byte offsets of f16 scales in a block


def k_quant_blocks(rng, qtype, rows, cols):
    block, size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for at in K_QUANTS[qtype]:
        halves = rng.uniform(-2.0, 2.0, size=(rows, cols // block)).astype(np.float16)
        raw[:, :, at:at + 2] = halves.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, cols // block * size)


def write(args):
    rng = np.random.default_rng(21)
    w = GGUFWriter(args.out, "llama")
    if args.alignment:
        w.add_custom_alignment(args.alignment)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "h\u00e9llo, \u4e16\u754c")
    w.add_string("test.empty_string", "")
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", 2.718281828459045)
    w.add_array("test.strings", ["a", "", "\u00fcber", "<s>"])
    w.add_array("test.ints", [1, -2, 3])
    w.add_array("test.floats", [0.5, -1.25])
    w.add_array("test.bools", [True, False, True])
    w.add_key_value("test.u16s", [1, 65535], GGUFValueType.ARRAY, sub_type=GGUFValueType.UINT16)
    w.add_key_value("test.f64s", [1e300, -0.0], GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT64)
    w.add_array("test.nested", [[1, 2], [3], [4, 5, 6]])
    w.add_array("test.nested_strings", [["x", "y"], ["z"]])

    tensors = []
    f32 = rng.standard_normal((3, 64)).astype(np.float32)
    tensors.append(("t.f32", f32, None))
    tensors.append(("t.f32_1d", rng.standard_normal(7).astype(np.float32), None))
    tensors.append(("t.f32_3d", rng.standard_normal((2, 3, 5)).astype(np.float32), None))
    tensors.append(("t.f32_4d", rng.standard_normal((2, 1, 3, 4)).astype(np.float32), None))
    tensors.append(("t.f16", rng.standard_normal((4, 32)).astype(np.float16), None))
    bf16 = rng.integers(0, 1 << 16, size=(2, 48), dtype=np.uint16)  # every bit pattern, NaNs too
    tensors.append(("t.bf16", bf16.view(np.uint8).reshape(2, 96), T.BF16))
    for qtype in (T.Q8_0, T.Q4_0, T.Q4_1):
        data = (rng.standard_normal((5, 96)) * 3).astype(np.float32)
        data[0, :32] = 0.0  # an all-zero block
        tensors.append((f"t.{qtype.name.lower()}", quantize(data, qtype), qtype))
    for qtype in K_QUANTS:
        tensors.append((f"t.{qtype.name.lower()}", k_quant_blocks(rng, qtype, 3, 512), qtype))
    for name, data, qtype in tensors:
        w.add_tensor(name, data, raw_dtype=qtype)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if args.version != 3:
        with open(args.out, "r+b") as f:
            f.seek(4)
            f.write(np.uint32(args.version).tobytes())

    r = GGUFReader(args.out)
    manifest = {"version": int(r.fields["GGUF.version"].contents()), "alignment": int(r.alignment),
                "data_offset": int(r.data_offset), "metadata": [], "tensors": []}
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        manifest["metadata"].append({"key": key, "types": [int(t) for t in field.types],
                                     "value": contents(field)})
    with open(args.values, "wb") as out:
        for t in r.tensors:
            values = dequantize(t.data, t.tensor_type).astype("<f4")
            out.write(values.tobytes())
            manifest["tensors"].append({"name": t.name, "dims": [int(d) for d in t.shape],
                                        "type": int(t.tensor_type), "offset": int(t.data_offset - r.data_offset),
                                        "numel": int(values.size)})
    with open(args.manifest, "w") as f:
        json.dump(manifest, f, indent=1)


def contents(field):
    value = field.contents()
    if isinstance(value, float) and field.types[0] == GGUFValueType.FLOAT32:
        return float(np.float32(value))
    return to_json(value)


def to_json(value):
    if isinstance(value, list):
        return [to_json(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    return value


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("write")
    w.add_argument("out")
    w.add_argument("manifest")
    w.add_argument("values")
    w.add_argument("--alignment", type=int, default=0)
    w.add_argument("--version", type=int, default=3)
    sub.add_parser("sizes")
    args = parser.parse_args()
    if args.command == "write":
        write(args)
    else:
        print(json.dumps({int(t): list(GGML_QUANT_SIZES[t]) for t in T}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
