#pragma once
// Rotary position embeddings as HF Llama applies them: rotate_half pairs
// (i, i + d/2) of each head by the angle position * inv_freq[i].

#include <cstdint>
#include <vector>

#include "plugins/llama_cpu/llama_config.h"

namespace pagedllm::llama_cpu {

// inv_freq[i] = theta^(-2i/d) for i in [0, d/2), then rope_scaling applied as
// in HF's modeling_rope_utils: linear divides by factor; llama3 divides the
// low frequencies (wavelength > original_context / low_freq_factor) by factor,
// keeps the high ones (wavelength < original_context / high_freq_factor) and
// interpolates smoothly in between. In double: HF's f32 inv_freq is an
// approximation of exactly this.
std::vector<double> rope_inv_freq(const LlamaConfig& config);

// cos[t * half + i] and sin[...] of positions[t] * inv_freq[i], t in [0, rows):
// computed once per forward (angles in double), shared by every layer.
void rope_tables(const std::vector<double>& inv_freq, const int32_t* positions, int64_t rows, float* cos, float* sin);

// Rotates `num_heads` consecutive heads of head_dim floats at the start of each
// of `rows` rows (row t at data + t * row_stride) by row t's angles.
void apply_rope(float* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim, const float* cos,
                const float* sin);

}  // namespace pagedllm::llama_cpu
