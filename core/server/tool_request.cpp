#include "core/server/tool_request.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/server/api_error.h"
#include "core/server/request_fields.h"

namespace pagedllm::server {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// OpenAI's rule for function names: letters, digits, underscores and dashes, at most 64.
bool valid_function_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// Whether a schema's "type" admits an object: "object", or a list of type names holding it (as in
// ["object", "null"], which clients generate for optional arguments).
bool admits_object(const json& type) {
  if (type.is_array()) {
    return std::all_of(type.begin(), type.end(), [](const json& name) { return name.is_string(); }) &&
           std::find(type.begin(), type.end(), json("object")) != type.end();
  }
  return type == "object";
}

// The parameters of a function are a JSON object, so their schema must describe one.
void check_parameters(const json& parameters, const std::string& param) {
  if (!parameters.is_object()) wrong_type(param, "a JSON schema (an object)", parameters);
  if (const json* type = field(parameters, "type"); type && !admits_object(*type)) {
    throw invalid_request(fmt::format("'{}.type' is {}: a function's arguments are a JSON object, so its "
                                      "parameters schema must have type \"object\" (alone or in a list of "
                                      "type names)",
                                      param, type->dump()),
                          param + ".type");
  }
  if (const json* properties = field(parameters, "properties"); properties && !properties->is_object()) {
    wrong_type(param + ".properties", "an object mapping names to schemas", *properties);
  }
  if (const json* required = field(parameters, "required")) {
    if (!required->is_array()) wrong_type(param + ".required", "an array of property names", *required);
    for (std::size_t i = 0; i < required->size(); ++i) {
      if (!(*required)[i].is_string()) wrong_type(fmt::format("{}.required[{}]", param, i), "a string", (*required)[i]);
    }
  }
}

std::string named_choice(const json& choice, const std::vector<std::string>& names) {
  const json* type = field(choice, "type");
  if (!type || *type != "function") {
    throw invalid_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
  }
  const json* function = field(choice, "function");
  if (!function || !function->is_object()) {
    throw invalid_request("'tool_choice.function' (an object with 'name') is required", "tool_choice.function");
  }
  const json* name = field(*function, "name");
  if (!name || !name->is_string()) {
    throw invalid_request("'tool_choice.function.name' must be a string", "tool_choice.function.name");
  }
  if (std::find(names.begin(), names.end(), name->get<std::string>()) == names.end()) {
    throw invalid_request(fmt::format("'tool_choice' names the function '{}', which is not one of 'tools' ({})",
                                      name->get<std::string>(), fmt::join(names, ", ")),
                          "tool_choice.function.name");
  }
  return name->get<std::string>();
}

}  // namespace

ChatTools parse_chat_tools(const json& request, const ordered_json& ordered_request) {
  ChatTools tools;
  std::vector<std::string> names;
  if (const json* given = field(request, "tools")) {
    if (!given->is_array()) wrong_type("tools", "an array of tools", *given);
    const ordered_json& ordered = ordered_request.at("tools");
    tools.definitions = ordered_json::array();
    for (std::size_t i = 0; i < given->size(); ++i) {
      const std::string param = fmt::format("tools[{}]", i);
      const json& tool = (*given)[i];
      if (!tool.is_object()) wrong_type(param, "an object", tool);
      const json* type = field(tool, "type");
      if (!type || *type != "function") {
        throw invalid_request(fmt::format("'{}.type' must be \"function\" (the only kind of tool)", param),
                              param + ".type");
      }
      const json* function = field(tool, "function");
      if (!function || !function->is_object()) {
        throw invalid_request(fmt::format("'{}.function' (an object with 'name', 'description', 'parameters') is "
                                          "required",
                                          param),
                              param + ".function");
      }
      const json* name = field(*function, "name");
      if (!name || !name->is_string() || !valid_function_name(name->get<std::string>())) {
        throw invalid_request(fmt::format("'{}.function.name' must be a string of 1 to 64 letters, digits, '_' "
                                          "or '-'{}",
                                          param, name ? fmt::format(", got {}", name->dump()) : std::string()),
                              param + ".function.name");
      }
      if (std::find(names.begin(), names.end(), name->get<std::string>()) != names.end()) {
        throw invalid_request(fmt::format("'{}.function.name': two tools are named '{}'", param,
                                          name->get<std::string>()),
                              param + ".function.name");
      }
      names.push_back(name->get<std::string>());
      const json* description = field(*function, "description");
      if (description && !description->is_string()) wrong_type(param + ".function.description", "a string", *description);
      const json* parameters = field(*function, "parameters");
      if (parameters) check_parameters(*parameters, param + ".function.parameters");
      get_bool(*function, "strict", param + ".function.strict");  // type-checked; every constrained call is strict

      const ordered_json& ordered_function = ordered.at(i).at("function");
      ordered_json definition = ordered_json::object();
      definition["name"] = names.back();
      definition["description"] = description ? ordered_function.at("description") : ordered_json(nullptr);
      definition["parameters"] = parameters ? ordered_function.at("parameters") : ordered_json(nullptr);
      tools.definitions.push_back({{"type", "function"}, {"function", std::move(definition)}});
    }
  }
  if (const json* choice = field(request, "tool_choice")) {
    if (choice->is_string()) {
      if (*choice == "auto") {
        tools.choice = ToolChoice::kAuto;
      } else if (*choice == "none") {
        tools.choice = ToolChoice::kNone;
      } else if (*choice == "required") {
        tools.choice = ToolChoice::kRequired;
      } else {
        throw invalid_request(fmt::format("'tool_choice' is {}, not one of \"auto\", \"none\", \"required\" or "
                                          "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}",
                                          choice->dump()),
                              "tool_choice");
      }
    } else if (choice->is_object()) {
      tools.choice = ToolChoice::kNamed;
      tools.named = named_choice(*choice, names);
    } else {
      wrong_type("tool_choice", "\"auto\", \"none\", \"required\" or an object naming a function", *choice);
    }
    if ((tools.choice == ToolChoice::kRequired || tools.choice == ToolChoice::kNamed) && names.empty()) {
      throw invalid_request("'tool_choice' asks for a tool call, but 'tools' offers none", "tool_choice");
    }
  }
  tools.parallel = get_bool(request, "parallel_tool_calls").value_or(true);
  return tools;
}

OutputConstraint tool_call_constraint(const ChatTools& tools, ToolCallFormat format) {
  // Each call is the format's fixed text around the arguments: `begin` and `end` of an xgrammar tag whose
  // content is the function's parameters schema, as JSON or (glm45, qwen3_coder) as the format's XML
  // parameters, which xgrammar's styles glm_xml and qwen_xml write.
  std::string call_begin, call_end, separator, style = "json";
  bool name_as_json = true;  // the name in `call_begin` written as a JSON string, or bare
  switch (format) {
    case ToolCallFormat::kHermes:
      call_begin = "<tool_call>\n{{\"name\": {}, \"arguments\": ";
      call_end = "}\n</tool_call>";
      separator = "\n";
      break;
    case ToolCallFormat::kLlama3Json:
      call_begin = "{{\"name\": {}, \"parameters\": ";
      call_end = "}";
      separator = "; ";
      break;
    case ToolCallFormat::kMistral:
      call_begin = "{{\"name\": {}, \"arguments\": ";
      call_end = "}";
      separator = ", ";
      break;
    case ToolCallFormat::kGlm45:
      call_begin = "<tool_call>{}\n";
      call_end = "</tool_call>";
      separator = "\n";
      style = "glm_xml";
      name_as_json = false;
      break;
    case ToolCallFormat::kQwen3Coder:
      call_begin = "<tool_call>\n<function={}>\n";
      call_end = "\n</function>\n</tool_call>";
      separator = "\n";
      style = "qwen_xml";
      name_as_json = false;
      break;
    case ToolCallFormat::kNone:
      throw invalid_request("'tool_choice' \"required\" or a named function needs a tool call format: set "
                            "server.tool_call_parser (hermes, llama3_json, mistral, glm45 or qwen3_coder) in the "
                            "server's config",
                            "tool_choice");
  }
  ordered_json tags = ordered_json::array();
  for (const ordered_json& tool : tools.definitions) {
    const ordered_json& function = tool.at("function");
    const std::string& name = function.at("name").get_ref<const std::string&>();
    if (tools.choice == ToolChoice::kNamed && name != tools.named) continue;
    ordered_json schema = function.at("parameters");
    if (schema.is_null()) schema = ordered_json::object();
    // A forced call's arguments are an object, which is what every parser reads ("null" of a type list
    // would be no call).
    schema["type"] = "object";
    // Whitespace runs bounded as constraint_xgrammar's max_whitespace default bounds them, so a model cannot
    // stall in whitespace inside a forced call.
    ordered_json content = {{"type", "json_schema"}, {"json_schema", std::move(schema)}, {"max_whitespace_cnt", 16}};
    if (style != "json") content["style"] = style;
    tags.push_back({{"type", "tag"},
                    {"begin", fmt::format(fmt::runtime(call_begin), name_as_json ? ordered_json(name).dump() : name)},
                    {"content", std::move(content)},
                    {"end", call_end}});
  }
  ordered_json calls = {{"type", "tags_with_separator"},
                        {"tags", std::move(tags)},
                        {"separator", separator},
                        {"at_least_one", true},
                        {"stop_after_first", tools.choice == ToolChoice::kNamed || !tools.parallel}};
  ordered_json format_json = std::move(calls);
  if (format == ToolCallFormat::kMistral) {
    // A JSON list of the calls ([TOOL_CALLS] before it is a special token, which no constraint writes).
    format_json = {{"type", "sequence"},
                   {"elements", ordered_json::array({{{"type", "const_string"}, {"value", "["}},
                                                     std::move(format_json),
                                                     {{"type", "const_string"}, {"value", "]"}}})}};
  }
  const ordered_json structural_tag = {{"type", "structural_tag"}, {"format", std::move(format_json)}};
  return {OutputConstraint::Type::kStructuralTag, structural_tag.dump(), "tools"};
}

}  // namespace pagedllm::server
