"""Loads the exported HF directories back into the PyTorch modules of model.py (fp32
compute from the stored bf16 weights), so every reported number is measured on the model
exactly as shipped."""
import json
import os

import torch

import model as M
import safetensors_io


def llama_config(hf):
    return M.LlamaConfig(
        vocab_size=hf["vocab_size"], hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"], num_hidden_layers=hf["num_hidden_layers"],
        num_attention_heads=hf["num_attention_heads"], num_key_value_heads=hf["num_key_value_heads"],
        max_position_embeddings=hf["max_position_embeddings"], rope_theta=hf["rope_theta"],
        rms_norm_eps=hf["rms_norm_eps"], bos_token_id=hf["bos_token_id"],
        eos_token_id=hf["eos_token_id"] if isinstance(hf["eos_token_id"], int) else hf["eos_token_id"][0])


def load_target(model_dir, device="cpu"):
    with open(os.path.join(model_dir, "config.json")) as f:
        hf = json.load(f)
    if hf.get("architectures") != ["LlamaForCausalLM"] or hf.get("tie_word_embeddings"):
        raise ValueError(f"{model_dir}: expected an untied LlamaForCausalLM")
    if hf.get("head_dim", hf["hidden_size"] // hf["num_attention_heads"]) != hf["hidden_size"] // hf["num_attention_heads"]:
        raise ValueError(f"{model_dir}: head_dim != hidden_size / num_attention_heads is not supported here")
    cfg = llama_config(hf)
    m = M.LlamaForCausalLM(cfg)
    state, _ = safetensors_io.load_file(os.path.join(model_dir, "model.safetensors"))
    m.load_state_dict(state, strict=True)
    return m.to(device).eval(), cfg


def load_eagle(eagle_dir, device="cpu"):
    with open(os.path.join(eagle_dir, "config.json")) as f:
        hf = json.load(f)
    cfg = llama_config(hf)
    head = M.EagleHead(cfg)
    state, _ = safetensors_io.load_file(os.path.join(eagle_dir, "model.safetensors"))
    head.load_state_dict(state, strict=True)
    return head.to(device).eval(), cfg
