#include "eagle_config.h"

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "common/dtype_name.h"

namespace pagedllm::spec_eagle {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// config.json's "eagle" section, when there is one: only EAGLE-1 is implemented.
void check_eagle_section(const std::filesystem::path& draft_dir) {
  const std::filesystem::path path = draft_dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json config = nlohmann::json::parse(text.str(), nullptr, false);
  if (config.is_discarded() || !config.is_object()) return;  // LlamaConfig::load has reported it
  auto it = config.find("eagle");
  if (it == config.end() || it->is_null()) return;
  if (!it->is_object()) {
    throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, path.string() + ": 'eagle' must be an object, got " + it->dump());
  }
  auto version = it->find("version");
  if (version != it->end() && !(version->is_number_integer() && version->get<int64_t>() == 1)) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                      path.string() + ": 'eagle.version' is " + version->dump() + "; spec_eagle implements EAGLE-1");
  }
}

// Checks one size of the draft against the target's.
void require_same(const std::filesystem::path& draft_dir, const char* key, int64_t draft,
                  const std::string& target_field, int64_t target) {
  if (draft != target) {
    throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, (draft_dir / "config.json").string() + ": '" + key + "' = " +
                                                     str(draft) + " does not match the target model's " +
                                                     target_field + " = " + str(target));
  }
}

}  // namespace

std::string device_label(pllm_device device) {
  switch (device.type) {
    case PLLM_DEVICE_CPU: return "cpu";
    case PLLM_DEVICE_CUDA: return "cuda:" + str(device.index);
    case PLLM_DEVICE_FORCE_32BIT:
    case PLLM_DEVICE_INVALID: break;
  }
  return "device type " + str(int(device.type));
}

llama::LlamaConfig load_eagle_config(const std::filesystem::path& draft_dir, const pllm_speculator_target& target,
                                     int32_t tensor_parallel_size) {
  // "eagle" is the draft's own section, read below.
  constexpr std::string_view kEagleKeys[] = {"eagle"};
  llama::LlamaConfig config = llama::LlamaConfig::load(draft_dir, "spec_eagle", kEagleKeys);
  check_eagle_section(draft_dir);
  if (config.num_layers != 1) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, (draft_dir / "config.json").string() + ": 'num_hidden_layers' is " +
                                                  str(config.num_layers) +
                                                  "; an EAGLE-1 head has exactly one decoder layer");
  }
  if (!target.info || !target.model_api || !target.model) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: no target model");
  }
  const pllm_model_info& t = *target.info;
  require_same(draft_dir, "hidden_size", config.hidden_size, "hidden_size", t.hidden_size);
  require_same(draft_dir, "vocab_size", config.vocab_size, "vocab_size", t.vocab_size);
  if (tensor_parallel_size > 1) {
    // Split as the target's (llama_cpu::TensorParallelShard): N / kv each, or one replicated.
    const int64_t n = tensor_parallel_size, kv = config.num_kv_heads;
    require_same(draft_dir, "num_key_value_heads", kv >= n ? kv / n : 1,
                 "kv heads per rank (tensor_parallel_size " + std::to_string(n) + ")", t.num_kv_heads);
  } else {
    require_same(draft_dir, "num_key_value_heads", config.num_kv_heads, "num_kv_heads", t.num_kv_heads);
  }
  require_same(draft_dir, "head_dim", config.head_dim, "head_dim", t.head_dim);
  return config;
}

SharedWeights shared_weights(const pllm_speculator_target& target, const llama::LlamaConfig& c, pllm_device device,
                             pllm_dtype dtype, int64_t vocab_rows) {
  if (!PLLM_HAS_FIELD(pllm_model_api, target.model_api, get_tensor) || !target.model_api->get_tensor) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                      "spec_eagle: the target model plugin has no get_tensor, so the EAGLE head cannot share its "
                      "embedding and lm_head");
  }
  const int64_t v = vocab_rows, h = c.hidden_size;
  // Returns the tensor, or a null tensor for PLLM_ERROR_NOT_FOUND.
  auto get = [&](const char* name) {
    pllm_tensor out{};
    out.struct_size = sizeof out;
    pllm_error error{};
    const pllm_status status = target.model_api->get_tensor(target.model, name, &out, &error);
    if (status == PLLM_ERROR_NOT_FOUND) return pllm_tensor{};
    if (status != PLLM_OK) {
      throw pllm::Error(status, std::string("spec_eagle: the target's get_tensor(\"") + name + "\") failed: " +
                                    error.message);
    }
    if (out.data && (out.device.type != device.type || out.device.index != device.index)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        std::string("spec_eagle: the target's '") + name + "' is on " + device_label(out.device) +
                            ", but the draft runs on " + device_label(device) +
                            "; the EAGLE head shares the target's weights, so both must be on the same device");
    }
    if (out.data && dtype == PLLM_DTYPE_INVALID && !pllm::is_float_dtype(out.dtype)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("spec_eagle: the target's '") + name + "' is " +
                                                    plugins::dtype_name(out.dtype) + "; the draft on " +
                                                    device_label(device) + " needs f32, f16 or bf16");
    }
    if (out.data && dtype != PLLM_DTYPE_INVALID && out.dtype != dtype) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("spec_eagle: the target's '") + name + "' is " +
                                                    plugins::dtype_name(out.dtype) + "; the draft on " +
                                                    device_label(device) + " needs " + plugins::dtype_name(dtype));
    }
    const bool ok = out.data && out.ndim == 2 && out.shape[0] == v && out.shape[1] == h && out.strides[1] == 1 &&
                    out.strides[0] >= h;
    if (!ok) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("spec_eagle: the target's '") + name + "' is not a [" +
                                                    str(v) + ", " + str(h) + "] tensor with contiguous rows");
    }
    return out;
  };
  SharedWeights shared;
  shared.embed = get("model.embed_tokens.weight");
  if (!shared.embed.data) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "spec_eagle: the target model has no 'model.embed_tokens.weight'");
  }
  shared.lm_head = get("lm_head.weight");
  if (!shared.lm_head.data) {
    pllm::log_info("spec_eagle: the target has no 'lm_head.weight'; using its embedding (tied)");
    shared.lm_head = shared.embed;
  }
  return shared;
}

}  // namespace pagedllm::spec_eagle
