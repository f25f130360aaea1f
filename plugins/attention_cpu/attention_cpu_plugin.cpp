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
#include "plugins/attention_cpu/dtype_convert.h"
#include "plugins/attention_cpu/kv_cache.h"
#include "plugins/attention_cpu/paged_attention.h"
#include "plugins/common/thread_pool.h"

namespace pagedllm::attention_cpu {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "attention_cpu: " + message);
}

std::string str(int64_t v) { return std::to_string(v); }

class AttentionCpu : public pllm::AttentionPlugin {
 public:
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

  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) { return CacheGeometry::from_spec(spec).bytes_per_block(); }

  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t num_device_blocks, int64_t num_host_blocks) {
    if (cache_) invalid("allocate_cache called twice; the cache is allocated once per backend");
    cache_.emplace(CacheGeometry::from_spec(spec), num_device_blocks, num_host_blocks);
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
    if (args.struct_size < sizeof(pllm_attention_layer_args)) invalid("layer args: struct_size too small");
    const int64_t num_tokens = batch_.num_tokens;
    check_tensor("query", args.query, num_tokens, -1, g.head_dim);
    const int64_t num_heads = args.query.shape[1];
    check_tensor("key", args.key, num_tokens, g.num_kv_heads, g.head_dim);
    check_tensor("value", args.value, num_tokens, g.num_kv_heads, g.head_dim);
    check_tensor("output", args.output, num_tokens, num_heads, g.head_dim);
    if (num_heads <= 0 || num_heads % g.num_kv_heads != 0) {
      invalid("query has " + str(num_heads) + " heads, not a positive multiple of the cache's " +
              str(g.num_kv_heads) + " kv heads");
    }
    if (num_tokens == 0) return;

    write_new_kv(layer, args);

    AttentionProblem problem;
    problem.batch = &batch_;
    problem.num_heads = static_cast<int32_t>(num_heads);
    problem.num_kv_heads = g.num_kv_heads;
    problem.head_dim = g.head_dim;
    problem.block_size = g.block_size;
    problem.scale = args.scale;
    problem.query = rows_of(args.query);
    problem.output = rows_of(args.output);
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

  // Checks everything run() relies on once per step, so the kernels never
  // index out of bounds: lengths, block tables and slots against the pool.
  void validate_batch(const pllm_batch& b) {
    const KvCache& cache = allocated();
    const CacheGeometry& g = cache.geometry();
    if (b.struct_size < offsetof(pllm_batch, block_tables) + sizeof(b.block_tables)) {
      invalid("batch: struct_size " + str(b.struct_size) + " is too small");
    }
    if (b.block_size != g.block_size) {
      invalid("batch block_size " + str(b.block_size) + " differs from the cache's " + str(g.block_size));
    }
    if (b.num_seqs < 0 || b.num_tokens < 0) invalid("batch: negative num_seqs or num_tokens");
    if (b.num_tokens > 0 && (!b.slot_mapping || !b.query_start_loc || !b.seq_lens)) {
      invalid("batch: null slot_mapping, query_start_loc or seq_lens");
    }
    if (b.num_seqs > 0 && (!b.query_start_loc || !b.seq_lens || !b.block_tables)) {
      invalid("batch: null query_start_loc, seq_lens or block_tables");
    }
    if (b.num_seqs > 0) {
      if (b.query_start_loc[0] != 0) invalid("batch: query_start_loc[0] = " + str(b.query_start_loc[0]) + ", not 0");
      if (b.query_start_loc[b.num_seqs] != b.num_tokens) {
        invalid("batch: query_start_loc[num_seqs] = " + str(b.query_start_loc[b.num_seqs]) + " but num_tokens = " +
                str(b.num_tokens));
      }
    } else if (b.num_tokens != 0) {
      invalid("batch: " + str(b.num_tokens) + " tokens but no sequences");
    }
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      const int32_t query_len = b.query_start_loc[s + 1] - b.query_start_loc[s];
      if (query_len < 0) invalid("batch: query_start_loc decreases at sequence " + str(s));
      const int32_t seq_len = b.seq_lens[s];
      if (seq_len < query_len) {
        invalid("batch: sequence " + str(s) + " has seq_len " + str(seq_len) + " < its " + str(query_len) +
                " new tokens");
      }
      const int64_t blocks = (int64_t(seq_len) + g.block_size - 1) / g.block_size;
      if (blocks > b.max_blocks_per_seq) {
        invalid("batch: sequence " + str(s) + " needs " + str(blocks) + " blocks for " + str(seq_len) +
                " tokens but max_blocks_per_seq is " + str(b.max_blocks_per_seq));
      }
      for (int64_t i = 0; i < blocks; ++i) {
        const int32_t block = b.block_tables[int64_t(s) * b.max_blocks_per_seq + i];
        if (block < 0 || block >= cache.num_device_blocks()) {
          invalid("batch: block_tables[" + str(s) + "][" + str(i) + "] = " + str(block) +
                  " is out of range for the device pool of " + str(cache.num_device_blocks()) + " blocks");
        }
      }
    }
    const int64_t num_slots = cache.num_device_blocks() * g.block_size;
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      const int64_t slot = b.slot_mapping[t];
      if (slot < -1 || slot >= num_slots) {
        invalid("batch: slot_mapping[" + str(t) + "] = " + str(slot) + " is out of range [-1, " + str(num_slots) +
                ")");
      }
    }
  }

  void check_tensor(const char* name, const pllm_tensor& t, int64_t tokens, int64_t heads, int64_t head_dim) const {
    const std::string what = std::string(name) + ": ";
    if (t.device.type != PLLM_DEVICE_CPU) invalid(what + "must be in host memory");
    if (!is_float_dtype(t.dtype)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "attention_cpu: " + what + "dtype " + dtype_name(t.dtype) + " is not supported (f32, f16, bf16)");
    }
    if (t.ndim != 3) invalid(what + "expected 3 dimensions [tokens, heads, head_dim], got " + str(t.ndim));
    if (t.shape[0] != tokens) invalid(what + "has " + str(t.shape[0]) + " rows, the batch " + str(tokens) + " tokens");
    if (heads >= 0 && t.shape[1] != heads) invalid(what + "has " + str(t.shape[1]) + " heads, expected " + str(heads));
    if (t.shape[2] != head_dim) invalid(what + "head_dim " + str(t.shape[2]) + " differs from the cache's " + str(head_dim));
    if (t.strides[2] != 1) invalid(what + "the head_dim dimension must be contiguous (stride 1)");
    if (tokens > 0 && !t.data) invalid(what + "null data");
  }

  static Rows rows_of(const pllm_tensor& t) {
    return Rows{static_cast<std::byte*>(t.data), t.dtype, t.strides[0], t.strides[1], pllm_dtype_size(t.dtype)};
  }

  // Writes the new tokens' K/V into the cache at their slots (slot -1: skipped).
  void write_new_kv(int32_t layer, const pllm_attention_layer_args& args) {
    const CacheGeometry& g = cache_->geometry();
    const Rows key = rows_of(args.key);
    const Rows value = rows_of(args.value);
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
