#pragma once
// Checkpoint tensors onto the device in the compute dtype, for every CUDA
// Llama forward (models_llama's model, spec_eagle's draft head): the fused
// matrices of llama_common/weight_layout.h laid out in one
// allocation, and the upload itself.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string_view>
#include <utility>
#include <vector>

#include "pagedllm/sdk.h"
#include "llama_common/weight_layout.h"
#include "llama_cuda/cuda_context.h"
#include "llama_cuda/device_memory.h"

namespace pagedllm::llama_cuda {

// A fused matrix: (decoder layer or -1, matrix).
using FusedMatrixKey = std::pair<int32_t, llama::Matrix>;

// Takes from `carver` one range per fused matrix of `slots` (each as long as
// the end of its last row range, `element_bytes` per element) and says where
// each starts (null pointers while the carver only sizes).
std::map<FusedMatrixKey, std::byte*> carve_fused_matrices(Carver& carver, const std::vector<llama::WeightSlot>& slots,
                                                          int64_t element_bytes);

// Where slot `slot` of a fused layout goes: its matrix's base plus its first row.
std::byte* slot_address(const std::map<FusedMatrixKey, std::byte*>& bases, const llama::WeightSlot& slot,
                        int64_t element_bytes);

// A checkpoint tensor, or a block of it (a tensor-parallel rank's: rows [first_row, first_row +
// rows) and of those, columns [first_col, first_col + cols)), and where it goes on the device
// (the block's rows one after the other). rows 0: the whole tensor.
struct TensorUpload {
  const llama::SourceTensor* view;
  std::byte* destination;
  int64_t first_row = 0, first_col = 0, rows = 0, cols = 0;

  int64_t numel() const { return rows > 0 ? rows * cols : view->numel(); }
};

// Each tensor goes to f32 on the host (in parallel over `num_threads`), over
// in chunks through pinned memory, and to `dtype` at its destination. Load
// time only, so each chunk simply waits for the previous one. With
// `progress_total` > 0, reports "loading weights" progress over that many
// stored bytes (each block counting its share of its tensor's). Errors are prefixed with `who`.
void upload_tensors(const std::vector<TensorUpload>& uploads, pllm_dtype dtype, const CudaContext& context,
                    int num_threads, std::string_view who, uint64_t progress_total);

}  // namespace pagedllm::llama_cuda
