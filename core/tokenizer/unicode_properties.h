#pragma once
// Unicode character classes with the meaning Rust's `char` methods give them,
// which is what HF tokenizers' added-token matching uses.

namespace pagedllm::tokenizer::unicode {

// char::is_whitespace: the White_Space property.
bool is_whitespace(char32_t code_point);

// Rust regex's Unicode `\w`, which HF's single_word added tokens test on either side of a
// match: Alphabetic, marks, Nd, Pc ('_') and Join_Control (ZWJ, ZWNJ). Not No ('½', '²').
// Alphabetic is the letter categories, Nl and the Other_Alphabetic symbols (circled
// letters); its Other_Alphabetic marks are already marks (utf8proc exposes categories,
// not the derived Alphabetic property).
bool is_word_character(char32_t code_point);

}  // namespace pagedllm::tokenizer::unicode
