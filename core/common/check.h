#pragma once
// Invariant checks whose messages carry the values involved. A failed check is
// a bug in pagedllm, not bad input: bad input gets its own error types.

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace pagedllm {

// Thrown when an internal invariant does not hold.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

}  // namespace pagedllm

// PAGEDLLM_CHECK(cond, "fmt {}", args...): throws InternalError naming the
// condition, the place and the formatted values.
#define PAGEDLLM_CHECK(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      throw ::pagedllm::InternalError(fmt::format("{}:{}: check '{}' failed: {}", __FILE__, \
                                                  __LINE__, #cond, fmt::format(__VA_ARGS__))); \
    }                                                                                     \
  } while (false)
