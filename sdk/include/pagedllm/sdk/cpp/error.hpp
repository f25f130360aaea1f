#pragma once
// Errors inside a C++ plugin are exceptions; at the boundary they become a
// status and a message (pllm::guard). Nothing escapes into the host.

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk/status.h"

namespace pllm {

// An error with the status the host should see and, for option errors, the
// dotted key inside the plugin's options that is wrong.
class Error : public std::runtime_error {
 public:
  Error(pllm_status status, std::string message, std::string key = {})
      : std::runtime_error(std::move(message)), status_(status), key_(std::move(key)) {}
  pllm_status status() const noexcept { return status_; }
  const std::string& key() const noexcept { return key_; }

 private:
  pllm_status status_;
  std::string key_;
};

// Copies a message into a pllm_error, truncating to fit; safe on NULL.
inline void set_error(pllm_error* error, const char* message, const char* key = "") noexcept {
  if (!error) return;
  std::snprintf(error->message, sizeof error->message, "%s", message ? message : "");
  std::snprintf(error->key, sizeof error->key, "%s", key ? key : "");
}

// Runs `body` and converts any exception into a status + message. Every
// function a plugin exports goes through it.
template <class Body>
pllm_status guard(pllm_error* error, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return PLLM_OK;
  } catch (const Error& e) {
    set_error(error, e.what(), e.key().c_str());
    return e.status();
  } catch (const nlohmann::json::exception& e) {
    set_error(error, e.what());
    return PLLM_ERROR_INVALID_CONFIG;
  } catch (const std::bad_alloc&) {
    set_error(error, "out of host memory");
    return PLLM_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(error, e.what());
    return PLLM_ERROR_INTERNAL;
  } catch (...) {
    set_error(error, "unknown exception");
    return PLLM_ERROR_INTERNAL;
  }
}

}  // namespace pllm
