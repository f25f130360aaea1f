#include "core/plugin/plugin_registry.h"

#include <cstdlib>
#include <sstream>

#include <boost/dll/runtime_symbol_info.hpp>
#include <fmt/format.h>

#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_kind.h"

#ifndef PAGEDLLM_PLUGIN_INSTALL_RELDIR
#error "PAGEDLLM_PLUGIN_INSTALL_RELDIR must be defined by the build"
#endif

namespace pagedllm {

namespace fs = std::filesystem;

namespace {

// "an attention", "a model".
std::string with_article(pllm_plugin_kind kind) {
  const std::string_view name = plugin_kind_name(kind);
  return std::string(name.starts_with('a') ? "an " : "a ") + std::string(name);
}

}  // namespace

PluginRegistry::PluginRegistry(std::vector<fs::path> search_paths, SdkVersion host_sdk)
    : search_paths_(std::move(search_paths)), host_sdk_(host_sdk) {}

std::vector<fs::path> PluginRegistry::default_search_paths() {
  std::error_code ec;
  const fs::path exe_dir = boost::dll::program_location(ec).parent_path();
  if (ec || exe_dir.empty()) return {};
  return {exe_dir / ".." / "plugins", exe_dir / PAGEDLLM_PLUGIN_INSTALL_RELDIR};
}

std::vector<fs::path> PluginRegistry::environment_search_paths() {
  std::vector<fs::path> paths;
  const char* value = std::getenv("PAGEDLLM_PLUGIN_PATH");
  if (!value) return paths;
  std::stringstream in(value);
  std::string item;
  while (std::getline(in, item, ':')) {
    if (!item.empty()) paths.emplace_back(item);
  }
  return paths;
}

bool PluginRegistry::is_path(std::string_view name_or_path) {
  return name_or_path.find('/') != std::string_view::npos || name_or_path.ends_with(".so");
}

fs::path PluginRegistry::resolve(std::string_view name_or_path) const {
  if (is_path(name_or_path)) return fs::path(name_or_path);
  const std::string file_name = std::string(name_or_path) + ".so";
  std::vector<std::string> searched;
  for (const auto& dir : search_paths_) {
    const fs::path candidate = dir / file_name;
    std::error_code ec;
    if (fs::exists(candidate, ec)) return candidate;
    searched.push_back(dir.lexically_normal().string());
  }
  throw PluginLoadError(fmt::format(
      "plugin '{}' not found: no {} in {}. Build it, add its directory to plugins.search_paths "
      "(or PAGEDLLM_PLUGIN_PATH), or give the path of its .so file",
      name_or_path, file_name,
      searched.empty() ? std::string("any search path (none configured)")
                       : fmt::format("{}", fmt::join(searched, ", "))));
}

std::shared_ptr<PluginLibrary> PluginRegistry::load(std::string_view name_or_path,
                                                    pllm_plugin_kind expected, std::string_view slot) {
  const fs::path file = resolve(name_or_path);
  std::error_code ec;
  fs::path key = fs::weakly_canonical(file, ec);
  if (ec) key = fs::absolute(file);

  std::shared_ptr<PluginLibrary> plugin = loaded_[key].lock();
  if (!plugin) {
    plugin = PluginLibrary::load(file, host_sdk_);
    loaded_[key] = plugin;
  }

  if (plugin->kind() != expected) {
    throw PluginLoadError(fmt::format("{}: plugin '{}' is {} plugin, but {} needs {} plugin. Name {} plugin there",
                                      file.string(), plugin->name(), with_article(plugin->kind()), slot,
                                      with_article(expected), with_article(expected)));
  }
  // By name or by path alike, a plugin's file is <plugin name>.so: the name in
  // configs, logs and --check output then always says which file runs.
  const std::string file_name = file.filename().string();
  const std::string named_for = file_name.ends_with(".so") ? file_name.substr(0, file_name.size() - 3) : file_name;
  if (plugin->name() != named_for) {
    throw PluginLoadError(fmt::format(
        "{}: the file is named for plugin '{}' but the plugin inside calls itself '{}'; a plugin's file must "
        "be <its name>.so. Rename the file to {}.so{}",
        file.string(), named_for, plugin->name(), plugin->name(),
        is_path(name_or_path) ? "" : fmt::format(" or name '{}' in the config", plugin->name())));
  }
  return plugin;
}

}  // namespace pagedllm
