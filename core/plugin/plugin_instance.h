#pragma once
// An object created by a plugin (an attention backend, a model, ...), owned
// RAII-style. It holds its library, so the plugin's code stays loaded until
// the object is destroyed through the plugin's own destroy().

#include <memory>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_library.h"

namespace pagedllm {

template <class Api, class Handle>
class PluginInstance {
 public:
  PluginInstance() = default;
  PluginInstance(std::shared_ptr<const PluginLibrary> library, Handle* handle)
      : library_(std::move(library)), handle_(handle) {}
  ~PluginInstance() { reset(); }
  PluginInstance(PluginInstance&& other) noexcept
      : library_(std::move(other.library_)), handle_(std::exchange(other.handle_, nullptr)) {}
  PluginInstance& operator=(PluginInstance&& other) noexcept {
    if (this != &other) {
      reset();
      library_ = std::move(other.library_);
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  PluginInstance(const PluginInstance&) = delete;
  PluginInstance& operator=(const PluginInstance&) = delete;

  const Api& api() const { return library_->api<Api>(); }
  Handle* get() const { return handle_; }
  const PluginLibrary& library() const { return *library_; }
  explicit operator bool() const { return handle_ != nullptr; }

  void reset() {
    if (handle_) api().destroy(std::exchange(handle_, nullptr));
    library_.reset();
  }

 private:
  std::shared_ptr<const PluginLibrary> library_;
  Handle* handle_ = nullptr;
};

// Throws PluginCallError for a failed plugin call, prefixed with what was being done.
inline void check_plugin_call(pllm_status status, const pllm_error& error, const PluginLibrary& plugin,
                              const std::string& what) {
  if (status == PLLM_OK) return;
  throw PluginCallError(status,
                        fmt::format("plugin '{}': {} failed ({}): {}", plugin.name(), what,
                                    pllm_status_name(status), error.message),
                        error.key);
}

// Creates an instance through the kind table's create().
template <class Api, class Handle, class Args>
PluginInstance<Api, Handle> create_plugin_instance(std::shared_ptr<const PluginLibrary> library,
                                                   const Args& args) {
  pllm_error error{};
  Handle* handle = nullptr;
  const pllm_status status = library->api<Api>().create(&args, &handle, &error);
  check_plugin_call(status, error, *library, "create");
  if (!handle) {
    throw PluginCallError(PLLM_ERROR_INTERNAL,
                          fmt::format("plugin '{}': create returned success but no instance", library->name()));
  }
  return PluginInstance<Api, Handle>(std::move(library), handle);
}

using AttentionInstance = PluginInstance<pllm_attention_api, pllm_attention_backend>;
using ModelInstance = PluginInstance<pllm_model_api, pllm_model>;
using SamplerInstance = PluginInstance<pllm_sampler_api, pllm_sampler>;
using SpeculatorInstance = PluginInstance<pllm_speculator_api, pllm_speculator>;
using CollectivesInstance = PluginInstance<pllm_collectives_api, pllm_communicator>;
using ConstraintInstance = PluginInstance<pllm_constraint_api, pllm_constraint_engine>;

// The reference a model's forward() (or a draft) takes to `attention`.
inline pllm_attention_ref attention_ref(const AttentionInstance& attention) {
  pllm_attention_ref ref{};
  ref.struct_size = sizeof ref;
  ref.api = &attention.api();
  ref.backend = attention.get();
  return ref;
}

}  // namespace pagedllm
