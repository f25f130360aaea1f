#pragma once
// Small string helpers shared by config parsing and error messages.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pagedllm {

// Levenshtein distance, for "did you mean" suggestions.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word`, if one is close enough to be a likely typo.
std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates);

// Joins strings with a separator: join({"a","b"}, ", ") == "a, b".
std::string join(std::span<const std::string> parts, std::string_view separator);

}  // namespace pagedllm
