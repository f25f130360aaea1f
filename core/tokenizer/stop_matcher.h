#pragma once
// Stop strings across token boundaries.
//
// Text arrives in chunks (detokenizer output). The matcher emits text as soon
// as it cannot be part of a stop string: it holds back the longest suffix of
// the pending text that is a prefix of some stop string. The stream stops at
// the first stop string to complete as text arrives (on a tie, the one that
// starts first): the text before it is emitted (plus the stop string itself
// when include_stop_string) and the matcher is done. Note that this is not
// always the stop string that starts first: with stops "abcd" and "bc",
// "xabcd" stops at "bc" (it completes first) and emits "xa".

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pagedllm::tokenizer {

struct StopMatch {
  std::string text;                       // safe to show now
  bool stopped = false;                   // a stop string completed
  std::optional<std::size_t> stop_index;  // which one (index into the constructor's list)
};

class StopMatcher {
 public:
  // Empty stop strings are refused (TokenizerError): they would match everywhere.
  explicit StopMatcher(std::vector<std::string> stop_strings, bool include_stop_string = false);

  StopMatch push(std::string_view text);
  // Text in which no stop string may end (vLLM's min_tokens): returns what is
  // safe to show; a stop string that starts in it and ends in a later push()
  // still counts.
  std::string push_unchecked(std::string_view text);
  // End of stream without a stop: the held-back text.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  // Emits pending text except its longest suffix that some stop string starts with.
  std::string hold_back();

  std::vector<std::string> stop_strings_;
  bool include_stop_string_;
  std::string pending_;
  std::size_t unchecked_ = 0;  // leading bytes of pending_ from push_unchecked(): no match may end there
  bool stopped_ = false;
};

}  // namespace pagedllm::tokenizer
