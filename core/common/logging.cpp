#include "core/common/logging.h"

#include <mutex>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace pagedllm {

namespace {

struct LoggingState {
  std::mutex mutex;
  spdlog::level::level_enum level = spdlog::level::info;
  spdlog::sink_ptr sink;
  std::string label;
};

LoggingState& state() {
  static LoggingState s;
  return s;
}

// The caller holds the state's mutex.
spdlog::sink_ptr& shared_sink(LoggingState& s) {
  if (!s.sink) s.sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  s.sink->set_pattern(s.label.empty() ? "[%Y-%m-%d %H:%M:%S.%e] [%n] [%^%l%$] %v"
                                      : "[%Y-%m-%d %H:%M:%S.%e] [" + s.label + "] [%n] [%^%l%$] %v");
  return s.sink;
}

}  // namespace

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text) {
  if (text == "trace") return spdlog::level::trace;
  if (text == "debug") return spdlog::level::debug;
  if (text == "info") return spdlog::level::info;
  if (text == "warn" || text == "warning") return spdlog::level::warn;
  if (text == "error") return spdlog::level::err;
  if (text == "critical") return spdlog::level::critical;
  if (text == "off") return spdlog::level::off;
  return std::nullopt;
}

void set_log_level(spdlog::level::level_enum level) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.level = level;
  spdlog::apply_all([level](const std::shared_ptr<spdlog::logger>& l) { l->set_level(level); });
}

void set_log_process_label(const std::string& label) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.label = label;
  shared_sink(s);
}

std::shared_ptr<spdlog::logger> logger(const std::string& name) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (auto existing = spdlog::get(name)) return existing;
  auto created = std::make_shared<spdlog::logger>(name, s.sink ? s.sink : shared_sink(s));
  created->set_level(s.level);
  spdlog::register_logger(created);
  return created;
}

}  // namespace pagedllm
