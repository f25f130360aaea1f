#pragma once
// tokenizer.json "decoder": turns the token strings of an id sequence back
// into text, one chain step at a time like HF's decode_chain.
//
// Supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip. Anything else is refused with a TokenizerError.

#include <memory>
#include <string>
#include <vector>

#include "core/tokenizer/json_fields.h"

namespace pagedllm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the list of token strings (steps may merge or split entries).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const Json& value, const JsonPlace& place);

}  // namespace pagedllm::tokenizer
