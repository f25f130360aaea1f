#pragma once
// Strict reading of one YAML mapping: each key read is type- and range-checked,
// finish() rejects the keys nobody read (with a "did you mean"), and every
// error names the place (file:line:col or the --set) and the key path.

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include "core/config/source_map.h"

namespace pagedllm {

class YamlMapReader {
 public:
  // `node` must be a mapping or null (an absent section reads as empty).
  YamlMapReader(YAML::Node node, std::string path, const SourceMap& sources);

  bool has(std::string_view key) const;

  std::string get_string(std::string_view key, std::string fallback);
  std::string require_string(std::string_view key);
  std::optional<std::string> get_optional_string(std::string_view key);
  bool get_bool(std::string_view key, bool fallback);
  std::int64_t get_int(std::string_view key, std::int64_t fallback, std::int64_t min, std::int64_t max);
  double get_double(std::string_view key, double fallback, double min, double max);
  // A size in bytes: an integer, or a number with a unit (B, KB, MB, GB, KiB, MiB, GiB, TiB).
  std::uint64_t get_bytes(std::string_view key, std::uint64_t fallback);
  std::string get_choice(std::string_view key, std::string fallback,
                         std::initializer_list<std::string_view> choices);
  std::vector<std::string> get_string_list(std::string_view key);
  // A mapping handed on as JSON (a plugin's options); {} when absent.
  nlohmann::json get_json_object(std::string_view key);
  // A nested section.
  YamlMapReader child(std::string_view key);
  // A list of sections (`key: [{...}, {...}]`), each read at the path key[i]; empty when absent.
  std::vector<YamlMapReader> children(std::string_view key);
  // True when the key is present and not null.
  bool is_set(std::string_view key) const;
  // True when the key holds a list (a setting that takes one value or several).
  bool is_list(std::string_view key) const;

  void finish() const;

  // Throws ConfigError for `key` of this mapping.
  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  std::string key_path(std::string_view key) const;
  const SourceMap& sources() const { return sources_; }

 private:
  // The value of `key`, or nullopt when it is absent or null.
  std::optional<YAML::Node> value(std::string_view key);
  std::string scalar_of(std::string_view key, const YAML::Node& node, const char* expected) const;

  YAML::Node node_;
  std::string path_;
  const SourceMap& sources_;
  std::set<std::string, std::less<>> read_;
};

// "2GiB" -> 2147483648. Throws std::invalid_argument with a message.
std::uint64_t parse_byte_size(std::string_view text);

// The YAML subtree as JSON: plain scalars become null, booleans or numbers
// when they read as such; quoted scalars stay strings.
nlohmann::json yaml_to_json(const YAML::Node& node);

}  // namespace pagedllm
