#pragma once
// The inputs of one case, identical for both backends: sequences whose blocks
// are scattered over a randomly permuted pool, random K/V for every cached
// position, and the step to time (random Q/K/V for its new tokens).
//
// The cache is filled only the way the SDK allows, through run() writing K/V
// at slot_mapping: fill round r (r = 0 .. block_size - 1) writes offset r of
// every cached block, as a batch of one-token sequences that are each one
// block long (seq_len r + 1, block table = that block). Each round reads only
// slots earlier rounds wrote, plus its own new token, exactly like a decode
// step, so its outputs are well defined and compared too.

#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"
#include "tools/attn_bench/bench_cases.h"
#include "tools/common/host_batch.h"
#include "tools/common/typed_buffer.h"

namespace pagedllm::attn_bench {

using tools::HostBatch;
using tools::TypedBuffer;

// One plan + run(layer 0): the batch and its Q/K/V.
struct StepInputs {
  HostBatch batch;
  TypedBuffer query, key, value;
};

// A small fast generator (splitmix64): the same seed gives the same inputs.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1) with 24 random bits.
  float uniform() { return float(int64_t(next() >> 40) - (int64_t(1) << 23)) * 0x1p-23f; }
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t state_;
};

class PagedCase {
 public:
  // Tokens per fill batch: bounds the staging memory of a fill.
  static constexpr int32_t kFillTokens = 4096;
  // Blocks in the pool beyond what the sequences use.
  static constexpr int32_t kSpareBlocks = 16;

  PagedCase(const CaseSpec& spec, uint64_t seed);

  const CaseSpec& spec() const { return spec_; }
  pllm_kv_cache_spec cache_spec() const { return cache_spec(spec_); }
  static pllm_kv_cache_spec cache_spec(const CaseSpec& spec);  // one layer
  int64_t num_device_blocks() const { return num_device_blocks_; }
  float scale() const;

  // The fill batches, in order. Generating one draws its K/V from the case's
  // generator, so call fill_step(0), fill_step(1), ... once each.
  int32_t num_fill_steps() const { return int32_t(fill_batches_.size()); }
  StepInputs fill_step(int32_t i);
  int64_t cached_tokens() const;

  // The timed step: decode sequences first, then prefill chunks.
  StepInputs& step() { return step_; }
  const std::vector<int32_t>& seq_lens() const { return seq_lens_; }

  // Bytes of K and V the step must read: sum over sequences of
  // seq_len * num_kv_heads * head_dim * 2 * dtype size (one layer).
  uint64_t kv_bytes_read() const;
  // Upper bounds known before anything is generated, for the memory check:
  // device blocks, and host memory for the batches' metadata and the Q/K/V/
  // output buffers of the step and one fill batch.
  static int64_t max_device_blocks(const CaseSpec& spec);
  static uint64_t max_host_bytes(const CaseSpec& spec);

 private:
  void fill_random(TypedBuffer& buffer);

  CaseSpec spec_;
  Random random_;
  std::vector<int32_t> seq_lens_, query_lens_;
  std::vector<std::vector<int32_t>> tables_;  // per sequence, max_blocks_per_seq entries, -1 unused
  int32_t max_blocks_per_seq_ = 0;
  int64_t num_device_blocks_ = 0;
  std::vector<HostBatch> fill_batches_;
  StepInputs step_;
};

}  // namespace pagedllm::attn_bench
