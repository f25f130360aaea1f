#pragma once
// Rotary position embeddings on the CPU, from the inverse frequencies of
// llama_common/rope_freq.h.

#include <cstdint>
#include <vector>

#include "llama_common/rope_freq.h"

namespace pagedllm::llama_cpu {

// cos[t * half + i] and sin[...] of positions[t] * inv_freq[i], t in [0, rows):
// computed once per forward (angles in double), shared by every layer.
void rope_tables(const std::vector<double>& inv_freq, const int32_t* positions, int64_t rows, float* cos, float* sin);

// Rotates `num_heads` consecutive heads of head_dim floats at the start of each
// of `rows` rows (row t at data + t * row_stride) by row t's angles.
void apply_rope(float* data, int64_t rows, int64_t row_stride, int64_t num_heads, int64_t head_dim, const float* cos,
                const float* sin);

}  // namespace pagedllm::llama_cpu
