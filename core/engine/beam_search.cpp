#include "core/engine/beam_search.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/common/check.h"

namespace pagedllm {

BeamSearch::BeamSearch(const BeamSearchOptions& options, int max_new_tokens, std::vector<std::int32_t> finish_tokens,
                       int num_top_logprobs)
    : width_(options.beam_width),
      length_penalty_(options.length_penalty),
      early_stopping_(options.early_stopping),
      max_new_tokens_(max_new_tokens),
      finish_tokens_(std::move(finish_tokens)),
      num_top_logprobs_(num_top_logprobs) {
  std::sort(finish_tokens_.begin(), finish_tokens_.end());
  finish_tokens_.erase(std::unique(finish_tokens_.begin(), finish_tokens_.end()), finish_tokens_.end());
  // HF keeps enough candidates that `width` of them run on even when every beam's
  // best tokens finish.
  candidates_per_beam_ = std::max(2, 1 + static_cast<int>(finish_tokens_.size())) * width_;
  running_.emplace_back();  // the prompt
}

bool BeamSearch::finishes(std::int32_t token, int length) const {
  return length >= max_new_tokens_ || std::binary_search(finish_tokens_.begin(), finish_tokens_.end(), token);
}

void BeamSearch::add_hypothesis(Hypothesis hypothesis) {
  // Ties keep the earlier hypothesis first.
  const auto at = std::upper_bound(finished_.begin(), finished_.end(), hypothesis.score,
                                   [](float score, const Hypothesis& h) { return score > h.score; });
  finished_.insert(at, std::move(hypothesis));
  if (static_cast<int>(finished_.size()) > width_) finished_.pop_back();
}

std::vector<BeamSearch::Continuation> BeamSearch::step(std::span<const std::vector<Candidate>> candidates) {
  PAGEDLLM_CHECK(!done_, "beam search step after its end");
  PAGEDLLM_CHECK(candidates.size() == running_.size(), "{} candidate lists for {} beams", candidates.size(),
                 running_.size());
  struct Scored {
    float total = 0.0f;
    int beam = 0;
    int rank = 0;
  };
  std::vector<Scored> scored;
  for (std::size_t b = 0; b < candidates.size(); ++b) {
    PAGEDLLM_CHECK(static_cast<int>(candidates[b].size()) >= std::max(candidates_per_beam_, num_top_logprobs_),
                   "beam {} offers {} candidates, {} needed", b, candidates[b].size(),
                   std::max(candidates_per_beam_, num_top_logprobs_));
    for (int r = 0; r < candidates_per_beam_; ++r) {
      scored.push_back({running_[b].score + candidates[b][static_cast<std::size_t>(r)].logprob, static_cast<int>(b),
                        r});
    }
  }
  // The K best over every beam; ties in beam, then rank order.
  std::stable_sort(scored.begin(), scored.end(), [](const Scored& a, const Scored& b) { return a.total > b.total; });
  scored.resize(std::min(scored.size(), static_cast<std::size_t>(candidates_per_beam_)));

  const int length = generated_ + 1;
  const auto extended = [&](const Scored& s) {
    const std::vector<Candidate>& offered = candidates[static_cast<std::size_t>(s.beam)];
    const Candidate& chosen = offered[static_cast<std::size_t>(s.rank)];
    Beam beam = running_[static_cast<std::size_t>(s.beam)];
    TokenLogprob token{chosen.token, chosen.logprob, {}};
    for (int k = 0; k < num_top_logprobs_; ++k) {
      token.top.emplace_back(offered[static_cast<std::size_t>(k)].token, offered[static_cast<std::size_t>(k)].logprob);
    }
    beam.tokens.push_back(std::move(token));
    beam.score = s.total;
    return beam;
  };
  const auto token_of = [&](const Scored& s) {
    return candidates[static_cast<std::size_t>(s.beam)][static_cast<std::size_t>(s.rank)].token;
  };

  // Only the best `width` candidates may become hypotheses; none once `width`
  // are finished under early_stopping true.
  const bool full = static_cast<int>(finished_.size()) == width_;
  if (!(full && early_stopping_ == BeamSearchOptions::EarlyStopping::kTrue)) {
    const std::size_t best = std::min(scored.size(), static_cast<std::size_t>(width_));
    for (std::size_t i = 0; i < best; ++i) {
      if (!finishes(token_of(scored[i]), length)) continue;
      Beam beam = extended(scored[i]);
      const float score = static_cast<float>(beam.score / std::pow(static_cast<double>(length), length_penalty_));
      add_hypothesis({std::move(beam.tokens), beam.score, score});
    }
  }

  std::vector<Beam> next;
  std::vector<Continuation> continuations;
  for (const Scored& s : scored) {
    if (static_cast<int>(next.size()) == width_) break;
    if (finishes(token_of(s), length)) continue;
    next.push_back(extended(s));
    continuations.push_back({s.beam, token_of(s)});
  }
  running_ = std::move(next);
  generated_ = length;

  // HF's stop rules: early_stopping true ends the search once `width` hypotheses
  // are finished; otherwise it ends when the best running beam, counted at its
  // current length (at max_tokens under "never" with a positive penalty), cannot
  // beat the worst of `width` hypotheses.
  bool improvable = true;
  if (static_cast<int>(finished_.size()) == width_ && !running_.empty()) {
    const bool longest = early_stopping_ == BeamSearchOptions::EarlyStopping::kNever && length_penalty_ > 0.0f;
    const int hypothetical_length = longest ? max_new_tokens_ : generated_;
    const auto best_possible = static_cast<float>(
        running_.front().score / std::pow(static_cast<double>(hypothetical_length), length_penalty_));
    improvable = best_possible > finished_.back().score;
  }
  const bool all_finished_stop =
      static_cast<int>(finished_.size()) == width_ && early_stopping_ == BeamSearchOptions::EarlyStopping::kTrue;
  if (running_.empty() || !improvable || all_finished_stop) {
    done_ = true;
    running_.clear();
    return {};
  }
  return continuations;
}

std::vector<BeamSearch::Hypothesis> BeamSearch::best(int n) const {
  PAGEDLLM_CHECK(done_, "beam search results before its end");
  const auto count = std::min(finished_.size(), static_cast<std::size_t>(std::max(0, n)));
  return {finished_.begin(), finished_.begin() + static_cast<std::ptrdiff_t>(count)};
}

}  // namespace pagedllm
