#pragma once
// PCRE2 (UTF + UCP, JIT-compiled) regular expressions for the patterns in
// tokenizer.json files, which HF tokenizers runs with Oniguruma.
//
// One translation keeps the two engines in agreement: `\s`/`\S` outside
// character classes and `\s` inside them are rewritten to Oniguruma's Unicode
// whitespace set (PCRE2's UCP `\s` also matches U+180E).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagedllm::tokenizer {

struct RegexMatch {
  std::size_t begin;
  std::size_t end;
};

class Regex {
 public:
  enum class Syntax { kPattern, kLiteral };

  // Throws TokenizerError naming `where` when the pattern does not compile.
  // kLiteral matches `pattern` as plain text (tokenizer.json's {"String": ...}).
  Regex(std::string_view pattern, const std::string& where, Syntax syntax = Syntax::kPattern);

  // Every non-overlapping match, left to right, like Rust's find_iter. `text`
  // must be valid UTF-8 (callers validate once, at the API boundary).
  std::vector<RegexMatch> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
};

// Exposed for tests: the pattern as handed to PCRE2.
std::string translate_pattern_for_pcre2(std::string_view pattern);

}  // namespace pagedllm::tokenizer
