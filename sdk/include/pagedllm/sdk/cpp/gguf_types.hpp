#pragma once
// ggml's tensor types as GGUF stores them (block size and bytes per block, as in
// gguf-py's GGML_QUANT_SIZES), and their dequantization to f32 with ggml's exact
// block layouts and arithmetic (ggml-quants.c dequantize_row_*): the same float
// operations in the same order, so results equal ggml's and gguf-py's bit for bit.
//
//   Q8_0  32 elements, 34 bytes: f16 d, i8 q[32];                  x = d*q
//   Q4_0  32 elements, 18 bytes: f16 d, u8 qs[16];                 x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
//   Q4_1  32 elements, 20 bytes: f16 d, f16 m, u8 qs[16];          x[j] = d*(qs[j]&15)+m, x[j+16] = d*(qs[j]>>4)+m
//   Q4_K 256 elements, 144 bytes: f16 d, f16 dmin, u8 scales[12], u8 qs[128]
//   Q5_K 256 elements, 176 bytes: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]
//   Q6_K 256 elements, 210 bytes: u8 ql[128], u8 qh[64], i8 scales[16], f16 d
// Q4_K and Q5_K hold eight 6-bit (scale, min) pairs in scales[12] (see scale_min_k4).

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "pagedllm/sdk/cpp/float_convert.hpp"

namespace pllm::gguf {

enum class GgmlType : std::uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

struct TypeTraits {
  const char* name;
  std::uint32_t block_size;  // elements per block
  std::uint32_t type_size;   // bytes per block
};

// The traits of a stored type id; nullptr for ids ggml does not define (4, 5 and
// 31-33, 36-38 were removed from ggml and are refused too).
inline const TypeTraits* type_traits(std::uint32_t id) {
  static constexpr TypeTraits kNone{nullptr, 0, 0};
  static constexpr TypeTraits kTable[] = {
      {"F32", 1, 4},        {"F16", 1, 2},        {"Q4_0", 32, 18},     {"Q4_1", 32, 20},
      kNone,                kNone,                {"Q5_0", 32, 22},     {"Q5_1", 32, 24},
      {"Q8_0", 32, 34},     {"Q8_1", 32, 40},     {"Q2_K", 256, 84},    {"Q3_K", 256, 110},
      {"Q4_K", 256, 144},   {"Q5_K", 256, 176},   {"Q6_K", 256, 210},   {"Q8_K", 256, 292},
      {"IQ2_XXS", 256, 66}, {"IQ2_XS", 256, 74},  {"IQ3_XXS", 256, 98}, {"IQ1_S", 256, 50},
      {"IQ4_NL", 32, 18},   {"IQ3_S", 256, 110},  {"IQ2_S", 256, 82},   {"IQ4_XS", 256, 136},
      {"I8", 1, 1},         {"I16", 1, 2},        {"I32", 1, 4},        {"I64", 1, 8},
      {"F64", 1, 8},        {"IQ1_M", 256, 56},   {"BF16", 1, 2},       kNone,
      kNone,                kNone,                {"TQ1_0", 256, 54},   {"TQ2_0", 256, 66},
      kNone,                kNone,                kNone,                {"MXFP4", 32, 17},
      {"NVFP4", 64, 36},    {"Q1_0", 128, 18},
  };
  if (id >= sizeof kTable / sizeof kTable[0] || kTable[id].name == nullptr) return nullptr;
  return &kTable[id];
}

namespace detail {

inline float half_at(const unsigned char* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, 2);
  return f16_to_f32(bits);
}

// The j-th (scale, min) pair of a K-quant super-block's 12 packed bytes: pairs 0-3
// are the low 6 bits of bytes j and j+4; pairs 4-7 take their low 4 bits from byte
// j+4 (scale: low nibble, min: high nibble) and their high 2 bits from the top bits
// of bytes j-4 (scale) and j (min).
inline void scale_min_k4(int j, const unsigned char* q, unsigned char& scale, unsigned char& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<unsigned char>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    min = static_cast<unsigned char>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

inline void q8_0(const unsigned char* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

inline void q4_0(const unsigned char* b, float* y) {
  const float d = half_at(b);
  const unsigned char* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Rounds a product to float before an addition, so that no compiler contracts the
// two into a fused multiply-add (which rounds once, unlike ggml's reference).
inline float product(float a, float b) {
  volatile float p = a * b;
  return p;
}

inline void q4_1(const unsigned char* b, float* y) {
  const float d = half_at(b);
  const float m = half_at(b + 2);
  const unsigned char* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = product(static_cast<float>(qs[j] & 0xF), d) + m;
    y[j + 16] = product(static_cast<float>(qs[j] >> 4), d) + m;
  }
}

inline void q4_k(const unsigned char* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const unsigned char* scales = b + 4;
  const unsigned char* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
    unsigned char sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = product(d1, static_cast<float>(q[l] & 0xF)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = product(d2, static_cast<float>(q[l] >> 4)) - m2;
  }
}

inline void q5_k(const unsigned char* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const unsigned char* scales = b + 4;
  const unsigned char* qh = b + 16;
  const unsigned char* ql = b + 48;
  unsigned u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
    unsigned char sc, m;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) {
      *y++ = product(d1, static_cast<float>((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0))) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      *y++ = product(d2, static_cast<float>((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0))) - m2;
    }
  }
}

inline void q6_k(const unsigned char* b, float* y) {
  const unsigned char* ql = b;
  const unsigned char* qh = b + 128;
  const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * sc[is + 0] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
  }
}

}  // namespace detail

// Dequantizes `count` elements of `type` at `src` (whole blocks, no alignment
// needed) into dst[0, count). Returns false, writing nothing, for types it does not
// handle (see the list in gguf.hpp); `count` must be a multiple of the block size.
inline bool dequantize(GgmlType type, const void* src, float* dst, std::int64_t count) {
  const auto* b = static_cast<const unsigned char*>(src);
  auto blocks = [&](auto&& fn, std::int64_t block, std::int64_t bytes) {
    for (std::int64_t i = 0; i < count / block; ++i) fn(b + i * bytes, dst + i * block);
    return true;
  };
  switch (type) {
    case GgmlType::F32: return to_f32(src, PLLM_DTYPE_F32, dst, count);
    case GgmlType::F16: return to_f32(src, PLLM_DTYPE_F16, dst, count);
    case GgmlType::BF16: return to_f32(src, PLLM_DTYPE_BF16, dst, count);
    case GgmlType::Q8_0: return blocks(detail::q8_0, 32, 34);
    case GgmlType::Q4_0: return blocks(detail::q4_0, 32, 18);
    case GgmlType::Q4_1: return blocks(detail::q4_1, 32, 20);
    case GgmlType::Q4_K: return blocks(detail::q4_k, 256, 144);
    case GgmlType::Q5_K: return blocks(detail::q5_k, 256, 176);
    case GgmlType::Q6_K: return blocks(detail::q6_k, 256, 210);
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_1: case GgmlType::Q2_K: case GgmlType::Q3_K:
    case GgmlType::Q8_K: case GgmlType::IQ2_XXS: case GgmlType::IQ2_XS: case GgmlType::IQ3_XXS:
    case GgmlType::IQ1_S: case GgmlType::IQ4_NL: case GgmlType::IQ3_S: case GgmlType::IQ2_S:
    case GgmlType::IQ4_XS: case GgmlType::I8: case GgmlType::I16: case GgmlType::I32: case GgmlType::I64:
    case GgmlType::F64: case GgmlType::IQ1_M: case GgmlType::TQ1_0: case GgmlType::TQ2_0:
    case GgmlType::MXFP4: case GgmlType::NVFP4: case GgmlType::Q1_0:
      return false;
  }
  return false;
}

}  // namespace pllm::gguf
