#pragma once
// Chat templates: the common formats, detected from a model's Jinja
// chat_template and rendered natively (no Jinja interpreter).
//
// Formats and the exact text they produce (docs/tokenizer.md has examples):
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ... ; prompt: <|im_start|>assistant\n
//           (a default system message found in the template is added when the
//           conversation has none, like Qwen's)
//   llama3  {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|> ... ;
//           prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
//   llama2  {bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user|trim} [/INST] {assistant|trim} {eos} ...
//   mistral {bos}[INST] {user} [/INST]{assistant}{eos}[INST] ...
//   zephyr  <|{role}|>\n{content}{eos}\n ... ; prompt: <|assistant|>\n
// The rendered prompt contains special tokens: encode it with parse_special.

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/tokenizer/tokenizer_config.h"

namespace pagedllm::tokenizer {

enum class ChatFormat { kChatMl, kLlama2, kLlama3, kMistral, kZephyr };

struct ChatMessage {
  std::string role;
  std::string content;
};

// "chatml", "llama2", "llama3", "mistral", "zephyr".
std::optional<ChatFormat> parse_chat_format(std::string_view name);
std::string_view chat_format_name(ChatFormat format);

// The format of a Jinja chat template; TokenizerError naming `source` when it
// is none of the known ones.
ChatFormat detect_chat_format(std::string_view jinja, const std::string& source);

class ChatTemplate {
 public:
  ChatTemplate(ChatFormat format, std::string bos_token, std::string eos_token,
               std::optional<std::string> default_system_message = std::nullopt);

  // The model's template from tokenizer_config.json (or chat_template.jinja);
  // `override_format` (from the serving config) skips detection and also
  // works for models without a template.
  static ChatTemplate from_config(const TokenizerConfig& config, std::optional<ChatFormat> override_format);

  // TokenizerError for conversations the format cannot express (no messages, roles
  // that do not alternate in llama2/mistral, a system message in mistral).
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

  ChatFormat format() const { return format_; }

 private:
  ChatFormat format_;
  std::string bos_token_;
  std::string eos_token_;
  std::optional<std::string> default_system_message_;
};

}  // namespace pagedllm::tokenizer
