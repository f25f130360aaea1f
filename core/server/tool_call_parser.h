#pragma once
// Tool calls in a chat model's output (server.tool_call_parser, vLLM's names; docs/server.md "Tool
// calling"): the text a model writes to call a function, parsed into OpenAI's tool_calls. The parse is
// incremental, so a stream carries content as it comes and each call once it is complete; a piece that
// may be the start of a call is held back until the next piece shows what it is, or the end. Streamed and
// whole outputs parse the same way. Output that does not parse as a call stays content, verbatim.
//   hermes       Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, any number; the
//                text before the first is content (an unterminated last block is parsed to the end).
//   llama3_json  Llama 3.x: the output (after an optional <|python_tag|>) is {"name": ..., "parameters":
//                {...}}, several separated by ';'; an output that does not start with '{' is content.
//   mistral      Mistral: [TOOL_CALLS] followed by a JSON list of {"name": ..., "arguments": {...}}; the
//                text before it is content.
// With calls_forced (tool_choice required or a named function: the output was constrained to calls)
// mistral's list may come without [TOOL_CALLS], a special token the constraint cannot write.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagedllm::server {

enum class ToolCallFormat { kNone, kHermes, kLlama3Json, kMistral };

// "none", "hermes", "llama3_json", "mistral"; nullopt for another name.
std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name);

struct ParsedToolCall {
  std::string name;
  std::string arguments;  // a JSON object's text, as OpenAI's function.arguments
};

class ToolCallParser {
 public:
  struct Parts {
    std::string content;
    std::vector<ParsedToolCall> calls;
  };

  ToolCallParser(ToolCallFormat format, bool calls_forced);

  // The next piece of the output: the content and the calls it (with what was held back) completes.
  Parts add(std::string_view text);
  // The end of the output: what was held back.
  Parts finish();

  // Whether any call was parsed so far.
  bool found_calls() const { return found_calls_; }

 private:
  enum class State {
    kLeading,  // llama3_json: whether the output starts with a call is not known yet
    kText,     // content, watching for the start of a call
    kCall,     // inside a call (after its opening marker)
    kPlain,    // content to the end
  };
  void settle(Parts& parts, bool at_end);
  // Hands text outside calls to `parts`; whitespace between or after calls is dropped.
  void emit_content(Parts& parts, std::string_view text);
  bool settle_leading(bool at_end);
  bool settle_text(Parts& parts, bool at_end);
  bool settle_call(Parts& parts, bool at_end);
  void add_call(Parts& parts, ParsedToolCall call);

  ToolCallFormat format_;
  State state_;
  bool found_calls_ = false;
  std::string held_;
  std::string opening_;  // the marker the call in progress followed: content again if the call does not parse
  bool content_after_call_ = false;  // content came after the last call (whitespace is content again)
  std::string pending_space_;        // whitespace right after a call, kept until text shows it is content
};

}  // namespace pagedllm::server
