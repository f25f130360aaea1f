#pragma once
// The text side of one output sequence: incremental detokenization, EOS and
// stop tokens, stop strings across token boundaries. The engine feeds it the
// tokens the scheduler accepted; it fills the sequence's delta for the step.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/stop_matcher.h"

namespace pagedllm {

class SequenceOutput {
 public:
  // `tokenizer` and `eos_token_ids` must outlive the object.
  SequenceOutput(const tokenizer::Tokenizer& tokenizer, const SamplingOptions& sampling,
                 std::span<const std::int32_t> prompt_token_ids,
                 std::span<const std::int32_t> eos_token_ids);

  // Adds one accepted token to `delta` (its id, and its text once final).
  // Returns true when the token ends the sequence (EOS, a stop token, or a
  // completed stop string); `delta` then carries kStop and what matched.
  // The first min_tokens tokens end nothing (vLLM): the sampler does not
  // sample EOS or stop tokens there, and a stop string counts only when it
  // ends in a later token's text.
  bool push(std::int32_t token, SequenceDelta& delta);
  // The sequence ended for another reason (length, abort): flushes text
  // still held back and records the reason.
  void finish(FinishReason reason, SequenceDelta& delta);

  bool stopped() const { return stopped_; }

 private:
  void flush(SequenceDelta& delta);

  const SamplingOptions* sampling_;
  std::span<const std::int32_t> eos_token_ids_;
  tokenizer::IncrementalDetokenizer detokenizer_;
  tokenizer::StopMatcher stop_matcher_;
  bool stopped_ = false;
  int num_tokens_ = 0;  // pushed so far: min_tokens suspends every stop check until it passes min_tokens
};

}  // namespace pagedllm
