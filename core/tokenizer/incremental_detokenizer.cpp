#include "core/tokenizer/incremental_detokenizer.h"

#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

// How many prompt tokens the first window looks back (vLLM's choice): enough
// for a multi-token character, few enough to stay cheap.
constexpr std::size_t kPromptContextTokens = 5;

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::span<const TokenId> prompt_ids)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {
  for (const TokenId id : prompt_ids) {
    if (tokenizer_->keeps_in_decode(id, skip_special_tokens_)) ids_.push_back(id);
  }
  read_offset_ = ids_.size();
  prefix_offset_ = ids_.size() > kPromptContextTokens ? ids_.size() - kPromptContextTokens : 0;
  prompt_text_ = tokenizer_->decode(ids_, skip_special_tokens_);
}

std::string IncrementalDetokenizer::decode_range(std::size_t begin, std::size_t end) const {
  return tokenizer_->decode(std::span<const TokenId>(ids_).subspan(begin, end - begin), skip_special_tokens_);
}

std::string IncrementalDetokenizer::push(TokenId id) {
  if (!tokenizer_->keeps_in_decode(id, skip_special_tokens_)) return {};
  ids_.push_back(id);
  if (tokenizer_->is_fallback_byte(id)) return {};
  const std::string prefix_text = decode_range(prefix_offset_, read_offset_);
  const std::string new_text = decode_range(prefix_offset_, ids_.size());
  if (new_text.size() <= prefix_text.size() || !new_text.starts_with(prefix_text) ||
      new_text.ends_with(utf8::kReplacementCharacter)) {
    return {};
  }
  std::string chunk = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  emitted_ += chunk;
  return chunk;
}

std::string IncrementalDetokenizer::finish() {
  // One full decode settles what the windows held back.
  const std::string full = tokenizer_->decode(ids_, skip_special_tokens_);
  std::string rest;
  if (full.size() >= prompt_text_.size() + emitted_.size() && full.starts_with(prompt_text_) &&
      std::string_view(full).substr(prompt_text_.size()).starts_with(emitted_)) {
    rest = full.substr(prompt_text_.size() + emitted_.size());
  } else {
    const std::string prefix_text = decode_range(prefix_offset_, read_offset_);
    const std::string new_text = decode_range(prefix_offset_, ids_.size());
    if (new_text.starts_with(prefix_text)) rest = new_text.substr(prefix_text.size());
  }
  prefix_offset_ = read_offset_ = ids_.size();
  emitted_ += rest;
  return rest;
}

}  // namespace pagedllm::tokenizer
