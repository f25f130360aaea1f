// example_attention: paged attention on the CPU, written for reading rather
// than speed. It shows what an attention backend owns (the KV cache: its
// layout, its memory, its swap pool) and what it must do each step:
//
//   plan(batch)      once per step: remember the batch (block tables, slots);
//   run(layer, ...)  once per layer: write the new tokens' K/V into the cache
//                    at their slots, then for every new token attend over its
//                    sequence's whole context (causal among the new tokens).
//
// KV cache layout (ours to choose; core never looks inside): for each of the
// device and host pools, one array per layer and per K/V of
//   [num_blocks][block_size][num_kv_heads][head_dim]
// in the cache dtype: f32 or bf16 (bf16 halves the memory; the math is f32).
//
// Options: none. Try it against the in-tree backend:
//   pagedllm-attn-bench --a attention_cpu --b ./example_attention.so --dtype f32,bf16

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <pagedllm/sdk.hpp>
#include <pagedllm/sdk/cpp/paged_batch_check.hpp>  // the checks both in-tree backends make
#include <span>
#include <string>
#include <vector>

namespace {

// f32 -> bf16 bit pattern, rounding to nearest even (NaN stays NaN).
std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

class ExampleAttention : public pllm::AttentionPlugin {
 public:
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }  // no options: any key is refused
  };

  ExampleAttention(const Options&, const pllm_attention_create_args& args) {
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_attention runs on the CPU only");
    }
  }

  // Bytes of one block across all layers, K and V: what core divides its KV
  // budget (cache.kv_cache_bytes) by to get the number of blocks.
  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) {
    return 2ull * uint64_t(spec.num_layers) * uint64_t(spec.block_size) * uint64_t(spec.num_kv_heads) *
           uint64_t(spec.head_dim) * uint64_t(element_size(spec.dtype));
  }

  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, int64_t host_blocks) {
    element_size(spec.dtype);  // refuses f16 and the integer dtypes
    spec_ = spec;
    device_blocks_ = device_blocks;
    host_blocks_ = host_blocks;
    // Per layer: K then V, each [blocks][block_size][kv_heads][head_dim].
    device_.assign(uint64_t(device_blocks) * bytes_per_block(spec), 0);
    host_.assign(uint64_t(host_blocks) * bytes_per_block(spec), 0);
  }

  void plan(const pllm_batch& batch) {
    check_.batch(batch, spec_.block_size, device_blocks_);
    batch_ = &batch;  // valid until the step's last run()
  }

  void run(int32_t layer, const pllm_attention_layer_args& args) {
    if (!batch_) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_attention: run() before plan()");
    if (layer < 0 || layer >= spec_.num_layers) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_attention: layer " + std::to_string(layer) +
                                                         " is outside the cache's " + std::to_string(spec_.num_layers) +
                                                         " layers");
    }
    const pllm_batch& b = *batch_;
    const int32_t kv_heads = spec_.num_kv_heads;
    const int32_t head_dim = spec_.head_dim;
    // The model holds its tensors by pointer (SDK 2.0); require() checks each one is there
    // and has the fields SDK 2.0 defines (struct_check.hpp).
    const pllm_tensor& query = pllm::require(args.query, "example_attention: layer args: query");
    const pllm_tensor& key = pllm::require(args.key, "example_attention: layer args: key");
    const pllm_tensor& value = pllm::require(args.value, "example_attention: layer args: value");
    const pllm_tensor& output = pllm::require(args.output, "example_attention: layer args: output");
    check_.rows("query", query, b.num_tokens, -1, head_dim);
    const int32_t heads = int32_t(query.shape[1]);
    if (heads % kv_heads != 0) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "example_attention: " + std::to_string(heads) +
                                                         " query heads are not a multiple of " +
                                                         std::to_string(kv_heads) + " kv heads");
    }
    check_.rows("key", key, b.num_tokens, kv_heads, head_dim);
    check_.rows("value", value, b.num_tokens, kv_heads, head_dim);
    check_.rows("output", output, b.num_tokens, heads, head_dim);
    for (const pllm_tensor* t : {&query, &key, &value, &output}) {
      if (t->dtype != spec_.dtype || t->device.type != PLLM_DEVICE_CPU) {
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                          "example_attention: activations must be CPU tensors in the cache's dtype");
      }
    }

    // 1. Write the new tokens' K and V at their slots (slot -1: not written).
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      const int64_t slot = b.slot_mapping[t];
      if (slot < 0) continue;
      for (int32_t g = 0; g < kv_heads; ++g) {
        for (int32_t d = 0; d < head_dim; ++d) {
          store(key_cache(layer, slot, g), d, load(key, t, g, d));
          store(value_cache(layer, slot, g), d, load(value, t, g, d));
        }
      }
    }

    // 2. Attend. Sequence s's new tokens are rows [query_start_loc[s], query_start_loc[s+1]),
    // the last of its seq_lens[s] context positions; the new token at position p sees 0..p.
    const int32_t group = heads / kv_heads;  // query heads sharing one kv head (GQA)
    std::vector<float> scores;
    std::vector<float> q(static_cast<std::size_t>(head_dim)), acc(static_cast<std::size_t>(head_dim));
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      const int32_t first = b.query_start_loc[s];
      const int32_t new_tokens = b.query_start_loc[s + 1] - first;
      const int32_t cached = b.seq_lens[s] - new_tokens;
      for (int32_t i = 0; i < new_tokens; ++i) {
        const int32_t t = first + i;
        const int32_t position = cached + i;
        for (int32_t h = 0; h < heads; ++h) {
          const int32_t g = h / group;
          for (int32_t d = 0; d < head_dim; ++d) q[std::size_t(d)] = load(query, t, h, d);
          // scores[j] = scale * q . k_j, then a softmax with the maximum subtracted.
          scores.assign(static_cast<std::size_t>(position) + 1, 0.0f);
          float max_score = -std::numeric_limits<float>::infinity();
          for (int32_t j = 0; j <= position; ++j) {
            const unsigned char* k = key_cache(layer, slot_of(s, j), g);
            float dot = 0.0f;
            for (int32_t d = 0; d < head_dim; ++d) dot += q[std::size_t(d)] * cached_value(k, d);
            scores[std::size_t(j)] = dot * args.scale;
            max_score = std::max(max_score, scores[std::size_t(j)]);
          }
          float sum = 0.0f;
          for (float& w : scores) {
            w = std::exp(w - max_score);
            sum += w;
          }
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int32_t j = 0; j <= position; ++j) {
            const unsigned char* v = value_cache(layer, slot_of(s, j), g);
            const float weight = scores[std::size_t(j)] / sum;
            for (int32_t d = 0; d < head_dim; ++d) acc[std::size_t(d)] += weight * cached_value(v, d);
          }
          for (int32_t d = 0; d < head_dim; ++d) store_output(output, t, h, d, acc[std::size_t(d)]);
        }
      }
    }
  }

  // Block operations: whole blocks, every layer, K and V.
  void swap_out(std::span<const pllm_block_copy> pairs) {
    check_.block_pairs("swap_out", pairs, device_blocks_, "device", host_blocks_, "host");
    for (const auto& p : pairs) copy_block(device_, p.src, host_, p.dst, host_blocks_);
  }
  void swap_in(std::span<const pllm_block_copy> pairs) {
    check_.block_pairs("swap_in", pairs, host_blocks_, "host", device_blocks_, "device");
    for (const auto& p : pairs) copy_block(host_, p.src, device_, p.dst, device_blocks_);
  }
  void copy_blocks(std::span<const pllm_block_copy> pairs) {
    check_.block_pairs("copy_blocks", pairs, device_blocks_, "device", device_blocks_, "device");
    for (const auto& p : pairs) copy_block(device_, p.src, device_, p.dst, device_blocks_);
  }

 private:
  static int64_t element_size(pllm_dtype dtype) {
    if (dtype == PLLM_DTYPE_F32) return 4;
    if (dtype == PLLM_DTYPE_BF16) return 2;
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "example_attention: the KV cache dtype must be f32 or bf16");
  }

  // Bytes of one layer's K (or V) array in a pool of `blocks` blocks.
  uint64_t layer_array_bytes(int64_t blocks) const {
    return uint64_t(blocks) * uint64_t(spec_.block_size) * uint64_t(spec_.num_kv_heads) * uint64_t(spec_.head_dim) *
           uint64_t(element_size(spec_.dtype));
  }

  // The head_dim vector of kv head g at `slot` (= block * block_size + offset) of a layer's K or V.
  unsigned char* cache_row(int32_t layer, int which /* 0 = K, 1 = V */, int64_t slot, int32_t g) {
    const uint64_t array = uint64_t(2 * layer + which) * layer_array_bytes(device_blocks_);
    const uint64_t row = (uint64_t(slot) * uint64_t(spec_.num_kv_heads) + uint64_t(g)) * uint64_t(spec_.head_dim);
    return device_.data() + array + row * uint64_t(element_size(spec_.dtype));
  }
  unsigned char* key_cache(int32_t layer, int64_t slot, int32_t g) { return cache_row(layer, 0, slot, g); }
  unsigned char* value_cache(int32_t layer, int64_t slot, int32_t g) { return cache_row(layer, 1, slot, g); }

  // The slot of context position `pos` of sequence `s`, through its block table.
  int64_t slot_of(int32_t s, int32_t pos) const {
    const pllm_batch& b = *batch_;
    const int64_t block = b.block_tables[int64_t(s) * b.max_blocks_per_seq + pos / b.block_size];
    return block * b.block_size + pos % b.block_size;
  }

  float cached_value(const unsigned char* row, int32_t d) const {
    if (spec_.dtype == PLLM_DTYPE_F32) {
      float f;
      std::memcpy(&f, row + 4 * d, 4);
      return f;
    }
    std::uint16_t bits;
    std::memcpy(&bits, row + 2 * d, 2);
    return pllm::bf16_to_f32(bits);
  }
  void store(unsigned char* row, int32_t d, float value) const {
    if (spec_.dtype == PLLM_DTYPE_F32) {
      std::memcpy(row + 4 * d, &value, 4);
    } else {
      const std::uint16_t bits = f32_to_bf16(value);
      std::memcpy(row + 2 * d, &bits, 2);
    }
  }

  // Element [t, h, d] of a [tokens, heads, head_dim] activation (strides in elements).
  float load(const pllm_tensor& x, int32_t t, int32_t h, int32_t d) const {
    const int64_t index = t * x.strides[0] + h * x.strides[1] + d;
    return cached_value(static_cast<const unsigned char*>(x.data) + index * element_size(x.dtype), 0);
  }
  void store_output(const pllm_tensor& x, int32_t t, int32_t h, int32_t d, float value) const {
    const int64_t index = t * x.strides[0] + h * x.strides[1] + d;
    store(static_cast<unsigned char*>(x.data) + index * element_size(x.dtype), 0, value);
  }

  // Copies block `src` of pool `from` to block `dst` of pool `to` (of `to_blocks` blocks), every layer, K and V.
  void copy_block(const std::vector<unsigned char>& from, int64_t src, std::vector<unsigned char>& to, int64_t dst,
                  int64_t to_blocks) {
    const int64_t from_blocks = &from == &device_ ? device_blocks_ : host_blocks_;
    const uint64_t block_bytes = layer_array_bytes(1);
    for (int array = 0; array < 2 * spec_.num_layers; ++array) {
      std::memcpy(to.data() + uint64_t(array) * layer_array_bytes(to_blocks) + uint64_t(dst) * block_bytes,
                  from.data() + uint64_t(array) * layer_array_bytes(from_blocks) + uint64_t(src) * block_bytes,
                  block_bytes);
    }
  }

  pllm::PagedInputCheck check_{"example_attention"};
  pllm_kv_cache_spec spec_{};
  int64_t device_blocks_ = 0, host_blocks_ = 0;
  std::vector<unsigned char> device_, host_;
  const pllm_batch* batch_ = nullptr;
};

}  // namespace

PAGEDLLM_PLUGIN(ExampleAttention, "example_attention", "1.0.0",
                "Example: a plain paged attention on the CPU (f32, bf16)")
