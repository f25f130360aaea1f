"""The PyTorch side of models_llama_bench: an eager f32 forward of an HF Llama
directory (HF's equations, as in tools/testing/llama_reference.py, batched and
with a contiguous KV cache like HF's DynamicCache), timed on the same workloads
as the C++ benchmark. Prints nothing; writes JSON.

    scripts/python.sh tools/bench/torch_llama_bench.py --model DIR --output OUT.json \
        [--threads N] [--prefill-len P] [--prompt-len L] [--decode-steps S] [--batches 1,8] [--repeats R]

OUT: {"prefill_tokens_per_s": x, "decode_tokens_per_s": {"1": y, "8": z}, "torch_version", "threads"}
Prefill: R prompts of P tokens one at a time, logits of the last token only
(as the engine asks), median time. Decode: B prompts of L tokens prefilled
(untimed), then S greedy steps of B tokens, median step time. Medians, since
the machine may be shared.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import llama_reference  # noqa: E402


class EagerLlama:
    """Batched [B, T] forward with a per-layer (k, v) cache of [B, kv_heads, len, d]."""

    def __init__(self, model_dir):
        ref = llama_reference.LlamaReference(model_dir, torch.float32)
        self.ref = ref
        self.w = ref.w
        self.inv_freq = ref.inv_freq.to(torch.float32)

    def rms_norm(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.ref.eps))

    def forward(self, tokens, cache):
        """Logits [B, V] of the last position of `tokens` [B, T]; extends `cache`."""
        r, w = self.ref, self.w
        batch, length = tokens.shape
        past = cache[0][0].shape[2] if cache else 0
        d, heads, kv_heads = r.head_dim, r.num_heads, r.num_kv_heads
        positions = torch.arange(past, past + length, dtype=torch.float32)
        freqs = positions[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        mask = None
        if length > 1:
            mask = torch.triu(torch.full((length, past + length), float("-inf")), diagonal=past + 1)
        x = w["model.embed_tokens.weight"][tokens]
        for layer in range(r.num_layers):
            p = f"model.layers.{layer}."
            n = self.rms_norm(x, w[p + "input_layernorm.weight"])
            q = (n @ w[p + "self_attn.q_proj.weight"].T).view(batch, length, heads, d).transpose(1, 2)
            k = (n @ w[p + "self_attn.k_proj.weight"].T).view(batch, length, kv_heads, d).transpose(1, 2)
            v = (n @ w[p + "self_attn.v_proj.weight"].T).view(batch, length, kv_heads, d).transpose(1, 2)
            q = q * cos + llama_reference.rotate_half(q) * sin
            k = k * cos + llama_reference.rotate_half(k) * sin
            if len(cache) <= layer:
                cache.append((k, v))
            else:
                k = torch.cat((cache[layer][0], k), dim=2)
                v = torch.cat((cache[layer][1], v), dim=2)
                cache[layer] = (k, v)
            groups = heads // kv_heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            scores = q @ k.transpose(2, 3) / math.sqrt(d)
            if mask is not None:
                scores = scores + mask
            attn = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, length, heads * d)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            n = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
            gate = n @ w[p + "mlp.gate_proj.weight"].T
            up = n @ w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        last = self.rms_norm(x[:, -1], w["model.norm.weight"])
        return last @ w["lm_head.weight"].T


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--prefill-len", type=int, default=128)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--decode-steps", type=int, default=32)
    p.add_argument("--batches", default="1,8")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model = EagerLlama(args.model)
    vocab = model.ref.config["vocab_size"]
    gen = torch.Generator().manual_seed(0)
    result = {"torch_version": torch.__version__, "threads": torch.get_num_threads(), "decode_tokens_per_s": {}}
    with torch.no_grad():
        times = []
        for i in range(args.repeats + 1):  # the first is a warm-up
            prompt = torch.randint(0, vocab, (1, args.prefill_len), generator=gen)
            start = time.perf_counter()
            model.forward(prompt, [])
            if i:
                times.append(time.perf_counter() - start)
        result["prefill_tokens_per_s"] = args.prefill_len / statistics.median(times)
        for batch in (int(b) for b in args.batches.split(",")):
            cache = []
            logits = model.forward(torch.randint(0, vocab, (batch, args.prompt_len), generator=gen), cache)
            times = []
            for _ in range(args.decode_steps):
                next_tokens = logits.argmax(-1, keepdim=True)
                start = time.perf_counter()
                logits = model.forward(next_tokens, cache)
                times.append(time.perf_counter() - start)
            result["decode_tokens_per_s"][str(batch)] = batch / statistics.median(times)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
