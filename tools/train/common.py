"""Shared helpers: thread setup (before torch is imported), devices, autocast, the learning-rate
schedule, JSON logs."""
import json
import math
import os
import time


def set_threads(n):
    """Call before importing torch: OpenBLAS (Debian's torch uses it) keeps its own pool."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)
    import torch
    torch.set_num_threads(n)
    return torch


def autocast(torch, device, dtype):
    """bf16 autocast (matmuls in bf16, fp32 master weights) or a no-op for fp32."""
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    if dtype == "fp32":
        return torch.autocast(kind, enabled=False)
    return torch.autocast(kind, dtype=torch.bfloat16)


def lr_at(step, args):
    """Linear warm-up over args.warmup steps, then cosine decay to args.min_lr_frac * args.lr at args.steps."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    progress = (step - args.warmup) / max(1, args.steps - args.warmup)
    floor = args.lr * args.min_lr_frac
    return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * min(1.0, progress)))


class JsonLog:
    def __init__(self, path):
        self.f = open(path, "a")
        self.t0 = time.time()

    def __call__(self, **record):
        self.f.write(json.dumps(record) + "\n")
        self.f.flush()
        print(json.dumps(record), flush=True)
