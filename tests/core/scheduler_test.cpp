#include <catch2/catch.hpp>

#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "core/scheduler/scheduler.h"
#include "tests/core/scheduler_sim.h"

using namespace pagedllm;
using Tokens = std::vector<std::int32_t>;

namespace {

CacheConfig cache_config(int block_size, bool prefix_caching = true) {
  CacheConfig config;
  config.block_size = block_size;
  config.enable_prefix_caching = prefix_caching;
  config.watermark = 0.0;
  return config;
}

Request make_request(RequestId id, int prompt_len, int max_tokens, int n = 1, int first_token = 0) {
  Request request;
  request.id = id;
  request.prompt_token_ids.resize(static_cast<std::size_t>(prompt_len));
  std::iota(request.prompt_token_ids.begin(), request.prompt_token_ids.end(), first_token);
  request.max_tokens = max_tokens;
  request.n = n;
  return request;
}

// Runs steps until drained; returns the step at which each request got its first token.
struct RunResult {
  test::OutputLog log;
  std::map<RequestId, double> first_token_time;
  int num_steps = 0;
};

RunResult run_to_completion(Scheduler& scheduler, int num_lookahead_tokens = 0,
                            double step_base_cost = 1.0) {
  RunResult run;
  test::FakeModel model(num_lookahead_tokens, 0.5, 7);
  double now = 0;
  while (scheduler.has_unfinished()) {
    REQUIRE(run.num_steps < 10000);
    const SchedulerOutput output = scheduler.schedule();
    scheduler.check_invariants();
    now += step_base_cost + output.num_batched_tokens;  // simulated step cost
    const UpdateResult result = scheduler.update(output, model.run(scheduler, output));
    for (const SequenceUpdate& update : result.sequences) {
      if (!update.new_token_ids.empty()) run.first_token_time.try_emplace(update.request_id, now);
    }
    run.log.record(result);
    scheduler.check_invariants();
    ++run.num_steps;
  }
  return run;
}

}  // namespace

TEST_CASE("a request that can never fit is rejected at once with the numbers", "[scheduler]") {
  SchedulerConfig config;
  config.max_model_len = 64;
  Scheduler scheduler(config, cache_config(4), 10, 0);
  try {
    scheduler.add_request(make_request(1, 60, 8));
    FAIL("not rejected");
  } catch (const RequestRejected& error) {
    CHECK(error.request_id() == 1);
    CHECK(std::string(error.what()).find("68 exceeds max_model_len=64") != std::string::npos);
  }
  // 30 + 20 tokens need 13 blocks of 4; the cache has 10.
  CHECK_THROWS_WITH(scheduler.add_request(make_request(2, 30, 20)),
                    Catch::Contains("need 13 KV blocks of 4 tokens; the cache has 10"));
  CHECK_THROWS_AS(scheduler.add_request(make_request(3, 0, 4)), RequestRejected);
  CHECK_THROWS_AS(scheduler.add_request(make_request(4, 4, 4, 300)), RequestRejected);
  CHECK_FALSE(scheduler.has_unfinished());
  CHECK(scheduler.stats().num_rejected == 4);
}

TEST_CASE("the step batch has the pllm_batch layout with decodes first", "[scheduler][batch]") {
  SchedulerConfig config;
  Scheduler scheduler(config, cache_config(4), 16, 0);
  scheduler.add_request(make_request(1, 5, 4, 1, 100));
  test::FakeModel model(0, 0, 1);
  SchedulerOutput first = scheduler.schedule();
  scheduler.update(first, model.run(scheduler, first));
  scheduler.add_request(make_request(2, 3, 4, 1, 200));

  const SchedulerOutput output = scheduler.schedule();
  const StepBatch& batch = output.batch;
  REQUIRE(batch.num_seqs() == 2);
  CHECK(batch.num_decode_seqs == 1);
  CHECK(output.sequences[0].request_id == 1);  // the decode row comes first
  const std::int32_t sampled = test::true_token(1, 0, 5);
  CHECK(batch.token_ids == Tokens{sampled, 200, 201, 202});
  CHECK(batch.positions == Tokens{5, 0, 1, 2});
  // Request 1 holds blocks 0, 1 (position 5 is block 1, offset 1); request 2 block 2.
  CHECK(batch.slot_mapping == std::vector<std::int64_t>{5, 8, 9, 10});
  CHECK(batch.query_start_loc == Tokens{0, 1, 4});
  CHECK(batch.seq_lens == Tokens{6, 3});
  CHECK(batch.max_blocks_per_seq == 2);
  CHECK(batch.block_tables == Tokens{0, 1, 2, kInvalidBlockId});
  CHECK(batch.block_size == 4);
  CHECK(batch.max_query_len == 3);
  CHECK(batch.max_seq_len == 6);
  CHECK(batch.logits_indices == Tokens{0, 3});
}

TEST_CASE("chunked prefill splits a long prompt and samples only its last chunk",
          "[scheduler][chunked_prefill]") {
  SchedulerConfig config;
  config.max_num_batched_tokens = 16;
  Scheduler scheduler(config, cache_config(4), 32, 0);
  scheduler.add_request(make_request(1, 40, 2));
  test::FakeModel model(0, 0, 1);
  std::vector<int> chunks;
  std::vector<int> samples;
  for (int step = 0; step < 3; ++step) {
    const SchedulerOutput output = scheduler.schedule();
    chunks.push_back(output.sequences.at(0).num_new_tokens);
    samples.push_back(output.sequences.at(0).num_samples);
    scheduler.update(output, model.run(scheduler, output));
  }
  CHECK(chunks == std::vector<int>{16, 16, 8});
  CHECK(samples == std::vector<int>{0, 0, 1});
}

TEST_CASE("chunked prefill lowers the time to first token of short requests behind a long prompt",
          "[scheduler][chunked_prefill]") {
  const auto mean_short_ttft = [](bool chunked) {
    SchedulerConfig config;
    config.max_num_batched_tokens = 2048;
    config.enable_chunked_prefill = chunked;
    config.long_prefill_token_threshold = 256;
    config.max_model_len = 4096;
    Scheduler scheduler(config, cache_config(16), 1024, 0);
    scheduler.add_request(make_request(0, 2000, 4));
    for (RequestId id = 1; id <= 4; ++id) scheduler.add_request(make_request(id, 20, 4, 1, 5000 + 100 * static_cast<int>(id)));
    const RunResult run = run_to_completion(scheduler);
    double total = 0;
    for (RequestId id = 1; id <= 4; ++id) total += run.first_token_time.at(id);
    return total / 4;
  };
  const double without = mean_short_ttft(false);
  const double with = mean_short_ttft(true);
  INFO("mean TTFT of short requests: " << without << " without, " << with << " with chunking");
  CHECK(with * 4 < without);
}

TEST_CASE("recompute and swap preemption carry requests to completion with identical tokens",
          "[scheduler][preemption]") {
  const auto run = [](PreemptionMode mode, int num_device_blocks, int num_host_blocks) {
    SchedulerConfig config;
    config.preemption_mode = mode;
    Scheduler scheduler(config, cache_config(4, false), num_device_blocks, num_host_blocks);
    for (RequestId id = 0; id < 4; ++id) scheduler.add_request(make_request(id, 8, 20, 1, 10 * static_cast<int>(id)));
    RunResult result = run_to_completion(scheduler);
    const SchedulerStats stats = scheduler.stats();
    CHECK(scheduler.kv_cache().num_free_device_blocks() == num_device_blocks);
    CHECK(scheduler.kv_cache().num_free_host_blocks() == num_host_blocks);
    return std::pair{result.log.tokens, stats};
  };
  const auto [reference, relaxed] = run(PreemptionMode::kRecompute, 64, 0);
  CHECK(relaxed.num_preemptions() == 0);
  const auto [recomputed, recompute_stats] = run(PreemptionMode::kRecompute, 12, 0);
  CHECK(recompute_stats.num_preemptions_recompute > 0);
  CHECK(recompute_stats.num_preemptions_swap == 0);
  const auto [swapped, swap_stats] = run(PreemptionMode::kSwap, 12, 32);
  CHECK(swap_stats.num_preemptions_swap > 0);
  CHECK(swap_stats.num_preemptions_recompute == 0);
  CHECK(swap_stats.kv.num_swapped_out_blocks == swap_stats.kv.num_swapped_in_blocks);
  CHECK(recomputed == reference);
  CHECK(swapped == reference);
  for (const auto& [sequence, tokens] : reference) CHECK(tokens.size() == 20);
}

TEST_CASE("the victim is the latest running request and goes back to the front of waiting",
          "[scheduler][preemption]") {
  SchedulerConfig config;
  Scheduler scheduler(config, cache_config(4, false), 6, 0);
  test::FakeModel model(0, 0, 1);
  scheduler.add_request(make_request(1, 8, 12));  // 2 blocks now, up to 5
  scheduler.add_request(make_request(2, 8, 12));
  SchedulerOutput output = scheduler.schedule();
  REQUIRE(output.sequences.size() == 2);
  scheduler.update(output, model.run(scheduler, output));
  scheduler.add_request(make_request(3, 4, 4));
  bool preempted = false;
  while (!preempted) {
    output = scheduler.schedule();
    scheduler.update(output, model.run(scheduler, output));
    if (!output.preempted_by_recompute.empty()) {
      CHECK(output.preempted_by_recompute == std::vector<RequestId>{2});
      CHECK(scheduler.status(2) == RequestStatus::kWaiting);
      preempted = true;
    }
  }
  // Request 2 was preempted, so it is served before request 3, which arrived later.
  output = scheduler.schedule();
  CHECK(scheduler.status(3) == RequestStatus::kWaiting);
  scheduler.update(output, model.run(scheduler, output));
  run_to_completion(scheduler);
  CHECK(scheduler.kv_cache().num_free_device_blocks() == 6);
}

TEST_CASE("abort frees a request's blocks in the same step in every state", "[scheduler][abort]") {
  SchedulerConfig config;
  config.preemption_mode = PreemptionMode::kSwap;
  Scheduler scheduler(config, cache_config(4, false), 8, 8);
  test::FakeModel model(0, 0, 1);
  scheduler.add_request(make_request(1, 8, 16));
  scheduler.add_request(make_request(2, 8, 16));
  SchedulerOutput output = scheduler.schedule();
  scheduler.update(output, model.run(scheduler, output));
  while (scheduler.status(2) != RequestStatus::kSwapped) {
    output = scheduler.schedule();
    scheduler.update(output, model.run(scheduler, output));
  }
  CHECK(scheduler.kv_cache().num_free_host_blocks() < 8);
  CHECK(scheduler.abort(2));  // swapped
  CHECK(scheduler.kv_cache().num_free_host_blocks() == 8);
  scheduler.add_request(make_request(3, 4, 4));
  CHECK(scheduler.abort(3));  // waiting
  output = scheduler.schedule();
  const std::vector<SequenceSample> samples = model.run(scheduler, output);
  CHECK(scheduler.abort(1));  // running, between schedule() and update()
  CHECK(scheduler.kv_cache().num_free_device_blocks() == 8);
  const UpdateResult result = scheduler.update(output, samples);
  CHECK(result.sequences.empty());
  CHECK_FALSE(scheduler.abort(1));
  CHECK_FALSE(scheduler.has_unfinished());
  CHECK(scheduler.stats().num_aborted == 3);
  scheduler.check_invariants();
}

TEST_CASE("n > 1 forks share the prompt blocks and copy the partial block on write",
          "[scheduler][fork]") {
  SchedulerConfig config;
  Scheduler scheduler(config, cache_config(4), 16, 0);
  test::FakeModel model(0, 0, 1);
  scheduler.add_request(make_request(1, 6, 3, 3));
  SchedulerOutput output = scheduler.schedule();
  REQUIRE(output.sequences.size() == 1);
  CHECK(output.sequences[0].num_samples == 3);
  UpdateResult result = scheduler.update(output, model.run(scheduler, output));
  REQUIRE(result.sequences.size() == 3);
  const SequenceGroup& group = *scheduler.request_state(1);
  REQUIRE(group.sequences.size() == 3);
  for (const Sequence& sequence : group.sequences) {
    const auto table = scheduler.kv_cache().block_table(sequence.id);
    CHECK(std::vector<BlockId>(table.begin(), table.end()) == std::vector<BlockId>{0, 1});
  }
  CHECK(scheduler.kv_cache().device_pool().ref_count(0) == 3);
  CHECK(scheduler.kv_cache().device_pool().ref_count(1) == 3);

  output = scheduler.schedule();
  CHECK(output.batch.num_decode_seqs == 3);
  // The first two writers copy block 1; the last writes in place.
  CHECK(output.blocks_to_copy == std::vector<BlockMapping>{{1, 2}, {1, 3}});
  CHECK(output.batch.slot_mapping == std::vector<std::int64_t>{2 * 4 + 2, 3 * 4 + 2, 1 * 4 + 2});
  scheduler.update(output, model.run(scheduler, output));
  run_to_completion(scheduler);
  CHECK(scheduler.kv_cache().num_free_device_blocks() == 16);
}

TEST_CASE("speculative decoding reserves K+1 slots and rolls back rejected ones",
          "[scheduler][spec_decode]") {
  SchedulerConfig config;
  config.num_lookahead_tokens = 3;
  Scheduler scheduler(config, cache_config(4), 16, 0);
  scheduler.add_request(make_request(1, 4, 10));
  test::FakeModel model(3, 0, 1);
  SchedulerOutput output = scheduler.schedule();
  std::vector<SequenceSample> samples = model.run(scheduler, output);
  samples[0].draft_token_ids = {7, 8, 9};
  scheduler.update(output, samples);

  output = scheduler.schedule();
  const ScheduledSequence& row = output.sequences.at(0);
  CHECK(row.is_decode);
  CHECK(row.num_new_tokens == 4);
  CHECK(row.num_draft_tokens == 3);
  CHECK(output.batch.token_ids == Tokens{test::true_token(1, 0, 4), 7, 8, 9});
  CHECK(output.batch.logits_indices == Tokens{0, 1, 2, 3});
  const SequenceId sequence = row.sequence_id;
  CHECK(scheduler.kv_cache().block_table(sequence).size() == 2);  // positions 4..7
  // All drafts rejected: the sampled correction is the only accepted token.
  std::vector<SequenceSample> rejected{{sequence, {42}, {}}};
  scheduler.update(output, rejected);
  CHECK(scheduler.kv_cache().block_table(sequence).size() == 2);  // position 4 holds KV
  CHECK(scheduler.request_state(1)->sequences[0].num_computed_tokens == 5);
  CHECK(scheduler.request_state(1)->sequences[0].token_ids.back() == 42);
  scheduler.check_invariants();
  run_to_completion(scheduler, 3);
  CHECK(scheduler.kv_cache().num_free_device_blocks() == 16);
}

TEST_CASE("the priority policy admits lower priority values first", "[scheduler][priority]") {
  SchedulerConfig config;
  config.policy = SchedulingPolicy::kPriority;
  config.max_num_seqs = 1;
  Scheduler scheduler(config, cache_config(4), 16, 0);
  Request low = make_request(1, 4, 1);
  low.priority = 5;
  Request high = make_request(2, 4, 1);
  high.priority = 0;
  scheduler.add_request(low);
  scheduler.add_request(high);
  const SchedulerOutput output = scheduler.schedule();
  REQUIRE(output.sequences.size() == 1);
  CHECK(output.sequences[0].request_id == 2);
}

TEST_CASE("prefix cache stats count queries and hits in tokens and blocks", "[scheduler][prefix_cache]") {
  SchedulerConfig config;
  Scheduler scheduler(config, cache_config(4), 32, 0);
  scheduler.add_request(make_request(1, 10, 2));
  run_to_completion(scheduler);
  scheduler.add_request(make_request(2, 10, 2));
  run_to_completion(scheduler);
  const KvCacheStats stats = scheduler.stats().kv;
  CHECK(stats.prefix_cache_queried_tokens == 20);
  CHECK(stats.prefix_cache_queried_blocks == 4);
  CHECK(stats.prefix_cache_hit_tokens == 8);
  CHECK(stats.prefix_cache_hit_blocks == 2);
  CHECK(stats.usage() == 0.0);
}
