#pragma once
// A GGUF tensor's blocks to f32, for every block type a Llama loader reads: the
// SDK's (pllm::gguf::dequantize: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
// Q6_K) and, here, the types it does not decode:
//   Q5_0    32 elements, 22 bytes: f16 d, u32 qh, u8 qs[16]
//           x[j] = d * ((qs[j] & 15 | qh bit j << 4) - 16), x[j + 16] the same from qs[j] >> 4 and bit j + 16
//   Q5_1    32 elements, 24 bytes: f16 d, f16 m, u32 qh, u8 qs[16]     x = d * q + m (q as Q5_0's, no - 16)
//   Q2_K   256 elements, 84 bytes: u8 scales[16] (low nibble: scale, high: min), u8 qs[64], f16 d, f16 dmin
//           element e = 128 h + 32 s + l: q = (qs[32 h + l] >> 2 s) & 3; x = d * scale[e / 16] * q
//           - dmin * min[e / 16]
//   Q3_K   256 elements, 110 bytes: u8 hmask[32], u8 qs[64], u8 scales[12] (sixteen 6-bit values), f16 d
//           q = ((qs[32 h + l] >> 2 s) & 3) - (hmask[l] bit e / 32 ? 0 : 4); x = d * (scale[e / 16] - 32) * q
//   IQ4_NL  32 elements, 18 bytes: f16 d, u8 qs[16]   x = d * kIq4Values[nibble], nibbles ordered as Q4_0's
//   IQ4_XS 256 elements, 136 bytes: f16 d, u16 scales_h, u8 scales_l[4], u8 qs[128]; sub-block b of 32:
//           scale 6 bits (scales_l nibble b, scales_h bits 2 b), x = d * (scale - 32) * kIq4Values[nibble],
//           nibbles of qs[16 b .. 16 b + 16) ordered as Q4_0's
// Every product is exact in f32 (an f16 mantissa times integers of at most 13 bits all told), so
// each element rounds at most once (Q5_1's + m, the K-quants' - dmin * min): the values equal
// gguf-py's dequantization (gguf.quants.dequantize) and ggml's dequantize_row_* bit for bit.

#include <cstdint>

#include "pagedllm/sdk/cpp/gguf_types.hpp"

namespace pagedllm::llama {

// IQ4_NL's and IQ4_XS's 16 non-linear levels.
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// Whether dequantize_gguf decodes `type`.
bool can_dequantize_gguf(pllm::gguf::GgmlType type);

// `count` elements of `type` at `src` (whole blocks, any alignment) into dst[0, count). Returns
// false, writing nothing, for a type can_dequantize_gguf refuses.
bool dequantize_gguf(pllm::gguf::GgmlType type, const void* src, float* dst, int64_t count);

}  // namespace pagedllm::llama
