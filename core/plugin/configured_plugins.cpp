#include "core/plugin/configured_plugins.h"

#include <filesystem>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "core/plugin/plugin_error.h"

namespace pagedllm {

namespace fs = std::filesystem;

PluginRegistry make_plugin_registry(const HostConfig& config) {
  std::vector<fs::path> paths = config.plugin_search_paths;
  for (auto& p : PluginRegistry::environment_search_paths()) paths.push_back(std::move(p));
  for (auto& p : PluginRegistry::default_search_paths()) paths.push_back(std::move(p));
  return PluginRegistry(std::move(paths));
}

namespace {

// Asks the plugin to validate its options; an error points at the option's line.
std::optional<std::string> validate_options(const HostConfig& config, const PluginSlot& slot,
                                            const PluginLibrary& library) {
  pllm_error error{};
  const std::string json = slot.options.dump();
  const pllm_status status = library.descriptor().validate_options(json.c_str(), &error);
  if (status == PLLM_OK) return std::nullopt;
  std::string path = slot.key_path + ".options";
  if (error.key[0] != '\0') path += std::string(".") + error.key;
  return fmt::format("{}: {}.options: plugin '{}' rejected its options: {}", config.sources.locate(path),
                     slot.key_path, library.name(), error.message);
}

}  // namespace

ConfiguredPlugins load_configured_plugins(const HostConfig& config, PluginRegistry& registry) {
  ConfiguredPlugins loaded;
  std::vector<std::pair<const PluginSlot*, pllm_plugin_kind>> slots{
      {&config.model.plugin, PLLM_PLUGIN_KIND_MODEL},
      {&config.attention, PLLM_PLUGIN_KIND_ATTENTION},
      {&config.sampler, PLLM_PLUGIN_KIND_SAMPLER},
  };
  if (config.speculative) slots.emplace_back(&config.speculative->plugin, PLLM_PLUGIN_KIND_SPECULATOR);
  if (config.parallel) slots.emplace_back(&config.parallel->collectives, PLLM_PLUGIN_KIND_COLLECTIVES);
  if (config.constraint) slots.emplace_back(&*config.constraint, PLLM_PLUGIN_KIND_CONSTRAINT);

  for (const auto& [slot, kind] : slots) {
    ConfiguredPlugin configured{slot, kind, nullptr};
    const std::string where = config.sources.locate(slot->key_path + ".plugin");
    try {
      configured.library = registry.load(slot->plugin, kind, slot->key_path + ".plugin");
      if (auto error = validate_options(config, *slot, *configured.library)) loaded.errors.push_back(*error);
    } catch (const PluginLoadError& e) {
      loaded.errors.push_back(fmt::format("{}: {}.plugin: {}", where, slot->key_path, e.what()));
    }
    loaded.plugins.push_back(std::move(configured));
  }
  return loaded;
}

}  // namespace pagedllm
