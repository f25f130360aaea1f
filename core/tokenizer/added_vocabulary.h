#pragma once
// tokenizer.json "added_tokens": tokens matched in the raw input before any
// normalization or pre-tokenization, with HF's semantics:
//
// - matching is leftmost-longest over all added tokens;
// - tokens with normalized=false are matched in the raw text, those with
//   normalized=true in the normalized text (against their normalized content);
// - lstrip / rstrip swallow the whitespace before / after a match;
// - single_word only matches when not glued to a word character;
// - special tokens are only recognised when the caller asks (parse_special):
//   user text never produces them by accident. HF recognises them by default;
//   parse_special=false is HF's `encode_special_tokens=True`.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/normalizer.h"
#include "core/tokenizer/token_id.h"

namespace pagedllm::tokenizer {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A piece of input: an added token, or normalized text for the pre-tokenizer.
struct InputSegment {
  std::string text;
  std::optional<TokenId> token;
  bool at_input_start = false;
};

class AddedVocabulary {
 public:
  // `normalizer` (may be null) normalizes the contents of normalized tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  static std::vector<AddedToken> parse(const Json& value, const JsonPlace& place);

  // Splits `text` around added tokens and normalizes the text in between.
  std::vector<InputSegment> split(std::string_view text, bool parse_special, const Normalizer* normalizer) const;

  const AddedToken* find(TokenId id) const;
  std::optional<TokenId> find(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // A byte trie over token contents for leftmost-longest matching.
  class Matcher {
   public:
    void add(std::string_view pattern, std::size_t token_index);
    struct Match {
      std::size_t begin;
      std::size_t end;
      std::size_t token_index;
    };
    std::optional<Match> find(std::string_view text, std::size_t from) const;
    bool empty() const { return nodes_.size() <= 1; }

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int>> children;
      int token_index = -1;
    };
    int child(int node, unsigned char byte) const;
    std::vector<Node> nodes_{Node{}};
    bool first_byte_[256] = {};
  };

  struct Piece {
    std::size_t begin;
    std::size_t end;
    std::optional<TokenId> token;
  };
  std::vector<Piece> find_pieces(std::string_view text, const Matcher& matcher, bool parse_special) const;

  std::vector<AddedToken> tokens_;
  Matcher raw_matcher_;
  Matcher normalized_matcher_;
};

}  // namespace pagedllm::tokenizer
