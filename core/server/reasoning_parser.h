#pragma once
// Reasoning output (server.reasoning_parser, vLLM's names; docs/server.md "Reasoning"): a reasoning model
// writes its thinking between <think> and </think> before the answer; chat responses carry that part as
// `reasoning_content` and the rest as `content`, streamed as deltas of each. The split is by text, so it
// holds for any tokenizer, and it is made incrementally: a piece that may be the start of a tag is held
// back until the next piece shows what it is, or the end.
//   deepseek_r1  everything before the first </think> is reasoning (DeepSeek-R1's distills: their
//                template opens <think> in the prompt, so the output may start inside it); a leading
//                <think> is dropped. Without a </think> the whole output is reasoning.
//   qwen3        reasoning only when the output starts with <think> (Qwen3 with thinking on), up to the
//                first </think>; an output that does not start with it is all content (thinking off).

#include <optional>
#include <string>
#include <string_view>

namespace pagedllm::server {

enum class ReasoningFormat { kNone, kDeepSeekR1, kQwen3 };

// "none", "deepseek_r1", "qwen3"; nullopt for another name.
std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name);

class ReasoningSplitter {
 public:
  struct Parts {
    std::string reasoning, content;
  };

  explicit ReasoningSplitter(ReasoningFormat format);

  // The next piece of the sequence's text: what of it (and of what was held back) is now known to be
  // reasoning or content.
  Parts add(std::string_view text);
  // The end of the sequence: what was held back, as whichever part it was in.
  Parts finish();

 private:
  enum class State { kUndecided, kReasoning, kContent };
  // Moves held_ out as far as it is settled.
  void settle(Parts& parts, bool at_end);

  State state_;
  bool may_open_ = false;  // a leading <think> is still to be dropped (or, undecided, to be seen)
  std::string held_;
};

}  // namespace pagedllm::server
