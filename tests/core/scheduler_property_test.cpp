#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/scheduler/scheduler.h"
#include "tests/core/scheduler_sim.h"

using namespace pagedllm;

namespace {

struct TraceConfig {
  SchedulerConfig scheduler;
  CacheConfig cache;
  int num_device_blocks = 0;
  int num_host_blocks = 0;
};

TraceConfig random_config(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TraceConfig config;
  config.cache.block_size = std::vector<int>{1, 2, 4, 8, 16}[static_cast<std::size_t>(pick(0, 4))];
  config.cache.enable_prefix_caching = pick(0, 3) != 0;
  config.cache.watermark = pick(0, 1) == 0 ? 0.0 : 0.05;
  config.num_device_blocks = pick(4, 48);
  config.num_host_blocks = pick(0, 2) == 0 ? 0 : pick(1, 32);
  config.scheduler.num_lookahead_tokens = pick(0, 1) == 0 ? 0 : pick(1, 3);
  config.scheduler.max_num_seqs = pick(1, 8);
  config.scheduler.max_num_batched_tokens = pick(1 + config.scheduler.num_lookahead_tokens, 96);
  config.scheduler.max_model_len = pick(0, 1) == 0 ? 0 : pick(16, 200);
  config.scheduler.enable_chunked_prefill = pick(0, 3) != 0;
  config.scheduler.max_num_partial_prefills = pick(1, 3);
  config.scheduler.long_prefill_token_threshold = pick(0, 1) == 0 ? 0 : pick(1, 40);
  config.scheduler.preemption_mode = pick(0, 1) == 0 ? PreemptionMode::kRecompute : PreemptionMode::kSwap;
  config.scheduler.policy = pick(0, 1) == 0 ? SchedulingPolicy::kFcfs : SchedulingPolicy::kPriority;
  return config;
}

// Step-output invariants: budget, cap, layout, and no write into a shared block.
void check_output(const Scheduler& scheduler, const SchedulerOutput& output,
                  const SchedulerConfig& config) {
  const StepBatch& batch = output.batch;
  REQUIRE(output.num_batched_tokens <= config.max_num_batched_tokens);
  REQUIRE(batch.num_tokens() == output.num_batched_tokens);
  REQUIRE(batch.num_seqs() <= config.max_num_seqs);
  REQUIRE(batch.num_seqs() == static_cast<int>(output.sequences.size()));
  REQUIRE(batch.query_start_loc.size() == output.sequences.size() + 1);
  REQUIRE(batch.block_tables.size() ==
          output.sequences.size() * static_cast<std::size_t>(batch.max_blocks_per_seq));
  const KvCacheManager& kv = scheduler.kv_cache();
  std::set<std::int64_t> written;
  std::set<SequenceId> rows;
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    REQUIRE(rows.insert(row.sequence_id).second);
    REQUIRE(row.is_decode == (static_cast<int>(r) < batch.num_decode_seqs));
    REQUIRE(batch.query_start_loc[r + 1] - batch.query_start_loc[r] == row.num_new_tokens);
    REQUIRE(batch.seq_lens[r] == row.num_computed_tokens + row.num_new_tokens);
    const auto table = kv.block_table(row.sequence_id);
    for (int i = 0; i < row.num_new_tokens; ++i) {
      const auto t = static_cast<std::size_t>(batch.query_start_loc[r] + i);
      REQUIRE(batch.positions[t] == row.num_computed_tokens + i);
      const std::int64_t slot = batch.slot_mapping[t];
      REQUIRE(written.insert(slot).second);
      const auto block = static_cast<BlockId>(slot / batch.block_size);
      REQUIRE(block == table[static_cast<std::size_t>(batch.positions[t] / batch.block_size)]);
      // Copy-on-write: a written block belongs to this sequence alone and is not cached.
      REQUIRE(kv.device_pool().ref_count(block) == 1);
      REQUIRE_FALSE(kv.device_pool().hash_of(block).has_value());
    }
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch.max_blocks_per_seq); ++b) {
      const std::int32_t entry = batch.block_tables[r * static_cast<std::size_t>(batch.max_blocks_per_seq) + b];
      REQUIRE(entry == (b < table.size() ? table[b] : kInvalidBlockId));
    }
  }
  for (const std::int32_t index : batch.logits_indices) {
    REQUIRE(index >= 0);
    REQUIRE(index < batch.num_tokens());
  }
}

void run_trace(std::uint32_t seed) {
  INFO("trace seed " << seed << " (run_trace(" << seed << ") reproduces it)");
  std::mt19937 rng(seed);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const TraceConfig config = random_config(rng);
  Scheduler scheduler(config.scheduler, config.cache, config.num_device_blocks,
                      config.num_host_blocks);
  test::FakeModel model(config.scheduler.num_lookahead_tokens, 0.6, seed);
  test::OutputLog log;

  // Prompts share prefixes so the prefix cache is exercised.
  std::vector<std::vector<std::int32_t>> prefixes(3);
  for (auto& prefix : prefixes) {
    for (int i = 0, length = pick(1, 40); i < length; ++i) prefix.push_back(pick(0, 999));
  }
  std::map<RequestId, int> prompt_lengths;
  std::map<RequestId, int> max_tokens;
  std::set<RequestId> admitted, stopped_early;
  RequestId next_id = 0;
  const int num_steps = 120;
  int step = 0;
  for (; step < num_steps || scheduler.has_unfinished(); ++step) {
    REQUIRE(step < num_steps + 50000);  // liveness: every admitted request drains
    if (step < num_steps) {
      for (int adds = pick(0, 2); adds > 0; --adds) {
        Request request;
        request.id = next_id++;
        request.prompt_token_ids = prefixes[static_cast<std::size_t>(pick(0, 2))];
        for (int i = 0, extra = pick(0, 30); i < extra || request.prompt_token_ids.empty(); ++i) {
          request.prompt_token_ids.push_back(pick(0, 999));
        }
        request.max_tokens = pick(1, 24);
        request.n = pick(0, 4) == 0 ? pick(2, 3) : 1;
        // A beam search of width n: its beams come from random BeamSteps below.
        request.beam_search = request.n > 1 && pick(0, 1) == 0;
        request.speculative = !request.beam_search;
        request.priority = pick(0, 2);
        request.cache_key = pick(0, 5) == 0 ? "adapter" : "base";
        try {
          scheduler.add_request(request);
          admitted.insert(request.id);
          prompt_lengths[request.id] = static_cast<int>(request.prompt_token_ids.size());
          max_tokens[request.id] = request.max_tokens;
        } catch (const RequestRejected&) {
          // Rejected at once, never queued: the invariants below show it holds nothing.
        }
      }
      if (!admitted.empty() && pick(0, 9) == 0) {
        const RequestId victim = static_cast<RequestId>(pick(0, static_cast<int>(next_id) - 1));
        if (scheduler.abort(victim)) stopped_early.insert(victim);
      }
      if (!admitted.empty() && pick(0, 14) == 0) {
        const RequestId victim = static_cast<RequestId>(pick(0, static_cast<int>(next_id) - 1));
        if (scheduler.status(victim).has_value()) {
          scheduler.finish(victim, FinishReason::kStop);
          stopped_early.insert(victim);
        }
      }
      scheduler.check_invariants();
    }

    const SchedulerOutput output = scheduler.schedule();
    scheduler.check_invariants();
    check_output(scheduler, output, config.scheduler);
    std::vector<SequenceSample> samples = model.run(scheduler, output);
    // Beam groups: every live beam sampled or none; when all were, random next beams
    // (random parents, some dropped, some forked), or the end of the search.
    std::map<RequestId, int> sampled_beams;
    for (const ScheduledSequence& row : output.sequences) {
      if (scheduler.request_state(row.request_id)->request.beam_search && row.num_samples > 0) {
        ++sampled_beams[row.request_id];
      }
    }
    std::erase_if(samples, [&](const SequenceSample& sample) {
      return std::any_of(output.sequences.begin(), output.sequences.end(), [&](const ScheduledSequence& row) {
        return row.sequence_id == sample.sequence_id && sampled_beams.contains(row.request_id);
      });
    });
    std::vector<BeamStep> beam_steps;
    for (const auto& [id, sampled] : sampled_beams) {
      const SequenceGroup& group = *scheduler.request_state(id);
      const std::vector<SequenceId> live = group.live_sequence_ids();
      REQUIRE(sampled == static_cast<int>(live.size()));
      const int outputs = group.find_sequence(live.front())->num_tokens() - group.prompt_len();
      BeamStep beam_step{id, {}};
      if (outputs + 1 < group.request.max_tokens && pick(0, 9) != 0) {
        for (int b = 0; b < group.request.n; ++b) {
          beam_step.continuations.push_back(
              {live[static_cast<std::size_t>(pick(0, static_cast<int>(live.size()) - 1))], pick(0, 999)});
        }
      }
      beam_steps.push_back(std::move(beam_step));
    }
    if (step < num_steps && !output.sequences.empty() && pick(0, 19) == 0) {
      // Abort between schedule() and update(): its blocks go back now, its rows are skipped.
      const RequestId victim = output.sequences[static_cast<std::size_t>(
          pick(0, static_cast<int>(output.sequences.size()) - 1))].request_id;
      if (scheduler.abort(victim)) stopped_early.insert(victim);
    }
    log.record(scheduler.update(output, samples, beam_steps));
    scheduler.check_invariants();
  }

  // Drained: nothing owned, every block free or cached with ref count 0.
  const KvCacheManager& kv = scheduler.kv_cache();
  REQUIRE(kv.num_free_device_blocks() == kv.num_device_blocks());
  REQUIRE(kv.num_free_host_blocks() == kv.num_host_blocks());
  for (BlockId block = 0; block < kv.num_device_blocks(); ++block) {
    REQUIRE(kv.device_pool().ref_count(block) == 0);
  }
  REQUIRE(scheduler.stats().kv.usage() == 0.0);
  // Every admitted request finished or was stopped/aborted, with the true tokens.
  for (const RequestId request : admitted) {
    REQUIRE((log.finished.contains(request) || stopped_early.contains(request)));
  }
  log.check_tokens(prompt_lengths);
  for (const auto& [sequence, out] : log.tokens) {
    const RequestId request = log.owner.at(sequence).first;
    REQUIRE(static_cast<int>(out.size()) <= max_tokens.at(request));
    if (!stopped_early.contains(request)) REQUIRE(static_cast<int>(out.size()) == max_tokens.at(request));
  }
}

}  // namespace

// Each trace is ~120 steps of random traffic plus its drain, with every
// invariant checked after every operation. Sanitizer builds run ~8x slower, so
// they run a prefix of the same seeds to keep the suite within a minute or two.
#if defined(__SANITIZE_ADDRESS__)
constexpr std::uint32_t kNumTraces = 300;
#else
constexpr std::uint32_t kNumTraces = 1000;
#endif

TEST_CASE("random add/step/finish/abort/fork/beam traces keep every scheduler and KV invariant",
          "[scheduler][property]") {
  for (std::uint32_t seed = 1; seed <= kNumTraces; ++seed) run_trace(seed);
}
