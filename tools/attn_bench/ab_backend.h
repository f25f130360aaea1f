#pragma once
// One side of the A/B: an attention plugin loaded through the host's registry,
// its options validated by the plugin like `pagedllm-host --check` does, and a
// fresh backend (with its own KV cache) per case. Every failure becomes a
// BenchError with exit code 2 and a message that names the side and plugin.

#include <memory>
#include <stdexcept>
#include <string>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"
#include "tools/attn_bench/bench_cases.h"

namespace pagedllm::attn_bench {

// Could not run (exit 2): unknown plugin, bad options, memory.
class BenchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A side refused one case with PLLM_ERROR_UNSUPPORTED (a dtype, head_dim or
// block size it does not handle): that case is reported as unsupported and the
// others run.
class CaseUnsupported : public BenchError {
 public:
  using BenchError::BenchError;
};

class AbBackend {
 public:
  // `side` is "a" or "b"; the backends it creates run on `device`. Throws BenchError.
  AbBackend(std::string side, const BackendSpec& spec, const pllm_device& device, PluginRegistry& registry);

  const std::string& side() const { return side_; }
  const BackendSpec& spec() const { return spec_; }
  const pllm_device& device() const { return device_; }
  const PluginLibrary& library() const { return *library_; }
  // "a (attention_cpu {"variant":"reference"})", "b (attention_cuda on cuda:0)"
  std::string label() const;

  // Destroys the previous backend (and its cache) and creates a new one.
  void create();
  void destroy() { instance_.reset(); }
  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec, const CaseSpec& c);
  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, const CaseSpec& c);
  void plan(const pllm_batch& batch, const CaseSpec& c);
  void run(const pllm_attention_layer_args& args, const CaseSpec& c);

 private:
  // Calls `f(error)`; a failure throws BenchError naming `what` and the case.
  template <class F>
  void call(F&& f, const char* what, const CaseSpec* c);

  std::string side_;
  BackendSpec spec_;
  pllm_device device_;
  std::shared_ptr<PluginLibrary> library_;
  AttentionInstance instance_;
};

}  // namespace pagedllm::attn_bench
