#pragma once
// Which replica most recently served each prompt prefix, as a bounded LRU map from block hash
// (core/kv/block_hash.h: a chained key, so one hash stands for the whole prefix up to its block)
// to the replica's index. A prompt's longest remembered prefix is its last hash the table holds.
// Not thread-safe: ReplicaSet holds it under its mutex.

#include <cstddef>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>

#include "core/kv/block_hash.h"

namespace pagedllm::router {

class AffinityTable {
 public:
  explicit AffinityTable(std::size_t capacity);

  struct Match {
    int replica = -1;
    std::size_t blocks = 0;  // the matched prefix's length, in blocks
  };
  // The longest prefix of `chain` the table holds, and the replica that served it last.
  std::optional<Match> longest_match(std::span<const BlockHash> chain) const;

  // `replica` now serves every prefix of `chain`. The chain's first blocks, shared by the most prompts,
  // become the most recently used, so a full table drops long private tails before common prefixes.
  void record(std::span<const BlockHash> chain, int replica);

  // Drops every entry of `replica` (it went down: its cache is gone or stale when it returns).
  void forget(int replica);

  std::size_t size() const { return index_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  using Entry = std::pair<BlockHash, int>;
  std::size_t capacity_;
  std::list<Entry> recency_;  // front: most recently used
  std::unordered_map<BlockHash, std::list<Entry>::iterator, BlockHashBuckets> index_;
};

}  // namespace pagedllm::router
