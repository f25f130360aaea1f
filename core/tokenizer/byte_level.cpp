#include "core/tokenizer/byte_level.h"

#include <array>

#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer::byte_level {
namespace {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8{};
  // Indexed by code point; every mapped code point is below 0x144.
  std::array<int, 0x144> char_to_byte{};

  Tables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? static_cast<char32_t>(b) : next_extra++;
      byte_to_char[b] = c;
      utf8::append(byte_to_utf8[b], c);
      char_to_byte[c] = b;
    }
  }
};

const Tables& tables() {
  static const Tables instance;
  return instance;
}

}  // namespace

void append_encoded(std::string& out, std::string_view bytes) {
  const Tables& t = tables();
  for (const char byte : bytes) out += t.byte_to_utf8[static_cast<unsigned char>(byte)];
}

std::optional<unsigned char> decode_char(char32_t code_point) {
  const Tables& t = tables();
  if (code_point >= t.char_to_byte.size() || t.char_to_byte[code_point] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.char_to_byte[code_point]);
}

}  // namespace pagedllm::tokenizer::byte_level
