#pragma once
// f32 -> f16 / bf16 bit patterns: round to nearest, ties to even (what
// hardware converts do), NaN stays a (quiet) NaN, overflow goes to infinity,
// f16 subnormals are exact. attention_cpu stores with these; the tools and
// tests that hand 16-bit data to plugins round with them too. The other way,
// f16 / bf16 -> f32, is the SDK's (pagedllm/sdk/cpp/float_convert.hpp).

#include <bit>
#include <cmath>
#include <cstdint>

namespace pagedllm::plugins {

inline std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the 16 dropped bits
  return static_cast<std::uint16_t>(u >> 16);
}

inline std::uint16_t f32_to_f16(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  // 65520 = halfway between the largest f16 (65504) and 2^16: ties to even go up, to infinity.
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (a < 0x38800000u) {
    // Below the smallest normal f16 (2^-14): a subnormal in units of 2^-24.
    // The scaling is exact; nearbyint rounds ties to even in the default mode.
    const float units = std::bit_cast<float>(a) * 0x1p24f;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(units)));
  }
  const std::uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);  // carries into the exponent correctly
  return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
}

}  // namespace pagedllm::plugins
