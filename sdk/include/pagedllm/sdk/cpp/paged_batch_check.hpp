#pragma once
// The checks an attention backend makes on what core hands it, shared by
// attention_cpu, attention_cuda and any out-of-tree backend (installed with the
// SDK; not part of sdk.hpp): a step batch against the cache (once per
// step, so the kernels never index out of bounds), the shape of a layer's
// activations, and block copy lists against their pools. Failures throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT)
// with a message that starts with the plugin's name and carries the values.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "pagedllm/sdk.hpp"

namespace pllm {

class PagedInputCheck {
 public:
  explicit PagedInputCheck(std::string plugin) : plugin_(std::move(plugin)) {}

  [[noreturn]] void invalid(const std::string& message) const {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, plugin_ + ": " + message);
  }

  // Lengths, block tables and slots of `b` against a device pool of
  // `num_device_blocks` blocks of `block_size` tokens.
  void batch(const pllm_batch& b, int32_t block_size, int64_t num_device_blocks) const {
    pllm::require(&b, plugin_ + ": batch");
    if (b.block_size != block_size) {
      invalid("batch block_size " + str(b.block_size) + " differs from the cache's " + str(block_size));
    }
    if (b.num_seqs < 0 || b.num_tokens < 0) invalid("batch: negative num_seqs or num_tokens");
    if (b.num_tokens > 0 && (!b.slot_mapping || !b.query_start_loc || !b.seq_lens)) {
      invalid("batch: null slot_mapping, query_start_loc or seq_lens");
    }
    if (b.num_seqs > 0 && (!b.query_start_loc || !b.seq_lens || !b.block_tables)) {
      invalid("batch: null query_start_loc, seq_lens or block_tables");
    }
    if (b.num_seqs > 0) {
      if (b.query_start_loc[0] != 0) invalid("batch: query_start_loc[0] = " + str(b.query_start_loc[0]) + ", not 0");
      if (b.query_start_loc[b.num_seqs] != b.num_tokens) {
        invalid("batch: query_start_loc[num_seqs] = " + str(b.query_start_loc[b.num_seqs]) + " but num_tokens = " +
                str(b.num_tokens));
      }
    } else if (b.num_tokens != 0) {
      invalid("batch: " + str(b.num_tokens) + " tokens but no sequences");
    }
    for (int32_t s = 0; s < b.num_seqs; ++s) {
      const int32_t query_len = b.query_start_loc[s + 1] - b.query_start_loc[s];
      if (query_len < 0) invalid("batch: query_start_loc decreases at sequence " + str(s));
      const int32_t seq_len = b.seq_lens[s];
      if (seq_len < query_len) {
        invalid("batch: sequence " + str(s) + " has seq_len " + str(seq_len) + " < its " + str(query_len) +
                " new tokens");
      }
      const int64_t blocks = (int64_t(seq_len) + block_size - 1) / block_size;
      if (blocks > b.max_blocks_per_seq) {
        invalid("batch: sequence " + str(s) + " needs " + str(blocks) + " blocks for " + str(seq_len) +
                " tokens but max_blocks_per_seq is " + str(b.max_blocks_per_seq));
      }
      for (int64_t i = 0; i < blocks; ++i) {
        const int32_t block = b.block_tables[int64_t(s) * b.max_blocks_per_seq + i];
        if (block < 0 || block >= num_device_blocks) {
          invalid("batch: block_tables[" + str(s) + "][" + str(i) + "] = " + str(block) +
                  " is out of range for the device pool of " + str(num_device_blocks) + " blocks");
        }
      }
    }
    const int64_t num_slots = num_device_blocks * block_size;
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      const int64_t slot = b.slot_mapping[t];
      if (slot < -1 || slot >= num_slots) {
        invalid("batch: slot_mapping[" + str(t) + "] = " + str(slot) + " is out of range [-1, " + str(num_slots) +
                ")");
      }
    }
  }

  // The shape of a [tokens, heads, head_dim] activation `name` (heads < 0: any).
  // Device and dtype are the backend's own checks.
  void rows(const char* name, const pllm_tensor& t, int64_t tokens, int64_t heads, int64_t head_dim) const {
    const std::string what = std::string(name) + ": ";
    if (t.ndim != 3) invalid(what + "expected 3 dimensions [tokens, heads, head_dim], got " + str(t.ndim));
    if (t.shape[0] != tokens) invalid(what + "has " + str(t.shape[0]) + " rows, the batch " + str(tokens) + " tokens");
    if (heads >= 0 && t.shape[1] != heads) invalid(what + "has " + str(t.shape[1]) + " heads, expected " + str(heads));
    if (t.shape[2] != head_dim) {
      invalid(what + "head_dim " + str(t.shape[2]) + " differs from the cache's " + str(head_dim));
    }
    if (t.strides[2] != 1) invalid(what + "the head_dim dimension must be contiguous (stride 1)");
    if (tokens > 0 && !t.data) invalid(what + "null data");
  }

  // Every pair of a block copy list `what` against its source and destination pools.
  void block_pairs(const char* what, std::span<const pllm_block_copy> pairs, int64_t src_blocks,
                   const char* src_pool, int64_t dst_blocks, const char* dst_pool) const {
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      const auto& p = pairs[i];
      if (p.src < 0 || p.src >= src_blocks) {
        invalid(std::string(what) + ": pair " + str(int64_t(i)) + ": source block " + str(p.src) +
                " is out of range for the " + src_pool + " pool of " + str(src_blocks) + " blocks");
      }
      if (p.dst < 0 || p.dst >= dst_blocks) {
        invalid(std::string(what) + ": pair " + str(int64_t(i)) + ": destination block " + str(p.dst) +
                " is out of range for the " + dst_pool + " pool of " + str(dst_blocks) + " blocks");
      }
    }
  }

 private:
  static std::string str(int64_t v) { return std::to_string(v); }
  std::string plugin_;
};

}  // namespace pllm
