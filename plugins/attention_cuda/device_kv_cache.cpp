#include "device_kv_cache.h"

#include <limits>
#include <string>

#include "pagedllm/sdk/cpp/paged_batch_check.hpp"
#include "cuda_common/cuda_check.h"

namespace pagedllm::attention_cuda {
namespace {

const pllm::PagedInputCheck kCheck("attention_cuda");

// Bytes of a pool of `blocks` blocks, or an OUT_OF_MEMORY error when it overflows.
uint64_t pool_bytes(int64_t blocks, const CacheGeometry& g, const char* pool) {
  const uint64_t per_block = g.bytes_per_block();
  if (uint64_t(blocks) > std::numeric_limits<uint64_t>::max() / per_block) {
    throw pllm::Error(PLLM_ERROR_OUT_OF_MEMORY, std::string("attention_cuda: the ") + pool + " pool of " +
                                                    std::to_string(blocks) + " blocks overflows the address space");
  }
  return uint64_t(blocks) * per_block;
}

[[noreturn]] void out_of_memory(const char* pool, int64_t blocks, const CacheGeometry& g, uint64_t bytes,
                                cudaError_t status) {
  (void)cudaGetLastError();
  std::string detail;
  size_t free_bytes = 0, total_bytes = 0;
  if (pool == std::string("device") && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    detail = "; the device has " + std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " bytes free";
  }
  (void)cudaGetLastError();
  throw pllm::Error(PLLM_ERROR_OUT_OF_MEMORY,
                    std::string("attention_cuda: cannot allocate the ") + pool + " KV pool: " + std::to_string(blocks) +
                        " blocks x " + std::to_string(g.bytes_per_block()) + " bytes = " + std::to_string(bytes) +
                        " bytes requested (" + cudaGetErrorName(status) + ")" + detail);
}

}  // namespace

DeviceKvCache::DeviceKvCache(const CacheGeometry& geometry, int64_t num_device_blocks, int64_t num_host_blocks)
    : geometry_(geometry), num_device_blocks_(num_device_blocks), num_host_blocks_(num_host_blocks) {
  if (num_device_blocks < 0 || num_host_blocks < 0) {
    kCheck.invalid("allocate_cache: block counts must be non-negative, got " + std::to_string(num_device_blocks) +
                   " device and " + std::to_string(num_host_blocks) + " host blocks");
  }
  const uint64_t device_bytes = pool_bytes(num_device_blocks, geometry_, "device");
  const uint64_t host_bytes = pool_bytes(num_host_blocks, geometry_, "host swap");
  // Uninitialised on purpose: a block's contents are defined only after core writes it.
  if (device_bytes > 0) {
    void* pool = nullptr;
    const cudaError_t status = cudaMalloc(&pool, device_bytes);
    if (status == cudaErrorMemoryAllocation) out_of_memory("device", num_device_blocks, geometry_, device_bytes, status);
    PAGEDLLM_CUDA_CHECK(status);
    device_.reset(static_cast<std::byte*>(pool));
  }
  if (host_bytes > 0) {
    void* pool = nullptr;
    const cudaError_t status = cudaHostAlloc(&pool, host_bytes, cudaHostAllocDefault);
    if (status == cudaErrorMemoryAllocation) out_of_memory("host swap", num_host_blocks, geometry_, host_bytes, status);
    PAGEDLLM_CUDA_CHECK(status);
    host_.reset(static_cast<std::byte*>(pool));
  }
}

void DeviceKvCache::FreeDevice::operator()(std::byte* p) const noexcept { (void)cudaFree(p); }
void DeviceKvCache::FreeHost::operator()(std::byte* p) const noexcept { (void)cudaFreeHost(p); }

std::byte* DeviceKvCache::device_layer(int32_t layer, int kv) const {
  const int64_t layer_bytes = num_device_blocks_ * geometry_.block_bytes_per_layer();
  return device_.get() + (int64_t(layer) * 2 + kv) * layer_bytes;
}

// One cudaMemcpyAsync per (layer, K|V) and run of pairs whose source and
// destination blocks are both consecutive (a swap of a whole sequence is
// usually one run), so the copy engines see few, large transfers.
void DeviceKvCache::copy_between(std::byte* dst_pool, int64_t dst_blocks, const std::byte* src_pool,
                                 int64_t src_blocks, std::span<const pllm_block_copy> pairs, cudaMemcpyKind kind,
                                 cudaStream_t stream) const {
  const int64_t tile = geometry_.block_bytes_per_layer();
  for (std::size_t i = 0; i < pairs.size();) {
    std::size_t run = 1;
    // Within one pool a run must not overlap itself: pairs copy in order,
    // and one memcpy over overlapping ranges would not.
    auto extends = [&](std::size_t n) {
      const pllm_block_copy& first = pairs[i];
      if (pairs[i + n].src != first.src + int64_t(n) || pairs[i + n].dst != first.dst + int64_t(n)) return false;
      return dst_pool != src_pool || first.src + int64_t(n) < first.dst || first.dst + int64_t(n) < first.src;
    };
    while (i + run < pairs.size() && extends(run)) ++run;
    const bool same_block = dst_pool == src_pool && pairs[i].src == pairs[i].dst;
    if (!same_block) {
      for (int64_t part = 0; part < int64_t(geometry_.num_layers) * 2; ++part) {  // [layer][K|V]
        std::byte* dst = dst_pool + (part * dst_blocks + pairs[i].dst) * tile;
        const std::byte* src = src_pool + (part * src_blocks + pairs[i].src) * tile;
        PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(dst, src, std::size_t(run) * std::size_t(tile), kind, stream));
      }
    }
    i += run;
  }
}

void DeviceKvCache::copy_blocks(std::span<const pllm_block_copy> pairs, cudaStream_t stream) {
  kCheck.block_pairs("copy_blocks", pairs, num_device_blocks_, "device", num_device_blocks_, "device");
  copy_between(device_.get(), num_device_blocks_, device_.get(), num_device_blocks_, pairs, cudaMemcpyDeviceToDevice, stream);
}

void DeviceKvCache::swap_out(std::span<const pllm_block_copy> pairs, cudaStream_t stream) {
  kCheck.block_pairs("swap_out", pairs, num_device_blocks_, "device", num_host_blocks_, "host swap");
  copy_between(host_.get(), num_host_blocks_, device_.get(), num_device_blocks_, pairs, cudaMemcpyDeviceToHost, stream);
}

void DeviceKvCache::swap_in(std::span<const pllm_block_copy> pairs, cudaStream_t stream) {
  kCheck.block_pairs("swap_in", pairs, num_host_blocks_, "host swap", num_device_blocks_, "device");
  copy_between(device_.get(), num_device_blocks_, host_.get(), num_host_blocks_, pairs, cudaMemcpyHostToDevice, stream);
}

}  // namespace pagedllm::attention_cuda
