"""A minimal safetensors writer and reader (no `safetensors` package needed).

Format: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, padded with
spaces to a multiple of 8 so the data that follows is 8-byte aligned, then the raw
little-endian tensor bytes, back to back, in the order of the sorted names.
"""
import json
import struct

import numpy as np
import torch

_TO_ST = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
_FROM_ST = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
_BITS = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}


def _raw_bytes(t):
    t = t.detach().contiguous().cpu()
    return t.view(_BITS[t.dtype]).numpy().tobytes()  # reinterpret bits (x86 is little-endian)


def save_file(tensors, path, metadata=None):
    """tensors: {name: torch tensor of bf16/f16/f32}."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = _raw_bytes(t)
        header[name] = {"dtype": _TO_ST[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load_file(path, dtype=torch.float32):
    """Returns ({name: tensor converted to dtype}, metadata)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    out = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        st_dtype = _FROM_ST[h["dtype"]]
        bits = np.frombuffer(data, dtype=np.int16 if _BITS[st_dtype] == torch.int16 else np.int32,
                             count=(end - begin) // (2 if _BITS[st_dtype] == torch.int16 else 4),
                             offset=base + begin).copy()
        t = torch.from_numpy(bits).view(st_dtype).reshape(h["shape"])
        out[name] = t.to(dtype)
    return out, meta
