#include "llama_cpu/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama_cpu {
namespace {

constexpr Isa kAll[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16};

Isa detect() {
  __builtin_cpu_init();
  // libgcc's checks include the OS saving the AVX / AVX-512 registers (XGETBV).
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512vnni");
  if (vnni && __builtin_cpu_supports("avx512bf16")) return Isa::kAvx512Bf16;
  if (vnni) return Isa::kAvx512Vnni;
  if (avx512) return Isa::kAvx512;
  return avx2 ? Isa::kAvx2 : Isa::kScalar;
}

Isa cap_from_env() {
  const char* value = std::getenv("PAGEDLLM_CPU_ISA");
  if (!value || !*value) return kDefaultCap;
  if (const std::optional<Isa> isa = parse_isa(value)) return *isa;
  throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT, std::string("PAGEDLLM_CPU_ISA='") + value +
                                                     "' is not one of scalar, avx2, avx512, avx512vnni, avx512bf16");
}

// -1: not decided yet (read PAGEDLLM_CPU_ISA at the first use).
std::atomic<int> g_active{-1};

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Vnni: return "avx512vnni";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAll) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

Isa detected_isa() {
  static const Isa detected = detect();
  return detected;
}

Isa active_isa() {
  int active = g_active.load(std::memory_order_relaxed);
  if (active < 0) {
    active = static_cast<int>(std::min(detected_isa(), cap_from_env()));
    g_active.store(active, std::memory_order_relaxed);
  }
  return static_cast<Isa>(active);
}

void set_isa_cap(std::optional<Isa> cap) {
  g_active.store(static_cast<int>(std::min(detected_isa(), cap.value_or(kDefaultCap))),
                 std::memory_order_relaxed);
}

}  // namespace pagedllm::llama_cpu
