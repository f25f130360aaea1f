#pragma once
// Tool calls written as XML inside <tool_call> blocks (ToolCallParser hands these formats here; docs/server.md
// "Tool calling"), their argument values typed by the request's tool schemas:
//   glm45        GLM-4.5/4.6/4.7: <tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//                (4.7 writes no newlines); a value is the text between its tags, stripped of whitespace.
//   qwen3_coder  Qwen3-Coder, Qwen3.5, Nemotron 3: <tool_call>\n<function=name>\n<parameter=k>\nv\n</parameter>
//                \n</function>\n</tool_call>; a value loses one newline at each end, and ends at </parameter>,
//                or at the next <parameter= or </function> when the model leaves it open (as vLLM reads it).
// A value is one of the strings the parameter's schema lists (enum, const) when it is that one but for the
// whitespace around it; else a JSON string as written when the schema admits a string (or names no type,
// or the parameter is not in it), null when it is "null" and the schema admits null, and otherwise the text
// parsed as JSON (Python's True/False/None taken too), or a string when it does not parse — vLLM's rules. The
// arguments are the JSON object of the values in the order written, as Python's json.dumps writes it.
// Streaming: a call opens with "{" once its name is read; a string value (its schema admits a string and
// lists no values, nor null) follows as it is written, any other value as one piece once it has ended;
// and "}" when the call closes; output that ends inside a call (max_tokens) closes it
// with what was written. Text before a call is content; a block that is no call (no valid name) is content
// verbatim from its <tool_call> to the end.

#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/server/tool_call_parser.h"

namespace pagedllm::server {

class XmlToolCallParser {
 public:
  // `tool_definitions`: the request's tools as ChatTools::definitions holds them (null when none).
  XmlToolCallParser(ToolCallFormat format, const nlohmann::ordered_json& tool_definitions);

  ToolCallParser::Parts add(std::string_view text);
  ToolCallParser::Parts finish();
  bool found_calls() const { return found_calls_; }

 private:
  enum class State {
    kText,       // content, watching for <tool_call>
    kName,       // after <tool_call>: the function's name
    kArguments,    // inside a call: its parameters, up to the call's end
    kStringValue,  // a parameter's value that is a string, handed on as it comes
    kBlockEnd,   // qwen3_coder: after </function>, up to </tool_call>, dropped
    kPlain,      // content to the end
  };
  void settle(ToolCallParser::Parts& parts, bool at_end);
  bool settle_text(ToolCallParser::Parts& parts, bool at_end);
  bool settle_name(ToolCallParser::Parts& parts, bool at_end);
  bool settle_arguments(ToolCallParser::Parts& parts, bool at_end);
  bool settle_string_value(ToolCallParser::Parts& parts, bool at_end);
  bool settle_block_end(bool at_end);
  void emit_content(ToolCallParser::Parts& parts, std::string_view text);
  // The schema of the open call's parameter `key`; nullptr when its function or it is not in the tools.
  const nlohmann::ordered_json* parameter_schema(std::string_view key) const;
  // The text of the arguments up to a parameter's value: its separator and key.
  std::string parameter_start(std::string_view key);
  // One parameter of the open call, as the next piece of its arguments.
  void emit_parameter(ToolCallParser::Parts& parts, std::string_view key, std::string_view value);
  // When the parameter's value is a string whatever it says: its start handed on, the value to stream.
  bool start_string_value(ToolCallParser::Parts& parts, std::string_view key);
  void close_call(ToolCallParser::Parts& parts);

  ToolCallFormat format_;
  // Each function's parameter schemas by name (its "properties").
  std::map<std::string, nlohmann::ordered_json, std::less<>> parameters_;
  State state_ = State::kText;
  std::string held_;
  std::string call_name_;     // the open call's function
  bool first_parameter_ = true;
  bool value_leading_ = false;  // kStringValue: the format's whitespace before the value may still come
  bool found_calls_ = false;
  bool content_after_call_ = false;  // content came after the last call (whitespace is content again)
  std::string pending_space_;        // whitespace right after a call, kept until text shows it is content
};

}  // namespace pagedllm::server
