#pragma once
// A step batch with owned host arrays, and the pllm_batch view of it that an
// attention backend's plan() or a model's forward() takes: what a caller that
// drives plugins without core (pagedllm-attn-bench, the plugin tests) builds
// its batches in. Core has its own (core/scheduler/scheduler_output.h).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pagedllm/sdk.h"

namespace pagedllm::tools {

struct HostBatch {
  std::vector<int32_t> token_ids, positions, query_start_loc{0}, seq_lens, block_tables;
  std::vector<int64_t> slot_mapping;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;  // entries per sequence in block_tables
  int32_t num_decode_seqs = 0;

  int32_t num_seqs() const { return int32_t(seq_lens.size()); }
  int32_t num_tokens() const { return int32_t(slot_mapping.size()); }

  // Points into this batch's vectors: valid while it is alive and unchanged.
  // No logits or hidden rows; a model caller sets those on the view.
  pllm_batch view() const {
    pllm_batch b{};
    b.struct_size = sizeof b;
    b.num_seqs = num_seqs();
    b.num_tokens = num_tokens();
    b.num_decode_seqs = num_decode_seqs;
    for (std::size_t s = 0; s < seq_lens.size(); ++s) {
      b.max_query_len = std::max(b.max_query_len, query_start_loc[s + 1] - query_start_loc[s]);
      b.max_seq_len = std::max(b.max_seq_len, seq_lens[s]);
    }
    b.block_size = block_size;
    b.max_blocks_per_seq = max_blocks_per_seq;
    b.token_ids = token_ids.data();
    b.positions = positions.data();
    b.slot_mapping = slot_mapping.data();
    b.query_start_loc = query_start_loc.data();
    b.seq_lens = seq_lens.data();
    b.block_tables = block_tables.data();
    return b;
  }
};

// One single-token sequence per slot of a pool of `num_slots` slots (token 0
// at position 0, seq_len 1, its block the slot's): run through a backend with
// NaN K/V, it fills every slot with NaN, so a read beyond a sequence's context
// shows in its output. Block tables are `max_blocks_per_seq` wide.
inline HostBatch every_slot_batch(int32_t num_slots, int32_t block_size, int32_t max_blocks_per_seq) {
  HostBatch b;
  b.block_size = block_size;
  b.max_blocks_per_seq = max_blocks_per_seq;
  for (int32_t slot = 0; slot < num_slots; ++slot) {
    b.token_ids.push_back(0);
    b.positions.push_back(0);
    b.slot_mapping.push_back(slot);
    b.query_start_loc.push_back(slot + 1);
    b.seq_lens.push_back(1);
    b.block_tables.push_back(slot / block_size);
    b.block_tables.insert(b.block_tables.end(), std::size_t(max_blocks_per_seq - 1), -1);
  }
  return b;
}

}  // namespace pagedllm::tools
