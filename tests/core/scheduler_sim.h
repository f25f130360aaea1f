#pragma once
// A fake model for scheduler tests: the "true" next token is a pure function of
// (request, sequence index, position), so every preemption mode, chunking and
// speculation pattern must produce the same tokens. The speculator proposes
// drafts that are right with a given probability.

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/scheduler/scheduler.h"

namespace pagedllm::test {

inline std::int32_t true_token(RequestId request, int sequence_index, int position) {
  std::uint64_t x = static_cast<std::uint64_t>(request) * 0x9E3779B97F4A7C15ull ^
                    static_cast<std::uint64_t>(sequence_index) * 0xC2B2AE3D27D4EB4Full ^
                    static_cast<std::uint64_t>(position) * 0x165667B19E3779F9ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<std::int32_t>(x % 1000);
}

class FakeModel {
 public:
  FakeModel(int num_lookahead_tokens, double draft_accuracy, std::uint32_t seed)
      : num_lookahead_tokens_(num_lookahead_tokens), draft_accuracy_(draft_accuracy), rng_(seed) {}

  // Samples for every row that asks for it, as the sampler/verifier would.
  std::vector<SequenceSample> run(const Scheduler& scheduler, const SchedulerOutput& output) {
    std::vector<SequenceSample> samples;
    for (const ScheduledSequence& row : output.sequences) {
      if (row.num_samples == 0) continue;
      const SequenceGroup& group = *scheduler.request_state(row.request_id);
      int index = 0;
      while (group.sequences[static_cast<std::size_t>(index)].id != row.sequence_id) ++index;
      const Sequence& sequence = group.sequences[static_cast<std::size_t>(index)];
      const int length = sequence.num_tokens();
      SequenceSample sample;
      sample.sequence_id = row.sequence_id;
      if (row.is_decode) {
        for (int j = 0; j <= row.num_draft_tokens; ++j) {
          const std::int32_t truth = true_token(row.request_id, index, length + j);
          sample.token_ids.push_back(truth);
          if (j == row.num_draft_tokens ||
              sequence.draft_token_ids[static_cast<std::size_t>(j)] != truth) {
            break;
          }
        }
      } else {
        for (int i = 0; i < row.num_samples; ++i) {
          sample.token_ids.push_back(true_token(row.request_id, index + i, length));
        }
      }
      const int next_length = length + static_cast<int>(sample.token_ids.size());
      std::uniform_int_distribution<int> count(0, num_lookahead_tokens_);
      const int num_drafts = count(rng_);
      for (int i = 0; i < num_drafts; ++i) {
        const bool right = std::uniform_real_distribution<double>(0, 1)(rng_) < draft_accuracy_;
        sample.draft_token_ids.push_back(right ? true_token(row.request_id, index, next_length + i)
                                               : 1000 + i);
      }
      samples.push_back(std::move(sample));
    }
    return samples;
  }

 private:
  int num_lookahead_tokens_;
  double draft_accuracy_;
  std::mt19937 rng_;
};

// Outputs per (request, sequence index) collected from update() results.
struct OutputLog {
  std::map<SequenceId, std::vector<std::int32_t>> tokens;
  std::map<SequenceId, std::pair<RequestId, int>> owner;  // request, sequence index
  std::set<RequestId> finished;

  void record(const UpdateResult& result) {
    for (const SequenceUpdate& update : result.sequences) {
      owner[update.sequence_id] = {update.request_id, update.sequence_index};
      auto& out = tokens[update.sequence_id];
      out.insert(out.end(), update.new_token_ids.begin(), update.new_token_ids.end());
    }
    finished.insert(result.finished_requests.begin(), result.finished_requests.end());
  }

  // Every recorded token equals the true token at its position.
  void check_tokens(const std::map<RequestId, int>& prompt_lengths) const {
    for (const auto& [sequence, out] : tokens) {
      const auto [request, index] = owner.at(sequence);
      const int prompt_length = prompt_lengths.at(request);
      for (std::size_t i = 0; i < out.size(); ++i) {
        INFO("request " << request << " sequence " << sequence << " output " << i);
        REQUIRE(out[i] == true_token(request, index, prompt_length + static_cast<int>(i)));
      }
    }
  }
};

}  // namespace pagedllm::test
