"""An HF LlamaForCausalLM directory (safetensors, config.json, tokenizer.json with a byte-level BPE) to a GGUF
file for llama.cpp, through the gguf package: what tools/bench/peers.sh feeds llama-server.

    hf_to_gguf.py MODEL_DIR OUT.gguf --type f16|q8_0|f32

q_proj / k_proj rows are permuted as llama.cpp's convert_hf_to_gguf.py does (each head's rotate-half pairs
interleaved, its RoPE being the GPT-J style one); norms stay f32; f16 / q8_0 apply to the 2-D matrices
(q8_0 through gguf.quants; rows not a multiple of 32 wide stay f16, as llama.cpp's converter does). The
vocabulary is the tokenizer's, padded with unused tokens to vocab_size.
"""
import argparse
import json
import os

import gguf
import numpy as np
import torch
from safetensors.torch import load_file


def permute(w, n_head, n_head_kv):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_tensors(model_dir):
    tensors = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            for key, value in load_file(os.path.join(model_dir, name)).items():
                tensors[key] = value.to(torch.float32).numpy()
    return tensors


# The Llama-3 pre-tokenizer's split (digits in groups of up to three), llama.cpp's "llama-bpe".
LLAMA3_SPLIT = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def pre_tokenizer_name(model_dir, pre):
    """llama.cpp's name for the tokenizer.json pre-tokenizer `pre`: "gpt-2" (byte-level with GPT-2's regex) or
    "llama-bpe" (Llama-3's split, then byte-level without a regex); anything else is refused, since llama.cpp
    would split the text differently from the model's own tokenizer."""
    steps = pre.get("pretokenizers", [pre]) if pre else []
    kinds = [step.get("type") for step in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if (kinds == ["Split", "ByteLevel"] and steps[0].get("pattern", {}).get("Regex") == LLAMA3_SPLIT
            and not steps[1].get("use_regex", True)):
        return "llama-bpe"
    raise SystemExit(f"{model_dir}/tokenizer.json: pre-tokenizer {json.dumps(pre)[:200]} has no llama.cpp equivalent "
                     "here (GPT-2's byte-level regex or Llama-3's split are converted)")


def add_tokenizer(writer, model_dir, config):
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    if tok["model"]["type"] != "BPE":
        raise SystemExit(f"{model_dir}/tokenizer.json: a {tok['model']['type']} model, only BPE is converted")
    vocab = dict(tok["model"]["vocab"])
    special = {t["id"] for t in tok.get("added_tokens", []) if t.get("special")}
    for t in tok.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
    size = config["vocab_size"]
    tokens = [f"[PAD{i}]" for i in range(size)]
    types = [gguf.TokenType.UNUSED] * size
    for text, i in vocab.items():
        if i < size:
            tokens[i] = text
            types[i] = gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre_tokenizer_name(model_dir, tok.get("pre_tokenizer")))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    if config.get("bos_token_id") is not None:
        writer.add_bos_token_id(config["bos_token_id"])
    if eos is not None:
        writer.add_eos_token_id(eos)
    writer.add_add_bos_token(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--type", choices=["f32", "f16", "q8_0"], default="f16")
    args = ap.parse_args()
    with open(os.path.join(args.model_dir, "config.json")) as f:
        c = json.load(f)
    if "LlamaForCausalLM" not in c.get("architectures", []):
        raise SystemExit("not a LlamaForCausalLM")
    heads, kv_heads = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    writer = gguf.GGUFWriter(args.out, "llama")
    writer.add_name(os.path.basename(os.path.normpath(args.model_dir)))
    writer.add_context_length(c["max_position_embeddings"])
    writer.add_embedding_length(c["hidden_size"])
    writer.add_block_count(c["num_hidden_layers"])
    writer.add_feed_forward_length(c["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(c["rms_norm_eps"])
    writer.add_rope_freq_base(c.get("rope_theta", 10000.0))
    writer.add_vocab_size(c["vocab_size"])
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[args.type]
    writer.add_file_type(file_type)
    add_tokenizer(writer, args.model_dir, c)

    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for key, value in load_tensors(args.model_dir).items():
        if key in names:
            name = names[key]
        else:
            parts = key.split(".")  # model.layers.N.<module>.<proj>.weight
            name = f"blk.{parts[2]}.{per_layer['.'.join(parts[3:-1])]}.weight"
        if key.endswith("q_proj.weight"):
            value = permute(value, heads, heads)
        elif key.endswith("k_proj.weight"):
            value = permute(value, heads, kv_heads)
        if value.ndim == 1 or args.type == "f32":
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float32))
        elif args.type == "f16" or value.shape[-1] % 32:  # q8_0 blocks are 32 wide (llama.cpp falls back too)
            writer.add_tensor(name, np.ascontiguousarray(value, dtype=np.float16))
        else:
            qtype = gguf.GGMLQuantizationType.Q8_0
            writer.add_tensor(name, gguf.quants.quantize(np.ascontiguousarray(value, dtype=np.float32), qtype),
                              raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
