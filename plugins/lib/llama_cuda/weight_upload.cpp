#include "llama_cuda/weight_upload.h"

#include <algorithm>

#include "pagedllm/sdk.hpp"
#include "common/thread_pool.h"
#include "cuda_common/cuda_check.h"
#include "llama_cuda/llama_kernels.h"

namespace pagedllm::llama_cuda {

std::map<FusedMatrixKey, std::byte*> carve_fused_matrices(Carver& carver, const std::vector<llama::WeightSlot>& slots,
                                                          int64_t element_bytes) {
  // Elements of each fused matrix: the end of its last row range.
  std::map<FusedMatrixKey, int64_t> sizes;
  for (const llama::WeightSlot& s : slots) {
    int64_t& size = sizes[{s.layer, s.matrix}];
    size = std::max(size, (s.first_row + s.shape[0]) * s.width());
  }
  std::map<FusedMatrixKey, std::byte*> bases;
  for (const auto& [key, size] : sizes) bases[key] = carver.take(size, element_bytes);
  return bases;
}

std::byte* slot_address(const std::map<FusedMatrixKey, std::byte*>& bases, const llama::WeightSlot& slot,
                        int64_t element_bytes) {
  return bases.at({slot.layer, slot.matrix}) + slot.first_row * slot.width() * element_bytes;
}

namespace {

// Elements [first, first + count) of `upload`'s block, in its row-major order, to f32: runs of
// whole source rows when the block spans every column, else one run per row.
void block_to_f32(const TensorUpload& upload, int64_t first, int64_t count, float* dst) {
  const llama::SourceTensor& view = *upload.view;
  if (upload.rows <= 0) {
    view.to_f32(first, count, dst);
    return;
  }
  const int64_t width = view.shape.size() > 1 ? view.shape[1] : 1;
  while (count > 0) {
    const int64_t row = first / upload.cols, col = first % upload.cols;
    const int64_t run = std::min(count, upload.cols - col);
    view.to_f32((upload.first_row + row) * width + upload.first_col + col, run, dst);
    first += run;
    dst += run;
    count -= run;
  }
}

}  // namespace

void upload_tensors(const std::vector<TensorUpload>& uploads, pllm_dtype dtype, const CudaContext& context,
                    int num_threads, std::string_view who, uint64_t progress_total) {
  constexpr int64_t kChunk = int64_t(1) << 22, kSubChunk = int64_t(1) << 18;
  const int64_t element = pllm_dtype_size(dtype);
  const int device = context.device_index();
  cudaStream_t stream = context.stream();
  CudaMemory host_staging(CudaMemory::Kind::kPinnedHost);
  host_staging.allocate(kChunk * sizeof(float), device, who, "weight upload staging");
  CudaMemory device_staging(CudaMemory::Kind::kDevice);
  device_staging.allocate(kChunk * sizeof(float), device, who, "weight upload staging");
  auto* host = reinterpret_cast<float*>(host_staging.data());
  auto* staged = reinterpret_cast<float*>(device_staging.data());
  plugins::ThreadPool pool(num_threads);
  uint64_t done = 0;
  if (progress_total > 0) pllm::report_progress("loading weights", 0, progress_total);
  for (const TensorUpload& upload : uploads) {
    const llama::SourceTensor& view = *upload.view;
    const int64_t numel = upload.numel();
    for (int64_t first = 0; first < numel; first += kChunk) {
      const int64_t count = std::min(kChunk, numel - first);
      pool.parallel_for((count + kSubChunk - 1) / kSubChunk, [&](int64_t sub, int) {
        const int64_t begin = sub * kSubChunk;
        block_to_f32(upload, first + begin, std::min(kSubChunk, count - begin), host + begin);
      });
      PAGEDLLM_CUDA_CHECK(
          cudaMemcpyAsync(staged, host, std::size_t(count) * sizeof(float), cudaMemcpyHostToDevice, stream));
      convert_from_f32(staged, count, dtype, upload.destination + first * element, stream);
      PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    done += view.numel() > 0 ? view.nbytes / uint64_t(view.numel()) * uint64_t(numel) : 0;
    if (progress_total > 0) pllm::report_progress("loading weights", done, progress_total);
  }
}

}  // namespace pagedllm::llama_cuda
