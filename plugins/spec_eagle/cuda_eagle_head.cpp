#include "cuda_eagle_head.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "pagedllm/sdk.hpp"
#include "common/dtype_name.h"
#include "cuda_common/cuda_check.h"
#include "llama_common/rope_freq.h"
#include "llama_common/tensor_view.h"
#include "llama_common/weight_layout.h"
#include "llama_cuda/cuda_context.h"
#include "llama_cuda/decoder_layer.h"
#include "llama_cuda/device_memory.h"
#include "llama_cuda/llama_kernels.h"
#include "llama_cuda/weight_upload.h"
#include "draft_inputs.h"
#include "draft_vocab.h"
#include "eagle_config.h"

namespace pagedllm::spec_eagle {
namespace {

using llama::LlamaConfig;
using llama_cuda::Carver;
using llama_cuda::CudaContext;
using llama_cuda::CudaMemory;

constexpr std::string_view kWho = "spec_eagle";

std::string str(int64_t v) { return std::to_string(v); }

// The target's compute dtype, the one the head computes in: a GEMM dtype.
pllm_dtype compute_dtype(const pllm_speculator_target& target) {
  if (!target.info) throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "spec_eagle: no target model");
  const pllm_dtype dtype = target.info->dtype;
  if (dtype != PLLM_DTYPE_F32 && dtype != PLLM_DTYPE_F16 && dtype != PLLM_DTYPE_BF16) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("spec_eagle on CUDA computes in the target's dtype, f32, "
                                                          "f16 or bf16; the target's is ") +
                                                  plugins::dtype_name(dtype));
  }
  return dtype;
}

class CudaEagleHead final : public DraftHead {
 public:
  CudaEagleHead(const std::filesystem::path& draft_dir, const pllm_speculator_target& target, int device,
                std::vector<int32_t> draft_vocab, int num_threads);

  const LlamaConfig& config() const override { return config_; }
  void draft(const pllm_draft_args& args, pllm_draft_output& out) override;

 private:
  // A call's sizes; the workspace holds the largest of each seen so far.
  struct StepSize {
    int64_t tokens = 0, logits = 0, given_features = 0;
  };
  // Device scratch of a call (activations in dtype_, RoPE tables and logits in
  // f32) and its inputs, which come up in one copy from the pinned staging of
  // the same layout: int32 ids | positions | logits_index | chain_rows or
  // feature_rows, then the f32 feature rows (staged from host features, or
  // gathered on the device from the target's hidden states).
  struct Workspace {
    llama_cuda::DecoderActivations layer;
    void *input, *features;
    float* logits;
    float* full_logits;  // with a draft vocabulary: its logits spread into full rows
    std::byte* inputs;
    std::size_t input_bytes, features_offset;
  };

  int64_t logits_width() const { return draft_vocab_.empty() ? config_.vocab_size : int64_t(draft_vocab_.size()); }
  void load_weights(const std::filesystem::path& draft_dir, int num_threads);
  Workspace carve_workspace(std::byte* base, const StepSize& size, std::size_t& bytes) const;
  void reserve(const StepSize& size);
  // draft() without the clean-up after a failure.
  void run_draft(const pllm_draft_args& args, pllm_draft_output& out);

  LlamaConfig config_;
  pllm_dtype dtype_;
  SharedWeights shared_;
  CudaContext context_;
  int32_t target_layers_ = 0;
  std::vector<int32_t> draft_vocab_;  // empty: the full vocabulary

  CudaMemory weights_{CudaMemory::Kind::kDevice};
  void *fc_ = nullptr, *fc_bias_ = nullptr;  // [hidden, 2 hidden], [hidden] (null: no bias)
  llama_cuda::DecoderLayerWeights layer_;
  const void* lm_head_ = nullptr;  // [logits_width, hidden]: the target's, or its draft vocabulary rows
  const double* inv_freq_ = nullptr;

  CudaMemory workspace_{CudaMemory::Kind::kDevice};
  CudaMemory host_inputs_{CudaMemory::Kind::kPinnedHost};
  StepSize capacity_;
  Workspace ws_{};
  // Predicted features of the previous call's logits rows, [rows, hidden] in
  // dtype_; -1 rows: none kept.
  CudaMemory chain_{CudaMemory::Kind::kDevice};
  int64_t chain_capacity_ = 0, chain_rows_ = -1;
  const int32_t* draft_ids_ = nullptr;  // the draft vocabulary's ids on the device (in weights_)
};

CudaEagleHead::CudaEagleHead(const std::filesystem::path& draft_dir, const pllm_speculator_target& target, int device,
                             std::vector<int32_t> draft_vocab, int num_threads)
    : config_(load_eagle_config(draft_dir, target)),
      dtype_(compute_dtype(target)),
      // Checked before the device is touched: a target elsewhere is the likelier mistake.
      shared_(shared_weights(target, config_, {PLLM_DEVICE_CUDA, device}, dtype_, config_.vocab_size)),
      context_(device, kWho),
      target_layers_(target.info->num_layers),
      draft_vocab_(std::move(draft_vocab)) {
  check_draft_vocab(draft_vocab_, config_.vocab_size);
  // The GEMM reads the target's lm_head as a dense matrix; a draft vocabulary's rows are gathered at any stride.
  if (draft_vocab_.empty() && shared_.lm_head.strides[0] != config_.hidden_size) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "spec_eagle: the target's lm_head rows are " +
                                                  str(shared_.lm_head.strides[0]) +
                                                  " elements apart; a dense [vocab, hidden] matrix is needed");
  }
  load_weights(draft_dir, num_threads);
}

void CudaEagleHead::load_weights(const std::filesystem::path& draft_dir, int num_threads) {
  const LlamaConfig& c = config_;
  const int64_t h = c.hidden_size, element = pllm_dtype_size(dtype_);
  const std::unique_ptr<llama::WeightSource> source = llama::open_weight_source(draft_dir, c);
  const llama::WeightSource& checkpoint = *source;
  const bool has_bias = checkpoint.find("fc.bias") != nullptr;
  const std::vector<llama::WeightSlot> layer_slots = llama::decoder_layer_slots(c, "layers.0.", 0, false);
  struct Part {
    std::string name;
    std::vector<int64_t> shape;
  };
  std::vector<Part> parts = {{"fc.weight", {h, 2 * h}}};
  if (has_bias) parts.push_back({"fc.bias", {h}});
  for (const llama::WeightSlot& s : layer_slots) parts.push_back({s.name, s.shape});
  const llama::CheckedTensors checked = llama::check_checkpoint(checkpoint, parts);

  const std::vector<double> inv_freq = llama::rope_inv_freq(c);
  const int64_t draft_rows = int64_t(draft_vocab_.size());
  std::map<llama_cuda::FusedMatrixKey, std::byte*> bases;
  int32_t* draft_ids = nullptr;
  double* inv_freq_device = nullptr;
  void* compact_lm_head = nullptr;
  const auto carve = [&](std::byte* base) {
    Carver carver(base);
    fc_ = carver.take(h * 2 * h, element);
    fc_bias_ = has_bias ? carver.take(h, element) : nullptr;
    bases = llama_cuda::carve_fused_matrices(carver, layer_slots, element);
    inv_freq_device = carver.take<double>(int64_t(inv_freq.size()));
    compact_lm_head = carver.take(draft_rows * h, element);
    draft_ids = carver.take<int32_t>(draft_rows);
    return carver.bytes();
  };
  weights_.allocate(carve(nullptr), context_.device_index(), kWho,
                    "the draft head's weights (" + std::string(plugins::dtype_name(dtype_)) + ")");
  carve(weights_.data());
  for (const auto& [key, base] : bases) layer_.matrix(key.second) = base;

  std::vector<llama_cuda::TensorUpload> uploads = {{checked.views[0], static_cast<std::byte*>(fc_)}};
  if (has_bias) uploads.push_back({checked.views[1], static_cast<std::byte*>(fc_bias_)});
  const std::size_t first_layer_part = has_bias ? 2 : 1;
  for (std::size_t i = 0; i < layer_slots.size(); ++i) {
    uploads.push_back({checked.views[first_layer_part + i], llama_cuda::slot_address(bases, layer_slots[i], element)});
  }
  llama_cuda::upload_tensors(uploads, dtype_, context_, num_threads, kWho, 0);
  // Copies on the head's stream (a plain cudaMemcpy may still be in flight
  // when a kernel on a non-blocking stream starts), waited for once below.
  cudaStream_t stream = context_.stream();
  PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(inv_freq_device, inv_freq.data(), inv_freq.size() * sizeof(double),
                                      cudaMemcpyHostToDevice, stream));
  inv_freq_ = inv_freq_device;
  lm_head_ = shared_.lm_head.data;
  if (draft_rows > 0) {
    // The draft vocabulary's lm_head rows, gathered once: a step's GEMM reads N rows, not vocab.
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(draft_ids, draft_vocab_.data(), std::size_t(draft_rows) * sizeof(int32_t),
                                        cudaMemcpyHostToDevice, stream));
    llama_cuda::gather_rows(dtype_, shared_.lm_head.data, shared_.lm_head.strides[0], draft_ids, draft_rows, h,
                            compact_lm_head, h, stream);
    lm_head_ = compact_lm_head;
    draft_ids_ = draft_ids;
  }
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (!checked.unused.empty()) {
    pllm::log_info("spec_eagle: ignoring checkpoint tensors ", llama::join_names(checked.unused),
                   " (the embedding and lm_head are the target's)");
  }
  pllm::log_info("spec_eagle: loaded ", parts.size(), " tensors from ", draft_dir.string(), " onto ",
                 llama_cuda::device_name(context_.device_index()), " (", plugins::dtype_name(dtype_), ", ",
                 llama_cuda::mib(weights_.bytes()), "); draft KV layer ", target_layers_, "; draft vocabulary ",
                 logits_width(), " of ", c.vocab_size);
}

CudaEagleHead::Workspace CudaEagleHead::carve_workspace(std::byte* base, const StepSize& size,
                                                        std::size_t& bytes) const {
  const LlamaConfig& c = config_;
  const int64_t t = size.tokens, h = c.hidden_size, e = pllm_dtype_size(dtype_);
  Carver carver(base);
  Workspace w{};
  w.layer = llama_cuda::carve_decoder_activations(carver, c, dtype_, t);
  w.input = carver.take(t * 2 * h, e);
  w.features = carver.take(size.given_features * h, e);
  w.logits = carver.take<float>(size.logits * logits_width());
  w.full_logits = draft_vocab_.empty() ? nullptr : carver.take<float>(size.logits * c.vocab_size);
  // The inputs' own layout: the int32 arrays, then the f32 features 256-byte aligned.
  constexpr std::size_t kAlign = 256;
  w.features_offset = (std::size_t(3 * t + size.logits) * sizeof(int32_t) + kAlign - 1) / kAlign * kAlign;
  w.input_bytes = w.features_offset + std::size_t(size.given_features * h) * sizeof(float);
  w.inputs = carver.take(int64_t(w.input_bytes));
  bytes = carver.bytes();
  return w;
}

void CudaEagleHead::reserve(const StepSize& size) {
  cudaStream_t stream = context_.stream();
  if (size.logits > chain_capacity_) {
    // The chain this call may read moves to the larger buffer first (rare: the
    // largest logits count so far grew).
    CudaMemory grown(CudaMemory::Kind::kDevice);
    const int64_t row_bytes = config_.hidden_size * pllm_dtype_size(dtype_);
    grown.allocate(std::size_t(size.logits * row_bytes), context_.device_index(), kWho,
                   "the predicted features of " + str(size.logits) + " rows");
    if (chain_rows_ > 0) {
      PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(grown.data(), chain_.data(), std::size_t(chain_rows_ * row_bytes),
                                          cudaMemcpyDeviceToDevice, stream));
    }
    // The old buffer is freed below: nothing in flight may still read it.
    PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
    chain_.swap(grown);
    chain_capacity_ = size.logits;
  }
  if (size.tokens <= capacity_.tokens && size.logits <= capacity_.logits &&
      size.given_features <= capacity_.given_features) {
    return;
  }
  const StepSize grown{std::max(size.tokens, capacity_.tokens), std::max(size.logits, capacity_.logits),
                       std::max(size.given_features, capacity_.given_features)};
  // A failed earlier call may have left work in flight on the old buffers.
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  workspace_.release();
  capacity_ = {};
  std::size_t bytes = 0;
  carve_workspace(nullptr, grown, bytes);
  workspace_.allocate(bytes, context_.device_index(), kWho,
                      "the draft workspace of a step of " + str(grown.tokens) + " tokens, " + str(grown.logits) +
                          " logits rows");
  ws_ = carve_workspace(workspace_.data(), grown, bytes);
  host_inputs_.allocate(ws_.input_bytes, context_.device_index(), kWho, "the draft step's inputs");
  capacity_ = grown;
}

void CudaEagleHead::draft(const pllm_draft_args& args, pllm_draft_output& out) {
  try {
    run_draft(args, out);
  } catch (...) {
    // Work enqueued before the failure may still read the pinned inputs the
    // next call overwrites: let it drain (a failed call only).
    (void)cudaStreamSynchronize(context_.stream());
    (void)cudaGetLastError();
    throw;
  }
}

void CudaEagleHead::run_draft(const pllm_draft_args& args, pllm_draft_output& out) {
  const DraftInputs in =
      check_draft_inputs(args, out, config_, chain_rows_, {PLLM_DEVICE_CUDA, context_.device_index()}, true);
  const pllm_batch& b = *in.batch;
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, logits = b.num_logits, h = c.hidden_size, vocab = c.vocab_size;
  const int64_t width = logits_width(), element = pllm_dtype_size(dtype_);
  const int64_t given_features = in.continues_chain() ? 0 : tokens;
  cudaStream_t stream = context_.stream();

  context_.make_current();
  reserve({tokens, logits, given_features});

  // The inputs: staged in pinned memory, one asynchronous copy.
  std::byte* staged = host_inputs_.data();
  auto* staged_ints = reinterpret_cast<int32_t*>(staged);
  const auto stage = [&](int64_t offset, const int32_t* src, int64_t count) {
    if (count > 0) std::memcpy(staged_ints + offset, src, std::size_t(count) * sizeof(int32_t));
  };
  stage(0, b.token_ids, tokens);
  stage(tokens, b.positions, tokens);
  stage(2 * tokens, b.logits_indices, logits);
  if (in.chain_rows) stage(2 * tokens + logits, in.chain_rows, tokens);
  // The target's hidden states on this device are gathered here by index
  // (nothing crosses to the host); host features are staged row by row.
  const bool device_features = given_features > 0 && in.features->device.type == PLLM_DEVICE_CUDA;
  if (device_features) stage(2 * tokens + logits, in.feature_rows, tokens);
  auto* staged_features = reinterpret_cast<float*>(staged + ws_.features_offset);
  const bool host_features = given_features > 0 && !device_features;
  for (int64_t t = 0; host_features && t < tokens; ++t) {
    std::memcpy(staged_features + t * h, in.feature(t), std::size_t(h) * sizeof(float));
  }
  const std::size_t input_bytes = host_features ? ws_.features_offset + std::size_t(tokens * h) * sizeof(float)
                                                : std::size_t(3 * tokens + logits) * sizeof(int32_t);
  if (input_bytes > 0) {
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(ws_.inputs, staged, input_bytes, cudaMemcpyHostToDevice, stream));
  }
  const auto* ids = reinterpret_cast<const int32_t*>(ws_.inputs);
  const int32_t* positions = ids + tokens;
  const int32_t* logits_index = ids + 2 * tokens;
  const int32_t* chain_rows = in.chain_rows ? logits_index + logits : nullptr;
  auto* features_f32 = reinterpret_cast<float*>(ws_.inputs + ws_.features_offset);
  chain_rows_ = -1;  // a failure below leaves no chain to continue

  // input row t = [embed(token_ids[t]) | feature t], in dtype_.
  void* input_features = static_cast<std::byte*>(ws_.input) + h * element;
  llama_cuda::gather_rows(dtype_, shared_.embed.data, shared_.embed.strides[0], ids, tokens, h, ws_.input, 2 * h,
                          stream);
  if (given_features > 0) {
    if (device_features) {
      llama_cuda::gather_rows(PLLM_DTYPE_F32, in.features->data, in.features->strides[0], logits_index + logits,
                              tokens, h, features_f32, h, stream);
    }
    llama_cuda::convert_from_f32(features_f32, tokens * h, dtype_, ws_.features, stream);
    llama_cuda::gather_rows(dtype_, ws_.features, h, nullptr, tokens, h, input_features, 2 * h, stream);
  } else {
    llama_cuda::gather_rows(dtype_, chain_.data(), h, chain_rows, tokens, h, input_features, 2 * h, stream);
  }
  llama_cuda::DecoderActivations a = ws_.layer;
  a.tokens = tokens;
  context_.linear(dtype_, ws_.input, tokens, 2 * h, fc_, h, a.x, dtype_);
  if (fc_bias_) llama_cuda::add_rows(dtype_, a.x, fc_bias_, 0, nullptr, tokens, h, a.x, stream);
  llama_cuda::rope_tables(positions, inv_freq_, tokens, c.head_dim / 2, a.cos, a.sin, stream);
  llama_cuda::decoder_layer_forward(context_, c, dtype_, layer_, a, false, *args.attention, target_layers_, kWho);
  // The predicted features of the logits rows (x + the MLP's delta, no final
  // norm): lm_head's input, and the next chain step's features. The gather
  // above has read the old chain: the stream orders this write after it.
  llama_cuda::add_rows(dtype_, a.x, a.delta, h, logits_index, logits, h, chain_.data(), stream);
  context_.linear(dtype_, chain_.data(), logits, h, lm_head_, width, ws_.logits, PLLM_DTYPE_F32);

  // A reduced draft vocabulary's N columns are spread into full rows here, on
  // the device. Then the call's one host synchronisation, without a copy: the
  // logits stay on the device for the sampler there.
  float* result = ws_.logits;
  if (!draft_vocab_.empty()) {
    llama_cuda::scatter_columns(ws_.logits, logits, width, draft_ids_, vocab, ws_.full_logits, stream);
    result = ws_.full_logits;
  }
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  chain_rows_ = logits;
  *out.logits = llama::tensor_view(result, PLLM_DTYPE_F32, {PLLM_DEVICE_CUDA, context_.device_index()}, {logits, vocab});
}

}  // namespace

std::unique_ptr<DraftHead> load_cuda_eagle_head(const std::filesystem::path& draft_dir,
                                                const pllm_speculator_target& target, int device_index,
                                                std::vector<int32_t> draft_vocab, int num_threads) {
  return std::make_unique<CudaEagleHead>(draft_dir, target, device_index, std::move(draft_vocab), num_threads);
}

}  // namespace pagedllm::spec_eagle
