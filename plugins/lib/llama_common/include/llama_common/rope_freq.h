#pragma once
// RoPE's inverse frequencies, shared by the CPU and CUDA forwards (each turns
// them into angles its own way): HF Llama rotates pairs (i, i + d/2) of each
// head by the angle position * inv_freq[i].

#include <vector>

#include "llama_common/llama_config.h"

namespace pagedllm::llama {

// inv_freq[i] = theta^(-2i/d) for i in [0, d/2), then rope_scaling applied as
// in HF's modeling_rope_utils: linear divides by factor; llama3 divides the
// low frequencies (wavelength > original_context / low_freq_factor) by factor,
// keeps the high ones (wavelength < original_context / high_freq_factor) and
// interpolates smoothly in between; yarn keeps the frequencies that turn more
// than beta_fast times over the original context, divides those that turn fewer
// than beta_slow times by factor and ramps linearly between (its attention factor
// is LlamaConfig::attention_scale's); longrope (Phi-3) divides by its long factors
// when the model serves contexts past the original one (max_position_embeddings >
// original_max_position_embeddings, llama.cpp's rule with the context the config
// declares), by its short ones otherwise. For longrope transformers instead picks per
// forward call, by the sequence's length, and recomputes the cache when a sequence
// crosses the original length; a paged KV cache shared between sequences (and prefix
// caching) needs a key's rotation to depend on its position alone, so the choice
// here is per model. In double: HF's f32 inv_freq is an approximation of exactly this.
std::vector<double> rope_inv_freq(const LlamaConfig& config);

// Gemma 3's local layers (LlamaConfig::local_rope): theta = local_rope_theta, no scaling.
std::vector<double> local_rope_inv_freq(const LlamaConfig& config);

}  // namespace pagedllm::llama
