#include "core/tokenizer/stop_matcher.h"

#include <algorithm>

#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {

StopMatcher::StopMatcher(std::vector<std::string> stop_strings, bool include_stop_string)
    : stop_strings_(std::move(stop_strings)), include_stop_string_(include_stop_string) {
  for (const std::string& stop : stop_strings_) {
    if (stop.empty()) throw TokenizerError("stop strings must not be empty");
  }
}

StopMatch StopMatcher::push(std::string_view text) {
  StopMatch result;
  if (stopped_) {
    result.stopped = true;
    return result;
  }
  pending_ += text;

  // The stop string that completes first (as text arrives) wins; on a tie,
  // the one that starts first. Pending text never holds a whole stop string
  // from earlier pushes, so each first occurrence is the earliest ending one.
  std::size_t best_position = std::string::npos;
  std::size_t best_end = std::string::npos;
  std::size_t best_index = 0;
  for (std::size_t i = 0; i < stop_strings_.size(); ++i) {
    // A match must end after the unchecked text (whole stop strings there were suspended).
    const std::size_t length = stop_strings_[i].size();
    const std::size_t position = pending_.find(stop_strings_[i], unchecked_ >= length ? unchecked_ - length + 1 : 0);
    if (position == std::string::npos) continue;
    const std::size_t end = position + stop_strings_[i].size();
    if (end < best_end || (end == best_end && position < best_position)) {
      best_position = position;
      best_end = end;
      best_index = i;
    }
  }
  if (best_position != std::string::npos) {
    const std::size_t end = best_position + (include_stop_string_ ? stop_strings_[best_index].size() : 0);
    result.text = pending_.substr(0, end);
    result.stopped = true;
    result.stop_index = best_index;
    stopped_ = true;
    pending_.clear();
    return result;
  }
  result.text = hold_back();
  return result;
}

std::string StopMatcher::push_unchecked(std::string_view text) {
  if (stopped_) return {};
  pending_ += text;
  unchecked_ = pending_.size();
  return hold_back();
}

std::string StopMatcher::hold_back() {
  // Hold back the longest suffix that some stop string starts with.
  std::size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    const std::size_t longest = std::min(stop.size() - 1, pending_.size());
    for (std::size_t length = longest; length > hold; --length) {
      if (std::string_view(pending_).substr(pending_.size() - length) == std::string_view(stop).substr(0, length)) {
        hold = length;
        break;
      }
    }
  }
  std::string safe = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, safe.size());
  unchecked_ = unchecked_ > safe.size() ? unchecked_ - safe.size() : 0;
  return safe;
}

std::string StopMatcher::finish() {
  std::string rest = std::move(pending_);
  pending_.clear();
  return rest;
}

}  // namespace pagedllm::tokenizer
