#pragma once
// The search of one beam-search request, a step at a time, with HF transformers'
// rules (4.57, generation/utils.py _beam_search; docs/server.md "Beam search"):
//   - candidates: the K = max(2, 1 + number of finish tokens) x width best
//     (beam score + raw logprob) over every live beam's next tokens;
//   - the best `width` of them that do not finish run on (the next beams);
//   - those among the best `width` that finish (a finish token, or max_tokens
//     reached) become hypotheses scored sum / length ^ length_penalty, length
//     counting the finishing token; the `width` best hypotheses are kept;
//   - the search ends per early_stopping (BeamSearchOptions), or when every
//     candidate finishes.
// The engine feeds it each step's candidates and applies the continuations it
// returns through the scheduler (a BeamStep). No model and no KV here.

#include <cstdint>
#include <span>
#include <vector>

#include "core/engine/engine.h"

namespace pagedllm {

class BeamSearch {
 public:
  // One of a beam's best next tokens, with its raw logprob.
  struct Candidate {
    std::int32_t token = -1;
    float logprob = 0.0f;
  };
  // The next step's beam `beam` (an index into the step's beams) extended by `token`.
  struct Continuation {
    int beam = 0;
    std::int32_t token = -1;
  };
  struct Hypothesis {
    // Output tokens, each with its logprob and (when asked) the top alternatives of its step.
    std::vector<TokenLogprob> tokens;
    float cumulative_logprob = 0.0f;
    float score = 0.0f;  // cumulative_logprob / tokens ^ length_penalty
  };

  // `finish_tokens`: what ends a beam (EOS unless ignore_eos, stop_token_ids).
  // `num_top_logprobs`: alternatives recorded per token (the request's logprobs).
  BeamSearch(const BeamSearchOptions& options, int max_new_tokens, std::vector<std::int32_t> finish_tokens,
             int num_top_logprobs);

  // K: the candidates each beam must offer per step (its best K tokens).
  int candidates_per_beam() const { return candidates_per_beam_; }
  // Live beams: 1 before the first step (the prompt), then the width.
  int num_beams() const { return static_cast<int>(running_.size()); }

  // `candidates[b]`: live beam b's best tokens, logprob descending, at least
  // candidates_per_beam() and num_top_logprobs of them. Returns the next
  // step's beams, best first; empty once the search is over (done()).
  std::vector<Continuation> step(std::span<const std::vector<Candidate>> candidates);
  bool done() const { return done_; }

  // The n best hypotheses, best first (n <= the width; valid once done()).
  std::vector<Hypothesis> best(int n) const;

 private:
  struct Beam {
    std::vector<TokenLogprob> tokens;
    float score = 0.0f;  // summed logprob
  };
  bool finishes(std::int32_t token, int length) const;
  void add_hypothesis(Hypothesis hypothesis);

  int width_;
  float length_penalty_;
  BeamSearchOptions::EarlyStopping early_stopping_;
  int max_new_tokens_;
  std::vector<std::int32_t> finish_tokens_;
  int num_top_logprobs_;
  int candidates_per_beam_;
  std::vector<Beam> running_;
  std::vector<Hypothesis> finished_;  // score descending, at most width_
  int generated_ = 0;                 // tokens each running beam has
  bool done_ = false;
};

}  // namespace pagedllm
