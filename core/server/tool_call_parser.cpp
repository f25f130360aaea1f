#include "core/server/tool_call_parser.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace pagedllm::server {

namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t leading_space(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && is_space(text[n])) ++n;
  return n;
}

bool all_space(std::string_view text) { return leading_space(text) == text.size(); }

// The length of the longest suffix of `text` that is a proper prefix of `tag`: what may still become the tag.
std::size_t partial_tag(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

// Where the JSON object or array that `text` starts with ends (one past its closing bracket), or npos
// while it is not closed yet. Only brackets outside strings count; whether the value is valid JSON is
// the parser's judgement afterwards.
std::size_t json_value_end(std::string_view text) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// {"name": "...", "<arguments_key>": {...}} (the arguments may also be a string holding the object's
// JSON, as some models write them); nullopt for anything else.
std::optional<ParsedToolCall> call_from_json(const ordered_json& value, std::string_view arguments_key) {
  if (!value.is_object()) return std::nullopt;
  const auto name = value.find("name");
  const auto arguments = value.find(std::string(arguments_key));
  if (name == value.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ParsedToolCall call{name->get<std::string>(), "{}"};
  if (arguments == value.end()) return call;
  if (arguments->is_object()) {
    call.arguments = arguments->dump();
  } else if (arguments->is_string()) {
    const ordered_json inner = ordered_json::parse(arguments->get<std::string>(), nullptr, false);
    if (inner.is_discarded() || !inner.is_object()) return std::nullopt;
    call.arguments = inner.dump();
  } else {
    return std::nullopt;
  }
  return call;
}

ordered_json parse_json(std::string_view text) { return ordered_json::parse(text, nullptr, false); }

}  // namespace

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  return std::nullopt;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool calls_forced) : format_(format) {
  switch (format) {
    case ToolCallFormat::kNone: state_ = State::kPlain; break;
    case ToolCallFormat::kHermes: state_ = State::kText; break;
    case ToolCallFormat::kLlama3Json: state_ = State::kLeading; break;
    case ToolCallFormat::kMistral: state_ = calls_forced ? State::kCall : State::kText; break;
  }
}

ToolCallParser::Parts ToolCallParser::add(std::string_view text) {
  held_ += text;
  Parts parts;
  settle(parts, false);
  return parts;
}

ToolCallParser::Parts ToolCallParser::finish() {
  Parts parts;
  settle(parts, true);
  pending_space_.clear();  // whitespace after the last call
  return parts;
}

void ToolCallParser::settle(Parts& parts, bool at_end) {
  for (bool progress = true; progress;) {
    switch (state_) {
      case State::kLeading: progress = settle_leading(at_end); break;
      case State::kText: progress = settle_text(parts, at_end); break;
      case State::kCall: progress = settle_call(parts, at_end); break;
      case State::kPlain:
        emit_content(parts, held_);
        held_.clear();
        progress = false;
        break;
    }
  }
}

void ToolCallParser::emit_content(Parts& parts, std::string_view text) {
  if (!found_calls_ || content_after_call_) {
    parts.content += text;
    return;
  }
  // Right after a call: whitespace waits for text that makes it content (or the next call, or the end,
  // which drop it), so however the output is cut the same whitespace is dropped.
  pending_space_ += text;
  if (!all_space(pending_space_)) {
    parts.content += pending_space_;
    pending_space_.clear();
    content_after_call_ = true;
  }
}

void ToolCallParser::add_call(Parts& parts, ParsedToolCall call) {
  found_calls_ = true;
  content_after_call_ = false;
  pending_space_.clear();
  parts.calls.push_back(std::move(call));
}

// llama3_json: at the start, a call ('{' or <|python_tag|>) or content; after a call, ';' and the next.
bool ToolCallParser::settle_leading(bool at_end) {
  const std::string_view held = held_;
  std::size_t at = leading_space(held);
  bool separated = false;
  if (found_calls_ && at < held.size() && held[at] == ';') {
    separated = true;
    at += 1 + leading_space(held.substr(at + 1));
  }
  const std::string_view rest = held.substr(at);
  if (rest.empty() && !at_end) return false;
  if (!found_calls_ && rest.starts_with(kPythonTag)) {
    opening_ = kPythonTag;
    held_.erase(0, at + kPythonTag.size());
    state_ = State::kCall;
    return true;
  }
  if (rest.starts_with("{") && separated == found_calls_) {
    held_.erase(0, at);
    state_ = State::kCall;
    return true;
  }
  if (!at_end && !found_calls_ && kPythonTag.starts_with(rest)) return false;
  state_ = State::kPlain;
  return true;
}

// hermes, mistral: content up to the opening marker.
bool ToolCallParser::settle_text(Parts& parts, bool at_end) {
  const std::string_view marker = format_ == ToolCallFormat::kHermes ? kHermesOpen : kMistralCalls;
  const std::size_t at = held_.find(marker);
  if (at != std::string::npos) {
    emit_content(parts, std::string_view(held_).substr(0, at));
    held_.erase(0, at + marker.size());
    opening_ = marker;
    state_ = State::kCall;
    return true;
  }
  const std::size_t keep = at_end ? 0 : partial_tag(held_, marker);
  emit_content(parts, std::string_view(held_).substr(0, held_.size() - keep));
  held_.erase(0, held_.size() - keep);
  return false;
}

bool ToolCallParser::settle_call(Parts& parts, bool at_end) {
  if (format_ == ToolCallFormat::kHermes) {
    const std::size_t close = held_.find(kHermesClose);
    if (close == std::string::npos && !at_end) return false;
    const std::string_view body = std::string_view(held_).substr(0, std::min(close, held_.size()));
    const std::size_t consumed = close == std::string::npos ? held_.size() : close + kHermesClose.size();
    if (auto call = call_from_json(parse_json(body), "arguments")) {
      add_call(parts, std::move(*call));
    } else {
      emit_content(parts, opening_ + held_.substr(0, consumed));
    }
    opening_.clear();
    held_.erase(0, consumed);
    state_ = State::kText;
    return true;
  }
  // llama3_json (at a '{') and mistral (a list, after optional whitespace).
  const std::size_t start = leading_space(held_);
  if (start == held_.size() && !at_end) return false;
  const char open = format_ == ToolCallFormat::kMistral ? '[' : '{';
  const bool opens = start < held_.size() && held_[start] == open;
  const std::size_t length = opens ? json_value_end(std::string_view(held_).substr(start)) : std::string_view::npos;
  if (opens && length == std::string_view::npos && !at_end) return false;
  const std::string_view value = length == std::string_view::npos
                                     ? std::string_view()
                                     : std::string_view(held_).substr(start, length);
  const ordered_json parsed = parse_json(value);
  std::vector<ParsedToolCall> calls;
  if (format_ == ToolCallFormat::kLlama3Json) {
    // vLLM's llama3_json takes "arguments" too.
    const bool parameters = !parsed.is_object() || parsed.contains("parameters") || !parsed.contains("arguments");
    if (auto call = call_from_json(parsed, parameters ? "parameters" : "arguments")) calls.push_back(std::move(*call));
  } else if (parsed.is_array() && !parsed.empty()) {
    for (const ordered_json& item : parsed) {
      auto call = call_from_json(item, "arguments");
      if (!call) {
        calls.clear();
        break;
      }
      calls.push_back(std::move(*call));
    }
  }
  if (calls.empty()) {
    // Not a call: the text is content, verbatim (the marker it followed included).
    held_.insert(0, opening_);
    opening_.clear();
    state_ = State::kPlain;
    return true;
  }
  for (ParsedToolCall& call : calls) add_call(parts, std::move(call));
  opening_.clear();
  held_.erase(0, start + length);
  state_ = format_ == ToolCallFormat::kLlama3Json ? State::kLeading : State::kText;
  return true;
}

}  // namespace pagedllm::server
