#pragma once
// tokenizer_config.json: what transformers adds on top of tokenizer.json —
// the BOS/EOS/PAD/UNK token strings, add_bos_token/add_eos_token, the
// tokenizer class and the Jinja chat template(s).

#include <optional>
#include <string>

#include "core/tokenizer/json_fields.h"

namespace pagedllm::tokenizer {

struct TokenizerConfig {
  std::string source;  // the file it came from ("" when defaulted)
  std::string tokenizer_class;
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // The default chat template ("chat_template" as a string, or the entry named
  // "default" of a list of {name, template}); chat_template.jinja next to the
  // file takes precedence when present.
  std::optional<std::string> chat_template;
  std::string chat_template_source;

  // Token fields may be plain strings or {"content": ..., "__type": "AddedToken"}.
  static TokenizerConfig from_json(const Json& value, const std::string& source);
  static TokenizerConfig from_file(const std::string& path);

  // For the tokenizer classes whose transformers (4.57) implementation rebuilds the
  // post-processor from add_bos_token/add_eos_token, the default of add_bos_token:
  // true for Llama, CodeLlama, Gemma and Cohere, false for GPT-NeoX. nullopt for every
  // other class: transformers ignores the flags there and tokenizer.json's
  // post-processor applies.
  std::optional<bool> special_tokens_template_default_bos() const;
};

}  // namespace pagedllm::tokenizer
