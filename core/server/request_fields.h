#pragma once
// Typed reading of request-body fields for the API routes. null counts as
// unset; a value of the wrong type or out of range is a 400 whose `param`
// names the field.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pagedllm::server {

// The value of `key`, or nullptr when it is absent or null.
const nlohmann::json* field(const nlohmann::json& object, std::string_view key);

// Throws the 400 for `param` holding `value` where `expected` was wanted.
[[noreturn]] void wrong_type(const std::string& param, std::string_view expected, const nlohmann::json& value);

// `param` names the field in errors (default: `key`).
std::optional<bool> get_bool(const nlohmann::json& object, std::string_view key, const std::string& param);
std::optional<bool> get_bool(const nlohmann::json& object, std::string_view key);
// An integer in [min, max].
std::optional<int> get_int(const nlohmann::json& object, std::string_view key, std::int64_t min, std::int64_t max);
// A number in [min, max], or (min, max] when min_open.
std::optional<float> get_number(const nlohmann::json& object, std::string_view key, double min, double max,
                                bool min_open = false);
std::optional<std::string> get_string(const nlohmann::json& object, std::string_view key);

}  // namespace pagedllm::server
