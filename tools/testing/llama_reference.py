"""The fidelity oracle: a plain PyTorch forward of an HF LlamaForCausalLM
directory, written from HF's Llama equations (not imported from transformers,
which Debian 12 lacks), in float64 by default.

    scripts/python.sh tools/testing/llama_reference.py logits   --model DIR --input IN.json --output OUT.json
    scripts/python.sh tools/testing/llama_reference.py generate --model DIR --input IN.json --output OUT.json

logits:   IN  {"sequences": [[token ids], ...]}
          OUT {"logits": [[[vocab floats] per position] per sequence],
               "hidden": [[[hidden floats] per position] per sequence]}
          "hidden" is the final hidden state after the model's last RMSNorm
          (what lm_head consumes, and what an EAGLE head is fed).
generate: IN  {"prompts": [[token ids], ...], "max_new_tokens": N,
               "stop_token_ids": [ids] (optional; default none: run N tokens)}
          OUT {"outputs": [[new ids]], "finish_reasons": ["length" | "stop"],
               "margins": [[top1 - top2 logit per step]]}
          Greedy (argmax, lowest id on a tie), no KV cache: every step recomputes
          the whole sequence. A stop token is included in the output, as vLLM
          does. The margins let a caller comparing against an f32 engine see a
          step whose top two logits nearly tie, where either choice is right.

The equations (transformers' modeling_llama.py and modeling_rope_utils.py):
  x = embed_tokens[ids]
  per layer: h = x + o_proj(attn(rms(x) * w_in)); x = h + down(silu(gate(n)) * up(n)),
             n = rms(h) * w_post, rms(v) = v / sqrt(mean(v^2) + eps)
  attn: q, k = rope(q_proj(n)), rope(k_proj(n)) with rotate_half pairs (i, i + d/2),
        cos/sin of position * inv_freq, inv_freq = theta^(-2i/d) (llama3/linear
        rope_scaling applied to inv_freq); repeat_kv for GQA; causal
        softmax(q k^T / sqrt(d)) v
  logits = lm_head(rms(x) * w_norm), lm_head = embed_tokens when tied.
float64 throughout (inv_freq and angles included; HF computes those in f32), so
the oracle is the exact-arithmetic version of the model; weights stored as
f16/bf16 are widened exactly.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_safetensors  # noqa: E402


def rope_inv_freq(config, head_dim, dtype=torch.float64):
    """inv_freq [head_dim / 2] with HF's rope_scaling (none, linear, llama3)."""
    theta = float(config.get("rope_theta", 10000.0))
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    scaling = config.get("rope_scaling")
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind in (None, "default"):
        pass
    elif kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        old_context = float(scaling["original_max_position_embeddings"])
        low_freq_wavelen = old_context / low
        high_freq_wavelen = old_context / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_context / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    else:
        raise ValueError(f"rope_scaling type {kind!r} is not supported by the reference")
    return inv_freq.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def repeat_kv(x, groups):
    """[kv_heads, T, d] -> [kv_heads * groups, T, d], each kv head repeated `groups` times in place."""
    if groups == 1:
        return x
    kv_heads, length, dim = x.shape
    return x[:, None, :, :].expand(kv_heads, groups, length, dim).reshape(kv_heads * groups, length, dim)


class LlamaReference:
    """One LlamaForCausalLM in `dtype`, with an optional contiguous KV cache
    (used by the benchmark; the oracle itself always recomputes)."""

    def __init__(self, model_dir, dtype=torch.float64):
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            self.config = json.load(f)
        c = self.config
        self.dtype = dtype
        self.num_layers = c["num_hidden_layers"]
        self.num_heads = c["num_attention_heads"]
        self.num_kv_heads = c.get("num_key_value_heads") or self.num_heads
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.num_heads
        self.eps = float(c["rms_norm_eps"])
        raw = hf_safetensors.read_checkpoint(model_dir)
        self.w = {name: torch.from_numpy(values.copy()).to(dtype) for name, values in raw.items()}
        if c.get("tie_word_embeddings", False):
            self.w.setdefault("lm_head.weight", self.w["model.embed_tokens.weight"])
        self.inv_freq = rope_inv_freq(c, self.head_dim, torch.float64)

    def rms_norm(self, x, weight):
        variance = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(variance + self.eps))

    def rope(self, x, positions):
        """x [heads, T, d] rotated by positions [T]."""
        freqs = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(self.dtype), emb.sin().to(self.dtype)
        return x * cos + rotate_half(x) * sin

    def forward(self, tokens, cache=None):
        """(logits [T, V], post-norm hidden [T, H]) for new `tokens` after the
        `cache`d ones (a list of per-layer (k, v) that is extended in place;
        None: no earlier tokens, nothing kept)."""
        w = self.w
        past = 0 if not cache else cache[0][0].shape[1]
        length = len(tokens)
        positions = torch.arange(past, past + length)
        x = w["model.embed_tokens.weight"][torch.tensor(tokens, dtype=torch.long)]
        d = self.head_dim
        groups = self.num_heads // self.num_kv_heads
        # Row t (position past + t) sees keys [0, past + t].
        mask = torch.full((length, past + length), float("-inf"), dtype=self.dtype)
        mask = torch.triu(mask, diagonal=past + 1)
        for layer in range(self.num_layers):
            p = f"model.layers.{layer}."
            n = self.rms_norm(x, w[p + "input_layernorm.weight"])
            q = (n @ w[p + "self_attn.q_proj.weight"].T).view(length, self.num_heads, d).transpose(0, 1)
            k = (n @ w[p + "self_attn.k_proj.weight"].T).view(length, self.num_kv_heads, d).transpose(0, 1)
            v = (n @ w[p + "self_attn.v_proj.weight"].T).view(length, self.num_kv_heads, d).transpose(0, 1)
            q, k = self.rope(q, positions), self.rope(k, positions)
            if cache is not None:
                if len(cache) <= layer:
                    cache.append((k, v))
                else:
                    k = torch.cat((cache[layer][0], k), dim=1)
                    v = torch.cat((cache[layer][1], v), dim=1)
                    cache[layer] = (k, v)
            k, v = repeat_kv(k, groups), repeat_kv(v, groups)
            scores = q @ k.transpose(1, 2) / math.sqrt(d) + mask
            attn = torch.softmax(scores, dim=-1) @ v
            attn = attn.transpose(0, 1).reshape(length, self.num_heads * d)
            x = x + attn @ w[p + "self_attn.o_proj.weight"].T
            n = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
            gate = n @ w[p + "mlp.gate_proj.weight"].T
            up = n @ w[p + "mlp.up_proj.weight"].T
            x = x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        hidden = self.rms_norm(x, w["model.norm.weight"])
        return hidden @ w["lm_head.weight"].T, hidden

    def greedy(self, prompt, max_new_tokens, stop_token_ids=()):
        """(new tokens, finish reason, top1 - top2 margins), recomputing every step."""
        tokens, margins = list(prompt), []
        for _ in range(max_new_tokens):
            logits, _ = self.forward(tokens)
            last = logits[-1]
            top = torch.topk(last, 2)
            next_token = int(torch.argmax(last))  # the lowest id among equal maxima
            margins.append(float(top.values[0] - top.values[1]))
            tokens.append(next_token)
            if next_token in stop_token_ids:
                return tokens[len(prompt):], "stop", margins
        return tokens[len(prompt):], "length", margins


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["logits", "generate"])
    parser.add_argument("--model", required=True, help="HF model directory")
    parser.add_argument("--input", required=True, help="request JSON")
    parser.add_argument("--output", required=True, help="where to write the result JSON")
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    with open(args.input, encoding="utf-8") as f:
        request = json.load(f)
    model = LlamaReference(args.model, getattr(torch, args.dtype))
    vocab = model.config["vocab_size"]

    def check_ids(ids):
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad or not ids:
            raise SystemExit(f"token ids must be a non-empty list in [0, {vocab}), got {ids[:20]}")

    with torch.no_grad():
        if args.mode == "logits":
            result = {"logits": [], "hidden": []}
            for sequence in request["sequences"]:
                check_ids(sequence)
                logits, hidden = model.forward(sequence)
                result["logits"].append(logits.tolist())
                result["hidden"].append(hidden.tolist())
        else:
            result = {"outputs": [], "finish_reasons": [], "margins": []}
            stop = set(request.get("stop_token_ids", []))
            for prompt in request["prompts"]:
                check_ids(prompt)
                out, reason, margins = model.greedy(prompt, int(request["max_new_tokens"]), stop)
                result["outputs"].append(out)
                result["finish_reasons"].append(reason)
                result["margins"].append(margins)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
