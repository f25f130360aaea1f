#pragma once
// Test harness for the attention plugins: loads the real .so through the
// host's registry, wraps its C table in throwing calls, and builds paged
// batches together with the dense data a plain reference attention needs.
// attention_cuda's tests (tests/plugins/attention_cuda) use it too.

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"
#include "dtype_convert.h"
#include "tools/common/host_batch.h"
#include "tools/common/layer_tensors.h"
#include "tools/common/typed_buffer.h"

namespace attention_test {

using pagedllm::attention_cpu::bf16_to_f32;
using pagedllm::attention_cpu::f16_to_f32;
using pagedllm::attention_cpu::f32_to_bf16;
using pagedllm::attention_cpu::f32_to_f16;
using pagedllm::tools::LayerTensors;

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

// Buffers and batches are tools/common's, which pagedllm-attn-bench builds its cases from too.
using pagedllm::tools::HostBatch;
using pagedllm::tools::TypedBuffer;

}  // namespace attention_test
