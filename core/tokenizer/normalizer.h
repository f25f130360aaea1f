#pragma once
// tokenizer.json "normalizer": text transforms applied to each piece of input
// between added tokens, before pre-tokenization.
//
// Supported: Sequence, Prepend, Replace (String or Regex pattern), NFC, NFD,
// NFKC, NFKD, Lowercase, Strip. Anything else is refused with a TokenizerError.

#include <memory>
#include <string>

#include "core/tokenizer/json_fields.h"

namespace pagedllm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Builds the normalizer described by `value` (a non-null JSON object).
std::unique_ptr<Normalizer> make_normalizer(const Json& value, const JsonPlace& place);

// A {"String": s} or {"Regex": r} pattern, shared by Replace and Split.
struct TextPattern {
  std::string text;
  bool is_regex = false;
};
TextPattern parse_text_pattern(const Json& value, const JsonPlace& place);

}  // namespace pagedllm::tokenizer
