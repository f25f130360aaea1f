#include "core/server/tool_call_parser.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/server/xml_tool_call_parser.h"

namespace pagedllm::server {

namespace {

using nlohmann::ordered_json;

constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";

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
  ToolCallParser::BracketScanner scanner;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (scanner.closes(text[i])) return i + 1;
  }
  return std::string_view::npos;
}

// OpenAI's function names: letters, digits, '_' and '-' (mistral v11 writes the name bare).
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// {"name": "...", "<arguments_key>": {...}} (the arguments may also be a string holding the object's
// JSON, as some models write them); nullopt for anything else.
struct WholeCall {
  std::string name;
  std::string arguments;
};

std::optional<WholeCall> call_from_json(const ordered_json& value, std::string_view arguments_key) {
  if (!value.is_object()) return std::nullopt;
  const auto name = value.find("name");
  const auto arguments = value.find(std::string(arguments_key));
  if (name == value.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  WholeCall call{name->get<std::string>(), "{}"};
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

enum class Match { kIncomplete, kNo, kYes };

// The JSON string that starts at text[at]: its value, and `at` moved past it. kIncomplete while its closing
// quote has not come.
Match read_string(std::string_view text, std::size_t& at, std::string& value) {
  if (text[at] != '"') return Match::kNo;
  bool escaped = false;
  for (std::size_t i = at + 1; i < text.size(); ++i) {
    if (escaped) {
      escaped = false;
    } else if (text[i] == '\\') {
      escaped = true;
    } else if (text[i] == '"') {
      const ordered_json parsed = parse_json(text.substr(at, i + 1 - at));
      if (!parsed.is_string()) return Match::kNo;
      value = parsed.get<std::string>();
      at = i + 1;
      return Match::kYes;
    }
  }
  return Match::kIncomplete;
}

// The start of a call object as models write it, {"name": "<name>", "<arguments key>": {, or a whole call
// without arguments, {"name": "<name>"}. kIncomplete while the text may still become one.
struct CallHeader {
  Match match = Match::kNo;
  std::string name;
  std::size_t end = 0;         // the arguments' '{', or one past the object's '}' when it has none
  bool has_arguments = false;
};

CallHeader read_call_header(std::string_view text, bool parameters_key) {
  CallHeader header;
  header.match = Match::kIncomplete;
  std::size_t at = 0;
  // Moves past whitespace; false when the text ends there (so far, the header is incomplete).
  auto more = [&] {
    at += leading_space(text.substr(at));
    return at < text.size();
  };
  // The next token is the character `c`.
  auto expect = [&](char c) {
    if (text[at] != c) return false;
    ++at;
    return true;
  };
  const CallHeader no;
  std::string key;
  if (!more()) return header;
  if (!expect('{')) return no;
  if (!more()) return header;
  Match read = read_string(text, at, key);
  if (read != Match::kYes) return read == Match::kIncomplete ? header : no;
  if (key != "name") return no;
  if (!more()) return header;
  if (!expect(':')) return no;
  if (!more()) return header;
  read = read_string(text, at, header.name);
  if (read != Match::kYes) return read == Match::kIncomplete ? header : no;
  if (header.name.empty()) return no;
  if (!more()) return header;
  if (expect('}')) {
    header.match = Match::kYes;
    header.end = at;
    return header;
  }
  if (!expect(',')) return no;
  if (!more()) return header;
  read = read_string(text, at, key);
  if (read != Match::kYes) return read == Match::kIncomplete ? header : no;
  if (key != "arguments" && !(parameters_key && key == "parameters")) return no;
  if (!more()) return header;
  if (!expect(':')) return no;
  if (!more()) return header;
  if (text[at] != '{') return no;
  header.match = Match::kYes;
  header.end = at;
  header.has_arguments = true;
  return header;
}

}  // namespace

bool ToolCallParser::BracketScanner::closes(char c) {
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
    return --depth == 0;
  }
  return false;
}

std::optional<ToolCallFormat> parse_tool_call_format(std::string_view name) {
  if (name == "none") return ToolCallFormat::kNone;
  if (name == "hermes") return ToolCallFormat::kHermes;
  if (name == "llama3_json") return ToolCallFormat::kLlama3Json;
  if (name == "mistral") return ToolCallFormat::kMistral;
  if (name == "glm45") return ToolCallFormat::kGlm45;
  if (name == "qwen3_coder") return ToolCallFormat::kQwen3Coder;
  return std::nullopt;
}

std::string_view tool_call_format_name(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kLlama3Json: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kGlm45: return "glm45";
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
  }
  return "none";
}

std::optional<ToolCallFormat> tool_call_format_of_template(std::string_view chat_template) {
  auto shows = [&](std::string_view marker) { return chat_template.find(marker) != std::string_view::npos; };
  // The XML formats also write <tool_call>: recognised first by what they write inside it.
  if (shows(kHermesOpen) && shows("<arg_key>")) return ToolCallFormat::kGlm45;
  if (shows(kHermesOpen) && shows("<function=") && shows("<parameter=")) return ToolCallFormat::kQwen3Coder;
  // Llama 3.2's template has no <|python_tag|> (it has no built-in tools) but Meta's instruction for calls.
  constexpr std::string_view kLlamaInstruction = R"(Respond in the format {"name": function name, "parameters")";
  const std::pair<std::string_view, ToolCallFormat> markers[] = {{kHermesOpen, ToolCallFormat::kHermes},
                                                                {kPythonTag, ToolCallFormat::kLlama3Json},
                                                                {kLlamaInstruction, ToolCallFormat::kLlama3Json},
                                                                {kMistralCalls, ToolCallFormat::kMistral}};
  std::optional<ToolCallFormat> found;
  for (const auto& marker : markers) {
    if (chat_template.find(marker.first) == std::string_view::npos) continue;
    if (found && *found != marker.second) return std::nullopt;  // two formats: which one the model writes is unknown
    found = marker.second;
  }
  return found;
}

ToolCallParser::ToolCallParser(ToolCallFormat format, bool calls_forced, const nlohmann::ordered_json& tool_definitions)
    : format_(format) {
  switch (format) {
    case ToolCallFormat::kNone: state_ = State::kPlain; break;
    case ToolCallFormat::kHermes: state_ = State::kText; break;
    case ToolCallFormat::kLlama3Json: state_ = State::kLeading; break;
    case ToolCallFormat::kMistral: state_ = calls_forced ? State::kCall : State::kText; break;
    case ToolCallFormat::kGlm45:
    case ToolCallFormat::kQwen3Coder:
      state_ = State::kPlain;  // unused: xml_ parses
      xml_ = std::make_unique<XmlToolCallParser>(format, tool_definitions);
      break;
  }
}

ToolCallParser::~ToolCallParser() = default;
ToolCallParser::ToolCallParser(ToolCallParser&&) noexcept = default;
ToolCallParser& ToolCallParser::operator=(ToolCallParser&&) noexcept = default;

bool ToolCallParser::found_calls() const { return xml_ ? xml_->found_calls() : found_calls_; }

ToolCallParser::Parts ToolCallParser::add(std::string_view text) {
  if (xml_) return xml_->add(text);
  held_ += text;
  Parts parts;
  settle(parts, false);
  return parts;
}

ToolCallParser::Parts ToolCallParser::finish() {
  if (xml_) return xml_->finish();
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
      case State::kMistralName: progress = settle_mistral_name(parts, at_end); break;
      case State::kArguments: progress = settle_arguments(parts, at_end); break;
      case State::kCallTail: progress = settle_call_tail(); break;
      case State::kHermesEnd: progress = settle_hermes_end(at_end); break;
      case State::kListNext: progress = settle_list_next(at_end); break;
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

void ToolCallParser::open_call(Parts& parts, std::string name, std::string arguments) {
  found_calls_ = true;
  content_after_call_ = false;
  pending_space_.clear();
  opening_.clear();
  parts.calls.push_back({true, std::move(name), std::move(arguments)});
}

void ToolCallParser::after_call() {
  switch (format_) {
    case ToolCallFormat::kHermes: state_ = State::kHermesEnd; break;
    case ToolCallFormat::kLlama3Json: state_ = State::kLeading; break;
    case ToolCallFormat::kMistral: state_ = in_mistral_list_ ? State::kListNext : State::kText; break;
    case ToolCallFormat::kNone:
    case ToolCallFormat::kGlm45:
    case ToolCallFormat::kQwen3Coder: state_ = State::kPlain; break;
  }
}

void ToolCallParser::not_a_call() {
  held_.insert(0, opening_);
  opening_.clear();
  in_mistral_list_ = false;
  state_ = State::kPlain;
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

// After the marker: a call object that opens as soon as its header is read (mistral: first its list, or
// its v11 name).
bool ToolCallParser::settle_call(Parts& parts, bool at_end) {
  if (format_ == ToolCallFormat::kMistral && !in_mistral_list_) {
    const std::size_t start = leading_space(held_);
    if (start == held_.size()) {
      if (!at_end) return false;
      not_a_call();
      return true;
    }
    const bool list = held_[start] == '[';
    const std::size_t taken = list ? start + 1 : start;
    opening_ += held_.substr(0, taken);
    held_.erase(0, taken);
    in_mistral_list_ = list;
    if (!list) state_ = State::kMistralName;
    return true;
  }
  CallHeader header = read_call_header(held_, format_ == ToolCallFormat::kLlama3Json);
  if (header.match == Match::kIncomplete && !at_end) return false;
  if (header.match != Match::kYes) return settle_whole_call(parts, at_end);
  open_call(parts, std::move(header.name), header.has_arguments ? "" : "{}");
  held_.erase(0, header.end);
  if (header.has_arguments) {
    scanner_ = {};
    state_ = State::kArguments;
  } else {
    after_call();
  }
  return true;
}

// A call object whose header is not the streamed form: parsed once complete, one piece or content.
bool ToolCallParser::settle_whole_call(Parts& parts, bool at_end) {
  if (format_ == ToolCallFormat::kHermes) {
    const std::size_t close = held_.find(kHermesClose);
    if (close == std::string::npos && !at_end) return false;
    const std::string_view body = std::string_view(held_).substr(0, std::min(close, held_.size()));
    const std::size_t consumed = close == std::string::npos ? held_.size() : close + kHermesClose.size();
    if (auto call = call_from_json(parse_json(body), "arguments")) {
      open_call(parts, std::move(call->name), std::move(call->arguments));
    } else {
      emit_content(parts, opening_ + held_.substr(0, consumed));
    }
    opening_.clear();
    held_.erase(0, consumed);
    state_ = State::kText;
    return true;
  }
  // llama3_json and mistral's list items: an object.
  const std::size_t start = leading_space(held_);
  if (start == held_.size() && !at_end) return false;
  const bool opens = start < held_.size() && held_[start] == '{';
  const std::size_t length = opens ? json_value_end(std::string_view(held_).substr(start)) : std::string_view::npos;
  if (opens && length == std::string_view::npos && !at_end) return false;
  const ordered_json parsed =
      parse_json(length == std::string_view::npos ? std::string_view() : std::string_view(held_).substr(start, length));
  // vLLM's llama3_json takes "arguments" too.
  const bool parameters = format_ == ToolCallFormat::kLlama3Json &&
                          (!parsed.is_object() || parsed.contains("parameters") || !parsed.contains("arguments"));
  auto call = call_from_json(parsed, parameters ? "parameters" : "arguments");
  if (!call) {
    not_a_call();
    return true;
  }
  open_call(parts, std::move(call->name), std::move(call->arguments));
  held_.erase(0, start + length);
  after_call();
  return true;
}

// mistral v11: [TOOL_CALLS]name[ARGS]{...}; the call opens at its arguments' '{'.
bool ToolCallParser::settle_mistral_name(Parts& parts, bool at_end) {
  std::size_t end = 0;
  while (end < held_.size() && is_name_char(held_[end])) ++end;
  const std::string_view rest = std::string_view(held_).substr(end);
  if (end == 0 && !rest.empty()) {
    not_a_call();
    return true;
  }
  if (!rest.starts_with(kMistralArgs)) {
    if (!at_end && kMistralArgs.starts_with(rest)) return false;
    not_a_call();
    return true;
  }
  const std::size_t arguments = end + kMistralArgs.size() + leading_space(rest.substr(kMistralArgs.size()));
  if (arguments == held_.size() && !at_end) return false;
  if (arguments == held_.size() || held_[arguments] != '{') {
    not_a_call();
    return true;
  }
  open_call(parts, held_.substr(0, end), "");
  held_.erase(0, arguments);
  scanner_ = {};
  state_ = State::kArguments;
  return true;
}

// The arguments as they come, up to the bracket that closes them (hermes: or </tool_call>, whichever first).
bool ToolCallParser::settle_arguments(Parts& parts, bool at_end) {
  std::size_t taken = 0;
  bool closed = false, block_closed = false;
  for (; taken < held_.size(); ++taken) {
    if (format_ == ToolCallFormat::kHermes && !scanner_.in_string && held_[taken] == '<') {
      const std::string_view rest = std::string_view(held_).substr(taken);
      if (rest.starts_with(kHermesClose)) {
        block_closed = true;
        break;
      }
      if (!at_end && kHermesClose.starts_with(rest)) break;  // may be the close tag: wait
    }
    if (scanner_.closes(held_[taken])) {
      closed = true;
      ++taken;
      break;
    }
  }
  if (taken > 0) {
    parts.calls.push_back({false, "", held_.substr(0, taken)});
    held_.erase(0, taken);
  }
  if (block_closed) {
    held_.erase(0, kHermesClose.size());
    state_ = State::kText;
    return true;
  }
  if (!closed) return false;
  if (format_ == ToolCallFormat::kLlama3Json || in_mistral_list_) {
    // The rest of the call object, up to its '}'.
    scanner_ = {};
    scanner_.depth = 1;
    state_ = State::kCallTail;
  } else {
    after_call();
  }
  return true;
}

bool ToolCallParser::settle_call_tail() {
  for (std::size_t i = 0; i < held_.size(); ++i) {
    if (scanner_.closes(held_[i])) {
      held_.erase(0, i + 1);
      after_call();
      return true;
    }
  }
  held_.clear();
  return false;
}

// hermes: the rest of a call's block is dropped up to </tool_call>.
bool ToolCallParser::settle_hermes_end(bool at_end) {
  const std::size_t close = held_.find(kHermesClose);
  if (close != std::string::npos) {
    held_.erase(0, close + kHermesClose.size());
    state_ = State::kText;
    return true;
  }
  const std::size_t keep = at_end ? 0 : partial_tag(held_, kHermesClose);
  held_.erase(0, held_.size() - keep);
  return false;
}

// mistral's list after a call: ',' and the next, or ']'; anything else ends the calls and is content.
bool ToolCallParser::settle_list_next(bool at_end) {
  const std::size_t at = leading_space(held_);
  if (at == held_.size()) {
    if (!at_end) return false;
    held_.clear();
    in_mistral_list_ = false;
    state_ = State::kText;
    return true;
  }
  const char next = held_[at];
  if (next == ',' || next == ']') held_.erase(0, at + 1);
  in_mistral_list_ = next == ',';
  state_ = next == ',' ? State::kCall : next == ']' ? State::kText : State::kPlain;
  return true;
}

}  // namespace pagedllm::server
