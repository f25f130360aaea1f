"""Writes a small random Llama (LlamaForCausalLM) as an HF model directory,
deterministically from a seed, for fidelity tests, end-to-end engine tests and
benchmarks. numpy only; safetensors are written by hand (hf_safetensors.py).

    scripts/python.sh tools/testing/make_tiny_llama.py OUT_DIR [options]

OUT_DIR gets config.json, generation_config.json, model.safetensors (or
--shards N files plus model.safetensors.index.json), and the byte-level
tokenizer of tests/fixtures/tokenizer/<--tokenizer> (tokenizer.json,
tokenizer_config.json), whose ids all lie inside the model's vocabulary.

Defaults: 3 layers, hidden 64, 4 query heads over 2 KV heads (GQA) of
head_dim 16, intermediate 176, untied lm_head, rope_theta 10000, f32, the
Llama-3-style tokenizer (vocab 964, bos <|begin_of_text|>, eos
<|end_of_text|> and <|eot_id|>). The same arguments always give the same bytes.

The weights are scaled so the model is not degenerate: unit-variance
embeddings (std 0.2 when tied), projections of variance gain/fan_in
(query/key gain 1.5, so attention is neither uniform nor one-hot), norm
weights in [0.6, 1.4] (never all ones, so a forgotten norm weight shows), and
an lm_head giving logits of standard deviation ~3, so greedy continuations
depend on the prompt.
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_safetensors  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZERS = os.path.join(ROOT, "tests", "fixtures", "tokenizer")
STORED_DTYPES = {"f32": "F32", "f16": "F16", "bf16": "BF16"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=sorted(STORED_DTYPES), default="f32", help="stored weight dtype")
    p.add_argument("--shards", type=int, default=1, help="number of safetensors files (> 1: with an index)")
    p.add_argument("--hidden-size", type=int, default=64)
    p.add_argument("--intermediate-size", type=int, default=176)
    p.add_argument("--num-layers", type=int, default=3)
    p.add_argument("--num-heads", type=int, default=4)
    p.add_argument("--num-kv-heads", type=int, default=2)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--vocab-size", type=int, default=0, help="0: the tokenizer's size")
    p.add_argument("--max-position-embeddings", type=int, default=512)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--rms-norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-scaling", choices=["none", "llama3", "linear"], default="none",
                   help="llama3: factor 8, low/high freq factors 1/4, original context 64, so the "
                        "unchanged, smoothed and scaled frequency bands all occur at head_dim 16")
    p.add_argument("--tie-word-embeddings", action="store_true")
    p.add_argument("--tokenizer", default="bytelevel_llama3",
                   help="a directory name under tests/fixtures/tokenizer, or 'none'")
    return p.parse_args(argv)


def tokenizer_facts(name):
    """(vocab size, bos id, eos ids) of a fixture tokenizer."""
    with open(os.path.join(TOKENIZERS, name, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = json.load(f)
    with open(os.path.join(TOKENIZERS, name, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    ids = dict(tokenizer["model"]["vocab"])
    ids.update({t["content"]: t["id"] for t in tokenizer["added_tokens"]})
    size = max(ids.values()) + 1
    bos = ids[config["bos_token"]]
    eos = [ids[config["eos_token"]]]
    if "<|end_of_text|>" in ids and ids["<|end_of_text|>"] not in eos:
        eos.insert(0, ids["<|end_of_text|>"])
    return size, bos, eos


def make_config(args, vocab_size, bos, eos):
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": args.hidden_size,
        "intermediate_size": args.intermediate_size,
        "num_hidden_layers": args.num_layers,
        "num_attention_heads": args.num_heads,
        "num_key_value_heads": args.num_kv_heads,
        "head_dim": args.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": args.max_position_embeddings,
        "rms_norm_eps": args.rms_norm_eps,
        "rope_theta": args.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": args.tie_word_embeddings,
        "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[args.dtype],
        "bos_token_id": bos,
        "eos_token_id": eos if len(eos) != 1 else eos[0],
    }
    if args.rope_scaling == "llama3":
        config["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    elif args.rope_scaling == "linear":
        config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    return config


def make_weights(args, vocab_size):
    """[(name, float32 array)] in HF's names and [out_features, in_features] layout."""
    rng = np.random.default_rng(args.seed)
    h, i, d = args.hidden_size, args.intermediate_size, args.head_dim

    def normal(shape, std):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def linear(out_features, in_features, gain=1.0):
        return normal((out_features, in_features), gain / np.sqrt(in_features))

    def norm():
        return rng.uniform(0.6, 1.4, size=h).astype(np.float32)

    # Tied, the logits are (normed hidden) . embeddings and the residual stream
    # starts at the input token's embedding: large embeddings would make every
    # continuation repeat its last token, so they get std 0.2 (logit std ~1.6).
    embed_std = 0.2 if args.tie_word_embeddings else 1.0
    weights = [("model.embed_tokens.weight", normal((vocab_size, h), embed_std))]
    for layer in range(args.num_layers):
        prefix = f"model.layers.{layer}."
        weights += [
            (prefix + "input_layernorm.weight", norm()),
            (prefix + "self_attn.q_proj.weight", linear(args.num_heads * d, h, 1.5)),
            (prefix + "self_attn.k_proj.weight", linear(args.num_kv_heads * d, h, 1.5)),
            (prefix + "self_attn.v_proj.weight", linear(args.num_kv_heads * d, h)),
            (prefix + "self_attn.o_proj.weight", linear(h, args.num_heads * d)),
            (prefix + "post_attention_layernorm.weight", norm()),
            (prefix + "mlp.gate_proj.weight", linear(i, h)),
            (prefix + "mlp.up_proj.weight", linear(i, h)),
            (prefix + "mlp.down_proj.weight", linear(h, i)),
        ]
    weights.append(("model.norm.weight", norm()))
    if not args.tie_word_embeddings:
        weights.append(("lm_head.weight", linear(vocab_size, h, 3.0)))
    return weights


def main(argv):
    args = parse_args(argv)
    if args.num_heads % args.num_kv_heads:
        raise SystemExit("--num-heads must be a multiple of --num-kv-heads")
    if args.head_dim % 2:
        raise SystemExit("--head-dim must be even (RoPE rotates pairs)")
    vocab_size, bos, eos = args.vocab_size, None, []
    if args.tokenizer != "none":
        tokenizer_size, bos, eos = tokenizer_facts(args.tokenizer)
        if vocab_size == 0:
            vocab_size = tokenizer_size
        elif vocab_size < tokenizer_size:
            raise SystemExit(f"--vocab-size {vocab_size} is smaller than the tokenizer's {tokenizer_size}")
    elif vocab_size == 0:
        raise SystemExit("--vocab-size is required with --tokenizer none")

    os.makedirs(args.out_dir, exist_ok=True)
    config = make_config(args, vocab_size, bos, eos)
    with open(os.path.join(args.out_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(args.out_dir, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": config["eos_token_id"]}, f, indent=2)
    if args.tokenizer != "none":
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copyfile(os.path.join(TOKENIZERS, args.tokenizer, name), os.path.join(args.out_dir, name))

    dtype = STORED_DTYPES[args.dtype]
    tensors = [(name, dtype, values) for name, values in make_weights(args, vocab_size)]
    hf_safetensors.write_checkpoint(args.out_dir, tensors, args.shards, metadata={"format": "pt"})


if __name__ == "__main__":
    main(sys.argv[1:])
