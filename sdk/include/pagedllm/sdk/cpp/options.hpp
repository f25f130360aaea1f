#pragma once
// Reading a plugin's options (a JSON object) strictly: every key read is
// checked for type and range, and finish() rejects the keys nobody read, with
// a "did you mean" when one is close. Errors carry the dotted key path, which
// the host turns into the config file's line.

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/suggest.hpp"

namespace pllm {

class OptionReader {
 public:
  // `path` is the key path of `object` inside the plugin's options ("" at the top).
  explicit OptionReader(const nlohmann::json& object, std::string path = {})
      : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) {
      fail(path_, "must be a mapping of option names to values, got " + describe(object_));
    }
  }

  // Parses the options JSON the host passes in.
  static nlohmann::json parse(const char* json_text) {
    nlohmann::json parsed = nlohmann::json::parse(json_text ? json_text : "{}", nullptr, false);
    if (parsed.is_discarded()) fail("", "options are not valid JSON");
    if (parsed.is_null()) parsed = nlohmann::json::object();
    return parsed;
  }

  bool has(std::string_view key) const { return object_.contains(key); }

  // The value of `key` or `fallback` when absent. T is bool, an integer type,
  // float/double or std::string.
  template <class T>
  T get(std::string_view key, T fallback) {
    read_.insert(std::string(key));
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return fallback;
    return convert<T>(*it, key_path(key));
  }

  template <class T>
  T require(std::string_view key) {
    read_.insert(std::string(key));
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) fail(key_path(key), "is required");
    return convert<T>(*it, key_path(key));
  }

  // A string option that must be one of `choices`.
  std::string get_choice(std::string_view key, std::string fallback,
                         std::initializer_list<std::string_view> choices) {
    std::string value = get<std::string>(key, std::move(fallback));
    if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
      std::string allowed;
      for (auto c : choices) allowed += (allowed.empty() ? "" : ", ") + std::string(c);
      fail(key_path(key), "must be one of " + allowed + ", got \"" + value + "\"");
    }
    return value;
  }

  // A number option within [lo, hi].
  template <class T>
  T get_in_range(std::string_view key, T fallback, T lo, T hi) {
    T value = get<T>(key, fallback);
    if (value < lo || value > hi) {
      fail(key_path(key), "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(value));
    }
    return value;
  }

  // A nested mapping; its unknown keys are checked by its own finish().
  OptionReader child(std::string_view key) {
    read_.insert(std::string(key));
    auto it = object_.find(key);
    static const nlohmann::json empty = nlohmann::json::object();
    return OptionReader(it == object_.end() || it->is_null() ? empty : *it, key_path(key));
  }

  // Rejects every key that was not read.
  void finish() const {
    for (const auto& item : object_.items()) {
      if (read_.count(item.key())) continue;
      std::string message = "unknown option";
      if (auto suggestion = closest_match(item.key(), read_); !suggestion.empty()) {
        message += " (did you mean '" + suggestion + "'?)";
      }
      std::vector<std::string> known(read_.begin(), read_.end());
      if (!known.empty()) {
        message += "; known options: ";
        for (std::size_t i = 0; i < known.size(); ++i) message += (i ? ", " : "") + known[i];
      }
      fail(key_path(item.key()), message);
    }
  }

  [[noreturn]] static void fail(const std::string& key, const std::string& message) {
    throw Error(PLLM_ERROR_INVALID_CONFIG, (key.empty() ? "" : key + ": ") + message, key);
  }

 private:
  std::string key_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  static std::string describe(const nlohmann::json& value) {
    return std::string(value.type_name()) + " " + value.dump();
  }

  template <class T>
  static T convert(const nlohmann::json& value, const std::string& key) {
    if constexpr (std::is_same_v<T, bool>) {
      if (!value.is_boolean()) fail(key, "expected true or false, got " + describe(value));
      return value.get<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!value.is_number_integer()) fail(key, "expected an integer, got " + describe(value));
      if (value.is_number_unsigned()) {
        const auto v = value.get<std::uint64_t>();
        if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) {
          fail(key, "is out of range: " + value.dump());
        }
        return static_cast<T>(v);
      }
      const auto v = value.get<std::int64_t>();
      if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
          (v > 0 && static_cast<std::uint64_t>(v) > static_cast<std::uint64_t>(std::numeric_limits<T>::max()))) {
        fail(key, "is out of range: " + value.dump());
      }
      return static_cast<T>(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!value.is_number()) fail(key, "expected a number, got " + describe(value));
      return value.get<T>();
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!value.is_string()) fail(key, "expected a string, got " + describe(value));
      return value.get<std::string>();
    } else {
      static_assert(sizeof(T) == 0, "OptionReader supports bool, integers, floating point and std::string");
    }
  }

  const nlohmann::json& object_;
  std::string path_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace pllm
