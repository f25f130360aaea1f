#include "core/server/structured_output_request.h"

#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/server/api_error.h"
#include "core/server/request_fields.h"

namespace pagedllm::server {
namespace {

using nlohmann::json;
using Type = OutputConstraint::Type;

OutputConstraint schema_constraint(const json& schema, const std::string& param) {
  // A schema is an object (or true/false, which xgrammar does not take: refused here by type).
  if (!schema.is_object()) wrong_type(param, "a JSON schema (an object)", schema);
  return {Type::kJsonSchema, schema.dump(), param};
}

OutputConstraint regex_constraint(const json& regex, const std::string& param) {
  if (!regex.is_string()) wrong_type(param, "a regular expression (a string)", regex);
  if (regex.get_ref<const std::string&>().empty()) throw invalid_request(fmt::format("'{}' is empty", param), param);
  return {Type::kRegex, regex.get<std::string>(), param};
}

OutputConstraint choice_constraint(const json& choices, const std::string& param) {
  if (!choices.is_array() || choices.empty()) wrong_type(param, "a non-empty array of strings", choices);
  for (std::size_t i = 0; i < choices.size(); ++i) {
    if (!choices[i].is_string() || choices[i].get_ref<const std::string&>().empty()) {
      wrong_type(fmt::format("{}[{}]", param, i), "a non-empty string", choices[i]);
    }
  }
  return {Type::kChoice, choices.dump(), param};
}

std::optional<OutputConstraint> response_format(const json& request) {
  const json* format = field(request, "response_format");
  if (!format) return std::nullopt;
  if (!format->is_object()) wrong_type("response_format", "an object", *format);
  const json* type = field(*format, "type");
  if (!type || !type->is_string()) {
    throw invalid_request("'response_format.type' must be one of 'text', 'json_object', 'json_schema'",
                          "response_format.type");
  }
  if (*type == "text") return std::nullopt;
  if (*type == "json_object") return OutputConstraint{Type::kJsonObject, "", "response_format"};
  if (*type == "json_schema") {
    const json* spec = field(*format, "json_schema");
    if (!spec || !spec->is_object()) {
      throw invalid_request("'response_format.json_schema' (an object with 'name' and 'schema') is required for "
                            "type 'json_schema'",
                            "response_format.json_schema");
    }
    const json* schema = field(*spec, "schema");
    if (!schema) {
      throw invalid_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    }
    return schema_constraint(*schema, "response_format.json_schema.schema");
  }
  throw invalid_request(fmt::format("'response_format.type' is {}, not one of 'text', 'json_object', 'json_schema'",
                                    type->dump()),
                        "response_format.type");
}

std::vector<OutputConstraint> structured_outputs(const json& request) {
  std::vector<OutputConstraint> found;
  if (const json* so = field(request, "structured_outputs")) {
    if (!so->is_object()) wrong_type("structured_outputs", "an object", *so);
    for (const auto& [key, value] : so->items()) {
      const std::string param = "structured_outputs." + key;
      if (value.is_null()) continue;
      if (key == "json") {
        // vLLM takes the schema as an object or as its JSON text.
        if (value.is_string()) {
          const json parsed = json::parse(value.get<std::string>(), nullptr, false);
          if (parsed.is_discarded()) throw invalid_request(fmt::format("'{}' is not valid JSON", param), param);
          found.push_back(schema_constraint(parsed, param));
        } else {
          found.push_back(schema_constraint(value, param));
        }
      } else if (key == "regex") {
        found.push_back(regex_constraint(value, param));
      } else if (key == "choice") {
        found.push_back(choice_constraint(value, param));
      } else if (key == "json_object") {
        if (!value.is_boolean()) wrong_type(param, "a boolean", value);
        if (value.get<bool>()) found.push_back({Type::kJsonObject, "", param});
      } else if (key == "backend" || key == "disable_fallback") {
        // Which of vLLM's engines compiles, and whether it may fall back to another: the server's
        // constraint plugin does, with no fallback; neither changes what the output may be.
      } else {
        throw invalid_request(fmt::format("'{}' is not supported (json, regex, choice, json_object are)", param),
                              param);
      }
    }
  }
  if (const json* v = field(request, "guided_json")) {
    if (v->is_string()) {
      const json parsed = json::parse(v->get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) throw invalid_request("'guided_json' is not valid JSON", "guided_json");
      found.push_back(schema_constraint(parsed, "guided_json"));
    } else {
      found.push_back(schema_constraint(*v, "guided_json"));
    }
  }
  if (const json* v = field(request, "guided_regex")) found.push_back(regex_constraint(*v, "guided_regex"));
  if (const json* v = field(request, "guided_choice")) found.push_back(choice_constraint(*v, "guided_choice"));
  if (field(request, "guided_grammar")) {
    throw invalid_request("'guided_grammar' is not supported (json, regex, choice are)", "guided_grammar");
  }
  return found;
}

}  // namespace

std::optional<OutputConstraint> parse_output_constraint(const json& request) {
  std::vector<OutputConstraint> found = structured_outputs(request);
  if (auto format = response_format(request)) found.insert(found.begin(), std::move(*format));
  if (found.size() > 1) {
    throw invalid_request(fmt::format("'{}' and '{}' both constrain the output; give one", found[0].field,
                                      found[1].field),
                          found[1].field);
  }
  if (found.empty()) return std::nullopt;
  return std::move(found.front());
}

}  // namespace pagedllm::server
