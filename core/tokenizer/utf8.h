#pragma once
// UTF-8 helpers with the exact semantics HF tokenizers (Rust) relies on.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pagedllm::tokenizer::utf8 {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first invalid sequence, or nullopt when `text` is valid UTF-8
// (no overlongs, no surrogates, nothing above U+10FFFF).
std::optional<std::size_t> find_invalid(std::string_view text);

// Rust's String::from_utf8_lossy: every maximal invalid subpart becomes one U+FFFD.
std::string lossy(std::string_view bytes);

// True when `bytes` ends with an incomplete (but so far valid) multi-byte
// sequence that more bytes could complete.
bool ends_with_incomplete_sequence(std::string_view bytes);

// Length in bytes of the UTF-8 sequence that starts with `lead` (1 for
// continuation or invalid bytes, so loops always advance).
std::size_t sequence_length(unsigned char lead);

// Decodes the code point starting at text[pos] (text must be valid UTF-8).
char32_t decode_at(std::string_view text, std::size_t pos, std::size_t* length);

void append(std::string& out, char32_t code_point);

}  // namespace pagedllm::tokenizer::utf8
