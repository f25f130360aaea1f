"""The EAGLE-1 draft oracle: the head of tools/train/model.py (class EagleHead)
over a target LlamaForCausalLM, written out in float64 with PyTorch.

    scripts/python.sh tools/testing/eagle_reference.py --target DIR --head DIR --input IN.json --output OUT.json
        [--dtype bfloat16]   # every op in bf16: how far a bf16 head may be from float64 (tolerances)

IN  {"sequences": [{"tokens": [x_0 .. x_L],
                    "features": [[hidden floats] per position 0 .. L-1] (optional),
                    "chain_tokens": [y_1 .. y_m] (optional)}]}
OUT {"sequences": [{"logits": [[vocab floats] per row],
                    "predicted": [[hidden floats] per row],
                    "feature_max_abs_diff": float | null}]}

Rows: row t (t = 0 .. L-1) is the pair (feature f_t, token x_{t+1}) at RoPE
position t, f_t the target's final hidden state after model.norm for x_0 .. x_t
(computed here by llama_reference.py, or the given "features", whose largest
difference from the computed ones is reported). Then one chain row per y_j, at
position L - 1 + j: (the predicted feature of the row before, y_j). Each row:
  x = fc(cat(embed_tokens(token), feature)) (+ fc.bias)
  x = x + o_proj(attn(rope(q_proj(x)), rope(k_proj(x)), v_proj(x)))   (no input_layernorm; causal, GQA)
  x = x + down(silu(gate(n)) * up(n)),  n = rms(x) * post_attention_layernorm
  predicted = x; logits = lm_head(x)   (no final norm; embed_tokens and lm_head are the target's)
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_safetensors  # noqa: E402
from llama_reference import LlamaReference, repeat_kv, rope_inv_freq, rotate_half  # noqa: E402


class EagleReference:
    def __init__(self, target_dir, head_dir, dtype=torch.float64):
        self.target = LlamaReference(target_dir, dtype)
        with open(os.path.join(head_dir, "config.json"), encoding="utf-8") as f:
            c = json.load(f)
        self.dtype = dtype
        self.num_heads = c["num_attention_heads"]
        self.num_kv_heads = c.get("num_key_value_heads") or self.num_heads
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.num_heads
        self.eps = float(c["rms_norm_eps"])
        self.inv_freq = rope_inv_freq(c, self.head_dim, torch.float64)
        raw = hf_safetensors.read_checkpoint(head_dir)
        self.w = {name: torch.from_numpy(values.copy()).to(dtype) for name, values in raw.items()}
        self.embed = self.target.w["model.embed_tokens.weight"]
        self.lm_head = self.target.w["lm_head.weight"]

    def rms_norm(self, x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def rope(self, x, positions):
        freqs = positions.to(torch.float64)[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return x * emb.cos().to(self.dtype) + rotate_half(x) * emb.sin().to(self.dtype)

    def head(self, features, tokens):
        """Predicted features [T, H] of rows (features[t], tokens[t]) at positions 0 .. T-1."""
        w, d = self.w, self.head_dim
        length = len(tokens)
        positions = torch.arange(length)
        x = torch.cat((self.embed[torch.tensor(tokens, dtype=torch.long)], features), dim=-1) @ w["fc.weight"].T
        if "fc.bias" in w:
            x = x + w["fc.bias"]
        p = "layers.0."
        q = (x @ w[p + "self_attn.q_proj.weight"].T).view(length, self.num_heads, d).transpose(0, 1)
        k = (x @ w[p + "self_attn.k_proj.weight"].T).view(length, self.num_kv_heads, d).transpose(0, 1)
        v = (x @ w[p + "self_attn.v_proj.weight"].T).view(length, self.num_kv_heads, d).transpose(0, 1)
        q, k = self.rope(q, positions), self.rope(k, positions)
        groups = self.num_heads // self.num_kv_heads
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
        mask = torch.triu(torch.full((length, length), float("-inf"), dtype=self.dtype), diagonal=1)
        attn = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d) + mask, dim=-1) @ v
        x = x + attn.transpose(0, 1).reshape(length, self.num_heads * d) @ w[p + "self_attn.o_proj.weight"].T
        n = self.rms_norm(x, w[p + "post_attention_layernorm.weight"])
        gate = n @ w[p + "mlp.gate_proj.weight"].T
        up = n @ w[p + "mlp.up_proj.weight"].T
        return x + (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T

    def run(self, sequence):
        tokens = sequence["tokens"]
        length = len(tokens) - 1
        if length < 1:
            raise SystemExit("a sequence needs at least two tokens")
        _, computed = self.target.forward(tokens[:length])
        diff = None
        features = computed
        if sequence.get("features") is not None:
            features = torch.tensor(sequence["features"], dtype=self.dtype)
            if features.shape != computed.shape:
                raise SystemExit(f"features have shape {list(features.shape)}, expected {list(computed.shape)}")
            diff = float((features - computed).abs().max())
        row_tokens = list(tokens[1:])
        predicted = self.head(features, row_tokens)
        for y in sequence.get("chain_tokens", []):
            features = torch.cat((features, predicted[-1:]), dim=0)
            row_tokens.append(y)
            predicted = self.head(features, row_tokens)
        return {"logits": (predicted @ self.lm_head.T).double().tolist(), "predicted": predicted.double().tolist(),
                "feature_max_abs_diff": diff}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="the target's HF model directory")
    parser.add_argument("--head", required=True, help="the EAGLE head's directory")
    parser.add_argument("--input", required=True, help="request JSON")
    parser.add_argument("--output", required=True, help="where to write the result JSON")
    parser.add_argument("--dtype", default="float64", choices=["float64", "bfloat16"],
                        help="what the head and the target compute in (default float64: the oracle)")
    args = parser.parse_args(argv)
    with open(args.input, encoding="utf-8") as f:
        request = json.load(f)
    model = EagleReference(args.target, args.head, getattr(torch, args.dtype))
    with torch.no_grad():
        result = {"sequences": [model.run(s) for s in request["sequences"]]}
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1:])
