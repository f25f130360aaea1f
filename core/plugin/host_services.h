#pragma once
// The services table (pllm_host_api) the host gives one plugin: its log
// messages go to a spdlog logger named after the plugin, its progress reports
// to the host's progress display. Every service may be called from any thread,
// concurrently (sdk/README.md, "Threads and reentrancy"): the logger's sink is
// a locking (_mt) one and the progress state has its own mutex.

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <spdlog/logger.h>

#include "pagedllm/sdk/host.h"

namespace pagedllm {

class HostServices {
 public:
  explicit HostServices(const std::string& plugin_name);
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // Valid as long as this object; `context` points back at it.
  const pllm_host_api* api() const { return &api_; }

 private:
  static void log(void* context, pllm_log_level level, const char* message);
  static int32_t log_enabled(void* context, pllm_log_level level);
  static void progress(void* context, const char* task, uint64_t done, uint64_t total);

  std::shared_ptr<spdlog::logger> logger_;
  pllm_host_api api_{};
  // Last progress percentage reported per task, so progress is logged in steps.
  std::mutex progress_mutex_;
  // Per task, the tenth of its progress last logged; a task leaves when it reaches 100%.
  std::unordered_map<std::string, int> logged_tenth_;
};

}  // namespace pagedllm
