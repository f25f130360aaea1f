// Launching the paged attention kernels (paged_attention_kernels.cuh).

#include <string>

#include "dtype_traits.cuh"
#include "kernels.h"
#include "paged_attention_kernels.cuh"
#include "cuda_common/cuda_check.h"
#include "cuda_common/launch.cuh"

namespace pagedllm::attention_cuda {
namespace {

using device::combine_partitions_kernel;
using device::kThreads;
using device::paged_attention_kernel;

template <class T, int HeadDim>
void launch_typed(const AttentionLaunch& launch, cudaStream_t stream) {
  const int32_t qv_chunks = query_vector_chunks(launch);
  const dim3 grid(unsigned(launch.step.num_work), unsigned(launch.cache.num_kv_heads * qv_chunks));
  cuda::launch<paged_attention_kernel<T, HeadDim>>(grid, kThreads, 0, stream, launch, qv_chunks);
  PAGEDLLM_CUDA_CHECK_LAUNCH();
  if (launch.step.num_combine > 0) {
    const dim3 combine_grid(unsigned(launch.step.num_combine), unsigned(launch.num_heads));
    cuda::launch<combine_partitions_kernel<T>>(combine_grid, kThreads, 0, stream, launch, HeadDim);
    PAGEDLLM_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

int32_t query_vector_chunks(const AttentionLaunch& launch) {
  const int32_t group = launch.num_heads / launch.cache.num_kv_heads;
  const int64_t qv_chunks = (int64_t(launch.step.max_tile_rows) * group + kMaxQueryVectors - 1) / kMaxQueryVectors;
  if (launch.cache.num_kv_heads * qv_chunks > 65535) {  // grid.y's limit
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: " + std::to_string(launch.num_heads) +
                                                  " query heads over " + std::to_string(launch.cache.num_kv_heads) +
                                                  " kv heads need more CTAs per tile than one grid dimension holds");
  }
  if (launch.step.num_combine > 0 && launch.num_heads > 65535) {  // the combine kernel's grid.y
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: " + std::to_string(launch.num_heads) +
                                                  " query heads exceed the 65535 the split-K combine grid holds");
  }
  return int32_t(qv_chunks);
}

void launch_paged_attention(const AttentionLaunch& launch, cudaStream_t stream) {
  if (launch.step.num_work == 0) return;
  cuda::visit_storage_type(launch.cache.dtype, "attention_cuda", [&](auto zero) {
    using T = decltype(zero);
    switch (launch.cache.head_dim) {
      case 32: return launch_typed<T, 32>(launch, stream);
      case 64: return launch_typed<T, 64>(launch, stream);
      case 128: return launch_typed<T, 128>(launch, stream);
      default:
        throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: no kernel for head_dim " +
                                                      std::to_string(launch.cache.head_dim) + " (32, 64, 128)");
    }
  });
}

}  // namespace pagedllm::attention_cuda
