#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "pagedllm/sdk/status.h"

namespace pagedllm {

// A plugin could not be found, loaded or accepted. The message names the file,
// the versions involved and what to do about it.
class PluginLoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pagedllm

namespace pagedllm {

// A call into a plugin failed: its status and message, and for option errors
// the key inside the plugin's options it named.
class PluginCallError : public std::runtime_error {
 public:
  PluginCallError(pllm_status status, const std::string& message, std::string key = {})
      : std::runtime_error(message), status_(status), key_(std::move(key)) {}
  pllm_status status() const noexcept { return status_; }
  const std::string& key() const noexcept { return key_; }

 private:
  pllm_status status_;
  std::string key_;
};

}  // namespace pagedllm
