// Tool calls parsed from hostile model output (core/server/tool_call_parser.h): the first byte picks the
// format (bits 0, 1 and 3) and whether calls were forced (bit 2), the second where the text is cut, the rest
// is the output; glm45's and qwen3_coder's values are typed by a fixed request's tool schemas. Properties:
// the parse never throws or crashes; the text fed whole, cut once, and byte by byte gives the same content
// and calls (a stream and a whole response agree); every call has a name, and its arguments (the pieces joined)
// are a JSON object's text or, streamed as the model wrote them, start as one.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/server/tool_call_parser.h"

using namespace pagedllm::server;

namespace {

struct Parsed {
  std::string content;
  std::vector<std::string> calls;
  bool operator==(const Parsed&) const = default;
};

Parsed parse(ToolCallFormat format, bool forced, std::string_view text, const std::vector<std::size_t>& cuts) {
  static const nlohmann::ordered_json tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {
    "name": "f", "parameters": {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"},
    "o": {"type": "object"}, "b": {"type": ["boolean", "null"]}}}}}])");
  ToolCallParser parser(format, forced, tools);
  Parsed out;
  auto take = [&](ToolCallParser::Parts&& parts) {
    out.content += parts.content;
    for (const ToolCallPiece& piece : parts.calls) {
      if (piece.opens) {
        if (piece.name.empty()) __builtin_trap();
        out.calls.push_back(piece.name + '\0' + piece.arguments);
      } else {
        if (out.calls.empty() || piece.arguments.empty()) __builtin_trap();
        out.calls.back() += piece.arguments;
      }
    }
  };
  std::size_t from = 0;
  for (const std::size_t cut : cuts) {
    take(parser.add(text.substr(from, cut - from)));
    from = cut;
  }
  take(parser.add(text.substr(from)));
  take(parser.finish());
  for (const std::string& call : out.calls) {
    const std::string_view arguments = std::string_view(call).substr(call.find('\0') + 1);
    if (!arguments.starts_with('{')) __builtin_trap();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  constexpr ToolCallFormat kFormats[] = {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json,
                                         ToolCallFormat::kMistral, ToolCallFormat::kNone,
                                         ToolCallFormat::kGlm45, ToolCallFormat::kQwen3Coder,
                                         ToolCallFormat::kGlm45, ToolCallFormat::kQwen3Coder};
  const ToolCallFormat format = kFormats[(data[0] & 3) | ((data[0] >> 1) & 4)];
  const bool forced = (data[0] & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 2), size - 2);
  const Parsed whole = parse(format, forced, text, {});
  std::vector<std::size_t> once;
  if (!text.empty()) once.push_back(data[1] % text.size());
  if (!(parse(format, forced, text, once) == whole)) __builtin_trap();
  std::vector<std::size_t> bytes;
  for (std::size_t cut = 1; cut < text.size(); ++cut) bytes.push_back(cut);
  if (!(parse(format, forced, text, bytes) == whole)) __builtin_trap();
  return 0;
}
