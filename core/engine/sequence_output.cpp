#include "core/engine/sequence_output.h"

#include <algorithm>

namespace pagedllm {

SequenceOutput::SequenceOutput(const tokenizer::Tokenizer& tokenizer, const SamplingOptions& sampling,
                               std::span<const std::int32_t> prompt_token_ids,
                               std::span<const std::int32_t> eos_token_ids)
    : sampling_(&sampling),
      eos_token_ids_(eos_token_ids),
      detokenizer_(tokenizer, sampling.skip_special_tokens, prompt_token_ids),
      stop_matcher_(sampling.stop, sampling.include_stop_str_in_output) {}

bool SequenceOutput::push(std::int32_t token, SequenceDelta& delta) {
  if (stopped_) return true;
  delta.token_ids.push_back(token);
  if (++num_tokens_ <= sampling_->min_tokens) {
    delta.text += stop_matcher_.push_unchecked(detokenizer_.push(token));
    return false;
  }
  const auto contains = [token](std::span<const std::int32_t> ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  const bool is_stop_token = contains(sampling_->stop_token_ids);
  const bool is_eos = !sampling_->ignore_eos && contains(eos_token_ids_);
  if (is_stop_token || is_eos) {
    // The stopping token's own text is shown only for stop_token_ids with
    // include_stop_str_in_output (vLLM's behaviour); EOS never is.
    if (is_stop_token && sampling_->include_stop_str_in_output) {
      const tokenizer::StopMatch match = stop_matcher_.push(detokenizer_.push(token));
      delta.text += match.text;
    }
    flush(delta);
    stopped_ = true;
    delta.finish_reason = FinishReason::kStop;
    if (is_stop_token && !is_eos) delta.stop_token_id = token;
    return true;
  }
  const tokenizer::StopMatch match = stop_matcher_.push(detokenizer_.push(token));
  delta.text += match.text;
  if (match.stopped) {
    stopped_ = true;
    delta.finish_reason = FinishReason::kStop;
    delta.stop_string = sampling_->stop[*match.stop_index];
    return true;
  }
  return false;
}

void SequenceOutput::finish(FinishReason reason, SequenceDelta& delta) {
  if (stopped_) return;
  flush(delta);
  if (!stopped_) delta.finish_reason = reason;
  stopped_ = true;
}

// Text the detokenizer and the stop matcher still hold (an incomplete UTF-8
// sequence, a possible stop-string prefix) is final at the end of a sequence.
void SequenceOutput::flush(SequenceDelta& delta) {
  if (stop_matcher_.stopped()) return;
  const tokenizer::StopMatch match = stop_matcher_.push(detokenizer_.finish());
  delta.text += match.text;
  if (match.stopped) {
    stopped_ = true;
    delta.finish_reason = FinishReason::kStop;
    delta.stop_string = sampling_->stop[*match.stop_index];
    return;
  }
  delta.text += stop_matcher_.finish();
}

}  // namespace pagedllm
