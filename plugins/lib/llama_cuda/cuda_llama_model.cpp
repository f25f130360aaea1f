#include "llama_cuda/cuda_llama_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "common/dtype_name.h"
#include "cuda_common/cuda_check.h"
#include "pagedllm/sdk/cpp/model_batch_check.hpp"
#include "llama_common/rope_freq.h"
#include "llama_common/tensor_parallel_split.h"
#include "llama_common/tensor_view.h"
#include "llama_common/weight_layout.h"
#include "llama_cuda/cuda_context.h"
#include "llama_cuda/decoder_layer.h"
#include "llama_cuda/device_memory.h"
#include "llama_cuda/llama_kernels.h"
#include "llama_cuda/weight_upload.h"

namespace pagedllm::llama_cuda {
namespace {

using llama::LlamaConfig;
using llama::Matrix;

constexpr std::string_view kWho = "models_llama";

class CudaLlama final : public llama::LlamaForward {
 public:
  CudaLlama(const std::filesystem::path& model_dir, int device, pllm_dtype dtype, int num_threads,
            const pllm_collectives_ref* collectives);

  const LlamaConfig& config() const override { return config_; }
  pllm_dtype dtype() const override { return dtype_; }
  std::string describe() const override {
    return device_name(context_.device_index()) + ", " + plugins::dtype_name(dtype_) + ", " + mib(weights_.bytes()) +
           " of weights on the device";
  }
  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) override;
  pllm_tensor tensor(std::string_view name) const override;

 private:
  struct Slot {
    void* data;
    std::vector<int64_t> shape;
  };
  // A step's sizes; the workspace holds the largest of each seen so far.
  struct StepSize {
    int64_t tokens = 0, logits = 0, hidden = 0;
  };
  // Device scratch of a step (activations in dtype_, rope tables and outputs
  // in f32) and the int32 inputs, which come in one copy:
  // ids | positions | logits_index | hidden_index. Under tensor parallelism
  // also the rank's [logits, vocab_shard] columns and every rank's, gathered.
  struct Workspace {
    DecoderActivations layer;
    void* rows;
    float *logits, *hidden;
    float *shard_logits, *gathered_logits;
    int32_t* inputs;
  };

  // `checked` views the open checkpoint.
  void load_weights(const std::vector<llama::WeightSlot>& slots, const llama::CheckedTensors& checked,
                    int num_threads);
  // The workspace of `size` laid out from `base`; `bytes` is what it spans.
  Workspace carve_workspace(std::byte* base, const StepSize& size, std::size_t& bytes) const;
  void reserve(const StepSize& size);
  // forward() without the clean-up after a failure.
  void run_step(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out);
  int device() const { return context_.device_index(); }
  // Under tensor parallelism: `count` elements of dtype at `data` summed over the ranks, in place.
  void all_reduce(void* data, int64_t count, pllm_dtype dtype, std::string_view what) const;
  // Under tensor parallelism: the logits of `rows` rows from every rank's vocabulary columns.
  void gather_logits(int64_t rows);

  LlamaConfig full_config_;
  std::optional<llama::TensorParallelSplit> split_;
  pllm_collectives_ref collectives_{};
  DeltaAllReduce delta_all_reduce_;
  LlamaConfig config_;  // the rank's view under tensor parallelism, else full_config_
  CudaContext context_;
  pllm_dtype dtype_ = PLLM_DTYPE_INVALID;

  CudaMemory weights_{CudaMemory::Kind::kDevice}, inv_freq_{CudaMemory::Kind::kDevice};
  CudaMemory local_inv_freq_{CudaMemory::Kind::kDevice};  // Gemma 3's local layers' (LlamaConfig::local_rope)
  void *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<DecoderLayerWeights> layers_;
  std::map<std::string, Slot, std::less<>> slots_;

  CudaMemory workspace_{CudaMemory::Kind::kDevice};
  CudaMemory host_inputs_{CudaMemory::Kind::kPinnedHost};
  StepSize capacity_;
  Workspace ws_{};
};

CudaLlama::CudaLlama(const std::filesystem::path& model_dir, int device, pllm_dtype dtype, int num_threads,
                     const pllm_collectives_ref* collectives)
    : full_config_(LlamaConfig::load(model_dir, kWho)),
      split_(llama::TensorParallelSplit::join(full_config_, collectives, std::string(kWho))),
      config_(split_ ? split_->config() : full_config_),
      context_(device, kWho) {
  if (split_) {
    if (llama::is_gguf_path(model_dir)) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "models_llama: tensor_parallel_size " + std::to_string(split_->size()) +
                                                    ": shards are read from HF safetensors checkpoints; " +
                                                    model_dir.string() + " is a GGUF file");
    }
    collectives_ = *collectives;
    delta_all_reduce_ = [this](void* delta, int64_t count, std::string_view what) {
      all_reduce(delta, count, dtype_, what);
    };
    pllm::log_info("models_llama: ", split_->describe(), " on ", device_name(device));
  }
  const std::unique_ptr<llama::WeightSource> checkpoint = llama::open_weight_source(model_dir, full_config_);
  const std::vector<llama::WeightSlot> slots = llama::model_slots(full_config_);
  const llama::CheckedTensors checked = llama::check_checkpoint(*checkpoint, slots);
  // "auto": the dtype the checkpoint stores its embedding in (f16 for a quantized one).
  dtype_ = dtype == PLLM_DTYPE_INVALID ? llama::auto_weight_dtype(*checked.views.front()) : dtype;

  const std::vector<double> inv_freq = llama::rope_inv_freq(config_);
  inv_freq_.allocate(inv_freq.size() * sizeof(double), device, kWho, "the RoPE frequencies");
  PAGEDLLM_CUDA_CHECK(cudaMemcpy(inv_freq_.data(), inv_freq.data(), inv_freq.size() * sizeof(double),
                                 cudaMemcpyHostToDevice));
  if (config_.local_rope_theta > 0.0) {
    const std::vector<double> local = llama::local_rope_inv_freq(config_);
    local_inv_freq_.allocate(local.size() * sizeof(double), device, kWho, "the local layers' RoPE frequencies");
    PAGEDLLM_CUDA_CHECK(cudaMemcpy(local_inv_freq_.data(), local.data(), local.size() * sizeof(double),
                                   cudaMemcpyHostToDevice));
  }
  load_weights(slots, checked, num_threads);
  if (!checked.unused.empty()) {
    pllm::log_info("models_llama: ignoring checkpoint tensors ", llama::join_names(checked.unused),
                   config_.tie_word_embeddings ? " (lm_head is tied to the embedding)" : "");
  }
  pllm::log_info("models_llama: loaded ", slots.size(), " tensors from ", checkpoint->describe(), " (",
                 mib(checked.stored_bytes), " stored) onto ", describe());
}

void CudaLlama::load_weights(const std::vector<llama::WeightSlot>& slots, const llama::CheckedTensors& checked,
                             int num_threads) {
  const int64_t element = pllm_dtype_size(dtype_);
  // The rank's slots (its block of each tensor in its fused layout) and their checkpoint blocks;
  // the whole model without tensor parallelism.
  std::vector<llama::WeightSlot> placed;
  std::vector<llama::ShardBlock> blocks;
  for (const llama::WeightSlot& slot : slots) {
    blocks.push_back(split_ ? split_->block(slot)
                            : llama::ShardBlock{slot.shape, slot.first_row, slot.source_first_row, 0,
                                                !slot.fused_block()});
    placed.push_back({slot.name, blocks.back().shape, slot.matrix, slot.layer, blocks.back().first_row});
  }
  // Under tensor parallelism the vocabulary matrices span vocab_shard rows, those past the rank's
  // zero (the last rank's lm_head columns pad its logits to the shard), and the embedding one more
  // zero row, which the tokens of other ranks' rows read (run_step).
  std::vector<llama::WeightSlot> carved = placed;
  if (split_) {
    for (llama::WeightSlot& slot : carved) {
      if (slot.matrix == Matrix::kEmbed) slot.shape[0] = split_->vocab_shard() + 1;
      if (slot.matrix == Matrix::kLmHead) slot.shape[0] = split_->vocab_shard();
    }
  }
  std::map<FusedMatrixKey, std::byte*> bases;
  const auto carve = [&](std::byte* base) {
    Carver carver(base);
    bases = carve_fused_matrices(carver, carved, element);
    return carver.bytes();
  };
  weights_.allocate(carve(nullptr), device(), kWho,
                    "the weights (" + std::string(plugins::dtype_name(dtype_)) + ")");
  carve(weights_.data());
  if (split_) PAGEDLLM_CUDA_CHECK(cudaMemset(weights_.data(), 0, weights_.bytes()));

  layers_.assign(std::size_t(config_.num_layers), DecoderLayerWeights{});
  for (const auto& [key, base] : bases) {
    const auto [layer, matrix] = key;
    if (matrix == Matrix::kEmbed) {
      embed_ = base;
    } else if (matrix == Matrix::kNorm) {
      norm_ = base;
    } else if (matrix == Matrix::kLmHead) {
      lm_head_ = base;
    } else {
      layers_[std::size_t(layer)].matrix(matrix) = base;
    }
  }
  if (config_.tie_word_embeddings) lm_head_ = embed_;

  std::vector<TensorUpload> uploads;
  uint64_t stored_bytes = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    std::byte* destination = slot_address(bases, placed[i], element);
    const llama::ShardBlock& block = blocks[i];
    TensorUpload upload{checked.views[i], destination};
    if (!block.whole) {
      upload.first_row = block.source_first_row;
      upload.first_col = block.source_first_col;
      upload.rows = block.shape[0];
      upload.cols = placed[i].width();
    }
    const llama::SourceTensor& view = *checked.views[i];
    stored_bytes += view.numel() > 0 ? view.nbytes / uint64_t(view.numel()) * uint64_t(upload.numel()) : 0;
    uploads.push_back(upload);
    // The blocks of a fused checkpoint tensor (Phi-3's qkv_proj) lie one after another: one tensor of them all.
    if (auto it = slots_.find(slots[i].name); it != slots_.end()) {
      it->second.shape[0] += placed[i].shape[0];
    } else {
      slots_.emplace(slots[i].name, Slot{destination, placed[i].shape});
    }
  }
  upload_tensors(uploads, dtype_, context_, num_threads, kWho, stored_bytes);
  if (config_.tie_word_embeddings) {
    slots_.emplace("lm_head.weight", Slot{embed_, slots_.at("model.embed_tokens.weight").shape});
  }
}

CudaLlama::Workspace CudaLlama::carve_workspace(std::byte* base, const StepSize& size, std::size_t& bytes) const {
  const LlamaConfig& c = config_;
  const int64_t t = size.tokens, h = c.hidden_size, e = pllm_dtype_size(dtype_);
  Carver carver(base);
  Workspace w{};
  w.layer = carve_decoder_activations(carver, c, dtype_, size.tokens);
  w.rows = carver.take(size.logits * h, e);
  w.logits = carver.take<float>(size.logits * c.vocab_size);
  w.hidden = carver.take<float>(size.hidden * h);
  const int64_t shard = split_ ? split_->vocab_shard() : 0, ranks = split_ ? split_->size() : 0;
  w.shard_logits = carver.take<float>(size.logits * shard);
  w.gathered_logits = carver.take<float>(ranks * size.logits * shard);
  w.inputs = carver.take<int32_t>(2 * t + size.logits + size.hidden);
  bytes = carver.bytes();
  return w;
}

void CudaLlama::reserve(const StepSize& size) {
  if (size.tokens <= capacity_.tokens && size.logits <= capacity_.logits && size.hidden <= capacity_.hidden) return;
  const StepSize grown{std::max(size.tokens, capacity_.tokens), std::max(size.logits, capacity_.logits),
                       std::max(size.hidden, capacity_.hidden)};
  // A failed earlier step may have left work in flight on the old buffers.
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(context_.stream()));
  workspace_.release();
  capacity_ = {};
  std::size_t bytes = 0;
  carve_workspace(nullptr, grown, bytes);
  workspace_.allocate(bytes, device(), kWho,
                      "the forward workspace of a step of " + std::to_string(grown.tokens) + " tokens, " +
                          std::to_string(grown.logits) + " logits rows");
  ws_ = carve_workspace(workspace_.data(), grown, bytes);
  const std::size_t input_bytes = std::size_t(2 * grown.tokens + grown.logits + grown.hidden) * sizeof(int32_t);
  host_inputs_.allocate(input_bytes, device(), kWho, "the step's inputs");
  capacity_ = grown;
}

void CudaLlama::forward(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  try {
    run_step(b, attention, out);
  } catch (...) {
    // Work enqueued before the failure may still read the pinned inputs the
    // next step overwrites: let it drain (a failed step only).
    (void)cudaStreamSynchronize(context_.stream());
    (void)cudaGetLastError();
    throw;
  }
}

void CudaLlama::run_step(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  pllm::check_batch("models_llama", b, attention, config_.vocab_size);
  const bool has_hidden = pllm::check_forward_output("models_llama", b, out);
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, h = c.hidden_size, d = c.head_dim, vocab = c.vocab_size;
  const int32_t num_logits = b.num_logits;
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  cudaStream_t stream = context_.stream();

  context_.make_current();
  reserve({tokens, num_logits, num_hidden});

  // The int32 inputs: staged in pinned memory, one asynchronous copy.
  auto* staged = reinterpret_cast<int32_t*>(host_inputs_.data());
  const auto stage = [&](int64_t offset, const int32_t* src, int64_t count) {
    if (count > 0) std::memcpy(staged + offset, src, std::size_t(count) * sizeof(int32_t));
  };
  stage(0, b.token_ids, tokens);
  if (split_) {
    // The rank's embedding rows hold its vocabulary; every other token reads the zero row past them,
    // so that the all-reduce below sums one rank's row with zeros (exact).
    const int64_t first = split_->vocab_first(), held = split_->vocab_rows();
    const auto zero_row = static_cast<int32_t>(split_->vocab_shard());
    for (int64_t i = 0; i < tokens; ++i) {
      const int64_t id = b.token_ids[i];
      staged[i] = id >= first && id < first + held ? static_cast<int32_t>(id - first) : zero_row;
    }
  }
  stage(tokens, b.positions, tokens);
  stage(2 * tokens, b.logits_indices, num_logits);
  stage(2 * tokens + num_logits, b.hidden_indices, num_hidden);
  const int64_t input_count = 2 * tokens + num_logits + num_hidden;
  if (input_count > 0) {
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(ws_.inputs, staged, std::size_t(input_count) * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, stream));
  }
  const int32_t* ids = ws_.inputs;
  const int32_t* positions = ws_.inputs + tokens;
  const int32_t* logits_index = ws_.inputs + 2 * tokens;
  const int32_t* hidden_index = logits_index + num_logits;

  if (tokens > 0) {
    DecoderActivations activations = ws_.layer;
    activations.tokens = tokens;
    gather_rows(dtype_, embed_, h, ids, tokens, h, activations.x, h, stream);
    if (split_) all_reduce(activations.x, tokens * h, dtype_, "the embedding");
    if (c.scale_embedding) scale(dtype_, activations.x, tokens * h, std::sqrt(double(h)), stream);
    rope_tables(positions, reinterpret_cast<const double*>(inv_freq_.data()), tokens, d / 2, activations.cos,
                activations.sin, stream);
    if (c.local_rope_theta > 0.0) {
      rope_tables(positions, reinterpret_cast<const double*>(local_inv_freq_.data()), tokens, d / 2,
                  activations.local_cos, activations.local_sin, stream);
    }
    const float norm_offset = c.unit_offset_norms ? 1.0f : 0.0f;
    for (int32_t l = 0; l < c.num_layers; ++l) {
      decoder_layer_forward(context_, c, dtype_, layers_[std::size_t(l)], activations, l > 0, attention, l, kWho,
                            split_ ? &delta_all_reduce_ : nullptr);
    }
    // The last MLP output added and the final norm applied only on the rows
    // asked for; lm_head only on the logits rows, straight into f32.
    add_rms_norm(dtype_, activations.x, activations.delta, logits_index, norm_, eps, num_logits, h, dtype_, ws_.rows,
                 stream, norm_offset);
    if (split_) {
      context_.linear(dtype_, ws_.rows, num_logits, h, lm_head_, split_->vocab_shard(), ws_.shard_logits,
                      PLLM_DTYPE_F32);
      gather_logits(num_logits);
    } else {
      context_.linear(dtype_, ws_.rows, num_logits, h, lm_head_, vocab, ws_.logits, PLLM_DTYPE_F32);
    }
    if (c.final_logit_softcapping > 0.0) {
      softcap(ws_.logits, int64_t(num_logits) * vocab, static_cast<float>(c.final_logit_softcapping), stream);
    }
    add_rms_norm(dtype_, activations.x, activations.delta, hidden_index, norm_, eps, num_hidden, h, PLLM_DTYPE_F32,
                 ws_.hidden, stream, norm_offset);
  }

  // The step's one host synchronisation, without a copy: the outputs stay in
  // the workspace on the device, complete for a consumer on any stream.
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const pllm_device device{PLLM_DEVICE_CUDA, context_.device_index()};
  *out.logits = llama::tensor_view(ws_.logits, PLLM_DTYPE_F32, device, {num_logits, vocab});
  if (has_hidden) {
    *out.hidden = num_hidden > 0 ? llama::tensor_view(ws_.hidden, PLLM_DTYPE_F32, device, {num_hidden, h})
                                 : llama::tensor_view(nullptr, PLLM_DTYPE_F32, device, {});
  }
}

void CudaLlama::all_reduce(void* data, int64_t count, pllm_dtype dtype, std::string_view what) const {
  pllm_error error{};
  const pllm_status status = collectives_.api->all_reduce(collectives_.comm, data, count, dtype, PLLM_REDUCE_SUM,
                                                          context_.stream(), &error);
  if (status != PLLM_OK) {
    throw pllm::Error(status, "models_llama: tensor-parallel all_reduce of " + std::string(what) + ": " +
                                  error.message);
  }
}

void CudaLlama::gather_logits(int64_t rows) {
  if (rows <= 0) return;
  const int64_t shard = split_->vocab_shard(), vocab = config_.vocab_size;
  cudaStream_t stream = context_.stream();
  pllm_error error{};
  const pllm_status status = collectives_.api->all_gather(collectives_.comm, ws_.shard_logits, ws_.gathered_logits,
                                                          rows * shard, PLLM_DTYPE_F32, stream, &error);
  if (status != PLLM_OK) {
    throw pllm::Error(status, std::string("models_llama: tensor-parallel all_gather of the logits: ") + error.message);
  }
  // Rank r's [rows, shard] block holds columns [r * shard, r * shard + shard) of each row (the last
  // rank's fewer): laid side by side into [rows, vocab].
  for (int64_t rank = 0; rank < split_->size(); ++rank) {
    const int64_t first = rank * shard, columns = std::min(shard, vocab - first);
    for (int64_t row = 0; row < rows && columns > 0; ++row) {
      PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(ws_.logits + row * vocab + first,
                                          ws_.gathered_logits + (rank * rows + row) * shard,
                                          std::size_t(columns) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    }
  }
}

pllm_tensor CudaLlama::tensor(std::string_view name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "models_llama: no tensor '" + std::string(name) + "'");
  }
  return llama::tensor_view(it->second.data, dtype_, context_.device(), it->second.shape);
}

}  // namespace

void check_cuda_dtype(pllm_dtype dtype) {
  if (dtype != PLLM_DTYPE_INVALID && dtype != PLLM_DTYPE_F32 && dtype != PLLM_DTYPE_F16 && dtype != PLLM_DTYPE_BF16) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("models_llama on CUDA computes in f32, f16 or bf16; model "
                                                          "dtype ") +
                                                  plugins::dtype_name(dtype) + " is not supported");
  }
}

std::unique_ptr<llama::LlamaForward> load_cuda_llama(const std::filesystem::path& model_dir, int device_index,
                                                     pllm_dtype dtype, int num_threads,
                                                     const pllm_collectives_ref* collectives) {
  check_cuda_dtype(dtype);
  return std::make_unique<CudaLlama>(model_dir, device_index, dtype, num_threads, collectives);
}

}  // namespace pagedllm::llama_cuda
