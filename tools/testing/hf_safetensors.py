"""Reading and writing safetensors files and HF checkpoints by hand, with numpy
only (written before the project's Python had the safetensors package). Shared
by make_tiny_llama.py, llama_reference.py and the benchmarks.

Format (https://github.com/huggingface/safetensors): an 8-byte little-endian
header length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets":
[begin, end]}, "__metadata__": {str: str}}, then the data area; offsets are
relative to the data area. Writers pad the header with spaces to a multiple of
8 so tensor data stays aligned, and lay tensors out back to back.
"""
import json
import os
import struct

import numpy as np

SUPPORTED_DTYPES = ("F32", "F16", "BF16")
DTYPE_SIZE = {"F32": 4, "F16": 2, "BF16": 2}

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


def f32_to_bf16_bits(values):
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even; NaN stays NaN."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    u = values.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(values, dtype):
    """The raw little-endian bytes of float32 `values` stored as `dtype`."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    if dtype == "F32":
        return values.astype("<f4").tobytes()
    if dtype == "F16":
        return values.astype("<f2").tobytes()
    if dtype == "BF16":
        return f32_to_bf16_bits(values).astype("<u2").tobytes()
    raise ValueError(f"unsupported dtype {dtype}")


def decode(raw, dtype, shape):
    """float32 array (exact: every F16/BF16 value is an f32) from raw bytes."""
    if dtype == "F32":
        flat = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    elif dtype == "F16":
        flat = np.frombuffer(raw, dtype="<f2").astype(np.float32)
    elif dtype == "BF16":
        flat = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2"))
    else:
        raise ValueError(f"unsupported dtype {dtype}")
    return flat.reshape(shape)


def header_bytes(entries, metadata=None):
    """The 8-byte length plus the space-padded JSON header."""
    header = dict(entries)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def write_safetensors(path, tensors, metadata=None):
    """Writes [(name, dtype, float32 array)] as one safetensors file."""
    entries, chunks, offset = {}, [], 0
    for name, dtype, values in tensors:
        raw = encode(values, dtype)
        entries[name] = {"dtype": dtype, "shape": list(np.shape(values)),
                         "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    with open(path, "wb") as f:
        f.write(header_bytes(entries, metadata))
        for raw in chunks:
            f.write(raw)


def read_header(path):
    """(header dict without __metadata__, data area start) of one file."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 8:
            raise ValueError(f"{path}: truncated ({size} bytes)")
        (length,) = struct.unpack("<Q", f.read(8))
        if length > size - 8:
            raise ValueError(f"{path}: header length {length} exceeds the file")
        header = json.loads(f.read(length))
    header.pop("__metadata__", None)
    return header, 8 + length


def read_safetensors(path):
    """{name: float32 array} of one file."""
    header, start = read_header(path)
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    for name, entry in header.items():
        dtype = entry["dtype"]
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dtype}")
        begin, end = entry["data_offsets"]
        if start + end > len(data):
            raise ValueError(f"{path}: tensor {name}: data beyond the end of the file")
        out[name] = decode(data[start + begin:start + end], dtype, entry["shape"])
    return out


def read_checkpoint(model_dir):
    """{name: float32 array} of an HF model directory, single file or sharded."""
    index_path = os.path.join(model_dir, INDEX_NAME)
    if os.path.exists(index_path):
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(os.path.join(model_dir, shard)))
        missing = [name for name in weight_map if name not in tensors]
        if missing:
            raise ValueError(f"{index_path}: tensors missing from their shards: {missing}")
        return tensors
    return read_safetensors(os.path.join(model_dir, SINGLE_NAME))


def write_checkpoint(model_dir, tensors, num_shards=1, metadata=None):
    """Writes [(name, dtype, float32 array)] as model.safetensors, or as
    `num_shards` files model-0000i-of-0000n.safetensors plus the index, split
    in order into parts of about equal bytes."""
    if num_shards <= 1:
        write_safetensors(os.path.join(model_dir, SINGLE_NAME), tensors, metadata)
        return
    sizes = [np.size(values) * DTYPE_SIZE[dtype] for _, dtype, values in tensors]
    total = sum(sizes)
    shards, current, current_bytes = [], [], 0
    for tensor, size in zip(tensors, sizes):
        target = total * (len(shards) + 1) / num_shards
        if current and len(shards) < num_shards - 1 and current_bytes + size / 2 > target:
            shards.append(current)
            current = []
        current.append(tensor)
        current_bytes += size
    shards.append(current)
    if len(shards) != num_shards:
        raise ValueError(f"cannot split {len(tensors)} tensors into {num_shards} shards")
    weight_map = {}
    for i, part in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{num_shards:05d}.safetensors"
        write_safetensors(os.path.join(model_dir, name), part, metadata)
        for tensor_name, _, _ in part:
            weight_map[tensor_name] = name
    with open(os.path.join(model_dir, INDEX_NAME), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": int(total)}, "weight_map": weight_map}, f, indent=2)
