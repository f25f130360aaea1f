#include "core/plugin/host_services.h"

#include <algorithm>

#include "core/common/logging.h"
#include "pagedllm/sdk/version.h"

#ifndef PAGEDLLM_HOST_VERSION
#error "PAGEDLLM_HOST_VERSION must be defined by the build"
#endif

namespace pagedllm {

namespace {

spdlog::level::level_enum to_spdlog(pllm_log_level level) {
  switch (level) {
    case PLLM_LOG_TRACE: return spdlog::level::trace;
    case PLLM_LOG_DEBUG: return spdlog::level::debug;
    case PLLM_LOG_INFO: return spdlog::level::info;
    case PLLM_LOG_WARN: return spdlog::level::warn;
    case PLLM_LOG_ERROR: return spdlog::level::err;
    case PLLM_LOG_FORCE_32BIT: break;
  }
  // A plugin passed a value outside the enum: log it rather than drop it.
  return spdlog::level::warn;
}

}  // namespace

HostServices::HostServices(const std::string& plugin_name) : logger_(logger(plugin_name)) {
  api_.struct_size = sizeof(pllm_host_api);
  api_.context = this;
  api_.host_version = PAGEDLLM_HOST_VERSION;
  api_.log = &HostServices::log;
  api_.log_enabled = &HostServices::log_enabled;
  api_.progress = &HostServices::progress;
}

void HostServices::log(void* context, pllm_log_level level, const char* message) {
  auto* self = static_cast<HostServices*>(context);
  self->logger_->log(to_spdlog(level), "{}", message ? message : "");
}

int32_t HostServices::log_enabled(void* context, pllm_log_level level) {
  return static_cast<HostServices*>(context)->logger_->should_log(to_spdlog(level)) ? 1 : 0;
}

void HostServices::progress(void* context, const char* task, uint64_t done, uint64_t total) {
  auto* self = static_cast<HostServices*>(context);
  const std::string name = task ? task : "";
  const int percent = total ? static_cast<int>(100 * std::min(done, total) / total) : 100;
  // Log each task in steps of 10%: its start, every tenth, its end. Reports may
  // come from several of the plugin's threads at once, each its own task, so
  // each task keeps its own step (interleaved tasks would otherwise log every call).
  const std::lock_guard lock(self->progress_mutex_);
  const auto [entry, first_report] = self->logged_tenth_.try_emplace(name, percent / 10);
  if (first_report || entry->second != percent / 10) {
    self->logger_->info("{}: {}% ({}/{})", name, percent, done, total);
    entry->second = percent / 10;
  }
  if (percent == 100) self->logged_tenth_.erase(entry);
}

}  // namespace pagedllm
