#pragma once
// What pagedllm-host --check prints about the plugins a config names
// (core/plugin/configured_plugins.h loads them).

#include <iosfwd>

#include "core/config/config.h"
#include "core/plugin/configured_plugins.h"

namespace pagedllm {

// The --check summary: one line per plugin, then the main settings.
void print_check_summary(const HostConfig& config, const ConfiguredPlugins& configured, std::ostream& out);

}  // namespace pagedllm
