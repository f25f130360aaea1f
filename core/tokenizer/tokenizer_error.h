#pragma once
// The tokenizer's one error type: bad tokenizer files, unsupported features
// and bad user input (invalid UTF-8, unknown chat roles). Messages name the
// file (or "prompt") and what is wrong, so callers can show them as they are.

#include <stdexcept>
#include <string>

namespace pagedllm::tokenizer {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pagedllm::tokenizer
