// Beam-search groups in the scheduler: beams fork copy-on-write from their parent,
// a dropped beam frees its blocks in the same update, and a group is scheduled,
// grown and preempted as a unit (every live beam in a step, or none).

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <vector>

#include "core/scheduler/scheduler.h"
#include "tests/core/scheduler_sim.h"

using namespace pagedllm;

namespace {

CacheConfig cache_without_prefix_caching(int block_size) {
  CacheConfig config;
  config.block_size = block_size;
  config.enable_prefix_caching = false;
  config.watermark = 0.0;
  return config;
}

Request make_request(RequestId id, int prompt_len, int max_tokens, int n, bool beam_search) {
  Request request;
  request.id = id;
  request.prompt_token_ids.resize(static_cast<std::size_t>(prompt_len));
  std::iota(request.prompt_token_ids.begin(), request.prompt_token_ids.end(), 100 * static_cast<int>(id));
  request.max_tokens = max_tokens;
  request.n = n;
  request.beam_search = beam_search;
  request.speculative = false;
  return request;
}

std::vector<BlockId> table(const Scheduler& scheduler, SequenceId sequence) {
  const auto blocks = scheduler.kv_cache().block_table(sequence);
  return {blocks.begin(), blocks.end()};
}

// The engine's part, made deterministic: the first beam continues twice (one
// fork), the last one is dropped, the others continue once; the search ends
// when the next token would be the max_tokens-th.
BeamStep next_beams(const Scheduler& scheduler, RequestId id) {
  const SequenceGroup& group = *scheduler.request_state(id);
  const std::vector<SequenceId> live = group.live_sequence_ids();
  const int outputs = group.find_sequence(live.front())->num_tokens() - group.prompt_len();
  BeamStep step{id, {}};
  if (outputs + 1 >= group.request.max_tokens) return step;
  const auto token = [&](std::size_t k) { return static_cast<std::int32_t>(1000 + 10 * outputs + k); };
  if (live.size() == 1) {
    for (int k = 0; k < group.request.n; ++k) step.continuations.push_back({live[0], token(step.continuations.size())});
    return step;
  }
  step.continuations.push_back({live[0], token(0)});
  step.continuations.push_back({live[0], token(1)});
  for (std::size_t b = 1; b + 1 < live.size(); ++b) step.continuations.push_back({live[b], token(b + 1)});
  return step;
}

// What a run of several requests showed.
struct Run {
  // The beams' tokens when each beam search ended.
  std::map<RequestId, std::vector<std::vector<std::int32_t>>> final_beams;
  int num_preemptions = 0;
  int num_steps = 0;
};

// Runs everything to completion, checking every step that a beam group runs all
// its live beams or none, and samples all of them or none.
Run run_to_completion(Scheduler& scheduler) {
  test::FakeModel model(0, 0, 1);
  Run run;
  while (scheduler.has_unfinished()) {
    REQUIRE(run.num_steps < 10000);
    const SchedulerOutput output = scheduler.schedule();
    scheduler.check_invariants();
    ++run.num_steps;
    run.num_preemptions += static_cast<int>(output.preempted_by_recompute.size() + output.preempted_by_swap.size());
    std::map<RequestId, std::pair<int, int>> beam_rows;  // request -> (rows, sampled rows)
    std::set<SequenceId> beam_sequences;
    for (const ScheduledSequence& row : output.sequences) {
      const SequenceGroup& group = *scheduler.request_state(row.request_id);
      if (!group.request.beam_search) continue;
      beam_sequences.insert(row.sequence_id);
      auto& [rows, sampled] = beam_rows[row.request_id];
      ++rows;
      if (row.num_samples > 0) {
        CHECK(row.num_samples == 1);
        ++sampled;
      }
    }
    std::vector<BeamStep> steps;
    for (const auto& [id, counts] : beam_rows) {
      const SequenceGroup& group = *scheduler.request_state(id);
      const auto live = static_cast<int>(group.live_sequence_ids().size());
      CHECK((counts.second == 0 || counts.second == live));
      if (group.is_decoding()) CHECK(counts.first == live);
      if (counts.second == live) {
        steps.push_back(next_beams(scheduler, id));
        if (steps.back().continuations.empty()) {
          for (const Sequence& beam : group.sequences) run.final_beams[id].push_back(beam.token_ids);
        }
      }
    }
    std::vector<SequenceSample> samples = model.run(scheduler, output);
    std::erase_if(samples, [&](const SequenceSample& s) { return beam_sequences.contains(s.sequence_id); });
    const UpdateResult result = scheduler.update(output, samples, steps);
    REQUIRE(result.beams.size() == steps.size());
    scheduler.check_invariants();
  }
  return run;
}

}  // namespace

TEST_CASE("beams fork copy-on-write and a dropped beam frees its blocks in the same update", "[scheduler][beam]") {
  SchedulerConfig config;
  Scheduler scheduler(config, cache_without_prefix_caching(4), 32, 0);
  const KvCacheManager& kv = scheduler.kv_cache();
  scheduler.add_request(make_request(1, 6, 10, 3, true));
  CHECK(scheduler.request_state(1)->num_reserved_sequences() == 3);

  // The prompt: one row, one set of candidates, two blocks.
  SchedulerOutput output = scheduler.schedule();
  REQUIRE(output.sequences.size() == 1);
  CHECK(output.sequences[0].num_samples == 1);
  const SequenceId root = output.sequences[0].sequence_id;
  CHECK(kv.num_free_device_blocks() == 30);
  UpdateResult result = scheduler.update(output, {}, std::vector<BeamStep>{{1, {{root, 7}, {root, 8}, {root, 9}}}});
  CHECK(result.sequences.empty());
  REQUIRE(result.beams.size() == 1);
  const std::vector<SequenceId> first = result.beams[0].sequences;
  REQUIRE(first.size() == 3);
  CHECK(first[0] == root);
  // Three beams on the prompt's two blocks: nothing allocated, every block shared.
  CHECK(kv.num_free_device_blocks() == 30);
  for (const SequenceId beam : first) CHECK(table(scheduler, beam) == table(scheduler, root));
  CHECK(kv.device_pool().ref_count(table(scheduler, root)[0]) == 3);
  CHECK(kv.device_pool().ref_count(table(scheduler, root)[1]) == 3);
  const SequenceGroup* group = scheduler.request_state(1);
  CHECK(group->find_sequence(first[1])->token_ids.back() == 8);
  CHECK(group->find_sequence(first[2])->num_computed_tokens == 6);
  scheduler.check_invariants();

  // All three decode together; the first two writers of the shared partial block copy it.
  output = scheduler.schedule();
  CHECK(output.batch.num_decode_seqs == 3);
  CHECK(output.blocks_to_copy.size() == 2);
  CHECK(kv.num_free_device_blocks() == 28);
  const BlockId kept_by_last = table(scheduler, first[2])[1];  // written in place
  CHECK(kv.device_pool().ref_count(kept_by_last) == 1);

  // Beam 0 continues twice, beam 1 once; beam 2 is dropped: its own block returns at once.
  result = scheduler.update(output, {}, std::vector<BeamStep>{{1, {{first[0], 11}, {first[1], 12}, {first[0], 13}}}});
  REQUIRE(result.beams.size() == 1);
  const std::vector<SequenceId> second = result.beams[0].sequences;
  REQUIRE(second.size() == 3);
  CHECK(second[0] == first[0]);
  CHECK(second[1] == first[1]);
  CHECK(second[2] != first[2]);
  CHECK_FALSE(kv.has_sequence(first[2]));
  CHECK(kv.num_free_device_blocks() == 29);
  CHECK(kv.device_pool().ref_count(kept_by_last) == 0);
  // The fork shares beam 0's blocks, its copy of the partial block included.
  CHECK(table(scheduler, second[2]) == table(scheduler, first[0]));
  CHECK(kv.device_pool().ref_count(table(scheduler, first[0])[1]) == 2);
  CHECK(kv.device_pool().ref_count(table(scheduler, first[0])[0]) == 3);
  group = scheduler.request_state(1);
  REQUIRE(group->sequences.size() == 3);
  const std::vector<std::int32_t> fork_tokens = group->find_sequence(second[2])->token_ids;
  CHECK(std::vector<std::int32_t>(fork_tokens.end() - 2, fork_tokens.end()) == std::vector<std::int32_t>{7, 13});
  CHECK(group->find_sequence(second[0])->token_ids.back() == 11);
  scheduler.check_invariants();

  // The search ends: every beam and block is released and the request finishes.
  output = scheduler.schedule();
  CHECK(output.sequences.size() == 3);
  result = scheduler.update(output, {}, std::vector<BeamStep>{{1, {}}});
  CHECK(result.finished_requests == std::vector<RequestId>{1});
  CHECK(result.beams.size() == 1);
  CHECK(result.beams[0].sequences.empty());
  CHECK_FALSE(scheduler.has_unfinished());
  CHECK(kv.num_free_device_blocks() == 32);
  scheduler.check_invariants();
}

TEST_CASE("a beam group is scheduled, grown and preempted as a unit", "[scheduler][beam][preemption]") {
  // A plain request that arrived first and a beam group of width 3 outgrow a 12-block pool
  // (the least the group alone may need): the group, the latest, is the victim, all of it at once.
  const auto run = [](PreemptionMode mode, int num_device_blocks, int budget) {
    SchedulerConfig config;
    config.preemption_mode = mode;
    config.max_num_batched_tokens = budget;
    Scheduler scheduler(config, cache_without_prefix_caching(4), num_device_blocks, 32);
    scheduler.add_request(make_request(1, 8, 24, 1, false));
    scheduler.add_request(make_request(2, 6, 9, 3, true));
    Run result = run_to_completion(scheduler);
    CHECK(scheduler.kv_cache().num_free_device_blocks() == num_device_blocks);
    CHECK(scheduler.kv_cache().num_free_host_blocks() == 32);
    return result;
  };
  const Run relaxed = run(PreemptionMode::kRecompute, 64, 2048);
  CHECK(relaxed.num_preemptions == 0);
  REQUIRE(relaxed.final_beams.at(2).size() == 3);
  const Run recomputed = run(PreemptionMode::kRecompute, 12, 2048);
  CHECK(recomputed.num_preemptions > 0);
  // Recomputed in chunks of at most 5 tokens: beams that reach their end wait for the others.
  const Run chunked = run(PreemptionMode::kRecompute, 12, 5);
  CHECK(chunked.num_preemptions > 0);
  const Run swapped = run(PreemptionMode::kSwap, 12, 2048);
  CHECK(swapped.num_preemptions > 0);
  CHECK(recomputed.final_beams == relaxed.final_beams);
  CHECK(chunked.final_beams == relaxed.final_beams);
  CHECK(swapped.final_beams == relaxed.final_beams);
}

TEST_CASE("a preempted beam group holds no block and comes back with every beam", "[scheduler][beam][preemption]") {
  for (const PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    SchedulerConfig config;
    config.preemption_mode = mode;
    Scheduler scheduler(config, cache_without_prefix_caching(4), 12, 32);
    const KvCacheManager& kv = scheduler.kv_cache();
    test::FakeModel model(0, 0, 1);
    scheduler.add_request(make_request(1, 8, 24, 1, false));
    scheduler.add_request(make_request(2, 6, 9, 3, true));
    bool preempted = false;
    while (!preempted) {
      REQUIRE(scheduler.request_state(2) != nullptr);  // preempted before its search ends
      const SchedulerOutput output = scheduler.schedule();
      std::vector<BeamStep> steps;
      std::vector<SequenceSample> samples;
      for (SequenceSample& sample : model.run(scheduler, output)) {
        if (scheduler.request_state(2)->find_sequence(sample.sequence_id) == nullptr) samples.push_back(sample);
      }
      if (std::any_of(output.sequences.begin(), output.sequences.end(),
                      [](const ScheduledSequence& row) { return row.request_id == 2 && row.num_samples > 0; })) {
        steps.push_back(next_beams(scheduler, 2));
      }
      preempted = !output.preempted_by_recompute.empty() || !output.preempted_by_swap.empty();
      if (preempted) {
        const std::vector<SequenceId> beams = scheduler.request_state(2)->live_sequence_ids();
        CHECK(beams.size() == 3);
        const auto blocks_of_1 = static_cast<int>(
            table(scheduler, scheduler.request_state(1)->sequences[0].id).size());
        if (mode == PreemptionMode::kRecompute) {
          CHECK(output.preempted_by_recompute == std::vector<RequestId>{2});
          for (const SequenceId beam : beams) CHECK(table(scheduler, beam).empty());
          CHECK(kv.num_free_device_blocks() == 12 - blocks_of_1);
        } else {
          CHECK(output.preempted_by_swap == std::vector<RequestId>{2});
          for (const SequenceId beam : beams) CHECK(kv.is_swapped(beam));
          // The beams' distinct blocks, shared ones once, went to the host.
          CHECK(32 - kv.num_free_host_blocks() == static_cast<int>(output.blocks_to_swap_out.size()));
          CHECK(kv.num_free_device_blocks() == 12 - blocks_of_1);
        }
        CHECK(std::none_of(output.sequences.begin(), output.sequences.end(),
                           [](const ScheduledSequence& row) { return row.request_id == 2; }));
      }
      scheduler.update(output, samples, steps);
      scheduler.check_invariants();
    }
    const Run rest = run_to_completion(scheduler);
    CHECK(rest.final_beams.at(2).size() == 3);
    CHECK(kv.num_free_device_blocks() == 12);
  }
}
