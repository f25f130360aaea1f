// The f16/bf16 helpers attention_cpu converts with: exhaustive round trips and
// round-to-nearest-even against an independent nearest-value search.

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>

#include "dtype_convert.h"

using namespace pagedllm::attention_cpu;

namespace {

// The representable neighbours of x are decode(r) and decode(r +- 1); r is
// right when no neighbour is strictly closer, and on a tie r is even.
template <class Encode, class Decode>
void check_nearest_even(float x, Encode encode, Decode decode) {
  const uint16_t r = encode(x);
  const double got = decode(r);
  if (std::isinf(got)) {  // overflow: x must lie beyond the largest finite value
    REQUIRE(std::abs(double(x)) > std::abs(double(decode(static_cast<uint16_t>(r - 1)))));
    return;
  }
  const double err = std::abs(got - double(x));
  for (int step : {-1, 1}) {
    const auto other = static_cast<uint16_t>(r + step);
    const double o = decode(other);
    if (std::isnan(o) || ((other ^ r) & 0x8000)) continue;  // across sign or into NaN
    const double other_err = std::abs(o - double(x));
    INFO("x = " << x << " encoded " << r << " (" << got << "), neighbour " << o);
    REQUIRE(err <= other_err);
    if (err == other_err) REQUIRE((r & 1) == 0);
  }
}

}  // namespace

TEST_CASE("f16 and bf16 round trip every finite value exactly", "[attention_cpu][dtype]") {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = f16_to_f32(h);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(f16_to_f32(f32_to_f16(f))));
    } else {
      REQUIRE(f32_to_f16(f) == h);
    }
    const float b = bf16_to_f32(h);
    if (std::isnan(b)) {
      REQUIRE(std::isnan(bf16_to_f32(f32_to_bf16(b))));
    } else {
      REQUIRE(f32_to_bf16(b) == h);
    }
  }
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x0001) == 0x1p-24f);   // smallest subnormal
  CHECK(f16_to_f32(0x7bff) == 65504.0f);   // largest finite
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
}

TEST_CASE("f32 to f16 / bf16 rounds to nearest, ties to even", "[attention_cpu][dtype]") {
  CHECK(f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);             // tie -> even (1.0)
  CHECK(f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);         // tie -> even (1 + 2^-6)
  CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);             // tie -> even
  CHECK(f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);                    // below the halfway point to 2^16
  CHECK(f32_to_f16(65520.0f) == 0x7c00);                    // the tie rounds to even: infinity
  CHECK(f32_to_f16(0x1p-25f) == 0x0000);                    // half the smallest subnormal: tie -> 0
  CHECK(f32_to_f16(0x1p-25f * 3) == 0x0002);                // 1.5 units -> 2
  CHECK(f32_to_f16(-INFINITY) == 0xfc00);
  CHECK(f32_to_bf16(INFINITY) == 0x7f80);
  CHECK(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));

  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = any(rng);
    // Keep f16 inputs within its range (plus the overflow boundary region).
    const float x = std::bit_cast<float>(bits);
    if (std::isnan(x) || std::isinf(x)) continue;
    check_nearest_even(x, f32_to_bf16, bf16_to_f32);
    const float small = std::ldexp(std::bit_cast<float>((bits & 0x807fffffu) | 0x3f800000u), int(bits % 42) - 26);
    if (std::abs(small) < 65504.0f) check_nearest_even(small, f32_to_f16, f16_to_f32);
  }
}
