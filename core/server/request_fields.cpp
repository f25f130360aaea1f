#include "core/server/request_fields.h"

#include <fmt/format.h>

#include "core/server/api_error.h"

namespace pagedllm::server {

using nlohmann::json;

const json* field(const json& object, std::string_view key) {
  const auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

[[noreturn]] void wrong_type(const std::string& param, std::string_view expected, const json& value) {
  throw invalid_request(fmt::format("'{}' must be {}, got {}", param, expected, value.type_name()), param);
}

std::optional<bool> get_bool(const json& object, std::string_view key, const std::string& param) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(param, "a boolean", *v);
  return v->get<bool>();
}

std::optional<bool> get_bool(const json& object, std::string_view key) {
  return get_bool(object, key, std::string(key));
}

namespace {

std::int64_t as_int(const json& v, const std::string& param, std::int64_t min, std::int64_t max) {
  if (!v.is_number_integer()) wrong_type(param, "an integer", v);
  // Unsigned values beyond int64 are out of every range here.
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) {
    throw invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", param, min, max, v.get<std::uint64_t>()), param);
  }
  const auto value = v.get<std::int64_t>();
  if (value < min || value > max) {
    throw invalid_request(fmt::format("'{}' must be in [{}, {}], got {}", param, min, max, value), param);
  }
  return value;
}

}  // namespace

std::optional<int> get_int(const json& object, std::string_view key, std::int64_t min, std::int64_t max) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  return static_cast<int>(as_int(*v, std::string(key), min, max));
}

std::optional<float> get_number(const json& object, std::string_view key, double min, double max, bool min_open) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  const std::string param(key);
  if (!v->is_number()) wrong_type(param, "a number", *v);
  const double value = v->get<double>();
  if (value > max || value < min || (min_open && value == min)) {
    throw invalid_request(fmt::format("'{}' must be in {}{}, {}], got {}", param, min_open ? "(" : "[", min, max, value),
                          param);
  }
  return static_cast<float>(value);
}

std::optional<std::string> get_string(const json& object, std::string_view key) {
  const json* v = field(object, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(std::string(key), "a string", *v);
  return v->get<std::string>();
}

}  // namespace pagedllm::server
