#pragma once
// Typed access to tokenizer.json / tokenizer_config.json fields with errors
// that name the file and the JSON path ("tokenizer.json: model.merges[3]: ...").

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/tokenizer/token_id.h"

namespace pagedllm::tokenizer {

using Json = nlohmann::json;

// Where a JSON value sits: the file it came from and its path inside.
class JsonPlace {
 public:
  JsonPlace(std::string file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}

  JsonPlace operator/(std::string_view key) const;
  JsonPlace operator[](std::size_t index) const;

  const std::string& file() const { return file_; }
  // "file: path" (or just "file" at the root), for error messages.
  std::string describe() const;
  [[noreturn]] void fail(std::string_view message) const;

 private:
  std::string file_;
  std::string path_;
};

// The member `key` of object `value`; fails when missing.
const Json& require_field(const Json& value, std::string_view key, const JsonPlace& place);
std::string require_string(const Json& value, std::string_view key, const JsonPlace& place);

// Optional members: absent or null give the fallback / nullopt.
std::optional<std::string> optional_string(const Json& value, std::string_view key,
                                           const JsonPlace& place);
bool optional_bool(const Json& value, std::string_view key, bool fallback, const JsonPlace& place);
long long optional_integer(const Json& value, std::string_view key, long long fallback,
                           const JsonPlace& place);

// A token id: an integer in 0..kMaxTokenId, read wide (get<TokenId>() would wrap a larger one).
TokenId require_token_id(const Json& value, const JsonPlace& place);

// The "type" member of a component object.
std::string component_type(const Json& value, const JsonPlace& place);

// Reads a whole JSON file; malformed JSON and unreadable files fail with the path.
Json read_json_file(const std::string& path);
Json parse_json_text(std::string_view text, const std::string& source);

}  // namespace pagedllm::tokenizer
