#pragma once
// The x86 instruction sets linear() has kernels for, picked at run time from
// the CPU's features (the binary is built for baseline x86-64 and runs on any
// x86-64 CPU), optionally capped for tests and benchmarks:
//
//   scalar      baseline x86-64 (SSE2); f16 widened one element at a time
//   avx2        AVX2 + FMA + F16C (vcvtph2ps)
//   avx512      AVX-512 F/BW/VL/DQ + FMA + F16C
//   avx512vnni  avx512 + AVX512-VNNI: int8 weights with int8 activations
//               (quantization: int8_w8a8) through vpdpbusd
//   avx512bf16  avx512vnni + AVX512-BF16: products of bf16 weights (at any
//               row count) through vdpbf16ps, the activations rounded to
//               bf16, unless the weights ask for the exact path
//               (Bf16Compute, weights.h; every CPU with AVX512-BF16 also has
//               VNNI)
//
// PAGEDLLM_CPU_ISA=<name> (read once, at the first use) caps the level: the
// kernels used are those of min(cap, what the CPU has). An unknown name is an
// error naming the variable and the choices. Without it there is no cap
// (kDefaultCap is the highest level). avx512vnni is the exact path at AVX-512
// width: bf16 weights widened to f32, f32 activations, at any row count
// (vdpbf16ps runs at about twice its speed past one row: docs/benchmarks.md);
// models ask for it by option instead (cpu_bf16_compute: exact).

#include <optional>
#include <string_view>

namespace pagedllm::llama_cpu {

enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Bf16 = 4 };
inline constexpr Isa kDefaultCap = Isa::kAvx512Bf16;

const char* isa_name(Isa isa);
// The name's level, or nullopt for an unknown name.
std::optional<Isa> parse_isa(std::string_view name);

// The best level this CPU (and OS) supports.
Isa detected_isa();

// The level linear() uses: min(detected_isa(), the cap). The cap is
// PAGEDLLM_CPU_ISA (default kDefaultCap) unless set_isa_cap() was called.
Isa active_isa();

// Caps the level for this process (tests: every path the CPU has); nullopt
// restores kDefaultCap (PAGEDLLM_CPU_ISA is not read again). Not thread-safe against
// a running linear().
void set_isa_cap(std::optional<Isa> cap);

}  // namespace pagedllm::llama_cpu
