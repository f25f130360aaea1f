#pragma once
// One loaded plugin library: the shared object, its validated descriptor and
// the host services it was initialised with. Shared ownership: every object
// created from the plugin holds a reference, so the code stays mapped for as
// long as anything from it lives (Boost.DLL's library_holding_deleter idea).
// A library with CUDA code stays mapped until the process exits (kept_loaded()).

#include <filesystem>
#include <memory>
#include <string>
#include <variant>

#include <boost/dll/shared_library.hpp>

#include "core/common/check.h"
#include "core/plugin/host_services.h"
#include "core/plugin/sdk_version.h"
#include "pagedllm/sdk.h"

namespace pagedllm {

class PluginLibrary {
 public:
  // Loads, validates and initialises the plugin at `file`. Throws
  // PluginLoadError naming the file and what to do when it cannot be used.
  // `host_sdk` is the SDK version the host claims (tests emulate other hosts).
  static std::shared_ptr<PluginLibrary> load(const std::filesystem::path& file,
                                             SdkVersion host_sdk = kHostSdkVersion);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::filesystem::path& file() const { return file_; }
  const pllm_plugin_descriptor& descriptor() const { return *descriptor_; }
  std::string name() const { return descriptor_->name; }
  std::string version() const { return descriptor_->version; }
  pllm_plugin_kind kind() const { return descriptor_->kind; }
  SdkVersion sdk_version() const { return {descriptor_->sdk_major, descriptor_->sdk_minor}; }
  // Whether the library stays mapped until the process exits: one that carries CUDA code or
  // links a CUDA library (plugin_library.cpp, keep_loaded_if_cuda, says why). Any other unloads
  // when the last object from it is gone.
  bool kept_loaded() const { return kept_loaded_; }

  // The kind's function table as this host's SDK declares it. It is a copy of
  // the plugin's table padded with zeros: slots appended after the minor the
  // plugin was built against read as NULL, like optional slots it left unset.
  // Throws InternalError when Api is not the plugin's kind.
  template <class Api>
  const Api& api() const {
    const Api* table = std::get_if<Api>(&table_);
    PAGEDLLM_CHECK(table != nullptr, "plugin '{}' has no table of the requested kind", name());
    return *table;
  }

 private:
  PluginLibrary(std::filesystem::path file, boost::dll::shared_library library);

  std::filesystem::path file_;
  boost::dll::shared_library library_;
  const pllm_plugin_descriptor* descriptor_ = nullptr;
  std::variant<std::monostate, pllm_attention_api, pllm_model_api, pllm_sampler_api,
               pllm_speculator_api, pllm_collectives_api, pllm_constraint_api>
      table_;
  std::unique_ptr<HostServices> host_services_;
  bool initialised_ = false;
  bool kept_loaded_ = false;
};

}  // namespace pagedllm
