// The work list plan() builds (host code, runs everywhere): every query row
// of every sequence is covered by exactly one tile, each tile's items cover
// exactly the positions its last row attends, in partitions of
// partition_size, and split tiles' partial slots are consecutive and unique.

#include <catch2/catch.hpp>

#include <vector>

#include "step_metadata.h"
#include "tests/plugins/attention_cpu/attention_harness.h"

using pagedllm::attention_cuda::kTileRows;
using pagedllm::attention_cuda::SplitPolicy;
using pagedllm::attention_cuda::WorkList;

namespace {

// Sequences given as (context before the step, new rows).
attention_test::HostBatch batch_of(const std::vector<std::pair<int32_t, int32_t>>& seqs) {
  attention_test::HostBatch sb;
  sb.block_size = 16;
  sb.max_blocks_per_seq = 1;
  for (const auto& [context, rows] : seqs) {
    for (int32_t i = 0; i < rows; ++i) sb.slot_mapping.push_back(-1);
    sb.query_start_loc.push_back(int32_t(sb.slot_mapping.size()));
    sb.seq_lens.push_back(context + rows);
    sb.block_tables.push_back(0);
  }
  return sb;
}

}  // namespace

TEST_CASE("attention_cuda work list: tiles, partitions and partial slots", "[attention_cuda][work_list]") {
  // A decode, a speculative decode (1 + 4), a long decode, and a 20-row
  // prefill chunk over 1000 cached tokens (tiles of 8, 8 and 4 rows).
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{10, 1}, {600, 5}, {2100, 1}, {1000, 20}};
  const attention_test::HostBatch sb = batch_of(seqs);
  const pllm_batch b = sb.view();
  const SplitPolicy policy{256, 700};
  WorkList list;
  list.build(b, policy);

  CHECK(list.max_tile_rows == kTileRows);
  std::vector<int32_t> rows_covered(seqs.size(), 0);
  int32_t next_partial = 0;
  std::size_t item = 0;
  std::size_t combine = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const auto [context, rows] = seqs[s];
    for (int32_t row = 0; row < rows; row += kTileRows) {
      const int32_t tile_rows = std::min(kTileRows, rows - row);
      const int32_t kv_limit = context + row + tile_rows;
      INFO("sequence " << s << ", tile at row " << row);
      REQUIRE(item < list.work.size());
      const bool split = kv_limit > policy.split_min_context;
      if (!split) {
        const auto& w = list.work[item++];
        CHECK(w.seq == int32_t(s));
        CHECK(w.row_begin == row);
        CHECK(w.row_count == tile_rows);
        CHECK(w.kv_begin == 0);
        CHECK(w.kv_end == kv_limit);
        CHECK(w.partial == -1);
        rows_covered[s] += tile_rows;
        continue;
      }
      REQUIRE(combine < list.combine.size());
      const auto& c = list.combine[combine++];
      CHECK(c.seq == int32_t(s));
      CHECK(c.row_begin == row);
      CHECK(c.row_count == tile_rows);
      CHECK(c.first_partial == next_partial);
      CHECK(c.num_partials == (kv_limit + 255) / 256);
      int32_t covered = 0;
      for (int32_t p = 0; p < c.num_partials; ++p) {
        const auto& w = list.work[item++];
        CHECK(w.seq == int32_t(s));
        CHECK(w.row_begin == row);
        CHECK(w.kv_begin == covered);
        CHECK(w.kv_end == std::min(kv_limit, covered + 256));
        CHECK(w.partial == next_partial++);
        covered = w.kv_end;
      }
      CHECK(covered == kv_limit);
      rows_covered[s] += tile_rows;
    }
    CHECK(rows_covered[s] == rows);
  }
  CHECK(item == list.work.size());
  CHECK(combine == list.combine.size());
  CHECK(list.num_partials == next_partial);
  // 2100 + 1 -> 9 partitions; the chunk's tiles end at 1008, 1016, 1020 -> 4 each.
  CHECK(list.num_partials == 9 + 3 * 4);

  SECTION("a context of one partition is never split, and rebuilding starts afresh") {
    list.build(batch_of({{100, 1}}).view(), SplitPolicy{256, 0});
    REQUIRE(list.work.size() == 1);
    CHECK(list.work[0].partial == -1);
    CHECK(list.combine.empty());
    CHECK(list.num_partials == 0);
    CHECK(list.max_tile_rows == 1);
  }
}
