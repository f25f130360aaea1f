#pragma once
// Finds and loads plugins. A plugin is named in the config either by name
// ("attention_cpu": the file <name>.so in the first search path that has it)
// or by path (anything containing a '/' or ending in ".so"). Search paths are
// tried in order: the config's plugins.search_paths, then PAGEDLLM_PLUGIN_PATH
// (colon-separated), then the host's own plugin directories. There is no
// fallback: a plugin that cannot be used is an error, never replaced by another.

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/plugin/plugin_library.h"
#include "core/plugin/sdk_version.h"
#include "pagedllm/sdk/plugin.h"

namespace pagedllm {

class PluginRegistry {
 public:
  explicit PluginRegistry(std::vector<std::filesystem::path> search_paths,
                          SdkVersion host_sdk = kHostSdkVersion);

  // The directories plugins are looked up in, in order.
  const std::vector<std::filesystem::path>& search_paths() const { return search_paths_; }

  // Where the plugin `name_or_path` would be loaded from. Throws PluginLoadError
  // listing the directories searched when it is not found.
  std::filesystem::path resolve(std::string_view name_or_path) const;

  // Loads (or returns the already loaded) plugin and checks that it is of
  // `expected` kind, for the config slot `slot` ("attention.plugin") named in
  // errors. Throws PluginLoadError.
  std::shared_ptr<PluginLibrary> load(std::string_view name_or_path, pllm_plugin_kind expected,
                                      std::string_view slot);

  // The host's own plugin directories: next to the executable in a build tree
  // (bin/../plugins) and in an installed tree (bin/../lib/pagedllm/plugins).
  static std::vector<std::filesystem::path> default_search_paths();

  // The directories in PAGEDLLM_PLUGIN_PATH.
  static std::vector<std::filesystem::path> environment_search_paths();

 private:
  static bool is_path(std::string_view name_or_path);

  std::vector<std::filesystem::path> search_paths_;
  SdkVersion host_sdk_;
  // Loaded libraries by canonical path; weak, so a plugin unloads when nothing
  // from it is alive any more (except one with CUDA code: PluginLibrary::kept_loaded).
  std::map<std::filesystem::path, std::weak_ptr<PluginLibrary>> loaded_;
};

}  // namespace pagedllm
