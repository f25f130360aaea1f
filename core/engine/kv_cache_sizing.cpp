#include "core/engine/kv_cache_sizing.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "core/config/config_error.h"
#include "core/engine/plugin_args.h"
#include "core/engine/plugin_batch.h"
#include "core/plugin/plugin_error.h"
#include "core/scheduler/step_batch_builder.h"

namespace pagedllm {
namespace {

// The pool is indexed by int block ids.
constexpr std::uint64_t kMaxBlocks = 1u << 30;

double gib(std::uint64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(1ull << 30); }

int blocks_for_tokens(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

class Sizer {
 public:
  explicit Sizer(const KvCacheSizingInputs& in) : in_(in), config_(in.config) {}

  KvCacheSizing run() {
    sizing_.dtype = in_.spec.dtype;
    read_bytes_per_block();
    if (sizing_.bytes_per_block == 0) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': bytes_per_block returned 0",
                                                             in_.attention.library().name()));
    }
    sizing_.num_host_blocks = blocks_in(config_.cache.swap_space_bytes);
    sizing_.method = kv_sizing_method(config_, in_.attention.api().memory_info != nullptr);
    switch (sizing_.method) {
      case KvSizingMethod::kConfiguredBytes:
        size_from_configured_bytes();
        break;
      case KvSizingMethod::kExplicitBytesOnDevice:
        size_from_explicit_bytes_on_device();
        break;
      case KvSizingMethod::kProfiled:
        size_by_profiling();
        break;
    }
    return sizing_;
  }

 private:
  // The first call that sees the spec: a backend that cannot store the cache's element type refuses it here.
  void read_bytes_per_block() {
    pllm_error error{};
    try {
      check_plugin_call(in_.attention.api().bytes_per_block(in_.attention.get(), &in_.spec,
                                                            &sizing_.bytes_per_block, &error),
                        error, in_.attention.library(), "bytes_per_block");
    } catch (const PluginCallError& e) {
      if (e.status() != PLLM_ERROR_UNSUPPORTED || config_.cache.dtype == "auto") throw;
      throw ConfigError(fmt::format("{}: cache.dtype: the attention backend '{}' refused a KV cache of {}: {}; "
                                    "use a dtype it supports, or auto (the model's dtype)",
                                    config_.sources.locate("cache.dtype"), in_.attention.library().name(),
                                    config_.cache.dtype, e.what()));
    }
  }

  int blocks_in(std::uint64_t bytes) const {
    return static_cast<int>(std::min<std::uint64_t>(bytes / sizing_.bytes_per_block, kMaxBlocks));
  }
  int blocks_for_longest() const { return blocks_for_tokens(in_.max_model_len, config_.cache.block_size); }
  std::uint64_t bytes_of(std::int64_t blocks) const {
    return static_cast<std::uint64_t>(blocks) * sizing_.bytes_per_block;
  }

  pllm_device_memory read_memory() {
    pllm_error error{};
    pllm_device_memory memory{};
    memory.struct_size = sizeof(pllm_device_memory);
    check_plugin_call(in_.attention.api().memory_info(in_.attention.get(), &memory, &error), error,
                      in_.attention.library(), "memory_info");
    if (memory.total_bytes == 0 || memory.free_bytes > memory.total_bytes) {
      throw PluginCallError(PLLM_ERROR_INTERNAL,
                            fmt::format("plugin '{}': memory_info reported {} bytes free of {}",
                                        in_.attention.library().name(), memory.free_bytes, memory.total_bytes));
    }
    return memory;
  }

  void allocate(int num_device_blocks, int num_host_blocks) {
    pllm_error error{};
    check_plugin_call(in_.attention.api().allocate_cache(in_.attention.get(), &in_.spec, num_device_blocks,
                                                         num_host_blocks, &error),
                      error, in_.attention.library(), "allocate_cache");
  }

  // The final cache on a device; running out of memory here means the budget
  // left too little for what the backend allocates besides the blocks.
  void allocate_final_on_device(const std::string& key) {
    try {
      allocate(sizing_.num_device_blocks, sizing_.num_host_blocks);
    } catch (const PluginCallError& e) {
      if (e.status() != PLLM_ERROR_OUT_OF_MEMORY) throw;
      throw ConfigError(fmt::format("{}: {}: allocating {} KV blocks ({:.2f} GiB) ran out of device memory on {}: "
                                    "{}; lower {}",
                                    config_.sources.locate(key), key, sizing_.num_device_blocks,
                                    gib(bytes_of(sizing_.num_device_blocks)), config_.device.str(), e.what(), key));
    }
    sizing_.free_after_bytes = read_memory().free_bytes;
  }

  void size_from_configured_bytes() {
    if (config_.cache.kv_cache_bytes == 0) {
      throw ConfigError(fmt::format("{}: cache.kv_cache_bytes must be set on {}: its attention backend "
                                    "'{}' does not report device memory to size from",
                                    config_.sources.locate("cache"), config_.device.str(),
                                    in_.attention.library().name()));
    }
    sizing_.num_device_blocks = blocks_in(config_.cache.kv_cache_bytes);
    require_longest_fits_in_configured_bytes();
    allocate(sizing_.num_device_blocks, sizing_.num_host_blocks);
  }

  void require_longest_fits_in_configured_bytes() const {
    if (sizing_.num_device_blocks >= blocks_for_longest()) return;
    throw ConfigError(fmt::format(
        "{}: cache.kv_cache_bytes={} holds {} blocks of {} tokens ({} bytes each), fewer than the "
        "{} one sequence of max_model_len={} needs; raise kv_cache_bytes or lower "
        "scheduler.max_model_len",
        config_.sources.locate("cache.kv_cache_bytes"), config_.cache.kv_cache_bytes, sizing_.num_device_blocks,
        config_.cache.block_size, sizing_.bytes_per_block, blocks_for_longest(), in_.max_model_len));
  }

  void size_from_explicit_bytes_on_device() {
    const pllm_device_memory before = read_memory();
    sizing_.total_bytes = before.total_bytes;
    sizing_.in_use_before_bytes = before.total_bytes - before.free_bytes;
    sizing_.num_device_blocks = blocks_in(config_.cache.kv_cache_bytes);
    require_longest_fits_in_configured_bytes();
    const std::uint64_t kv_bytes = bytes_of(sizing_.num_device_blocks);
    if (kv_bytes > before.free_bytes) {
      throw ConfigError(fmt::format(
          "{}: cache.kv_cache_bytes={} ({} blocks, {:.2f} GiB) does not fit in the {:.2f} GiB free on {} "
          "(the model and runtime use {:.2f} GiB of {:.2f} GiB); lower kv_cache_bytes, or leave it out to "
          "size the pool from cache.gpu_memory_utilization",
          config_.sources.locate("cache.kv_cache_bytes"), config_.cache.kv_cache_bytes, sizing_.num_device_blocks,
          gib(kv_bytes), gib(before.free_bytes), config_.device.str(), gib(sizing_.in_use_before_bytes),
          gib(before.total_bytes)));
    }
    allocate_final_on_device("cache.kv_cache_bytes");
  }

  void size_by_profiling() {
    const std::string utilization_key = "cache.gpu_memory_utilization";
    const std::string utilization_at = config_.sources.locate(utilization_key);
    const double utilization = config_.cache.gpu_memory_utilization;
    const pllm_device_memory before = read_memory();
    sizing_.total_bytes = before.total_bytes;
    sizing_.in_use_before_bytes = before.total_bytes - before.free_bytes;
    const auto limit = static_cast<std::uint64_t>(static_cast<double>(before.total_bytes) * utilization);
    if (sizing_.in_use_before_bytes >= limit) {
      throw ConfigError(fmt::format(
          "{}: {}={} allows {:.2f} GiB of the {:.2f} GiB on {}, but the model and runtime already use {:.2f} GiB "
          "before any KV cache; raise gpu_memory_utilization",
          utilization_at, utilization_key, utilization, gib(limit), gib(before.total_bytes), config_.device.str(),
          gib(sizing_.in_use_before_bytes)));
    }

    const std::uint64_t in_use_after = profile();
    // What the step left in use besides its own cache: weights, runtime and the
    // activation workspace the model keeps for its largest step.
    const std::uint64_t non_kv =
        std::max(sizing_.in_use_before_bytes, in_use_after - std::min(in_use_after, profiling_cache_bytes_));
    sizing_.activation_peak_bytes = non_kv - sizing_.in_use_before_bytes;
    const std::uint64_t budget = limit > non_kv ? limit - non_kv : 0;
    sizing_.num_device_blocks = blocks_in(budget);
    if (sizing_.num_device_blocks < blocks_for_longest()) {
      const std::uint64_t needed = non_kv + bytes_of(blocks_for_longest());
      throw ConfigError(fmt::format(
          "{}: {}={} leaves {:.2f} GiB for the KV cache on {} ({} blocks of {} tokens), fewer than the {} blocks "
          "({:.2f} GiB) one sequence of max_model_len={} needs: weights and runtime use {:.2f} GiB and the "
          "largest step's activations {:.2f} GiB of {:.2f} GiB, so {:.2f} GiB would be needed in all "
          "(gpu_memory_utilization {:.3f}); lower scheduler.max_model_len or scheduler.max_num_batched_tokens, "
          "or raise gpu_memory_utilization",
          utilization_at, utilization_key, utilization, gib(budget), config_.device.str(), sizing_.num_device_blocks,
          config_.cache.block_size, blocks_for_longest(), gib(bytes_of(blocks_for_longest())), in_.max_model_len,
          gib(sizing_.in_use_before_bytes), gib(sizing_.activation_peak_bytes), gib(before.total_bytes), gib(needed),
          static_cast<double>(needed) / static_cast<double>(before.total_bytes)));
    }
    // Every rank must hold the same pool (rank 0's scheduler hands out its block ids): each measured
    // its own device, and all take the smallest — before allocating, and again after the trim.
    agree_across_ranks();
    allocate_final_on_device(utilization_key);
    trim_to_limit(limit, utilization_key);
    if (agree_across_ranks()) allocate_final_on_device(utilization_key);
  }

  // Lowers this rank's device block count to the group's smallest; true when it changed.
  bool agree_across_ranks() {
    if (!in_.smallest_across_ranks) return false;
    const int smallest = in_.smallest_across_ranks(sizing_.num_device_blocks);
    if (smallest >= sizing_.num_device_blocks) return false;
    sizing_.num_device_blocks = smallest;
    return true;
  }

  // The budget counts the pool's bytes, but the device may hold more for it: CUDA rounds a
  // large allocation up to its 2 MiB pages (on an H100 the first pool came out 1.3 MiB
  // past the utilization's share). Measured after allocating, any excess is given back in
  // whole blocks; a few rounds, as the smaller pool is rounded again.
  void trim_to_limit(std::uint64_t limit, const std::string& key) {
    for (int round = 0; round < 4; ++round) {
      const pllm_device_memory after = read_memory();
      const std::uint64_t in_use = after.total_bytes - after.free_bytes;
      if (in_use <= limit) return;
      const auto excess_blocks =
          static_cast<int>((in_use - limit + sizing_.bytes_per_block - 1) / sizing_.bytes_per_block);
      if (sizing_.num_device_blocks - excess_blocks < blocks_for_longest()) return;
      sizing_.num_device_blocks -= excess_blocks;
      allocate_final_on_device(key);
    }
  }

  // Allocates the profiling cache and runs one step of the largest size on it;
  // returns the device memory in use afterwards.
  std::uint64_t profile() {
    const ProfilingBatch profiling = make_profiling_batch(config_.scheduler, in_.max_model_len,
                                                          config_.cache.block_size, in_.num_speculative_tokens);
    profiling_cache_bytes_ = bytes_of(profiling.num_blocks);
    const StepBatch& b = profiling.batch;
    const std::string step = fmt::format("the profiling step ({} tokens in {} prefill sequences, {} logits rows, {} "
                                         "hidden rows)",
                                         b.num_tokens(), b.num_seqs(), b.logits_indices.size(),
                                         profiling.hidden_indices.size());
    try {
      allocate(profiling.num_blocks, 0);
      // The outputs stay in the model's workspace on its device: that is what it measures.
      in_.runner.forward(plugin_batch_view(b, profiling.hidden_indices));
    } catch (const PluginCallError& e) {
      if (e.status() != PLLM_ERROR_OUT_OF_MEMORY) throw;
      throw ConfigError(fmt::format("{}: scheduler.max_num_batched_tokens: {} ran out of device memory on {}: {}; "
                                    "lower scheduler.max_num_batched_tokens (or scheduler.max_num_seqs)",
                                    config_.sources.locate("scheduler.max_num_batched_tokens"), step,
                                    config_.device.str(), e.what()));
    }
    const pllm_device_memory after = read_memory();
    return after.total_bytes - after.free_bytes;
  }

  const KvCacheSizingInputs& in_;
  const HostConfig& config_;
  KvCacheSizing sizing_;
  std::uint64_t profiling_cache_bytes_ = 0;
};

}  // namespace

ProfilingBatch make_profiling_batch(const SchedulerConfig& scheduler, int max_model_len, int block_size,
                                    int num_speculative_tokens) {
  const std::int64_t capacity = static_cast<std::int64_t>(scheduler.max_num_seqs) * max_model_len;
  const int num_tokens = static_cast<int>(std::min<std::int64_t>(scheduler.max_num_batched_tokens, capacity));
  const int num_seqs = std::min(scheduler.max_num_seqs, num_tokens);
  const int logits_per_seq = 1 + num_speculative_tokens;

  // Each sequence in blocks of its own, numbered from 0: the profiling cache holds just those.
  ProfilingBatch out;
  std::vector<std::vector<BlockId>> block_tables(static_cast<std::size_t>(num_seqs));
  std::vector<std::vector<std::int32_t>> tokens(static_cast<std::size_t>(num_seqs));
  std::vector<BatchRow> rows;
  for (int s = 0; s < num_seqs; ++s) {
    // The first num_tokens % num_seqs sequences take one token more.
    const int length = num_tokens / num_seqs + (s < num_tokens % num_seqs ? 1 : 0);
    std::vector<BlockId>& table = block_tables[static_cast<std::size_t>(s)];
    for (int i = 0; i < blocks_for_tokens(length, block_size); ++i) table.push_back(out.num_blocks++);
    tokens[static_cast<std::size_t>(s)].assign(static_cast<std::size_t>(length), 0);
    rows.push_back({tokens[static_cast<std::size_t>(s)], 0, table, std::min(length, logits_per_seq), false});
  }
  out.batch = build_step_batch(rows, block_size).batch;
  if (num_speculative_tokens > 0) {
    out.hidden_indices.resize(static_cast<std::size_t>(out.batch.num_tokens()));
    std::iota(out.hidden_indices.begin(), out.hidden_indices.end(), 0);
  }
  return out;
}

pllm_kv_cache_spec make_kv_cache_spec(const HostConfig& config, const pllm_model_info& model, int num_draft_layers) {
  const pllm_dtype dtype = config.cache.dtype == "auto" ? model.dtype : to_plugin_dtype(config.cache.dtype);
  if (config.device.type == DeviceType::kCuda && dtype != model.dtype) {
    throw ConfigError(fmt::format("{}: cache.dtype: {} differs from the model's dtype {} on {}: attention on CUDA "
                                  "(attention_cuda) keeps keys and values in the activations' dtype; leave "
                                  "cache.dtype auto, or set model.dtype: {} to compute in it too",
                                  config.sources.locate("cache.dtype"), config.cache.dtype,
                                  config_dtype_name(model.dtype), config.device.str(), config.cache.dtype));
  }
  return pllm_kv_cache_spec{sizeof(pllm_kv_cache_spec), model.num_layers + num_draft_layers, model.num_kv_heads,
                            model.head_dim, config.cache.block_size, dtype};
}

int resolve_max_model_len(const HostConfig& config, const pllm_model_info& model) {
  const int model_limit = model.max_position_embeddings;
  const int max_model_len = config.scheduler.max_model_len > 0 ? config.scheduler.max_model_len : model_limit;
  if (model_limit > 0 && max_model_len > model_limit) {
    throw ConfigError(fmt::format("{}: scheduler.max_model_len={} exceeds the model's max_position_embeddings={}",
                                  config.sources.locate("scheduler.max_model_len"), max_model_len, model_limit));
  }
  return max_model_len;
}

KvCacheSizing size_and_allocate_kv_cache(const KvCacheSizingInputs& inputs) { return Sizer(inputs).run(); }

std::string describe_kv_cache_sizing(const KvCacheSizing& sizing, int block_size, const std::string& device) {
  const std::uint64_t kv_bytes = static_cast<std::uint64_t>(sizing.num_device_blocks) * sizing.bytes_per_block;
  const std::string pool =
      fmt::format("KV cache {:.2f} GiB: {} blocks of {} tokens ({} tokens in {}, {} bytes per block) on {}, {} swap "
                  "blocks",
                  gib(kv_bytes), sizing.num_device_blocks, block_size,
                  static_cast<std::int64_t>(sizing.num_device_blocks) * block_size, config_dtype_name(sizing.dtype),
                  sizing.bytes_per_block, device, sizing.num_host_blocks);
  switch (sizing.method) {
    case KvSizingMethod::kConfiguredBytes:
      return pool + " (from cache.kv_cache_bytes)";
    case KvSizingMethod::kExplicitBytesOnDevice:
      return fmt::format("{} (from cache.kv_cache_bytes, written in the config); device memory {:.2f} GiB: "
                         "weights+runtime {:.2f} GiB, activation peak not profiled, KV cache {:.2f} GiB, "
                         "free {:.2f} GiB",
                         pool, gib(sizing.total_bytes), gib(sizing.in_use_before_bytes), gib(kv_bytes),
                         gib(sizing.free_after_bytes));
    case KvSizingMethod::kProfiled:
      return fmt::format("{} (from cache.gpu_memory_utilization after a profiling step); device memory {:.2f} GiB: "
                         "weights+runtime {:.2f} GiB, activation peak {:.2f} GiB, KV cache {:.2f} GiB, "
                         "free {:.2f} GiB",
                         pool, gib(sizing.total_bytes), gib(sizing.in_use_before_bytes),
                         gib(sizing.activation_peak_bytes), gib(kv_bytes), gib(sizing.free_after_bytes));
  }
  return pool;
}

}  // namespace pagedllm
