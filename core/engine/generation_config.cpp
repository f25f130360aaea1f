#include "core/engine/generation_config.h"

#include <cstdint>
#include <fstream>
#include <limits>
#include <type_traits>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace pagedllm {
namespace {

using Json = nlohmann::json;

template <class T>
std::optional<T> optional_number(const Json& json, const char* key, const std::filesystem::path& file) {
  const auto found = json.find(key);
  if (found == json.end() || found->is_null()) return std::nullopt;
  if (!found->is_number()) {
    throw std::runtime_error(fmt::format("{}: '{}' must be a number, got {}", file.string(), key,
                                         found->type_name()));
  }
  // A value T cannot hold would be undefined behaviour to convert (found by tools/fuzz).
  const double value = found->get<double>();
  if (!(value >= double(std::numeric_limits<T>::lowest()) && value <= double(std::numeric_limits<T>::max())) ||
      (std::is_integral_v<T> && !found->is_number_integer())) {
    throw std::runtime_error(fmt::format("{}: '{}' = {} is not a{} number in range", file.string(), key,
                                         found->dump(), std::is_integral_v<T> ? "n integer" : ""));
  }
  return found->get<T>();
}

std::vector<std::int32_t> eos_ids_of(const Json& json, const std::filesystem::path& file) {
  const auto found = json.find("eos_token_id");
  if (found == json.end() || found->is_null()) return {};
  const auto as_id = [&](const Json& value) {
    if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<std::uint64_t>() > INT32_MAX) ||
        value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > INT32_MAX) {
      throw std::runtime_error(fmt::format("{}: 'eos_token_id' must be a token id or a list of "
                                           "token ids (integers in [0, 2^31)), got {}",
                                           file.string(), value.dump()));
    }
    return value.get<std::int32_t>();
  };
  std::vector<std::int32_t> ids;
  if (found->is_array()) {
    for (const Json& value : *found) ids.push_back(as_id(value));
  } else {
    ids.push_back(as_id(*found));
  }
  return ids;
}

}  // namespace

GenerationDefaults read_generation_defaults(const std::filesystem::path& model_dir,
                                            std::span<const std::int32_t> model_eos_ids,
                                            std::optional<std::int32_t> tokenizer_eos) {
  GenerationDefaults defaults;
  const std::filesystem::path file = model_dir / "generation_config.json";
  if (std::filesystem::exists(file)) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    Json json;
    try {
      json = Json::parse(text.str());
    } catch (const Json::exception& e) {  // parse_error, or out_of_range for a number JSON cannot hold
      throw std::runtime_error(fmt::format("{}: not valid JSON: {}", file.string(), e.what()));
    }
    if (!json.is_object()) throw std::runtime_error(fmt::format("{}: must be a JSON object", file.string()));
    defaults.temperature = optional_number<float>(json, "temperature", file);
    defaults.top_p = optional_number<float>(json, "top_p", file);
    defaults.top_k = optional_number<int>(json, "top_k", file);
    defaults.repetition_penalty = optional_number<float>(json, "repetition_penalty", file);
    defaults.eos_token_ids = eos_ids_of(json, file);
  }
  if (defaults.eos_token_ids.empty()) {
    defaults.eos_token_ids.assign(model_eos_ids.begin(), model_eos_ids.end());
  }
  if (defaults.eos_token_ids.empty() && tokenizer_eos) defaults.eos_token_ids.push_back(*tokenizer_eos);
  return defaults;
}

}  // namespace pagedllm
