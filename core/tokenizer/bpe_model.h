#pragma once
// tokenizer.json "model" of type BPE: vocabulary, ranked merges and the merge
// loop HF tokenizers runs on each pre-tokenized word.
//
// Merges are a hash map (left id, right id) -> (rank, merged id); each word is
// merged with a min-heap over (rank, position) on a linked list of symbols, as
// HF's Word::merge_all does, so ties and overlapping pairs resolve identically.
// Results for short words are cached (thread-safe).

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/token_id.h"

namespace pagedllm::tokenizer {

// Hash for heterogeneous (string_view) lookups in string-keyed maps.
struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const { return std::hash<std::string_view>{}(text); }
};

using Vocabulary = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  // Words found whole in the vocabulary skip the merges (Llama 3).
  bool ignore_merges = false;
};

class BpeModel {
 public:
  // `merges` in rank order. Throws TokenizerError (naming `source`) when a
  // merge names a token missing from the vocabulary.
  BpeModel(Vocabulary vocabulary, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& source);
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // Reads {"type": "BPE", "vocab": ..., "merges": [...], ...}; merges may be
  // "a b" strings or ["a", "b"] pairs. A non-zero `dropout` is refused
  // (sampled tokenization has no place in serving).
  static std::unique_ptr<BpeModel> from_json(const Json& value, const JsonPlace& place);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;
  // nullptr for ids outside the vocabulary.
  const std::string* id_to_token(TokenId id) const;
  // One past the largest id.
  std::size_t vocab_size() const { return id_to_token_.size(); }

 private:
  struct Merge {
    std::uint32_t rank;
    TokenId merged;
  };
  static std::uint64_t pair_key(TokenId left, TokenId right) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
           static_cast<std::uint32_t>(right);
  }
  const Merge* find_merge(TokenId left, TokenId right) const;
  void merge_word(std::string_view word, std::vector<TokenId>& out) const;

  Vocabulary vocabulary_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_present_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<TokenId> unk_id_;
  // "<0x00>".."<0xFF>" when byte_fallback is on and all 256 exist.
  std::optional<std::vector<TokenId>> byte_tokens_;

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<TokenId>, StringHash, std::equal_to<>> cache_;
};

}  // namespace pagedllm::tokenizer
