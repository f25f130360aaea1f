// Launching the K/V write kernel (cache_write_kernels.cuh).

#include "cache_write_kernels.cuh"
#include "dtype_traits.cuh"
#include "kernels.h"
#include "cuda_common/cuda_check.h"
#include "cuda_common/launch.cuh"

namespace pagedllm::attention_cuda {

using device::kWriteThreads;
using device::write_kv_kernel;

void launch_write_kv(const LayerCache& cache, const DeviceStep& step, const DeviceRows& key, const DeviceRows& value,
                     cudaStream_t stream) {
  if (step.num_tokens == 0) return;
  cuda::visit_storage_type(cache.dtype, "attention_cuda", [&](auto zero) {
    using T = decltype(zero);
    cuda::launch<write_kv_kernel<T>>(dim3(unsigned(step.num_tokens), 2), kWriteThreads, 0, stream, cache,
                                     step.slot_mapping, key, value);
  });
  PAGEDLLM_CUDA_CHECK_LAUNCH();
}

}  // namespace pagedllm::attention_cuda
