#pragma once
// The Llama forward on one CUDA device, behind models_llama's SDK glue: the
// weights resident on the device in the compute dtype (F32, F16 or BF16) in
// the fused layout of llama_common/weight_layout.h, cuBLAS GEMMs with
// f32 accumulation, the kernels of llama_kernels.h, and attention through the
// backend core passes, on the model's own stream. See
// plugins/models_llama/README.md ("The CUDA path").

#include <filesystem>
#include <memory>

#include "pagedllm/sdk.h"
#include "llama_common/llama_forward.h"

namespace pagedllm::llama_cuda {

// Refuses (PLLM_ERROR_UNSUPPORTED) a model dtype other than F32/F16/BF16 or PLLM_DTYPE_INVALID (auto).
void check_cuda_dtype(pllm_dtype dtype);

// Loads `model_dir` onto CUDA device `device_index` in `dtype`
// (PLLM_DTYPE_INVALID: as the checkpoint stores the embedding), converting on
// the host with `num_threads` threads. Throws pllm::Error:
// PLLM_ERROR_UNSUPPORTED for a dtype other than F32/F16/BF16,
// PLLM_ERROR_DEVICE when the device cannot be used (no driver, no such
// ordinal), PLLM_ERROR_OUT_OF_MEMORY when the weights do not fit, and the
// config / checkpoint errors of plugins/lib/llama_common.
// With `collectives` of more than one rank (buffers on this device), loads the
// rank's shard (llama_common/tensor_parallel_split.h) and meets the other ranks
// through it in every forward (docs/tensor-parallel.md).
std::unique_ptr<llama::LlamaForward> load_cuda_llama(const std::filesystem::path& model_dir, int device_index,
                                                     pllm_dtype dtype, int num_threads,
                                                     const pllm_collectives_ref* collectives = nullptr);

}  // namespace pagedllm::llama_cuda
