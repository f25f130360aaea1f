"""HF transformers as the model oracle: random-weight Llama checkpoints built and
saved by transformers, and their logits and greedy continuations computed by
transformers' LlamaForCausalLM on the CPU. Nothing here is pagedllm code: the
expected values of the fidelity tests come from transformers alone.

    scripts/python.sh tools/testing/hf_oracle.py make --preset NAME OUT_DIR
    scripts/python.sh tools/testing/hf_oracle.py logits --model DIR --input IN.json --output OUT.json
    scripts/python.sh tools/testing/hf_oracle.py greedy --model DIR --input IN.json --output OUT.json
    scripts/python.sh tools/testing/hf_oracle.py suite --input IN.json --output OUT.json
    scripts/python.sh tools/testing/hf_oracle.py presets

make: the preset's family's model (LlamaForCausalLM, MistralForCausalLM,
Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM:
"family" in the preset, llama when absent)
with seeded random weights, written by
`save_pretrained` (safetensors; sharded where the preset says so) in the
preset's dtype, by whichever transformers runs this script: .venv's 4.57.1
writes config.json's 4.x form (rope_theta, rope_scaling, torch_dtype),
.venv-transformers5's 5.25.0 its 5.x form (rope_parameters, dtype), plus the byte-level tokenizer of
tests/fixtures/tokenizer/bytelevel_llama3 (ids 0..963; every preset's
vocabulary is at least that). The presets are scaled-down shapes of real
checkpoints (few layers, small hidden) that keep their head ratios and features;
`presets` prints them. HF's default init (normal(0, initializer_range)) gives
near-constant logits at these sizes, so initializer_range is 1/sqrt(hidden)
(unit-variance projections), the norm weights are drawn from [0.6, 1.4] (never
all ones, so a forgotten norm weight shows) and the output embedding is scaled
so logits have a standard deviation of about 3: greedy continuations depend on
the prompt and top-2 margins are rarely near ties. Biases (HF initialises them
to zero) are drawn from normal(0, 0.5), so a forgotten bias shows too.

logits: IN.json {"sequences": [[ids...], ...], "rows": [[first, end], ...]?}.
Runs each sequence through the model (one forward, no cache) and writes
OUT.json {"vocab_size": V, "rows": [[seq, position], ...], "logits_file": "..."}
and the raw float32 logits of those rows, row after row, to OUT.json's name with
.f32 appended (little-endian, V values a row). "rows" picks positions
[first, end) of each sequence (default: all). With --json the logits and the
final-norm hidden states go into OUT.json itself as {"logits": [seq][pos][V],
"hidden": [seq][pos][H]} (llama_reference.py's format, for small models).
With --preset NAME [--seed S] the model is first made into --model's directory
(one process instead of two).

greedy: IN.json {"prompts": [[ids...], ...], "max_new_tokens": N}. Greedy
decoding with transformers' KV cache (DynamicCache), one token a step, never
stopping early (as the engine's ignore_eos). OUT.json {"outputs": [[ids]],
"margins": [[top1 - top2 logit of every step]]}, plus the logits of every step
as in `logits` (rows [seq, prompt_len - 1 + step]) when --with-logits is given.

suite: IN.json {"max_new_tokens": N, "models": [{"dir": DIR, "prompts": [...],
"preset": NAME?, "seed": S?}]}: for each model, `make` into DIR when a preset
is named, then `greedy` with logits. OUT.json {"models": [greedy's OUT.json of
each]}, the logits of model i in OUT.json.i.f32. A model entry with
"sequences" also gets `logits --json`'s "logits" and "hidden" for them. One process for all models:
importing torch and transformers costs seconds, a tiny model's work far less.

--dtype float32 (default) or float64 computes in that dtype; checkpoints stored
in bfloat16/float16 are widened exactly on load. A compressed-tensors checkpoint
(config.json's quantization_config) is decompressed on load by transformers
through the compressed-tensors package (weights q * scale); a W8A8 one's
activations are then fake-quantized per token before every quantized Linear,
unless `logits`/`greedy` get --dense-activations. torch runs single-threaded
(--threads) so tests sharing a machine stay predictable.
"""
import argparse
import json
import math
import os
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOKENIZER_DIR = os.path.join(ROOT, "tests", "fixtures", "tokenizer", "bytelevel_llama3")
TOKENIZER_VOCAB = 964
BOS, EOS = 959, [960, 963]

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}

# Scaled-down shapes of real checkpoints: the head counts (or their ratio), rope
# settings, tying and norm epsilon of the original; hidden and intermediate
# shrunk by the same factor, 2-3 layers.
PRESETS = {
    # meta-llama/Llama-3.2-1B: hidden 2048, 32 heads / 8 KV heads (GQA 4:1),
    # head_dim 64, intermediate 8192, rope_theta 500000, llama3 rope scaling
    # (factor 32, low/high 1/4, original 8192), tied embeddings, vocab 128256, bf16.
    "llama32": dict(hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                    intermediate_size=512, num_hidden_layers=3, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE,
                    tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=131072,
                    vocab_size=TOKENIZER_VOCAB, dtype="bfloat16"),
    # meta-llama/Llama-2-7b-hf: hidden 4096, 32 heads, MHA, head_dim 128,
    # intermediate 11008, rope_theta 10000, untied, vocab 32000 (padded past
    # the tokenizer's here too), f16. Sharded, as the real one is.
    "llama2": dict(hidden_size=128, num_attention_heads=4, num_key_value_heads=4, head_dim=32,
                   intermediate_size=344, num_hidden_layers=2, rope_theta=10000.0, rope_scaling=None,
                   tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=4096,
                   vocab_size=1000, dtype="float16", max_shard_size="200KB"),
    # TinyLlama/TinyLlama-1.1B: hidden 2048, 32 heads / 4 KV heads (8:1),
    # head_dim 64, intermediate 5632, rope_theta 10000, untied, f32.
    "tinyllama": dict(hidden_size=256, num_attention_heads=32, num_key_value_heads=4, head_dim=8,
                      intermediate_size=704, num_hidden_layers=2, rope_theta=10000.0, rope_scaling=None,
                      tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=2048,
                      vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # HuggingFaceTB/SmolLM2-135M: hidden 576, 9 heads / 3 KV heads, head_dim 64,
    # intermediate 1536, rope_theta 100000, tied embeddings, vocab 49152, bf16.
    "smollm2": dict(hidden_size=144, num_attention_heads=9, num_key_value_heads=3, head_dim=16,
                    intermediate_size=384, num_hidden_layers=3, rope_theta=100000.0, rope_scaling=None,
                    tie_word_embeddings=True, rms_norm_eps=1e-5, max_position_embeddings=8192,
                    vocab_size=TOKENIZER_VOCAB, dtype="bfloat16"),
    # Linear RoPE scaling over a base that is not the default (as long-context fine-tunes of
    # Llama 2 ship it): factor 4, rope_theta 250000; 6 heads over 2, untied, f32.
    "linear_rope": dict(hidden_size=96, num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                        intermediate_size=256, num_hidden_layers=2, rope_theta=250000.0,
                        rope_scaling={"rope_type": "linear", "factor": 4.0}, tie_word_embeddings=False,
                        rms_norm_eps=1e-5, max_position_embeddings=16384, vocab_size=TOKENIZER_VOCAB,
                        dtype="float32"),
    # An explicit head_dim != hidden / heads (as Qwen3 and Gemma configs have;
    # LlamaConfig honours it): hidden 96, 4 heads of 32 over 2 KV heads.
    "head_dim": dict(hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0, rope_scaling=None,
                     tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=2048,
                     vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # Qwen/Qwen2.5-0.5B-Instruct: hidden 896, 14 heads / 2 KV heads (7:1), head_dim 64, intermediate
    # 4864, q/k/v biases, rope_theta 1000000, tied, rms_norm_eps 1e-6, sliding_window 32768 with
    # use_sliding_window false (as its config.json has it), bf16.
    "qwen25": dict(family="qwen2", hidden_size=224, num_attention_heads=14, num_key_value_heads=2,
                   intermediate_size=608, num_hidden_layers=2, rope_theta=1000000.0, rope_scaling=None,
                   tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=32768,
                   use_sliding_window=False, sliding_window=32768, max_window_layers=21,
                   vocab_size=TOKENIZER_VOCAB, dtype="bfloat16"),
    # Qwen/Qwen3-0.6B: hidden 1024, 16 heads / 8 KV heads, head_dim 128 (not hidden / heads), per-head
    # q/k RMSNorm, no biases, intermediate 3072, rope_theta 1000000, tied, rms_norm_eps 1e-6, bf16.
    "qwen3": dict(family="qwen3", hidden_size=128, num_attention_heads=8, num_key_value_heads=4, head_dim=32,
                  intermediate_size=384, num_hidden_layers=2, rope_theta=1000000.0, rope_scaling=None,
                  tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=40960,
                  attention_bias=False, vocab_size=TOKENIZER_VOCAB, dtype="bfloat16"),
    # Qwen3 with attention_bias (q/k/v and o_proj biases next to the q/k norms), f32. This and the next
    # have head_dim 32, one of attention_cuda's head sizes, for the CUDA tests.
    "qwen3_bias": dict(family="qwen3", hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       intermediate_size=256, num_hidden_layers=2, rope_theta=1000000.0, rope_scaling=None,
                       tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=40960,
                       attention_bias=True, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # mistralai/Mistral-7B-Instruct-v0.3: hidden 4096, 32 heads / 8 KV heads, head_dim 128,
    # intermediate 14336, rope_theta 1000000, sliding_window null, untied, rms_norm_eps 1e-5, bf16.
    "mistral": dict(family="mistral", hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=16,
                    intermediate_size=448, num_hidden_layers=2, rope_theta=1000000.0, sliding_window=None,
                    tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=32768,
                    vocab_size=TOKENIZER_VOCAB, dtype="bfloat16"),
    # A Llama with attention_bias and mlp_bias (q/k/v/o and gate/up/down biases), f32.
    "llama_bias": dict(hidden_size=96, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0, rope_scaling=None,
                       tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=4096,
                       attention_bias=True, mlp_bias=True, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # mistralai/Mistral-7B-v0.1's sliding window (4096 there: every layer sees its last 4096 keys), here 7
    # keys so the prompts reach far past it; f32, head_dim 32 (attention_cuda's).
    "mistral_window": dict(family="mistral", hidden_size=128, num_attention_heads=8, num_key_value_heads=2,
                           head_dim=32, intermediate_size=448, num_hidden_layers=2, rope_theta=10000.0,
                           sliding_window=7, tie_word_embeddings=False, rms_norm_eps=1e-5,
                           max_position_embeddings=32768, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # Qwen2 with use_sliding_window: layers from max_window_layers (1) on slide over 5 keys, layer 0 is full.
    "qwen2_window": dict(family="qwen2", hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         intermediate_size=256, num_hidden_layers=2, rope_theta=1000000.0, rope_scaling=None,
                         use_sliding_window=True, sliding_window=5, max_window_layers=1, tie_word_embeddings=True,
                         rms_norm_eps=1e-6, max_position_embeddings=32768, vocab_size=TOKENIZER_VOCAB,
                         dtype="float32"),
    # Qwen/Qwen2.5-7B-Instruct's long-context setting, as its model card writes it into config.json: YaRN,
    # factor 4 over the original 32768 positions, base 1000000. With head_dim 32 the ramp runs over pairs 5
    # to 10 of 16: pairs below it keep their frequency, those above it are divided by 4, and every score is
    # scaled by the attention factor (0.1 ln 4 + 1)^2; f32, head_dim 32 (attention_cuda's).
    "qwen2_yarn": dict(family="qwen2", hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       intermediate_size=256, num_hidden_layers=2, rope_theta=1000000.0,
                       rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
                       tie_word_embeddings=True, rms_norm_eps=1e-6, max_position_embeddings=131072,
                       vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # YaRN with every optional key (DeepSeek's mscale pair, its own betas, an unrounded ramp: truncate false as
    # gpt-oss writes it) on Qwen3: attention factor (0.1 * 1.0 ln 8 + 1) / (0.1 * 0.8 ln 8 + 1), a ramp from
    # pair 4.53 to 10.05 of 16 over an original 4096 positions, base 10000.
    "qwen3_yarn_mscale": dict(family="qwen3", hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=32, intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0,
                              rope_scaling={"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
                                            "beta_fast": 48.0, "beta_slow": 2.0, "mscale": 1.0,
                                            "mscale_all_dim": 0.8, "truncate": False},
                              tie_word_embeddings=False, rms_norm_eps=1e-6, max_position_embeddings=32768,
                              attention_bias=False, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # mistralai/Mixtral-8x7B-v0.1: hidden 4096, 32 heads / 8 KV heads, head_dim 128, 8 experts of 14336,
    # top-2 (renormalised), rope_theta 1000000, untied. f32 rather than its bf16, here and in the next: a
    # bf16 forward's rounding can swap two near experts, which no tolerance on the logits absorbs.
    "mixtral": dict(family="mixtral", hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                    intermediate_size=192, num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2,
                    rope_theta=1000000.0, sliding_window=None, tie_word_embeddings=False, rms_norm_eps=1e-5,
                    max_position_embeddings=32768, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # Qwen/Qwen3-30B-A3B: hidden 2048, 32 heads / 4 KV heads, head_dim 128, q/k norms, 128 experts of 768,
    # top-8 with norm_topk_prob, untied. Here 16 experts, top 4, and layer 1 dense (mlp_only_layers), so
    # that both kinds of layer meet in one model.
    "qwen3_moe": dict(family="qwen3_moe", hidden_size=128, num_attention_heads=8, num_key_value_heads=2, head_dim=32,
                      intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2, num_experts=16,
                      num_experts_per_tok=4, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[1],
                      rope_theta=1000000.0, rope_scaling=None, tie_word_embeddings=False, rms_norm_eps=1e-6,
                      max_position_embeddings=40960, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # google/gemma-3-1b-it: hidden 1152, 4 heads / 1 KV head, head_dim 256, intermediate 6912, GeGLU-tanh,
    # (1 + w) norms around both sublayers, q/k norms, five local layers (sliding_window 512, rope_local_base_freq
    # 10000) to one global (rope_theta 1000000; gemma-3-4b's global layers add linear rope_scaling 8),
    # query_pre_attn_scalar 256, tied, rms_norm_eps 1e-6, bf16. Here every third layer global (layers 2 and 5),
    # a window of 5 keys, linear scaling 8 on the global layers, query_pre_attn_scalar 24 (not head_dim, so
    # that a default softmax scale would show) and final_logit_softcapping 5 (Gemma 3 ships none; Gemma 2 has
    # 30), small enough to bend the logits of standard deviation ~3; f32, head_dim 32 (attention_cuda's).
    "gemma3": dict(family="gemma3", hidden_size=128, num_attention_heads=4, num_key_value_heads=1, head_dim=32,
                   intermediate_size=384, num_hidden_layers=6, sliding_window=5, sliding_window_pattern=3,
                   rope_theta=1000000.0, rope_local_base_freq=10000.0,
                   rope_scaling={"rope_type": "linear", "factor": 8.0}, query_pre_attn_scalar=24,
                   final_logit_softcapping=5.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
                   max_position_embeddings=32768, vocab_size=TOKENIZER_VOCAB, dtype="float32"),
    # microsoft/Phi-3-mini-4k-instruct: hidden 3072, 32 heads (Phi-3-medium: 40 over 10 KV heads), head_dim 96,
    # fused qkv_proj and gate_up_proj, intermediate 8192, rope_theta 10000, sliding_window 2047, untied,
    # rms_norm_eps 1e-5, bf16. Here 4 heads over 2 (so that the fused tensor's k and v blocks are narrower
    # than q), a window of 7 keys, f32, head_dim 32 (attention_cuda's).
    "phi3": dict(family="phi3", hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0, rope_scaling=None,
                 sliding_window=7, tie_word_embeddings=False, rms_norm_eps=1e-5, max_position_embeddings=4096,
                 original_max_position_embeddings=4096, pad_token_id=0, vocab_size=TOKENIZER_VOCAB,
                 dtype="float32"),
    # microsoft/Phi-3-mini-128k-instruct's longrope (max_position_embeddings 131072 over an original 4096,
    # short and long factors per frequency, the attention factor sqrt(1 + ln 32 / ln 4096) from their ratio),
    # here max 64 over an original 8, so every prompt (13 to 30 tokens) is past the original context and
    # transformers rotates all of it by the long factors (attention factor sqrt(2)).
    "phi3_longrope": dict(family="phi3", hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                          intermediate_size=256, num_hidden_layers=2, rope_theta=10000.0,
                          rope_scaling={"type": "longrope",
                                        "short_factor": [1.0 + 0.05 * i for i in range(16)],
                                        "long_factor": [1.0 + 0.6 * i for i in range(16)]},
                          sliding_window=None, tie_word_embeddings=False, rms_norm_eps=1e-5,
                          max_position_embeddings=64, original_max_position_embeddings=8, pad_token_id=0,
                          vocab_size=TOKENIZER_VOCAB, dtype="float32"),
}

# The transformers classes of each preset family: (config, model).
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
    "phi3": ("Phi3Config", "Phi3ForCausalLM"),
}

# Families whose RMSNorm multiplies by (1 + w) and whose activation is their own hidden_activation.
GEMMA_FAMILIES = {"gemma3"}


def import_torch(threads):
    import torch
    torch.set_num_threads(threads)
    return torch


def make(preset_name, out_dir, seed, threads):
    torch = import_torch(threads)
    import transformers

    preset = dict(PRESETS[preset_name])
    dtype = preset.pop("dtype")
    max_shard_size = preset.pop("max_shard_size", "5GB")
    family = preset.pop("family", "llama")
    config_class, model_class = (getattr(transformers, name) for name in FAMILIES[family])
    hidden = preset["hidden_size"]
    if config_class is transformers.LlamaConfig:
        preset = {"attention_bias": False, "mlp_bias": False, **preset}
    gemma = family in GEMMA_FAMILIES
    if not gemma:
        preset["hidden_act"] = "silu"
    config = config_class(**preset, initializer_range=1.0 / math.sqrt(hidden), bos_token_id=BOS, eos_token_id=EOS)
    torch.manual_seed(seed)
    model = model_class(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                # Gemma stores w of its (1 + w): the same scales either way.
                param.uniform_(-0.4, 0.4) if gemma else param.uniform_(0.6, 1.4)
            elif name.endswith(".bias"):
                param.normal_(0.0, 0.5)
        # Logits of standard deviation ~3 over unit-RMS normed hidden states.
        model.lm_head.weight.normal_(0.0, 3.0 / math.sqrt(hidden))
        if not config.tie_word_embeddings:
            model.model.embed_tokens.weight.normal_(0.0, 1.0)
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(out_dir, safe_serialization=True, max_shard_size=max_shard_size)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER_DIR, name), os.path.join(out_dir, name))


def load(model_dir, dtype_name, threads, dense_activations=False):
    torch = import_torch(threads)
    from transformers import AutoModelForCausalLM
    dtype = {"float32": torch.float32, "float64": torch.float64}[dtype_name]
    # eager: the attention equations written out (softmax(QK^T / sqrt(d) + mask) V). A compressed-tensors
    # checkpoint (config.json's quantization_config) is decompressed by transformers through the
    # compressed-tensors package: weights q * scale in dtype, and a W8A8 checkpoint's activations fake-quantized
    # per token before every quantized Linear, unless dense_activations turns that off.
    # Decompressed while loading (run_compressed=False): transformers would otherwise decompress on the first
    # call of the whole model, not of model.model, which every_position calls.
    extra = {}
    with open(os.path.join(model_dir, "config.json")) as f:
        if "quantization_config" in json.load(f):
            from transformers import CompressedTensorsConfig
            extra["quantization_config"] = CompressedTensorsConfig(run_compressed=False)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="eager", **extra).eval()
    if dense_activations:
        from compressed_tensors.quantization import disable_quantization
        model.apply(disable_quantization)
    return torch, model


def write_rows(output, rows, logits_rows, vocab):
    import numpy as np
    data = np.ascontiguousarray(np.stack(logits_rows).astype("<f4")) if logits_rows else np.zeros((0, vocab), "<f4")
    logits_file = output + ".f32"
    data.tofile(logits_file)
    return {"vocab_size": vocab, "rows": rows, "logits_file": logits_file}


def lm_logits(model, hidden):
    """lm_head over final-norm hidden states, soft-capped where the model's forward caps them (Gemma)."""
    logits = model.lm_head(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap is not None:
        logits = (logits / cap).tanh() * cap
    return logits


def every_position(torch, model, sequences):
    """Logits and final-norm hidden states of every position, as nested lists."""
    all_logits, all_hidden = [], []
    with torch.no_grad():
        for seq in sequences:
            hidden = model.model(input_ids=torch.tensor([seq], dtype=torch.long)).last_hidden_state
            all_logits.append(lm_logits(model, hidden)[0].double().numpy().tolist())
            all_hidden.append(hidden[0].double().numpy().tolist())
    return all_logits, all_hidden


def logits(args):
    if args.preset:
        make(args.preset, args.model, args.seed, args.threads)
    torch, model = load(args.model, args.dtype, args.threads, args.dense_activations)
    with open(args.input) as f:
        spec = json.load(f)
    sequences = spec["sequences"]
    ranges = spec.get("rows") or [[0, len(s)] for s in sequences]
    if args.json:
        out_logits, out_hidden = every_position(torch, model, sequences)
        result = {"logits": out_logits, "hidden": out_hidden}
    else:
        rows, logits_rows = [], []
        with torch.no_grad():
            for i, seq in enumerate(sequences):
                ids = torch.tensor([seq], dtype=torch.long)
                hidden = model.model(input_ids=ids).last_hidden_state  # after the final norm
                all_logits = lm_logits(model, hidden)[0].double().numpy()
                first, end = ranges[i]
                for p in range(first, end):
                    rows.append([i, p])
                    logits_rows.append(all_logits[p])
        result = write_rows(args.output, rows, logits_rows, model.config.vocab_size)
    with open(args.output, "w") as f:
        json.dump(result, f)


def greedy_decode(torch, model, prompts, steps):
    """Greedy tokens, top-2 margins, and the [seq, position] rows and logits of every step."""
    from transformers import DynamicCache
    outputs, margins, rows, logits_rows = [], [], [], []
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            cache = DynamicCache()
            ids = torch.tensor([prompt], dtype=torch.long)
            out_ids, out_margins = [], []
            for step in range(steps):
                out = model(input_ids=ids, past_key_values=cache, use_cache=True)
                last = out.logits[0, -1].double()
                top2 = torch.topk(last, 2)
                token = int(top2.indices[0])
                out_ids.append(token)
                out_margins.append(float(top2.values[0] - top2.values[1]))
                rows.append([i, len(prompt) - 1 + step])
                logits_rows.append(last.numpy())
                cache = out.past_key_values
                ids = torch.tensor([[token]], dtype=torch.long)
            outputs.append(out_ids)
            margins.append(out_margins)
    return outputs, margins, rows, logits_rows


def greedy(args):
    torch, model = load(args.model, args.dtype, args.threads, args.dense_activations)
    with open(args.input) as f:
        spec = json.load(f)
    outputs, margins, rows, logits_rows = greedy_decode(torch, model, spec["prompts"], int(spec["max_new_tokens"]))
    result = {"outputs": outputs, "margins": margins}
    if args.with_logits:
        result.update(write_rows(args.output, rows, logits_rows, model.config.vocab_size))
    with open(args.output, "w") as f:
        json.dump(result, f)


def suite(args):
    """`make` (where asked) and `greedy --with-logits` for several models in one process:
    starting Python with torch and transformers costs seconds, a tiny model's work far less."""
    with open(args.input) as f:
        spec = json.load(f)
    results = []
    for i, entry in enumerate(spec["models"]):
        if "preset" in entry:
            make(entry["preset"], entry["dir"], int(entry.get("seed", 0)), args.threads)
        torch, model = load(entry["dir"], args.dtype, args.threads)
        outputs, margins, rows, logits_rows = greedy_decode(torch, model, entry.get("prompts", []),
                                                            int(spec.get("max_new_tokens", 0)))
        result = {"outputs": outputs, "margins": margins}
        result.update(write_rows(f"{args.output}.{i}", rows, logits_rows, model.config.vocab_size))
        if "sequences" in entry:
            result["logits"], result["hidden"] = every_position(torch, model, entry["sequences"])
        results.append(result)
    with open(args.output, "w") as f:
        json.dump({"models": results}, f)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("out_dir")
    m.add_argument("--preset", required=True, choices=sorted(PRESETS))
    m.add_argument("--seed", type=int, default=0)
    sub.add_parser("presets")
    u = sub.add_parser("suite")
    u.add_argument("--input", required=True)
    u.add_argument("--output", required=True)
    u.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    for name in ("logits", "greedy"):
        s = sub.add_parser(name)
        s.add_argument("--model", required=True)
        s.add_argument("--input", required=True)
        s.add_argument("--output", required=True)
        s.add_argument("--dtype", choices=["float32", "float64"], default="float32")
        s.add_argument("--dense-activations", action="store_true",
                       help="a compressed-tensors W8A8 checkpoint's activations not quantized (its weights only)")
        if name == "logits":
            s.add_argument("--json", action="store_true", help="logits and hidden states inline (small models)")
            s.add_argument("--preset", choices=sorted(PRESETS), help="`make` the model into --model first")
            s.add_argument("--seed", type=int, default=0)
        else:
            s.add_argument("--with-logits", action="store_true")
    for s in list(sub.choices.values()):
        s.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    if args.command == "make":
        make(args.preset, args.out_dir, args.seed, args.threads)
    elif args.command == "presets":
        json.dump(PRESETS, sys.stdout, indent=2)
        print()
    elif args.command == "suite":
        suite(args)
    elif args.command == "logits":
        logits(args)
    else:
        greedy(args)


if __name__ == "__main__":
    main(sys.argv[1:])
