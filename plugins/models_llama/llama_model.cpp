#include "llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "pagedllm/sdk.hpp"
#include "common/dtype_name.h"
#include "pagedllm/sdk/cpp/model_batch_check.hpp"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"
#include "llama_cpu/rope.h"
#include "llama_cpu/weight_loader.h"

namespace pagedllm::models_llama {

using llama_cpu::host_tensor;
using llama_cpu::WeightPart;

namespace {

const char* quantization_name(const std::optional<llama_cpu::Int8Compute>& q) {
  if (!q) return "none";
  return *q == llama_cpu::Int8Compute::kW8A8 ? "int8_w8a8" : "int8_weight_only";
}

}  // namespace

LlamaModel::LlamaModel(const std::filesystem::path& model_dir, int num_threads, pllm_dtype weight_dtype,
                       std::optional<llama_cpu::Int8Compute> quantization)
    : config_(LlamaConfig::load(model_dir, "models_llama")),
      pool_(num_threads),
      inv_freq_(llama::rope_inv_freq(config_)),
      quantization_(quantization) {
  llama_cpu::use_single_threaded_blas();
  load_weights(model_dir, weight_dtype);
}

void LlamaModel::load_weights(const std::filesystem::path& model_dir, pllm_dtype weight_dtype) {
  const LlamaConfig& c = config_;
  const std::unique_ptr<llama::WeightSource> source = llama::open_weight_source(model_dir, c);
  const llama::WeightSource& checkpoint = *source;
  if (weight_dtype == PLLM_DTYPE_INVALID) {
    // auto: as the checkpoint stores the embedding (a missing one fails below).
    const llama::SourceTensor* embed = checkpoint.find("model.embed_tokens.weight");
    weight_dtype = embed ? llama::auto_weight_dtype(*embed) : PLLM_DTYPE_F32;
  }
  weight_dtype_ = weight_dtype;
  embed_.set_dtype(weight_dtype);
  lm_head_.set_dtype(weight_dtype);
  layers_.resize(std::size_t(c.num_layers));
  for (llama_cpu::DecoderLayerWeights& layer : layers_) {
    layer.set_matrix_dtype(weight_dtype);
    if (quantization_) layer.set_matrix_int8(*quantization_);
  }
  if (quantization_) lm_head_.set_int8(*quantization_);
  const auto storage = [&](const llama::WeightSlot& slot) -> llama_cpu::WeightStorage& {
    if (slot.matrix == llama::Matrix::kEmbed) return embed_;
    if (slot.matrix == llama::Matrix::kNorm) return norm_;
    if (slot.matrix == llama::Matrix::kLmHead) return lm_head_;
    return layers_[std::size_t(slot.layer)].matrix(slot.matrix);
  };
  std::vector<WeightPart> parts;
  for (const llama::WeightSlot& slot : llama::model_slots(c)) {
    parts.push_back({slot.name, slot.shape, &storage(slot), slot.first_row});
  }
  const std::size_t model_parts = parts.size();
  if (quantization_ && c.tie_word_embeddings) {
    // The int8 lm_head of a tied model: the embedding quantized, a copy of its own.
    parts.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, &lm_head_, 0});
  }

  const llama_cpu::LoadedWeights loaded = llama_cpu::load_weight_parts(checkpoint, parts, pool_);
  if (!loaded.unused.empty()) {
    pllm::log_info("models_llama: ignoring checkpoint tensors ", llama::join_names(loaded.unused),
                   c.tie_word_embeddings ? " (lm_head is tied to the embedding)" : "");
  }
  for (std::size_t i = 0; i < model_parts; ++i) {
    const WeightPart& part = parts[i];
    slots_.emplace(part.name, Slot{part.data(), part.storage->dtype(), part.shape});
  }
  if (c.tie_word_embeddings) {
    slots_.emplace("lm_head.weight", Slot{embed_.data(), embed_.dtype(), {c.vocab_size, c.hidden_size}});
  }
  pllm::log_info("models_llama: loaded ", model_parts, " tensors from ", checkpoint.describe(), " (",
                 loaded.stored_bytes >> 20, " MiB read, ", weight_bytes() >> 20, " MiB as ",
                 plugins::dtype_name(weight_dtype_), quantization_ ? " with int8 matrices (" : "",
                 quantization_ ? quantization_name(quantization_) : "", quantization_ ? ")" : "", ")");
}

std::string LlamaModel::describe() const {
  const std::string weights =
      quantization_ ? std::string("int8 weights (") + quantization_name(quantization_) + ")"
                    : std::string(plugins::dtype_name(weight_dtype_)) + " weights";
  // linear() rounds the activations of bf16 products past kDotRowsMaxRows rows on avx512bf16 (cpu_kernels.h).
  const bool bf16_gemm =
      !quantization_ && weight_dtype_ == PLLM_DTYPE_BF16 && llama_cpu::active_isa() == llama_cpu::Isa::kAvx512Bf16;
  return "the CPU, " + weights + (bf16_gemm ? ", f32 activations (bf16 in products of more than 16 rows), " :
                                              ", f32 activations, ") +
         llama_cpu::isa_name(llama_cpu::active_isa()) + " kernels, " + std::to_string(pool_.size()) + " threads";
}

std::size_t LlamaModel::weight_bytes() const {
  std::size_t bytes = embed_.bytes() + norm_.bytes() + lm_head_.bytes();
  for (const llama_cpu::DecoderLayerWeights& l : layers_) bytes += l.bytes();
  return bytes;
}

pllm_tensor LlamaModel::tensor(std::string_view name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "models_llama: no tensor '" + std::string(name) + "'");
  }
  if (it->second.dtype == PLLM_DTYPE_I8) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama: '" + std::string(name) +
                                                  "' is held as int8 (quantization: " +
                                                  quantization_name(quantization_) +
                                                  "); get_tensor serves unquantized weights only");
  }
  return llama::tensor_view(it->second.data, it->second.dtype, {PLLM_DEVICE_CPU, 0}, it->second.shape);
}

void LlamaModel::forward(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  pllm::check_batch("models_llama", b, attention, config_.vocab_size);
  const bool has_hidden = pllm::check_forward_output("models_llama", b, out);
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, h = c.hidden_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };

  float* x = x_.reserve(n(tokens * h));
  llama_cpu::parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      embed_.ref().row_to_f32(b.token_ids[t], h, x + t * h);
    }
  });
  scratch_.prepare(pool_, c, inv_freq_, b.positions, tokens);
  for (int32_t l = 0; l < c.num_layers && tokens > 0; ++l) {
    llama_cpu::decoder_layer_forward(pool_, c, layers_[std::size_t(l)], x, scratch_, attention, l, "models_llama");
  }

  // The final norm only on the rows asked for; lm_head only on the logits rows.
  auto gather_normed = [&](int32_t count, const int32_t* indices, float* dst) {
    for (int32_t i = 0; i < count; ++i) std::memcpy(dst + i * h, x + int64_t(indices[i]) * h, n(h) * sizeof(float));
    llama_cpu::rms_norm(pool_, dst, h, count, h, norm_.f32(), eps, dst, h);
  };
  float* rows = rows_.reserve(n(int64_t(b.num_logits) * h));
  float* logits = logits_.reserve(n(int64_t(b.num_logits) * c.vocab_size));
  gather_normed(b.num_logits, b.logits_indices, rows);
  llama_cpu::linear(pool_, rows, h, b.num_logits, lm_head(), c.vocab_size, h, logits, c.vocab_size, false);
  *out.logits = host_tensor(logits, {b.num_logits, c.vocab_size});

  if (has_hidden) {
    *out.hidden = host_tensor(nullptr, {});  // ndim 0: none asked for
    if (num_hidden > 0) {
      float* hidden = hidden_.reserve(n(int64_t(num_hidden) * h));
      gather_normed(num_hidden, b.hidden_indices, hidden);
      *out.hidden = host_tensor(hidden, {num_hidden, h});
    }
  }
}

}  // namespace pagedllm::models_llama
