// Tool calls parsed from chat output (core/server/tool_call_parser.h): the same content and calls however
// the text arrives (cut once at every byte, and byte by byte), each format's rules, and output that does not
// parse staying content verbatim.

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/server/tool_call_parser.h"

using namespace pagedllm::server;

namespace {

struct Parsed {
  std::string content;
  std::vector<std::string> calls;  // "name arguments"
  bool operator==(const Parsed&) const = default;
};

Parsed parse(ToolCallFormat format, const std::string& text, const std::vector<std::size_t>& cuts,
             bool forced = false, const nlohmann::ordered_json& tools = nullptr) {
  ToolCallParser parser(format, forced, tools);
  Parsed out;
  auto take = [&](ToolCallParser::Parts&& parts) {
    out.content += parts.content;
    for (const ToolCallPiece& piece : parts.calls) {
      if (piece.opens) {
        out.calls.push_back(piece.name + " " + piece.arguments);
      } else {
        REQUIRE_FALSE(out.calls.empty());
        out.calls.back() += piece.arguments;
      }
    }
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

void check_every_cut(ToolCallFormat format, const std::string& text, const Parsed& expected, bool forced = false,
                     const nlohmann::ordered_json& tools = nullptr) {
  INFO(text);
  CHECK(parse(format, text, {}, forced, tools) == expected);
  std::vector<std::size_t> bytes;
  for (std::size_t cut = 1; cut < text.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK(parse(format, text, {cut}, forced, tools) == expected);
    bytes.push_back(cut);
  }
  CHECK(parse(format, text, bytes, forced, tools) == expected);
}

// The tools of a request, as ChatTools::definitions holds them: each parameter's schema types its value.
const nlohmann::ordered_json kTypedTools = nlohmann::ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "unit": {"enum": ["C", "F"]}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "where": {"type": "object"}, "hours": {"type": "array", "items": {"type": "number"}},
    "note": {"type": ["string", "null"]}, "code": {"type": "string"}, "ratio": {"anyOf": [{"type": "number"},
    {"type": "null"}]}, "level": {"enum": [1, 2, 3]}, "free": {"description": "no type"}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
])");

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
  CHECK(parse_tool_call_format("glm45") == ToolCallFormat::kGlm45);
  CHECK(parse_tool_call_format("qwen3_coder") == ToolCallFormat::kQwen3Coder);
  CHECK_FALSE(parse_tool_call_format("qwen").has_value());
}

TEST_CASE("hermes: content before the calls, each <tool_call> block a call", "[tool_calls]") {
  // Streamed calls' arguments are the model's text, as written.
  check_every_cut(ToolCallFormat::kHermes,
                  "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                  "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                  {"Let me check.\n", {R"(get_weather {"city": "Paris"})", "get_time {}"}});
  // Arguments given as a JSON string, or keys in another order: the whole object is parsed, key order kept.
  check_every_cut(ToolCallFormat::kHermes,
                  R"(<tool_call>{"name": "f", "arguments": "{\"b\": 1, \"a\": [2]}"}</tool_call>)",
                  {"", {R"(f {"b":1,"a":[2]})"}});
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"arguments": {"b": 1, "a": 2}, "name": "f"}</tool_call>)",
                  {"", {R"(f {"b":1,"a":2})"}});
  // A call without arguments has "{}"; an unterminated last block (max_tokens) is parsed to the end.
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f"}</tool_call>)", {"", {"f {}"}});
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {"x": 1}})", {"", {R"(f {"x": 1})"}});
}

TEST_CASE("hermes: once the name and the arguments' brace are written, a call streams as written", "[tool_calls]") {
  // Cut off inside the arguments (max_tokens): what was written. Malformed arguments: as written, up to the
  // bracket that closes them or </tool_call>; what follows in the block is dropped.
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {"s": "a<b", "n": [1, )",
                  {"", {R"(f {"s": "a<b", "n": [1, )"}});
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {"x": }</tool_call> after)",
                  {" after", {R"(f {"x": })"}});
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {"x": 1</tool_call>)",
                  {"", {R"(f {"x": 1)"}});
  check_every_cut(ToolCallFormat::kHermes, R"(<tool_call>{"name": "f", "arguments": {}, "id": 3}</tool_call>x)",
                  {"x", {"f {}"}});
}

TEST_CASE("hermes: arguments come in pieces as they are written", "[tool_calls]") {
  ToolCallParser parser(ToolCallFormat::kHermes, false);
  std::vector<ToolCallPiece> pieces;
  for (const std::string_view token : {"<tool_call>", "{\"name\": \"", "get_weather", "\", \"arguments\": {\"",
                                       "city", "\": \"", "Par", "is\"}}", "</tool_call>"}) {
    for (ToolCallPiece& piece : parser.add(token).calls) pieces.push_back(std::move(piece));
  }
  REQUIRE(parser.finish().calls.empty());
  REQUIRE(pieces.size() == 6);
  CHECK(pieces[0].opens);
  CHECK(pieces[0].name == "get_weather");
  CHECK(pieces[0].arguments == "");
  const std::vector<std::string> fragments = {"{\"", "city", "\": \"", "Par", "is\"}"};
  for (std::size_t i = 1; i < pieces.size(); ++i) {
    CHECK_FALSE(pieces[i].opens);
    CHECK(pieces[i].arguments == fragments[i - 1]);
  }
}

TEST_CASE("hermes: what does not parse as a call stays content, verbatim", "[tool_calls]") {
  for (const std::string text : {"No tools needed: 1 < 2 and <tool> is not a tag.",
                                 "<tool_call>{\"name\": get_weather}</tool_call> after",
                                 "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>", "<tool_call>{\"name\": ",
                                 "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>"}) {
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
                  {"", {R"(get_weather {"city": "Oslo"})"}});
  check_every_cut(ToolCallFormat::kLlama3Json,
                  R"(<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": {"k": "}"}})",
                  {"", {"a {}", R"(b {"k": "}"})"}});
  check_every_cut(ToolCallFormat::kLlama3Json, R"(  {"name": "a", "parameters": {"s": "x\"y"}, "extra": [1]})",
                  {"", {R"(a {"s": "x\"y"})"}});
  check_every_cut(ToolCallFormat::kLlama3Json, R"({"parameters": {"b": 1}, "name": "a"})", {"", {R"(a {"b":1})"}});
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
                  {"Checking.", {R"(a {"q": [1, {"r": 2}]})", "b {}"}});
  // Forced (constrained) output is the list alone: the marker is a special token no constraint writes.
  check_every_cut(ToolCallFormat::kMistral, R"([{"name": "a", "arguments": {}}])", {"", {"a {}"}}, true);
  // A list cut off after a call (max_tokens): the calls written.
  check_every_cut(ToolCallFormat::kMistral, R"([TOOL_CALLS] [{"name": "a", "arguments": {}})", {"", {"a {}"}});
}

TEST_CASE("mistral v11: each call as TOOL_CALLS, its name, ARGS and its arguments", "[tool_calls]") {
  check_every_cut(ToolCallFormat::kMistral,
                  R"(Checking.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}[TOOL_CALLS]get_time[ARGS]{})",
                  {"Checking.", {R"(get_weather {"city": "Paris", "days": 2})", "get_time {}"}});
  check_every_cut(ToolCallFormat::kMistral, R"([TOOL_CALLS]f[ARGS] {"s": "]"} Done.)", {" Done.", {R"(f {"s": "]"})"}});
  for (const std::string text : {"[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]f[ARGS]", "[TOOL_CALLS]f[ARG",
                                 "[TOOL_CALLS]f[ARGS][1]", "[TOOL_CALLS][ARGS]{}"}) {
    check_every_cut(ToolCallFormat::kMistral, text, {text, {}});
  }
}

TEST_CASE("mistral: a list that is not calls, or no list, is content", "[tool_calls]") {
  for (const std::string text : {R"([TOOL_CALLS] [3, {"name": "a"}])", "[TOOL_CALLS] not a list", "[TOOL_CALLS]  ",
                                 "[TOOL_CALL", R"([1, 2])"}) {
    check_every_cut(ToolCallFormat::kMistral, text, {text, {}});
  }
  // After a call, what is no call ends the calls and is content.
  check_every_cut(ToolCallFormat::kMistral, R"([TOOL_CALLS] [{"name": "a"}, 3])", {" 3]", {"a {}"}});
}

TEST_CASE("glm45: each <tool_call> block a call with its name on the first line and its values typed by the schema",
          "[tool_calls]") {
  // As GLM-4.5/4.6's template writes calls (strings bare, other values as JSON), and 4.7's without newlines.
  check_every_cut(ToolCallFormat::kGlm45,
                  "Let me check.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
                  "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>\n<tool_call>get_time\n</tool_call>",
                  {"Let me check.\n", {R"(get_weather {"city": "Paris", "days": 2})", "get_time {}"}}, false, kTypedTools);
  check_every_cut(ToolCallFormat::kGlm45,
                  "<tool_call>get_weather<arg_key>where</arg_key><arg_value>{\"lat\": 1.5, \"tags\": [\"a\"]}"
                  "</arg_value><arg_key>metric</arg_key><arg_value>True</arg_value><arg_key>code</arg_key>"
                  "<arg_value>007</arg_value></tool_call>",
                  {"", {R"(get_weather {"where": {"lat": 1.5, "tags": ["a"]}, "metric": true, "code": "007"})"}}, false,
                  kTypedTools);
  // A value that does not parse as its type stays a string; one of no typed parameter (or function) stays
  // the text; null where the schema admits it.
  check_every_cut(ToolCallFormat::kGlm45,
                  "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>two</arg_value>\n<arg_key>free"
                  "</arg_key>\n<arg_value>42</arg_value>\n<arg_key>extra</arg_key>\n<arg_value>[1]</arg_value>\n"
                  "<arg_key>note</arg_key>\n<arg_value>null</arg_value>\n<arg_key>ratio</arg_key>\n<arg_value>0.5"
                  "</arg_value>\n<arg_key>level</arg_key>\n<arg_value>3</arg_value>\n</tool_call>",
                  {"", {R"(get_weather {"days": "two", "free": "42", "extra": "[1]", "note": null, "ratio": 0.5, "level": 3})"}},
                  false, kTypedTools);
  check_every_cut(ToolCallFormat::kGlm45, "<tool_call>unknown_tool\n<arg_key>n</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
                  {"", {R"(unknown_tool {"n": "1"})"}}, false, kTypedTools);
}

TEST_CASE("glm45: output cut inside a call closes it with what was written and a block with no name is content",
          "[tool_calls]") {
  check_every_cut(ToolCallFormat::kGlm45, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Par",
                  {"", {R"(get_weather {"city": "Par"})"}}, false, kTypedTools);
  check_every_cut(ToolCallFormat::kGlm45, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n<arg_k",
                  {"", {R"(get_weather {"city": "Oslo"})"}}, false, kTypedTools);
  // A key without its value ends the call; the rest of its block is dropped, what follows the block is content.
  check_every_cut(ToolCallFormat::kGlm45,
                  "<tool_call>get_weather\n<arg_key>city</arg_key>oops</tool_call> Done.",
                  {" Done.", {"get_weather {}"}}, false, kTypedTools);
  for (const std::string text : {"<tool_call>\n<arg_key>k</arg_key></tool_call>", "<tool_call>get weather\n</tool_call>",
                                 "<tool_call>get_weather", "<tool_call>", "No call: <tool_ca"}) {
    check_every_cut(ToolCallFormat::kGlm45, text, {text, {}}, false, kTypedTools);
  }
}

TEST_CASE("qwen3_coder: <function=name> and <parameter=key> blocks with values typed by the schema", "[tool_calls]") {
  // As Qwen3-Coder's template writes calls: a value between newlines, strings bare, others as JSON.
  check_every_cut(ToolCallFormat::kQwen3Coder,
                  "I will look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Jose\n</parameter>\n"
                  "<parameter=days>\n2\n</parameter>\n<parameter=hours>\n[1, 2.5]\n</parameter>\n</function>\n"
                  "</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
                  {"I will look.\n", {R"(get_weather {"city": "San Jose", "days": 2, "hours": [1, 2.5]})", "get_time {}"}},
                  false, kTypedTools);
  // A string keeps its inner newlines and spaces; only one newline at each end is the format's.
  check_every_cut(ToolCallFormat::kQwen3Coder,
                  "<tool_call>\n<function=get_weather>\n<parameter=city>\n\n  two\nlines \n\n</parameter>\n"
                  "</function>\n</tool_call>",
                  {"", {R"(get_weather {"city": "\n  two\nlines \n"})"}}, false, kTypedTools);
  // A parameter left open ends at the next one or at </function>, as vLLM reads it.
  check_every_cut(ToolCallFormat::kQwen3Coder,
                  "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n3\n</function>\n</tool_call>",
                  {"", {R"(get_weather {"city": "Oslo", "days": 3})"}}, false, kTypedTools);
  // Whitespace around a value the schema lists (as xgrammar's qwen_xml pads a forced enum) is not part of it.
  check_every_cut(ToolCallFormat::kQwen3Coder,
                  "<tool_call>\n<function=get_weather>\n<parameter=unit>\n  F \t\r\n</parameter>\n<parameter=days>"
                  " 4\t</parameter>\n</function>\n</tool_call>",
                  {"", {R"(get_weather {"unit": "F", "days": 4})"}}, false, kTypedTools);
  // Cut off inside a value (max_tokens): the call closes with what was written.
  check_every_cut(ToolCallFormat::kQwen3Coder, "<tool_call>\n<function=get_weather>\n<parameter=city>\nOs",
                  {"", {R"(get_weather {"city": "Os"})"}}, false, kTypedTools);
  for (const std::string text : {"<tool_call>\n{\"name\": \"f\"}\n</tool_call>", "<tool_call>\n<function=get weather>",
                                 "<tool_call>\n<func", "a < b"}) {
    check_every_cut(ToolCallFormat::kQwen3Coder, text, {text, {}}, false, kTypedTools);
  }
}

TEST_CASE("qwen3_coder and glm45: a string value comes in pieces as it is written and others whole", "[tool_calls]") {
  // The newline before </parameter> is held until it shows it is the format's, not the value's.
  ToolCallParser parser(ToolCallFormat::kQwen3Coder, false, kTypedTools);
  std::vector<std::string> arguments;
  for (const std::string_view token : {"<tool_call>\n<function=get_weather>\n<parameter=city>\n", "San", " Jo", "se\n",
                                       "</parameter>\n<parameter=days>\n", "2", "\n</parameter>\n</function>",
                                       "\n</tool_call>"}) {
    for (ToolCallPiece& piece : parser.add(token).calls) arguments.push_back(std::move(piece.arguments));
  }
  REQUIRE(parser.finish().calls.empty());
  CHECK(arguments == std::vector<std::string>{"{", "\"city\": \"", "San", " Jo", "se", "\"", ", \"days\": 2", "}"});
  // glm45: a value's whitespace at either end is the format's; inside it, the value's.
  ToolCallParser glm(ToolCallFormat::kGlm45, false, kTypedTools);
  arguments.clear();
  for (const std::string_view token : {"<tool_call>get_weather\n<arg_key>city</arg_key><arg_value> ", "New ",
                                       "York", "\n</arg_value></tool_call>"}) {
    for (ToolCallPiece& piece : glm.add(token).calls) arguments.push_back(std::move(piece.arguments));
  }
  CHECK(arguments == std::vector<std::string>{"{", "\"city\": \"", "New", " York", "\"", "}"});
}

TEST_CASE("the tool-call format recognised in real models' chat templates", "[tool_calls]") {
  // llama.cpp's collection of real templates, unpacked by scripts/setup.sh.
  const std::filesystem::path templates = std::filesystem::path(PAGEDLLM_SOURCE_DIR) / ".deps" / "chat-templates";
  auto format_of = [&](const std::string& name) {
    std::ifstream file(templates / name, std::ios::binary);
    REQUIRE(file);
    return tool_call_format_of_template(
        std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()));
  };
  for (const std::string name : {"Qwen-Qwen2.5-7B-Instruct.jinja", "Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja",
                                 "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"}) {
    INFO(name);
    CHECK(format_of(name) == ToolCallFormat::kHermes);
  }
  for (const std::string name : {"meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
                                 "meta-llama-Llama-3.3-70B-Instruct.jinja"}) {
    INFO(name);
    CHECK(format_of(name) == ToolCallFormat::kLlama3Json);
  }
  for (const std::string name : {"mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                 "Mistral-Small-3.2-24B-Instruct-2506.jinja", "unsloth-mistral-Devstral-Small-2507.jinja"}) {
    INFO(name);
    CHECK(format_of(name) == ToolCallFormat::kMistral);
  }
  for (const std::string name : {"GLM-4.6.jinja", "GLM-4.7-Flash.jinja"}) {
    INFO(name);
    CHECK(format_of(name) == ToolCallFormat::kGlm45);
  }
  for (const std::string name : {"Qwen3-Coder.jinja", "Qwen3.5-4B.jinja", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja"}) {
    INFO(name);
    CHECK(format_of(name) == ToolCallFormat::kQwen3Coder);
  }
  // Templates without tool calls, or with a format no parser reads (DeepSeek's own markers).
  for (const std::string name : {"google-gemma-2-2b-it.jinja", "microsoft-Phi-3.5-mini-instruct.jinja",
                                 "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "HuggingFaceTB-SmolLM3-3B.jinja"}) {
    INFO(name);
    CHECK_FALSE(format_of(name).has_value());
  }
  // Two formats' markers: which one the model writes is not known.
  CHECK_FALSE(tool_call_format_of_template("{{ '<tool_call>' }}{{ '[TOOL_CALLS]' }}").has_value());
}
