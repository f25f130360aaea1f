// The reference kernel: deliberately the most literal reading of the math in
// paged_attention.h. Everything is f32; the softmax subtracts the exact
// maximum (first pass) before exponentiating (second pass).

#include <cmath>
#include <limits>
#include <vector>

#include "dtype_convert.h"
#include "paged_attention.h"

namespace pagedllm::attention_cpu {
namespace {

template <class Cache>
void reference_impl(const AttentionProblem& p) {
  const pllm_batch& b = *p.batch;
  const auto* keys = reinterpret_cast<const Cache*>(p.key_cache);
  const auto* values = reinterpret_cast<const Cache*>(p.value_cache);
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int64_t hd = p.head_dim;
  std::vector<float> q(static_cast<std::size_t>(hd));
  std::vector<float> acc(static_cast<std::size_t>(hd));
  std::vector<float> weights;

  // Where the K (or V) vector of context token `pos` of sequence `s`, kv head `g`, lives.
  auto cache_row = [&](const Cache* cache, int32_t s, int32_t pos, int32_t g) {
    const int64_t block = b.block_tables[int64_t(s) * b.max_blocks_per_seq + pos / p.block_size];
    const int64_t offset = pos % p.block_size;
    return cache + ((block * p.num_kv_heads + g) * p.block_size + offset) * hd;
  };

  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int32_t first = b.query_start_loc[s];
    const int32_t query_len = b.query_start_loc[s + 1] - first;
    const int32_t context_len = b.seq_lens[s] - query_len;
    for (int32_t i = 0; i < query_len; ++i) {
      const int32_t t = first + i;
      const int32_t position = context_len + i;
      for (int32_t h = 0; h < p.num_heads; ++h) {
        const int32_t g = h / group;
        load_f32(p.query.row(t, h), p.query.dtype, q.data(), hd);

        const int32_t lo = first_visible(position, p.sliding_window);
        weights.assign(static_cast<std::size_t>(position) + 1, 0.0f);
        float max_score = -std::numeric_limits<float>::infinity();
        for (int32_t j = lo; j <= position; ++j) {
          const Cache* k = cache_row(keys, s, j, g);
          float dot = 0.0f;
          for (int64_t d = 0; d < hd; ++d) dot += q[std::size_t(d)] * to_f32(k[d]);
          weights[std::size_t(j)] = dot * p.scale;
          max_score = std::max(max_score, weights[std::size_t(j)]);
        }
        float sum = 0.0f;
        for (int32_t j = lo; j <= position; ++j) {
          float& w = weights[std::size_t(j)];
          w = std::exp(w - max_score);
          sum += w;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int32_t j = lo; j <= position; ++j) {
          const Cache* v = cache_row(values, s, j, g);
          for (int64_t d = 0; d < hd; ++d) acc[std::size_t(d)] += weights[std::size_t(j)] * to_f32(v[d]);
        }
        for (auto& a : acc) a /= sum;
        store_f32(acc.data(), p.output.dtype, p.output.row(t, h), hd);
      }
    }
  }
}

}  // namespace

void reference_attention(const AttentionProblem& problem) {
  switch (problem.cache_dtype) {
    case PLLM_DTYPE_F32: return reference_impl<float>(problem);
    case PLLM_DTYPE_F16: return reference_impl<f16_t>(problem);
    case PLLM_DTYPE_BF16: return reference_impl<bf16_t>(problem);
    case PLLM_DTYPE_FORCE_32BIT:
    case PLLM_DTYPE_INVALID:
    case PLLM_DTYPE_I32:
    case PLLM_DTYPE_I64:
    case PLLM_DTYPE_U8:
    case PLLM_DTYPE_I8:
      break;
  }
}

}  // namespace pagedllm::attention_cpu
