#include "plugins/spec_eagle/eagle_head.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/safetensors.hpp"
#include "plugins/llama_common/batch_check.h"
#include "plugins/llama_cpu/cpu_kernels.h"
#include "plugins/llama_cpu/rope.h"
#include "plugins/llama_cpu/weight_loader.h"

namespace pagedllm::spec_eagle {
namespace {

using llama_cpu::LlamaConfig;

std::string str(int64_t v) { return std::to_string(v); }

[[noreturn]] void invalid(const std::string& message) {
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: " + message);
}

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
void require_same(const std::filesystem::path& draft_dir, const char* key, int64_t draft, const char* target_field,
                  int64_t target) {
  if (draft != target) {
    throw pllm::Error(PLLM_ERROR_INVALID_CONFIG, (draft_dir / "config.json").string() + ": '" + key + "' = " +
                                                     str(draft) + " does not match the target model's " +
                                                     target_field + " = " + str(target));
  }
}

}  // namespace

EagleHead::EagleHead(const std::filesystem::path& draft_dir, const pllm_speculator_target& target,
                     std::vector<int32_t> draft_vocab, int num_threads)
    : config_(LlamaConfig::load(draft_dir, "spec_eagle")),
      pool_(num_threads),
      inv_freq_(llama::rope_inv_freq(config_)),
      draft_vocab_(std::move(draft_vocab)) {
  llama_cpu::use_single_threaded_blas();
  check_eagle_section(draft_dir);
  if (config_.num_layers != 1) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, (draft_dir / "config.json").string() + ": 'num_hidden_layers' is " +
                                                  str(config_.num_layers) +
                                                  "; an EAGLE-1 head has exactly one decoder layer");
  }
  if (!target.info || !target.model_api || !target.model) invalid("no target model");
  const pllm_model_info& t = *target.info;
  require_same(draft_dir, "hidden_size", config_.hidden_size, "hidden_size", t.hidden_size);
  require_same(draft_dir, "vocab_size", config_.vocab_size, "vocab_size", t.vocab_size);
  require_same(draft_dir, "num_key_value_heads", config_.num_kv_heads, "num_kv_heads", t.num_kv_heads);
  require_same(draft_dir, "head_dim", config_.head_dim, "head_dim", t.head_dim);
  target_layers_ = t.num_layers;
  bind_target(target);
  load_weights(draft_dir);
}

void EagleHead::bind_target(const pllm_speculator_target& target) {
  if (!PLLM_HAS_FIELD(pllm_model_api, target.model_api, get_tensor) || !target.model_api->get_tensor) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                      "spec_eagle: the target model plugin has no get_tensor, so the EAGLE head cannot share its "
                      "embedding and lm_head");
  }
  const int64_t v = config_.vocab_size, h = config_.hidden_size;
  // Returns the tensor, or a null tensor for PLLM_ERROR_NOT_FOUND.
  auto get = [&](const char* name) {
    pllm_tensor out{};
    pllm_error error{};
    const pllm_status status = target.model_api->get_tensor(target.model, name, &out, &error);
    if (status == PLLM_ERROR_NOT_FOUND) return pllm_tensor{};
    if (status != PLLM_OK) {
      throw pllm::Error(status, std::string("spec_eagle: the target's get_tensor(\"") + name + "\") failed: " +
                                    error.message);
    }
    const bool ok = out.data && out.dtype == PLLM_DTYPE_F32 && out.device.type == PLLM_DEVICE_CPU && out.ndim == 2 &&
                    out.shape[0] == v && out.shape[1] == h && out.strides[1] == 1 && out.strides[0] >= h;
    if (!ok) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("spec_eagle: the target's '") + name +
                                                    "' is not a CPU f32 [" + str(v) + ", " + str(h) +
                                                    "] tensor with contiguous rows");
    }
    return out;
  };
  const pllm_tensor embed = get("model.embed_tokens.weight");
  if (!embed.data) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "spec_eagle: the target model has no 'model.embed_tokens.weight'");
  }
  embed_ = static_cast<const float*>(embed.data);
  embed_stride_ = embed.strides[0];
  pllm_tensor lm_head = get("lm_head.weight");
  if (!lm_head.data) {
    pllm::log_info("spec_eagle: the target has no 'lm_head.weight'; using its embedding (tied)");
    lm_head = embed;
  }
  // linear() reads the weight as a dense [vocab, hidden] matrix.
  if (lm_head.strides[0] != h) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle: the target's lm_head rows are " + str(lm_head.strides[0]) +
                                                  " floats apart; a dense [vocab, hidden] matrix is needed");
  }
  lm_head_ = static_cast<const float*>(lm_head.data);
  lm_head_rows_ = v;
  if (draft_vocab_.empty()) return;
  // A dense copy of the draft vocabulary's rows, so a draft step streams
  // N x hidden floats instead of vocab x hidden.
  for (const int32_t token : draft_vocab_) {
    if (token < 0 || token >= v) invalid("draft vocabulary token " + str(token) + " is not in [0, " + str(v) + ")");
  }
  const auto rows = static_cast<int64_t>(draft_vocab_.size());
  draft_lm_head_.resize(static_cast<std::size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(draft_lm_head_.data() + r * h, lm_head_ + int64_t(draft_vocab_[std::size_t(r)]) * h,
                static_cast<std::size_t>(h) * sizeof(float));
  }
  pllm::log_info("spec_eagle: draft vocabulary of ", rows, " of ", v, " tokens (lm_head ", (rows * h * 4) >> 10,
                 " KiB instead of ", (v * h * 4) >> 10, " KiB)");
  lm_head_ = draft_lm_head_.data();
  lm_head_rows_ = rows;
}

void EagleHead::load_weights(const std::filesystem::path& draft_dir) {
  const int64_t h = config_.hidden_size;
  const pllm::safetensors::Checkpoint checkpoint(draft_dir);
  std::vector<llama_cpu::WeightPart> parts;
  parts.push_back({"fc.weight", {h, 2 * h}, &fc_, 0});
  if (checkpoint.find("fc.bias")) parts.push_back({"fc.bias", {h}, &fc_bias_, 0});
  llama_cpu::add_decoder_layer_parts(parts, config_, "layers.0.", layer_, false);
  const llama_cpu::LoadedWeights loaded = llama_cpu::load_weight_parts(checkpoint, parts, pool_);
  if (!loaded.unused.empty()) {
    std::string unused;
    for (const std::string& name : loaded.unused) unused += (unused.empty() ? "" : ", ") + name;
    pllm::log_info("spec_eagle: ignoring checkpoint tensors ", unused,
                   " (the embedding and lm_head are the target's)");
  }
  pllm::log_info("spec_eagle: loaded ", parts.size(), " tensors from ", draft_dir.string(), " (",
                 loaded.stored_bytes >> 10, " KiB stored); draft KV layer ", target_layers_, ", ",
                 pool_.size(), " threads");
}

const float* EagleHead::features_of(const pllm_batch& b, const pllm_tensor& f, const int32_t* feature_rows,
                                    int64_t& row_stride) {
  const int64_t h = config_.hidden_size;
  if (f.ndim == 0 && feature_rows != nullptr) {
    // The chain continues the previous call's logits rows feature_rows[t].
    if (chain_rows_ < 0) invalid("features of ndim 0 continue a chain, but no previous draft() kept predicted features");
    chain_input_.resize(static_cast<std::size_t>(int64_t(b.num_tokens) * h));
    for (int32_t t = 0; t < b.num_tokens; ++t) {
      if (feature_rows[t] < 0 || feature_rows[t] >= chain_rows_) {
        invalid("feature_rows[" + str(t) + "] = " + str(feature_rows[t]) + " is not a logits row of the previous "
                "draft() [0, " + str(chain_rows_) + ")");
      }
      std::memcpy(chain_input_.data() + int64_t(t) * h, chain_.data() + int64_t(feature_rows[t]) * h,
                  static_cast<std::size_t>(h) * sizeof(float));
    }
    row_stride = h;
    return chain_input_.data();
  }
  if (f.ndim == 0) {
    if (chain_rows_ != b.num_tokens) {
      invalid("features of ndim 0 continue a chain, but " +
              (chain_rows_ < 0 ? std::string("no previous draft() kept predicted features")
                               : "the previous draft() returned " + str(chain_rows_) + " logits rows") +
              " for this batch's " + str(b.num_tokens) + " tokens");
    }
    row_stride = h;
    return chain_.data();
  }
  const bool ok = f.data && f.dtype == PLLM_DTYPE_F32 && f.device.type == PLLM_DEVICE_CPU && f.ndim == 2 &&
                  f.shape[0] == b.num_tokens && f.shape[1] == h && f.strides[1] == 1 && f.strides[0] >= h;
  if (!ok) {
    invalid("features must be a CPU f32 [num_tokens = " + str(b.num_tokens) + ", hidden = " + str(h) +
            "] tensor with contiguous rows (or ndim 0), got ndim " + str(f.ndim) + " shape [" + str(f.shape[0]) +
            ", " + str(f.ndim > 1 ? f.shape[1] : 0) + "]");
  }
  row_stride = f.strides[0];
  return static_cast<const float*>(f.data);
}

void EagleHead::draft(const pllm_draft_args& args, pllm_draft_output& out) {
  if (args.struct_size < offsetof(pllm_draft_args, attention) + sizeof(args.attention)) {
    invalid("draft args: struct_size " + str(args.struct_size) + " is too small");
  }
  if (out.struct_size < offsetof(pllm_draft_output, logits) + sizeof(out.logits)) {
    invalid("draft output: struct_size " + str(out.struct_size) + " is too small");
  }
  if (!args.batch) invalid("draft args: null batch");
  const pllm_batch& b = *args.batch;
  llama::check_batch("spec_eagle", b, args.attention, config_.vocab_size);
  int64_t feature_stride = 0;
  const bool has_feature_rows =
      args.struct_size >= offsetof(pllm_draft_args, feature_rows) + sizeof(args.feature_rows);
  const float* features =
      features_of(b, args.features, has_feature_rows ? args.feature_rows : nullptr, feature_stride);

  const int64_t tokens = b.num_tokens, h = config_.hidden_size, v = config_.vocab_size;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };
  // input row t = [embed(token_ids[t]) | feature t]
  float* input = input_.reserve(n(tokens * 2 * h));
  llama_cpu::parallel_rows(pool_, tokens, 2 * h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::memcpy(input + t * 2 * h, embed_ + int64_t(b.token_ids[t]) * embed_stride_, n(h) * sizeof(float));
      std::memcpy(input + t * 2 * h + h, features + t * feature_stride, n(h) * sizeof(float));
    }
  });
  chain_rows_ = -1;  // a failure below leaves no chain to continue

  float* x = x_.reserve(n(tokens * h));
  llama_cpu::linear(pool_, input, 2 * h, tokens, fc_.data(), h, 2 * h, x, h, false);
  if (!fc_bias_.empty()) {
    llama_cpu::parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t i = 0; i < h; ++i) x[t * h + i] += fc_bias_[std::size_t(i)];
      }
    });
  }
  scratch_.prepare(pool_, config_, inv_freq_, b.positions, tokens);
  llama_cpu::decoder_layer_forward(pool_, config_, layer_, x, scratch_, args.attention, target_layers_, "spec_eagle");

  // The predicted features of the logits rows: lm_head's input, and the next
  // chain step's features.
  chain_.resize(n(int64_t(b.num_logits) * h));
  for (int32_t i = 0; i < b.num_logits; ++i) {
    std::memcpy(chain_.data() + i * h, x + int64_t(b.logits_indices[i]) * h, n(h) * sizeof(float));
  }
  float* logits = logits_.reserve(n(int64_t(b.num_logits) * v));
  if (draft_vocab_.empty()) {
    llama_cpu::linear(pool_, chain_.data(), h, b.num_logits, lm_head_, v, h, logits, v, false);
  } else {
    const int64_t rows = lm_head_rows_;
    float* draft_logits = draft_logits_.reserve(n(int64_t(b.num_logits) * rows));
    llama_cpu::linear(pool_, chain_.data(), h, b.num_logits, lm_head_, rows, h, draft_logits, rows, false);
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    for (int32_t i = 0; i < b.num_logits; ++i) {
      float* row = logits + int64_t(i) * v;
      std::fill(row, row + v, kNever);
      for (int64_t r = 0; r < rows; ++r) row[draft_vocab_[std::size_t(r)]] = draft_logits[int64_t(i) * rows + r];
    }
  }
  chain_rows_ = b.num_logits;
  out.logits = llama_cpu::host_tensor(logits, {b.num_logits, v});
}

}  // namespace pagedllm::spec_eagle
