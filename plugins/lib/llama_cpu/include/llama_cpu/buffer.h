#pragma once
// Host f32 memory of the CPU forward passes: grow-only scratch buffers and
// pllm_tensor views of host arrays.

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "pagedllm/sdk.h"
#include "llama_common/tensor_view.h"

// Under AddressSanitizer (gcc's or clang's spelling) a Buffer is exactly what was reserved, on the heap.
#if defined(__SANITIZE_ADDRESS__)
#define PAGEDLLM_LLAMA_CPU_EXACT_BUFFERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGEDLLM_LLAMA_CPU_EXACT_BUFFERS 1
#endif
#endif

namespace pagedllm::llama_cpu {

// How a Buffer's memory goes back: an operator new[] block, or a mapping.
struct BufferRelease {
  std::size_t mapped_bytes = 0;  // 0: from operator new[]
  void* mapping = nullptr;
  void operator()(void* p) const {
    if (mapped_bytes) {
      munmap(mapping, mapped_bytes);
    } else {
      ::operator delete[](p, std::align_val_t(64));
    }
  }
};

// A 64-byte aligned buffer (of f32, or of reserve_of's type) that only grows: forward scratch is reused
// across steps, so a steady-state step allocates nothing.
//
// From kHugePageBytes up, the memory is an anonymous mapping aligned to and
// advised for 2 MiB pages (MADV_HUGEPAGE; THP is "madvise" on Debian 12): the
// scratch of a prefill is tens of MiB, and its first touch on 4 KiB pages cost
// the first request after a start about 19,000 page faults (about 40 ms of CPU
// in a 429-token prefill of the 1B-shape model; 1,400 in huge pages:
// docs/benchmarks.md). Where THP is off the advice does nothing and the pages
// are 4 KiB, with the same contents.
//
// Under AddressSanitizer (kExact) a buffer is instead exactly the size
// reserved, from operator new[]: ASan's redzone then starts right past it, and
// a kernel that reads or writes past its scratch fails the sanitizer tests.
class Buffer {
 public:
  static constexpr std::size_t kHugePageBytes = std::size_t(2) << 20;
#ifdef PAGEDLLM_LLAMA_CPU_EXACT_BUFFERS
  static constexpr bool kExact = true;
#else
  static constexpr bool kExact = false;
#endif

  float* reserve(std::size_t count) { return reserve_of<float>(count); }
  float* data() const { return static_cast<float*>(memory_.get()); }

  // The same memory for `count` elements of another trivial type (bf16 or int8 activations).
  template <class T>
  T* reserve_of(std::size_t count) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= 64);
    const std::size_t needed = count * sizeof(T);
    if (needed > capacity_bytes_) {
      // Half again as much: a prompt a token longer than any before must not touch every page anew.
      const std::size_t bytes = kExact ? needed : std::max(needed, capacity_bytes_ + capacity_bytes_ / 2);
      memory_.reset();
      memory_ = allocate(bytes);
      capacity_bytes_ = memory_.get_deleter().mapped_bytes ? round_to_huge_pages(bytes) : bytes;
    }
    return static_cast<T*>(memory_.get());
  }

 private:
  using Memory = std::unique_ptr<void, BufferRelease>;

  static std::size_t round_to_huge_pages(std::size_t bytes) {
    return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  }

  static Memory allocate(std::size_t bytes) {
    if (kExact || bytes < kHugePageBytes) return Memory(::operator new[](bytes, std::align_val_t(64)), BufferRelease{});
    // One huge page more than needed, to start at a 2 MiB boundary within it.
    const std::size_t rounded = round_to_huge_pages(bytes);
    const std::size_t mapped = rounded + kHugePageBytes;
    void* mapping = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapping == MAP_FAILED) throw std::bad_alloc();
    const std::uintptr_t start = (reinterpret_cast<std::uintptr_t>(mapping) + kHugePageBytes - 1) & ~(kHugePageBytes - 1);
    (void)madvise(reinterpret_cast<void*>(start), rounded, MADV_HUGEPAGE);
    return Memory(reinterpret_cast<void*>(start), BufferRelease{mapped, mapping});
  }

  Memory memory_;
  std::size_t capacity_bytes_ = 0;
};

// A row-major f32 CPU tensor of `shape` over `data`.
inline pllm_tensor host_tensor(float* data, const std::vector<int64_t>& shape) {
  return llama::tensor_view(data, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, shape);
}

// A [tokens, heads, head_dim] f32 CPU view into rows `row_stride` floats apart.
inline pllm_tensor heads_view(float* data, int64_t tokens, int64_t heads, int64_t head_dim, int64_t row_stride) {
  return llama::heads_view(data, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, tokens, heads, head_dim, row_stride);
}

}  // namespace pagedllm::llama_cpu
