#pragma once
// The host's logging: spdlog, one logger per source ("host", and one per
// plugin, named after it), all writing to stderr so stdout stays clean for
// generated text and machine-readable output.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace pagedllm {

// Parses "trace|debug|info|warn|warning|error|critical|off".
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view text);

// Sets the level of every current and future pagedllm logger.
void set_log_level(spdlog::level::level_enum level);

// Adds `label` to every line ("rank 1": which process of a tensor-parallel job wrote it).
void set_log_process_label(const std::string& label);

// The logger named `name`, created on first use with the shared stderr sink.
std::shared_ptr<spdlog::logger> logger(const std::string& name);

// The host's own logger.
inline spdlog::logger& host_log() { return *logger("host"); }

}  // namespace pagedllm
