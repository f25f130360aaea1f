#include "kv_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <string>

#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/paged_batch_check.hpp"

namespace pagedllm::attention_cpu {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, message); }

const pllm::PagedInputCheck kCheck("attention_cpu");

Pool allocate(int64_t blocks, const CacheGeometry& g, const char* pool) {
  if (blocks == 0) return Pool(nullptr, PoolUnmap{});
  const uint64_t per_block = g.bytes_per_block();
  if (uint64_t(blocks) > std::numeric_limits<uint64_t>::max() / per_block) {
    throw pllm::Error(PLLM_ERROR_OUT_OF_MEMORY, std::string("attention_cpu: the ") + pool + " pool of " +
                                                    std::to_string(blocks) + " blocks overflows the address space");
  }
  const std::size_t bytes = std::size_t(uint64_t(blocks) * per_block);
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) {
    throw pllm::Error(PLLM_ERROR_OUT_OF_MEMORY, std::string("attention_cpu: cannot allocate the ") + pool + " pool: " +
                                                    std::to_string(blocks) + " blocks x " + std::to_string(per_block) +
                                                    " bytes: " + std::strerror(errno));
  }
  // Advice only: where THP is off (or the mapping too small) the pool keeps 4 KiB pages, with the same contents.
  (void)madvise(memory, bytes, MADV_HUGEPAGE);
  return Pool(static_cast<std::byte*>(memory), PoolUnmap{bytes});
}

}  // namespace

void PoolUnmap::operator()(std::byte* pool) const { munmap(pool, bytes); }

KvCache::KvCache(const CacheGeometry& geometry, int64_t num_device_blocks, int64_t num_host_blocks)
    : geometry_(geometry), num_device_blocks_(num_device_blocks), num_host_blocks_(num_host_blocks) {
  if (num_device_blocks < 0 || num_host_blocks < 0) {
    invalid("allocate_cache: block counts must be non-negative, got " + std::to_string(num_device_blocks) +
            " device and " + std::to_string(num_host_blocks) + " host blocks");
  }
  device_ = allocate(num_device_blocks, geometry_, "device");
  host_ = allocate(num_host_blocks, geometry_, "host swap");
}

std::byte* KvCache::device_layer(int32_t layer, int kv) const {
  const int64_t layer_bytes = num_device_blocks_ * geometry_.block_bytes_per_layer();
  return device_.get() + (int64_t(layer) * 2 + kv) * layer_bytes;
}

void KvCache::copy_between(const CacheGeometry& g, std::byte* dst_pool, int64_t dst_blocks, const std::byte* src_pool,
                           int64_t src_blocks, std::span<const pllm_block_copy> pairs) {
  const int64_t tile = g.block_bytes_per_layer();
  for (int64_t part = 0; part < int64_t(g.num_layers) * 2; ++part) {  // [layer][K|V]
    std::byte* dst = dst_pool + part * dst_blocks * tile;
    const std::byte* src = src_pool + part * src_blocks * tile;
    for (const auto& p : pairs) {
      if (dst_pool == src_pool && p.src == p.dst) continue;
      std::memcpy(dst + p.dst * tile, src + p.src * tile, static_cast<std::size_t>(tile));
    }
  }
}

void KvCache::copy_blocks(std::span<const pllm_block_copy> pairs) {
  kCheck.block_pairs("copy_blocks", pairs, num_device_blocks_, "device", num_device_blocks_, "device");
  copy_between(geometry_, device_.get(), num_device_blocks_, device_.get(), num_device_blocks_, pairs);
}

void KvCache::swap_out(std::span<const pllm_block_copy> pairs) {
  kCheck.block_pairs("swap_out", pairs, num_device_blocks_, "device", num_host_blocks_, "host swap");
  copy_between(geometry_, host_.get(), num_host_blocks_, device_.get(), num_device_blocks_, pairs);
}

void KvCache::swap_in(std::span<const pllm_block_copy> pairs) {
  kCheck.block_pairs("swap_in", pairs, num_host_blocks_, "host swap", num_device_blocks_, "device");
  copy_between(geometry_, device_.get(), num_device_blocks_, host_.get(), num_host_blocks_, pairs);
}

}  // namespace pagedllm::attention_cpu
