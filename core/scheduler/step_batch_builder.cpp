#include "core/scheduler/step_batch_builder.h"

#include <algorithm>
#include <numeric>

#include "core/common/check.h"

namespace pagedllm {

BuiltBatch build_step_batch(std::span<const BatchRow> rows, int block_size) {
  PAGEDLLM_CHECK(block_size > 0, "block size {}", block_size);
  BuiltBatch built;
  StepBatch& batch = built.batch;
  batch.block_size = block_size;

  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return rows[i].is_decode; });
  built.batch_row.resize(rows.size());
  for (std::size_t b = 0; b < order.size(); ++b) built.batch_row[order[b]] = static_cast<int>(b);

  for (const BatchRow& row : rows) {
    batch.max_blocks_per_seq = std::max(batch.max_blocks_per_seq, static_cast<std::int32_t>(row.block_table.size()));
  }
  const auto max_blocks = static_cast<std::size_t>(batch.max_blocks_per_seq);
  batch.query_start_loc.push_back(0);
  for (const std::size_t i : order) {
    const BatchRow& row = rows[i];
    const auto num_tokens = static_cast<int>(row.tokens.size());
    PAGEDLLM_CHECK(num_tokens > 0, "a batch row without tokens (at position {})", row.first_position);
    PAGEDLLM_CHECK(row.num_logits >= 0 && row.num_logits <= num_tokens, "{} logits rows for a row of {} tokens",
                   row.num_logits, num_tokens);
    for (int j = 0; j < num_tokens; ++j) {
      const int position = row.first_position + j;
      const auto block = static_cast<std::size_t>(position / block_size);
      PAGEDLLM_CHECK(position >= 0 && block < row.block_table.size() && row.block_table[block] >= 0,
                     "position {} has no KV block (the row's table holds {})", position, row.block_table.size());
      batch.token_ids.push_back(row.tokens[static_cast<std::size_t>(j)]);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back(static_cast<std::int64_t>(row.block_table[block]) * block_size +
                                   position % block_size);
    }
    if (row.is_decode) ++batch.num_decode_seqs;
    batch.query_start_loc.push_back(batch.num_tokens());
    const int seq_len = row.first_position + num_tokens;
    batch.seq_lens.push_back(seq_len);
    batch.max_query_len = std::max(batch.max_query_len, num_tokens);
    batch.max_seq_len = std::max(batch.max_seq_len, seq_len);
    batch.block_tables.insert(batch.block_tables.end(), row.block_table.begin(), row.block_table.end());
    batch.block_tables.insert(batch.block_tables.end(), max_blocks - row.block_table.size(), kInvalidBlockId);
  }

  built.first_logits_index.assign(rows.size(), -1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].num_logits == 0) continue;
    const std::int32_t end = batch.query_start_loc[static_cast<std::size_t>(built.batch_row[i]) + 1];
    const std::int32_t first = end - rows[i].num_logits;
    built.first_logits_index[i] = static_cast<int>(batch.logits_indices.size());
    for (std::int32_t t = first; t < end; ++t) batch.logits_indices.push_back(t);
  }
  return built;
}

}  // namespace pagedllm
