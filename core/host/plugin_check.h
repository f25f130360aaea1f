#pragma once
// Loading the plugins a config names and validating their options: what
// --check does, and the first thing serving does.

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/plugin/plugin_library.h"
#include "core/plugin/plugin_registry.h"

namespace pagedllm {

struct ConfiguredPlugin {
  const PluginSlot* slot = nullptr;
  pllm_plugin_kind kind = PLLM_PLUGIN_KIND_INVALID;
  std::shared_ptr<PluginLibrary> library;  // null when it could not be loaded
};

struct PluginCheckReport {
  std::vector<ConfiguredPlugin> plugins;
  // One message per plugin that could not be loaded or rejected its options;
  // each names the config location, the slot and the file.
  std::vector<std::string> errors;
  bool ok() const { return errors.empty(); }
};

// A registry searching the config's plugins.search_paths, then
// PAGEDLLM_PLUGIN_PATH, then the host's own plugin directories.
PluginRegistry make_plugin_registry(const HostConfig& config);

// Loads every configured plugin and has it validate its options. Never throws
// for a bad plugin: every failure is reported, so one run shows them all.
PluginCheckReport load_configured_plugins(const HostConfig& config, PluginRegistry& registry);

// The --check summary: one line per plugin, then the main settings.
void print_check_summary(const HostConfig& config, const PluginCheckReport& report, std::ostream& out);

}  // namespace pagedllm
