#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "core/common/check.h"
#include "core/kv/kv_cache_manager.h"

using pagedllm::AllocStatus;
using pagedllm::BlockId;
using pagedllm::BlockMapping;
using pagedllm::CacheConfig;
using pagedllm::KvCacheManager;
using pagedllm::PrefixHit;
using pagedllm::SequenceId;
using Blocks = std::vector<BlockId>;
using Tokens = std::vector<std::int32_t>;

namespace {

CacheConfig cache_config(int block_size, bool prefix_caching, double watermark = 0.0) {
  CacheConfig config;
  config.block_size = block_size;
  config.enable_prefix_caching = prefix_caching;
  config.watermark = watermark;
  return config;
}

Tokens iota_tokens(int count, int first) {
  Tokens tokens(static_cast<std::size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

Tokens concat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Blocks table_of(const KvCacheManager& kv, SequenceId sequence) {
  const auto table = kv.block_table(sequence);
  return Blocks(table.begin(), table.end());
}

// Admits a sequence as the scheduler does: look up the cached prefix, allocate
// the remaining prompt, and mark the whole prompt computed.
PrefixHit prefill(KvCacheManager& kv, SequenceId sequence, const Tokens& tokens) {
  kv.add_sequence(sequence, "model");
  PrefixHit hit = kv.find_cached_prefix(sequence, tokens);
  std::vector<BlockMapping> copies;
  kv.allocate_slots(sequence, hit.num_tokens, static_cast<int>(tokens.size()) - hit.num_tokens,
                    &hit, copies);
  CHECK(copies.empty());
  kv.commit_computed_tokens(sequence, tokens, static_cast<int>(tokens.size()));
  kv.check_invariants();
  return hit;
}

}  // namespace

TEST_CASE("allocation pops the free queue head and freeing appends the table reversed",
          "[kv_cache]") {
  KvCacheManager kv(cache_config(4, false), 8, 0);
  prefill(kv, 1, iota_tokens(10, 0));
  CHECK(table_of(kv, 1) == Blocks{0, 1, 2});
  CHECK(kv.slot(1, 0) == 0);
  CHECK(kv.slot(1, 5) == 5);
  CHECK(kv.slot(1, 9) == 2 * 4 + 1);
  prefill(kv, 2, iota_tokens(3, 100));
  CHECK(table_of(kv, 2) == Blocks{3});
  CHECK(kv.num_free_device_blocks() == 4);
  kv.remove_sequence(1);
  CHECK(kv.device_pool().free_queue_order() == Blocks{4, 5, 6, 7, 2, 1, 0});
  kv.remove_sequence(2);
  CHECK(kv.stats().usage() == 0.0);
  kv.check_invariants();
}

TEST_CASE("prefix cache follows the seed-002 block lifecycle with exact ids and LRU order",
          "[kv_cache][prefix_cache]") {
  // block_size 16, 10 blocks; 32-token system prompt shared by A and B.
  KvCacheManager kv(cache_config(16, true), 10, 0);
  const Tokens system = iota_tokens(32, 1000);
  const Tokens prompt_a = concat(system, iota_tokens(8, 1));
  const Tokens prompt_b = concat(system, iota_tokens(8, 500));

  const PrefixHit miss = prefill(kv, 1, prompt_a);
  CHECK(miss.num_tokens == 0);
  CHECK(table_of(kv, 1) == Blocks{0, 1, 2});
  // Full blocks are cached as soon as computed; the partial third block is not.
  CHECK(kv.device_pool().hash_of(0).has_value());
  CHECK(kv.device_pool().hash_of(1).has_value());
  CHECK_FALSE(kv.device_pool().hash_of(2).has_value());

  const PrefixHit hit = prefill(kv, 2, prompt_b);
  CHECK(hit.blocks == Blocks{0, 1});
  CHECK(hit.num_tokens == 32);
  CHECK(table_of(kv, 2) == Blocks{0, 1, 3});
  CHECK(kv.device_pool().ref_count(0) == 2);
  CHECK(kv.device_pool().ref_count(1) == 2);
  CHECK(kv.device_pool().ref_count(3) == 1);

  kv.remove_sequence(1);
  CHECK(kv.device_pool().ref_count(0) == 1);
  CHECK(kv.device_pool().free_queue_order() == Blocks{4, 5, 6, 7, 8, 9, 2});
  kv.remove_sequence(2);
  CHECK(kv.device_pool().free_queue_order() == Blocks{4, 5, 6, 7, 8, 9, 2, 3, 1, 0});
  CHECK(kv.stats().num_hashed_device_blocks == 2);  // freed cached blocks stay cached

  // A third request with the same prefix hits blocks that are free: the hit
  // takes them out of the free queue.
  const PrefixHit free_hit = prefill(kv, 3, concat(system, iota_tokens(4, 7)));
  CHECK(free_hit.blocks == Blocks{0, 1});
  CHECK(table_of(kv, 3) == Blocks{0, 1, 4});
  CHECK(kv.device_pool().free_queue_order() == Blocks{5, 6, 7, 8, 9, 2, 3});
  kv.remove_sequence(3);
  CHECK(kv.device_pool().free_queue_order() == Blocks{5, 6, 7, 8, 9, 2, 3, 4, 1, 0});

  // Allocation pops the head; cached blocks are evicted only when popped, the
  // sequence's tail (block 1) before its head (block 0).
  kv.add_sequence(4, "model");
  std::vector<BlockMapping> copies;
  kv.allocate_slots(4, 0, 16 * 8, nullptr, copies);
  CHECK(table_of(kv, 4) == Blocks{5, 6, 7, 8, 9, 2, 3, 4});
  CHECK(kv.stats().num_evictions == 0);
  kv.allocate_slots(4, 16 * 8, 16, nullptr, copies);
  CHECK(table_of(kv, 4).back() == 1);
  CHECK(kv.stats().num_evictions == 1);
  CHECK(kv.device_pool().hash_of(0).has_value());
  kv.check_invariants();

  const auto stats = kv.stats();
  // Queries: A (40 tokens, 2 blocks), B (40, 2), third (36, 2).
  CHECK(stats.prefix_cache_queried_tokens == 116);
  CHECK(stats.prefix_cache_queried_blocks == 6);
  CHECK(stats.prefix_cache_hit_tokens == 64);
  CHECK(stats.prefix_cache_hit_blocks == 4);
  CHECK(stats.prefix_cache_hit_rate() == Approx(64.0 / 116.0));
}

TEST_CASE("orphaned block: a cached child whose parent was evicted is never matched and "
          "LRU evicts it (seed 002 Q2/Q3)",
          "[kv_cache][prefix_cache]") {
  KvCacheManager kv(cache_config(4, true), 10, 0);
  const Tokens head = iota_tokens(4, 100);
  const Tokens prompt_short = concat(head, Tokens{1, 2});
  const Tokens prompt_long = concat(concat(head, iota_tokens(4, 200)), Tokens{3});

  // Both admitted in one step: neither sees the other's blocks yet.
  for (const auto& [sequence, prompt] : {std::pair{1, prompt_short}, std::pair{2, prompt_long}}) {
    kv.add_sequence(sequence, "model");
    PrefixHit hit = kv.find_cached_prefix(sequence, prompt);
    CHECK(hit.num_tokens == 0);
    std::vector<BlockMapping> copies;
    kv.allocate_slots(sequence, 0, static_cast<int>(prompt.size()), &hit, copies);
  }
  CHECK(table_of(kv, 1) == Blocks{0, 1});
  CHECK(table_of(kv, 2) == Blocks{2, 3, 4});
  kv.commit_computed_tokens(1, prompt_short, 6);  // H0 -> block 0
  kv.commit_computed_tokens(2, prompt_long, 9);   // H0 already held by 0; H1 -> block 3
  CHECK(kv.device_pool().hash_of(0).has_value());
  CHECK_FALSE(kv.device_pool().hash_of(2).has_value());
  CHECK(kv.device_pool().hash_of(3).has_value());

  kv.remove_sequence(1);
  kv.remove_sequence(2);
  CHECK(kv.device_pool().free_queue_order() == Blocks{5, 6, 7, 8, 9, 1, 0, 4, 3, 2});

  // Seven allocations reach block 0: H0 is evicted, H1 (block 3) stays cached.
  kv.add_sequence(3, "other");
  std::vector<BlockMapping> copies;
  kv.allocate_slots(3, 0, 7 * 4, nullptr, copies);
  CHECK(kv.stats().num_evictions == 1);
  CHECK(kv.device_pool().hash_of(3).has_value());

  // Q3: matching starts at block 0 and stops at the first miss, so the orphan
  // is not used: its KV is only valid after positions 0..3.
  kv.add_sequence(4, "model");
  const PrefixHit orphan_lookup = kv.find_cached_prefix(4, prompt_long);
  CHECK(orphan_lookup.num_tokens == 0);
  CHECK(orphan_lookup.blocks.empty());

  CHECK(kv.device_pool().free_queue_order() == Blocks{4, 3, 2});

  // Q2: the orphan is still evicted by LRU like any other block.
  kv.allocate_slots(3, 7 * 4, 2 * 4, nullptr, copies);
  CHECK(kv.stats().num_evictions == 2);
  CHECK(kv.stats().num_hashed_device_blocks == 0);
  kv.remove_sequence(3);
  kv.remove_sequence(4);
  kv.check_invariants();
}

TEST_CASE("prefix hits stop before the last token and respect the extra key",
          "[kv_cache][prefix_cache]") {
  KvCacheManager kv(cache_config(4, true), 10, 0);
  const Tokens prompt = iota_tokens(8, 1);
  prefill(kv, 1, prompt);
  // Exactly two full blocks cached, but the last token must be computed: one block hits.
  kv.add_sequence(2, "model");
  CHECK(kv.find_cached_prefix(2, prompt).blocks == Blocks{0});
  kv.add_sequence(3, "another-adapter");
  CHECK(kv.find_cached_prefix(3, prompt).blocks.empty());
  Tokens changed_first = prompt;
  changed_first[0] = 99;
  kv.add_sequence(4, "model");
  CHECK(kv.find_cached_prefix(4, concat(changed_first, Tokens{5})).blocks.empty());
}

TEST_CASE("blocks are hashed only once full of computed tokens", "[kv_cache][prefix_cache]") {
  KvCacheManager kv(cache_config(4, true), 4, 0);
  const Tokens tokens = iota_tokens(9, 1);
  kv.add_sequence(1, "model");
  std::vector<BlockMapping> copies;
  kv.allocate_slots(1, 0, 3, nullptr, copies);  // a chunk of 3 prompt tokens
  kv.commit_computed_tokens(1, tokens, 3);
  CHECK(kv.stats().num_hashed_device_blocks == 0);
  kv.allocate_slots(1, 3, 3, nullptr, copies);  // the chunk that fills block 0
  kv.commit_computed_tokens(1, tokens, 6);
  CHECK(kv.device_pool().hash_of(0).has_value());
  CHECK_FALSE(kv.device_pool().hash_of(1).has_value());
  kv.check_invariants();
}

TEST_CASE("forks share blocks and copy the partial block on write", "[kv_cache][fork]") {
  KvCacheManager kv(cache_config(4, true), 8, 0);
  const Tokens prompt = iota_tokens(6, 1);
  prefill(kv, 1, prompt);
  kv.fork(1, 2);
  kv.fork(1, 3);
  CHECK(table_of(kv, 2) == Blocks{0, 1});
  CHECK(kv.device_pool().ref_count(0) == 3);
  CHECK(kv.device_pool().ref_count(1) == 3);
  kv.check_invariants();

  std::vector<BlockMapping> copies;
  CHECK(kv.num_blocks_to_allocate(2, 6, 1, nullptr) == 1);
  kv.allocate_slots(2, 6, 1, nullptr, copies);
  CHECK(copies == std::vector<BlockMapping>{{1, 2}});
  CHECK(table_of(kv, 2) == Blocks{0, 2});
  kv.allocate_slots(3, 6, 1, nullptr, copies);
  CHECK(copies == std::vector<BlockMapping>{{1, 2}, {1, 3}});
  // The last owner writes in place.
  CHECK(kv.num_blocks_to_allocate(1, 6, 1, nullptr) == 0);
  kv.allocate_slots(1, 6, 1, nullptr, copies);
  CHECK(copies.size() == 2);
  CHECK(table_of(kv, 1) == Blocks{0, 1});
  CHECK(kv.device_pool().ref_count(0) == 3);
  CHECK(kv.device_pool().ref_count(1) == 1);
  CHECK(kv.stats().num_copied_blocks == 2);
  kv.check_invariants();
  for (SequenceId sequence : {1, 2, 3}) kv.remove_sequence(sequence);
  CHECK(kv.num_free_device_blocks() == 8);
  kv.check_invariants();
}

TEST_CASE("lookahead slots past the accepted tokens are rolled back", "[kv_cache][spec_decode]") {
  KvCacheManager kv(cache_config(4, true), 8, 0);
  Tokens tokens = iota_tokens(6, 1);
  prefill(kv, 1, tokens);  // 6 computed, blocks {0, 1}
  tokens.push_back(50);    // the sampled token, not computed yet
  std::vector<BlockMapping> copies;
  // Verify 1 + 3 draft tokens: positions 6..9 need a third block.
  kv.allocate_slots(1, 6, 4, nullptr, copies);
  CHECK(table_of(kv, 1) == Blocks{0, 1, 2});
  // One draft accepted plus the bonus token: positions 6, 7 hold accepted KV.
  tokens.insert(tokens.end(), {51, 52});
  kv.commit_computed_tokens(1, tokens, 8);
  CHECK(table_of(kv, 1) == Blocks{0, 1});
  CHECK(kv.device_pool().is_free(2));
  CHECK(kv.device_pool().hash_of(1).has_value());  // block 1 now full of accepted tokens
  CHECK_FALSE(kv.device_pool().hash_of(2).has_value());
  kv.check_invariants();
}

TEST_CASE("swap moves distinct blocks between pools and back", "[kv_cache][swap]") {
  KvCacheManager kv(cache_config(4, false), 6, 4);
  prefill(kv, 1, iota_tokens(6, 1));
  kv.fork(1, 2);
  const std::vector<SequenceId> group{1, 2};
  CHECK(kv.num_distinct_blocks(group) == 2);
  CHECK(kv.can_swap_out(group));
  std::vector<BlockMapping> out;
  kv.swap_out(group, out);
  CHECK(out == std::vector<BlockMapping>{{0, 0}, {1, 1}});
  CHECK(kv.is_swapped(1));
  CHECK(table_of(kv, 2) == Blocks{0, 1});
  CHECK(kv.host_pool().ref_count(0) == 2);
  CHECK(kv.num_free_device_blocks() == 6);
  kv.check_invariants();

  // Occupy device blocks so the swap-in lands elsewhere.
  kv.add_sequence(3, "model");
  std::vector<BlockMapping> copies;
  kv.allocate_slots(3, 0, 4, nullptr, copies);
  CHECK(table_of(kv, 3) == Blocks{2});
  std::vector<BlockMapping> in;
  kv.swap_in(group, in);
  CHECK(in == std::vector<BlockMapping>{{0, 3}, {1, 4}});
  CHECK(table_of(kv, 1) == Blocks{3, 4});
  CHECK(table_of(kv, 2) == Blocks{3, 4});
  CHECK(kv.device_pool().ref_count(3) == 2);
  CHECK(kv.num_free_host_blocks() == 4);
  CHECK(kv.stats().num_swapped_out_blocks == 2);
  CHECK(kv.stats().num_swapped_in_blocks == 2);
  // The swapped-in fork still copies its shared partial block on write.
  kv.allocate_slots(2, 6, 1, nullptr, copies);
  CHECK(copies == std::vector<BlockMapping>{{4, 5}});
  kv.check_invariants();
}

TEST_CASE("can_allocate answers ok, later or never and keeps the watermark", "[kv_cache]") {
  KvCacheManager kv(cache_config(4, false, 0.1), 20, 0);
  CHECK(kv.watermark_blocks() == 2);
  CHECK(kv.can_allocate(18, true) == AllocStatus::kOk);
  CHECK(kv.can_allocate(19, true) == AllocStatus::kLater);
  CHECK(kv.can_allocate(19, false) == AllocStatus::kOk);
  CHECK(kv.can_allocate(21, false) == AllocStatus::kNever);
  kv.add_sequence(1, "");
  std::vector<BlockMapping> copies;
  kv.allocate_slots(1, 0, 40, nullptr, copies);
  CHECK(kv.can_allocate(8, true) == AllocStatus::kOk);
  CHECK(kv.can_allocate(9, true) == AllocStatus::kLater);
  CHECK(kv.stats().usage() == Approx(0.5));
  CHECK_THROWS_AS(kv.allocate_slots(1, 40, 41, nullptr, copies), pagedllm::InternalError);
  kv.check_invariants();
}
