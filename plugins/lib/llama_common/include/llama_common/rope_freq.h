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
// interpolates smoothly in between. In double: HF's f32 inv_freq is an
// approximation of exactly this.
std::vector<double> rope_inv_freq(const LlamaConfig& config);

}  // namespace pagedllm::llama
