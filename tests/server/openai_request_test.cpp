// Request bodies -> GenerationPlan: fields, defaults, types, limits, prompts,
// chat templates. No sockets.

#include <catch2/catch.hpp>

#include <string>

#include "core/server/api_error.h"
#include "core/server/openai_request.h"
#include "tests/server/fake_engine.h"

using namespace pagedllm;
using namespace pagedllm::server;
using pagedllm::testing::FakeEngine;
using pagedllm::testing::FakeEngineOptions;
using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

GenerationPlan completion(const FakeEngine& engine, const json& body) {
  return parse_generation_request(ApiKind::kCompletion, body.dump(), engine);
}

GenerationPlan chat(const FakeEngine& engine, const json& body) {
  return parse_generation_request(ApiKind::kChat, body.dump(), engine);
}

// The ApiError a body raises.
ApiError error_of(const FakeEngine& engine, ApiKind kind, const std::string& body) {
  try {
    parse_generation_request(kind, body, engine);
  } catch (const ApiError& e) {
    return e;
  }
  FAIL("expected an ApiError for " << body);
  return invalid_request("unreachable");
}

void check_400(const FakeEngine& engine, ApiKind kind, const json& body, const std::string& param,
               const std::string& message_part) {
  const ApiError e = error_of(engine, kind, body.dump());
  INFO(body.dump() << " -> " << e.what());
  CHECK(e.status() == 400);
  CHECK(e.type() == "invalid_request_error");
  CHECK(e.param() == std::optional<std::string>(param));
  CHECK_THAT(e.what(), Contains(message_part));
}

}  // namespace

TEST_CASE("a completion request with defaults", "[server][request]") {
  FakeEngine engine;
  const GenerationPlan plan = completion(engine, {{"model", "fake-model"}, {"prompt", "Hello world"}});
  REQUIRE(plan.prompts.size() == 1);
  CHECK(plan.prompts[0].token_ids == engine.tokenizer().encode("Hello world", true));
  CHECK(plan.prompts[0].text == "Hello world");
  CHECK(plan.prompts[0].max_tokens == 16);  // OpenAI's completions default
  CHECK(plan.model == "fake-model");
  CHECK_FALSE(plan.stream);
  CHECK_FALSE(plan.echo);
  CHECK_FALSE(plan.logprobs.has_value());
  CHECK(plan.sampling.n == 1);
  CHECK(plan.sampling.temperature == 1.0f);
  CHECK(plan.sampling.top_p == 1.0f);
  CHECK(plan.sampling.top_k == 0);
  CHECK(plan.sampling.stop.empty());
  CHECK_FALSE(plan.sampling.seed.has_value());
  const GenerateRequest request = make_engine_request(plan, 0);
  CHECK(request.prompt_token_ids == plan.prompts[0].token_ids);
  CHECK(request.sampling.max_tokens == 16);
}

TEST_CASE("every sampling field reaches the engine request", "[server][request]") {
  FakeEngine engine;
  const GenerationPlan plan = completion(
      engine, {{"prompt", "x"}, {"max_tokens", 7}, {"temperature", 0.5}, {"top_p", 0.9}, {"top_k", 40},
               {"min_p", 0.05}, {"presence_penalty", -1}, {"frequency_penalty", 1.5}, {"repetition_penalty", 1.2},
               {"seed", -1}, {"stop", {"\n", "END"}}, {"n", 3}, {"logprobs", 2}, {"echo", true},
               {"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}},
               {"user", "me"}, {"stop_token_ids", {5, 6}}, {"include_stop_str_in_output", true},
               {"skip_special_tokens", false}, {"some_future_field", {1, 2, 3}},
               {"logit_bias", {{"7", -100}, {"3", 2.5}}}, {"min_tokens", 4}, {"prompt_logprobs", 1}});
  const SamplingOptions& s = plan.sampling;
  CHECK(plan.prompts[0].max_tokens == 7);
  CHECK(s.temperature == 0.5f);
  CHECK(s.top_p == 0.9f);
  CHECK(s.top_k == 40);
  CHECK(s.min_p == 0.05f);
  CHECK(s.presence_penalty == -1.0f);
  CHECK(s.frequency_penalty == 1.5f);
  CHECK(s.repetition_penalty == 1.2f);
  CHECK(s.seed == std::optional<std::uint64_t>(~0ull));  // -1 as two's complement
  CHECK(s.stop == std::vector<std::string>{"\n", "END"});
  CHECK(s.n == 3);
  CHECK(s.logprobs == 2);
  CHECK(plan.logprobs == 2);
  CHECK(plan.echo);
  CHECK(s.ignore_eos);
  CHECK(plan.stream);
  CHECK(plan.include_usage);
  CHECK(s.stop_token_ids == std::vector<std::int32_t>{5, 6});
  CHECK(s.include_stop_str_in_output);
  CHECK_FALSE(s.skip_special_tokens);
  // nlohmann keeps object keys sorted.
  CHECK(s.logit_bias == std::vector<std::pair<std::int32_t, float>>{{3, 2.5f}, {7, -100.0f}});
  CHECK(s.min_tokens == 4);
  CHECK(plan.prompt_logprobs == 1);
  CHECK(s.prompt_logprobs == 2);  // echo with logprobs 2 wants two alternatives per prompt token
  CHECK(plan.num_choices() == 3);
}

TEST_CASE("null means unset", "[server][request]") {
  FakeEngine engine;
  const GenerationPlan plan = completion(engine, {{"prompt", "x"}, {"max_tokens", nullptr}, {"temperature", nullptr},
                                                  {"stop", nullptr}, {"logprobs", nullptr}, {"model", nullptr}});
  CHECK(plan.prompts[0].max_tokens == 16);
  CHECK(plan.sampling.temperature == 1.0f);
  CHECK_FALSE(plan.logprobs.has_value());
}

TEST_CASE("prompts: a string, token ids, or a batch of either", "[server][request]") {
  FakeEngine engine;
  const auto& tok = engine.tokenizer();
  GenerationPlan plan = completion(engine, {{"prompt", {1, 2, 3}}});
  REQUIRE(plan.prompts.size() == 1);
  CHECK(plan.prompts[0].token_ids == std::vector<std::int32_t>{1, 2, 3});
  const std::vector<std::int32_t> ids{1, 2, 3};
  CHECK(plan.prompts[0].text == tok.decode(ids, true));

  plan = completion(engine, {{"prompt", {"one", {7, 8}, "three"}}, {"n", 2}});
  REQUIRE(plan.prompts.size() == 3);
  CHECK(plan.prompts[0].token_ids == tok.encode("one", true));
  CHECK(plan.prompts[1].token_ids == std::vector<std::int32_t>{7, 8});
  CHECK(plan.prompts[2].text == "three");
  CHECK(plan.num_choices() == 6);
  CHECK(make_engine_request(plan, 1).prompt_token_ids == std::vector<std::int32_t>{7, 8});
}

TEST_CASE("wrong types and values out of range are 400s naming the field", "[server][request]") {
  FakeEngine engine;
  const auto k = ApiKind::kCompletion;
  check_400(engine, k, {{"prompt", "x"}, {"temperature", "hot"}}, "temperature", "must be a number, got string");
  check_400(engine, k, {{"prompt", "x"}, {"temperature", 2.5}}, "temperature", "must be in [0, 2]");
  check_400(engine, k, {{"prompt", "x"}, {"top_p", 0}}, "top_p", "must be in (0, 1]");
  check_400(engine, k, {{"prompt", "x"}, {"max_tokens", 1.5}}, "max_tokens", "must be an integer");
  check_400(engine, k, {{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens", "must be in [1,");
  check_400(engine, k, {{"prompt", "x"}, {"n", 0}}, "n", "must be in [1, 8], got 0");
  check_400(engine, k, {{"prompt", "x"}, {"n", 9}}, "n", "must be in [1, 8], got 9");
  check_400(engine, k, {{"prompt", "x"}, {"n", 99999999999999ull}}, "n", "must be in [1, 8]");
  check_400(engine, k, {{"prompt", "x"}, {"logprobs", 21}}, "logprobs", "must be in [0, 20], got 21");
  check_400(engine, k, {{"prompt", "x"}, {"logprobs", true}}, "logprobs", "must be an integer");
  check_400(engine, k, {{"prompt", "x"}, {"stop", {"a", 1}}}, "stop[1]", "must be a string");
  check_400(engine, k, {{"prompt", "x"}, {"stop", 3}}, "stop", "a string or an array of strings");
  check_400(engine, k, {{"prompt", "x"}, {"stop", ""}}, "stop", "must not be empty");
  check_400(engine, k, {{"prompt", "x"}, {"stream", "yes"}}, "stream", "must be a boolean");
  check_400(engine, k, {{"prompt", "x"}, {"echo", 1}}, "echo", "must be a boolean");
  check_400(engine, k, {{"prompt", "x"}, {"seed", 1.5}}, "seed", "must be an integer");
  check_400(engine, k, {{"prompt", "x"}, {"user", 5}}, "user", "must be a string");
  check_400(engine, k, {{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}}, "stream_options",
            "only allowed when 'stream' is true");
  check_400(engine, k, {{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", 1}}}},
            "stream_options.include_usage", "must be a boolean");
  check_400(engine, k, {{"prompt", 5}}, "prompt", "must be a string, an array of token ids");
  check_400(engine, k, {{"prompt", json::array()}}, "prompt", "must not be empty");
  check_400(engine, k, {{"prompt", {"a", 5}}}, "prompt[1]", "a string or an array of token ids");
  check_400(engine, k, {{"prompt", {1, "a"}}}, "prompt[1]", "a token id");
  check_400(engine, k, {{"prompt", {1, -1}}}, "prompt", "'prompt[1]' is -1, not a token id of this model");
  check_400(engine, k, {{"prompt", {{1}, {2, 1000000}}}}, "prompt[1]", "'prompt[1][1]' is 1000000");
  check_400(engine, k, {{"prompt", {{1}, json::array()}}}, "prompt", "must not be empty");
  check_400(engine, k, json::object(), "prompt", "'prompt' is required");
  check_400(engine, k, {{"prompt", "x"}, {"suffix", "y"}}, "suffix", "not supported");
  check_400(engine, k, {{"prompt", "x"}, {"logit_bias", {{"5", 100.5}}}}, "logit_bias", "between -100 and 100");
  check_400(engine, k, {{"prompt", "x"}, {"logit_bias", {{"x5", 1}}}}, "logit_bias", "not a token id");
  check_400(engine, k, {{"prompt", "x"}, {"logit_bias", {{"5", 1}, {"05", 2}}}}, "logit_bias", "twice");
  check_400(engine, k, {{"prompt", "x"}, {"logit_bias", {{"5", "1"}}}}, "logit_bias[\"5\"]", "a number");
  check_400(engine, k, {{"prompt", "x"}, {"logit_bias", json::array()}}, "logit_bias", "an object");
  check_400(engine, k, {{"prompt", "x"}, {"min_tokens", -1}}, "min_tokens", "");
  check_400(engine, k, {{"prompt", "x"}, {"prompt_logprobs", 21}}, "prompt_logprobs", "");
  check_400(engine, k, {{"prompt", "x"}, {"n", 2}, {"best_of", 1}}, "best_of", "greater than or equal to 'n'");
  check_400(engine, k, {{"prompt", "x"}, {"best_of", 2}, {"stream", true}}, "stream", "'best_of' is greater");
  check_400(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"best_of", 2}},
            "best_of", "/v1/completions");
}

TEST_CASE("bodies that are not JSON objects are 400s", "[server][request]") {
  FakeEngine engine;
  for (const std::string body : {"", "{", "not json", "[1,2]", "\"prompt\"", "{\"prompt\": \"x\",}"}) {
    const ApiError e = error_of(engine, ApiKind::kCompletion, body);
    INFO(body);
    CHECK(e.status() == 400);
  }
  // Deep nesting must not exhaust the stack: nlohmann parses and destroys iteratively.
  const std::string deep = "{\"prompt\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK(error_of(engine, ApiKind::kCompletion, deep).status() == 400);
}

TEST_CASE("the model must be the served one", "[server][request]") {
  FakeEngine engine;
  const ApiError e = error_of(engine, ApiKind::kCompletion, R"({"model": "gpt-4", "prompt": "x"})");
  CHECK(e.status() == 404);
  CHECK(e.code() == std::optional<std::string>("model_not_found"));
  CHECK_THAT(e.what(), Contains("`gpt-4` does not exist"));
  CHECK(completion(engine, {{"prompt", "x"}}).model == "fake-model");  // absent: the served model
}

TEST_CASE("prompts longer than the context are 400s, the default max_tokens fits what is left",
          "[server][request]") {
  FakeEngineOptions options;
  options.max_model_len = 20;
  FakeEngine engine(options);
  std::vector<int> ids(20, 5);
  check_400(engine, ApiKind::kCompletion, {{"prompt", ids}}, "prompt",
            "maximum context length is 20 tokens. However, your prompt has 20 tokens");
  ids.resize(15);
  check_400(engine, ApiKind::kCompletion, {{"prompt", ids}, {"max_tokens", 6}}, "max_tokens",
            "you requested 21 tokens (15 in the prompt, 6 in the completion)");
  CHECK(completion(engine, {{"prompt", ids}, {"max_tokens", 5}}).prompts[0].max_tokens == 5);
  CHECK(completion(engine, {{"prompt", ids}}).prompts[0].max_tokens == 5);  // 16 would not fit
  check_400(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", 19}},
            "max_completion_tokens", "maximum context length is 20 tokens");
}

namespace {

// A model whose generation_config.json sets sampling defaults.
FakeEngineOptions with_generation_defaults() {
  FakeEngineOptions options;
  options.defaults.temperature = 0.6f;
  options.defaults.top_p = 0.9f;
  options.defaults.top_k = 50;
  options.defaults.repetition_penalty = 1.1f;
  return options;
}

}  // namespace

TEST_CASE("generation defaults fill unset fields", "[server][request]") {
  FakeEngine engine(with_generation_defaults());
  GenerationPlan plan = completion(engine, {{"prompt", "x"}, {"top_k", 10}, {"stop_token_ids", {4}}});
  CHECK(plan.sampling.temperature == 0.6f);
  CHECK(plan.sampling.top_p == 0.9f);
  CHECK(plan.sampling.top_k == 10);
  CHECK(plan.sampling.repetition_penalty == 1.1f);
  CHECK(plan.sampling.stop_token_ids == std::vector<std::int32_t>{4});  // EOS is the engine's business
  plan = completion(engine, {{"prompt", "x"}, {"temperature", 0}, {"top_p", 1}, {"repetition_penalty", 1}});
  CHECK(plan.sampling.temperature == 0.0f);  // a value the user sets wins
  CHECK(plan.sampling.top_p == 1.0f);
  CHECK(plan.sampling.repetition_penalty == 1.0f);
}

TEST_CASE("beam search: the width, its fields, greedy defaults and its 400s", "[server][request][beam]") {
  FakeEngine engine(with_generation_defaults());
  GenerationPlan plan = completion(engine, {{"prompt", "x"}, {"use_beam_search", true}, {"n", 2}, {"best_of", 4},
                                            {"length_penalty", 0.5}, {"early_stopping", "never"}});
  REQUIRE(plan.sampling.beam_search.has_value());
  CHECK(plan.sampling.beam_search->beam_width == 4);
  CHECK(plan.sampling.beam_search->length_penalty == 0.5f);
  CHECK(plan.sampling.beam_search->early_stopping == BeamSearchOptions::EarlyStopping::kNever);
  // The engine returns the n best itself: nothing for the response builder to rank.
  CHECK(plan.best_of == 2);
  CHECK(make_engine_request(plan, 0).sampling.n == 2);
  // generation_config.json's sampling defaults are not beam search's.
  CHECK(plan.sampling.temperature == 0.0f);
  CHECK(plan.sampling.top_p == 1.0f);
  CHECK(plan.sampling.top_k == 0);
  CHECK(plan.sampling.repetition_penalty == 1.0f);
  plan = chat(engine, {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"use_beam_search", true},
                       {"early_stopping", true}});
  CHECK(plan.sampling.beam_search->beam_width == 1);  // best_of defaults to n; the engine refuses 1
  CHECK(plan.sampling.beam_search->early_stopping == BeamSearchOptions::EarlyStopping::kTrue);
  CHECK_FALSE(completion(engine, {{"prompt", "x"}, {"length_penalty", 1.0}, {"early_stopping", false}})
                  .sampling.beam_search.has_value());

  const auto k = ApiKind::kCompletion;
  check_400(engine, k, {{"prompt", "x"}, {"use_beam_search", true}, {"n", 3}, {"best_of", 2}}, "best_of",
            "greater than or equal to 'n'");
  check_400(engine, k, {{"prompt", "x"}, {"use_beam_search", true}, {"best_of", 2}, {"stream", true}}, "stream",
            "not supported with beam search");
  check_400(engine, k, {{"prompt", "x"}, {"use_beam_search", true}, {"early_stopping", "soon"}}, "early_stopping",
            "true, false or \"never\"");
  check_400(engine, k, {{"prompt", "x"}, {"use_beam_search", "yes"}}, "use_beam_search", "");
  check_400(engine, k, {{"prompt", "x"}, {"length_penalty", 2}}, "length_penalty", "only used by beam search");
  check_400(engine, k, {{"prompt", "x"}, {"early_stopping", "never"}}, "early_stopping", "only used by beam search");
  check_400(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"best_of", 2}},
            "best_of", "the beam width");
}

TEST_CASE("chat messages go through the model's chat template", "[server][request]") {
  FakeEngine engine;
  const json messages = {{{"role", "developer"}, {"content", "Be brief."}},
                         {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hi"}}, {{"type", "text"}, {"text", "there"}}}}}};
  const GenerationPlan plan = chat(engine, {{"messages", messages}, {"max_tokens", 4}});
  const std::vector<tokenizer::ChatMessage> rendered{{"system", "Be brief."}, {"user", "Hi\nthere"}};
  const std::string text = engine.chat_template()->render(rendered, true);
  CHECK_THAT(text, Contains("<|start_header_id|>assistant<|end_header_id|>"));
  REQUIRE(plan.prompts.size() == 1);
  CHECK(plan.prompts[0].token_ids == engine.tokenizer().encode(text, false, true));
  CHECK(plan.prompts[0].max_tokens == 4);
  // Special tokens written by the template are single ids, not text.
  const auto bos = engine.tokenizer().token_to_id("<|begin_of_text|>");
  REQUIRE(bos.has_value());
  CHECK(plan.prompts[0].token_ids.front() == *bos);

  const GenerationPlan unlimited = chat(engine, {{"messages", messages}});
  CHECK_FALSE(unlimited.prompts[0].max_tokens.has_value());  // chat: up to the context limit
  CHECK(chat(engine, {{"messages", messages}, {"max_tokens", 9}, {"max_completion_tokens", 3}}).prompts[0].max_tokens == 3);
}

TEST_CASE("chat logprobs, fields and message errors", "[server][request]") {
  FakeEngine engine;
  const json hi = {{{"role", "user"}, {"content", "hi"}}};
  CHECK_FALSE(chat(engine, {{"messages", hi}}).logprobs.has_value());
  CHECK(chat(engine, {{"messages", hi}, {"logprobs", true}}).logprobs == 0);
  CHECK(chat(engine, {{"messages", hi}, {"logprobs", true}, {"top_logprobs", 5}}).logprobs == 5);
  const auto k = ApiKind::kChat;
  check_400(engine, k, {{"messages", hi}, {"top_logprobs", 2}}, "top_logprobs", "requires 'logprobs' to be true");
  check_400(engine, k, {{"messages", hi}, {"logprobs", true}, {"top_logprobs", 21}}, "top_logprobs", "[0, 20]");
  check_400(engine, k, {{"messages", hi}, {"logprobs", 3}}, "logprobs", "must be a boolean");
  check_400(engine, k, json::object(), "messages", "'messages' is required");
  check_400(engine, k, {{"messages", json::array()}}, "messages", "must not be empty");
  check_400(engine, k, {{"messages", "hi"}}, "messages", "must be an array");
  check_400(engine, k, {{"messages", {{{"content", "x"}}}}}, "messages[0].role", "is required");
  check_400(engine, k, {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}}, "messages[0].role", "got 'wizard'");
  check_400(engine, k, {{"messages", {{{"role", "user"}}}}}, "messages[0].content", "is required");
  check_400(engine, k, {{"messages", {{{"role", "user"}, {"content", 5}}}}}, "messages[0].content", "must be a string");
  check_400(engine, k, {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}},
            "messages[0].content[0].type", "only text content");
  check_400(engine, k, {{"messages", hi}, {"tools", {{{"type", "function"}}}}}, "tools[0].function", "is required");
  const json weather = {{"type", "function"},
                        {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}};
  check_400(engine, k, {{"messages", hi}, {"tools", {weather, weather}}}, "tools[1].function.name",
            "two tools are named 'get_weather'");
  check_400(engine, k, {{"messages", hi}, {"tools", {{{"type", "function"}, {"function", {{"name", "bad name"}}}}}}},
            "tools[0].function.name", "letters, digits");
  check_400(engine, k,
            {{"messages", hi},
             {"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "string"}}}}}}}}},
            "tools[0].function.parameters.type", "must have type \"object\"");
  check_400(engine, k,
            {{"messages", hi},
             {"tools", {{{"type", "function"},
                         {"function", {{"name", "f"}, {"parameters", {{"type", {"string", "null"}}}}}}}}}},
            "tools[0].function.parameters.type", "must have type \"object\"");
  check_400(engine, k,
            {{"messages", hi}, {"tools", {weather}},
             {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}},
            "tool_choice.function.name", "not one of 'tools' (get_weather)");
  check_400(engine, k, {{"messages", hi}, {"tools", {weather}}, {"tool_choice", "sometimes"}}, "tool_choice",
            "not one of");
  check_400(engine, k, {{"messages", hi}, {"tool_choice", "required"}}, "tool_choice", "offers none");
  // No server.tool_call_parser: a call cannot be forced, since no format says how to write it.
  check_400(engine, k, {{"messages", hi}, {"tools", {weather}}, {"tool_choice", "required"}}, "tool_choice",
            "set server.tool_call_parser");
  {
    // tool_call_parser auto and a template that shows no format: tools are refused (unless tool_choice is
    // "none"), naming why, rather than their calls returned as text.
    const ToolCallParsing unrecognised{ToolCallFormat::kNone, "the template shows none: set server.tool_call_parser"};
    for (const json& choice : {json("auto"), json("required")}) {
      const json body = {{"messages", hi}, {"tools", {weather}}, {"tool_choice", choice}};
      try {
        parse_generation_request(k, body.dump(), engine, unrecognised);
        FAIL("expected a 400 for " << body.dump());
      } catch (const ApiError& e) {
        CHECK(e.status() == 400);
        CHECK(e.param() == std::optional<std::string>("tools"));
        CHECK_THAT(e.what(), Contains("'tools' needs the model's tool-call format, and the template shows none"));
      }
    }
    const json unparsed = {{"messages", hi}, {"tools", {weather}}, {"tool_choice", "none"}};
    CHECK(parse_generation_request(k, unparsed.dump(), engine, unrecognised).tool_call_format == ToolCallFormat::kNone);
  }
  check_400(engine, k,
            {{"messages", {{{"role", "assistant"},
                            {"tool_calls", {{{"id", "c1"}, {"type", "function"},
                                             {"function", {{"name", "f"}, {"arguments", "{not json"}}}}}}}}}},
            "messages[0].tool_calls[0].function.arguments", "not valid JSON");
  check_400(engine, k,
            {{"messages", {{{"role", "user"}, {"content", "x"},
                            {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", "{}"}}}}}}}}}},
            "messages[0].tool_calls", "only allowed in assistant messages");
  check_400(engine, k, {{"messages", hi}, {"response_format", {{"type", "xml"}}}}, "response_format.type",
            "not one of 'text', 'json_object', 'json_schema'");
  CHECK(chat(engine, {{"messages", hi}, {"response_format", {{"type", "json_object"}}}}).constraint->type ==
        OutputConstraint::Type::kJsonObject);
  CHECK(chat(engine, {{"messages", hi}, {"response_format", {{"type", "text"}}}}).prompts.size() == 1);
  // An assistant turn may have no content (it had tool calls).
  CHECK(chat(engine, {{"messages", {{{"role", "user"}, {"content", "a"}}, {{"role", "assistant"}, {"content", nullptr}},
                                    {{"role", "user"}, {"content", "b"}}}}})
            .prompts.size() == 1);
}

TEST_CASE("a model without a chat template refuses chat with a 400", "[server][request]") {
  FakeEngineOptions options;
  options.has_chat_template = false;
  FakeEngine engine(options);
  check_400(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, "messages",
            "Model `fake-model` has no chat template");
  CHECK(completion(engine, {{"prompt", "x"}}).prompts.size() == 1);
}
