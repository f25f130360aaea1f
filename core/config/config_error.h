#pragma once

#include <stdexcept>

namespace pagedllm {

// The configuration is wrong. The message starts with where ("serve.yaml:12:5:"
// or "--set cache.block_size=0:") and the key path, then says what is wrong.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pagedllm
