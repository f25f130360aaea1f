#include "llama_common/gguf_dequantize.h"

#include <cstring>
#include <utility>

#include "pagedllm/sdk/cpp/float_convert.hpp"

namespace pagedllm::llama {
namespace {

float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return pllm::f16_to_f32(bits);
}

// Q5_0 / Q5_1's 32 unsigned 5-bit values: nibbles of qs (Q4_0's order), bit 4 from qh.
void five_bit_values(const uint8_t* qh_bytes, const uint8_t* qs, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0xF) | int(((qh >> j) & 1) << 4);
    q[j + 16] = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
  }
}

void q5_0(const uint8_t* b, float* y) {
  int q[32];
  five_bit_values(b + 2, b + 6, q);
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = d * float(q[j] - 16);
}

void q5_1(const uint8_t* b, float* y) {
  int q[32];
  five_bit_values(b + 4, b + 8, q);
  const float d = half_at(b), m = half_at(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = d * float(q[j]) + m;  // d * q exact: a fused add rounds the same
}

void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = half_at(b + 80), dmin = half_at(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int q = (qs[32 * h + l] >> (2 * s)) & 3;
    const float scale = d * float(scales[e / 16] & 0xF), min = dmin * float(scales[e / 16] >> 4);
    y[e] = scale * float(q) - min;  // both products exact
  }
}

// Q3_K's sixteen 6-bit scales: low 4 bits from bytes 0-7 (low nibbles for 0-7, high for 8-15),
// high 2 bits from bytes 8-11 (scale i: byte 8 + i % 4, bits 2 (i / 4)).
int q3_k_scale(const uint8_t* packed, int i) {
  const int low = (packed[i % 8] >> (4 * (i / 8))) & 0xF;
  const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
  return (low | (high << 4)) - 32;
}

void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const float d = half_at(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int q = ((qs[32 * h + l] >> (2 * s)) & 3) - (((hmask[l] >> (e / 32)) & 1) ? 0 : 4);
    y[e] = d * float(q3_k_scale(b + 96, e / 16)) * float(q);
  }
}

void iq4_nl(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIq4Values[b[2 + j] & 0xF]);
    y[j + 16] = d * float(kIq4Values[b[2 + j] >> 4]);
  }
}

void iq4_xs(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  const uint8_t* qs = b + 8;
  for (int sub = 0; sub < 8; ++sub, y += 32) {
    const int scale = (((b[4 + sub / 2] >> (4 * (sub % 2))) & 0xF) | (((scales_h >> (2 * sub)) & 3) << 4)) - 32;
    const float dl = d * float(scale);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * float(kIq4Values[qs[16 * sub + j] & 0xF]);
      y[j + 16] = dl * float(kIq4Values[qs[16 * sub + j] >> 4]);
    }
  }
}

using BlockDecoder = void (*)(const uint8_t*, float*);

// The decoder of a type this file handles; null for the others.
BlockDecoder decoder_of(pllm::gguf::GgmlType type) {
  using G = pllm::gguf::GgmlType;
  static constexpr std::pair<G, BlockDecoder> kDecoders[] = {
      {G::Q5_0, q5_0}, {G::Q5_1, q5_1}, {G::Q2_K, q2_k}, {G::Q3_K, q3_k}, {G::IQ4_NL, iq4_nl}, {G::IQ4_XS, iq4_xs},
  };
  for (const auto& [t, decode] : kDecoders) {
    if (t == type) return decode;
  }
  return nullptr;
}

}  // namespace

bool can_dequantize_gguf(pllm::gguf::GgmlType type) {
  return decoder_of(type) != nullptr || pllm::gguf::dequantize(type, nullptr, nullptr, 0);
}

bool dequantize_gguf(pllm::gguf::GgmlType type, const void* src, float* dst, int64_t count) {
  const BlockDecoder decode = decoder_of(type);
  if (!decode) return pllm::gguf::dequantize(type, src, dst, count);
  const pllm::gguf::TypeTraits& traits = *pllm::gguf::type_traits(uint32_t(type));
  const auto* blocks = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < count / traits.block_size; ++i) {
    decode(blocks + i * traits.type_size, dst + i * traits.block_size);
  }
  return true;
}

}  // namespace pagedllm::llama
