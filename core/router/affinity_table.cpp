#include "core/router/affinity_table.h"

#include "core/common/check.h"

namespace pagedllm::router {

AffinityTable::AffinityTable(std::size_t capacity) : capacity_(capacity) {
  PAGEDLLM_CHECK(capacity > 0, "affinity table capacity={}", capacity);
}

std::optional<AffinityTable::Match> AffinityTable::longest_match(std::span<const BlockHash> chain) const {
  for (std::size_t blocks = chain.size(); blocks > 0; --blocks) {
    if (auto it = index_.find(chain[blocks - 1]); it != index_.end()) return Match{it->second->second, blocks};
  }
  return std::nullopt;
}

void AffinityTable::record(std::span<const BlockHash> chain, int replica) {
  for (std::size_t i = chain.size(); i > 0; --i) {
    const BlockHash& hash = chain[i - 1];
    if (auto it = index_.find(hash); it != index_.end()) {
      it->second->second = replica;
      recency_.splice(recency_.begin(), recency_, it->second);
      continue;
    }
    recency_.emplace_front(hash, replica);
    index_.emplace(hash, recency_.begin());
    if (index_.size() > capacity_) {
      index_.erase(recency_.back().first);
      recency_.pop_back();
    }
  }
}

void AffinityTable::forget(int replica) {
  for (auto it = recency_.begin(); it != recency_.end();) {
    if (it->second == replica) {
      index_.erase(it->first);
      it = recency_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace pagedllm::router
