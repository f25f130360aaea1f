#include "core/tokenizer/normalizer.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <utf8proc.h>

#include "core/tokenizer/regex.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/unicode_properties.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Prepend: only non-empty text gets the prefix (HF's check).
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const TextPattern& pattern, std::string content, const std::string& where)
      : literal_(pattern.text), content_(std::move(content)) {
    if (pattern.is_regex) regex_.emplace(pattern.text, where);
  }
  void normalize(std::string& text) const override {
    if (regex_) {
      std::string out;
      std::size_t last = 0;
      for (const RegexMatch& match : regex_->find_all(text)) {
        out.append(text, last, match.begin - last);
        out += content_;
        last = match.end;
      }
      out.append(text, last);
      text = std::move(out);
      return;
    }
    if (literal_.empty() || text.find(literal_) == std::string::npos) return;
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    std::size_t last = 0;
    for (std::size_t pos = text.find(literal_); pos != std::string::npos;
         pos = text.find(literal_, last)) {
      out.append(text, last, pos - last);
      out += content_;
      last = pos + literal_.size();
    }
    out.append(text, last);
    text = std::move(out);
  }

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

// Code points utf8proc (Unicode 15) decomposes or gives a combining class but HF's
// normalizers, whose tables are an older Unicode version's, treat as unassigned.
struct CodePointRange {
  char32_t first;
  char32_t last;
};
#include "core/tokenizer/hf_normalization_gaps.inc"

bool is_hf_normalization_gap(char32_t c) {
  if (c < kHfNormalizationGaps[0].first) return false;
  const auto* it = std::upper_bound(std::begin(kHfNormalizationGaps), std::end(kHfNormalizationGaps), c,
                                    [](char32_t value, const CodePointRange& range) { return value < range.first; });
  return it != std::begin(kHfNormalizationGaps) && c <= std::prev(it)->last;
}

bool is_hf_uncomposed_pair(char32_t first, char32_t second) {
  return std::any_of(std::begin(kHfUncomposedPairs), std::end(kHfUncomposedPairs),
                     [&](const char32_t(&pair)[2]) { return pair[0] == first && pair[1] == second; });
}

// Unicode normalization forms through utf8proc.
class Utf8procNormalizer final : public Normalizer {
 public:
  explicit Utf8procNormalizer(utf8proc_option_t options) : options_(options) {}
  void normalize(std::string& text) const override {
    // A code point HF does not know acts there as a starter without decomposition: nothing
    // reorders or composes across it. Normalizing the pieces between such code points
    // separately and keeping them verbatim gives exactly that. Likewise, a piece ends
    // between two starters that only utf8proc would compose.
    std::string out;
    std::size_t piece = 0;
    bool split = false;
    char32_t previous = 0;
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t length = 0;
      const char32_t c = utf8::decode_at(text, pos, &length);
      if (is_hf_normalization_gap(c)) {
        out += map(std::string_view(text).substr(piece, pos - piece));
        out.append(text, pos, length);
        piece = pos + length;
        split = true;
      } else if ((options_ & UTF8PROC_COMPOSE) != 0 && is_hf_uncomposed_pair(previous, c)) {
        out += map(std::string_view(text).substr(piece, pos - piece));
        piece = pos;
        split = true;
      }
      previous = c;
      pos += length;
    }
    if (!split) {
      text = map(text);
      return;
    }
    out += map(std::string_view(text).substr(piece));
    text = std::move(out);
  }

 private:
  std::string map(std::string_view text) const {
    if (text.empty()) return std::string();
    utf8proc_uint8_t* result = nullptr;
    const utf8proc_ssize_t length =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                     static_cast<utf8proc_ssize_t>(text.size()), &result, options_);
    if (length < 0) {
      throw TokenizerError(fmt::format("unicode normalization failed: {}", utf8proc_errmsg(length)));
    }
    std::string mapped(reinterpret_cast<const char*>(result), static_cast<std::size_t>(length));
    std::free(result);
    return mapped;
  }

  utf8proc_option_t options_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  void normalize(std::string& text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      std::size_t length = 0;
      const char32_t c = utf8::decode_at(text, pos, &length);
      pos += length;
      // Rust's char::to_lowercase (HF's Lowercase, per character) is the full mapping; its
      // one multi-character case without conditions (SpecialCasing.txt) is U+0130.
      if (c == 0x130) {
        out += "i\u0307";
        continue;
      }
      utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
    text = std::move(out);
  }
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    std::size_t begin = 0;
    std::size_t end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t length = 0;
        if (!unicode::is_whitespace(utf8::decode_at(text, begin, &length))) break;
        begin += length;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t length = 0;
        if (!unicode::is_whitespace(utf8::decode_at(text, start, &length))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_;
  bool right_;
};

}  // namespace

TextPattern parse_text_pattern(const Json& value, const JsonPlace& place) {
  if (!value.is_object() || value.size() != 1) {
    place.fail(R"(expected {"String": ...} or {"Regex": ...})");
  }
  if (value.contains("String")) return {require_string(value, "String", place), false};
  if (value.contains("Regex")) return {require_string(value, "Regex", place), true};
  place.fail(fmt::format(R"(unknown pattern kind '{}' (expected "String" or "Regex"))",
                         value.begin().key()));
}

std::unique_ptr<Normalizer> make_normalizer(const Json& value, const JsonPlace& place) {
  const std::string type = component_type(value, place);
  if (type == "Sequence") {
    const Json& list = require_field(value, "normalizers", place);
    if (!list.is_array()) (place / "normalizers").fail("expected an array");
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.size(); ++i) {
      steps.push_back(make_normalizer(list[i], (place / "normalizers")[i]));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(require_string(value, "prepend", place));
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(
        parse_text_pattern(require_field(value, "pattern", place), place / "pattern"),
        require_string(value, "content", place), place.describe());
  }
  if (type == "NFC") return std::make_unique<Utf8procNormalizer>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD") return std::make_unique<Utf8procNormalizer>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") {
    return std::make_unique<Utf8procNormalizer>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::make_unique<Utf8procNormalizer>(utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(optional_bool(value, "strip_left", true, place),
                                             optional_bool(value, "strip_right", true, place));
  }
  (place / "type").fail(fmt::format(
      "unsupported normalizer '{}' (supported: Sequence, Prepend, Replace, NFC, NFD, NFKC, NFKD, "
      "Lowercase, Strip)",
      type));
}

}  // namespace pagedllm::tokenizer
