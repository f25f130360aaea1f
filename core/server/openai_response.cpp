#include "core/server/openai_response.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <random>

namespace pagedllm::server {

namespace {

using nlohmann::json;

// Logprobs as JSON numbers: the float's shortest decimal form (so -0.1f is
// -0.1, not -0.10000000149011612); -inf and NaN become -9999 as in vLLM.
double logprob_number(float value) {
  if (!std::isfinite(value)) return -9999.0;
  value = std::max(value, -9999.0f);
  char text[32];
  const auto result = std::to_chars(text, text + sizeof(text) - 1, value);
  *result.ptr = '\0';
  return std::strtod(text, nullptr);
}

// Unicode code points in valid UTF-8 text (what Python's len() counts).
std::size_t code_points(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// A tool call's id: "call_" and 24 random letters and digits; Mistral's templates take exactly 9 letters
// and digits (vLLM's mistral parser makes them so).
std::string tool_call_id(ToolCallFormat format) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 random{std::random_device{}()};
  std::uniform_int_distribution<std::size_t> pick(0, kAlphabet.size() - 1);
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0; i < (mistral ? 9 : 24); ++i) id += kAlphabet[pick(random)];
  return id;
}

json utf8_bytes(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

}  // namespace

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

json finish_reason_json(std::optional<FinishReason> reason) {
  if (!reason) return nullptr;
  return to_string(*reason);
}

ResponseBuilder::ResponseBuilder(const GenerationPlan& plan, const tokenizer::Tokenizer& tokenizer, std::string id,
                                 std::int64_t created, ReasoningFormat reasoning)
    : plan_(plan),
      tokenizer_(tokenizer),
      id_(std::move(id)),
      created_(created),
      reasoning_(plan.kind == ApiKind::kChat ? reasoning : ReasoningFormat::kNone),
      choices_(static_cast<std::size_t>(plan.num_sequences())),
      usage_(plan.prompts.size()) {}

std::string ResponseBuilder::token_text(std::int32_t id) const {
  const std::int32_t ids[] = {id};
  return tokenizer_.decode(ids, /*skip_special_tokens=*/false);
}

json ResponseBuilder::stop_reason(const SequenceDelta& delta) const {
  if (delta.finish_reason != FinishReason::kStop) return nullptr;
  if (!delta.stop_string.empty()) return delta.stop_string;
  if (delta.stop_token_id >= 0) return delta.stop_token_id;
  return nullptr;  // EOS
}

json ResponseBuilder::tool_call_deltas(Choice& choice, std::vector<ToolCallPiece>&& pieces) const {
  json deltas = json::array();
  for (ToolCallPiece& piece : pieces) {
    if (piece.opens) {
      choice.dropping_call = !plan_.parallel_tool_calls && choice.num_tool_calls > 0;
      if (choice.dropping_call) continue;
      deltas.push_back({{"index", choice.num_tool_calls++},
                        {"id", tool_call_id(plan_.tool_call_format)},
                        {"type", "function"},
                        {"function", {{"name", std::move(piece.name)}, {"arguments", ""}}}});
    }
    if (choice.dropping_call || piece.arguments.empty()) continue;
    // The last entry, if any, is this call's: its opening (arguments stay a chunk of their own) or its
    // arguments so far.
    if (!deltas.empty() && !deltas.back().contains("id")) {
      deltas.back()["function"]["arguments"].get_ref<std::string&>() += piece.arguments;
    } else {
      deltas.push_back({{"index", choice.num_tool_calls - 1}, {"function", {{"arguments", std::move(piece.arguments)}}}});
    }
  }
  return deltas;
}

json ResponseBuilder::choice_finish_reason(const Choice& choice) {
  if (choice.num_tool_calls > 0 && choice.finish_reason == FinishReason::kStop) return "tool_calls";
  return finish_reason_json(choice.finish_reason);
}

json ResponseBuilder::prompt_logprobs_json(const std::vector<TokenLogprob>& prompt_logprobs) const {
  json entries = json::array({nullptr});
  for (const TokenLogprob& token : prompt_logprobs) {
    json entry = json::object();
    entry[std::to_string(token.token_id)] = {{"logprob", logprob_number(token.logprob)},
                                             {"decoded_token", token_text(token.token_id)}};
    for (const auto& [id, logprob] : token.top) {
      if (id == token.token_id) continue;
      entry[std::to_string(id)] = {{"logprob", logprob_number(logprob)}, {"decoded_token", token_text(id)}};
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

json ResponseBuilder::logprobs_json(Choice& choice, const SequenceDelta& delta, const PromptInput* with_prompt,
                                    const std::vector<TokenLogprob>& prompt_logprobs) const {
  if (plan_.kind == ApiKind::kChat) {
    json content = json::array();
    for (std::size_t i = 0; i < delta.token_ids.size(); ++i) {
      const std::string token = token_text(delta.token_ids[i]);
      json entry = {{"token", token}, {"logprob", nullptr}, {"bytes", utf8_bytes(token)}, {"top_logprobs", json::array()}};
      if (i < delta.logprobs.size()) {
        entry["logprob"] = logprob_number(delta.logprobs[i].logprob);
        for (const auto& [id, logprob] : delta.logprobs[i].top) {
          const std::string alt = token_text(id);
          entry["top_logprobs"].push_back({{"token", alt}, {"logprob", logprob_number(logprob)}, {"bytes", utf8_bytes(alt)}});
        }
      }
      content.push_back(std::move(entry));
    }
    return {{"content", std::move(content)}};
  }
  // The legacy completions shape: parallel arrays, text_offset into the choice's text.
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(), offsets = json::array();
  auto add = [&](std::string token, json logprob, json top) {
    offsets.push_back(choice.text_offset);
    choice.text_offset += code_points(token);
    tokens.push_back(std::move(token));
    token_logprobs.push_back(std::move(logprob));
    top_logprobs.push_back(std::move(top));
  };
  if (with_prompt) {
    // Token 0 has no logprob (OpenAI: null); token i's is prompt_logprobs[i - 1].
    const std::size_t wanted = static_cast<std::size_t>(plan_.logprobs.value_or(0));
    for (std::size_t i = 0; i < with_prompt->token_ids.size(); ++i) {
      const std::string token = token_text(with_prompt->token_ids[i]);
      if (i == 0 || i > prompt_logprobs.size()) {
        add(token, nullptr, nullptr);
        continue;
      }
      const TokenLogprob& scored = prompt_logprobs[i - 1];
      json top = json::object();
      for (std::size_t k = 0; k < scored.top.size() && k < wanted; ++k) {
        top[token_text(scored.top[k].first)] = logprob_number(scored.top[k].second);
      }
      add(token, logprob_number(scored.logprob), std::move(top));
    }
  }
  for (std::size_t i = 0; i < delta.token_ids.size(); ++i) {
    if (i >= delta.logprobs.size()) {
      add(token_text(delta.token_ids[i]), nullptr, nullptr);
      continue;
    }
    json top = json::object();
    for (const auto& [id, logprob] : delta.logprobs[i].top) top[token_text(id)] = logprob_number(logprob);
    add(token_text(delta.token_ids[i]), logprob_number(delta.logprobs[i].logprob), std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(offsets)}};
}

void ResponseBuilder::append_logprobs(json& into, json&& more) const {
  if (into.is_null()) {
    into = std::move(more);
    return;
  }
  for (auto& [key, values] : more.items()) {
    for (auto& value : values) into[key].push_back(std::move(value));
  }
}

json ResponseBuilder::chunk(json choice) const {
  json chunk = {{"id", id_},
                {"object", plan_.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion"},
                {"created", created_},
                {"model", plan_.model},
                {"choices", json::array({std::move(choice)})}};
  // OpenAI: with include_usage every chunk has "usage", null until the last.
  if (plan_.include_usage) chunk["usage"] = nullptr;
  return chunk;
}

std::string ResponseBuilder::add(std::size_t prompt_index, const RequestOutput& output) {
  PromptUsage& usage = usage_.at(prompt_index);
  usage.prompt_tokens = output.num_prompt_tokens;
  usage.cached_prompt_tokens = output.num_cached_prompt_tokens;
  usage.generated_tokens = output.num_generated_tokens;

  std::string events;
  for (const SequenceDelta& delta : output.sequences) {
    // Streams have best_of == n: a sequence's index is its choice's.
    const std::size_t index =
        prompt_index * static_cast<std::size_t>(plan_.best_of) + static_cast<std::size_t>(delta.index);
    Choice& choice = choices_.at(index);
    for (const TokenLogprob& token : delta.logprobs) choice.cumulative_logprob += token.logprob;
    const bool first = !choice.started;
    const PromptInput* echoed = plan_.echo && first ? &plan_.prompts[prompt_index] : nullptr;
    choice.started = true;
    std::string text = echoed ? echoed->text + delta.text : delta.text;
    std::string reasoning;
    if (reasoning_ != ReasoningFormat::kNone) {
      if (!choice.splitter) choice.splitter.emplace(reasoning_);
      ReasoningSplitter::Parts parts = choice.splitter->add(text);
      if (delta.finish_reason) {
        ReasoningSplitter::Parts rest = choice.splitter->finish();
        parts.reasoning += rest.reasoning;
        parts.content += rest.content;
      }
      reasoning = std::move(parts.reasoning);
      text = std::move(parts.content);
    }
    json tool_calls = json::array();
    if (plan_.tool_call_format != ToolCallFormat::kNone) {
      if (!choice.tool_parser) {
        choice.tool_parser.emplace(plan_.tool_call_format, plan_.tool_calls_forced, plan_.tool_definitions);
      }
      ToolCallParser::Parts parts = choice.tool_parser->add(text);
      if (delta.finish_reason) {
        ToolCallParser::Parts rest = choice.tool_parser->finish();
        parts.content += rest.content;
        std::move(rest.calls.begin(), rest.calls.end(), std::back_inserter(parts.calls));
      }
      text = std::move(parts.content);
      tool_calls = tool_call_deltas(choice, std::move(parts.calls));
    }
    if (delta.finish_reason) {
      choice.finish_reason = delta.finish_reason;
      choice.stop_reason = stop_reason(delta);
    }
    json logprobs = plan_.logprobs ? logprobs_json(choice, delta, echoed, output.prompt_logprobs) : json(nullptr);
    // The engine sends prompt logprobs with the output carrying every sequence's first tokens.
    const bool sends_prompt_logprobs = plan_.prompt_logprobs && first;
    if (sends_prompt_logprobs) choice.prompt_logprobs = prompt_logprobs_json(output.prompt_logprobs);
    if (!plan_.stream) {
      choice.text += text;
      choice.reasoning += reasoning;
      for (json& entry : tool_calls) {
        if (entry.contains("id")) {
          entry.erase("index");
          choice.tool_calls.push_back(std::move(entry));
        } else {
          choice.tool_calls[entry["index"].get<std::size_t>()]["function"]["arguments"].get_ref<std::string&>() +=
              entry["function"]["arguments"].get_ref<const std::string&>();
        }
      }
      if (plan_.return_token_ids) {
        choice.token_ids.insert(choice.token_ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      }
      if (plan_.logprobs) append_logprobs(choice.logprobs, std::move(logprobs));
      continue;
    }
    const bool has_tokens = !delta.token_ids.empty() || echoed;
    const bool sends_token_ids = plan_.return_token_ids && has_tokens;
    if (text.empty() && reasoning.empty() && tool_calls.empty() && !delta.finish_reason &&
        !(plan_.logprobs && has_tokens) && !sends_prompt_logprobs && !sends_token_ids) {
      continue;
    }
    // Chat: the text's delta, then each tool_calls entry (a call's id, type and name, or more of its
    // arguments), one chunk each; the first carries the tokens' logprobs and ids, the last the finish reason.
    std::vector<json> deltas;
    if (plan_.kind == ApiKind::kChat) {
      json message = json::object();
      if (!reasoning.empty()) message["reasoning_content"] = reasoning;
      if (!text.empty()) message["content"] = text;
      if (!message.empty() || tool_calls.empty()) deltas.push_back(std::move(message));
      for (json& entry : tool_calls) deltas.push_back({{"tool_calls", json::array({std::move(entry)})}});
    } else {
      deltas.push_back(nullptr);
    }
    for (std::size_t d = 0; d < deltas.size(); ++d) {
      const bool opening = d == 0, closing = d + 1 == deltas.size();
      json c = {{"index", index}};
      if (plan_.kind == ApiKind::kChat) {
        c["delta"] = std::move(deltas[d]);
      } else {
        c["text"] = text;
      }
      c["logprobs"] = opening ? std::move(logprobs) : json(nullptr);
      c["finish_reason"] = closing ? choice_finish_reason(choice) : json(nullptr);
      c["stop_reason"] = closing && delta.finish_reason ? choice.stop_reason : json(nullptr);
      if (opening && sends_prompt_logprobs) c["prompt_logprobs"] = choice.prompt_logprobs;
      if (plan_.return_token_ids) {
        c["prompt_token_ids"] = opening && first ? json(plan_.prompts[prompt_index].token_ids) : json(nullptr);
        c["token_ids"] = opening ? json(delta.token_ids) : json::array();
      }
      events += sse_event(chunk(std::move(c)));
    }
  }
  return events;
}

std::string ResponseBuilder::stream_start() const {
  std::string events;
  if (plan_.kind != ApiKind::kChat) return events;
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    events += sse_event(chunk({{"index", i},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}));
  }
  return events;
}

json ResponseBuilder::usage() const {
  std::int64_t prompt = 0, cached = 0, generated = 0;
  for (const PromptUsage& u : usage_) {
    prompt += u.prompt_tokens;
    cached += u.cached_prompt_tokens;
    generated += u.generated_tokens;
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", generated},
          {"total_tokens", prompt + generated},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

std::string ResponseBuilder::stream_end() const {
  std::string events;
  if (plan_.include_usage) {
    json last = chunk(nullptr);
    last["choices"] = json::array();
    last["usage"] = usage();
    events += sse_event(last);
  }
  events += kSseDone;
  return events;
}

std::string ResponseBuilder::response_body() const {
  const bool chat = plan_.kind == ApiKind::kChat;
  json choices = json::array();
  const auto n = static_cast<std::size_t>(plan_.sampling.n);
  const auto best_of = static_cast<std::size_t>(plan_.best_of);
  for (std::size_t i = 0; i < static_cast<std::size_t>(plan_.num_choices()); ++i) {
    const std::size_t prompt = i / n;
    std::vector<std::size_t> ranked(best_of);
    for (std::size_t s = 0; s < best_of; ++s) ranked[s] = prompt * best_of + s;
    if (best_of > n) {
      // vLLM's ranking: highest cumulative logprob first, ties by sequence index.
      std::stable_sort(ranked.begin(), ranked.end(), [&](std::size_t a, std::size_t b) {
        return choices_[a].cumulative_logprob > choices_[b].cumulative_logprob;
      });
    }
    const Choice& choice = choices_[ranked[i % n]];
    json c = {{"index", i}};
    if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", choice.text}};
      if (!choice.tool_calls.empty()) {
        // OpenAI: a message that only calls has null content.
        if (choice.text.empty()) c["message"]["content"] = nullptr;
        c["message"]["tool_calls"] = choice.tool_calls;
      }
      if (reasoning_ != ReasoningFormat::kNone) {
        c["message"]["reasoning_content"] = choice.reasoning.empty() ? json(nullptr) : json(choice.reasoning);
      }
    } else {
      c["text"] = choice.text;
    }
    c["logprobs"] = choice.logprobs;
    c["finish_reason"] = choice_finish_reason(choice);
    c["stop_reason"] = choice.stop_reason;
    if (plan_.prompt_logprobs) c["prompt_logprobs"] = choice.prompt_logprobs;
    if (plan_.return_token_ids) {
      c["prompt_token_ids"] = plan_.prompts[prompt].token_ids;
      c["token_ids"] = choice.token_ids;
    }
    choices.push_back(std::move(c));
  }
  return dump_json({{"id", id_},
                    {"object", chat ? "chat.completion" : "text_completion"},
                    {"created", created_},
                    {"model", plan_.model},
                    {"choices", std::move(choices)},
                    {"usage", usage()}});
}

}  // namespace pagedllm::server
