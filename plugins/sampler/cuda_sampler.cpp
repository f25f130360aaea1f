#include "cuda_sampler.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "cuda_common/cuda_check.h"
#include "sample_batch_check.h"
#include "sampling_math.h"
#include "token_mask.h"

namespace pagedllm::sampler {
namespace {

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void CudaSampler::Buffer::reserve(std::size_t wanted, int device) {
  if (wanted <= bytes) return;
  release();
  const std::size_t grown = std::max(wanted, bytes * 2);
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device));
  if (pinned) {
    PAGEDLLM_CUDA_CHECK(cudaMallocHost(&data, grown));
  } else {
    PAGEDLLM_CUDA_CHECK(cudaMalloc(&data, grown));
  }
  bytes = grown;
}

void CudaSampler::Buffer::release() {
  if (data) {
    if (pinned) {
      (void)cudaFreeHost(data);
    } else {
      (void)cudaFree(data);
    }
  }
  data = nullptr;
  bytes = 0;
}

CudaSampler::CudaSampler(int device_index) : device_(device_index) {
  int count = 0;
  PAGEDLLM_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (device_index < 0 || device_index >= count) {
    throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, "sampler: cuda:" + std::to_string(device_index) +
                                                       " does not exist (" + std::to_string(count) + " devices)");
  }
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_));
  PAGEDLLM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaSampler::~CudaSampler() {
  (void)cudaSetDevice(device_);
  if (stream_) (void)cudaStreamSynchronize(stream_);
  for (Buffer* b : {&inputs_, &staged_inputs_, &logits_copy_, &masked_logits_, &work_, &outputs_, &staged_outputs_,
                    &top_keys_, &probs_}) {
    b->release();
  }
  if (stream_) (void)cudaStreamDestroy(stream_);
}

bool CudaSampler::accepts(const pllm_device& d) const {
  return d.type == PLLM_DEVICE_CPU || (d.type == PLLM_DEVICE_CUDA && d.index == device_);
}

void CudaSampler::synchronize() { PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

int64_t CudaSampler::upload(const pllm_sample_batch& batch, SampleKernelArgs& args) {
  const std::string where = "host memory or cuda:" + std::to_string(device_);
  const int64_t vocab = check_batch(batch, [&](const pllm_device& d) { return accepts(d); }, where.c_str());
  const auto n = std::size_t(batch.num_rows);
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_));
  rows_.resize(n);
  penalties_.clear();
  adjustments_.clear();
  for (std::size_t r = 0; r < n; ++r) {
    const pllm_sample_row& row = row_of(batch, int64_t(r));
    const pllm_sampling_params& p = *row.params;
    DeviceRow& d = rows_[r];
    d = DeviceRow{p.temperature,
                  p.top_p,
                  p.min_p,
                  p.repetition_penalty,
                  p.frequency_penalty,
                  p.presence_penalty,
                  p.top_k,
                  p.num_top_logprobs,
                  row.logits_row,
                  int32_t(penalties_.size()),
                  0,
                  int32_t(adjustments_.size()),
                  0,
                  scored_token(row),
                  row_key(p.seed, row.random_offset),
                  row_constrained(batch, int64_t(r)) ? 1 : 0};
    if (has_logit_adjustments(row)) {
      for_each_logit_adjustment(row, banned_, [&](int32_t id, float bias, bool banned) {
        adjustments_.push_back({id, bias, banned ? 1 : 0});
        ++d.adjustment_count;
      });
    }
    if (!has_penalties(p)) continue;
    d.penalty_count = history_.for_each_token(
        row, vocab, [&](int32_t id, int32_t output_count) { penalties_.push_back({id, output_count}); });
  }

  // One host-to-device copy: rows, penalty entries, logit adjustment entries, and the token masks
  // of a constrained batch.
  check_token_mask(batch, vocab);
  const bool masked = has_token_mask(batch);
  const std::size_t mask_bytes = masked ? n * std::size_t(batch.bitmask_words) * sizeof(uint32_t) : 0;
  const std::size_t rows_bytes = aligned(n * sizeof(DeviceRow));
  const std::size_t penalty_bytes = aligned(penalties_.size() * sizeof(PenaltyEntry));
  const std::size_t adjustment_bytes = aligned(adjustments_.size() * sizeof(AdjustmentEntry));
  const std::size_t mask_offset = rows_bytes + penalty_bytes + adjustment_bytes;
  const std::size_t input_bytes = mask_offset + mask_bytes;
  staged_inputs_.reserve(input_bytes, device_);
  inputs_.reserve(input_bytes, device_);
  auto* staged = static_cast<std::byte*>(staged_inputs_.data);
  std::memcpy(staged, rows_.data(), n * sizeof(DeviceRow));
  if (!penalties_.empty()) std::memcpy(staged + rows_bytes, penalties_.data(), penalties_.size() * sizeof(PenaltyEntry));
  if (!adjustments_.empty()) {
    std::memcpy(staged + rows_bytes + penalty_bytes, adjustments_.data(),
                adjustments_.size() * sizeof(AdjustmentEntry));
  }
  if (masked) std::memcpy(staged + mask_offset, batch.token_bitmask, mask_bytes);
  PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(inputs_.data, staged, input_bytes, cudaMemcpyHostToDevice, stream_));
  auto* device_inputs = static_cast<std::byte*>(inputs_.data);
  args.rows = reinterpret_cast<const DeviceRow*>(device_inputs);
  args.penalties = reinterpret_cast<const PenaltyEntry*>(device_inputs + rows_bytes);
  args.adjustments = reinterpret_cast<const AdjustmentEntry*>(device_inputs + rows_bytes + penalty_bytes);

  const pllm_tensor& l = *batch.logits;
  args.logits = static_cast<const float*>(l.data);
  args.logits_stride = l.strides[0];
  if (l.device.type == PLLM_DEVICE_CPU) {
    // Host logits (a producer that has no device copy) are copied in first.
    const std::size_t bytes = std::size_t(l.shape[0] * l.strides[0]) * sizeof(float);
    logits_copy_.reserve(bytes, device_);
    PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(logits_copy_.data, l.data, bytes, cudaMemcpyHostToDevice, stream_));
    args.logits = static_cast<const float*>(logits_copy_.data);
  }
  if (masked) {
    // Every row gathered into one [num_rows, vocab] buffer, the constrained ones masked.
    masked_logits_.reserve(n * std::size_t(vocab) * sizeof(float), device_);
    MaskKernelArgs mask{args.logits, args.logits_stride, vocab, args.rows,
                        reinterpret_cast<const uint32_t*>(device_inputs + mask_offset),
                        batch.bitmask_words, static_cast<float*>(masked_logits_.data)};
    launch_mask_rows(mask, batch.num_rows, stream_);
    args.logits = static_cast<const float*>(masked_logits_.data);
    args.logits_stride = vocab;
    args.gathered = 1;
  }
  work_.reserve(n * std::size_t(vocab) * sizeof(float), device_);
  args.work = static_cast<float*>(work_.data);
  args.vocab = vocab;
  return vocab;
}

void CudaSampler::sample(const pllm_sample_batch& batch, pllm_sample_output& out) {
  check_sample_output(batch, out);
  SampleKernelArgs args{};
  upload(batch, args);
  const auto n = std::size_t(batch.num_rows);
  if (n == 0) return;
  const auto top = std::size_t(out.max_top_logprobs);
  // Outputs in one allocation, read back by one copy: results, top ids, top
  // logprobs, unpadded (all 4-byte fields), so exactly what sampler.h says crosses.
  static_assert(sizeof(DeviceResult) == 12 && alignof(DeviceResult) == 4);
  const std::size_t results_bytes = n * sizeof(DeviceResult);
  const std::size_t top_bytes = n * top * sizeof(int32_t);
  const std::size_t output_bytes = results_bytes + top_bytes + n * top * sizeof(float);
  outputs_.reserve(output_bytes, device_);
  staged_outputs_.reserve(output_bytes, device_);
  top_keys_.reserve(std::max<std::size_t>(1, n * top) * sizeof(uint64_t), device_);
  auto* device_out = static_cast<std::byte*>(outputs_.data);
  args.results = reinterpret_cast<DeviceResult*>(device_out);
  args.max_top = int32_t(top);
  args.top_ids = reinterpret_cast<int32_t*>(device_out + results_bytes);
  args.top_logprobs = reinterpret_cast<float*>(device_out + results_bytes + top_bytes);
  args.top_keys = static_cast<uint64_t*>(top_keys_.data);
  args.want_logprobs = out.logprobs != nullptr;
  launch_sample_rows(args, batch.num_rows, stream_);
  // Only what the contract says crosses: 12 bytes a row plus 8 per top logprob.
  PAGEDLLM_CUDA_CHECK(
      cudaMemcpyAsync(staged_outputs_.data, outputs_.data, output_bytes, cudaMemcpyDeviceToHost, stream_));
  synchronize();

  const auto* host = static_cast<const std::byte*>(staged_outputs_.data);
  const auto* results = reinterpret_cast<const DeviceResult*>(host);
  for (std::size_t r = 0; r < n; ++r) {
    if (results[r].status != PLLM_SAMPLE_OK) non_finite_row(out.row_status, int64_t(r));
  }
  for (std::size_t r = 0; r < n; ++r) {
    out.token_ids[r] = results[r].token;
    if (out.logprobs) out.logprobs[r] = results[r].logprob;
    if (out.row_status) out.row_status[r] = results[r].status;
  }
  if (top > 0) {
    std::memcpy(out.top_token_ids, host + results_bytes, n * top * sizeof(int32_t));
    std::memcpy(out.top_logprobs, host + results_bytes + top_bytes, n * top * sizeof(float));
  }
}

void CudaSampler::probabilities(const pllm_sample_batch& batch, const pllm_probabilities_output& out) {
  SampleKernelArgs args{};
  const int64_t vocab = upload(batch, args);
  const std::string where = "host memory or cuda:" + std::to_string(device_);
  check_probabilities_output(batch, vocab, out, [&](const pllm_device& d) { return accepts(d); }, where.c_str());
  const auto n = std::size_t(batch.num_rows);
  if (n == 0) return;
  const pllm_tensor& p = *out.probs;
  const bool to_host = p.device.type == PLLM_DEVICE_CPU;
  if (to_host) {
    probs_.reserve(n * std::size_t(vocab) * sizeof(float), device_);
    args.probs = static_cast<float*>(probs_.data);
    args.probs_stride = vocab;
  } else {
    args.probs = static_cast<float*>(p.data);
    args.probs_stride = p.strides[0];
  }
  const std::size_t results_bytes = n * sizeof(DeviceResult);
  outputs_.reserve(results_bytes, device_);
  staged_outputs_.reserve(results_bytes, device_);
  top_keys_.reserve(sizeof(uint64_t), device_);
  args.results = static_cast<DeviceResult*>(outputs_.data);
  args.top_ids = nullptr;
  args.top_logprobs = nullptr;
  args.top_keys = static_cast<uint64_t*>(top_keys_.data);
  launch_sample_rows(args, batch.num_rows, stream_);
  if (to_host) {
    // A speculator whose rejection sampler runs on the host reads them there.
    const std::size_t row_bytes = std::size_t(vocab) * sizeof(float);
    if (p.strides[0] == vocab) {
      PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(p.data, probs_.data, n * row_bytes, cudaMemcpyDeviceToHost, stream_));
    } else {
      for (std::size_t r = 0; r < n; ++r) {
        PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(p.data) + int64_t(r) * p.strides[0],
                                            static_cast<const float*>(probs_.data) + int64_t(r) * vocab, row_bytes,
                                            cudaMemcpyDeviceToHost, stream_));
      }
    }
  }
  PAGEDLLM_CUDA_CHECK(
      cudaMemcpyAsync(staged_outputs_.data, outputs_.data, results_bytes, cudaMemcpyDeviceToHost, stream_));
  synchronize();
  const auto* results = static_cast<const DeviceResult*>(staged_outputs_.data);
  for (std::size_t r = 0; r < n; ++r) {
    if (results[r].status != PLLM_SAMPLE_OK) non_finite_row(out.row_status, int64_t(r));
    if (out.row_status) out.row_status[r] = results[r].status;
  }
}

}  // namespace pagedllm::sampler
