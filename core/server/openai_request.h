#pragma once
// The OpenAI request bodies of /v1/completions and /v1/chat/completions,
// parsed, validated and tokenized into what the engine takes: one
// GenerateRequest per prompt. No sockets here: this is unit-tested on its own.
//
// Unknown fields are ignored, as OpenAI does; a known field of the wrong type
// or out of its range is a 400 naming it in `param`. null means "unset".

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/server/tool_call_parser.h"
#include "core/server/tool_request.h"

namespace pagedllm::server {

enum class ApiKind { kCompletion, kChat };

struct PromptInput {
  std::vector<std::int32_t> token_ids;
  // The prompt as text (decoded when it was given as ids): what echo prepends.
  std::string text;
  // Output tokens for this prompt (the request's max_tokens, or the endpoint's
  // default fitted into what the context leaves); unset = up to the context limit.
  std::optional<int> max_tokens;
};

struct GenerationPlan {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;                 // the served name, as responses report it
  std::vector<PromptInput> prompts;  // one engine request each; choices are prompt-major
  SamplingOptions sampling;          // shared by every prompt (max_tokens: see PromptInput)
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt text starts each choice
  // vLLM's return_token_ids: each choice carries its prompt's token ids (prompt_token_ids, streamed with the
  // first chunk) and its generated ones (token_ids, streamed with the chunk that brings them); a streamed token
  // is then sent even while its text is held back (part of a character, or no text at all), so a client sees
  // every token when it arrives.
  bool return_token_ids = false;
  // vLLM's prompt_logprobs (completions): each choice carries the prompt tokens'
  // logprobs with this many alternatives (the first token's entry null).
  std::optional<int> prompt_logprobs;
  // Logprobs were asked: per token, the sampled token's logprob and this many
  // alternatives (completions "logprobs": N; chat "logprobs": true + "top_logprobs": N).
  std::optional<int> logprobs;
  // "speculative_decoding": false opts out of speculative decoding (default on
  // when the server has a speculator).
  bool speculative = true;
  // Completions' best_of: sequences generated per prompt (>= sampling.n, the
  // choices returned per prompt: the best by cumulative logprob). Never
  // streamed when above n. With beam search (sampling.beam_search, whose width
  // best_of is) n: the engine returns the n best hypotheses itself.
  int best_of = 1;
  // response_format / structured_outputs / guided_* (structured_output_request.h).
  std::optional<OutputConstraint> constraint;
  // Chat with tools offered, tool_choice not "none" and a server.tool_call_parser: each choice's content is
  // parsed into tool_calls in this format (tool_call_parser.h); kNone: the output is not parsed.
  ToolCallFormat tool_call_format = ToolCallFormat::kNone;
  bool tool_calls_forced = false;   // tool_choice "required" or a named function: constrained to calls
  bool parallel_tool_calls = true;  // false: a choice returns its first call only
  // The offered tools (ChatTools::definitions): their schemas type glm45's and qwen3_coder's argument values.
  nlohmann::ordered_json tool_definitions = nullptr;

  int num_choices() const { return static_cast<int>(prompts.size()) * sampling.n; }
  // Sequences generated for all prompts.
  int num_sequences() const { return static_cast<int>(prompts.size()) * best_of; }
};

// The engine request for prompt `index` of `plan`.
GenerateRequest make_engine_request(const GenerationPlan& plan, std::size_t index);

// Parses a request body. Throws ApiError: 400 for malformed JSON, wrong types,
// values out of range, prompts longer than the context; 404 model_not_found.
// `tool_parsing`: how chat output is parsed into tool calls (server.tool_call_parser, or the template's).
GenerationPlan parse_generation_request(ApiKind kind, std::string_view body, const Engine& engine,
                                        const ToolCallParsing& tool_parsing = {});

// The JSON object of a request body, or a 400.
nlohmann::json parse_json_object(std::string_view body);

// The request body parsed keeping its keys' order: what reaches a chat template as JSON (tool calls'
// arguments, tools' schemas) keeps the client's order, as it does through transformers.
nlohmann::ordered_json parse_ordered_json(std::string_view body);

// Chat messages (the "messages" field) as the chat template takes them, as vLLM hands them to it:
// role and content (text parts joined by newlines; null is ""), an assistant's tool_calls with each
// function.arguments JSON string parsed into its object, a tool message's tool_call_id, a name.
std::vector<tokenizer::ChatMessage> parse_chat_messages(const nlohmann::json& request,
                                                        const nlohmann::ordered_json& ordered_request);

// Renders `messages` (and `tools`: ChatTools::definitions) with the model's chat template and tokenizes
// the result (special tokens written by the template are parsed as such). A model with no chat template,
// or a conversation its format cannot express, is a 400.
std::vector<std::int32_t> render_chat_prompt(const Engine& engine, const std::vector<tokenizer::ChatMessage>& messages,
                                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                             bool add_special_tokens = false);

// An array of token ids of this model (`param` names the field in errors).
std::vector<std::int32_t> parse_token_ids(const nlohmann::json& value, const std::string& param, const Engine& engine);

// 404 model_not_found unless `request`'s "model" is absent, null or the served name.
void check_model(const nlohmann::json& request, const Engine& engine);

}  // namespace pagedllm::server
