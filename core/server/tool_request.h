#pragma once
// The tool-calling fields of a chat request (docs/server.md "Tool calling"): `tools` (functions with a
// name, a description and a JSON schema of their parameters), `tool_choice` ("auto", "none",
// "required" or {"type": "function", "function": {"name": ...}}) and `parallel_tool_calls`. A malformed
// tool, a duplicate name or a choice naming no tool is a 400 naming the field. The constraint that makes
// `required` or a named function always come out as a call is built here, for the configured parser's
// format; whether each schema compiles is the constraint plugin's judgement at submit (also a 400).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/server/tool_call_parser.h"

namespace pagedllm::server {

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

struct ChatTools {
  // The template's `tools` variable: null when none were given, else a list of {"type": "function",
  // "function": {"name", "description", "parameters"}} (absent ones null, as vLLM's model_dump passes them;
  // the schemas in the client's key order).
  nlohmann::ordered_json definitions = nullptr;
  ToolChoice choice = ToolChoice::kAuto;
  std::string named;  // kNamed: the function
  bool parallel = true;

  bool offered() const { return !definitions.is_null() && !definitions.empty(); }
};

// `ordered_request` is the same body parsed keeping its key order (the schemas reach the template as given).
ChatTools parse_chat_tools(const nlohmann::json& request, const nlohmann::ordered_json& ordered_request);

// For tool_choice required or a named function: an xgrammar structural tag under which the output is
// one call (with parallel calls allowed, one or more) of the offered functions (or the named one), written
// as `format` writes calls, arguments matching the function's schema.
OutputConstraint tool_call_constraint(const ChatTools& tools, ToolCallFormat format);

}  // namespace pagedllm::server
