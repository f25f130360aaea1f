#define PCRE2_CODE_UNIT_WIDTH 8
#include "core/tokenizer/regex.h"

#include <pcre2.h>

#include <cstdint>

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

constexpr std::string_view kWhitespaceSet =
    "\\t\\n\\x0B\\f\\r\\x20\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string translate_pattern_for_pcre2(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char next = pattern[i + 1];
      if (next == 's' && in_class) {
        out += kWhitespaceSet;
      } else if (next == 's') {
        out += fmt::format("[{}]", kWhitespaceSet);
      } else if (next == 'S' && !in_class) {
        out += fmt::format("[^{}]", kWhitespaceSet);
      } else {
        out.push_back(c);
        out.push_back(next);
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' (or '^]') right after '[' is a literal, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, const std::string& where, Syntax syntax) {
  std::string translated;
  std::uint32_t options = PCRE2_UTF | PCRE2_UCP;
  switch (syntax) {
    case Syntax::kPattern:
      translated = translate_pattern_for_pcre2(pattern);
      break;
    case Syntax::kLiteral:
      translated = pattern;
      options |= PCRE2_LITERAL;
      break;
  }
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  auto compiled = std::make_shared<Compiled>();
  compiled->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                 options, &error_code, &error_offset, nullptr);
  if (compiled->code == nullptr) {
    throw TokenizerError(fmt::format("{}: regex /{}/ does not compile at offset {}: {}", where,
                                     pattern, error_offset, pcre2_message(error_code)));
  }
  // JIT is an optimisation: without it (unsupported CPU) matching still works.
  pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);
  compiled_ = std::move(compiled);
}

std::vector<RegexMatch> Regex::find_all(std::string_view text) const {
  std::vector<RegexMatch> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t offset = 0;
  while (offset <= text.size()) {
    const int rc = pcre2_match(compiled_->code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK,
                               data, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(data);
      throw TokenizerError(fmt::format("regex match failed: {}", pcre2_message(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const RegexMatch match{ovector[0], ovector[1]};
    if (match.end == match.begin) {
      // Empty matches split nothing; step over one character like find_iter does.
      if (match.begin >= text.size()) break;
      offset = match.begin + utf8::sequence_length(static_cast<unsigned char>(text[match.begin]));
      continue;
    }
    matches.push_back(match);
    offset = match.end;
  }
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace pagedllm::tokenizer
