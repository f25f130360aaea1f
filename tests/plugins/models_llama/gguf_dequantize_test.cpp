// GGUF blocks against gguf-py (gguf.quants.dequantize, through tools/testing/gguf_oracle.py) on
// every block type a Llama file may hold, on random blocks (every quant, scale and high bit
// pattern) whose f16 scales are random finite bit patterns (either sign, subnormals included),
// one block's scales zero:
//   - the loader's dequantization (llama_common/gguf_dequantize.h: what `model.dtype: f16 /
//     bf16 / f32` loads, and what linear() dequantizes past kDotRowsMaxRows rows) equals
//     gguf-py's bit for bit;
//   - linear() on the blocks held as stored, on every instruction-set level the CPU has, is a
//     float64 loop over gguf-py's weights: up to kDotRowsMaxRows rows times the activations
//     quantized per block as linear() pairs the type (Q8_0 / Q8_1 / Q8_K,
//     activation_blocks.h) and dequantized (d * q); past that times the f32 activations.
// Tolerance, up to kDotRowsMaxRows rows: the kernels sum d_w * d_a * (exact integer block sum) in
// f32, the same products in another grouping, so as in gguf_blocks_test.cpp they differ from the
// float64 sum by at most (blocks + 4) * 2^-23 times the sum of the magnitudes their f32 terms
// may reach, plus gguf-py's own rounding of each weight to f32 (2^-24 of it). A term's
// magnitude is |w a| where the kernels multiply the weight as it is; where they add a block
// min or an offset and take it back through the activations' sums, |w| + that amount, bounded
// here from the block's f16 scales and the widest scale its bits can hold: Q4_1 / Q5_1 |m|;
// Q2_K 15 |dmin|; Q4_K / Q5_K 63 |dmin|; Q3_K (values + 4, scales to 32) 2 * 4 * 32 |d|; Q6_K
// (values + 32, int8 scales to 128) 2 * 32 * 128 |d|. Q4_1 / Q5_1 also pair their min with
// Q8_1's s = f16(d * sum q) rather than d_a * sum q (d_a = f16(d)): two f16 roundings, at most
// 2^-10 |d sum q| <= 2^-9 sum |a_q| per block, times |m|. Past kDotRowsMaxRows rows: SGEMM on
// the same f32 weights, (k + 4) * 2^-23 * sum |w a| (cpu_kernels_test.cpp's f32 bound).

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "llama_common/gguf_dequantize.h"
#include "llama_cpu/cpu_isa.h"
#include "llama_cpu/cpu_kernels.h"
#include "tests/plugins/models_llama/activation_blocks.h"
#include "tests/plugins/models_llama/isa_levels.h"
#include "tests/support/python.h"
#include "tests/support/temp_dir.h"

namespace {

using G = pllm::gguf::GgmlType;

struct StoredType {
  G type;
  std::vector<int> scale_offsets;  // the f16 scales' byte offsets in a block
};

const StoredType kTypes[] = {
    {G::Q8_0, {0}},      {G::Q4_0, {0}},   {G::Q4_1, {0, 2}}, {G::Q5_0, {0}},     {G::Q5_1, {0, 2}},
    {G::Q2_K, {80, 82}}, {G::Q3_K, {108}}, {G::Q4_K, {0, 2}}, {G::Q5_K, {0, 2}},  {G::Q6_K, {208}},
    {G::IQ4_NL, {0}},    {G::IQ4_XS, {0}},
};

const pllm::gguf::TypeTraits& traits_of(G type) { return *pllm::gguf::type_traits(uint32_t(type)); }

// `blocks` random blocks of `stored`'s type, block 5's scales zero.
std::string random_blocks(const StoredType& stored, int64_t blocks) {
  const pllm::gguf::TypeTraits& traits = traits_of(stored.type);
  std::mt19937 rng(uint32_t(stored.type) + 7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::string data(std::size_t(blocks * traits.type_size), '\0');
  for (char& c : data) c = char(byte(rng));
  for (int64_t b = 0; b < blocks; ++b) {
    for (const int offset : stored.scale_offsets) {
      uint16_t bits = b == 5 ? 0 : uint16_t(byte(rng) | byte(rng) << 8);
      if ((bits & 0x7C00) == 0x7C00) bits &= 0xBFFF;  // an infinity or NaN: a finite exponent instead
      std::memcpy(data.data() + b * traits.type_size + offset, &bits, 2);
    }
  }
  return data;
}

// gguf-py's dequantization of `data` (whole blocks of `type`).
std::vector<float> gguf_py_dequantize(const pagedllm::testing::TempDir& dir, G type, const std::string& data) {
  const char* name = traits_of(type).name;
  const auto in = dir.write(std::string(name) + ".bin", data);
  const auto out = dir.path() / (std::string(name) + ".f32");
  const auto r = pagedllm::testing::run_command(std::string(pagedllm::testing::kPython) + " " PAGEDLLM_SOURCE_DIR
                                                "/tools/testing/gguf_oracle.py dequantize " + name + " '" +
                                                in.string() + "' '" + out.string() + "'");
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream file(out, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

double f16_at(const std::string& data, int64_t at) {
  uint16_t bits;
  std::memcpy(&bits, data.data() + at, 2);
  return double(pllm::f16_to_f32(bits));
}

// What the kernels may add to |w| in their f32 terms in block b (the header's list).
double block_offset(G type, const std::string& data, int64_t b) {
  const int64_t at = b * traits_of(type).type_size;
  if (type == G::Q4_1 || type == G::Q5_1) return std::abs(f16_at(data, at + 2));
  if (type == G::Q2_K) return 15 * std::abs(f16_at(data, at + 82));
  if (type == G::Q4_K || type == G::Q5_K) return 63 * std::abs(f16_at(data, at + 2));
  if (type == G::Q3_K) return 2 * 4 * 32 * std::abs(f16_at(data, at + 108));
  if (type == G::Q6_K) return 2 * 32 * 128 * std::abs(f16_at(data, at + 208));
  return 0.0;
}

}  // namespace

TEST_CASE("gguf: the loader's dequantization equals gguf-py's bit for bit on every block type", "[gguf]") {
  pagedllm::testing::require_python_modules("gguf, numpy");
  const pagedllm::testing::TempDir dir;
  for (const StoredType& stored : kTypes) {
    const pllm::gguf::TypeTraits& traits = traits_of(stored.type);
    INFO(traits.name);
    REQUIRE(pagedllm::llama::can_dequantize_gguf(stored.type));
    const int64_t blocks = 64, count = blocks * traits.block_size;
    const std::string data = random_blocks(stored, blocks);
    const std::vector<float> expected = gguf_py_dequantize(dir, stored.type, data);
    REQUIRE(expected.size() == std::size_t(count));
    std::vector<float> got(static_cast<std::size_t>(count));
    REQUIRE(pagedllm::llama::dequantize_gguf(stored.type, data.data(), got.data(), count));
    for (int64_t i = 0; i < count; ++i) {
      INFO("element " << i << " (block " << i / traits.block_size << ")");
      REQUIRE(std::memcmp(&got[std::size_t(i)], &expected[std::size_t(i)], sizeof(float)) == 0);
    }
  }
}

TEST_CASE("gguf: linear() on every held block type is a float64 loop over gguf-py's weights on every level",
          "[gguf]") {
  using pagedllm::llama_cpu::kDotRowsMaxRows;
  using pagedllm::llama_cpu::testing::ActBlock;
  pagedllm::testing::require_python_modules("gguf, numpy");
  const pagedllm::testing::TempDir dir;
  pagedllm::llama_cpu::testing::IsaCapGuard guard;
  pagedllm::plugins::ThreadPool pool(2);
  const int64_t n = 19, k = 512;
  for (const StoredType& stored : kTypes) {
    const pllm::gguf::TypeTraits& traits = traits_of(stored.type);
    const int64_t elems = traits.block_size, blocks = k / elems;
    const std::string data = random_blocks(stored, n * blocks);
    const std::vector<float> w = gguf_py_dequantize(dir, stored.type, data);
    REQUIRE(w.size() == std::size_t(n * k));
    pagedllm::llama_cpu::WeightsRef ref{data.data(), PLLM_DTYPE_F32};
    ref.blocks = pagedllm::llama_cpu::block_type_of(stored.type);
    REQUIRE(ref.blocks != pagedllm::llama_cpu::BlockType::kNone);
    const bool with_min = stored.type == G::Q4_1 || stored.type == G::Q5_1;
    for (const int64_t m : {int64_t(1), int64_t(3), kDotRowsMaxRows, kDotRowsMaxRows + 1}) {
      std::mt19937 rng(uint32_t(m) + 11);
      std::normal_distribution<float> normal;
      std::vector<float> a(std::size_t(m * k));
      for (float& x : a) x = normal(rng);
      std::fill(a.begin() + 32, a.begin() + 64, 0.0f);  // an all-zero activation block (of 32)
      std::vector<double> want(std::size_t(m * n)), bound(std::size_t(m * n));
      for (int64_t r = 0; r < m; ++r) {
        const float* x = a.data() + r * k;
        if (m > kDotRowsMaxRows) {
          for (int64_t j = 0; j < n; ++j) {
            double sum = 0, magnitude = 0;
            for (int64_t i = 0; i < k; ++i) {
              sum += double(w[std::size_t(j * k + i)]) * x[i];
              magnitude += std::abs(double(w[std::size_t(j * k + i)]) * x[i]);
            }
            want[std::size_t(r * n + j)] = sum;
            bound[std::size_t(r * n + j)] = double(k + 4) * std::ldexp(magnitude, -23);
          }
          continue;
        }
        std::vector<double> a_q(static_cast<std::size_t>(k));  // the quantized activations, d * q
        for (int64_t b = 0; b < blocks; ++b) {
          const ActBlock act = elems == 32 ? pagedllm::llama_cpu::testing::quantize32(x + b * elems)
                                           : pagedllm::llama_cpu::testing::quantize256(x + b * elems);
          for (int64_t i = 0; i < elems; ++i) a_q[std::size_t(b * elems + i)] = act.d * act.q[std::size_t(i)];
        }
        for (int64_t j = 0; j < n; ++j) {
          double sum = 0, magnitude = 0, min_pairing = 0;
          for (int64_t b = 0; b < blocks; ++b) {
            const double offset = block_offset(stored.type, data, j * blocks + b);
            double block_a = 0;
            for (int64_t i = b * elems; i < (b + 1) * elems; ++i) {
              const double wi = w[std::size_t(j * k + i)];
              sum += wi * a_q[std::size_t(i)];
              magnitude += (std::abs(wi) + offset) * std::abs(a_q[std::size_t(i)]);
              block_a += std::abs(a_q[std::size_t(i)]);
            }
            if (with_min) min_pairing += offset * std::ldexp(block_a, -9);
          }
          want[std::size_t(r * n + j)] = sum;
          bound[std::size_t(r * n + j)] = double(blocks + 5) * std::ldexp(magnitude, -23) + min_pairing;
        }
      }
      for (const pagedllm::llama_cpu::Isa isa : pagedllm::llama_cpu::testing::available_isas()) {
        pagedllm::llama_cpu::set_isa_cap(isa);
        std::vector<float> out(std::size_t(m * n), std::nanf(""));
        pagedllm::llama_cpu::linear(pool, a.data(), k, m, ref, n, k, out.data(), n, false);
        for (int64_t i = 0; i < m * n; ++i) {
          INFO(traits.name << " m " << m << " output " << i << " " << pagedllm::llama_cpu::isa_name(isa));
          REQUIRE(std::abs(double(out[std::size_t(i)]) - want[std::size_t(i)]) <= bound[std::size_t(i)]);
        }
      }
    }
  }
}
