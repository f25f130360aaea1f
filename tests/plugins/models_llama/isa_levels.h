#pragma once
// The instruction-set levels of llama_cpu's kernels (cpu_isa.h) as the kernel tests force them:
// every level this CPU has, in turn, the cap lifted again when the test case ends.

#include <optional>
#include <vector>

#include "llama_cpu/cpu_isa.h"

namespace pagedllm::llama_cpu::testing {

// The levels this CPU has, lowest first.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Vnni, Isa::kAvx512Bf16}) {
    if (isa <= detected_isa()) isas.push_back(isa);
  }
  return isas;
}

// Restores the default cap at the end of a test case, whatever happens.
struct IsaCapGuard {
  IsaCapGuard() = default;
  IsaCapGuard(const IsaCapGuard&) = delete;
  IsaCapGuard& operator=(const IsaCapGuard&) = delete;
  ~IsaCapGuard() { set_isa_cap(std::nullopt); }
};

}  // namespace pagedllm::llama_cpu::testing
