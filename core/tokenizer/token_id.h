#pragma once
// Token ids as the engine passes them around (int32 like vLLM and the model's
// embedding lookup). Ids in tokenizer files are non-negative and < 2^31.

#include <cstdint>

namespace pagedllm::tokenizer {

using TokenId = std::int32_t;

}  // namespace pagedllm::tokenizer
