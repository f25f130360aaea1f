// attention_cpu: paged attention with the KV cache in host memory. The plugin
// class validates every call and dispatches to the cache (kv_cache.h) and to
// the kernel the `variant` option picks (paged_attention.h).

#include <cstddef>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "dtype_convert.h"
#include "kv_cache.h"
#include "paged_attention.h"
#include "pagedllm/sdk/cpp/paged_batch_check.hpp"
#include "common/thread_pool.h"

namespace pagedllm::attention_cpu {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "attention_cpu: " + message);
}

std::string str(int64_t v) { return std::to_string(v); }

class AttentionCpu : public pllm::AttentionPlugin {
 public:
  static constexpr uint32_t kFeatures = PLLM_ATTENTION_SLIDING_WINDOW;
  struct Options {
    std::string variant = "optimized";
    int32_t num_threads = 0;  // 0 = one per hardware thread
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.variant = reader.get_choice("variant", "optimized", {"reference", "optimized"});
      o.num_threads = reader.get_in_range<int32_t>("num_threads", 0, 0, 1024);
      return o;
    }
  };

  AttentionCpu(const Options& options, const pllm_attention_create_args& args) : options_(options) {
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "attention_cpu runs on the CPU only (device: " +
                            std::string(args.device.type == PLLM_DEVICE_CUDA ? "cuda:" + str(args.device.index)
                                                                              : "invalid") +
                            "); use attention_cuda for GPUs");
    }
    if (options_.variant == "optimized") {
      optimized_ = std::make_unique<OptimizedAttention>(plugins::resolve_num_threads(options_.num_threads));
    }
    pllm::log_debug("attention_cpu: variant=", options_.variant,
                   optimized_ ? ", threads=" + str(optimized_->num_threads()) : std::string());
  }

  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) {
    return CacheGeometry::from_spec(spec, "attention_cpu").bytes_per_block();
  }

  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t num_device_blocks, int64_t num_host_blocks) {
    if (cache_) invalid("allocate_cache called twice; the cache is allocated once per backend");
    cache_.emplace(CacheGeometry::from_spec(spec, "attention_cpu"), num_device_blocks, num_host_blocks);
  }

  void plan(const pllm_batch& batch) {
    validate_batch(batch);
    batch_ = batch;
    planned_ = true;
  }

  void run(int32_t layer, const pllm_attention_layer_args& args) {
    if (!planned_) invalid("run() before plan()");
    const CacheGeometry& g = cache_->geometry();
    if (layer < 0 || layer >= g.num_layers) {
      invalid("layer " + str(layer) + " is out of range [0, " + str(g.num_layers) + ")");
    }
    // The wrapper checked that args has its 2.0 fields; each tensor is checked here.
    const pllm_tensor& query = pllm::require(args.query, "attention_cpu: layer args: query");
    const pllm_tensor& key = pllm::require(args.key, "attention_cpu: layer args: key");
    const pllm_tensor& value = pllm::require(args.value, "attention_cpu: layer args: value");
    const pllm_tensor& output = pllm::require(args.output, "attention_cpu: layer args: output");
    const int64_t num_tokens = batch_.num_tokens;
    check_tensor("query", query, num_tokens, -1, g.head_dim);
    const int64_t num_heads = query.shape[1];
    check_tensor("key", key, num_tokens, g.num_kv_heads, g.head_dim);
    check_tensor("value", value, num_tokens, g.num_kv_heads, g.head_dim);
    check_tensor("output", output, num_tokens, num_heads, g.head_dim);
    if (num_heads <= 0 || num_heads % g.num_kv_heads != 0) {
      invalid("query has " + str(num_heads) + " heads, not a positive multiple of the cache's " +
              str(g.num_kv_heads) + " kv heads");
    }
    if (num_tokens == 0) return;

    write_new_kv(layer, key, value);

    AttentionProblem problem;
    problem.batch = &batch_;
    problem.num_heads = static_cast<int32_t>(num_heads);
    problem.num_kv_heads = g.num_kv_heads;
    problem.head_dim = g.head_dim;
    problem.block_size = g.block_size;
    problem.scale = args.scale;
    if (PLLM_HAS_FIELD(pllm_attention_layer_args, &args, sliding_window)) {
      if (args.sliding_window < 0) invalid("sliding_window " + str(args.sliding_window) + " is negative");
      problem.sliding_window = args.sliding_window;
    }
    problem.query = rows_of(query);
    problem.output = rows_of(output);
    problem.key_cache = cache_->keys(layer);
    problem.value_cache = cache_->values(layer);
    problem.cache_dtype = g.dtype;
    if (optimized_) {
      optimized_->run(problem);
    } else {
      reference_attention(problem);
    }
  }

  void copy_blocks(std::span<const pllm_block_copy> pairs) { allocated().copy_blocks(pairs); }
  void swap_out(std::span<const pllm_block_copy> pairs) { allocated().swap_out(pairs); }
  void swap_in(std::span<const pllm_block_copy> pairs) { allocated().swap_in(pairs); }

 private:
  KvCache& allocated() {
    if (!cache_) invalid("the KV cache is not allocated yet (allocate_cache first)");
    return *cache_;
  }

  void validate_batch(const pllm_batch& b) {
    const KvCache& cache = allocated();
    check_.batch(b, cache.geometry().block_size, cache.num_device_blocks());
  }

  void check_tensor(const char* name, const pllm_tensor& t, int64_t tokens, int64_t heads, int64_t head_dim) const {
    const std::string what = std::string(name) + ": ";
    if (t.device.type != PLLM_DEVICE_CPU) invalid(what + "must be in host memory");
    if (!is_float_dtype(t.dtype)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "attention_cpu: " + what + "dtype " + dtype_name(t.dtype) + " is not supported (f32, f16, bf16)");
    }
    check_.rows(name, t, tokens, heads, head_dim);
  }

  static Rows rows_of(const pllm_tensor& t) {
    return Rows{static_cast<std::byte*>(t.data), t.dtype, t.strides[0], t.strides[1], pllm_dtype_size(t.dtype)};
  }

  // Writes the new tokens' K/V into the cache at their slots (slot -1: skipped).
  void write_new_kv(int32_t layer, const pllm_tensor& key_tensor, const pllm_tensor& value_tensor) {
    const CacheGeometry& g = cache_->geometry();
    const Rows key = rows_of(key_tensor);
    const Rows value = rows_of(value_tensor);
    std::byte* caches[2] = {cache_->keys(layer), cache_->values(layer)};
    const Rows* sources[2] = {&key, &value};
    row_buffer_.resize(std::size_t(g.head_dim));
    for (int32_t t = 0; t < batch_.num_tokens; ++t) {
      const int64_t slot = batch_.slot_mapping[t];
      if (slot < 0) continue;
      const int64_t block = slot / g.block_size;
      const int64_t offset = slot % g.block_size;
      for (int kv = 0; kv < 2; ++kv) {
        for (int32_t h = 0; h < g.num_kv_heads; ++h) {
          std::byte* dst = caches[kv] + ((block * g.num_kv_heads + h) * g.block_size + offset) * g.head_dim * g.element_size;
          const std::byte* src = sources[kv]->row(t, h);
          if (sources[kv]->dtype == g.dtype) {
            std::memcpy(dst, src, std::size_t(g.head_dim * g.element_size));
          } else {
            load_f32(src, sources[kv]->dtype, row_buffer_.data(), g.head_dim);
            store_f32(row_buffer_.data(), g.dtype, dst, g.head_dim);
          }
        }
      }
    }
  }

  Options options_;
  pllm::PagedInputCheck check_{"attention_cpu"};
  std::unique_ptr<OptimizedAttention> optimized_;  // null for the reference variant
  std::optional<KvCache> cache_;
  pllm_batch batch_{};
  bool planned_ = false;
  std::vector<float> row_buffer_;
};

}  // namespace
}  // namespace pagedllm::attention_cpu

PAGEDLLM_PLUGIN(pagedllm::attention_cpu::AttentionCpu, "attention_cpu", "0.1.0",
                "Paged attention on the CPU (reference and optimized kernels)")
