#pragma once
// Token ids as the engine passes them around (int32 like vLLM and the model's
// embedding lookup).

#include <cstdint>

namespace pagedllm::tokenizer {

using TokenId = std::int32_t;

// The largest id a tokenizer file may give a token. Ids index dense tables
// (id -> token here, the embedding's rows in the model), so one huge id in a
// hostile file would cost gigabytes: refused instead. The largest vocabularies in
// use hold about 262k tokens (Gemma 3), 16 times below this.
inline constexpr TokenId kMaxTokenId = (1 << 22) - 1;

}  // namespace pagedllm::tokenizer
