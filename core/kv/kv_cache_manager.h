#pragma once
// The logical side of the paged KV cache: which blocks each sequence owns, which
// blocks hold which prefix, and which block moves a step needs (copy-on-write,
// swap). It never touches device memory; the attention backend performs the
// copies and swaps that the scheduler's step output lists.
//
// Contract (docs/kv-cache-and-scheduler.md has the long form):
//  - A sequence's block table covers positions 0..n-1 of its tokens; slot of
//    position p = table[p / block_size] * block_size + p % block_size.
//  - Reference count of a block = number of sequence tables holding it. Forks
//    share blocks; a write into a shared block copies it first (copy-on-write).
//  - Blocks are hashed (prefix-cached) as soon as they are full of tokens whose
//    KV has been computed and accepted; never before, so rolled-back lookahead
//    slots never carry a hash.
//  - Freed blocks keep their hash and stay reusable until allocation pops them.

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config/engine_config.h"
#include "core/kv/block_hash.h"
#include "core/kv/block_id.h"
#include "core/kv/block_pool.h"
#include "core/kv/kv_cache_stats.h"

namespace pagedllm {

// Identifies one sequence (one of the n outputs of a request). Assigned by the scheduler.
using SequenceId = std::int64_t;

// Whether an allocation can be served: now, after other sequences release
// blocks, or never (it needs more blocks than the pool has).
enum class AllocStatus { kOk, kLater, kNever };

// The cached prefix of a sequence's tokens: whole blocks, starting at block 0
// and stopping at the first miss. It never covers the last token (its logits
// are needed, so it is always computed).
struct PrefixHit {
  std::vector<BlockId> blocks;
  int num_tokens = 0;
  int num_queried_tokens = 0;
  int num_queried_blocks = 0;
};

class KvCacheManager {
 public:
  KvCacheManager(const CacheConfig& config, int num_device_blocks, int num_host_blocks);

  int block_size() const { return block_size_; }
  int num_device_blocks() const { return device_pool_.num_blocks(); }
  int num_host_blocks() const { return host_pool_.num_blocks(); }
  int num_free_device_blocks() const { return device_pool_.num_free_blocks(); }
  int num_free_host_blocks() const { return host_pool_.num_free_blocks(); }
  // floor(watermark * device blocks): kept free when admitting work.
  int watermark_blocks() const { return watermark_blocks_; }
  bool prefix_caching_enabled() const { return device_pool_.caching_enabled(); }

  // Blocks needed to hold `num_tokens` tokens.
  int blocks_for_tokens(int num_tokens) const;

  // ---- Sequences ----------------------------------------------------------
  // `extra_key` goes into every block hash of the sequence (model / adapter id,
  // cache salt): sequences with different keys never share cached blocks.
  void add_sequence(SequenceId sequence, std::string extra_key);
  // `child` starts as a copy of `parent`'s table, sharing every block.
  void fork(SequenceId parent, SequenceId child);
  // Releases every block of the sequence (device and host), last block first,
  // so a sequence's tail is evicted before its head. The sequence stays known
  // (empty table), as after recompute preemption.
  void free(SequenceId sequence);
  // free() and forget the sequence.
  void remove_sequence(SequenceId sequence);
  bool has_sequence(SequenceId sequence) const { return sequences_.contains(sequence); }

  // ---- Capacity -----------------------------------------------------------
  // kNever: more than the whole device pool; kLater: more than is free now
  // (minus the watermark when `keep_watermark`); kOk otherwise.
  AllocStatus can_allocate(int num_blocks, bool keep_watermark) const;
  // Free device blocks that allocate_slots() with the same arguments would take:
  // new blocks, a copy-on-write copy, and hit blocks that are currently free.
  // Works for swapped-out sequences too (as if swapped in first).
  int num_blocks_to_allocate(SequenceId sequence, int num_computed_tokens, int num_slots,
                             const PrefixHit* hit) const;

  // ---- Prefix cache -------------------------------------------------------
  // Looks up the cached prefix of `tokens` (the sequence's full token list).
  // Pure lookup: takes no references and records no stats.
  PrefixHit find_cached_prefix(SequenceId sequence, std::span<const std::int32_t> tokens);

  // ---- Slots --------------------------------------------------------------
  // Makes positions [num_computed_tokens, num_computed_tokens + num_slots)
  // writable: takes the hit (if any, only for an empty table; then
  // num_computed_tokens must equal hit->num_tokens), copies a shared block that
  // would be written (appending {src, dst} to `copies`) and appends new blocks.
  void allocate_slots(SequenceId sequence, int num_computed_tokens, int num_slots,
                      const PrefixHit* hit, std::vector<BlockMapping>& copies);
  // Records that positions [0, num_computed_tokens) hold computed, accepted
  // KV: frees blocks past them (rolled-back lookahead) and caches newly full
  // blocks. `tokens` is the sequence's token list (at least num_computed_tokens long).
  void commit_computed_tokens(SequenceId sequence, std::span<const std::int32_t> tokens,
                              int num_computed_tokens);

  std::span<const BlockId> block_table(SequenceId sequence) const;
  // Slot (block_id * block_size + offset) of a position covered by the table.
  std::int64_t slot(SequenceId sequence, int position) const;

  // ---- Swap ---------------------------------------------------------------
  // Distinct blocks the sequences hold (forks of one request share blocks).
  int num_distinct_blocks(std::span<const SequenceId> sequences) const;
  bool can_swap_out(std::span<const SequenceId> sequences) const;
  // Moves the sequences' device blocks to host blocks, appending {device, host}
  // per distinct block to `mappings`; the device blocks are released.
  void swap_out(std::span<const SequenceId> sequences, std::vector<BlockMapping>& mappings);
  // Moves them back, appending {host, device} per distinct block.
  void swap_in(std::span<const SequenceId> sequences, std::vector<BlockMapping>& mappings);
  bool is_swapped(SequenceId sequence) const;

  // ---- Introspection ------------------------------------------------------
  KvCacheStats stats() const;
  const BlockPool& device_pool() const { return device_pool_; }
  const BlockPool& host_pool() const { return host_pool_; }
  // Throws InternalError unless: every block's ref count equals the number of
  // tables holding it; a block is free iff nobody holds it; no table holds a
  // block twice; a swapped sequence holds host blocks only.
  void check_invariants() const;

 private:
  struct SequenceBlocks {
    std::string extra_key;
    std::vector<BlockId> table;  // device blocks, or host blocks while swapped
    bool swapped = false;
    // Keys of the sequence's full blocks known so far (may run ahead of the table).
    std::vector<BlockHash> block_hashes;
    // table[0, num_committed_blocks) were offered to the prefix cache.
    int num_committed_blocks = 0;
  };

  SequenceBlocks& state(SequenceId sequence);
  const SequenceBlocks& state(SequenceId sequence) const;
  // Moves the tables of `sequences` from pool `from` to pool `to`.
  void move_blocks(std::span<const SequenceId> sequences, BlockPool& from, BlockPool& to,
                   bool to_host, std::vector<BlockMapping>& mappings);

  int block_size_;
  int watermark_blocks_;
  BlockPool device_pool_;
  BlockPool host_pool_;
  std::unordered_map<SequenceId, SequenceBlocks> sequences_;

  std::int64_t prefix_cache_queried_tokens_ = 0;
  std::int64_t prefix_cache_queried_blocks_ = 0;
  std::int64_t prefix_cache_hit_tokens_ = 0;
  std::int64_t prefix_cache_hit_blocks_ = 0;
  std::int64_t num_copied_blocks_ = 0;
  std::int64_t num_swapped_out_blocks_ = 0;
  std::int64_t num_swapped_in_blocks_ = 0;
};

}  // namespace pagedllm
