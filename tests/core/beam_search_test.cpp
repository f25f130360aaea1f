// BeamSearch's rules on hand-made candidates (the values worked out in the comments):
// which candidates run on, which become hypotheses and how they score, and where each
// early_stopping mode ends the search. tests/api/test_beam_search.py checks the same
// rules against transformers on a real model.

#include <catch2/catch.hpp>

#include <vector>

#include "core/engine/beam_search.h"

using namespace pagedllm;
using Candidates = std::vector<BeamSearch::Candidate>;

namespace {

constexpr std::int32_t kEos = 0;

// `best` first, padded to K = 4 with unlikely tokens.
Candidates offer(Candidates best) {
  for (std::int32_t filler = 100; best.size() < 4; ++filler) best.push_back({filler, -10.0f - filler});
  return best;
}

std::vector<std::int32_t> tokens_of(const BeamSearch::Hypothesis& hypothesis) {
  std::vector<std::int32_t> tokens;
  for (const TokenLogprob& token : hypothesis.tokens) tokens.push_back(token.token_id);
  return tokens;
}

// Width 2, EOS the only finish token (so K = 4), max 4 tokens, length_penalty 1. Returns the
// search after it ended, and how many steps it took.
std::pair<BeamSearch, int> search(BeamSearchOptions::EarlyStopping early_stopping) {
  BeamSearchOptions options;
  options.beam_width = 2;
  options.length_penalty = 1.0f;
  options.early_stopping = early_stopping;
  BeamSearch beams(options, 4, {kEos}, 1);
  REQUIRE(beams.candidates_per_beam() == 4);

  // Step 1, from the prompt: totals 5: -0.1, EOS: -0.5, 6: -1.0. EOS is among the best two: the
  // hypothesis [EOS] scores -0.5 / 1. The best two that do not end run on.
  std::vector<Candidates> step{offer({{5, -0.1f}, {kEos, -0.5f}, {6, -1.0f}, {7, -2.0f}})};
  auto next = beams.step(step);
  REQUIRE(next.size() == 2);
  CHECK((next[0].beam == 0 && next[0].token == 5 && next[1].beam == 0 && next[1].token == 6));

  // Step 2: totals [5 EOS] -0.3, [5 8] -0.4, [6 EOS] -1.05, [6 11] -1.4. [5 EOS] scores -0.3 / 2;
  // [6 EOS] is third, so it is no hypothesis. Two hypotheses now: early_stopping true ends here.
  step = {offer({{kEos, -0.2f}, {8, -0.3f}}), offer({{kEos, -0.05f}, {11, -0.4f}})};
  next = beams.step(step);
  if (early_stopping == BeamSearchOptions::EarlyStopping::kTrue) return {std::move(beams), 2};
  // false / never: the best running beam, -0.4 at length 2 (or 4), beats the worst hypothesis, -0.5.
  REQUIRE(next.size() == 2);
  CHECK((next[0].beam == 0 && next[0].token == 8 && next[1].beam == 1 && next[1].token == 11));

  // Step 3: totals [5 8 14] -1.8, [6 11 15] -1.9. At length 3 the best can score -0.6, not above
  // -0.5: false ends here. "never" counts it at max_tokens, -0.45, and goes on.
  step = {offer({{14, -1.4f}}), offer({{15, -0.5f}})};
  next = beams.step(step);
  if (early_stopping == BeamSearchOptions::EarlyStopping::kFalse) return {std::move(beams), 3};
  REQUIRE(next.size() == 2);

  // Step 4 reaches max_tokens: the best two end, scoring -1.9 / 4 = -0.475 and -2.1 / 4 = -0.525;
  // the kept two are [5 EOS] (-0.15) and [5 8 14 16] (-0.475).
  step = {offer({{16, -0.1f}}), offer({{17, -0.2f}})};
  CHECK(beams.step(step).empty());
  return {std::move(beams), 4};
}

}  // namespace

TEST_CASE("beam search keeps HF's hypotheses and scores and stops where each early_stopping says",
          "[beam_search]") {
  using EarlyStopping = BeamSearchOptions::EarlyStopping;
  for (const EarlyStopping mode : {EarlyStopping::kTrue, EarlyStopping::kFalse, EarlyStopping::kNever}) {
    auto [beams, steps] = search(mode);
    CHECK(beams.done());
    CHECK(steps == (mode == EarlyStopping::kTrue ? 2 : mode == EarlyStopping::kFalse ? 3 : 4));
    const std::vector<BeamSearch::Hypothesis> best = beams.best(2);
    REQUIRE(best.size() == 2);
    CHECK(tokens_of(best[0]) == std::vector<std::int32_t>{5, kEos});
    CHECK(best[0].score == Approx(-0.15));
    CHECK(best[0].cumulative_logprob == Approx(-0.3));
    CHECK(best[0].tokens[1].logprob == Approx(-0.2f));
    // Alternatives reported: the step's best token (num_top_logprobs = 1).
    CHECK(best[0].tokens[1].top == std::vector<std::pair<std::int32_t, float>>{{kEos, -0.2f}});
    if (mode == EarlyStopping::kNever) {
      CHECK(tokens_of(best[1]) == std::vector<std::int32_t>{5, 8, 14, 16});
      CHECK(best[1].score == Approx(-0.475));
    } else {
      CHECK(tokens_of(best[1]) == std::vector<std::int32_t>{kEos});
      CHECK(best[1].score == Approx(-0.5));
    }
    CHECK(beams.best(1).size() == 1);
  }
}

TEST_CASE("beam search ends when every candidate ends, and a length penalty reorders hypotheses",
          "[beam_search]") {
  // max_tokens 1: every candidate of the first step ends; the best two are the hypotheses.
  BeamSearchOptions options;
  options.beam_width = 2;
  BeamSearch one(options, 1, {kEos}, 0);
  CHECK(one.step(std::vector<Candidates>{offer({{3, -0.2f}, {4, -0.3f}})}).empty());
  CHECK(one.done());
  CHECK(tokens_of(one.best(2)[1]) == std::vector<std::int32_t>{4});

  // length_penalty 2: [EOS] at -0.5 / 1 loses to a 2-token -0.8 / 4 = -0.2.
  options.length_penalty = 2.0f;
  options.early_stopping = BeamSearchOptions::EarlyStopping::kTrue;
  BeamSearch penalized(options, 2, {kEos}, 0);
  auto next = penalized.step(std::vector<Candidates>{offer({{kEos, -0.5f}, {6, -0.6f}, {7, -0.7f}})});
  REQUIRE(next.size() == 2);
  next = penalized.step(std::vector<Candidates>{offer({{8, -0.2f}}), offer({{9, -0.3f}})});
  CHECK(next.empty());
  const auto best = penalized.best(2);
  CHECK(tokens_of(best[0]) == std::vector<std::int32_t>{6, 8});
  CHECK(best[0].score == Approx(-0.2));
  CHECK(tokens_of(best[1]) == std::vector<std::int32_t>{7, 9});  // -1.0 / 4, above [EOS]'s -0.5
}
