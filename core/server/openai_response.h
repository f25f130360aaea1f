#pragma once
// Engine outputs -> OpenAI response JSON: the whole response, or SSE chunks
// ("data: {json}\n\n" ... "data: [DONE]\n\n") as outputs arrive. No sockets
// here: this is unit-tested on its own.
//
// Choices are numbered prompt-major: prompt p's sequence s is choice p * n + s.
// With best_of > n (never streamed) each prompt's best_of sequences are ranked
// by cumulative logprob of their sampled tokens and the n best, best first,
// become its choices.
// Usage counts each prompt's tokens once and every choice's generated tokens.
// With echo and logprobs, the prompt's tokens carry their logprobs (the first
// one null, as in OpenAI's API).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/server/openai_request.h"
#include "core/server/reasoning_parser.h"
#include "core/server/tool_call_parser.h"

namespace pagedllm::server {

class ResponseBuilder {
 public:
  // `plan` and `tokenizer` must outlive the builder. `id` is the response id
  // ("cmpl-…", "chatcmpl-…"), `created` its Unix time. `reasoning`: how a chat
  // choice's text splits into reasoning_content and content (reasoning_parser.h).
  ResponseBuilder(const GenerationPlan& plan, const tokenizer::Tokenizer& tokenizer, std::string id,
                  std::int64_t created, ReasoningFormat reasoning = ReasoningFormat::kNone);

  // Records one engine output of prompt `prompt_index`. Streaming: returns the
  // SSE events it makes (possibly none); otherwise accumulates and returns "".
  std::string add(std::size_t prompt_index, const RequestOutput& output);

  // --- Streaming ---
  // Events sent before any output (chat: each choice's assistant role).
  std::string stream_start() const;
  // The usage chunk when asked, then [DONE].
  std::string stream_end() const;

  // --- Not streaming ---
  // The response body, once every prompt's output finished.
  std::string response_body() const;

  nlohmann::json usage() const;

 private:
  // One generated sequence: a choice, or with best_of > n a candidate for one.
  struct Choice {
    std::string text;  // not streaming: all of it (after the echoed prompt); the content when split
    std::string reasoning;  // not streaming, with a reasoning format: the reasoning_content
    std::optional<ReasoningSplitter> splitter;  // chat with a reasoning format
    std::optional<ToolCallParser> tool_parser;  // chat with plan.tool_call_format
    int num_tool_calls = 0;                     // calls returned so far (streamed, or below)
    bool dropping_call = false;  // parallel_tool_calls false: the pieces of a call past the first are dropped
    nlohmann::json tool_calls = nlohmann::json::array();  // not streaming: the message's tool_calls
    double cumulative_logprob = 0;  // of the sampled tokens (best_of's ranking)
    bool started = false;
    std::size_t text_offset = 0;  // completions logprobs: code points before the next token
    nlohmann::json logprobs;      // not streaming: accumulated
    std::optional<FinishReason> finish_reason;
    nlohmann::json stop_reason;  // null, a stop string or a stop token id
    nlohmann::json prompt_logprobs;  // with plan.prompt_logprobs
    std::vector<std::int32_t> token_ids;  // not streaming, with plan.return_token_ids: all of them
  };
  struct PromptUsage {
    int prompt_tokens = 0;
    int cached_prompt_tokens = 0;
    int generated_tokens = 0;
  };

  // The logprobs JSON for `delta`'s tokens (with the echoed prompt first when
  // `with_prompt`), in the endpoint's shape; advances the choice's text offset.
  nlohmann::json logprobs_json(Choice& choice, const SequenceDelta& delta, const PromptInput* with_prompt,
                               const std::vector<TokenLogprob>& prompt_logprobs) const;
  // vLLM's choice field: null for the first prompt token, then {"<id>": {"logprob", "decoded_token"}}
  // for each prompt token and its alternatives.
  nlohmann::json prompt_logprobs_json(const std::vector<TokenLogprob>& prompt_logprobs) const;
  void append_logprobs(nlohmann::json& into, nlohmann::json&& more) const;
  nlohmann::json chunk(nlohmann::json choice) const;
  nlohmann::json stop_reason(const SequenceDelta& delta) const;
  // The pieces of calls the choice returns (parallel_tool_calls false: its first call's only), as OpenAI's
  // delta.tool_calls entries: a call's index, fresh id, type and name (arguments ""), then its arguments'
  // pieces, consecutive ones joined. Not streaming, the same entries build the message's tool_calls.
  nlohmann::json tool_call_deltas(Choice& choice, std::vector<ToolCallPiece>&& pieces) const;
  // finish_reason_json, but "tool_calls" for a choice that stopped after calling.
  static nlohmann::json choice_finish_reason(const Choice& choice);
  std::string token_text(std::int32_t id) const;

  const GenerationPlan& plan_;
  const tokenizer::Tokenizer& tokenizer_;
  std::string id_;
  std::int64_t created_;
  ReasoningFormat reasoning_;
  std::vector<Choice> choices_;
  std::vector<PromptUsage> usage_;
};

// "data: {json}\n\n"
std::string sse_event(const nlohmann::json& value);
// The stream's terminator.
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
// "stop" / "length"; null while running. kAborted never reaches a response.
nlohmann::json finish_reason_json(std::optional<FinishReason> reason);
// JSON text; invalid UTF-8 (never expected) is replaced rather than thrown on.
std::string dump_json(const nlohmann::json& value);

}  // namespace pagedllm::server
