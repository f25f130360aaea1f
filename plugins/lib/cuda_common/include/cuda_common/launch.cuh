#pragma once
// The one way the plugins launch a kernel:
//
//   cuda::launch<my_kernel<T>>(grid, block, shared_bytes, stream, args...);
//
// In a CUDA build it is exactly my_kernel<T><<<grid, block, shared_bytes,
// stream>>>(args...). In the emulated build (PAGEDLLM_CUDA_EMULATION, the
// .cu file compiled by the host compiler with cuda_emulation/cuda_emulation.h) it
// hands the kernel to the SIMT emulator, which checks the configuration and
// the stream ordering of the buffers the arguments point into, and runs
// every block before returning. Either way a bad launch is the thread's last
// error, which PAGEDLLM_CUDA_CHECK_LAUNCH() reports.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#ifdef PAGEDLLM_CUDA_EMULATION
#include <array>
#include <cstring>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <vector>

#include "cuda_emulation/simt.h"
#endif

namespace pagedllm::cuda {

#ifndef PAGEDLLM_CUDA_EMULATION

template <auto Kernel, class... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  Kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
}

// The block's dynamic shared memory (launch's shared_bytes), as T[].
template <class T>
__device__ __forceinline__ T* dynamic_shared() {
  extern __shared__ __align__(16) unsigned char pagedllm_dynamic_shared[];
  return reinterpret_cast<T*>(pagedllm_dynamic_shared);
}

#else

namespace emulation {

// A thread_local of this module (.tdata: initialised), by which the emulator
// finds the module's static shared memory on its device thread.
inline thread_local int module_tls_anchor = 1;
inline void* module_tls_anchor_address() { return &module_tls_anchor; }

template <class F>
struct KernelTraits;
template <class... P>
struct KernelTraits<void (*)(P...)> {
  using Params = std::tuple<std::decay_t<P>...>;
};

// "write_kv_kernel<float>" from this function's signature.
template <auto Kernel>
const char* kernel_name() {
  static const std::string name = [](std::string_view s) {
    const auto at = s.find("Kernel = ");
    if (at == std::string_view::npos) return std::string(s);
    s.remove_prefix(at + 9);
    s = s.substr(0, s.find_first_of(";]"));
    // Drop the namespaces: the name as the kernel's source spells it.
    std::size_t depth = 0, cut = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '<') ++depth;
      if (s[i] == '>') --depth;
      if (depth == 0 && s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') cut = i + 2;
    }
    return std::string(s.substr(cut));
  }(__PRETTY_FUNCTION__);
  return name.c_str();
}

template <class P>
void collect_accesses(const P& param, std::vector<Access>& out) {
  if constexpr (std::is_pointer_v<P>) {
    if (param) out.push_back({param, !std::is_const_v<std::remove_pointer_t<P>>});
  } else if constexpr (sizeof(P) >= sizeof(void*)) {
    // A struct: every pointer-sized word that points into a device buffer.
    static_assert(std::is_trivially_copyable_v<P>, "kernel parameters are copied bytes");
    std::array<unsigned char, sizeof(P)> bytes;
    std::memcpy(bytes.data(), &param, sizeof(P));
    for (std::size_t at = 0; at + sizeof(void*) <= sizeof(P); at += alignof(void*)) {
      const void* word;
      std::memcpy(&word, bytes.data() + at, sizeof word);
      if (word) out.push_back({word, true});
    }
  }
}

}  // namespace emulation

template <auto Kernel, class... Args>
void launch(dim3 grid, dim3 block, std::size_t shared_bytes, cudaStream_t stream, Args&&... args) {
  using Params = typename emulation::KernelTraits<decltype(Kernel)>::Params;
  // The arguments converted to the parameter types once, as a launch copies them.
  Params params(std::forward<Args>(args)...);
  std::vector<emulation::Access> accesses;
  std::apply([&](const auto&... p) { (emulation::collect_accesses(p, accesses), ...); }, params);
  emulation::KernelLaunch l;
  l.name = emulation::kernel_name<Kernel>();
  l.grid = grid;
  l.block = block;
  l.dynamic_shared_bytes = shared_bytes;
  l.stream = stream;
  l.context = &params;
  // Each thread gets its own copy of the parameters (they are its registers).
  l.run_thread = [](void* context) {
    Params copy = *static_cast<const Params*>(context);
    std::apply(Kernel, copy);
  };
  l.module_tls_anchor = &emulation::module_tls_anchor_address;
  l.accesses = accesses;
  (void)emulation::launch_kernel(l);
}

template <class T>
T* dynamic_shared() {
  return reinterpret_cast<T*>(emulation::coordinates.dynamic_shared);
}

#endif

}  // namespace pagedllm::cuda
