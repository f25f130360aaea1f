#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/kv/block_hash.h"
#include "core/router/affinity_table.h"

using namespace pagedllm;
using router::AffinityTable;

namespace {

// The chain of a prompt made of `blocks` blocks, block i holding tokens derived from ids[i].
std::vector<BlockHash> chain_of(const std::vector<int>& block_ids) {
  std::vector<std::int32_t> tokens;
  for (const int id : block_ids) {
    for (int t = 0; t < 4; ++t) tokens.push_back(id * 4 + t);
  }
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, tokens, 4, "");
  return hashes;
}

// The oracle: every entry with the tick of its last use, scanned in full; eviction drops the oldest tick.
struct NaiveTable {
  struct Entry {
    BlockHash hash;
    int replica;
    std::uint64_t used;
  };
  std::size_t capacity;
  std::vector<Entry> entries;
  std::uint64_t tick = 0;

  std::optional<std::pair<int, std::size_t>> longest_match(const std::vector<BlockHash>& chain) const {
    std::optional<std::pair<int, std::size_t>> best;
    for (std::size_t i = 0; i < chain.size(); ++i) {
      for (const Entry& entry : entries) {
        if (entry.hash == chain[i]) best = std::pair{entry.replica, i + 1};
      }
    }
    return best;
  }

  void record(const std::vector<BlockHash>& chain, int replica) {
    for (std::size_t i = chain.size(); i > 0; --i) {
      ++tick;
      auto it = std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.hash == chain[i - 1]; });
      if (it != entries.end()) {
        it->replica = replica;
        it->used = tick;
        continue;
      }
      entries.push_back({chain[i - 1], replica, tick});
      if (entries.size() > capacity) {
        entries.erase(std::min_element(entries.begin(), entries.end(),
                                       [](const Entry& a, const Entry& b) { return a.used < b.used; }));
      }
    }
  }

  void forget(int replica) {
    std::erase_if(entries, [&](const Entry& e) { return e.replica == replica; });
  }
};

}  // namespace

TEST_CASE("a prompt goes to the replica that last served its longest prefix", "[router][affinity]") {
  AffinityTable table(100);
  const auto shared = chain_of({1, 2, 3});
  const auto longer = chain_of({1, 2, 3, 4, 5});
  const auto other = chain_of({9, 2, 3});
  CHECK_FALSE(table.longest_match(shared).has_value());
  table.record(shared, 0);
  table.record(longer, 1);
  // {1,2,3} itself was re-recorded by replica 1 (the longer prompt shares it): the most recent wins.
  REQUIRE(table.longest_match(shared).has_value());
  CHECK(table.longest_match(shared)->replica == 1);
  CHECK(table.longest_match(shared)->blocks == 3);
  const auto extended = chain_of({1, 2, 3, 4, 7});
  REQUIRE(table.longest_match(extended).has_value());
  CHECK(table.longest_match(extended)->blocks == 4);
  // Equal blocks after a different first block are a different prefix (the chain binds position 0 on).
  CHECK_FALSE(table.longest_match(other).has_value());
  CHECK(table.size() == 5);
}

TEST_CASE("a full table drops its least recently used hashes, a chain's tail before its head", "[router][affinity]") {
  AffinityTable table(3);
  table.record(chain_of({1, 2, 3}), 0);
  table.record(chain_of({4}), 1);
  CHECK(table.size() == 3);
  // Block 3's hash was recorded first (tails first) and so was the oldest.
  const auto match = table.longest_match(chain_of({1, 2, 3}));
  REQUIRE(match.has_value());
  CHECK(match->blocks == 2);
  CHECK(match->replica == 0);
}

TEST_CASE("forgetting a replica drops its entries only", "[router][affinity]") {
  AffinityTable table(10);
  table.record(chain_of({1, 2}), 0);
  table.record(chain_of({5, 6}), 1);
  table.forget(0);
  CHECK_FALSE(table.longest_match(chain_of({1, 2})).has_value());
  REQUIRE(table.longest_match(chain_of({5, 6})).has_value());
  CHECK(table.size() == 2);
}

TEST_CASE("the affinity table matches a naive scan over random traces", "[router][affinity]") {
  std::mt19937 rng(7);
  for (const std::size_t capacity : {1u, 5u, 40u}) {
    AffinityTable table(capacity);
    NaiveTable naive{capacity, {}, 0};
    for (int step = 0; step < 2000; ++step) {
      // Prompts from a few shared heads with random tails, so prefixes overlap.
      std::vector<int> blocks{static_cast<int>(rng() % 3)};
      const int length = static_cast<int>(rng() % 6);
      for (int i = 0; i < length; ++i) blocks.push_back(static_cast<int>(rng() % 4));
      const auto chain = chain_of(blocks);
      const auto expected = naive.longest_match(chain);
      const auto actual = table.longest_match(chain);
      REQUIRE(actual.has_value() == expected.has_value());
      if (actual) {
        REQUIRE(actual->replica == expected->first);
        REQUIRE(actual->blocks == expected->second);
      }
      const int operation = static_cast<int>(rng() % 20);
      if (operation == 0) {
        const int replica = static_cast<int>(rng() % 3);
        table.forget(replica);
        naive.forget(replica);
      } else {
        const int replica = static_cast<int>(rng() % 3);
        table.record(chain, replica);
        naive.record(chain, replica);
      }
      REQUIRE(table.size() == naive.entries.size());
    }
  }
}
