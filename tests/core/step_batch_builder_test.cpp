// build_step_batch(): the batch layout the target step and the draft batches share. Expected
// tables come from a hand-worked example and from a plain walk of the given rows and their
// block tables, never from the builder.

#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <vector>

#include "core/common/check.h"
#include "core/scheduler/step_batch_builder.h"

using namespace pagedllm;
using Ints = std::vector<std::int32_t>;

TEST_CASE("step batch builder: decode rows first, slots from the block tables, logits in the given order") {
  // Block size 4. Given in the order A, B, C, D; B and D are decodes, so the batch is B, D, A, C.
  const Ints a_tokens{10, 11, 12, 13, 14}, a_table{7, 3};     // prefill from 0, sampled at its end
  const Ints b_tokens{20}, b_table{5, 9};                     // decode at position 6
  const Ints c_tokens{30, 31}, c_table{1, 2, 4};              // prefill chunk at 8..9, no logits
  const Ints d_tokens{40, 41, 42}, d_table{6, 8};             // speculative decode at 5..7: 2 drafts
  const std::vector<BatchRow> rows{
      // tokens, first position, block table, logits rows (at the end), decode
      {a_tokens, 0, a_table, 1, false},
      {b_tokens, 6, b_table, 1, true},
      {c_tokens, 8, c_table, 0, false},
      {d_tokens, 5, d_table, 3, true},
  };
  const BuiltBatch built = build_step_batch(rows, 4);
  const StepBatch& b = built.batch;

  CHECK(built.batch_row == std::vector<int>{2, 0, 3, 1});
  CHECK(b.token_ids == Ints{20, 40, 41, 42, 10, 11, 12, 13, 14, 30, 31});
  CHECK(b.positions == Ints{6, 5, 6, 7, 0, 1, 2, 3, 4, 8, 9});
  // B: 9*4+2. D: 8*4+1..3. A: 7*4+0..3, then 3*4+0. C: 4*4+0..1.
  CHECK(b.slot_mapping == std::vector<std::int64_t>{38, 33, 34, 35, 28, 29, 30, 31, 12, 16, 17});
  CHECK(b.query_start_loc == Ints{0, 1, 4, 9, 11});
  CHECK(b.seq_lens == Ints{7, 8, 5, 10});
  CHECK(b.max_blocks_per_seq == 3);
  CHECK(b.block_tables == Ints{5, 9, -1, 6, 8, -1, 7, 3, -1, 1, 2, 4});
  CHECK(b.block_size == 4);
  CHECK(b.num_decode_seqs == 2);
  CHECK(b.max_query_len == 5);
  CHECK(b.max_seq_len == 10);
  // A's last token (batch token 8), B's only token (0), D's three (1..3); C none.
  CHECK(b.logits_indices == Ints{8, 0, 1, 2, 3});
  CHECK(built.first_logits_index == std::vector<int>{0, 1, -1, 2});
}

TEST_CASE("step batch builder: random rows against a plain walk of their tokens and block tables") {
  std::mt19937 rng(20261125);
  const auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (int trial = 0; trial < 300; ++trial) {
    const int block_size = uniform(1, 8);
    const int num_rows = uniform(1, 9);
    std::vector<Ints> tokens(static_cast<std::size_t>(num_rows)), tables(static_cast<std::size_t>(num_rows));
    std::vector<BatchRow> rows;
    for (int r = 0; r < num_rows; ++r) {
      const auto i = static_cast<std::size_t>(r);
      const bool decode = uniform(0, 1) == 1;
      const int count = decode ? uniform(1, 4) : uniform(1, 20);
      const int first = uniform(0, 40);
      for (int j = 0; j < count; ++j) tokens[i].push_back(uniform(0, 50'000));
      const int blocks = (first + count + block_size - 1) / block_size + uniform(0, 2);  // spare blocks too
      for (int k = 0; k < blocks; ++k) tables[i].push_back(uniform(0, 10'000));
      // None, the last token's, every token's, or any count in between.
      const int num_logits = uniform(0, 2) == 0 ? 0 : uniform(0, 1) == 0 ? 1 : uniform(1, count);
      rows.push_back({tokens[i], first, tables[i], num_logits, decode});
    }
    const BuiltBatch built = build_step_batch(rows, block_size);
    const StepBatch& b = built.batch;
    INFO("trial " << trial);

    // Batch rows: the decodes in the given order, then the others in the given order.
    std::vector<std::size_t> expected_order;
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (rows[i].is_decode == (pass == 0)) expected_order.push_back(i);
      }
    }
    REQUIRE(b.num_seqs() == num_rows);
    std::size_t max_blocks = 0;
    for (const Ints& table : tables) max_blocks = std::max(max_blocks, table.size());
    REQUIRE(b.max_blocks_per_seq == static_cast<std::int32_t>(max_blocks));
    int token = 0, decodes = 0, max_query = 0, max_seq = 0;
    for (std::size_t batch_row = 0; batch_row < expected_order.size(); ++batch_row) {
      const std::size_t i = expected_order[batch_row];
      REQUIRE(built.batch_row[i] == static_cast<int>(batch_row));
      REQUIRE(b.query_start_loc[batch_row] == token);
      for (std::size_t j = 0; j < tokens[i].size(); ++j, ++token) {
        const int position = rows[i].first_position + static_cast<int>(j);
        const auto t = static_cast<std::size_t>(token);
        REQUIRE(b.token_ids[t] == tokens[i][j]);
        REQUIRE(b.positions[t] == position);
        // Slot = the block holding the position, times the block size, plus the offset in it.
        REQUIRE(b.slot_mapping[t] ==
                std::int64_t{tables[i][static_cast<std::size_t>(position / block_size)]} * block_size +
                    position % block_size);
      }
      REQUIRE(b.query_start_loc[batch_row + 1] == token);
      const int seq_len = rows[i].first_position + static_cast<int>(tokens[i].size());
      REQUIRE(b.seq_lens[batch_row] == seq_len);
      for (std::size_t k = 0; k < max_blocks; ++k) {
        REQUIRE(b.block_tables[batch_row * max_blocks + k] == (k < tables[i].size() ? tables[i][k] : -1));
      }
      decodes += rows[i].is_decode ? 1 : 0;
      max_query = std::max(max_query, static_cast<int>(tokens[i].size()));
      max_seq = std::max(max_seq, seq_len);
    }
    REQUIRE(b.num_tokens() == token);
    REQUIRE(b.num_decode_seqs == decodes);
    REQUIRE(b.max_query_len == max_query);
    REQUIRE(b.max_seq_len == max_seq);

    // Logits: the given rows in the given order; a row's batch tokens start where its batch row does.
    Ints expected_logits;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const std::int32_t start = b.query_start_loc[static_cast<std::size_t>(built.batch_row[i])];
      const auto count = static_cast<std::int32_t>(tokens[i].size());
      if (rows[i].num_logits == 0) {
        REQUIRE(built.first_logits_index[i] == -1);
        continue;
      }
      REQUIRE(built.first_logits_index[i] == static_cast<int>(expected_logits.size()));
      const std::int32_t first = start + count - rows[i].num_logits;
      for (std::int32_t t = first; t < start + count; ++t) expected_logits.push_back(t);
    }
    REQUIRE(b.logits_indices == expected_logits);
  }
}

TEST_CASE("step batch builder: a position without a block, a row without tokens, or more logits than tokens "
          "is a bug it reports") {
  const Ints tokens{1, 2, 3}, short_table{4}, hole_table{4, -1}, none;
  // Positions 2..4 with block size 2 need blocks 1 and 2.
  CHECK_THROWS_AS(build_step_batch(std::vector<BatchRow>{{tokens, 2, short_table, 0, false}}, 2),
                  InternalError);
  CHECK_THROWS_AS(build_step_batch(std::vector<BatchRow>{{tokens, 1, hole_table, 0, false}}, 2),
                  InternalError);
  CHECK_THROWS_AS(build_step_batch(std::vector<BatchRow>{{none, 0, short_table, 1, true}}, 2),
                  InternalError);
  const Ints long_table{4, 5, 6};
  CHECK_THROWS_AS(build_step_batch(std::vector<BatchRow>{{tokens, 2, long_table, 4, false}}, 2), InternalError);
  CHECK_THROWS_WITH(build_step_batch(std::vector<BatchRow>{{tokens, 2, short_table, 0, false}}, 2),
                    Catch::Contains("position 2 has no KV block"));
}
