#pragma once
// Structured output on the host side: the configured constraint plugin
// (sdk/constraint.h) created over the model's vocabulary, a request's
// constraint compiled on the client's thread (so a bad schema is a 400 before
// the request is queued), and per sequence a matcher whose next-token mask the
// sampler applies and which accepts every token the sequence samples.
//
// A matcher lives with the request (LlmEngine::LiveRequest), not with the
// scheduler's sequence: a preempted sequence (recompute or swap) keeps its
// output tokens, so its matcher, which has accepted exactly those, stays right.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/engine/engine.h"
#include "core/plugin/plugin_instance.h"
#include "core/tokenizer/tokenizer.h"

namespace pagedllm {

using ConstraintGrammar = std::shared_ptr<pllm_constraint_grammar>;

class ConstraintMatcher {
 public:
  ConstraintMatcher(const ConstraintInstance* engine, pllm_constraint_matcher* matcher)
      : engine_(engine), matcher_(matcher) {}
  ~ConstraintMatcher();
  ConstraintMatcher(const ConstraintMatcher&) = delete;
  ConstraintMatcher& operator=(const ConstraintMatcher&) = delete;
  pllm_constraint_matcher* get() const { return matcher_; }

 private:
  const ConstraintInstance* engine_;
  pllm_constraint_matcher* matcher_;
};

class StructuredOutput {
 public:
  // Creates the plugin's engine over `tokenizer`'s token strings; masks are `vocab_size` wide.
  StructuredOutput(std::shared_ptr<const PluginLibrary> library, const std::string& options_json,
                   const tokenizer::Tokenizer& tokenizer, int vocab_size, std::span<const std::int32_t> stop_tokens);

  // Any thread. Throws RequestRejected naming constraint.field with the plugin's message.
  ConstraintGrammar compile(const OutputConstraint& constraint) const;

  // Engine thread.
  std::unique_ptr<ConstraintMatcher> make_matcher(const ConstraintGrammar& grammar) const;
  // Row r of `bitmask` ([matchers.size(), words()]) gets matchers[r]'s next-token mask.
  void fill_bitmask(std::span<pllm_constraint_matcher* const> matchers, std::uint32_t* bitmask) const;
  // Advances the matcher; false when the grammar refuses the token.
  bool accept(pllm_constraint_matcher* matcher, std::int32_t token) const;
  // Undoes the matcher's last `num_tokens` accepted tokens (speculative drafts).
  void rollback(pllm_constraint_matcher* matcher, int num_tokens) const;
  int words() const { return (vocab_size_ + 31) / 32; }

 private:
  ConstraintInstance instance_;
  int vocab_size_;
};

}  // namespace pagedllm
