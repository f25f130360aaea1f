// Tool calls parsed from chat output (core/server/tool_call_parser.h): the same content and calls however
// the text arrives (cut once at every byte, and byte by byte), each format's rules, and output that does not
// parse staying content verbatim.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/server/tool_call_parser.h"

using namespace pagedllm::server;

namespace {

struct Parsed {
  std::string content;
  std::vector<std::string> calls;  // "name arguments"
  bool operator==(const Parsed&) const = default;
};

Parsed parse(ToolCallFormat format, const std::string& text, const std::vector<std::size_t>& cuts,
             bool forced = false) {
  ToolCallParser parser(format, forced);
  Parsed out;
  auto take = [&](ToolCallParser::Parts&& parts) {
    out.content += parts.content;
    for (const ParsedToolCall& call : parts.calls) out.calls.push_back(call.name + " " + call.arguments);
  };
  std::size_t from = 0;
  for (std::size_t cut : cuts) {
    take(parser.add(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  take(parser.add(std::string_view(text).substr(from)));
  take(parser.finish());
  return out;
}

void check_every_cut(ToolCallFormat format, const std::string& text, const Parsed& expected, bool forced = false) {
  INFO(text);
  CHECK(parse(format, text, {}, forced) == expected);
  std::vector<std::size_t> bytes;
  for (std::size_t cut = 1; cut < text.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK(parse(format, text, {cut}, forced) == expected);
    bytes.push_back(cut);
  }
  CHECK(parse(format, text, bytes, forced) == expected);
}

}  // namespace

namespace Catch {
template <>
struct StringMaker<Parsed> {
  static std::string convert(const Parsed& parsed) {
    std::string out = "content: \"" + parsed.content + "\", calls:";
    for (const std::string& call : parsed.calls) out += " [" + call + "]";
    return out;
  }
};
}  // namespace Catch

TEST_CASE("tool call formats by their vLLM names", "[tool_calls]") {
  CHECK(parse_tool_call_format("none") == ToolCallFormat::kNone);
  CHECK(parse_tool_call_format("hermes") == ToolCallFormat::kHermes);
  CHECK(parse_tool_call_format("llama3_json") == ToolCallFormat::kLlama3Json);
  CHECK(parse_tool_call_format("mistral") == ToolCallFormat::kMistral);
  CHECK_FALSE(parse_tool_call_format("qwen").has_value());
}

TEST_CASE("hermes: content before the calls, each <tool_call> block a call", "[tool_calls]") {
  check_every_cut(ToolCallFormat::kHermes,
                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                  "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                  {"Let me check.\n", {R"(get_weather {"city":"Paris"})", "get_time {}"}});
  // Arguments keep their key order; arguments given as a JSON string are taken too.
  check_every_cut(ToolCallFormat::kHermes,
                  R"(<tool_call>{"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}</tool_call>)",
                  {"", {R"(f {"b":1,"a":[2]})"}});
  // An unterminated last block (max_tokens) is parsed to the end.
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {"x": 1}})",
                  {"", {R"(f {"x":1})"}});
}

TEST_CASE("hermes: what does not parse as a call stays content, verbatim", "[tool_calls]") {
  for (const std::string text : {"No tools needed: 1 < 2 and <tool> is not a tag.",
                                 "<tool_call>{\"name\": \"f\", \"arguments\": {\"x\": }</tool_call> after",
                                 "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>", "<tool_call>{\"name\": "}) {
    check_every_cut(ToolCallFormat::kHermes, text, {text, {}});
  }
  // A call, then a block that does not parse: the call stays, the block is content.
  check_every_cut(ToolCallFormat::kHermes,
                  "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>oops</tool_call>",
                  {"\n<tool_call>oops</tool_call>", {"f {}"}});
}

TEST_CASE("llama3_json: an output that is a call, optionally after <|python_tag|>, several split by semicolons",
          "[tool_calls]") {
  check_every_cut(ToolCallFormat::kLlama3Json, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})",
                  {"", {R"(get_weather {"city":"Oslo"})"}});
  check_every_cut(ToolCallFormat::kLlama3Json,
                  R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"k": "}"}})",
                  {"", {"a {}", R"(b {"k":"}"})"}});
  check_every_cut(ToolCallFormat::kLlama3Json, R"(  {"name": "a", "parameters": {"s": "x\"y"}})",
                  {"", {R"(a {"s":"x\"y"})"}});
}

TEST_CASE("llama3_json: text, or JSON that is not a call, is content", "[tool_calls]") {
  for (const std::string text : {"The weather is fine. {\"name\": \"a\", \"parameters\": {}}", R"({"answer": 42})",
                                 R"({"name": "a", "parameters": )", "<|python", "  "}) {
    check_every_cut(ToolCallFormat::kLlama3Json, text, {text, {}});
  }
  check_every_cut(ToolCallFormat::kLlama3Json, R"({"name": "a", "parameters": {}} and then words)",
                  {" and then words", {"a {}"}});
}

TEST_CASE("mistral: the TOOL_CALLS marker and a JSON list of calls, the text before it content", "[tool_calls]") {
  check_every_cut(ToolCallFormat::kMistral,
                  R"(Checking.[TOOL_CALLS] [{"name": "a", "arguments": {"q": [1, {"r": 2}]}}, {"name": "b", "arguments": {}}])",
                  {"Checking.", {R"(a {"q":[1,{"r":2}]})", "b {}"}});
  // Forced (constrained) output is the list alone: the marker is a special token no constraint writes.
  check_every_cut(ToolCallFormat::kMistral, R"([{"name": "a", "arguments": {}}])", {"", {"a {}"}}, true);
}

TEST_CASE("mistral: a list that is not calls, or no list, is content", "[tool_calls]") {
  for (const std::string text : {R"([TOOL_CALLS] [{"name": "a"}, 3])", "[TOOL_CALLS] not a list",
                                 R"([TOOL_CALLS] [{"name": "a", "arguments": {}})", "[TOOL_CALL", R"([1, 2])"}) {
    check_every_cut(ToolCallFormat::kMistral, text, {text, {}});
  }
}
