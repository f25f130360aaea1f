#pragma once
// The configured model, checked before anything is loaded: that model.path exists, and what the
// model plugin can tell from the model's configuration without its weights
// (pllm_model_api.check_model, SDK 2.3) — `--check`'s look inside the model, and the engine's
// first step, so that a missing path is reported as missing rather than as a tokenizer problem.

#include "core/config/config.h"
#include "core/plugin/plugin_library.h"

namespace pagedllm {

// Throws ModelNotFound naming model.path (and where the config sets it) when it does not exist.
void require_model_path(const HostConfig& config);

// require_model_path, then the model plugin's check_model with the create args the engine would
// pass: throws PluginCallError with the plugin's refusal. Returns false, having checked only the
// path, when the plugin has no check_model (built against SDK 2.2 or older).
bool check_model(const HostConfig& config, const PluginLibrary& model_plugin);

class ModelNotFound : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace pagedllm
