#include "tools/attn_bench/paged_case.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace pagedllm::attn_bench {

PagedCase::PagedCase(const CaseSpec& spec, uint64_t seed) : spec_(spec), random_(seed) {
  const int32_t bs = spec_.block_size;
  const int32_t num_seqs = spec_.batch;
  // Decodes first (batch.h), then the prefill chunks. Each sequence ends
  // within one block below the context, so last blocks are partly filled.
  for (int32_t s = 0; s < num_seqs; ++s) {
    const bool decode = s < spec_.decode_seqs();
    const int32_t query_len = decode ? 1 : spec_.chunk_len();
    const int32_t slack = std::min(bs - 1, spec_.context - query_len);
    const int32_t seq_len = spec_.context - int32_t(random_.below(uint64_t(slack) + 1));
    seq_lens_.push_back(seq_len);
    query_lens_.push_back(query_len);
    max_blocks_per_seq_ = std::max(max_blocks_per_seq_, (seq_len + bs - 1) / bs);
  }
  int64_t used = 0;
  for (int32_t len : seq_lens_) used += (len + bs - 1) / bs;
  num_device_blocks_ = used + kSpareBlocks;

  // A randomly permuted pool: every sequence owns scattered, non-contiguous blocks.
  std::vector<int32_t> pool(static_cast<std::size_t>(num_device_blocks_));
  std::iota(pool.begin(), pool.end(), 0);
  for (std::size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[random_.below(i)]);
  std::size_t next = 0;
  for (int32_t len : seq_lens_) {
    std::vector<int32_t> table(std::size_t(max_blocks_per_seq_), -1);
    for (int32_t i = 0; i < (len + bs - 1) / bs; ++i) table[std::size_t(i)] = pool[next++];
    tables_.push_back(std::move(table));
  }

  // Fill rounds: offset r of every block, as one-block sequences of length r + 1.
  HostBatch current;
  auto flush = [&] {
    if (current.num_tokens() == 0) return;
    current.num_decode_seqs = current.num_seqs();
    fill_batches_.push_back(std::move(current));
    current = HostBatch{};
  };
  for (int32_t r = 0; r < bs; ++r) {
    for (int32_t s = 0; s < num_seqs; ++s) {
      const int32_t cached = seq_lens_[std::size_t(s)] - query_lens_[std::size_t(s)];
      for (int32_t p = r; p < cached; p += bs) {
        if (current.num_tokens() == 0) {
          current.block_size = bs;
          current.max_blocks_per_seq = 1;
        }
        const int32_t block = tables_[std::size_t(s)][std::size_t(p / bs)];
        current.token_ids.push_back(p);
        current.positions.push_back(r);
        current.slot_mapping.push_back(int64_t(block) * bs + r);
        current.seq_lens.push_back(r + 1);
        current.query_start_loc.push_back(current.num_tokens());
        current.block_tables.push_back(block);
        if (current.num_tokens() == kFillTokens) flush();
      }
    }
    flush();  // a round never shares a batch with the next: it reads what this one wrote
  }

  // The step: each sequence's last query_len positions are new.
  HostBatch& b = step_.batch;
  b.block_size = bs;
  b.max_blocks_per_seq = max_blocks_per_seq_;
  b.num_decode_seqs = spec_.decode_seqs();
  for (int32_t s = 0; s < num_seqs; ++s) {
    const auto& table = tables_[std::size_t(s)];
    const int32_t len = seq_lens_[std::size_t(s)];
    for (int32_t p = len - query_lens_[std::size_t(s)]; p < len; ++p) {
      b.token_ids.push_back(p);
      b.positions.push_back(p);
      b.slot_mapping.push_back(int64_t(table[std::size_t(p / bs)]) * bs + p % bs);
    }
    b.query_start_loc.push_back(b.num_tokens());
    b.seq_lens.push_back(len);
    b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
  }
  const auto tokens = std::size_t(b.num_tokens());
  const auto hd = std::size_t(spec_.head_dim);
  step_.query = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_heads()) * hd);
  step_.key = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_kv_heads) * hd);
  step_.value = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_kv_heads) * hd);
  fill_random(step_.query);
  fill_random(step_.key);
  fill_random(step_.value);
}

pllm_kv_cache_spec PagedCase::cache_spec(const CaseSpec& spec) {
  pllm_kv_cache_spec s{};
  s.struct_size = sizeof s;
  s.num_layers = 1;
  s.num_kv_heads = spec.num_kv_heads;
  s.head_dim = spec.head_dim;
  s.block_size = spec.block_size;
  s.dtype = spec.dtype;
  return s;
}

float PagedCase::scale() const { return 1.0f / std::sqrt(float(spec_.head_dim)); }

void PagedCase::fill_random(TypedBuffer& buffer) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer.set(i, random_.uniform());
}

StepInputs PagedCase::fill_step(int32_t i) {
  StepInputs in;
  in.batch = fill_batches_[std::size_t(i)];
  const auto tokens = std::size_t(in.batch.num_tokens());
  const auto hd = std::size_t(spec_.head_dim);
  in.query = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_heads()) * hd);
  in.key = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_kv_heads) * hd);
  in.value = TypedBuffer(spec_.dtype, tokens * std::size_t(spec_.num_kv_heads) * hd);
  fill_random(in.query);
  fill_random(in.key);
  fill_random(in.value);
  return in;
}

int64_t PagedCase::cached_tokens() const {
  int64_t n = 0;
  for (std::size_t s = 0; s < seq_lens_.size(); ++s) n += seq_lens_[s] - query_lens_[s];
  return n;
}

uint64_t PagedCase::kv_bytes_read() const {
  uint64_t tokens = 0;
  for (int32_t len : seq_lens_) tokens += uint64_t(len);
  return tokens * uint64_t(spec_.num_kv_heads) * uint64_t(spec_.head_dim) * 2u * uint64_t(pllm_dtype_size(spec_.dtype));
}

int64_t PagedCase::max_device_blocks(const CaseSpec& spec) {
  return int64_t(spec.batch) * ((spec.context + spec.block_size - 1) / spec.block_size) + kSpareBlocks;
}

uint64_t PagedCase::max_host_bytes(const CaseSpec& spec) {
  // Per token: Q and two outputs (one per backend) of num_heads rows, K and V of num_kv_heads rows.
  const uint64_t per_token = (3u * uint64_t(spec.num_heads()) + 2u * uint64_t(spec.num_kv_heads)) *
                             uint64_t(spec.head_dim) * uint64_t(pllm_dtype_size(spec.dtype));
  const uint64_t step_tokens = uint64_t(spec.decode_seqs()) + uint64_t(spec.prefill_seqs()) * uint64_t(spec.chunk_len());
  const uint64_t cached = uint64_t(spec.batch) * uint64_t(spec.context);
  // Fill metadata: token id, position, slot, query_start_loc, seq_len, block table entry.
  const uint64_t fill_metadata = cached * (5u * sizeof(int32_t) + sizeof(int64_t));
  return per_token * (step_tokens + uint64_t(std::min<uint64_t>(kFillTokens, cached))) + fill_metadata;
}

}  // namespace pagedllm::attn_bench
