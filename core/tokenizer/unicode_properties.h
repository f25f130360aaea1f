#pragma once
// Unicode character classes with the meaning Rust's `char` methods give them,
// which is what HF tokenizers' added-token matching uses.

namespace pagedllm::tokenizer::unicode {

// char::is_whitespace: the White_Space property.
bool is_whitespace(char32_t code_point);

// char::is_alphanumeric: Alphabetic or Numeric. Alphabetic is approximated by
// the letter categories plus Nl and the spacing/nonspacing marks (utf8proc
// exposes categories, not the derived Alphabetic property).
bool is_alphanumeric(char32_t code_point);

}  // namespace pagedllm::tokenizer::unicode
