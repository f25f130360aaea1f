// Engine outputs -> OpenAI JSON and SSE chunks. No sockets.

#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "core/server/openai_response.h"
#include "tests/server/fake_engine.h"

using namespace pagedllm;
using namespace pagedllm::server;
using pagedllm::testing::FakeEngine;
using nlohmann::json;

namespace {

GenerationPlan plan_for(const FakeEngine& engine, ApiKind kind, const json& body) {
  return parse_generation_request(kind, body.dump(), engine);
}

SequenceDelta delta(int index, std::string text, std::vector<std::int32_t> ids,
                    std::optional<FinishReason> finish = std::nullopt) {
  SequenceDelta d;
  d.index = index;
  d.text = std::move(text);
  d.token_ids = std::move(ids);
  d.finish_reason = finish;
  return d;
}

RequestOutput output(std::vector<SequenceDelta> deltas, bool finished, int prompt_tokens, int generated) {
  RequestOutput out;
  out.sequences = std::move(deltas);
  out.finished = finished;
  out.num_prompt_tokens = prompt_tokens;
  out.num_generated_tokens = generated;
  return out;
}

// The JSON payloads of an SSE text; "[DONE]" as a string.
std::vector<json> events(const std::string& sse) {
  std::vector<json> out;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    REQUIRE(sse.compare(pos, 6, "data: ") == 0);
    const std::size_t end = sse.find("\n\n", pos);
    REQUIRE(end != std::string::npos);
    const std::string payload = sse.substr(pos + 6, end - pos - 6);
    out.push_back(payload == "[DONE]" ? json("[DONE]") : json::parse(payload));
    pos = end + 2;
  }
  return out;
}

}  // namespace

TEST_CASE("a whole completion response with usage", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion, {{"prompt", "x"}, {"max_tokens", 3}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-1", 1700000000);
  CHECK(builder.add(0, output({delta(0, "Hel", {10})}, false, 4, 1)).empty());
  CHECK(builder.add(0, output({delta(0, "lo", {11, 12}, FinishReason::kLength)}, true, 4, 3)).empty());
  const json body = json::parse(builder.response_body());
  CHECK(body["id"] == "cmpl-1");
  CHECK(body["object"] == "text_completion");
  CHECK(body["created"] == 1700000000);
  CHECK(body["model"] == "fake-model");
  REQUIRE(body["choices"].size() == 1);
  CHECK(body["choices"][0] == json{{"index", 0}, {"text", "Hello"}, {"logprobs", nullptr}, {"finish_reason", "length"},
                                   {"stop_reason", nullptr}});
  CHECK(body["usage"] == json{{"prompt_tokens", 4}, {"completion_tokens", 3}, {"total_tokens", 7},
                              {"prompt_tokens_details", {{"cached_tokens", 0}}}});
}

TEST_CASE("batch prompts with n > 1 number their choices prompt-major", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion, {{"prompt", {"a", "b"}}, {"n", 2}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-2", 1);
  builder.add(1, output({delta(1, "b1", {1}, FinishReason::kStop), delta(0, "b0", {1}, FinishReason::kLength)}, true, 2, 2));
  auto a = output({delta(0, "a0", {1}, FinishReason::kLength), delta(1, "a1", {1}, FinishReason::kStop)}, true, 3, 2);
  a.sequences[1].stop_string.assign("END");
  a.num_cached_prompt_tokens = 2;
  builder.add(0, a);
  const json body = json::parse(builder.response_body());
  REQUIRE(body["choices"].size() == 4);
  CHECK(body["choices"][0]["text"] == "a0");
  CHECK(body["choices"][1]["text"] == "a1");
  CHECK(body["choices"][1]["stop_reason"] == "END");
  CHECK(body["choices"][2]["text"] == "b0");
  CHECK(body["choices"][3]["text"] == "b1");
  for (int i = 0; i < 4; ++i) CHECK(body["choices"][i]["index"] == i);
  CHECK(body["usage"]["prompt_tokens"] == 5);  // each prompt once
  CHECK(body["usage"]["completion_tokens"] == 4);
  CHECK(body["usage"]["prompt_tokens_details"]["cached_tokens"] == 2);
}

TEST_CASE("best_of > n returns each prompt's n best sequences by cumulative logprob, best first",
          "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan =
      plan_for(engine, ApiKind::kCompletion, {{"prompt", {"a", "b"}}, {"n", 2}, {"best_of", 3}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-3", 1);
  // Sequence s of a prompt: two tokens whose logprobs sum to scores[s].
  auto sequence = [](int index, std::string text, float first, float second) {
    SequenceDelta d = delta(index, std::move(text), {1, 2}, FinishReason::kLength);
    d.logprobs = {{1, first, {}}, {2, second, {}}};
    return d;
  };
  builder.add(0, output({sequence(0, "a0", -1.0f, -2.0f), sequence(1, "a1", -0.5f, -0.25f),
                         sequence(2, "a2", -3.0f, -0.5f)},
                        true, 1, 6));
  // Prompt b's sequences arrive over two outputs: the sums count every delta.
  builder.add(1, output({sequence(0, "b0", -0.1f, -0.1f), sequence(1, "b1", -2.0f, -2.0f)}, false, 1, 4));
  builder.add(1, output({sequence(2, "b2", -0.05f, -0.05f)}, true, 1, 6));
  const json body = json::parse(builder.response_body());
  REQUIRE(body["choices"].size() == 4);
  CHECK(body["choices"][0]["text"] == "a1");  // -0.75
  CHECK(body["choices"][1]["text"] == "a0");  // -3 beats a2's -3.5
  CHECK(body["choices"][2]["text"] == "b2");  // -0.1
  CHECK(body["choices"][3]["text"] == "b0");  // -0.2
  for (int i = 0; i < 4; ++i) CHECK(body["choices"][i]["index"] == i);
  CHECK(body["choices"][0]["logprobs"].is_null());  // not asked
  CHECK(body["usage"]["completion_tokens"] == 12);  // every generated token
}

TEST_CASE("streamed completion chunks, the usage chunk and [DONE]", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion,
                                       {{"prompt", "x"}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-3", 5);
  CHECK(builder.stream_start().empty());
  std::string sse = builder.add(0, output({delta(0, "Hi", {1})}, false, 2, 1));
  sse += builder.add(0, output({delta(0, "", {2})}, false, 2, 2));  // held-back text: nothing to send
  auto last = output({delta(0, " there", {3}, FinishReason::kStop)}, true, 2, 3);
  last.sequences[0].stop_token_id = 99;
  sse += builder.add(0, last);
  sse += builder.stream_end();
  const auto e = events(sse);
  REQUIRE(e.size() == 4);
  CHECK(e[0]["object"] == "text_completion");
  CHECK(e[0]["id"] == "cmpl-3");
  CHECK(e[0]["choices"][0]["text"] == "Hi");
  CHECK(e[0]["choices"][0]["finish_reason"] == nullptr);
  CHECK(e[0]["usage"] == nullptr);  // include_usage: null on every chunk but the last
  CHECK(e[1]["choices"][0]["text"] == " there");
  CHECK(e[1]["choices"][0]["finish_reason"] == "stop");
  CHECK(e[1]["choices"][0]["stop_reason"] == 99);
  CHECK(e[2]["choices"] == json::array());
  CHECK(e[2]["usage"]["completion_tokens"] == 3);
  CHECK(e[2]["usage"]["total_tokens"] == 5);
  CHECK(e[3] == "[DONE]");
}

TEST_CASE("return_token_ids: every streamed token arrives with its ids, text or not, and whole responses carry them",
          "[server][response]") {
  FakeEngine engine;
  const json body = {{"prompt", {5, 6, 7}}, {"return_token_ids", true}};
  json streamed_body = body;
  streamed_body["stream"] = true;
  const GenerationPlan streamed = plan_for(engine, ApiKind::kCompletion, streamed_body);
  ResponseBuilder builder(streamed, engine.tokenizer(), "cmpl-4", 5);
  std::string sse = builder.add(0, output({delta(0, "Hi", {1})}, false, 3, 1));
  sse += builder.add(0, output({delta(0, "", {2})}, false, 3, 2));  // held-back text: sent for its id
  sse += builder.add(0, output({delta(0, " there", {3, 4}, FinishReason::kLength)}, true, 3, 4));
  sse += builder.stream_end();
  const auto e = events(sse);
  REQUIRE(e.size() == 4);
  CHECK(e[0]["choices"][0]["prompt_token_ids"] == json({5, 6, 7}));
  CHECK(e[0]["choices"][0]["token_ids"] == json({1}));
  CHECK(e[1]["choices"][0]["text"] == "");
  CHECK(e[1]["choices"][0]["token_ids"] == json({2}));
  CHECK(e[1]["choices"][0]["prompt_token_ids"] == nullptr);
  CHECK(e[2]["choices"][0]["token_ids"] == json({3, 4}));
  CHECK(e[3] == "[DONE]");

  const GenerationPlan whole = plan_for(engine, ApiKind::kCompletion, body);
  ResponseBuilder whole_builder(whole, engine.tokenizer(), "cmpl-5", 5);
  whole_builder.add(0, output({delta(0, "Hi", {1})}, false, 3, 1));
  whole_builder.add(0, output({delta(0, "", {2}, FinishReason::kLength)}, true, 3, 2));
  const json response = json::parse(whole_builder.response_body());
  CHECK(response["choices"][0]["prompt_token_ids"] == json({5, 6, 7}));
  CHECK(response["choices"][0]["token_ids"] == json({1, 2}));

  // Without it, neither field, and a token without text waits for its text.
  const GenerationPlan plain = plan_for(engine, ApiKind::kCompletion, {{"prompt", {5, 6, 7}}, {"stream", true}});
  ResponseBuilder plain_builder(plain, engine.tokenizer(), "cmpl-6", 5);
  CHECK(plain_builder.add(0, output({delta(0, "", {2})}, false, 3, 1)).empty());
  const auto p = events(plain_builder.add(0, output({delta(0, "Hi", {1})}, false, 3, 2)));
  REQUIRE(p.size() == 1);
  CHECK_FALSE(p[0]["choices"][0].contains("token_ids"));
}

TEST_CASE("streamed chat: role first, content deltas, then the finish", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kChat,
                                       {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"stream", true}, {"n", 2}});
  ResponseBuilder builder(plan, engine.tokenizer(), "chatcmpl-4", 5);
  std::string sse = builder.stream_start();
  sse += builder.add(0, output({delta(1, "B", {1}), delta(0, "A", {1})}, false, 9, 2));
  sse += builder.add(0, output({delta(0, "", {2}, FinishReason::kLength), delta(1, "b", {2}, FinishReason::kLength)},
                               true, 9, 4));
  sse += builder.stream_end();
  const auto e = events(sse);
  REQUIRE(e.size() == 7);
  for (int i = 0; i < 2; ++i) {
    CHECK(e[i]["object"] == "chat.completion.chunk");
    CHECK(e[i]["choices"][0]["index"] == i);
    CHECK(e[i]["choices"][0]["delta"] == json{{"role", "assistant"}, {"content", ""}});
  }
  CHECK(e[2]["choices"][0]["index"] == 1);
  CHECK(e[2]["choices"][0]["delta"] == json{{"content", "B"}});
  CHECK(e[3]["choices"][0]["delta"] == json{{"content", "A"}});
  CHECK(e[4]["choices"][0]["delta"] == json::object());
  CHECK(e[4]["choices"][0]["finish_reason"] == "length");
  CHECK(e[5]["choices"][0]["delta"] == json{{"content", "b"}});
  CHECK_FALSE(e[5].contains("usage"));
  CHECK(e[6] == "[DONE]");
}

TEST_CASE("a whole chat response", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ResponseBuilder builder(plan, engine.tokenizer(), "chatcmpl-5", 5);
  builder.add(0, output({delta(0, "Hello!", {1, 2}, FinishReason::kStop)}, true, 9, 2));
  const json body = json::parse(builder.response_body());
  CHECK(body["object"] == "chat.completion");
  CHECK(body["choices"][0]["message"] == json{{"role", "assistant"}, {"content", "Hello!"}});
  CHECK(body["choices"][0]["finish_reason"] == "stop");
  CHECK(body["choices"][0]["logprobs"] == nullptr);
}

TEST_CASE("completions logprobs: the legacy shape, echo with null prompt entries", "[server][response]") {
  FakeEngine engine;
  const auto& tok = engine.tokenizer();
  const std::vector<std::int32_t> prompt = tok.encode("Hi", false);
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion, {{"prompt", prompt}, {"logprobs", 1}, {"echo", true}});
  ResponseBuilder builder(plan, tok, "cmpl-6", 5);
  // One generated token, whatever piece of text the fixture tokenizer makes it.
  const std::int32_t a = tok.encode(" there", false).front();
  const std::string piece = tok.decode(std::vector<std::int32_t>{a});
  REQUIRE(!piece.empty());
  SequenceDelta d = delta(0, piece, {a}, FinishReason::kLength);
  d.logprobs = {TokenLogprob{a, -0.25f, {{a, -0.25f}}}};
  builder.add(0, output({d}, true, 1, 1));
  const json body = json::parse(builder.response_body());
  const json& choice = body["choices"][0];
  CHECK(choice["text"] == "Hi" + piece);
  const json& lp = choice["logprobs"];
  const std::size_t n = prompt.size() + 1;
  REQUIRE(lp["tokens"].size() == n);
  CHECK(lp["tokens"].back() == piece);
  CHECK(lp["token_logprobs"][0] == nullptr);
  CHECK(lp["top_logprobs"][0] == nullptr);
  CHECK(lp["token_logprobs"].back() == -0.25);
  CHECK(lp["top_logprobs"].back() == json{{piece, -0.25}});
  CHECK(lp["text_offset"][0] == 0);
  CHECK(lp["text_offset"].back() == 2);  // the generated piece starts after "Hi"
}

TEST_CASE("streamed completion logprobs arrive with their tokens", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion, {{"prompt", "x"}, {"logprobs", 0}, {"stream", true}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-7", 5);
  SequenceDelta first = delta(0, "", {300});  // no text yet (held back), but a token with a logprob
  first.logprobs = {TokenLogprob{300, -1.5f, {}}};
  SequenceDelta second = delta(0, "ab", {301}, FinishReason::kLength);
  second.logprobs = {TokenLogprob{301, -std::numeric_limits<float>::infinity(), {}}};
  std::string sse = builder.add(0, output({first}, false, 1, 1));
  sse += builder.add(0, output({second}, true, 1, 2));
  const auto e = events(sse);
  REQUIRE(e.size() == 2);
  CHECK(e[0]["choices"][0]["text"] == "");
  CHECK(e[0]["choices"][0]["logprobs"]["token_logprobs"] == json{-1.5});
  CHECK(e[0]["choices"][0]["logprobs"]["top_logprobs"] == json{json::object()});
  CHECK(e[1]["choices"][0]["logprobs"]["token_logprobs"] == json{-9999.0});  // -inf is not JSON
  const std::int32_t ids[] = {300};
  CHECK(e[1]["choices"][0]["logprobs"]["text_offset"] ==
        json{static_cast<int>(engine.tokenizer().decode(ids).size())});
}

TEST_CASE("chat logprobs: content entries with bytes and top alternatives", "[server][response]") {
  FakeEngine engine;
  const auto& tok = engine.tokenizer();
  const GenerationPlan plan = plan_for(engine, ApiKind::kChat, {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                                {"logprobs", true}, {"top_logprobs", 2}});
  ResponseBuilder builder(plan, tok, "chatcmpl-8", 5);
  const std::int32_t a = tok.encode("Hi", false).front();
  const std::int32_t b = tok.encode("Yo", false).front();
  SequenceDelta d = delta(0, "Hi", {a}, FinishReason::kStop);
  d.logprobs = {TokenLogprob{a, -0.1f, {{a, -0.1f}, {b, -2.5f}}}};
  builder.add(0, output({d}, true, 9, 1));
  const json body = json::parse(builder.response_body());
  const json& content = body["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 1);
  const std::int32_t a_ids[] = {a};
  const std::int32_t b_ids[] = {b};
  const std::string a_text = tok.decode(a_ids);
  CHECK(content[0]["token"] == a_text);
  CHECK(content[0]["logprob"] == -0.1);  // the float's shortest form, not -0.10000000149…
  CHECK(content[0]["bytes"].size() == a_text.size());
  CHECK(content[0]["bytes"][0] == static_cast<unsigned char>(a_text[0]));
  REQUIRE(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["top_logprobs"][1]["token"] == tok.decode(b_ids));
  CHECK(content[0]["top_logprobs"][1]["logprob"] == -2.5);
}

TEST_CASE("stop_reason names a stop string or token, null for EOS", "[server][response]") {
  FakeEngine engine;
  const GenerationPlan plan = plan_for(engine, ApiKind::kCompletion, {{"prompt", {"a", "b"}}});
  ResponseBuilder builder(plan, engine.tokenizer(), "cmpl-9", 5);
  builder.add(0, output({delta(0, "x", {7}, FinishReason::kStop)}, true, 1, 1));  // EOS: stop_token_id -1
  auto user_stop = output({delta(0, "y", {8}, FinishReason::kStop)}, true, 1, 1);
  user_stop.sequences[0].stop_token_id = 8;
  builder.add(1, user_stop);
  const json body = json::parse(builder.response_body());
  CHECK(body["choices"][0]["stop_reason"] == nullptr);
  CHECK(body["choices"][1]["stop_reason"] == 8);
}

TEST_CASE("chat tool calls: the message's tool_calls, and streamed as a name chunk then the arguments as written",
          "[server][response][tool_calls]") {
  FakeEngine engine;
  const json tools = {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}};
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools}};
  // Cut inside the marker (nothing of it reaches the client early), then inside the arguments.
  const std::string first = "Checking.<too", second = "l_call>{\"name\": \"get_weather\", \"arguments\": {\"ci",
                    third = "ty\": \"Oslo\"}}</tool_call>";

  const GenerationPlan whole = parse_generation_request(ApiKind::kChat, body.dump(), engine, {ToolCallFormat::kHermes, ""});
  ResponseBuilder builder(whole, engine.tokenizer(), "chatcmpl-1", 7);
  builder.add(0, output({delta(0, first, {1})}, false, 4, 1));
  builder.add(0, output({delta(0, second, {2})}, false, 4, 2));
  builder.add(0, output({delta(0, third, {3}, FinishReason::kStop)}, true, 4, 3));
  const json response = json::parse(builder.response_body());
  const json& choice = response["choices"][0];
  CHECK(choice["finish_reason"] == "tool_calls");
  CHECK(choice["message"]["content"] == "Checking.");
  REQUIRE(choice["message"]["tool_calls"].size() == 1);
  const json& call = choice["message"]["tool_calls"][0];
  CHECK(call["type"] == "function");
  CHECK(call["id"].get<std::string>().starts_with("call_"));
  CHECK(call["function"] == json({{"name", "get_weather"}, {"arguments", R"({"city": "Oslo"})"}}));

  json streamed_body = body;
  streamed_body["stream"] = true;
  const GenerationPlan stream =
      parse_generation_request(ApiKind::kChat, streamed_body.dump(), engine, {ToolCallFormat::kHermes, ""});
  ResponseBuilder streamer(stream, engine.tokenizer(), "chatcmpl-2", 7);
  std::vector<json> chunks = events(streamer.add(0, output({delta(0, first, {1})}, false, 4, 1)));
  REQUIRE(chunks.size() == 1);
  CHECK(chunks[0]["choices"][0]["delta"] == json({{"content", "Checking."}}));
  chunks = events(streamer.add(0, output({delta(0, second, {2})}, false, 4, 2)));
  REQUIRE(chunks.size() == 2);
  const json& named = chunks[0]["choices"][0];
  CHECK(named["delta"]["tool_calls"][0]["index"] == 0);
  CHECK(named["delta"]["tool_calls"][0]["id"] != call["id"]);  // each response's ids are fresh
  CHECK(named["delta"]["tool_calls"][0]["type"] == "function");
  CHECK(named["delta"]["tool_calls"][0]["function"] == json({{"name", "get_weather"}, {"arguments", ""}}));
  CHECK(named["finish_reason"].is_null());
  CHECK(chunks[1]["choices"][0]["delta"] ==
        json({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", R"({"ci)"}}}}}}}));
  chunks = events(streamer.add(0, output({delta(0, third, {3}, FinishReason::kStop)}, true, 4, 3)));
  REQUIRE(chunks.size() == 1);
  const json& arguments = chunks[0]["choices"][0];
  CHECK(arguments["delta"] ==
        json({{"tool_calls", {{{"index", 0}, {"function", {{"arguments", R"(ty": "Oslo"})"}}}}}}}));
  CHECK(arguments["finish_reason"] == "tool_calls");
}

TEST_CASE("chat tool calls: with parallel_tool_calls false the pieces of a second call are dropped",
          "[server][response][tool_calls]") {
  FakeEngine engine;
  const json tools = {{{"type", "function"}, {"function", {{"name", "a"}}}},
                      {{"type", "function"}, {"function", {{"name", "b"}}}}};
  const json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"tools", tools},
                     {"parallel_tool_calls", false}, {"stream", true}};
  const GenerationPlan stream = parse_generation_request(ApiKind::kChat, body.dump(), engine, {ToolCallFormat::kMistral, ""});
  ResponseBuilder streamer(stream, engine.tokenizer(), "chatcmpl-3", 7);
  const std::vector<json> chunks = events(streamer.add(
      0, output({delta(0, R"([TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{"y": 2})", {1}, FinishReason::kStop)},
                true, 4, 1)));
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "a");
  CHECK(chunks[1]["choices"][0]["delta"]["tool_calls"][0] ==
        json({{"index", 0}, {"function", {{"arguments", R"({"x": 1})"}}}}));
  CHECK(chunks[1]["choices"][0]["finish_reason"] == "tool_calls");
}
