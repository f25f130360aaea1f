#pragma once
// Small string helpers shared by config parsing and error messages.

#include <span>
#include <string>
#include <string_view>

namespace pagedllm {

// Joins strings with a separator: join({"a","b"}, ", ") == "a, b".
std::string join(std::span<const std::string> parts, std::string_view separator);

}  // namespace pagedllm
