#include "core/tokenizer/added_vocabulary.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/tokenizer/unicode_properties.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

std::size_t previous_char_start(std::string_view text, std::size_t end) {
  std::size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return start;
}

char32_t last_char(std::string_view text) {
  std::size_t length = 0;
  return utf8::decode_at(text, previous_char_start(text, text.size()), &length);
}

char32_t first_char(std::string_view text) {
  std::size_t length = 0;
  return utf8::decode_at(text, 0, &length);
}

// Start of the whitespace run that ends `text`.
std::size_t trailing_whitespace_start(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0) {
    const std::size_t start = previous_char_start(text, end);
    std::size_t length = 0;
    if (!unicode::is_whitespace(utf8::decode_at(text, start, &length))) break;
    end = start;
  }
  return end;
}

// Length of the whitespace run that starts `text`.
std::size_t leading_whitespace_length(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t length = 0;
    if (!unicode::is_whitespace(utf8::decode_at(text, pos, &length))) break;
    pos += length;
  }
  return pos;
}

}  // namespace

void AddedVocabulary::Matcher::add(std::string_view pattern, std::size_t token_index) {
  if (pattern.empty()) return;
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  int node = 0;
  for (const char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    int next = child(node, byte);
    if (next < 0) {
      next = static_cast<int>(nodes_.size());
      nodes_[static_cast<std::size_t>(node)].children.emplace_back(byte, next);
      nodes_.emplace_back();
    }
    node = next;
  }
  // The first token with a given content wins, like HF's map from content.
  if (nodes_[static_cast<std::size_t>(node)].token_index < 0) {
    nodes_[static_cast<std::size_t>(node)].token_index = static_cast<int>(token_index);
  }
}

int AddedVocabulary::Matcher::child(int node, unsigned char byte) const {
  for (const auto& [edge, target] : nodes_[static_cast<std::size_t>(node)].children) {
    if (edge == byte) return target;
  }
  return -1;
}

std::optional<AddedVocabulary::Matcher::Match> AddedVocabulary::Matcher::find(std::string_view text,
                                                                              std::size_t from) const {
  for (std::size_t begin = from; begin < text.size(); ++begin) {
    if (!first_byte_[static_cast<unsigned char>(text[begin])]) continue;
    int node = 0;
    std::optional<Match> longest;
    for (std::size_t pos = begin; pos < text.size(); ++pos) {
      node = child(node, static_cast<unsigned char>(text[pos]));
      if (node < 0) break;
      const int token_index = nodes_[static_cast<std::size_t>(node)].token_index;
      if (token_index >= 0) longest = Match{begin, pos + 1, static_cast<std::size_t>(token_index)};
    }
    if (longest) return longest;
  }
  return std::nullopt;
}

std::vector<AddedToken> AddedVocabulary::parse(const Json& value, const JsonPlace& place) {
  std::vector<AddedToken> tokens;
  if (value.is_null()) return tokens;
  if (!value.is_array()) place.fail("expected an array of added tokens");
  for (std::size_t i = 0; i < value.size(); ++i) {
    const JsonPlace at = place[i];
    const Json& entry = value[i];
    AddedToken token;
    const long long id = optional_integer(entry, "id", -1, at);
    if (id < 0 || id > kMaxTokenId) at.fail(fmt::format("missing 'id', or outside 0..{}", kMaxTokenId));
    token.id = static_cast<TokenId>(id);
    token.content = require_string(entry, "content", at);
    if (token.content.empty()) at.fail("'content' is empty");
    if (utf8::find_invalid(token.content)) at.fail("'content' is not valid UTF-8");
    token.single_word = optional_bool(entry, "single_word", false, at);
    token.lstrip = optional_bool(entry, "lstrip", false, at);
    token.rstrip = optional_bool(entry, "rstrip", false, at);
    token.special = optional_bool(entry, "special", false, at);
    token.normalized = optional_bool(entry, "normalized", !token.special, at);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (std::size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& token = tokens_[i];
    if (!token.normalized) {
      raw_matcher_.add(token.content, i);
      continue;
    }
    std::string normalized = token.content;
    if (normalizer != nullptr) normalizer->normalize(normalized);
    normalized_matcher_.add(normalized, i);
  }
}

const AddedToken* AddedVocabulary::find(TokenId id) const {
  for (const AddedToken& token : tokens_) {
    if (token.id == id) return &token;
  }
  return nullptr;
}

std::optional<TokenId> AddedVocabulary::find(std::string_view content) const {
  for (const AddedToken& token : tokens_) {
    if (token.content == content) return token.id;
  }
  return std::nullopt;
}

bool AddedVocabulary::is_special_content(std::string_view content) const {
  return std::any_of(tokens_.begin(), tokens_.end(),
                     [&](const AddedToken& token) { return token.special && token.content == content; });
}

std::vector<AddedVocabulary::Piece> AddedVocabulary::find_pieces(std::string_view text, const Matcher& matcher,
                                                                 bool parse_special) const {
  std::vector<Piece> pieces;
  std::size_t start_offset = 0;
  std::size_t search_from = 0;
  while (!matcher.empty()) {
    const std::optional<Matcher::Match> match = matcher.find(text, search_from);
    if (!match) break;
    search_from = match->end;
    const AddedToken& token = tokens_[match->token_index];
    if (token.special && !parse_special) continue;
    std::size_t start = match->begin;
    std::size_t stop = match->end;
    if (token.single_word) {
      const bool space_before = start == 0 || !unicode::is_word_character(last_char(text.substr(0, start)));
      const bool space_after = stop == text.size() || !unicode::is_word_character(first_char(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_whitespace_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_whitespace_length(text.substr(stop));
    if (start_offset < start) pieces.push_back({start_offset, start, std::nullopt});
    pieces.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) pieces.push_back({start_offset, text.size(), std::nullopt});
  return pieces;
}

std::vector<InputSegment> AddedVocabulary::split(std::string_view text, bool parse_special,
                                                 const Normalizer* normalizer) const {
  std::vector<InputSegment> segments;
  for (const Piece& raw : find_pieces(text, raw_matcher_, parse_special)) {
    if (raw.token) {
      segments.push_back({std::string(), raw.token, false});
      continue;
    }
    std::string normalized(text.substr(raw.begin, raw.end - raw.begin));
    if (normalizer != nullptr) normalizer->normalize(normalized);
    for (const Piece& piece : find_pieces(normalized, normalized_matcher_, parse_special)) {
      if (piece.token) {
        segments.push_back({std::string(), piece.token, false});
      } else {
        segments.push_back({normalized.substr(piece.begin, piece.end - piece.begin), std::nullopt,
                            raw.begin == 0 && piece.begin == 0});
      }
    }
  }
  return segments;
}

}  // namespace pagedllm::tokenizer
