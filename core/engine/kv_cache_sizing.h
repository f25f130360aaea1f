#pragma once
// How many KV blocks the device pool gets, and allocating them.
//
// A backend without memory_info (the CPU) gets cache.kv_cache_bytes. A backend
// with it (a GPU, SDK 1.1) gets what cache.gpu_memory_utilization leaves after
// the weights, the runtime and the activations of the largest step the
// scheduler can plan, measured by running that step once on a small profiling
// cache — unless cache.kv_cache_bytes is written in the config, which then
// wins but must fit in the free device memory. docs/architecture.md "The
// engine, concretely".

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/kv_sizing_method.h"
#include "core/engine/model_runner.h"
#include "core/plugin/plugin_instance.h"
#include "core/scheduler/scheduler_output.h"

namespace pagedllm {

// The context limit: scheduler.max_model_len, else the model's max_position_embeddings. Throws
// ConfigError when the configured one exceeds the model's.
int resolve_max_model_len(const HostConfig& config, const pllm_model_info& model);

// The pool's spec: the model's layers, then `num_draft_layers` draft layers (they share the pool
// and the block tables), of cache.dtype elements (auto: the model's dtype). Throws ConfigError
// naming cache.dtype when the device is CUDA and it differs from the model's dtype: attention_cuda's
// kernels write and read the cache in the activations' dtype.
pllm_kv_cache_spec make_kv_cache_spec(const HostConfig& config, const pllm_model_info& model, int num_draft_layers);

// What the pool came to and where the device memory went.
struct KvCacheSizing {
  KvSizingMethod method = KvSizingMethod::kConfiguredBytes;
  pllm_dtype dtype = PLLM_DTYPE_INVALID;  // of the cached keys and values
  int num_device_blocks = 0;
  int num_host_blocks = 0;
  std::uint64_t bytes_per_block = 0;
  // Device memory (zero for kConfiguredBytes). in_use_before: weights and
  // runtime, before any KV cache; activation_peak: what the profiling step
  // added beyond its cache (kProfiled only); free_after: free once the final
  // cache is allocated.
  std::uint64_t total_bytes = 0;
  std::uint64_t in_use_before_bytes = 0;
  std::uint64_t activation_peak_bytes = 0;
  std::uint64_t free_after_bytes = 0;
};

// The largest step the scheduler can plan: min(max_num_batched_tokens,
// max_num_seqs * max_model_len) prompt tokens spread as evenly as possible over
// min(max_num_seqs, tokens) prefill sequences, each in blocks of its own.
// Logits rows: the last token of each sequence, or with a speculator its last
// 1 + K tokens (a speculative decode row has logits for every token), which
// totals min(tokens, max_num_seqs * (1 + K)). Hidden rows: every token with a
// speculator (the draft reads the feature of each computed position), none without.
struct ProfilingBatch {
  StepBatch batch;
  std::vector<std::int32_t> hidden_indices;
  int num_blocks = 0;  // the profiling cache: every block the block tables name
};
ProfilingBatch make_profiling_batch(const SchedulerConfig& scheduler, int max_model_len, int block_size,
                                    int num_speculative_tokens);

struct KvCacheSizingInputs {
  const HostConfig& config;
  AttentionInstance& attention;
  const ModelRunner& runner;  // over `attention` and the model: the profiling step
  pllm_kv_cache_spec spec;
  int max_model_len = 0;
  int num_speculative_tokens = 0;  // 0: no speculator
  // Under tensor parallelism: the smallest of every rank's device block count, given this rank's
  // (collective: every rank calls it the same number of times). A pool measured on the device
  // (gpu_memory_utilization) is then the smallest rank's on every rank. Null: one process.
  std::function<int(int)> smallest_across_ranks = nullptr;
};

// Sizes the pool by the method the backend allows and allocates the cache.
// Throws ConfigError naming the key to change when the backend refuses a
// cache.dtype other than auto, the pool cannot hold one max_model_len sequence,
// the profiling step runs out of memory or memory in use already exceeds
// gpu_memory_utilization; PluginCallError for other plugin failures.
KvCacheSizing size_and_allocate_kv_cache(const KvCacheSizingInputs& inputs);

// The startup lines: what went where, in GiB.
std::string describe_kv_cache_sizing(const KvCacheSizing& sizing, int block_size, const std::string& device);

}  // namespace pagedllm
