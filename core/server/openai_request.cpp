#include "core/server/openai_request.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/server/api_error.h"
#include "core/server/request_fields.h"
#include "core/server/structured_output_request.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::server {

namespace {

using nlohmann::json;

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();
// OpenAI's default max_tokens for (legacy) completions; chat has none.
constexpr int kCompletionDefaultMaxTokens = 16;

std::vector<std::string> get_stop_strings(const json& request) {
  const json* v = field(request, "stop");
  if (!v) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (std::size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) wrong_type(fmt::format("stop[{}]", i), "a string", (*v)[i]);
      stop.push_back((*v)[i].get<std::string>());
    }
  } else {
    wrong_type("stop", "a string or an array of strings", *v);
  }
  for (const auto& s : stop) {
    if (s.empty()) throw invalid_request("'stop' strings must not be empty", "stop");
  }
  return stop;
}

std::vector<std::int32_t> get_token_ids(const json& value, const std::string& param, std::int64_t vocab_size) {
  if (!value.is_array()) wrong_type(param, "an array of token ids", value);
  std::vector<std::int32_t> ids;
  ids.reserve(value.size());
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& id = value[i];
    const std::string where = fmt::format("{}[{}]", param, i);
    if (!id.is_number_integer()) wrong_type(where, "a token id (an integer)", id);
    if (id.is_number_unsigned() ? id.get<std::uint64_t>() >= static_cast<std::uint64_t>(vocab_size)
                                : (id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= vocab_size)) {
      throw invalid_request(fmt::format("'{}' is {}, not a token id of this model (0 to {})", where, id.dump(),
                                        vocab_size - 1),
                            param);
    }
    ids.push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
  }
  return ids;
}

// OpenAI's logit_bias: {"<token id>": bias in [-100, 100]}, at most kMaxLogitBias entries.
std::vector<std::pair<std::int32_t, float>> get_logit_bias(const json& request, std::int64_t vocab) {
  constexpr std::size_t kMaxLogitBias = 300;
  const json* bias = field(request, "logit_bias");
  if (!bias) return {};
  if (!bias->is_object()) wrong_type("logit_bias", "an object mapping token ids to biases", *bias);
  if (bias->size() > kMaxLogitBias) {
    throw invalid_request(fmt::format("'logit_bias' may hold at most {} tokens, got {}", kMaxLogitBias, bias->size()),
                          "logit_bias");
  }
  std::vector<std::pair<std::int32_t, float>> out;
  for (const auto& [key, value] : bias->items()) {
    std::int64_t id = -1;
    const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (digits) id = std::stoll(key);
    if (id < 0 || id >= vocab) {
      throw invalid_request(fmt::format("'logit_bias' key \"{}\" is not a token id of this model (0 to {})", key,
                                        vocab - 1),
                            "logit_bias");
    }
    if (!value.is_number()) wrong_type(fmt::format("logit_bias[\"{}\"]", key), "a number", value);
    const double v = value.get<double>();
    if (!(v >= -100.0 && v <= 100.0)) {
      throw invalid_request(fmt::format("'logit_bias' values must be between -100 and 100, got {} for token {}",
                                        value.dump(), key),
                            "logit_bias");
    }
    const auto duplicate = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == id; });
    if (duplicate != out.end()) {
      throw invalid_request(fmt::format("'logit_bias' names token {} twice (as \"{}\" and another key)", id, key),
                            "logit_bias");
    }
    out.emplace_back(static_cast<std::int32_t>(id), static_cast<float>(v));
  }
  return out;
}

std::int64_t vocab_size(const Engine& engine) {
  const int model_vocab = engine.model().vocab_size;
  return model_vocab > 0 ? model_vocab : static_cast<std::int64_t>(engine.tokenizer().vocab_size());
}

// "prompt": a string, an array of token ids, or a batch (an array of either).
std::vector<PromptInput> parse_prompts(const json& request, const Engine& engine) {
  const json* p = field(request, "prompt");
  if (!p) throw invalid_request("'prompt' is required", "prompt");
  const tokenizer::Tokenizer& tok = engine.tokenizer();
  const std::int64_t vocab = vocab_size(engine);
  auto from_text = [&](const std::string& text) {
    try {
      return PromptInput{tok.encode(text, /*add_special_tokens=*/true), text, std::nullopt};
    } catch (const tokenizer::TokenizerError& e) {
      throw invalid_request(fmt::format("the prompt cannot be tokenized: {}", e.what()), "prompt");
    }
  };
  auto from_ids = [&](const json& ids, const std::string& param) {
    PromptInput prompt;
    prompt.token_ids = get_token_ids(ids, param, vocab);
    prompt.text = tok.decode(prompt.token_ids, /*skip_special_tokens=*/true);
    return prompt;
  };
  const char* kShapes = "a string, an array of token ids, or an array of strings or of token id arrays";
  if (p->is_string()) return {from_text(p->get<std::string>())};
  if (!p->is_array()) wrong_type("prompt", kShapes, *p);
  if (p->empty()) throw invalid_request("'prompt' must not be empty", "prompt");
  if ((*p)[0].is_number_integer()) return {from_ids(*p, "prompt")};
  std::vector<PromptInput> prompts;
  for (std::size_t i = 0; i < p->size(); ++i) {
    const json& item = (*p)[i];
    if (item.is_string()) {
      prompts.push_back(from_text(item.get<std::string>()));
    } else if (item.is_array()) {
      prompts.push_back(from_ids(item, fmt::format("prompt[{}]", i)));
    } else {
      wrong_type(fmt::format("prompt[{}]", i), "a string or an array of token ids", item);
    }
  }
  return prompts;
}

// Fields whose meaning this server does not implement: refused rather than
// silently ignored, since ignoring them would change what the client gets.
void reject_unsupported(const json& request, ApiKind kind, bool beam_search) {
  if (kind == ApiKind::kCompletion && field(request, "suffix")) {
    throw invalid_request("'suffix' is not supported", "suffix");
  }
  if (kind == ApiKind::kChat) {
    if (const json* best_of = field(request, "best_of");
        !beam_search && best_of && !(best_of->is_number_integer() && *best_of == 1)) {
      throw invalid_request("'best_of' is a /v1/completions field; chat completions take only 1 (or the beam "
                            "width with 'use_beam_search')",
                            "best_of");
    }
  }
}

std::string context_error(int max_len, int prompt_len, std::optional<int> max_tokens, const char* what) {
  if (!max_tokens) {
    return fmt::format("This model's maximum context length is {} tokens. However, your {} has {} tokens, which "
                       "leaves no room for the completion. Please reduce the length of the {}.",
                       max_len, what, prompt_len, what);
  }
  return fmt::format("This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the "
                     "{}, {} in the completion). Please reduce the length of the {} or completion.",
                     max_len, static_cast<std::int64_t>(prompt_len) + *max_tokens, prompt_len, what, *max_tokens,
                     what);
}

// vLLM's beam search fields: use_beam_search, best_of (the width), length_penalty and
// early_stopping (true, false or "never"); outside beam search the last two must keep
// their defaults, as vLLM requires.
std::optional<BeamSearchOptions> get_beam_search(const json& request, bool beam_search, int n,
                                                 std::optional<int> best_of) {
  const std::optional<float> length_penalty = get_number(request, "length_penalty", -std::numeric_limits<float>::max(),
                                                         std::numeric_limits<float>::max());
  BeamSearchOptions::EarlyStopping early_stopping = BeamSearchOptions::EarlyStopping::kFalse;
  if (const json* v = field(request, "early_stopping")) {
    if (v->is_boolean()) {
      early_stopping = v->get<bool>() ? BeamSearchOptions::EarlyStopping::kTrue
                                      : BeamSearchOptions::EarlyStopping::kFalse;
    } else if (v->is_string() && *v == "never") {
      early_stopping = BeamSearchOptions::EarlyStopping::kNever;
    } else {
      wrong_type("early_stopping", "true, false or \"never\"", *v);
    }
  }
  if (!beam_search) {
    if (length_penalty && *length_penalty != 1.0f) {
      throw invalid_request("'length_penalty' is only used by beam search ('use_beam_search': true); without it, "
                            "it must be 1.0 (the default)",
                            "length_penalty");
    }
    if (early_stopping != BeamSearchOptions::EarlyStopping::kFalse) {
      throw invalid_request("'early_stopping' is only used by beam search ('use_beam_search': true); without it, "
                            "it must be false (the default)",
                            "early_stopping");
    }
    return std::nullopt;
  }
  BeamSearchOptions options;
  options.beam_width = best_of.value_or(n);
  if (options.beam_width < n) {
    throw invalid_request(fmt::format("'best_of' must be greater than or equal to 'n' ({}), got {}", n,
                                      options.beam_width),
                          "best_of");
  }
  options.length_penalty = length_penalty.value_or(1.0f);
  options.early_stopping = early_stopping;
  return options;
}

// How the chat output is parsed into tool calls, and for tool_choice required or a named function the
// constraint that makes it one. tool_choice "none" still renders the tools (as vLLM does by default) but
// leaves the output unparsed.
void plan_tool_calls(GenerationPlan& plan, const ChatTools& tools, const ToolCallParsing& parsing,
                     bool skip_special_tokens_given) {
  if (!tools.offered() || tools.choice == ToolChoice::kNone) return;
  if (!parsing.missing.empty()) {
    throw invalid_request(fmt::format("'tools' needs the model's tool-call format, and {}", parsing.missing), "tools");
  }
  const ToolCallFormat parser = parsing.format;
  plan.parallel_tool_calls = tools.parallel;
  if (tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed) {
    if (plan.constraint) {
      throw invalid_request(fmt::format("'tool_choice' {} constrains the output to tool calls, and '{}' "
                                        "constrains it too; give one",
                                        tools.choice == ToolChoice::kRequired ? "\"required\"" : "naming a function",
                                        plan.constraint->field),
                            "tool_choice");
    }
    plan.constraint = tool_call_constraint(tools, parser);  // a 400 when no parser is configured
    plan.tool_calls_forced = true;
  }
  plan.tool_call_format = parser;
  plan.tool_definitions = tools.definitions;
  // Mistral's calls start with [TOOL_CALLS], GLM's tags (<tool_call>, <arg_key>, ...) are special tokens too:
  // kept in the text unless the client says otherwise (vLLM's mistral and glm45 parsers do the same).
  const bool special_markers = parser == ToolCallFormat::kMistral || parser == ToolCallFormat::kGlm45;
  if (special_markers && !skip_special_tokens_given) plan.sampling.skip_special_tokens = false;
}

}  // namespace

nlohmann::json parse_json_object(std::string_view body) {
  json request = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (request.is_discarded()) {
    throw invalid_request("We could not parse the JSON body of your request: it is not valid JSON.");
  }
  if (!request.is_object()) {
    throw invalid_request(fmt::format("The request body must be a JSON object, got {}.", request.type_name()));
  }
  return request;
}

void check_model(const nlohmann::json& request, const Engine& engine) {
  const auto model = get_string(request, "model");
  const std::string& served = engine.model().served_name;
  if (model && *model != served) {
    throw not_found(fmt::format("The model `{}` does not exist. This server serves `{}`.", *model, served),
                    std::string("model_not_found"));
  }
}

nlohmann::ordered_json parse_ordered_json(std::string_view body) {
  // Called on a body parse_json_object() took, so it parses.
  return nlohmann::ordered_json::parse(body);
}

namespace {

// An assistant message's tool_calls, as the template takes them: each call as the client gave it, its
// function.arguments (OpenAI's JSON string) parsed into the object, {} when empty (as vLLM does).
nlohmann::ordered_json parse_tool_calls(const json& calls, const nlohmann::ordered_json& ordered_calls,
                                        const std::string& param) {
  if (!calls.is_array()) wrong_type(param, "an array of tool calls", calls);
  nlohmann::ordered_json out = ordered_calls;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const std::string call_param = fmt::format("{}[{}]", param, i);
    const json& call = calls[i];
    if (!call.is_object()) wrong_type(call_param, "an object", call);
    if (const json* id = field(call, "id"); id && !id->is_string()) wrong_type(call_param + ".id", "a string", *id);
    if (const json* type = field(call, "type"); type && *type != "function") {
      throw invalid_request(fmt::format("'{}.type' must be \"function\"", call_param), call_param + ".type");
    }
    const json* function = field(call, "function");
    if (!function || !function->is_object()) {
      throw invalid_request(fmt::format("'{}.function' (an object with 'name' and 'arguments') is required",
                                        call_param),
                            call_param + ".function");
    }
    const json* name = field(*function, "name");
    if (!name || !name->is_string()) {
      throw invalid_request(fmt::format("'{}.function.name' must be a string", call_param),
                            call_param + ".function.name");
    }
    nlohmann::ordered_json& arguments = out[i]["function"]["arguments"];
    if (arguments.is_string()) {
      const std::string text = arguments.get<std::string>();
      arguments = text.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(text, nullptr, false);
      if (arguments.is_discarded()) {
        throw invalid_request(fmt::format("'{}.function.arguments' is not valid JSON", call_param),
                              call_param + ".function.arguments");
      }
    } else if (arguments.is_null()) {
      arguments = nlohmann::ordered_json::object();
    } else if (!arguments.is_object() && !arguments.is_array()) {
      wrong_type(call_param + ".function.arguments", "a JSON string (or an object)", *field(*function, "arguments"));
    }
  }
  return out;
}

}  // namespace

std::vector<tokenizer::ChatMessage> parse_chat_messages(const nlohmann::json& request,
                                                        const nlohmann::ordered_json& ordered_request) {
  const json* m = field(request, "messages");
  if (!m) throw invalid_request("'messages' is required", "messages");
  if (!m->is_array()) wrong_type("messages", "an array of messages", *m);
  if (m->empty()) throw invalid_request("'messages' must not be empty", "messages");
  std::vector<tokenizer::ChatMessage> messages;
  for (std::size_t i = 0; i < m->size(); ++i) {
    const json& message = (*m)[i];
    const std::string param = fmt::format("messages[{}]", i);
    if (!message.is_object()) wrong_type(param, "an object", message);
    const json* role = field(message, "role");
    if (!role) throw invalid_request(fmt::format("'{}.role' is required", param), param + ".role");
    if (!role->is_string()) wrong_type(param + ".role", "a string", *role);
    std::string role_name = role->get<std::string>();
    if (role_name == "developer") role_name = "system";  // OpenAI's newer name for the system role
    if (role_name != "system" && role_name != "user" && role_name != "assistant" && role_name != "tool") {
      throw invalid_request(fmt::format("'{}.role' must be system, developer, user, assistant or tool, got '{}'",
                                        param, role->get<std::string>()),
                            param + ".role");
    }
    std::string content;
    const json* c = field(message, "content");
    if (!c) {
      // Only an assistant turn may come without content (OpenAI: it had tool calls).
      if (role_name != "assistant") {
        throw invalid_request(fmt::format("'{}.content' is required", param), param + ".content");
      }
    } else if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {
      // Content parts: text only, joined by newlines (as vLLM does).
      for (std::size_t j = 0; j < c->size(); ++j) {
        const json& part = (*c)[j];
        const std::string part_param = fmt::format("{}.content[{}]", param, j);
        if (!part.is_object()) wrong_type(part_param, "an object", part);
        const json* type = field(part, "type");
        if (!type || *type != "text") {
          throw invalid_request(fmt::format("'{}.type' must be \"text\": only text content is supported", part_param),
                                part_param + ".type");
        }
        const json* text = field(part, "text");
        if (!text || !text->is_string()) {
          throw invalid_request(fmt::format("'{}.text' must be a string", part_param), part_param + ".text");
        }
        if (j > 0) content += '\n';
        content += text->get<std::string>();
      }
    } else {
      wrong_type(param + ".content", "a string or an array of content parts", *c);
    }
    tokenizer::ChatMessage parsed;
    parsed.role = std::move(role_name);
    parsed.content = std::move(content);
    if (const json* calls = field(message, "tool_calls")) {
      if (parsed.role != "assistant") {
        throw invalid_request(fmt::format("'{}.tool_calls' is only allowed in assistant messages", param),
                              param + ".tool_calls");
      }
      // An empty list is no calls (vLLM drops it, keeping templates on their plain assistant path).
      if (!calls->is_array() || !calls->empty()) {
        parsed.tool_calls = parse_tool_calls(*calls, ordered_request.at("messages").at(i).at("tool_calls"),
                                             param + ".tool_calls");
      }
    }
    if (const json* id = field(message, "tool_call_id")) {
      if (!id->is_string()) wrong_type(param + ".tool_call_id", "a string", *id);
      if (parsed.role == "tool") parsed.tool_call_id = id->get<std::string>();
    }
    if (const json* name = field(message, "name"); name && name->is_string()) parsed.name = name->get<std::string>();
    messages.push_back(std::move(parsed));
  }
  return messages;
}

std::vector<std::int32_t> render_chat_prompt(const Engine& engine, const std::vector<tokenizer::ChatMessage>& messages,
                                             const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                             bool add_special_tokens) {
  const tokenizer::ChatTemplate* chat_template = engine.chat_template();
  if (!chat_template) {
    throw invalid_request(fmt::format("Model `{}` has no chat template, so it cannot serve chat completions. Use "
                                      "/v1/completions, or name a chat format in the config (model.chat_template).",
                                      engine.model().served_name),
                          "messages");
  }
  try {
    const std::string text = chat_template->render(messages, add_generation_prompt, tools);
    // The template writes BOS and the turn markers itself, hence no special
    // tokens by default.
    return engine.tokenizer().encode(text, add_special_tokens, /*parse_special=*/true);
  } catch (const tokenizer::TokenizerError& e) {
    throw invalid_request(fmt::format("The chat template of model `{}` cannot be applied: {}",
                                      engine.model().served_name, e.what()),
                          "messages");
  }
}

std::vector<std::int32_t> parse_token_ids(const nlohmann::json& value, const std::string& param, const Engine& engine) {
  return get_token_ids(value, param, vocab_size(engine));
}

GenerateRequest make_engine_request(const GenerationPlan& plan, std::size_t index) {
  GenerateRequest request;
  request.prompt_token_ids = plan.prompts.at(index).token_ids;
  request.sampling = plan.sampling;
  request.sampling.max_tokens = plan.prompts[index].max_tokens;
  request.sampling.n = plan.best_of;
  // Ranking the best_of sequences needs every sampled token's logprob.
  if (plan.best_of > plan.sampling.n) request.sampling.logprobs = plan.logprobs.value_or(0);
  request.speculative = plan.speculative;
  request.constraint = plan.constraint;
  return request;
}

GenerationPlan parse_generation_request(ApiKind kind, std::string_view body, const Engine& engine,
                                        const ToolCallParsing& tool_parsing) {
  const json request = parse_json_object(body);
  check_model(request, engine);
  const bool beam_search = get_bool(request, "use_beam_search").value_or(false);
  reject_unsupported(request, kind, beam_search);
  const bool chat = kind == ApiKind::kChat;

  GenerationPlan plan;
  plan.kind = kind;
  plan.model = engine.model().served_name;
  plan.stream = get_bool(request, "stream").value_or(false);
  plan.speculative = get_bool(request, "speculative_decoding").value_or(true);
  if (const json* options = field(request, "stream_options")) {
    if (!options->is_object()) wrong_type("stream_options", "an object", *options);
    if (!plan.stream) {
      throw invalid_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    }
    plan.include_usage = get_bool(*options, "include_usage", "stream_options.include_usage").value_or(false);
  }
  get_string(request, "user");  // type-checked, otherwise unused

  SamplingOptions& s = plan.sampling;
  // Beam search is greedy-style: the model's sampling defaults do not apply to it.
  const GenerationDefaults defaults = beam_search ? GenerationDefaults{} : engine.generation_defaults();
  s.n = get_int(request, "n", 1, engine.max_n()).value_or(1);
  plan.best_of = s.n;
  if (beam_search || field(request, "length_penalty") || field(request, "early_stopping")) {
    s.beam_search = get_beam_search(request, beam_search, s.n,
                                    beam_search ? get_int(request, "best_of", 1, engine.max_n()) : std::nullopt);
  }
  if (beam_search && plan.stream) {
    throw invalid_request("'stream' is not supported with beam search: the best beams are known only when the search "
                          "ends",
                          "stream");
  }
  if (!chat && !beam_search) {
    if (const std::optional<int> best_of = get_int(request, "best_of", 1, engine.max_n())) {
      if (*best_of < s.n) {
        throw invalid_request(fmt::format("'best_of' must be greater than or equal to 'n' ({}), got {}", s.n,
                                          *best_of),
                              "best_of");
      }
      plan.best_of = *best_of;
    }
    if (plan.best_of > s.n && plan.stream) {
      throw invalid_request("'stream' cannot be used when 'best_of' is greater than 'n': the best completions are "
                            "known only when all have finished",
                            "stream");
    }
  }
  std::optional<int> max_tokens = get_int(request, "max_tokens", 1, kMaxInt);
  if (chat) {
    if (auto v = get_int(request, "max_completion_tokens", 1, kMaxInt)) max_tokens = v;
  }
  s.temperature =
      get_number(request, "temperature", 0.0, 2.0).value_or(defaults.temperature.value_or(beam_search ? 0.0f : 1.0f));
  s.top_p = get_number(request, "top_p", 0.0, 1.0, /*min_open=*/true).value_or(defaults.top_p.value_or(1.0f));
  s.top_k = get_int(request, "top_k", -1, kMaxInt).value_or(defaults.top_k.value_or(0));
  s.min_p = get_number(request, "min_p", 0.0, 1.0).value_or(0.0f);
  s.presence_penalty = get_number(request, "presence_penalty", -2.0, 2.0).value_or(0.0f);
  s.frequency_penalty = get_number(request, "frequency_penalty", -2.0, 2.0).value_or(0.0f);
  s.repetition_penalty = get_number(request, "repetition_penalty", 0.0, 2.0, /*min_open=*/true)
                             .value_or(defaults.repetition_penalty.value_or(1.0f));
  if (const json* seed = field(request, "seed")) {
    if (!seed->is_number_integer()) wrong_type("seed", "an integer", *seed);
    // Any 64-bit integer: negative seeds are taken as their two's complement.
    s.seed = seed->is_number_unsigned() ? seed->get<std::uint64_t>()
                                        : static_cast<std::uint64_t>(seed->get<std::int64_t>());
  }
  s.stop = get_stop_strings(request);
  if (const json* ids = field(request, "stop_token_ids")) s.stop_token_ids = get_token_ids(*ids, "stop_token_ids", vocab_size(engine));
  s.include_stop_str_in_output = get_bool(request, "include_stop_str_in_output").value_or(false);
  s.ignore_eos = get_bool(request, "ignore_eos").value_or(false);
  s.skip_special_tokens = get_bool(request, "skip_special_tokens").value_or(true);
  s.logit_bias = get_logit_bias(request, vocab_size(engine));
  s.min_tokens = get_int(request, "min_tokens", 0, kMaxInt).value_or(0);

  const int max_logprobs = engine.max_logprobs();
  if (chat) {
    const bool logprobs = get_bool(request, "logprobs").value_or(false);
    const std::optional<int> top = get_int(request, "top_logprobs", 0, max_logprobs);
    if (top && !logprobs) throw invalid_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs");
    if (logprobs) plan.logprobs = top.value_or(0);
  } else {
    plan.logprobs = get_int(request, "logprobs", 0, max_logprobs);
    plan.echo = get_bool(request, "echo").value_or(false);
    plan.prompt_logprobs = get_int(request, "prompt_logprobs", 0, max_logprobs);
  }
  s.logprobs = plan.logprobs;
  plan.return_token_ids = get_bool(request, "return_token_ids").value_or(false);
  // echo with logprobs shows the prompt tokens' logprobs (OpenAI), with as many alternatives.
  if (plan.echo && plan.logprobs) s.prompt_logprobs = std::max(*plan.logprobs, plan.prompt_logprobs.value_or(0));
  if (plan.prompt_logprobs) s.prompt_logprobs = std::max(*plan.prompt_logprobs, s.prompt_logprobs.value_or(0));
  plan.constraint = parse_output_constraint(request);

  if (chat) {
    const nlohmann::ordered_json ordered_request = parse_ordered_json(body);
    const ChatTools tools = parse_chat_tools(request, ordered_request);
    plan_tool_calls(plan, tools, tool_parsing, field(request, "skip_special_tokens") != nullptr);
    const auto messages = parse_chat_messages(request, ordered_request);
    plan.prompts.push_back(
        {render_chat_prompt(engine, messages, tools.definitions, /*add_generation_prompt=*/true), {}, std::nullopt});
  } else {
    plan.prompts = parse_prompts(request, engine);
  }

  const int max_len = engine.model().max_model_len;
  const char* what = chat ? "messages" : "prompt";
  for (PromptInput& prompt : plan.prompts) {
    const int length = static_cast<int>(prompt.token_ids.size());
    if (length == 0) throw invalid_request(fmt::format("The {} must not be empty.", what), what);
    if (max_len > 0 && length >= max_len) throw invalid_request(context_error(max_len, length, std::nullopt, what), what);
    if (max_len > 0 && max_tokens && static_cast<std::int64_t>(length) + *max_tokens > max_len) {
      throw invalid_request(context_error(max_len, length, max_tokens, what), chat && field(request, "max_completion_tokens")
                                                                                 ? "max_completion_tokens"
                                                                                 : "max_tokens");
    }
    prompt.max_tokens = max_tokens;
    if (!max_tokens && !chat) {
      prompt.max_tokens = max_len > 0 ? std::min(kCompletionDefaultMaxTokens, max_len - length)
                                      : kCompletionDefaultMaxTokens;
    }
  }
  return plan;
}

}  // namespace pagedllm::server
