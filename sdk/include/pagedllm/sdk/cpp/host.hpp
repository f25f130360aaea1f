#pragma once
// The host's services as seen from inside a plugin: logging into the host's
// log under the plugin's name, and progress reports for long work.

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

#include "pagedllm/sdk/host.h"
#include "pagedllm/sdk/plugin.h"

namespace pllm {
namespace detail {
// Set once by the plugin's init. Hidden so that every plugin library has its
// own copy even when two are loaded into the same process.
inline __attribute__((visibility("hidden"))) const pllm_host_api* host_api = nullptr;
}  // namespace detail

// The host's services table; null only before init.
inline const pllm_host_api* host() noexcept { return detail::host_api; }

inline bool log_enabled(pllm_log_level level) noexcept {
  const pllm_host_api* h = host();
  return h && h->log && (!h->log_enabled || h->log_enabled(h->context, level));
}

// log(PLLM_LOG_INFO, "loaded ", n, " tensors"): the arguments are streamed
// together, and only when the host would write the message.
template <class... Args>
void log(pllm_log_level level, Args&&... args) {
  if (!log_enabled(level)) return;
  std::ostringstream text;
  (text << ... << std::forward<Args>(args));
  host()->log(host()->context, level, text.str().c_str());
}
template <class... Args> void log_debug(Args&&... args) { log(PLLM_LOG_DEBUG, std::forward<Args>(args)...); }
template <class... Args> void log_info(Args&&... args) { log(PLLM_LOG_INFO, std::forward<Args>(args)...); }
template <class... Args> void log_warn(Args&&... args) { log(PLLM_LOG_WARN, std::forward<Args>(args)...); }
template <class... Args> void log_error(Args&&... args) { log(PLLM_LOG_ERROR, std::forward<Args>(args)...); }

inline void report_progress(const char* task, std::uint64_t done, std::uint64_t total) noexcept {
  const pllm_host_api* h = host();
  if (h && PLLM_HAS_FIELD(pllm_host_api, h, progress) && h->progress) {
    h->progress(h->context, task, done, total);
  }
}

}  // namespace pllm
