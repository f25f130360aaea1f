#pragma once
// The plugins a config names, loaded and asked to validate their options: what
// the engine loads at startup and what pagedllm-host --check reports. Here, and
// not in core/host, so the engine needs nothing from the host above it.

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

struct ConfiguredPlugins {
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
ConfiguredPlugins load_configured_plugins(const HostConfig& config, PluginRegistry& registry);

}  // namespace pagedllm
