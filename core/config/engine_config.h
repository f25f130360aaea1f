#pragma once
// The typed sections of the host configuration that the engine's parts consume.
// Plain structs, no YAML: core/config/config.h reads and validates them from the
// config file; the KV cache manager and the scheduler take them as they are.
// Defaults here are the defaults of the config file.

#include <cstdint>
#include <string>

namespace pagedllm {

enum class PreemptionMode { kRecompute, kSwap };
enum class SchedulingPolicy { kFcfs, kPriority };

struct CacheConfig {
  // Tokens per KV block.
  int block_size = 16;
  // Fraction of device memory the engine may use in total (CUDA only).
  double gpu_memory_utilization = 0.9;
  // Bytes of KV cache on a CPU device; 0 means "derive from the device" (CUDA).
  std::uint64_t kv_cache_bytes = 1ull << 30;
  // Bytes of host memory for swapped-out blocks; 0 disables swapping.
  std::uint64_t swap_space_bytes = 0;
  bool enable_prefix_caching = true;
  // Fraction of device blocks kept free when admitting new requests, so running
  // requests can grow without immediate preemption.
  double watermark = 0.01;
  // The element type of the cached keys and values: auto | f32 | f16 | bf16.
  // auto is the model's reported dtype (models_llama on the CPU reports f32);
  // a 16-bit cache halves the bytes per block and what attention reads per step.
  std::string dtype = "auto";
};

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  // Longest context (prompt + output) a request may reach; 0 means the model's own limit.
  int max_model_len = 0;
  bool enable_chunked_prefill = true;
  // How many prefills may be partially done at once under chunked prefill.
  int max_num_partial_prefills = 1;
  // Prompts longer than this count as "long"; at most one long prefill runs at a time.
  // 0 means 4% of max_model_len, as in vLLM.
  int long_prefill_token_threshold = 0;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // Extra KV slots reserved per decode step for speculative decoding: a decode
  // verifies 1 + K tokens, so it needs 1 + K slots. Not a YAML key of its own:
  // the engine sets it from speculative.num_speculative_tokens (0 without a speculator).
  int num_lookahead_tokens = 0;
  // Slots past a speculative row's last token for the draft model's own KV:
  // EAGLE's chain drafting writes K - 1 positions beyond the accepted tokens
  // before the next step verifies them. Set by the engine, like the above.
  int num_draft_slots = 0;
};

}  // namespace pagedllm
