#pragma once
// tokenizer.json "pre_tokenizer": splits normalized text into the words BPE
// encodes one at a time (and, for ByteLevel, maps bytes to printable chars).
//
// Supported: Sequence, ByteLevel (add_prefix_space, use_regex with GPT-2's
// pattern), Split (String/Regex pattern, all five behaviors, invert),
// Metaspace (replacement, prepend_scheme first/always/never, split, legacy
// add_prefix_space), Digits. Anything else is refused with a TokenizerError.

#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/regex.h"

namespace pagedllm::tokenizer {

struct PreToken {
  std::string text;
  // The piece starts at offset 0 of the user's input (Metaspace's "first"
  // prepend scheme only adds its prefix there).
  bool at_input_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces every piece by its splits; empty splits are dropped.
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& value, const JsonPlace& place);

// HF's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct TextRange {
  std::size_t begin;
  std::size_t end;
};

// The pieces of a text of `length` bytes with the given `matches`, as HF's
// NormalizedString::split produces them (empty pieces dropped).
std::vector<TextRange> split_by_matches(std::size_t length, const std::vector<RegexMatch>& matches,
                                        SplitBehavior behavior, bool invert);

// GPT-2's pre-tokenizer regex, as HF's ByteLevel uses it.
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace pagedllm::tokenizer
