#pragma once
// The shape of a paged KV cache, validated from the engine's pllm_kv_cache_spec;
// shared by attention_cpu and attention_cuda, which use the same layout per
// pool, per layer, K and V separately: [num_blocks, num_kv_heads, block_size, head_dim].

#include <cstdint>
#include <string>

#include "pagedllm/sdk.hpp"
#include "common/dtype_name.h"

namespace pagedllm::plugins {

struct CacheGeometry {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  int64_t element_size = 0;

  // Throws pllm::Error naming `plugin`: INVALID_ARGUMENT for a malformed
  // spec, UNSUPPORTED for a dtype other than f32, f16, bf16.
  static CacheGeometry from_spec(const pllm_kv_cache_spec& spec, const std::string& plugin) {
    auto invalid = [&](const std::string& message) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, plugin + ": kv cache spec: " + message);
    };
    pllm::require(&spec, plugin + ": kv cache spec");
    auto positive = [&](const char* name, int32_t v) {
      if (v <= 0) invalid(std::string(name) + " must be positive, got " + std::to_string(v));
    };
    positive("num_layers", spec.num_layers);
    positive("num_kv_heads", spec.num_kv_heads);
    positive("head_dim", spec.head_dim);
    positive("block_size", spec.block_size);
    if (spec.dtype != PLLM_DTYPE_F32 && spec.dtype != PLLM_DTYPE_F16 && spec.dtype != PLLM_DTYPE_BF16) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, plugin + ": KV cache dtype " + dtype_name(spec.dtype) +
                                                    " is not supported (use f32, f16 or bf16)");
    }
    CacheGeometry g;
    g.num_layers = spec.num_layers;
    g.num_kv_heads = spec.num_kv_heads;
    g.head_dim = spec.head_dim;
    g.block_size = spec.block_size;
    g.dtype = spec.dtype;
    g.element_size = pllm_dtype_size(spec.dtype);
    return g;
  }

  // Elements of one block of one layer, K or V: num_kv_heads * block_size * head_dim.
  int64_t block_elements() const { return int64_t(num_kv_heads) * block_size * head_dim; }
  int64_t block_bytes_per_layer() const { return block_elements() * element_size; }
  // What bytes_per_block reports: K and V of every layer.
  uint64_t bytes_per_block() const { return uint64_t(2) * uint64_t(num_layers) * uint64_t(block_bytes_per_layer()); }
};

}  // namespace pagedllm::plugins
