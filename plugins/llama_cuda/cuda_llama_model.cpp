#include "plugins/llama_cuda/cuda_llama_model.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "pagedllm/sdk.hpp"
#include "pagedllm/sdk/cpp/safetensors.hpp"
#include "plugins/common/dtype_name.h"
#include "plugins/common/thread_pool.h"
#include "plugins/cuda_common/cuda_check.h"
#include "plugins/llama_common/batch_check.h"
#include "plugins/llama_common/rope_freq.h"
#include "plugins/llama_common/tensor_view.h"
#include "plugins/llama_common/weight_layout.h"
#include "plugins/llama_cuda/llama_kernels.h"

namespace pagedllm::llama_cuda {
namespace {

using llama::LlamaConfig;
using llama::Matrix;

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw pllm::Error(status == CUBLAS_STATUS_ALLOC_FAILED ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE,
                    std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                        cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

#define LLAMA_CUBLAS_CHECK(call)                                                                         \
  do {                                                                                                   \
    const cublasStatus_t llama_cublas_status_ = (call);                                                 \
    if (llama_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      throw_cublas_error(llama_cublas_status_, #call, __FILE__, __LINE__);                               \
    }                                                                                                    \
  } while (0)

std::string mib(uint64_t bytes) { return std::to_string((bytes + (uint64_t(1) << 20) - 1) >> 20) + " MiB"; }
std::string device_name(int device) { return "cuda:" + std::to_string(device); }

// cuBLAS's name of a compute dtype (F32, F16 or BF16).
cudaDataType_t cuda_type(pllm_dtype dtype) {
  if (dtype == PLLM_DTYPE_F16) return CUDA_R_16F;
  if (dtype == PLLM_DTYPE_BF16) return CUDA_R_16BF;
  return CUDA_R_32F;
}

// One allocation of device memory (cudaMalloc) or of page-locked host memory
// (cudaHostAlloc: what makes cudaMemcpyAsync asynchronous), freed with the
// object. Failure is a pllm::Error saying what needed how much, and for the
// device what it has free.
class CudaMemory {
 public:
  enum class Kind { kDevice, kPinnedHost };
  explicit CudaMemory(Kind kind) : kind_(kind) {}
  CudaMemory(const CudaMemory&) = delete;
  CudaMemory& operator=(const CudaMemory&) = delete;
  ~CudaMemory() { release(); }

  void allocate(std::size_t bytes, int device, const std::string& what) {
    release();
    void* p = nullptr;
    const std::size_t size = std::max<std::size_t>(bytes, 1);
    const cudaError_t status =
        kind_ == Kind::kDevice ? cudaMalloc(&p, size) : cudaHostAlloc(&p, size, cudaHostAllocDefault);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      std::string where = "of pinned host memory";
      if (kind_ == Kind::kDevice) {
        where = "on " + device_name(device);
        std::size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
          where += " (" + mib(free_bytes) + " free of " + mib(total_bytes) + ")";
        }
        (void)cudaGetLastError();
      }
      throw pllm::Error(status == cudaErrorMemoryAllocation ? PLLM_ERROR_OUT_OF_MEMORY : PLLM_ERROR_DEVICE,
                        "models_llama: " + what + " needs " + mib(bytes) + " " + where + ": " +
                            cudaGetErrorName(status));
    }
    data_ = static_cast<std::byte*>(p);
    bytes_ = bytes;
  }
  void release() {
    if (data_) (void)(kind_ == Kind::kDevice ? cudaFree(data_) : cudaFreeHost(data_));
    data_ = nullptr;
    bytes_ = 0;
  }
  std::byte* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Kind kind_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Hands out 256-byte aligned ranges of one allocation. Run once with no base
// to size the allocation, then again over it: one function states the layout.
class Carver {
 public:
  explicit Carver(std::byte* base) : base_(base) {}
  template <class T = std::byte>
  T* take(int64_t count, int64_t element_bytes = int64_t(sizeof(T))) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    T* p = base_ ? reinterpret_cast<T*>(base_ + offset_) : nullptr;
    offset_ += std::size_t(count * element_bytes);
    return p;
  }
  std::size_t bytes() const { return offset_; }

 private:
  static constexpr std::size_t kAlign = 256;
  std::byte* base_;
  std::size_t offset_ = 0;
};

struct StreamDeleter {
  void operator()(CUstream_st* s) const { (void)cudaStreamDestroy(s); }
};
struct CublasDeleter {
  void operator()(cublasContext* h) const { (void)cublasDestroy(h); }
};

// Makes `device` current, with an error naming it and CUDA's reason (no
// driver, no such ordinal) when it cannot be used.
void use_device(int device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && device >= count) {
    throw pllm::Error(PLLM_ERROR_DEVICE, "models_llama: there is no " + device_name(device) + " (" +
                                             std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  if (status == cudaSuccess) status = cudaSetDevice(device);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw pllm::Error(PLLM_ERROR_DEVICE, "models_llama: cannot use " + device_name(device) + ": " +
                                             cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

class CudaLlama final : public llama::LlamaForward {
 public:
  CudaLlama(const std::filesystem::path& model_dir, int device, pllm_dtype dtype, int num_threads);

  const LlamaConfig& config() const override { return config_; }
  pllm_dtype dtype() const override { return dtype_; }
  std::string describe() const override {
    return device_name(device_) + ", " + plugins::dtype_name(dtype_) + ", " + mib(weights_.bytes()) +
           " of weights on the device";
  }
  void forward(const pllm_batch& batch, pllm_attention_ref attention, pllm_forward_output& out) override;
  pllm_tensor tensor(std::string_view name) const override;

 private:
  struct Layer {
    void *input_norm, *qkv, *o, *post_norm, *gate_up, *down;
  };
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
  // ids | positions | logits_index | hidden_index.
  struct Workspace {
    void *x, *delta, *normed, *qkv, *attn, *gate_up, *act, *rows;
    float *cos, *sin, *logits, *hidden;
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
  // y[m, n] = x[m, k] w[n, k]^T: row-major activations times HF's
  // [out, in] weights, f32 accumulation, y in `y_dtype`.
  void linear(const void* x, int64_t m, int64_t k, const void* w, int64_t n, void* y, pllm_dtype y_dtype);
  pllm_device device() const { return {PLLM_DEVICE_CUDA, device_}; }

  LlamaConfig config_;
  int device_;
  pllm_dtype dtype_ = PLLM_DTYPE_INVALID;
  std::unique_ptr<CUstream_st, StreamDeleter> stream_;
  std::unique_ptr<cublasContext, CublasDeleter> cublas_;

  CudaMemory weights_{CudaMemory::Kind::kDevice}, inv_freq_{CudaMemory::Kind::kDevice};
  void *embed_ = nullptr, *norm_ = nullptr, *lm_head_ = nullptr;
  std::vector<Layer> layers_;
  std::map<std::string, Slot, std::less<>> slots_;

  CudaMemory workspace_{CudaMemory::Kind::kDevice};
  CudaMemory host_inputs_{CudaMemory::Kind::kPinnedHost}, host_outputs_{CudaMemory::Kind::kPinnedHost};
  StepSize capacity_;
  Workspace ws_{};
};

CudaLlama::CudaLlama(const std::filesystem::path& model_dir, int device, pllm_dtype dtype, int num_threads)
    : config_(LlamaConfig::load(model_dir, "models_llama")), device_(device) {
  use_device(device_);
  const pllm::safetensors::Checkpoint checkpoint(model_dir);
  const std::vector<llama::WeightSlot> slots = llama::model_slots(config_);
  const llama::CheckedTensors checked = llama::check_checkpoint(checkpoint, slots);
  // "auto": the dtype the checkpoint stores its embedding in.
  dtype_ = dtype == PLLM_DTYPE_INVALID ? checked.views.front()->dtype : dtype;

  cudaStream_t stream = nullptr;
  PAGEDLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_.reset(stream);
  cublasHandle_t handle = nullptr;
  LLAMA_CUBLAS_CHECK(cublasCreate(&handle));
  cublas_.reset(handle);
  LLAMA_CUBLAS_CHECK(cublasSetStream(handle, stream));

  const std::vector<double> inv_freq = llama::rope_inv_freq(config_);
  inv_freq_.allocate(inv_freq.size() * sizeof(double), device_, "the RoPE frequencies");
  PAGEDLLM_CUDA_CHECK(cudaMemcpy(inv_freq_.data(), inv_freq.data(), inv_freq.size() * sizeof(double),
                                 cudaMemcpyHostToDevice));
  load_weights(slots, checked, num_threads);
  if (!checked.unused.empty()) {
    pllm::log_info("models_llama: ignoring checkpoint tensors ", llama::join_names(checked.unused),
                   config_.tie_word_embeddings ? " (lm_head is tied to the embedding)" : "");
  }
  pllm::log_info("models_llama: loaded ", slots.size(), " tensors from ", model_dir.string(), " (",
                 mib(checked.stored_bytes), " stored) onto ", describe());
}

void CudaLlama::load_weights(const std::vector<llama::WeightSlot>& slots, const llama::CheckedTensors& checked,
                             int num_threads) {
  const int64_t element = pllm_dtype_size(dtype_);
  // Elements of each fused matrix: the end of its last row range.
  std::map<std::pair<int32_t, Matrix>, int64_t> sizes;
  for (const llama::WeightSlot& s : slots) {
    int64_t& size = sizes[{s.layer, s.matrix}];
    size = std::max(size, (s.first_row + s.shape[0]) * s.width());
  }
  std::map<std::pair<int32_t, Matrix>, std::byte*> bases;
  const auto carve = [&](std::byte* base) {
    Carver carver(base);
    for (const auto& [key, size] : sizes) bases[key] = carver.take(size, element);
    return carver.bytes();
  };
  weights_.allocate(carve(nullptr), device_, "the weights (" + std::string(plugins::dtype_name(dtype_)) + ")");
  carve(weights_.data());

  layers_.assign(std::size_t(config_.num_layers), Layer{});
  for (const auto& [key, base] : bases) {
    const auto [layer, matrix] = key;
    Layer* l = layer >= 0 ? &layers_[std::size_t(layer)] : nullptr;
    switch (matrix) {
      case Matrix::kEmbed: embed_ = base; break;
      case Matrix::kNorm: norm_ = base; break;
      case Matrix::kLmHead: lm_head_ = base; break;
      case Matrix::kInputNorm: l->input_norm = base; break;
      case Matrix::kQkv: l->qkv = base; break;
      case Matrix::kO: l->o = base; break;
      case Matrix::kPostNorm: l->post_norm = base; break;
      case Matrix::kGateUp: l->gate_up = base; break;
      case Matrix::kDown: l->down = base; break;
    }
  }
  if (config_.tie_word_embeddings) lm_head_ = embed_;

  // Each tensor goes to f32 on the host (in parallel), over in chunks through
  // pinned memory, and to dtype_ on the device. Load time only, so each chunk
  // simply waits for the previous one.
  constexpr int64_t kChunk = int64_t(1) << 22, kSubChunk = int64_t(1) << 18;
  CudaMemory host_staging(CudaMemory::Kind::kPinnedHost);
  host_staging.allocate(kChunk * sizeof(float), device_, "weight upload staging");
  CudaMemory device_staging(CudaMemory::Kind::kDevice);
  device_staging.allocate(kChunk * sizeof(float), device_, "weight upload staging");
  auto* host = reinterpret_cast<float*>(host_staging.data());
  auto* staged = reinterpret_cast<float*>(device_staging.data());
  plugins::ThreadPool pool(num_threads);
  uint64_t done = 0;
  pllm::report_progress("loading weights", 0, checked.stored_bytes);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const llama::WeightSlot& s = slots[i];
    const pllm::safetensors::TensorView& view = *checked.views[i];
    std::byte* dst = bases.at({s.layer, s.matrix}) + s.first_row * s.width() * element;
    for (int64_t first = 0; first < view.numel(); first += kChunk) {
      const int64_t count = std::min(kChunk, view.numel() - first);
      pool.parallel_for((count + kSubChunk - 1) / kSubChunk, [&](int64_t sub, int) {
        const int64_t begin = sub * kSubChunk;
        view.to_f32(first + begin, std::min(kSubChunk, count - begin), host + begin);
      });
      PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(staged, host, std::size_t(count) * sizeof(float), cudaMemcpyHostToDevice,
                                          stream_.get()));
      convert_from_f32(staged, count, dtype_, dst + first * element, stream_.get());
      PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
    }
    slots_.emplace(s.name, Slot{dst, s.shape});
    done += view.nbytes;
    pllm::report_progress("loading weights", done, checked.stored_bytes);
  }
  if (config_.tie_word_embeddings) {
    slots_.emplace("lm_head.weight", Slot{embed_, {config_.vocab_size, config_.hidden_size}});
  }
}

CudaLlama::Workspace CudaLlama::carve_workspace(std::byte* base, const StepSize& size, std::size_t& bytes) const {
  const LlamaConfig& c = config_;
  const int64_t t = size.tokens, h = c.hidden_size, e = pllm_dtype_size(dtype_), half = c.head_dim / 2;
  Carver carver(base);
  Workspace w{};
  w.x = carver.take(t * h, e);
  w.delta = carver.take(t * h, e);
  w.normed = carver.take(t * h, e);
  w.qkv = carver.take(t * (c.q_size() + 2 * c.kv_size()), e);
  w.attn = carver.take(t * c.q_size(), e);
  w.gate_up = carver.take(t * 2 * c.intermediate_size, e);
  w.act = carver.take(t * c.intermediate_size, e);
  w.rows = carver.take(size.logits * h, e);
  w.cos = carver.take<float>(t * half);
  w.sin = carver.take<float>(t * half);
  w.logits = carver.take<float>(size.logits * c.vocab_size);
  w.hidden = carver.take<float>(size.hidden * h);
  w.inputs = carver.take<int32_t>(2 * t + size.logits + size.hidden);
  bytes = carver.bytes();
  return w;
}

void CudaLlama::reserve(const StepSize& size) {
  if (size.tokens <= capacity_.tokens && size.logits <= capacity_.logits && size.hidden <= capacity_.hidden) return;
  const StepSize grown{std::max(size.tokens, capacity_.tokens), std::max(size.logits, capacity_.logits),
                       std::max(size.hidden, capacity_.hidden)};
  // A failed earlier step may have left work in flight on the old buffers.
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  workspace_.release();
  capacity_ = {};
  std::size_t bytes = 0;
  carve_workspace(nullptr, grown, bytes);
  workspace_.allocate(bytes, device_,
                      "the forward workspace of a step of " + std::to_string(grown.tokens) + " tokens, " +
                          std::to_string(grown.logits) + " logits rows");
  ws_ = carve_workspace(workspace_.data(), grown, bytes);
  const std::size_t input_bytes = std::size_t(2 * grown.tokens + grown.logits + grown.hidden) * sizeof(int32_t);
  const std::size_t output_bytes =
      std::size_t(grown.logits * config_.vocab_size + grown.hidden * config_.hidden_size) * sizeof(float);
  host_inputs_.allocate(input_bytes, device_, "the step's inputs");
  host_outputs_.allocate(output_bytes, device_, "the step's logits and hidden states");
  capacity_ = grown;
}

void CudaLlama::linear(const void* x, int64_t m, int64_t k, const void* w, int64_t n, void* y, pllm_dtype y_dtype) {
  if (m <= 0) return;
  // Column-major cuBLAS sees row-major y[m, n] as y^T[n, m] = w[n, k] x^T: w
  // transposed (its rows are k long), x as is.
  const float alpha = 1.0f, beta = 0.0f;
  const cudaDataType_t type = cuda_type(dtype_);
  LLAMA_CUBLAS_CHECK(cublasGemmEx(cublas_.get(), CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, w, type,
                                  int(k), x, type, int(k), &beta, y, cuda_type(y_dtype), int(n), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

void CudaLlama::forward(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  try {
    run_step(b, attention, out);
  } catch (...) {
    // Work enqueued before the failure may still read the pinned inputs the
    // next step overwrites: let it drain (a failed step only).
    (void)cudaStreamSynchronize(stream_.get());
    (void)cudaGetLastError();
    throw;
  }
}

void CudaLlama::run_step(const pllm_batch& b, pllm_attention_ref attention, pllm_forward_output& out) {
  llama::check_batch("models_llama", b, attention, config_.vocab_size);
  const bool has_hidden = llama::check_forward_output("models_llama", b, out);
  const LlamaConfig& c = config_;
  const int64_t tokens = b.num_tokens, h = c.hidden_size, d = c.head_dim, q = c.q_size(), kv = c.kv_size();
  const int64_t qkv_width = q + 2 * kv, inter = c.intermediate_size, vocab = c.vocab_size;
  const int32_t num_logits = b.num_logits;
  const int32_t num_hidden = PLLM_HAS_FIELD(pllm_batch, &b, hidden_indices) ? b.num_hidden : 0;
  const auto eps = static_cast<float>(c.rms_norm_eps);
  cudaStream_t stream = stream_.get();

  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_));
  reserve({tokens, num_logits, num_hidden});

  // The int32 inputs: staged in pinned memory, one asynchronous copy.
  auto* staged = reinterpret_cast<int32_t*>(host_inputs_.data());
  const auto stage = [&](int64_t offset, const int32_t* src, int64_t count) {
    if (count > 0) std::memcpy(staged + offset, src, std::size_t(count) * sizeof(int32_t));
  };
  stage(0, b.token_ids, tokens);
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
    embed_rows(dtype_, embed_, ids, tokens, h, ws_.x, stream);
    rope_tables(positions, reinterpret_cast<const double*>(inv_freq_.data()), tokens, d / 2, ws_.cos, ws_.sin,
                stream);
    pllm_attention_layer_args args{};
    args.struct_size = sizeof args;
    args.query = llama::heads_view(ws_.qkv, dtype_, device(), tokens, c.num_heads, d, qkv_width);
    args.key = llama::heads_view(static_cast<std::byte*>(ws_.qkv) + q * pllm_dtype_size(dtype_), dtype_, device(),
                                 tokens, c.num_kv_heads, d, qkv_width);
    args.value = llama::heads_view(static_cast<std::byte*>(ws_.qkv) + (q + kv) * pllm_dtype_size(dtype_), dtype_,
                                   device(), tokens, c.num_kv_heads, d, qkv_width);
    args.output = llama::heads_view(ws_.attn, dtype_, device(), tokens, c.num_heads, d, q);
    args.scale = static_cast<float>(1.0 / std::sqrt(double(d)));
    args.stream = stream;
    for (int32_t l = 0; l < c.num_layers; ++l) {
      const Layer& layer = layers_[std::size_t(l)];
      // x += the previous layer's MLP output (none before layer 0), then the input norm.
      add_rms_norm(dtype_, ws_.x, l == 0 ? nullptr : ws_.delta, nullptr, layer.input_norm, eps, tokens, h, dtype_,
                   ws_.normed, stream);
      linear(ws_.normed, tokens, h, layer.qkv, qkv_width, ws_.qkv, dtype_);
      apply_rope(dtype_, ws_.qkv, tokens, qkv_width, c.num_heads + c.num_kv_heads, d, ws_.cos, ws_.sin, stream);
      pllm_error error{};
      const pllm_status status = attention.api->run(attention.backend, l, &args, &error);
      if (status != PLLM_OK) {
        throw pllm::Error(status, "models_llama: attention backend failed at layer " + std::to_string(l) + ": " +
                                      error.message);
      }
      linear(ws_.attn, tokens, q, layer.o, h, ws_.delta, dtype_);
      add_rms_norm(dtype_, ws_.x, ws_.delta, nullptr, layer.post_norm, eps, tokens, h, dtype_, ws_.normed, stream);
      linear(ws_.normed, tokens, h, layer.gate_up, 2 * inter, ws_.gate_up, dtype_);
      silu_mul(dtype_, ws_.gate_up, tokens, inter, ws_.act, stream);
      linear(ws_.act, tokens, inter, layer.down, h, ws_.delta, dtype_);
    }
    // The last MLP output added and the final norm applied only on the rows
    // asked for; lm_head only on the logits rows, straight into f32.
    add_rms_norm(dtype_, ws_.x, ws_.delta, logits_index, norm_, eps, num_logits, h, dtype_, ws_.rows, stream);
    linear(ws_.rows, num_logits, h, lm_head_, vocab, ws_.logits, PLLM_DTYPE_F32);
    add_rms_norm(dtype_, ws_.x, ws_.delta, hidden_index, norm_, eps, num_hidden, h, PLLM_DTYPE_F32, ws_.hidden,
                 stream);
  }

  auto* host_logits = reinterpret_cast<float*>(host_outputs_.data());
  float* host_hidden = host_logits + int64_t(num_logits) * vocab;
  if (num_logits > 0) {
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(host_logits, ws_.logits, std::size_t(num_logits * vocab) * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
  }
  if (num_hidden > 0) {
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(host_hidden, ws_.hidden, std::size_t(num_hidden * h) * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream));
  }
  // The step's one host synchronisation: the outputs are host memory.
  PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  const pllm_device host_device{PLLM_DEVICE_CPU, 0};
  out.logits = llama::tensor_view(host_logits, PLLM_DTYPE_F32, host_device, {num_logits, vocab});
  if (has_hidden) {
    out.hidden = num_hidden > 0 ? llama::tensor_view(host_hidden, PLLM_DTYPE_F32, host_device, {num_hidden, h})
                                : pllm_tensor{};
  }
}

pllm_tensor CudaLlama::tensor(std::string_view name) const {
  auto it = slots_.find(name);
  if (it == slots_.end()) {
    throw pllm::Error(PLLM_ERROR_NOT_FOUND, "models_llama: no tensor '" + std::string(name) + "'");
  }
  return llama::tensor_view(it->second.data, dtype_, device(), it->second.shape);
}

}  // namespace

std::unique_ptr<llama::LlamaForward> load_cuda_llama(const std::filesystem::path& model_dir, int device_index,
                                                     pllm_dtype dtype, int num_threads) {
  if (dtype != PLLM_DTYPE_INVALID && dtype != PLLM_DTYPE_F32 && dtype != PLLM_DTYPE_F16 && dtype != PLLM_DTYPE_BF16) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, std::string("models_llama on CUDA computes in f32, f16 or bf16; model "
                                                          "dtype ") +
                                                  plugins::dtype_name(dtype) + " is not supported");
  }
  return std::make_unique<CudaLlama>(model_dir, device_index, dtype, num_threads);
}

}  // namespace pagedllm::llama_cuda
