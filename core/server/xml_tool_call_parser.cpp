#include "core/server/xml_tool_call_parser.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace pagedllm::server {

namespace {

using nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
// glm45
constexpr std::string_view kKeyOpen = "<arg_key>";
constexpr std::string_view kKeyClose = "</arg_key>";
constexpr std::string_view kValueOpen = "<arg_value>";
constexpr std::string_view kValueClose = "</arg_value>";
// qwen3_coder
constexpr std::string_view kFunctionOpen = "<function=";
constexpr std::string_view kFunctionClose = "</function>";
constexpr std::string_view kParameterOpen = "<parameter=";
constexpr std::string_view kParameterClose = "</parameter>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// OpenAI's function names: letters, digits, '_' and '-'.
bool is_function_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

// Whether `text` may still become `tag` (a proper prefix of it, so more text is needed to know).
bool may_become(std::string_view text, std::string_view tag) { return text.size() < tag.size() && tag.starts_with(text); }

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
std::size_t partial_tag(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

// The JSON types a parameter's schema admits, as far as typing its value needs: whether a string (also for
// a schema naming no type, or no schema: the value stays the text written) and whether null.
struct AdmittedTypes {
  bool string = false;
  bool null = false;
  bool known = false;   // the schema names some type
  bool listed = false;  // the schema lists its values (enum, const)
};

void collect_types(const ordered_json& schema, AdmittedTypes& admitted, int depth) {
  if (!schema.is_object() || depth > 8) return;
  auto add = [&](const ordered_json& type) {
    if (!type.is_string()) return;
    admitted.known = true;
    admitted.string = admitted.string || type == "string";
    admitted.null = admitted.null || type == "null";
  };
  if (const auto type = schema.find("type"); type != schema.end()) {
    if (type->is_array()) {
      for (const ordered_json& each : *type) add(each);
    } else {
      add(*type);
    }
  }
  auto add_value = [&](const ordered_json& value) {
    admitted.known = true;
    admitted.listed = true;
    admitted.string = admitted.string || value.is_string();
    admitted.null = admitted.null || value.is_null();
  };
  if (const auto values = schema.find("enum"); values != schema.end() && values->is_array()) {
    for (const ordered_json& value : *values) add_value(value);
  }
  if (const auto value = schema.find("const"); value != schema.end()) add_value(*value);
  for (const char* key : {"anyOf", "oneOf", "allOf"}) {
    const auto members = schema.find(key);
    if (members == schema.end() || !members->is_array()) continue;
    for (const ordered_json& member : *members) collect_types(member, admitted, depth + 1);
  }
}

// The string the schema lists (enum, const) that `text` is once the whitespace around it is dropped: the
// formats (and xgrammar's XML styles that force them) pad a value with whitespace that is no part of it.
std::optional<std::string> listed_string(std::string_view text, const ordered_json& schema) {
  const std::string_view trimmed = trim(text);
  auto matches = [&](const ordered_json& value) {
    return value.is_string() && value.get_ref<const std::string&>() == trimmed;
  };
  if (const auto values = schema.find("enum"); values != schema.end() && values->is_array()) {
    if (std::any_of(values->begin(), values->end(), matches)) return std::string(trimmed);
  }
  if (const auto value = schema.find("const"); value != schema.end() && matches(*value)) return std::string(trimmed);
  return std::nullopt;
}

ordered_json typed_value(std::string_view text, const ordered_json* schema) {
  AdmittedTypes admitted;
  if (schema) collect_types(*schema, admitted, 0);
  if (schema && schema->is_object()) {
    if (auto listed = listed_string(text, *schema)) return *listed;
  }
  if (admitted.null && text == "null") return nullptr;
  if (!admitted.known || admitted.string) return std::string(text);
  ordered_json parsed = ordered_json::parse(text, nullptr, false);
  if (!parsed.is_discarded()) return parsed;
  if (text == "True") return true;
  if (text == "False") return false;
  if (text == "None") return nullptr;
  return std::string(text);
}

// Whether a value of this schema is a string whatever its text, so it can be handed on as it is written:
// not when the schema lists values (an enum is matched once whole) or admits null ("null" is null).
bool streams_as_string(const ordered_json* schema) {
  AdmittedTypes admitted;
  if (schema) collect_types(*schema, admitted, 0);
  return (!admitted.known || admitted.string) && !admitted.null && !admitted.listed;
}

// The JSON string escapes of `text`, without the quotes.
std::string json_string_body(std::string_view text) {
  const std::string quoted = ordered_json(std::string(text)).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

// The bytes at the end of `text` that start a UTF-8 character not complete yet: held back, so a value's
// pieces are escaped as the whole value would be.
std::size_t incomplete_utf8_tail(std::string_view text) {
  for (std::size_t back = 1; back <= std::min<std::size_t>(3, text.size()); ++back) {
    const auto byte = static_cast<unsigned char>(text[text.size() - back]);
    if ((byte & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    const std::size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    return length > back ? back : 0;
  }
  return 0;
}

// json.dumps(value, ensure_ascii=False): ", " and ": " between items, as vLLM's parsers write arguments.
void append_python_json(std::string& out, const ordered_json& value) {
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!first) out += ", ";
      first = false;
      out += ordered_json(key).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
      out += ": ";
      append_python_json(out, item);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i > 0) out += ", ";
      append_python_json(out, value[i]);
    }
    out += ']';
  } else {
    out += value.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
}

}  // namespace

XmlToolCallParser::XmlToolCallParser(ToolCallFormat format, const ordered_json& tool_definitions) : format_(format) {
  if (!tool_definitions.is_array()) return;
  for (const ordered_json& tool : tool_definitions) {
    const auto function = tool.find("function");
    if (function == tool.end() || !function->is_object()) continue;
    const auto name = function->find("name");
    const auto parameters = function->find("parameters");
    if (name == function->end() || !name->is_string() || parameters == function->end() || !parameters->is_object()) {
      continue;
    }
    const auto properties = parameters->find("properties");
    if (properties != parameters->end() && properties->is_object()) parameters_[name->get<std::string>()] = *properties;
  }
}

ToolCallParser::Parts XmlToolCallParser::add(std::string_view text) {
  held_ += text;
  ToolCallParser::Parts parts;
  settle(parts, false);
  return parts;
}

ToolCallParser::Parts XmlToolCallParser::finish() {
  ToolCallParser::Parts parts;
  settle(parts, true);
  pending_space_.clear();  // whitespace after the last call
  return parts;
}

void XmlToolCallParser::settle(ToolCallParser::Parts& parts, bool at_end) {
  for (bool progress = true; progress;) {
    switch (state_) {
      case State::kText: progress = settle_text(parts, at_end); break;
      case State::kName: progress = settle_name(parts, at_end); break;
      case State::kArguments: progress = settle_arguments(parts, at_end); break;
      case State::kStringValue: progress = settle_string_value(parts, at_end); break;
      case State::kBlockEnd: progress = settle_block_end(at_end); break;
      case State::kPlain:
        emit_content(parts, held_);
        held_.clear();
        progress = false;
        break;
    }
  }
}

void XmlToolCallParser::emit_content(ToolCallParser::Parts& parts, std::string_view text) {
  if (!found_calls_ || content_after_call_) {
    parts.content += text;
    return;
  }
  // Right after a call: whitespace waits for text that makes it content (or the next call, or the end,
  // which drop it), so however the output is cut the same whitespace is dropped.
  pending_space_ += text;
  if (!trim(pending_space_).empty()) {
    parts.content += pending_space_;
    pending_space_.clear();
    content_after_call_ = true;
  }
}

bool XmlToolCallParser::settle_text(ToolCallParser::Parts& parts, bool at_end) {
  const std::size_t at = held_.find(kCallOpen);
  if (at != std::string::npos) {
    emit_content(parts, std::string_view(held_).substr(0, at));
    held_.erase(0, at + kCallOpen.size());
    state_ = State::kName;
    return true;
  }
  const std::size_t keep = at_end ? 0 : partial_tag(held_, kCallOpen);
  emit_content(parts, std::string_view(held_).substr(0, held_.size() - keep));
  held_.erase(0, held_.size() - keep);
  return false;
}

// The function's name: glm45's first line (up to a newline or the first tag), qwen3_coder's <function=name>.
// A block without a valid name is no call: content from its <tool_call> on.
bool XmlToolCallParser::settle_name(ToolCallParser::Parts& parts, bool at_end) {
  std::size_t name_begin = 0, name_end = 0, consumed = 0;
  if (format_ == ToolCallFormat::kGlm45) {
    name_end = held_.find_first_of("\n<");
    if (name_end == std::string::npos) {
      if (!at_end) return false;
      name_end = held_.size();  // a block that ends after its name, before a newline: no call
    }
    consumed = name_end;
  } else {
    std::size_t at = 0;
    while (at < held_.size() && is_space(held_[at])) ++at;
    const std::string_view rest = std::string_view(held_).substr(at);
    if (!at_end && (rest.empty() || may_become(rest, kFunctionOpen))) return false;
    if (rest.starts_with(kFunctionOpen)) {
      name_begin = at + kFunctionOpen.size();
      name_end = held_.find('>', name_begin);
      if (name_end == std::string::npos && !at_end) return false;
      consumed = name_end == std::string::npos ? held_.size() : name_end + 1;
    }
  }
  const std::string_view name =
      name_end > name_begin ? trim(std::string_view(held_).substr(name_begin, name_end - name_begin)) : std::string_view();
  if (!is_function_name(name) || (format_ == ToolCallFormat::kGlm45 && name_end == held_.size())) {
    held_.insert(0, kCallOpen);
    state_ = State::kPlain;
    return true;
  }
  found_calls_ = true;
  content_after_call_ = false;
  pending_space_.clear();
  call_name_ = std::string(name);
  first_parameter_ = true;
  parts.calls.push_back({true, call_name_, "{"});
  held_.erase(0, consumed);
  state_ = State::kArguments;
  return true;
}

// The call's parameters, each handed on once its value has ended; the call's end closes the object.
bool XmlToolCallParser::settle_arguments(ToolCallParser::Parts& parts, bool at_end) {
  std::size_t at = 0;
  while (at < held_.size() && is_space(held_[at])) ++at;
  held_.erase(0, at);
  const std::string_view rest = held_;
  if (rest.empty()) {
    if (at_end) close_call(parts);  // the output ended inside the call
    return at_end;
  }
  const bool glm = format_ == ToolCallFormat::kGlm45;
  const std::string_view key_open = glm ? kKeyOpen : kParameterOpen;
  const std::string_view key_close = glm ? kKeyClose : std::string_view(">");
  if (rest.starts_with(kCallClose)) {
    held_.erase(0, kCallClose.size());
    close_call(parts);
    state_ = State::kText;
    return true;
  }
  if (!glm && rest.starts_with(kFunctionClose)) {
    held_.erase(0, kFunctionClose.size());
    close_call(parts);
    state_ = State::kBlockEnd;
    return true;
  }
  if (rest.starts_with(key_open)) {
    const std::size_t key_end = rest.find(key_close, key_open.size());
    if (key_end == std::string_view::npos) {
      if (!at_end) return false;
      close_call(parts);  // cut inside a key: the parameters before it
      held_.clear();
      return true;
    }
    const std::string key(trim(rest.substr(key_open.size(), key_end - key_open.size())));
    std::size_t value_begin = key_end + key_close.size();
    std::size_t value_end = std::string_view::npos;
    std::size_t consumed = 0;
    if (glm) {
      while (value_begin < rest.size() && is_space(rest[value_begin])) ++value_begin;
      const std::string_view after_key = rest.substr(value_begin);
      if (!after_key.starts_with(kValueOpen)) {
        if (!at_end && (after_key.empty() || may_become(after_key, kValueOpen))) return false;
        close_call(parts);  // a key without its value: the call ends with the parameters before it
        held_.erase(0, value_begin);
        state_ = State::kBlockEnd;
        return true;
      }
      value_begin += kValueOpen.size();
      if (start_string_value(parts, key)) {
        held_.erase(0, value_begin);
        return true;
      }
      value_end = rest.find(kValueClose, value_begin);
      consumed = value_end == std::string_view::npos ? rest.size() : value_end + kValueClose.size();
    } else {
      if (start_string_value(parts, key)) {
        held_.erase(0, value_begin);
        return true;
      }
      // A value ends at </parameter>, or where the model went on without it (the next parameter, the
      // function's end), whichever comes first.
      for (const std::string_view terminator : {kParameterClose, kParameterOpen, kFunctionClose}) {
        const std::size_t found = rest.find(terminator, value_begin);
        if (found < value_end) {
          value_end = found;
          consumed = found + (terminator == kParameterClose ? kParameterClose.size() : 0);
        }
      }
      if (value_end == std::string_view::npos) consumed = rest.size();
    }
    if (value_end == std::string_view::npos && !at_end) return false;
    std::string_view value = rest.substr(value_begin, std::min(value_end, rest.size()) - value_begin);
    if (glm) {
      value = trim(value);
    } else {
      if (value.starts_with('\n')) value.remove_prefix(1);
      if (value.ends_with('\n')) value.remove_suffix(1);
    }
    emit_parameter(parts, key, value);
    held_.erase(0, consumed);
    return true;
  }
  if (!at_end && (may_become(rest, key_open) || may_become(rest, kCallClose) ||
                  (!glm && may_become(rest, kFunctionClose)))) {
    return false;
  }
  // Anything else inside a call: the call ends with the parameters before it, the rest of its block dropped.
  close_call(parts);
  state_ = State::kBlockEnd;
  return true;
}

// What is left of a call's block up to </tool_call> is dropped.
bool XmlToolCallParser::settle_block_end(bool at_end) {
  const std::size_t close = held_.find(kCallClose);
  if (close != std::string::npos) {
    held_.erase(0, close + kCallClose.size());
    state_ = State::kText;
    return true;
  }
  const std::size_t keep = at_end ? 0 : partial_tag(held_, kCallClose);
  held_.erase(0, held_.size() - keep);
  return false;
}

const ordered_json* XmlToolCallParser::parameter_schema(std::string_view key) const {
  const auto function = parameters_.find(call_name_);
  if (function == parameters_.end()) return nullptr;
  const auto property = function->second.find(std::string(key));
  return property == function->second.end() ? nullptr : &*property;
}

std::string XmlToolCallParser::parameter_start(std::string_view key) {
  std::string piece = first_parameter_ ? "" : ", ";
  first_parameter_ = false;
  append_python_json(piece, ordered_json(std::string(key)));
  return piece + ": ";
}

void XmlToolCallParser::emit_parameter(ToolCallParser::Parts& parts, std::string_view key, std::string_view value) {
  std::string piece = parameter_start(key);
  append_python_json(piece, typed_value(value, parameter_schema(key)));
  parts.calls.push_back({false, "", std::move(piece)});
}

bool XmlToolCallParser::start_string_value(ToolCallParser::Parts& parts, std::string_view key) {
  if (!streams_as_string(parameter_schema(key))) return false;
  parts.calls.push_back({false, "", parameter_start(key) + "\""});
  value_leading_ = true;
  state_ = State::kStringValue;
  return true;
}

// A string value, handed on as it comes: all but what may still be its terminator, the whitespace its end
// may drop, or an incomplete UTF-8 character.
bool XmlToolCallParser::settle_string_value(ToolCallParser::Parts& parts, bool at_end) {
  const bool glm = format_ == ToolCallFormat::kGlm45;
  if (value_leading_) {  // the format's whitespace before the value: glm45's all, qwen3_coder's one newline
    if (glm) {
      std::size_t drop = 0;
      while (drop < held_.size() && is_space(held_[drop])) ++drop;
      held_.erase(0, drop);
    } else if (!held_.empty() && held_[0] == '\n') {
      held_.erase(0, 1);
      value_leading_ = false;  // one newline only, however the text is cut
    }
    if (held_.empty() && !at_end) return false;
    value_leading_ = false;
  }
  std::size_t end = std::string::npos, consumed = 0;
  const std::string_view closing = glm ? kValueClose : kParameterClose;
  for (const std::string_view terminator : {closing, kParameterOpen, kFunctionClose}) {
    if (glm && terminator != closing) continue;
    const std::size_t found = held_.find(terminator);
    if (found < end) {
      end = found;
      consumed = found + (terminator == closing ? closing.size() : 0);
    }
  }
  const bool ends = end != std::string::npos || at_end;
  std::size_t take = std::min(end, held_.size());
  if (!ends) {
    std::size_t partial = partial_tag(held_, closing);
    if (!glm) partial = std::max({partial, partial_tag(held_, kParameterOpen), partial_tag(held_, kFunctionClose)});
    take = held_.size() - partial;
  }
  // The whitespace the value's end drops (glm45: all of it, qwen3_coder: one newline), held until known.
  std::size_t keep = take;
  if (glm) {
    while (keep > 0 && is_space(held_[keep - 1])) --keep;
  } else if (keep > 0 && held_[keep - 1] == '\n') {
    --keep;
  }
  if (!ends) keep -= incomplete_utf8_tail(std::string_view(held_).substr(0, keep));
  std::string piece = json_string_body(std::string_view(held_).substr(0, keep));
  if (ends) piece += '"';
  if (!piece.empty()) parts.calls.push_back({false, "", std::move(piece)});
  if (!ends) {
    held_.erase(0, keep);
    return false;
  }
  held_.erase(0, end == std::string::npos ? held_.size() : consumed);
  state_ = State::kArguments;
  return true;
}

void XmlToolCallParser::close_call(ToolCallParser::Parts& parts) {
  parts.calls.push_back({false, "", "}"});
  if (state_ == State::kArguments) state_ = State::kText;
}

}  // namespace pagedllm::server
