"""Exports a trained pagedllm-tiny checkpoint (final.pt from train.py) as a standard HF
model directory: config.json (LlamaForCausalLM), model.safetensors (bf16 by default),
generation_config.json, tokenizer.json, tokenizer_config.json.

    scripts/python.sh tools/train/export_hf.py --ckpt build-train/target/final.pt \
        --tokenizer build-train/tokenizer --out models/pagedllm-tiny

The EAGLE head is exported by train_eagle.py with export_eagle() below.
"""
import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DTYPES = {"bf16": ("bfloat16", "BF16"), "f16": ("float16", "F16")}


def hf_llama_config(cfg, torch_dtype):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg["vocab_size"],
        "hidden_size": cfg["hidden_size"],
        "intermediate_size": cfg["intermediate_size"],
        "num_hidden_layers": cfg["num_hidden_layers"],
        "num_attention_heads": cfg["num_attention_heads"],
        "num_key_value_heads": cfg["num_key_value_heads"],
        "head_dim": cfg["hidden_size"] // cfg["num_attention_heads"],
        "hidden_act": "silu",
        "max_position_embeddings": cfg["max_position_embeddings"],
        "initializer_range": cfg["initializer_range"],
        "rms_norm_eps": cfg["rms_norm_eps"],
        "rope_theta": cfg["rope_theta"],
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": cfg["bos_token_id"],
        "eos_token_id": cfg["eos_token_id"],
        "torch_dtype": torch_dtype,
    }


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


def convert(torch, state, dtype):
    target = torch.bfloat16 if dtype == "bf16" else torch.float16
    return {k: v.detach().to(torch.float32).to(target).contiguous() for k, v in state.items()}


def export_target(torch, ckpt_path, tokenizer_dir, out, dtype="bf16"):
    import safetensors_io
    ck = torch.load(ckpt_path, map_location="cpu")
    cfg = ck["config"]
    state = ck["model"]
    expected = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"}
    missing = expected - set(state)
    if missing:
        raise SystemExit(f"{ckpt_path}: not a LlamaForCausalLM state_dict (missing {sorted(missing)})")
    os.makedirs(out, exist_ok=True)
    safetensors_io.save_file(convert(torch, state, dtype), os.path.join(out, "model.safetensors"),
                             metadata={"format": "pt"})
    write_json(os.path.join(out, "config.json"), hf_llama_config(cfg, DTYPES[dtype][0]))
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    eos = [cfg["eos_token_id"]]
    # <|im_end|> ends a ChatML assistant turn (the chat template); the model never saw it.
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        added = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
    if "<|im_end|>" in added:
        eos.append(added["<|im_end|>"])
    write_json(os.path.join(out, "generation_config.json"), {
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": eos, "pad_token_id": cfg["eos_token_id"],
        "do_sample": True, "temperature": 0.6, "top_p": 0.95, "max_length": cfg["max_position_embeddings"],
    })
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(out, name))
    assert len(vocab) == cfg["vocab_size"]
    return cfg


def export_eagle(torch, head_state, cfg, target_dir_name, out, extra, dtype="bf16"):
    """EAGLE-1 checkpoint layout: fc.weight, fc.bias, layers.0.* (no embed_tokens, no lm_head:
    both are the target's, shared). config.json carries the Llama fields of the one layer."""
    import safetensors_io
    allowed = ("fc.", "layers.0.")
    bad = [k for k in head_state if not k.startswith(allowed)]
    if bad:
        raise SystemExit(f"unexpected EAGLE parameters: {bad}")
    os.makedirs(out, exist_ok=True)
    safetensors_io.save_file(convert(torch, head_state, dtype), os.path.join(out, "model.safetensors"),
                             metadata={"format": "pt"})
    config = hf_llama_config(cfg, DTYPES[dtype][0])
    config["num_hidden_layers"] = 1
    config["eagle"] = {
        "version": 1,
        "target_model": target_dir_name,
        "shares_target_embed_tokens": True,
        "shares_target_lm_head": True,
        "feature": "target final hidden state after model.norm (the input of lm_head)",
        "input": "fc(cat(embed_tokens(token[t+1]), feature[t])); layer 0 has no input_layernorm",
        "output": "predicted feature[t+1], fed to the target's lm_head; no final norm",
        "positions": "the input at t has RoPE position t (the position of feature[t] in the target)",
    }
    config.update(extra)
    write_json(os.path.join(out, "config.json"), config)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="final.pt written by train.py")
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json, tokenizer_config.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = ap.parse_args()
    import torch
    cfg = export_target(torch, args.ckpt, args.tokenizer, args.out, args.dtype)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {args.out}: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
          f"{total / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
