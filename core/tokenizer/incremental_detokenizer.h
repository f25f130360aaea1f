#pragma once
// Streaming detokenization (vLLM's prefix/read offsets).
//
// Token ids arrive one at a time. The detokenizer decodes a small window
// ids[prefix_offset:] and compares it with the window's already-emitted part
// ids[prefix_offset:read_offset]; the difference is emitted only when it is
// non-empty, extends the emitted part, and does not end in U+FFFD (a
// multi-byte character whose remaining bytes are still to come). Windows start
// at a token that was already emitted, so decoder effects on the first token
// (Metaspace / Strip dropping the leading space) fall on text already shown.
//
// With a ByteFallback decoder, nothing is emitted while a run of <0xNN>
// tokens continues: HF decodes the run as a whole (one U+FFFD per byte when
// the run is invalid UTF-8), so a complete character inside it is not final
// until the run ends.
//
// Guarantee: all push() results + finish() == decode(ids), and with a prompt,
// decode(prompt) + results == decode(prompt + ids), for the decoders HF ships
// (ByteLevel, Metaspace, Replace/ByteFallback/Fuse/Strip): windows start at
// emission boundaries, where those decoders' output concatenates. Emitted text
// is always valid UTF-8. With skip_special_tokens, special ids are dropped on
// arrival, as decode drops them before the decoder runs.

#include <span>
#include <string>
#include <vector>

#include "core/tokenizer/tokenizer.h"

namespace pagedllm::tokenizer {

class IncrementalDetokenizer {
 public:
  // `prompt_ids` give context (a leading space after the prompt is kept) but
  // their text is not emitted. `tokenizer` must outlive the detokenizer.
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                         std::span<const TokenId> prompt_ids = {});

  // Adds one generated id; returns the newly final text (often empty).
  std::string push(TokenId id);
  // End of the stream: whatever is still held back (an incomplete character
  // becomes U+FFFD, as in decode).
  std::string finish();

  // Everything emitted so far.
  const std::string& emitted() const { return emitted_; }

 private:
  std::string decode_range(std::size_t begin, std::size_t end) const;

  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<TokenId> ids_;  // prompt + generated ids that decode keeps
  std::size_t prefix_offset_ = 0;
  std::size_t read_offset_ = 0;
  std::string prompt_text_;
  std::string emitted_;
};

}  // namespace pagedllm::tokenizer
