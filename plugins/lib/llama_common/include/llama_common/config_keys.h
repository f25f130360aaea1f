#pragma once
// The one list of the checkpoint keys pagedllm reads without using: config.json keys
// and GGUF metadata keys that cannot change what the forward computes, each with why.
// Every other key a reader does not consume is refused naming the key
// (llama_config.cpp, gguf_config.cpp), so that a setting pagedllm does not understand
// — a new spelling of the RoPE base, a sliding window, a soft-cap — is never ignored.
// A key that pagedllm reads is not listed here: its reader checks its value.

#include <string_view>

namespace pagedllm::llama {

struct HarmlessKey {
  std::string_view key;
  std::string_view why;
};

// A config.json key read by no reader that may pass with any value (null-valued keys
// pass anyway: transformers reads null as "the default").
const HarmlessKey* find_harmless_config_key(std::string_view key);

// A GGUF metadata key outside general.* and tokenizer.* (whose owners read what they
// need) that the model reader may pass unread; `arch_key` is the key with its
// "<architecture>." prefix removed ("rope.scaling.finetuned").
const HarmlessKey* find_harmless_gguf_arch_key(std::string_view arch_key);

}  // namespace pagedllm::llama
