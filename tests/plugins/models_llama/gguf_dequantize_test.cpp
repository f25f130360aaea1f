// The loader's dequantization of GGUF blocks (llama_common/gguf_dequantize.h: what
// `model.dtype: f16 / bf16 / f32` loads, and what linear() dequantizes past
// kDotRowsMaxRows rows) against gguf-py's (gguf.quants.dequantize, through
// tools/testing/gguf_oracle.py), bit for bit, on every block type a Llama file may
// hold: random blocks (every quant, scale and high bit pattern) whose f16 scales are
// random finite bit patterns (either sign, subnormals included), one block's scales zero.

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "llama_common/gguf_dequantize.h"
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

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST_CASE("gguf: the loader's dequantization equals gguf-py's bit for bit on every block type", "[gguf]") {
  pagedllm::testing::require_python_modules("gguf, numpy");
  const pagedllm::testing::TempDir dir;
  for (const StoredType& stored : kTypes) {
    const pllm::gguf::TypeTraits& traits = *pllm::gguf::type_traits(uint32_t(stored.type));
    INFO(traits.name);
    REQUIRE(pagedllm::llama::can_dequantize_gguf(stored.type));
    const int64_t blocks = 64;
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
    const auto in = dir.write(std::string(traits.name) + ".bin", data);
    const auto out = dir.path() / (std::string(traits.name) + ".f32");
    const auto r = pagedllm::testing::run_command(std::string(pagedllm::testing::kPython) + " " PAGEDLLM_SOURCE_DIR
                                                  "/tools/testing/gguf_oracle.py dequantize " + traits.name + " '" +
                                                  in.string() + "' '" + out.string() + "'");
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    const std::string expected = read_file(out);
    const int64_t count = blocks * traits.block_size;
    REQUIRE(expected.size() == std::size_t(count) * sizeof(float));
    std::vector<float> got(static_cast<std::size_t>(count));
    REQUIRE(pagedllm::llama::dequantize_gguf(stored.type, data.data(), got.data(), count));
    for (int64_t i = 0; i < count; ++i) {
      float want;
      std::memcpy(&want, expected.data() + i * 4, 4);
      INFO("element " << i << " (block " << i / traits.block_size << ")");
      REQUIRE(std::memcmp(&got[std::size_t(i)], &want, 4) == 0);
    }
  }
}
