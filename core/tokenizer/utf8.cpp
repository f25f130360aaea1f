#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer::utf8 {
namespace {

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

// Length of the valid sequence at text[pos], or the length of the maximal
// invalid subpart negated (the unit Rust's lossy conversion replaces).
// `truncated` is set when the sequence is a valid prefix cut by the end of text.
long classify(std::string_view text, std::size_t pos, bool* truncated) {
  *truncated = false;
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) return 1;
  std::size_t width = 0;
  unsigned char second_low = 0x80;
  unsigned char second_high = 0xBF;
  if (byte >= 0xC2 && byte <= 0xDF) {
    width = 2;
  } else if (byte >= 0xE0 && byte <= 0xEF) {
    width = 3;
    if (byte == 0xE0) second_low = 0xA0;
    if (byte == 0xED) second_high = 0x9F;
  } else if (byte >= 0xF0 && byte <= 0xF4) {
    width = 4;
    if (byte == 0xF0) second_low = 0x90;
    if (byte == 0xF4) second_high = 0x8F;
  } else {
    return -1;
  }
  for (std::size_t i = 1; i < width; ++i) {
    if (pos + i >= text.size()) {
      *truncated = true;
      return -static_cast<long>(i);
    }
    const auto next = static_cast<unsigned char>(text[pos + i]);
    const bool ok = i == 1 ? (next >= second_low && next <= second_high) : is_continuation(next);
    if (!ok) return -static_cast<long>(i);
  }
  return static_cast<long>(width);
}

}  // namespace

std::optional<std::size_t> find_invalid(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (static_cast<unsigned char>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    bool truncated = false;
    const long length = classify(text, pos, &truncated);
    if (length < 0) return pos;
    pos += static_cast<std::size_t>(length);
  }
  return std::nullopt;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    bool truncated = false;
    const long length = classify(bytes, pos, &truncated);
    if (length > 0) {
      out.append(bytes.substr(pos, static_cast<std::size_t>(length)));
      pos += static_cast<std::size_t>(length);
    } else {
      out.append(kReplacementCharacter);
      pos += static_cast<std::size_t>(-length);
    }
  }
  return out;
}

bool ends_with_incomplete_sequence(std::string_view bytes) {
  // A sequence is at most 4 bytes: look at the last 3 possible lead positions.
  const std::size_t first = bytes.size() > 3 ? bytes.size() - 3 : 0;
  for (std::size_t pos = first; pos < bytes.size(); ++pos) {
    const auto byte = static_cast<unsigned char>(bytes[pos]);
    if (is_continuation(byte)) continue;
    bool truncated = false;
    const long length = classify(bytes, pos, &truncated);
    if (length < 0 && truncated) return true;
  }
  return false;
}

std::size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

char32_t decode_at(std::string_view text, std::size_t pos, std::size_t* length) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  const std::size_t n = std::min(sequence_length(lead), text.size() - pos);
  *length = n;
  if (n == 1) return lead;
  char32_t code_point = lead & (0xFF >> (n + 1));
  for (std::size_t i = 1; i < n; ++i) {
    code_point = (code_point << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
  }
  return code_point;
}

void append(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

}  // namespace pagedllm::tokenizer::utf8
