#include "core/engine/model_check.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/engine/plugin_args.h"
#include "core/plugin/plugin_instance.h"
#include "pagedllm/sdk/model.h"

namespace pagedllm {

void require_model_path(const HostConfig& config) {
  std::error_code ec;
  if (std::filesystem::exists(config.model.path, ec)) return;
  throw ModelNotFound(fmt::format("{}: model.path: {} does not exist (an HF model directory or a GGUF file)",
                                  config.sources.locate("model.path"), config.model.path.string()));
}

bool check_model(const HostConfig& config, const PluginLibrary& model_plugin) {
  require_model_path(config);
  const pllm_model_api& api = model_plugin.api<pllm_model_api>();
  if (!api.check_model) return false;
  const std::string options = config.model.plugin.options.dump();
  const std::string path = config.model.path.string();
  const pllm_model_create_args args{sizeof(pllm_model_create_args), options.c_str(), path.c_str(),
                                    to_plugin_device(config.device), to_plugin_dtype(config.model.dtype), nullptr};
  pllm_error error{};
  check_plugin_call(api.check_model(&args, &error), error, model_plugin, "check_model");
  return true;
}

}  // namespace pagedllm
