// The step plan rank 0 sends to tensor-parallel workers (core/engine/tensor_parallel.h): every
// array and count of the batch and every block operation arrives as sent, and a message that
// does not add up is refused, never read past its end. The sent batch is the scheduler's own
// layout (build_step_batch), compared field by field with what the worker's view points at.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <stdexcept>
#include <vector>

#include "core/engine/plugin_batch.h"
#include "core/engine/tensor_parallel.h"
#include "core/scheduler/step_batch_builder.h"

using namespace pagedllm;
using Ints = std::vector<std::int32_t>;

namespace {

template <class T>
std::vector<T> copy_of(const T* data, std::int64_t count) {
  return count == 0 ? std::vector<T>{} : std::vector<T>(data, data + count);
}

void check_same_batch(const pllm_batch& got, const pllm_batch& sent) {
  CHECK(got.num_seqs == sent.num_seqs);
  CHECK(got.num_tokens == sent.num_tokens);
  CHECK(got.num_decode_seqs == sent.num_decode_seqs);
  CHECK(got.max_query_len == sent.max_query_len);
  CHECK(got.max_seq_len == sent.max_seq_len);
  CHECK(got.block_size == sent.block_size);
  CHECK(got.max_blocks_per_seq == sent.max_blocks_per_seq);
  CHECK(got.num_logits == sent.num_logits);
  CHECK(got.num_hidden == sent.num_hidden);
  CHECK(copy_of(got.token_ids, got.num_tokens) == copy_of(sent.token_ids, sent.num_tokens));
  CHECK(copy_of(got.positions, got.num_tokens) == copy_of(sent.positions, sent.num_tokens));
  CHECK(copy_of(got.slot_mapping, got.num_tokens) == copy_of(sent.slot_mapping, sent.num_tokens));
  CHECK(copy_of(got.query_start_loc, got.num_seqs + 1) == copy_of(sent.query_start_loc, sent.num_seqs + 1));
  CHECK(copy_of(got.seq_lens, got.num_seqs) == copy_of(sent.seq_lens, sent.num_seqs));
  const std::int64_t table = std::int64_t{sent.num_seqs} * sent.max_blocks_per_seq;
  CHECK(copy_of(got.block_tables, table) == copy_of(sent.block_tables, table));
  CHECK(copy_of(got.logits_indices, got.num_logits) == copy_of(sent.logits_indices, sent.num_logits));
  CHECK(copy_of(got.hidden_indices, got.num_hidden) == copy_of(sent.hidden_indices, sent.num_hidden));
}

std::vector<std::pair<std::int64_t, std::int64_t>> pairs(const std::vector<pllm_block_copy>& copies) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (const pllm_block_copy& c : copies) out.emplace_back(c.src, c.dst);
  return out;
}

}  // namespace

TEST_CASE("tensor-parallel step plan: a mixed batch and its block operations arrive as sent") {
  // Block size 4: a prefill from 0 sampled at its end, a decode, a chunk without logits, a
  // speculative decode with 2 drafts (all its rows have logits).
  const Ints a_tokens{10, 11, 12, 13, 14}, a_table{7, 3};
  const Ints b_tokens{20}, b_table{5, 9};
  const Ints c_tokens{30, 31}, c_table{1, 2, 4};
  const Ints d_tokens{40, 41, 42}, d_table{6, 8};
  const std::vector<BatchRow> rows{
      {a_tokens, 0, a_table, 1, false},
      {b_tokens, 6, b_table, 1, true},
      {c_tokens, 8, c_table, 0, false},
      {d_tokens, 5, d_table, 3, true},
  };
  const StepBatch step = build_step_batch(rows, 4).batch;
  const std::vector<std::int32_t> hidden{0, 3, 8};
  const pllm_batch sent = plugin_batch_view(step, hidden);
  const std::vector<pllm_block_copy> swap_out{{4, 0}, {9, 1}}, swap_in{{2, 11}}, copies{{5, 12}, {6, 13}, {7, 14}};

  const std::vector<std::byte> bytes = encode_step_plan({sent, swap_out, swap_in, copies});
  const StepPlan plan = decode_step_plan(bytes);
  check_same_batch(plan.view(), sent);
  CHECK(pairs(plan.swap_out) == pairs(swap_out));
  CHECK(pairs(plan.swap_in) == pairs(swap_in));
  CHECK(pairs(plan.copies) == pairs(copies));

  SECTION("no hidden rows and no block operations: empty, not missing") {
    const pllm_batch plain = plugin_batch_view(step, {});
    const StepPlan decoded = decode_step_plan(encode_step_plan({plain, {}, {}, {}}));
    check_same_batch(decoded.view(), plain);
    CHECK(decoded.view().hidden_indices == nullptr);
    CHECK(decoded.swap_out.empty());
    CHECK(decoded.swap_in.empty());
    CHECK(decoded.copies.empty());
  }
  SECTION("a message cut short anywhere is refused") {
    for (std::size_t size = 0; size < bytes.size(); size += 7) {
      CAPTURE(size);
      CHECK_THROWS_AS(decode_step_plan(std::span(bytes).first(size)), std::runtime_error);
    }
  }
  SECTION("bytes after the plan are refused") {
    std::vector<std::byte> longer = bytes;
    longer.push_back(std::byte{0});
    CHECK_THROWS_WITH(decode_step_plan(longer), Catch::Contains("1 bytes left over"));
  }
  SECTION("an array whose length disagrees with the counts is refused") {
    std::vector<std::byte> wrong = bytes;
    // The first count after the nine int32 scalars is token_ids': claim one token more.
    const std::int64_t more = sent.num_tokens + 1;
    std::memcpy(wrong.data() + 9 * sizeof(std::int32_t), &more, sizeof more);
    CHECK_THROWS_WITH(decode_step_plan(wrong), Catch::Contains("token_ids has 12 entries, its counts say 11"));
  }
}

TEST_CASE("tensor-parallel step plan: large random batches round-trip") {
  std::mt19937 random(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<Ints> tokens, tables;
    std::vector<BatchRow> rows;
    const int num_rows = 1 + static_cast<int>(random() % 40);
    tokens.reserve(static_cast<std::size_t>(num_rows));
    tables.reserve(static_cast<std::size_t>(num_rows));
    int next_block = 0;
    for (int r = 0; r < num_rows; ++r) {
      const bool decode = random() % 2 == 0;
      const int length = decode ? 1 : 1 + static_cast<int>(random() % 300);
      const int first = static_cast<int>(random() % 200);
      tokens.emplace_back();
      for (int j = 0; j < length; ++j) tokens.back().push_back(static_cast<std::int32_t>(random() % 50000));
      tables.emplace_back();
      for (int b = 0; b < (first + length + 15) / 16; ++b) tables.back().push_back(next_block++);
      rows.push_back({tokens.back(), first, tables.back(), decode ? 1 : static_cast<int>(random() % 2), decode});
    }
    const StepBatch step = build_step_batch(rows, 16).batch;
    const pllm_batch sent = plugin_batch_view(step, {});
    const std::vector<pllm_block_copy> copies{{static_cast<std::int64_t>(random() % 100), 3}};
    const StepPlan plan = decode_step_plan(encode_step_plan({sent, {}, {}, copies}));
    check_same_batch(plan.view(), sent);
    CHECK(pairs(plan.copies) == pairs(copies));
  }
}

TEST_CASE("tensor-parallel draft plan: the draft batch, its feature rows and their source arrive as sent") {
  // A draft over a prefill's new positions and a chain step of two decodes (EAGLE: feature rows
  // into the target's hidden states, then into the draft's own last logits rows).
  const Ints a_tokens{11, 12, 13}, a_table{7, 3};
  const Ints b_tokens{21}, b_table{5};
  const std::vector<BatchRow> rows{{a_tokens, 2, a_table, 1, false}, {b_tokens, 3, b_table, 1, true}};
  const StepBatch step = build_step_batch(rows, 4).batch;
  const pllm_batch sent = plugin_batch_view(step, {});
  const Ints feature_rows{4, 0, 1, 2};
  for (const bool target_features : {true, false}) {
    CAPTURE(target_features);
    const std::vector<std::byte> bytes = encode_draft_plan(sent, target_features, feature_rows);
    const DraftPlan plan = decode_draft_plan(bytes);
    check_same_batch(plan.batch.view(), sent);
    CHECK(plan.target_features == target_features);
    CHECK(plan.feature_rows == feature_rows);
    CHECK(plan.batch.swap_out.empty());
    CHECK(plan.batch.copies.empty());
    for (std::size_t size = 0; size < bytes.size(); size += 5) {
      CAPTURE(size);
      CHECK_THROWS_AS(decode_draft_plan(std::span(bytes).first(size)), std::runtime_error);
    }
  }
  SECTION("feature rows that are not one per token are refused") {
    const Ints short_rows{4, 0, 1};
    CHECK_THROWS_WITH(decode_draft_plan(encode_draft_plan(sent, true, short_rows)),
                      Catch::Contains("3 feature rows for 4 tokens"));
  }
  SECTION("a feature source other than 0 or 1 is refused") {
    std::vector<std::byte> wrong = encode_draft_plan(sent, true, feature_rows);
    const std::int32_t two = 2;
    std::memcpy(wrong.data(), &two, sizeof two);
    CHECK_THROWS_WITH(decode_draft_plan(wrong), Catch::Contains("feature source is 2"));
  }
}
