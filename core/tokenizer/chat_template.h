#pragma once
// Chat templates: the model's own Jinja `chat_template` (tokenizer_config.json,
// chat_template.jinja or a GGUF file's tokenizer.chat_template), executed by the
// Jinja engine (core/tokenizer/jinja) as transformers' apply_chat_template runs it,
// so the prompt is byte-equal to transformers'. A serving config may replace it
// with a Jinja file of its own or with one of five built-in formats, for models
// that ship no template:
//   chatml  <|im_start|>{role}\n{content}<|im_end|>\n ... ; prompt: <|im_start|>assistant\n
//   llama3  {bos}<|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|> ... ;
//           prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
//   llama2  {bos}[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user|trim} [/INST] {assistant|trim} {eos} ...
//   mistral {bos}[INST] {user} [/INST]{assistant}{eos}[INST] ...
//   zephyr  <|{role}|>\n{content}{eos}\n ... ; prompt: <|assistant|>\n
// (each is the template its family published: docs/tokenizer.md).
// The rendered prompt contains special tokens: encode it with parse_special.

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/tokenizer/tokenizer_config.h"

namespace pagedllm::jinja {
class Template;
}

namespace pagedllm::tokenizer {

enum class ChatFormat { kChatMl, kLlama2, kLlama3, kMistral, kZephyr };

// One message as vLLM hands it to apply_chat_template: role and content, then what
// only some messages carry (an assistant's tool calls, a tool result's call id, a
// name). The template sees exactly the keys that are set, in this order.
struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_name, std::string text) : role(std::move(role_name)), content(std::move(text)) {}

  std::string role;
  std::string content;
  // An assistant's calls, [{"id", "type": "function", "function": {"name", "arguments": {...}}}],
  // in the client's key order; null: none.
  nlohmann::ordered_json tool_calls = nullptr;
  std::optional<std::string> tool_call_id;  // a tool message's
  std::optional<std::string> name;
};

// "chatml", "llama2", "llama3", "mistral", "zephyr".
std::optional<ChatFormat> parse_chat_format(std::string_view name);
std::string_view chat_format_name(ChatFormat format);
// The built-in format's Jinja source.
std::string_view chat_format_template(ChatFormat format);

class ChatTemplate {
 public:
  // TokenizerError naming `source` (and the line) when `jinja` is not a template
  // the engine runs. The special tokens are the template's bos_token, eos_token,
  // unk_token and pad_token, as transformers passes them.
  ChatTemplate(std::string_view jinja, std::string source, const TokenizerConfig& special_tokens);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // The model's template; `override_format` (from the serving config) replaces it
  // with a built-in one, and also works for models without a template.
  static ChatTemplate from_config(const TokenizerConfig& config, std::optional<ChatFormat> override_format);

  // TokenizerError for a conversation the template refuses (its raise_exception, an
  // error of the template, no messages), naming the template and the line. `tools`
  // is the template's `tools` variable: null (none offered) or a list of
  // {"type": "function", "function": {...}}, as apply_chat_template takes them.
  std::string render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& tools = nullptr) const;

  const std::string& source() const { return source_; }
  // The Jinja text (what the server reads to recognise the model's tool-call format).
  const std::string& text() const { return text_; }

 private:
  std::unique_ptr<jinja::Template> template_;
  std::string source_;
  std::string text_;
  std::optional<std::string> bos_token_;
  std::optional<std::string> eos_token_;
  std::optional<std::string> unk_token_;
  std::optional<std::string> pad_token_;
};

}  // namespace pagedllm::tokenizer
