#include "core/server/reasoning_parser.h"

#include <algorithm>

namespace pagedllm::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

// The length of the longest suffix of `text` that is a proper prefix of `tag`: what may still become the tag.
std::size_t partial_tag(std::string_view text, std::string_view tag) {
  for (std::size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

}  // namespace

std::optional<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  if (name == "none") return ReasoningFormat::kNone;
  if (name == "deepseek_r1") return ReasoningFormat::kDeepSeekR1;
  if (name == "qwen3") return ReasoningFormat::kQwen3;
  return std::nullopt;
}

ReasoningSplitter::ReasoningSplitter(ReasoningFormat format) {
  switch (format) {
    case ReasoningFormat::kNone: state_ = State::kContent; break;
    case ReasoningFormat::kDeepSeekR1: state_ = State::kReasoning; may_open_ = true; break;
    case ReasoningFormat::kQwen3: state_ = State::kUndecided; may_open_ = true; break;
  }
}

ReasoningSplitter::Parts ReasoningSplitter::add(std::string_view text) {
  held_ += text;
  Parts parts;
  settle(parts, false);
  return parts;
}

ReasoningSplitter::Parts ReasoningSplitter::finish() {
  Parts parts;
  settle(parts, true);
  return parts;
}

void ReasoningSplitter::settle(Parts& parts, bool at_end) {
  if (may_open_) {
    // A leading <think>: dropped; decided by its first bytes, or by the end.
    if (held_.starts_with(kOpen)) {
      held_.erase(0, kOpen.size());
      may_open_ = false;
      state_ = State::kReasoning;
    } else if (!at_end && kOpen.starts_with(held_)) {
      return;
    } else {
      may_open_ = false;
      if (state_ == State::kUndecided) state_ = State::kContent;  // qwen3: no <think>, no reasoning
    }
  }
  if (state_ == State::kReasoning) {
    const std::size_t close = held_.find(kClose);
    if (close != std::string::npos) {
      parts.reasoning += held_.substr(0, close);
      held_.erase(0, close + kClose.size());
      state_ = State::kContent;
    } else {
      const std::size_t keep = at_end ? 0 : partial_tag(held_, kClose);
      parts.reasoning += held_.substr(0, held_.size() - keep);
      held_.erase(0, held_.size() - keep);
      return;
    }
  }
  parts.content += held_;
  held_.clear();
}

}  // namespace pagedllm::server
