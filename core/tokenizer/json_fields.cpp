#include "core/tokenizer/json_fields.h"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {

JsonPlace JsonPlace::operator/(std::string_view key) const {
  return JsonPlace(file_, path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key));
}

JsonPlace JsonPlace::operator[](std::size_t index) const {
  return JsonPlace(file_, fmt::format("{}[{}]", path_, index));
}

std::string JsonPlace::describe() const {
  return path_.empty() ? file_ : fmt::format("{}: {}", file_, path_);
}

void JsonPlace::fail(std::string_view message) const {
  throw TokenizerError(fmt::format("{}: {}", describe(), message));
}

const Json& require_field(const Json& value, std::string_view key, const JsonPlace& place) {
  if (!value.is_object()) place.fail(fmt::format("expected an object, got {}", value.type_name()));
  const auto it = value.find(key);
  if (it == value.end()) place.fail(fmt::format("missing field '{}'", key));
  return *it;
}

std::string require_string(const Json& value, std::string_view key, const JsonPlace& place) {
  const Json& field = require_field(value, key, place);
  if (!field.is_string()) (place / key).fail(fmt::format("expected a string, got {}", field.type_name()));
  return field.get<std::string>();
}

std::optional<std::string> optional_string(const Json& value, std::string_view key,
                                           const JsonPlace& place) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) (place / key).fail(fmt::format("expected a string, got {}", it->type_name()));
  return it->get<std::string>();
}

bool optional_bool(const Json& value, std::string_view key, bool fallback, const JsonPlace& place) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) (place / key).fail(fmt::format("expected true or false, got {}", it->type_name()));
  return it->get<bool>();
}

long long optional_integer(const Json& value, std::string_view key, long long fallback,
                           const JsonPlace& place) {
  const auto it = value.find(key);
  if (it == value.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) (place / key).fail(fmt::format("expected an integer, got {}", it->type_name()));
  return it->get<long long>();
}

TokenId require_token_id(const Json& value, const JsonPlace& place) {
  if (!value.is_number_integer()) place.fail(fmt::format("expected an integer id, got {}", value.type_name()));
  const bool in_range = value.is_number_unsigned() ? value.get<unsigned long long>() <= kMaxTokenId
                                                   : value.get<long long>() >= 0 && value.get<long long>() <= kMaxTokenId;
  if (!in_range) place.fail(fmt::format("id {} is outside 0..{}", value.dump(), kMaxTokenId));
  return static_cast<TokenId>(value.get<long long>());
}

std::string component_type(const Json& value, const JsonPlace& place) {
  if (!value.is_object()) place.fail(fmt::format("expected an object, got {}", value.type_name()));
  return require_string(value, "type", place);
}

Json parse_json_text(std::string_view text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& error) {  // parse_error, or out_of_range for a number JSON cannot hold
    throw TokenizerError(fmt::format("{}: malformed JSON: {}", source, error.what()));
  }
}

Json read_json_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw TokenizerError(fmt::format("{}: cannot open file", path));
  std::ostringstream contents;
  contents << file.rdbuf();
  if (file.bad()) throw TokenizerError(fmt::format("{}: read error", path));
  return parse_json_text(contents.str(), path);
}

}  // namespace pagedllm::tokenizer
