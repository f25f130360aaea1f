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

const char* compute_name(llama_cpu::Int8Compute compute) {
  return compute == llama_cpu::Int8Compute::kW8A8 ? "W8A8" : "weight-only";
}

}  // namespace

LlamaModel::LlamaModel(const std::filesystem::path& model_dir, int num_threads, pllm_dtype weight_dtype,
                       std::optional<llama_cpu::Int8Compute> quantization, const pllm_collectives_ref* collectives,
                       llama_cpu::Bf16Compute bf16_compute)
    : full_config_(LlamaConfig::load(model_dir, "models_llama")),
      config_(full_config_),
      pool_(num_threads),
      inv_freq_(llama::rope_inv_freq(config_)),
      quantization_(quantization),
      bf16_compute_(bf16_compute) {
  llama_cpu::use_single_threaded_blas();
  vocab_rows_ = full_config_.vocab_size;
  shard_ = llama_cpu::TensorParallelShard::join(full_config_, collectives, "models_llama");
  if (shard_) {
    config_ = shard_->config();
    vocab_first_ = shard_->vocab_first();
    vocab_rows_ = shard_->vocab_rows();
    log_tensor_parallel_rank();
  }
  load_weights(model_dir, weight_dtype);
}

void LlamaModel::log_tensor_parallel_rank() const {
  const int32_t n = shard_->size(), r = shard_->rank();
  const int32_t kv_first = shard_->kv_head_first();
  pllm::log_info("models_llama: rank ", r, " of ", n, ": heads ", int64_t(r) * config_.num_heads, "..",
                 int64_t(r + 1) * config_.num_heads - 1, ", kv heads ", kv_first, "..",
                 kv_first + config_.num_kv_heads - 1, ", intermediate ", int64_t(r) * config_.intermediate_size,
                 "..", int64_t(r + 1) * config_.intermediate_size - 1, ", vocabulary ", vocab_first_, "..",
                 vocab_first_ + vocab_rows_ - 1);
}

llama_cpu::WeightPart LlamaModel::shard_part(const llama::WeightSlot& slot, llama_cpu::WeightStorage* storage) const {
  if (!shard_) return llama_cpu::whole_model_part(slot, storage);
  return shard_->part(slot, storage);
}

void LlamaModel::load_weights(const std::filesystem::path& model_dir, pllm_dtype weight_dtype) {
  const LlamaConfig& c = full_config_;
  const std::unique_ptr<llama::WeightSource> source = llama::open_weight_source(model_dir, c);
  const llama::WeightSource& checkpoint = *source;
  // auto on a GGUF file: its quantized matrices are multiplied as stored (llama_cpu/weights.h BlockType).
  const bool keep_blocks = weight_dtype == PLLM_DTYPE_INVALID && !quantization_ && llama::is_gguf_path(model_dir);
  if (weight_dtype == PLLM_DTYPE_INVALID) {
    // auto: as the checkpoint stores the embedding (a missing one fails below).
    const llama::SourceTensor* embed = checkpoint.find("model.embed_tokens.weight");
    weight_dtype = embed ? llama::auto_weight_dtype(*embed) : PLLM_DTYPE_F32;
  }
  weight_dtype_ = weight_dtype;
  // A compressed-tensors checkpoint's int8 matrices are multiplied as `quantization` says, else as the
  // checkpoint was made for: W8A8 when its activations are int8 (dynamic, per token) and the CPU has VNNI,
  // weight-only otherwise (without VNNI W8A8's integer loop is no faster, and weight-only is the more
  // accurate). The matrices it keeps in float stay so, as in vLLM: nothing is quantized at load.
  if (c.int8_checkpoint) {
    const bool w8a8 =
        c.int8_checkpoint->dynamic_int8_activations && llama_cpu::active_isa() >= llama_cpu::Isa::kAvx512Vnni;
    int8_compute_ = quantization_ ? *quantization_
                    : w8a8        ? llama_cpu::Int8Compute::kW8A8
                                  : llama_cpu::Int8Compute::kWeightOnly;
    quantization_.reset();
  }
  embed_.set_dtype(weight_dtype);
  lm_head_.set_dtype(weight_dtype);
  embed_.set_bf16_compute(bf16_compute_);  // (a tied lm_head multiplies it)
  lm_head_.set_bf16_compute(bf16_compute_);
  layers_.resize(std::size_t(c.num_layers));
  for (llama_cpu::DecoderLayerWeights& layer : layers_) {
    layer.set_matrix_dtype(weight_dtype);
    layer.set_matrix_bf16_compute(bf16_compute_);
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
  for (const llama::WeightSlot& slot : llama::model_slots(c)) parts.push_back(shard_part(slot, &storage(slot)));
  const std::size_t model_parts = parts.size();
  if (quantization_ && c.tie_word_embeddings) {
    // The int8 lm_head of a tied model: the embedding quantized, a copy of its own.
    parts.push_back(shard_part({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, llama::Matrix::kLmHead,
                                -1, 0},
                               &lm_head_));
  }

  if (quantization_) int8_matrices_ = quantization_name(quantization_);
  if (c.int8_checkpoint) keep_stored_int8(checkpoint, parts);
  if (keep_blocks) {
    const std::string dequantized = llama_cpu::keep_gguf_blocks(checkpoint, parts, gguf_blocks_);
    if (!dequantized.empty()) {
      pllm::log_info("models_llama: not held as stored (", plugins::dtype_name(weight_dtype), " instead): ",
                     dequantized);
    }
  }

  const llama_cpu::LoadedWeights loaded = llama_cpu::load_weight_parts(checkpoint, parts, pool_);
  if (!loaded.unused.empty()) {
    pllm::log_info("models_llama: ignoring checkpoint tensors ", llama::join_names(loaded.unused),
                   c.tie_word_embeddings ? " (lm_head is tied to the embedding)" : "");
  }
  for (std::size_t i = 0; i < model_parts; ++i) {
    const WeightPart& part = parts[i];
    // The blocks of a fused checkpoint tensor (Phi-3's qkv_proj) lie one after another: one tensor of them all.
    if (auto it = slots_.find(part.name); it != slots_.end()) {
      it->second.shape[0] += part.shape[0];
      continue;
    }
    slots_.emplace(part.name, Slot{part.data(), part.storage->dtype(), part.shape, part.storage->blocks()});
  }
  if (c.tie_word_embeddings) {
    slots_.emplace("lm_head.weight",
                   Slot{embed_.data(), embed_.dtype(), {vocab_rows_, c.hidden_size}, embed_.blocks()});
  }
  pllm::log_info("models_llama: loaded ", model_parts, " tensors from ", checkpoint.describe(), " (",
                 loaded.stored_bytes >> 20, " MiB read, ", weight_bytes() >> 20, " MiB as ",
                 plugins::dtype_name(weight_dtype_), int8_matrices_.empty() ? "" : " with int8 matrices (",
                 int8_matrices_, int8_matrices_.empty() ? "" : ")",
                 gguf_blocks_.empty() ? "" : " with GGUF blocks as stored (", gguf_blocks_,
                 gguf_blocks_.empty() ? "" : " matrices)", ")");
}

void LlamaModel::keep_stored_int8(const llama::WeightSource& checkpoint, const std::vector<WeightPart>& parts) {
  // A fused matrix has one dtype: int8 when every tensor in it is stored int8. The embedding (its rows are
  // gathered in the weight dtype) and the norms take any stored int8 tensor dequantized.
  std::map<llama_cpu::WeightStorage*, std::pair<std::vector<std::string>, std::vector<std::string>>> stored;
  for (const WeightPart& part : parts) {
    if (part.storage == &embed_ || part.shape.size() != 2) continue;
    const llama::SourceTensor* t = checkpoint.find(part.name);
    auto& [int8, other] = stored[part.storage];
    (t && t->int8 ? int8 : other).push_back(part.name);
  }
  int64_t matrices = 0, total = 0;
  for (auto& [storage, names] : stored) {
    const auto& [int8, other] = names;
    ++total;
    if (int8.empty()) continue;
    if (!other.empty()) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "models_llama: " + llama::join_names(int8) + " are stored int8 but " +
                            llama::join_names(other) + " of the same fused matrix are not (the checkpoint's "
                            "ignore list splits it): a fused matrix is held in one dtype");
    }
    storage->set_int8(int8_compute_);
    ++matrices;
  }
  int8_matrices_ = "compressed-tensors, " + std::to_string(matrices) + " of " + std::to_string(total) + ", " +
                   compute_name(int8_compute_);
}

std::string LlamaModel::describe() const {
  const std::string weights =
      quantization_      ? std::string("int8 weights (") + quantization_name(quantization_) + ")"
      : int8_matrices_.empty() ? std::string(plugins::dtype_name(weight_dtype_)) + " weights"
                         : std::string(plugins::dtype_name(weight_dtype_)) + " weights with int8 matrices (" +
                               int8_matrices_ + ")";
  const std::string blocks = gguf_blocks_.empty() ? "" : " with GGUF blocks as stored (" + gguf_blocks_ + " matrices)";
  // linear() rounds the activations of bf16 products to bf16 on avx512bf16 unless told not to (weights.h).
  const bool bf16_activations = !quantization_ && weight_dtype_ == PLLM_DTYPE_BF16 &&
                                bf16_compute_ == llama_cpu::Bf16Compute::kVdpbf16ps &&
                                llama_cpu::active_isa() == llama_cpu::Isa::kAvx512Bf16;
  return "the CPU, " + weights + blocks +
         (bf16_activations ? ", activations rounded to bf16 for vdpbf16ps, " : ", f32 activations, ") +
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
                                                  "' is held as int8 (" +
                                                  (quantization_ ? std::string("quantization: ") +
                                                                       quantization_name(quantization_)
                                                                 : int8_matrices_) +
                                                  "); get_tensor serves unquantized weights only");
  }
  if (it->second.blocks != llama_cpu::BlockType::kNone) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama: '" + std::string(name) + "' is held as GGUF " +
                                                  llama_cpu::block_format(it->second.blocks).name +
                                                  " blocks; get_tensor serves unquantized weights only (load "
                                                  "with an explicit dtype to dequantize them)");
  }
  return llama::tensor_view(it->second.data, it->second.dtype, {PLLM_DEVICE_CPU, 0}, it->second.shape);
}

void LlamaModel::forward(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  pllm::check_batch("models_llama", b, attention, full_config_.vocab_size);
  const bool has_hidden = pllm::check_forward_output("models_llama", b, out);
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, h = c.hidden_size;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  const auto n = [](int64_t count) { return static_cast<std::size_t>(count); };

  const int64_t vocab = full_config_.vocab_size;
  const llama_cpu::TensorParallelRank* tensor_parallel = shard_ ? &shard_->layer_rank() : nullptr;

  // The embedding rows of this rank's vocabulary; with tensor parallelism the
  // others are zero here and come from their rank in the all-reduce. Gemma scales them by sqrt(hidden) in the
  // activation dtype (f32 here), as transformers does.
  float* x = x_.reserve(n(tokens * h));
  const auto embedding_scale = static_cast<float>(std::sqrt(double(h)));
  llama_cpu::parallel_rows(pool_, tokens, h, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t row = int64_t(b.token_ids[t]) - vocab_first_;
      if (row >= 0 && row < vocab_rows_) {
        embed_.ref().row_to_f32(row, h, x + t * h);
        if (c.scale_embedding) {
          for (float* v = x + t * h; v < x + (t + 1) * h; ++v) *v *= embedding_scale;
        }
      } else {
        std::fill(x + t * h, x + (t + 1) * h, 0.0f);
      }
    }
  });
  if (shard_ && tokens > 0) shard_->all_reduce(x, tokens * h, "the embedding");
  scratch_.prepare(pool_, c, inv_freq_, b.positions, tokens);
  for (int32_t l = 0; l < c.num_layers && tokens > 0; ++l) {
    llama_cpu::decoder_layer_forward(pool_, c, layers_[std::size_t(l)], x, scratch_, attention, l, "models_llama",
                                     tensor_parallel);
  }

  // The final norm only on the rows asked for; lm_head only on the logits rows.
  auto gather_normed = [&](int32_t count, const int32_t* indices, float* dst) {
    for (int32_t i = 0; i < count; ++i) std::memcpy(dst + i * h, x + int64_t(indices[i]) * h, n(h) * sizeof(float));
    llama_cpu::rms_norm(pool_, dst, h, count, h, norm_.f32(), eps, dst, h, c.unit_offset_norms ? 1.0f : 0.0f);
  };
  float* rows = rows_.reserve(n(int64_t(b.num_logits) * h));
  float* logits = logits_.reserve(n(int64_t(b.num_logits) * vocab));
  gather_normed(b.num_logits, b.logits_indices, rows);
  if (!tensor_parallel) {
    llama_cpu::linear(pool_, rows, h, b.num_logits, lm_head(), vocab, h, logits, vocab, false);
  } else if (b.num_logits > 0) {
    // This rank's vocabulary columns [num_logits, vocab_shard] (the last rank's
    // padded with zeros), gathered rank by rank, then laid side by side.
    const int64_t shard = shard_->vocab_shard(), m = b.num_logits;
    float* mine = shard_logits_.reserve(n(m * shard));
    std::fill(mine, mine + m * shard, 0.0f);
    if (vocab_rows_ > 0) llama_cpu::linear(pool_, rows, h, m, lm_head(), vocab_rows_, h, mine, shard, false);
    float* gathered = gathered_logits_.reserve(n(shard_->size() * m * shard));
    shard_->gather_vocab_columns(mine, m, gathered, logits, "the logits");
  }
  if (c.final_logit_softcapping > 0.0) {
    llama_cpu::softcap(pool_, logits, b.num_logits, vocab, static_cast<float>(c.final_logit_softcapping));
  }
  *out.logits = host_tensor(logits, {b.num_logits, vocab});

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
