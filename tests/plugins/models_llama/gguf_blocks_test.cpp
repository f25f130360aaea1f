// linear() on GGUF blocks held as stored (llama_cpu/weights.h BlockType)
// against an oracle of this file's own: the blocks decoded per the GGUF spec
// (ggml's block layouts, written out again here in float64, not through the
// SDK's or the kernels' code), the activations quantized the way weights.h
// and linear.cpp state (llama.cpp's Q8_0 / Q8_1 / Q8_K: redone here), and the
// products summed in float64 block by block in the form llama.cpp computes
// them (d_w * d_a * integer sum, plus Q4_1's and Q5_1's m_w * s_a and the
// Q2_K / Q4_K / Q5_K mins' dmin * d_a * sum of min * block sums). On every instruction-set level the
// CPU has, m = 1, 3, 16, 17, 33, widths of 32-element blocks that are not a
// multiple of 256 (the widths llama.cpp's files fall back to Q8_0 / Q4_0 /
// Q4_1 / Q5_0 / Q5_1 / IQ4_NL for). Past kDotRowsMaxRows rows linear() multiplies f32 activations by
// the weights dequantized to f32 (SGEMM): the oracle there is the float64 sum
// of a_i * w_i with w_i decoded here in float64.
//
// Tolerance (up to kDotRowsMaxRows rows): the kernels differ from the float64 oracle only in f32
// rounding: per block one rounding of d_w * d_a, one of the integer sum's
// conversion (exact below 2^24; a K-quant super-block's can be larger), one of
// the product, and the addition to a running f32 sum that takes at most
// `blocks` additions (fewer on the SIMD levels: eight lanes, then a tree),
// plus the accumulate addition. So |got - ref| <= (blocks + 4) * 2^-23 *
// (sum of the products' magnitudes + |before|): each rounding moves its
// value by at most 2^-24 of it, and no partial sum (a lane's part of a block
// included) exceeds the sum of magnitudes. The K-quants' mins are summed here
// element by element (min * q_a), which is the kernels' min * block sums.
// Past kDotRowsMaxRows rows: ggml's f32 dequantization rounds each weight at
// most twice (d * q, then + m or - dmin * m, each term moved by 2^-24 of its
// magnitude), and the SGEMM's sums take at most k additions (the f32 bound of
// cpu_kernels_test.cpp), so |got - ref| <= (k + 4) * 2^-23 * (sum_i |a_i| *
// (|d q_i| + |min term_i|) + |before|).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "common/float16_rounding.h"
#include "pagedllm/sdk/cpp/float_convert.hpp"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"
#include "tests/plugins/models_llama/activation_blocks.h"
#include "tests/plugins/models_llama/isa_levels.h"

using pagedllm::llama_cpu::BlockType;
using pagedllm::llama_cpu::Isa;
using pagedllm::llama_cpu::kDotRowsMaxRows;
using pagedllm::llama_cpu::linear;
using pagedllm::llama_cpu::WeightsRef;
using pagedllm::llama_cpu::testing::ActBlock;
using pagedllm::llama_cpu::testing::available_isas;
using pagedllm::llama_cpu::testing::IsaCapGuard;
using pagedllm::llama_cpu::testing::quantize256;
using pagedllm::llama_cpu::testing::quantize32;
using pagedllm::plugins::ThreadPool;

namespace {

struct Layout {
  BlockType type;
  const char* name;
  int elems;
  int bytes;
};
constexpr Layout kLayouts[] = {
    {BlockType::kQ8_0, "Q8_0", 32, 34}, {BlockType::kQ4_0, "Q4_0", 32, 18}, {BlockType::kQ4_1, "Q4_1", 32, 20},
    {BlockType::kQ5_0, "Q5_0", 32, 22}, {BlockType::kQ5_1, "Q5_1", 32, 24}, {BlockType::kIQ4_NL, "IQ4_NL", 32, 18},
    {BlockType::kQ2_K, "Q2_K", 256, 84}, {BlockType::kQ3_K, "Q3_K", 256, 110},
    {BlockType::kQ4_K, "Q4_K", 256, 144}, {BlockType::kQ5_K, "Q5_K", 256, 176}, {BlockType::kQ6_K, "Q6_K", 256, 210},
    {BlockType::kIQ4_XS, "IQ4_XS", 256, 136},
};

// IQ4_NL's and IQ4_XS's levels (ggml-common.h kvalues_iq4nl).
constexpr int kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

double f16_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return double(pllm::f16_to_f32(bits));
}

void put_f16(uint8_t* p, float x) {
  const uint16_t bits = pagedllm::plugins::f32_to_f16(x);
  std::memcpy(p, &bits, 2);
}

// Random blocks: random quant bytes, f16 scales (and mins) of a plausible size.
std::vector<uint8_t> random_blocks(const Layout& layout, int64_t blocks, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  std::vector<uint8_t> data(std::size_t(blocks * layout.bytes));
  for (uint8_t& b : data) b = uint8_t(byte(rng));
  for (int64_t i = 0; i < blocks; ++i) {
    uint8_t* b = data.data() + i * layout.bytes;
    switch (layout.type) {
      case BlockType::kQ8_0: case BlockType::kQ4_0: case BlockType::kQ5_0: case BlockType::kIQ4_NL:
      case BlockType::kIQ4_XS:
        put_f16(b, scale(rng));
        break;
      case BlockType::kQ2_K:
        put_f16(b + 80, scale(rng));
        put_f16(b + 82, scale(rng));
        break;
      case BlockType::kQ3_K: put_f16(b + 108, scale(rng)); break;
      case BlockType::kQ4_1: case BlockType::kQ5_1: case BlockType::kQ4_K: case BlockType::kQ5_K:
        put_f16(b, scale(rng));
        put_f16(b + 2, layout.type == BlockType::kQ4_1   ? -8 * scale(rng)
                       : layout.type == BlockType::kQ5_1 ? -16 * scale(rng)
                                                         : scale(rng));
        break;
      case BlockType::kQ6_K: put_f16(b + 208, scale(rng)); break;
      case BlockType::kNone: break;
    }
  }
  return data;
}

// Q4_K / Q5_K's 6-bit scale and min of sub-block j from the 12 packed bytes.
void k_scale_min(const uint8_t* p, int j, int& scale, int& min) {
  if (j < 4) {
    scale = p[j] & 63;
    min = p[j + 4] & 63;
  } else {
    scale = (p[j + 4] & 15) | ((p[j - 4] >> 6) << 4);
    min = (p[j + 4] >> 4) | ((p[j] >> 6) << 4);
  }
}

// Element e of a Q2_K or Q3_K (three_bits) block, and its scale: 2 bits at bits 2 s of qs[32 h + l] for
// e = 128 h + 32 s + l; Q3_K's third bit at bit e / 32 of hmask[l], 4 subtracted where it is clear; a scale
// per 16 (Q2_K: low nibble of scales[e / 16], min in the high one; Q3_K: 6 bits, low 4 in the nibbles of
// bytes 0-7 of its 12, high 2 in bytes 8-11, minus 32).
int q23_element(const uint8_t* b, bool three_bits, int e) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  const int q = (b[(three_bits ? 32 : 16) + 32 * h + l] >> (2 * s)) & 3;
  return three_bits && !((b[l] >> (e / 32)) & 1) ? q - 4 : q;
}
int q3_k_scale(const uint8_t* b, int group) {
  const uint8_t* packed = b + 96;
  const int low = group < 8 ? packed[group] & 15 : packed[group - 8] >> 4;
  const int high = (packed[8 + group % 4] >> (2 * (group / 4))) & 3;
  return low + 16 * high - 32;
}

// IQ4_XS's scale of sub-block j (of 32): 4 bits from the nibbles of bytes 4-7, 2 from the u16 at byte 2,
// minus 32; its elements are IQ4_NL's nibble order over bytes 8 + 16 j.
int iq4_xs_scale(const uint8_t* b, int j) {
  const int low = j % 2 == 0 ? b[4 + j / 2] & 15 : b[4 + j / 2] >> 4;
  const int high = ((b[2] | b[3] << 8) >> (2 * j)) & 3;
  return low + 16 * high - 32;
}
int iq4_level(const uint8_t* qs, int i) { return kIq4Levels[i < 16 ? qs[i] & 15 : qs[i - 16] >> 4]; }

// Element i (unsigned, 0..31) of a Q5_0 or Q5_1 (with_min) block: nibble i of qs (bytes' low nibbles for
// elements 0-15, high for 16-31), bit 4 from bit i of the little-endian u32 qh.
int q5_element(const uint8_t* b, bool with_min, int i) {
  const uint8_t* qh = b + (with_min ? 4 : 2);
  const uint8_t* qs = qh + 4;
  const int nibble = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
  return nibble + 16 * ((qh[i / 8] >> (i % 8)) & 1);
}

// One output's sum of block terms in float64, and the sum of the magnitudes
// of its products (element by element: the SIMD kernels hold parts of a block
// in separate lanes, whose partial sums may be larger than the block's term).
struct Term {
  double value = 0, magnitude = 0;
  // factor * sum, with abs_sum the sum of the integer products' magnitudes.
  void add(double factor, long sum, long abs_sum) {
    value += factor * double(sum);
    magnitude += std::abs(factor) * double(abs_sum);
  }
};

void block_term(const Layout& layout, const uint8_t* b, const ActBlock& a, Term& t) {
  switch (layout.type) {
    case BlockType::kQ8_0: {
      long sum = 0, abs_sum = 0;
      for (int i = 0; i < 32; ++i) {
        sum += int8_t(b[2 + i]) * a.q[std::size_t(i)];
        abs_sum += std::abs(int8_t(b[2 + i]) * a.q[std::size_t(i)]);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      return;
    }
    case BlockType::kQ4_0:
    case BlockType::kQ4_1: {
      const int offset = layout.type == BlockType::kQ4_0 ? 8 : 0;
      const uint8_t* qs = b + (layout.type == BlockType::kQ4_0 ? 2 : 4);
      long sum = 0, abs_sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = (i < 16 ? qs[i] & 15 : qs[i - 16] >> 4) - offset;
        sum += q * a.q[std::size_t(i)];
        abs_sum += std::abs(q * a.q[std::size_t(i)]);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      if (layout.type == BlockType::kQ4_1) t.add(f16_at(b + 2) * a.s, 1, 1);
      return;
    }
    case BlockType::kQ5_0:
    case BlockType::kQ5_1: {
      const bool with_min = layout.type == BlockType::kQ5_1;
      long sum = 0, abs_sum = 0;
      for (int i = 0; i < 32; ++i) {
        const int q = q5_element(b, with_min, i) - (with_min ? 0 : 16);
        sum += q * a.q[std::size_t(i)];
        abs_sum += std::abs(q * a.q[std::size_t(i)]);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      if (with_min) t.add(f16_at(b + 2) * a.s, 1, 1);
      return;
    }
    case BlockType::kIQ4_NL: {
      long sum = 0, abs_sum = 0;
      for (int i = 0; i < 32; ++i) {
        sum += iq4_level(b + 2, i) * a.q[std::size_t(i)];
        abs_sum += std::abs(iq4_level(b + 2, i) * a.q[std::size_t(i)]);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      return;
    }
    case BlockType::kIQ4_XS: {
      long sum = 0, abs_sum = 0;
      for (int e = 0; e < 256; ++e) {
        const int product = iq4_xs_scale(b, e / 32) * iq4_level(b + 8 + 16 * (e / 32), e % 32) * a.q[std::size_t(e)];
        sum += product;
        abs_sum += std::abs(product);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      return;
    }
    case BlockType::kQ2_K: {
      long sum = 0, abs_sum = 0, mins = 0, abs_mins = 0;
      for (int e = 0; e < 256; ++e) {
        const int scale = b[e / 16] & 15, min = b[e / 16] >> 4, q = q23_element(b, false, e);
        sum += scale * q * a.q[std::size_t(e)];
        abs_sum += std::abs(scale * q * a.q[std::size_t(e)]);
        mins += min * a.q[std::size_t(e)];
        abs_mins += std::abs(min * a.q[std::size_t(e)]);
      }
      t.add(f16_at(b + 80) * a.d, sum, abs_sum);
      t.add(-f16_at(b + 82) * a.d, mins, abs_mins);
      return;
    }
    case BlockType::kQ3_K: {
      // The kernels sum the values + 4 and take 4 * scale * (the activations' sums) off after: the
      // magnitudes of both parts bound what their f32 lanes hold.
      long sum = 0, abs_sum = 0;
      for (int e = 0; e < 256; ++e) {
        const int scale = q3_k_scale(b, e / 16), q = q23_element(b, true, e);
        sum += scale * q * a.q[std::size_t(e)];
        abs_sum += std::abs(scale * (q + 4) * a.q[std::size_t(e)]) + std::abs(4 * scale * a.q[std::size_t(e)]);
      }
      t.add(f16_at(b + 108) * a.d, sum, abs_sum);
      return;
    }
    case BlockType::kQ4_K:
    case BlockType::kQ5_K: {
      const bool five = layout.type == BlockType::kQ5_K;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (five ? 48 : 16);
      long sum = 0, abs_sum = 0, mins = 0, abs_mins = 0;
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;  // sub-block j: the low (even j) or high nibbles of bytes 32 (j / 2) + l
        int scale, min;
        k_scale_min(b + 4, j, scale, min);
        int q = j % 2 == 0 ? qs[32 * (j / 2) + l] & 15 : qs[32 * (j / 2) + l] >> 4;
        if (five && (qh[l] >> j) & 1) q += 16;
        sum += scale * q * a.q[std::size_t(e)];
        abs_sum += std::abs(scale * q * a.q[std::size_t(e)]);
        mins += min * a.q[std::size_t(e)];
        abs_mins += std::abs(min * a.q[std::size_t(e)]);
      }
      t.add(f16_at(b) * a.d, sum, abs_sum);
      t.add(-f16_at(b + 2) * a.d, mins, abs_mins);
      return;
    }
    case BlockType::kQ6_K: {
      long sum = 0, abs_sum = 0;
      for (int e = 0; e < 256; ++e) {
        // Halves of 128; in each, four runs of 32 (quarter): low nibbles of ql[0..32), ql[32..64), then
        // their high nibbles, with 2 high bits from qh[l] at bits 2 * quarter.
        const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = b[64 * half + 32 * (quarter % 2) + l];
        const int low = quarter < 2 ? low_byte & 15 : low_byte >> 4;
        const int high = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
        const int product = int8_t(b[192 + e / 16]) * (low + 16 * high - 32) * a.q[std::size_t(e)];
        sum += product;
        abs_sum += std::abs(product);
      }
      t.add(f16_at(b + 208) * a.d, sum, abs_sum);
      return;
    }
    case BlockType::kNone: return;
  }
}

// The block's elements in float64 per the GGUF spec, and each one's magnitude
// bound (|d q| + |min term|).
void decode_block(const Layout& layout, const uint8_t* b, double* value, double* magnitude) {
  switch (layout.type) {
    case BlockType::kQ8_0:
      for (int i = 0; i < 32; ++i) value[i] = f16_at(b) * int8_t(b[2 + i]);
      break;
    case BlockType::kQ4_0:
    case BlockType::kQ4_1: {
      const bool with_min = layout.type == BlockType::kQ4_1;
      const uint8_t* qs = b + (with_min ? 4 : 2);
      for (int i = 0; i < 32; ++i) {
        const int q = i < 16 ? qs[i] & 15 : qs[i - 16] >> 4;
        value[i] = with_min ? f16_at(b) * q + f16_at(b + 2) : f16_at(b) * (q - 8);
        magnitude[i] = std::abs(f16_at(b) * (with_min ? q : q - 8)) + (with_min ? std::abs(f16_at(b + 2)) : 0.0);
      }
      return;
    }
    case BlockType::kQ5_0:
    case BlockType::kQ5_1: {
      const bool with_min = layout.type == BlockType::kQ5_1;
      for (int i = 0; i < 32; ++i) {
        const int q = q5_element(b, with_min, i) - (with_min ? 0 : 16);
        value[i] = f16_at(b) * q + (with_min ? f16_at(b + 2) : 0.0);
        magnitude[i] = std::abs(f16_at(b) * q) + (with_min ? std::abs(f16_at(b + 2)) : 0.0);
      }
      return;
    }
    case BlockType::kIQ4_NL:
      for (int i = 0; i < 32; ++i) value[i] = f16_at(b) * iq4_level(b + 2, i);
      break;
    case BlockType::kIQ4_XS:
      for (int e = 0; e < 256; ++e) {
        value[e] = f16_at(b) * iq4_xs_scale(b, e / 32) * iq4_level(b + 8 + 16 * (e / 32), e % 32);
      }
      break;
    case BlockType::kQ2_K:
      for (int e = 0; e < 256; ++e) {
        const double scaled = f16_at(b + 80) * (b[e / 16] & 15) * q23_element(b, false, e);
        const double min = f16_at(b + 82) * (b[e / 16] >> 4);
        value[e] = scaled - min;
        magnitude[e] = std::abs(scaled) + std::abs(min);
      }
      return;
    case BlockType::kQ3_K:
      for (int e = 0; e < 256; ++e) value[e] = f16_at(b + 108) * q3_k_scale(b, e / 16) * q23_element(b, true, e);
      break;
    case BlockType::kQ4_K:
    case BlockType::kQ5_K: {
      const bool five = layout.type == BlockType::kQ5_K;
      const uint8_t* qs = b + (five ? 48 : 16);
      for (int e = 0; e < 256; ++e) {
        const int j = e / 32, l = e % 32;
        int scale, min;
        k_scale_min(b + 4, j, scale, min);
        int q = j % 2 == 0 ? qs[32 * (j / 2) + l] & 15 : qs[32 * (j / 2) + l] >> 4;
        if (five && (b[16 + l] >> j) & 1) q += 16;
        value[e] = f16_at(b) * scale * q - f16_at(b + 2) * min;
        magnitude[e] = std::abs(f16_at(b) * scale * q) + std::abs(f16_at(b + 2) * min);
      }
      return;
    }
    case BlockType::kQ6_K:
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, quarter = (e % 128) / 32, l = e % 32;
        const uint8_t low_byte = b[64 * half + 32 * (quarter % 2) + l];
        const int low = quarter < 2 ? low_byte & 15 : low_byte >> 4;
        const int high = (b[128 + 32 * half + l] >> (2 * quarter)) & 3;
        value[e] = f16_at(b + 208) * int8_t(b[192 + e / 16]) * (low + 16 * high - 32);
      }
      break;
    case BlockType::kNone: return;
  }
  for (int i = 0; i < layout.elems; ++i) magnitude[i] = std::abs(value[i]);
}

std::vector<float> random_activations(std::size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(count);
  for (float& x : v) x = normal(rng);
  if (count > 40) std::fill(v.begin() + 8, v.begin() + 40, 0.0f);  // an all-zero activation block or part of one
  return v;
}

}  // namespace

TEST_CASE("llama_cpu: linear() on GGUF blocks matches a float64 oracle on every type and level", "[llama_cpu]") {
  IsaCapGuard guard;
  ThreadPool pool(2);
  const int64_t n = 37;
  for (const Layout& layout : kLayouts) {
    const std::vector<int64_t> widths =
        layout.elems == 32 ? std::vector<int64_t>{96, 576, 1536} : std::vector<int64_t>{256, 768};
    for (const int64_t k : widths) {
      const int64_t blocks = k / layout.elems;
      const std::vector<uint8_t> w = random_blocks(layout, n * blocks, uint32_t(k) + uint32_t(layout.type));
      WeightsRef ref{w.data(), PLLM_DTYPE_F32};
      ref.blocks = layout.type;
      for (const int64_t m : {1, 3, 16, 17, 33}) {
        const std::vector<float> a = random_activations(std::size_t(m * k), uint32_t(m * 131 + k));
        // The oracle. Up to kDotRowsMaxRows rows: per row its quantized blocks, per output the float64 sum
        // of block terms; past that, the float64 sum of a_i * w_i.
        std::vector<Term> ref_terms(std::size_t(m * n));
        if (m <= kDotRowsMaxRows) {
          for (int64_t r = 0; r < m; ++r) {
            for (int64_t b = 0; b < blocks; ++b) {
              const float* x = a.data() + r * k + b * layout.elems;
              const ActBlock act = layout.elems == 32 ? quantize32(x) : quantize256(x);
              for (int64_t j = 0; j < n; ++j) {
                block_term(layout, w.data() + (j * blocks + b) * layout.bytes, act,
                           ref_terms[std::size_t(r * n + j)]);
              }
            }
          }
        } else {
          std::vector<double> value(static_cast<std::size_t>(k)), magnitude(static_cast<std::size_t>(k));
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t b = 0; b < blocks; ++b) {
              decode_block(layout, w.data() + (j * blocks + b) * layout.bytes, value.data() + b * layout.elems,
                           magnitude.data() + b * layout.elems);
            }
            for (int64_t r = 0; r < m; ++r) {
              Term& t = ref_terms[std::size_t(r * n + j)];
              for (int64_t i = 0; i < k; ++i) {
                t.value += double(a[std::size_t(r * k + i)]) * value[std::size_t(i)];
                t.magnitude += std::abs(double(a[std::size_t(r * k + i)])) * magnitude[std::size_t(i)];
              }
            }
          }
        }
        const double additions = m <= kDotRowsMaxRows ? double(blocks) : double(k);
        for (const Isa isa : available_isas()) {
          pagedllm::llama_cpu::set_isa_cap(isa);
          for (const bool accumulate : {false, true}) {
            std::vector<float> out(std::size_t(m * n), accumulate ? 0.5f : std::nanf(""));
            linear(pool, a.data(), k, m, ref, n, k, out.data(), n, accumulate);
            for (int64_t i = 0; i < m * n; ++i) {
              const Term& t = ref_terms[std::size_t(i)];
              const double before = accumulate ? 0.5 : 0.0;
              const double bound = (additions + 4) * std::ldexp(1.0, -23) * (t.magnitude + before);
              INFO(layout.name << " k " << k << " m " << m << " output " << i << " "
                               << pagedllm::llama_cpu::isa_name(isa) << " accumulate " << accumulate);
              REQUIRE(std::abs(double(out[std::size_t(i)]) - (t.value + before)) <= bound);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("llama_cpu: on GGUF blocks a row's result is the same bits alone or in a batch", "[llama_cpu]") {
  // Up to kDotRowsMaxRows rows each output is one block dot product whichever
  // rows share the call. (Past it, as for f16 weights, OpenBLAS's SGEMM makes
  // no such promise.)
  IsaCapGuard guard;
  ThreadPool one(1), two(2);
  const int64_t n = 70, rows = kDotRowsMaxRows;
  for (const Layout& layout : kLayouts) {
    const int64_t k = 512, blocks = k / layout.elems;
    const std::vector<uint8_t> w = random_blocks(layout, n * blocks, 5 + uint32_t(layout.type));
    WeightsRef ref{w.data(), PLLM_DTYPE_F32};
    ref.blocks = layout.type;
    const std::vector<float> a = random_activations(std::size_t(rows * k), 9);
    for (const Isa isa : available_isas()) {
      pagedllm::llama_cpu::set_isa_cap(isa);
      std::vector<float> alone(std::size_t(rows * n));
      for (int64_t r = 0; r < rows; ++r) linear(one, a.data() + r * k, k, 1, ref, n, k, alone.data() + r * n, n, false);
      for (const int64_t m : {int64_t(2), int64_t(7), kDotRowsMaxRows}) {
        for (ThreadPool* pool : {&one, &two}) {
          INFO(layout.name << " batch of " << m << " rows, " << pool->size() << " threads, "
                           << pagedllm::llama_cpu::isa_name(isa));
          std::vector<float> batch(std::size_t(m * n));
          linear(*pool, a.data(), k, m, ref, n, k, batch.data(), n, false);
          CHECK(std::memcmp(batch.data(), alone.data(), batch.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}
