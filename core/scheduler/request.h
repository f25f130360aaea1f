#pragma once
// What a client asks for, as the scheduler sees it (token ids, not text), and
// the ways a request can end or be refused.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace pagedllm {

// Assigned by the engine; unique among requests the scheduler holds.
using RequestId = std::int64_t;

struct Request {
  RequestId id = -1;
  std::vector<std::int32_t> prompt_token_ids;
  // Output tokens per sequence; the scheduler finishes a sequence that reaches it.
  int max_tokens = 16;
  // Sequences sampled from the prompt (n > 1 forks them, sharing the prompt's blocks);
  // with beam_search, the beam width.
  int n = 1;
  // Beam search: the engine chooses each step's beams (Scheduler::update()'s BeamStep),
  // and the group runs, grows and is preempted as a unit: every live beam in the
  // same step or none, n sequences reserved throughout.
  bool beam_search = false;
  // Under SchedulingPolicy::kPriority: lower values are served first (vLLM's convention).
  int priority = 0;
  // Goes into every prefix-cache key: model / adapter id, optional cache salt.
  // Requests with different keys never share cached blocks.
  std::string cache_key;
  // Takes part in speculative decoding: gets draft tokens to verify and the
  // KV slots drafting needs (num_lookahead_tokens, num_draft_slots).
  bool speculative = true;
  // Prompt logprobs are wanted: every prompt position gets its logits row and
  // none is skipped through the prefix cache (vLLM recomputes them too).
  bool prompt_logprobs = false;
};

enum class FinishReason {
  kStop,     // EOS or a stop string (reported by the engine)
  kLength,   // max_tokens or max_model_len reached (detected by the scheduler)
  kAborted,  // client disconnect or cancellation
};

const char* to_string(FinishReason reason);

// A request that can never be served (too long for the model or the KV cache,
// malformed parameters). The engine maps it to HTTP 400; the message carries the numbers.
class RequestRejected : public std::invalid_argument {
 public:
  // `param` names the offending request field ("max_tokens") when one is to blame.
  RequestRejected(RequestId request, const std::string& reason, std::string param = {});
  RequestId request_id() const { return request_id_; }
  // The reason alone, without the request id: what a client is shown.
  const std::string& reason() const { return reason_; }
  const std::string& param() const { return param_; }

 private:
  RequestId request_id_;
  std::string reason_;
  std::string param_;
};

}  // namespace pagedllm
