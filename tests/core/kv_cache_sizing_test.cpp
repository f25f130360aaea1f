// The profiling batch of KV pool sizing: the largest step the scheduler can
// plan, laid out exactly (core/engine/kv_cache_sizing.h).

#include <catch2/catch.hpp>

#include <vector>

#include "core/engine/kv_cache_sizing.h"

using namespace pagedllm;

namespace {

SchedulerConfig limits(int max_num_seqs, int max_num_batched_tokens) {
  SchedulerConfig s;
  s.max_num_seqs = max_num_seqs;
  s.max_num_batched_tokens = max_num_batched_tokens;
  return s;
}

using Ints = std::vector<std::int32_t>;

}  // namespace

TEST_CASE("the profiling batch spreads max_num_batched_tokens over max_num_seqs prefills", "[kv_sizing]") {
  // 10 tokens over 4 sequences: 3, 3, 2, 2 tokens, one 4-token block each.
  const ProfilingBatch p = make_profiling_batch(limits(4, 10), 256, 4, 0);
  const StepBatch& b = p.batch;
  CHECK(b.num_tokens() == 10);
  CHECK(b.num_seqs() == 4);
  CHECK(b.num_decode_seqs == 0);
  CHECK(b.query_start_loc == Ints{0, 3, 6, 8, 10});
  CHECK(b.seq_lens == Ints{3, 3, 2, 2});
  CHECK(b.positions == Ints{0, 1, 2, 0, 1, 2, 0, 1, 0, 1});
  CHECK(b.slot_mapping == std::vector<std::int64_t>{0, 1, 2, 4, 5, 6, 8, 9, 12, 13});
  CHECK(b.max_blocks_per_seq == 1);
  CHECK(b.block_tables == Ints{0, 1, 2, 3});
  CHECK(b.max_query_len == 3);
  CHECK(b.max_seq_len == 3);
  CHECK(b.block_size == 4);
  CHECK(p.num_blocks == 4);
  // One logits row per sequence: its last token.
  CHECK(b.logits_indices == Ints{2, 5, 7, 9});
  CHECK(p.hidden_indices.empty());
}

TEST_CASE("with a speculator the profiling batch has logits for 1 + K rows per sequence and hidden for all",
          "[kv_sizing]") {
  SECTION("more tokens than max_num_seqs * (1 + K): max_num_seqs * (1 + K) logits rows") {
    const ProfilingBatch p = make_profiling_batch(limits(2, 12), 256, 4, 2);
    CHECK(p.batch.logits_indices == Ints{3, 4, 5, 9, 10, 11});
    CHECK(p.hidden_indices == Ints{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  }
  SECTION("fewer: every token is a logits row") {
    const ProfilingBatch p = make_profiling_batch(limits(4, 10), 256, 4, 2);
    CHECK(p.batch.logits_indices == Ints{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
    CHECK(p.hidden_indices.size() == 10);
  }
}

TEST_CASE("the profiling batch never exceeds what the scheduler can plan", "[kv_sizing]") {
  SECTION("fewer tokens than max_num_seqs: one-token sequences") {
    const ProfilingBatch p = make_profiling_batch(limits(16, 3), 256, 4, 0);
    CHECK(p.batch.seq_lens == Ints{1, 1, 1});
    CHECK(p.batch.logits_indices == Ints{0, 1, 2});
    CHECK(p.num_blocks == 3);
  }
  SECTION("max_num_seqs sequences of max_model_len hold fewer than max_num_batched_tokens") {
    const ProfilingBatch p = make_profiling_batch(limits(2, 64), 5, 4, 0);
    CHECK(p.batch.num_tokens() == 10);
    CHECK(p.batch.seq_lens == Ints{5, 5});
    CHECK(p.batch.max_blocks_per_seq == 2);
    CHECK(p.batch.block_tables == Ints{0, 1, 2, 3});
    CHECK(p.batch.slot_mapping == std::vector<std::int64_t>{0, 1, 2, 3, 4, 8, 9, 10, 11, 12});
    CHECK(p.num_blocks == 4);
  }
}
