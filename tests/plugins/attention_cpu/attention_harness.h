#pragma once
// Test harness for the attention plugins: loads the real .so through the
// host's registry, wraps its C table in throwing calls, and builds paged
// batches together with the dense data a plain reference attention needs.
// attention_cuda's tests (tests/plugins/attention_cuda) use it too.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"
#include "plugins/attention_cpu/dtype_convert.h"

namespace attention_test {

using pagedllm::attention_cpu::bf16_to_f32;
using pagedllm::attention_cpu::f16_to_f32;
using pagedllm::attention_cpu::f32_to_bf16;
using pagedllm::attention_cpu::f32_to_f16;

inline std::shared_ptr<pagedllm::PluginLibrary> attention_library(const std::string& name = "attention_cpu") {
  static pagedllm::PluginRegistry registry({PAGEDLLM_BINARY_DIR "/plugins"});
  return registry.load(name, PLLM_PLUGIN_KIND_ATTENTION, "attention.plugin");
}

// The plugin behind its C table; every failed call throws PluginCallError.
class Backend {
 public:
  explicit Backend(const std::string& options_json, pllm_device device = {PLLM_DEVICE_CPU, 0},
                   const std::string& plugin = "attention_cpu") {
    pllm_attention_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options_json.c_str();
    args.device = device;
    instance_ =
        pagedllm::create_plugin_instance<pllm_attention_api, pllm_attention_backend>(attention_library(plugin), args);
  }

  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) {
    uint64_t bytes = 0;
    call([&](pllm_error* e) { return api().bytes_per_block(instance_.get(), &spec, &bytes, e); }, "bytes_per_block");
    return bytes;
  }
  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, int64_t host_blocks) {
    call([&](pllm_error* e) { return api().allocate_cache(instance_.get(), &spec, device_blocks, host_blocks, e); },
         "allocate_cache");
  }
  void plan(const pllm_batch& batch) {
    call([&](pllm_error* e) { return api().plan(instance_.get(), &batch, e); }, "plan");
  }
  void run(int32_t layer, const pllm_attention_layer_args& args) {
    call([&](pllm_error* e) { return api().run(instance_.get(), layer, &args, e); }, "run");
  }
  void copy_blocks(const std::vector<pllm_block_copy>& pairs) {
    call([&](pllm_error* e) { return api().copy_blocks(instance_.get(), pairs.data(), int64_t(pairs.size()), e); },
         "copy_blocks");
  }
  void swap_out(const std::vector<pllm_block_copy>& pairs) {
    call([&](pllm_error* e) { return api().swap_out(instance_.get(), pairs.data(), int64_t(pairs.size()), e); },
         "swap_out");
  }
  void swap_in(const std::vector<pllm_block_copy>& pairs) {
    call([&](pllm_error* e) { return api().swap_in(instance_.get(), pairs.data(), int64_t(pairs.size()), e); },
         "swap_in");
  }
  // The optional SDK 1.1 slot; fails the test when the plugin leaves it NULL.
  pllm_device_memory memory_info() {
    if (!api().memory_info) throw std::logic_error("the plugin has no memory_info");
    pllm_device_memory info{};
    info.struct_size = sizeof info;
    call([&](pllm_error* e) { return api().memory_info(instance_.get(), &info, e); }, "memory_info");
    return info;
  }

 private:
  const pllm_attention_api& api() const { return instance_.api(); }
  template <class F>
  void call(F&& f, const char* what) {
    pllm_error error{};
    const pllm_status status = f(&error);
    pagedllm::check_plugin_call(status, error, instance_.library(), what);
  }
  pagedllm::AttentionInstance instance_;
};

// ---- dtype plumbing ---------------------------------------------------------

inline float round_to(pllm_dtype dtype, float x) {
  if (dtype == PLLM_DTYPE_F16) return f16_to_f32(f32_to_f16(x));
  if (dtype == PLLM_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(x));
  return x;
}

// A host buffer of `count` elements of a float dtype, filled from f32.
struct TypedBuffer {
  pllm_dtype dtype = PLLM_DTYPE_F32;
  std::vector<std::byte> bytes;

  TypedBuffer(pllm_dtype d, const std::vector<float>& values) : dtype(d) {
    const auto size = std::size_t(pllm_dtype_size(d));
    bytes.resize(values.size() * size);
    for (std::size_t i = 0; i < values.size(); ++i) set(i, values[i]);
  }
  void set(std::size_t i, float v) {
    if (dtype == PLLM_DTYPE_F32) {
      std::memcpy(&bytes[i * 4], &v, 4);
      return;
    }
    const uint16_t h = dtype == PLLM_DTYPE_F16 ? f32_to_f16(v) : f32_to_bf16(v);
    std::memcpy(&bytes[i * 2], &h, 2);
  }
  float get(std::size_t i) const {
    if (dtype == PLLM_DTYPE_F32) {
      float f = 0;
      std::memcpy(&f, &bytes[i * 4], 4);
      return f;
    }
    uint16_t h = 0;
    std::memcpy(&h, &bytes[i * 2], 2);
    return dtype == PLLM_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
  }
  std::size_t size() const { return bytes.size() / std::size_t(pllm_dtype_size(dtype)); }
};

inline pllm_tensor tensor3(TypedBuffer& buffer, int64_t a, int64_t b, int64_t c) {
  pllm_tensor t{};
  t.data = buffer.bytes.data();
  t.dtype = buffer.dtype;
  t.device = {PLLM_DEVICE_CPU, 0};
  t.ndim = 3;
  t.shape[0] = a;
  t.shape[1] = b;
  t.shape[2] = c;
  t.strides[0] = b * c;
  t.strides[1] = c;
  t.strides[2] = 1;
  return t;
}

// ---- batches -----------------------------------------------------------------

// A step batch with owned arrays; batch() points into them.
struct StepBatch {
  std::vector<int32_t> token_ids, positions, query_start_loc{0}, seq_lens, block_tables;
  std::vector<int64_t> slot_mapping;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;
  int32_t num_decode_seqs = 0;

  pllm_batch batch() const {
    pllm_batch b{};
    b.struct_size = sizeof b;
    b.num_seqs = int32_t(seq_lens.size());
    b.num_tokens = int32_t(slot_mapping.size());
    b.num_decode_seqs = num_decode_seqs;
    int32_t max_q = 0, max_s = 0;
    for (std::size_t s = 0; s < seq_lens.size(); ++s) {
      max_q = std::max(max_q, query_start_loc[s + 1] - query_start_loc[s]);
      max_s = std::max(max_s, seq_lens[s]);
    }
    b.max_query_len = max_q;
    b.max_seq_len = max_s;
    b.block_size = block_size;
    b.max_blocks_per_seq = max_blocks_per_seq;
    b.token_ids = token_ids.data();
    b.positions = positions.data();
    b.slot_mapping = slot_mapping.data();
    b.query_start_loc = query_start_loc.data();
    b.seq_lens = seq_lens.data();
    b.block_tables = block_tables.data();
    return b;
  }
};

}  // namespace attention_test
