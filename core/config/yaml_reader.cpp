#include "core/config/yaml_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "core/common/strings.h"
#include "core/config/config_error.h"
#include "pagedllm/sdk/cpp/suggest.hpp"

namespace pagedllm {

namespace {

// yaml-cpp tags plain (unquoted) scalars "?" and quoted ones "!".
bool is_plain(const YAML::Node& node) { return node.Tag() == "?"; }

bool is_null_scalar(std::string_view s) { return s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL"; }

std::optional<bool> parse_bool(std::string_view s) {
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  return std::nullopt;
}

std::optional<std::int64_t> parse_int(std::string_view s) {
  std::int64_t value = 0;
  const char* begin = s.data();
  if (!s.empty() && s.front() == '+') ++begin;
  const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || begin == end) return std::nullopt;
  return value;
}

std::optional<double> parse_double(std::string_view s) {
  double value = 0;
  const char* begin = s.data();
  if (!s.empty() && s.front() == '+') ++begin;
  const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || begin == end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string describe(const YAML::Node& node) {
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return fmt::format("\"{}\"", node.Scalar());
  return "nothing";
}

}  // namespace

std::uint64_t parse_byte_size(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  const auto number = parse_double(text.substr(0, digits));
  std::string_view unit = text.substr(digits);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  static const std::pair<std::string_view, double> kUnits[] = {
      {"", 1.0},          {"B", 1.0},
      {"KB", 1e3},        {"MB", 1e6},        {"GB", 1e9},        {"TB", 1e12},
      {"KiB", 0x1p10},    {"MiB", 0x1p20},    {"GiB", 0x1p30},    {"TiB", 0x1p40},
  };
  const auto unit_it = std::find_if(std::begin(kUnits), std::end(kUnits),
                                    [&](const auto& u) { return u.first == unit; });
  if (!number || unit_it == std::end(kUnits)) {
    throw std::invalid_argument(fmt::format(
        "expected a size such as 1073741824, 512MiB or 2GiB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got \"{}\"",
        text));
  }
  const double bytes = *number * unit_it->second;
  if (bytes > static_cast<double>(std::numeric_limits<std::int64_t>::max())) {
    throw std::invalid_argument(fmt::format("size \"{}\" is too large", text));
  }
  return static_cast<std::uint64_t>(bytes);
}

nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (!is_plain(node)) return s;
      if (is_null_scalar(s)) return nullptr;
      if (auto b = parse_bool(s)) return *b;
      if (auto i = parse_int(s)) return *i;
      if (auto d = parse_double(s)) return *d;
      return s;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json array = nlohmann::json::array();
      for (const auto& element : node) array.push_back(yaml_to_json(element));
      return array;
    }
    case YAML::NodeType::Map: {
      nlohmann::json object = nlohmann::json::object();
      for (const auto& item : node) object[item.first.Scalar()] = yaml_to_json(item.second);
      return object;
    }
  }
  return nullptr;
}

YamlMapReader::YamlMapReader(YAML::Node node, std::string path, const SourceMap& sources)
    : node_(std::move(node)), path_(std::move(path)), sources_(sources) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap()) {
    throw ConfigError(fmt::format("{}: {}: expected a mapping of keys to values, got {}",
                                  sources_.locate(path_), path_.empty() ? "(top level)" : path_, describe(node_)));
  }
  if (node_.IsMap()) {
    for (const auto& item : node_) {
      if (!item.first.IsScalar()) {
        throw ConfigError(fmt::format("{}: {}: keys must be plain names", sources_.locate(path_),
                                      path_.empty() ? "(top level)" : path_));
      }
    }
  }
}

std::string YamlMapReader::key_path(std::string_view key) const { return join_key_path(path_, std::string(key)); }

void YamlMapReader::fail(std::string_view key, const std::string& message) const {
  const std::string path = key_path(key);
  throw ConfigError(fmt::format("{}: {}: {}", sources_.locate(path), path, message));
}

bool YamlMapReader::has(std::string_view key) const {
  return node_.IsMap() && node_[std::string(key)].IsDefined();
}

bool YamlMapReader::is_set(std::string_view key) const {
  if (!node_.IsMap()) return false;
  const YAML::Node v = node_[std::string(key)];
  return v.IsDefined() && !v.IsNull() && !(v.IsScalar() && is_plain(v) && is_null_scalar(v.Scalar()));
}

bool YamlMapReader::is_list(std::string_view key) const {
  return is_set(key) && node_[std::string(key)].IsSequence();
}

std::optional<YAML::Node> YamlMapReader::value(std::string_view key) {
  read_.insert(std::string(key));
  if (!is_set(key)) return std::nullopt;
  return node_[std::string(key)];
}

std::string YamlMapReader::scalar_of(std::string_view key, const YAML::Node& node, const char* expected) const {
  if (!node.IsScalar()) fail(key, fmt::format("expected {}, got {}", expected, describe(node)));
  return node.Scalar();
}

std::string YamlMapReader::get_string(std::string_view key, std::string fallback) {
  const auto v = value(key);
  if (!v) return fallback;
  return scalar_of(key, *v, "a string");
}

std::optional<std::string> YamlMapReader::get_optional_string(std::string_view key) {
  const auto v = value(key);
  if (!v) return std::nullopt;
  return scalar_of(key, *v, "a string");
}

std::string YamlMapReader::require_string(std::string_view key) {
  const auto v = value(key);
  if (!v) fail(key, "is required");
  return scalar_of(key, *v, "a string");
}

bool YamlMapReader::get_bool(std::string_view key, bool fallback) {
  const auto v = value(key);
  if (!v) return fallback;
  const std::string s = scalar_of(key, *v, "true or false");
  const auto parsed = is_plain(*v) ? parse_bool(s) : std::nullopt;
  if (!parsed) fail(key, fmt::format("expected true or false, got {}", describe(*v)));
  return *parsed;
}

std::int64_t YamlMapReader::get_int(std::string_view key, std::int64_t fallback, std::int64_t min,
                                    std::int64_t max) {
  const auto v = value(key);
  if (!v) return fallback;
  const std::string s = scalar_of(key, *v, "an integer");
  const auto parsed = is_plain(*v) ? parse_int(s) : std::nullopt;
  if (!parsed) fail(key, fmt::format("expected an integer, got {}", describe(*v)));
  if (*parsed < min || *parsed > max) fail(key, fmt::format("must be in [{}, {}], got {}", min, max, *parsed));
  return *parsed;
}

double YamlMapReader::get_double(std::string_view key, double fallback, double min, double max) {
  const auto v = value(key);
  if (!v) return fallback;
  const std::string s = scalar_of(key, *v, "a number");
  const auto parsed = is_plain(*v) ? parse_double(s) : std::nullopt;
  if (!parsed) fail(key, fmt::format("expected a number, got {}", describe(*v)));
  if (*parsed < min || *parsed > max) fail(key, fmt::format("must be in [{}, {}], got {}", min, max, *parsed));
  return *parsed;
}

std::uint64_t YamlMapReader::get_bytes(std::string_view key, std::uint64_t fallback) {
  const auto v = value(key);
  if (!v) return fallback;
  const std::string s = scalar_of(key, *v, "a size");
  try {
    return parse_byte_size(s);
  } catch (const std::invalid_argument& e) {
    fail(key, e.what());
  }
}

std::string YamlMapReader::get_choice(std::string_view key, std::string fallback,
                                      std::initializer_list<std::string_view> choices) {
  std::string chosen = get_string(key, std::move(fallback));
  if (std::find(choices.begin(), choices.end(), chosen) == choices.end()) {
    std::vector<std::string> names(choices.begin(), choices.end());
    fail(key, fmt::format("must be one of {}, got \"{}\"", join(names, ", "), chosen));
  }
  return chosen;
}

std::vector<std::string> YamlMapReader::get_string_list(std::string_view key) {
  const auto v = value(key);
  std::vector<std::string> items;
  if (!v) return items;
  if (!v->IsSequence()) fail(key, fmt::format("expected a list, got {}", describe(*v)));
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].IsScalar()) fail(fmt::format("{}[{}]", key, i), fmt::format("expected a string, got {}", describe((*v)[i])));
    items.push_back((*v)[i].Scalar());
  }
  return items;
}

nlohmann::json YamlMapReader::get_json_object(std::string_view key) {
  const auto v = value(key);
  if (!v) return nlohmann::json::object();
  if (!v->IsMap()) fail(key, fmt::format("expected a mapping of options, got {}", describe(*v)));
  nlohmann::json options = yaml_to_json(*v);
  // The plugin receives the options as JSON text: a string that is not UTF-8 cannot be
  // written as JSON (dump() throws), so it is refused here, naming the key.
  try {
    (void)options.dump();
  } catch (const nlohmann::json::type_error&) {
    fail(key, "holds text that is not valid UTF-8 (plugin options are handed on as JSON)");
  }
  return options;
}

YamlMapReader YamlMapReader::child(std::string_view key) {
  return YamlMapReader(value(key).value_or(YAML::Node()), key_path(key), sources_);
}

std::vector<YamlMapReader> YamlMapReader::children(std::string_view key) {
  const auto v = value(key);
  std::vector<YamlMapReader> items;
  if (!v) return items;
  if (!v->IsSequence()) fail(key, fmt::format("expected a list of mappings, got {}", describe(*v)));
  for (std::size_t i = 0; i < v->size(); ++i) {
    items.emplace_back((*v)[i], fmt::format("{}[{}]", key_path(key), i), sources_);
  }
  return items;
}

void YamlMapReader::finish() const {
  if (!node_.IsMap()) return;
  for (const auto& item : node_) {
    const std::string& key = item.first.Scalar();
    if (read_.count(key)) continue;
    std::vector<std::string> known(read_.begin(), read_.end());
    std::string message = "unknown key";
    if (auto suggestion = pllm::closest_match(key, known); !suggestion.empty()) {
      message += fmt::format(" (did you mean '{}'?)", suggestion);
    }
    message += fmt::format("; known keys here: {}", join(known, ", "));
    fail(key, message);
  }
}

}  // namespace pagedllm
