#pragma once
// GPT-2's byte-to-unicode table (HF ByteLevel): every byte maps to a printable
// code point so byte-level vocabularies are valid UTF-8 text. Printable
// Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') map to themselves; the other 68
// bytes map to U+0100.. in byte order (so ' ' -> 'Ġ', '\n' -> 'Ċ').

#include <optional>
#include <string>
#include <string_view>

namespace pagedllm::tokenizer::byte_level {

// Appends the mapped characters of every byte of `bytes`.
void append_encoded(std::string& out, std::string_view bytes);

// The byte `code_point` stands for, if it is in the table.
std::optional<unsigned char> decode_char(char32_t code_point);

}  // namespace pagedllm::tokenizer::byte_level
