#include "core/tokenizer/chat_template.h"

#include <fmt/format.h>

#include "core/tokenizer/jinja/template.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::tokenizer {
namespace {

// The templates the formats' families published in their tokenizer_config.json:
// OpenHermes-2.5 (ChatML), Llama-2-7b-chat-hf, Meta-Llama-3-8B-Instruct,
// Mistral-7B-Instruct-v0.1 and TinyLlama-1.1B-Chat-v1.0 (Zephyr).
constexpr std::string_view kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
constexpr std::string_view kLlama2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] "
    "== 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
constexpr std::string_view kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 "
    "%}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
constexpr std::string_view kMistral =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == "
    "'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles "
    "are supported!') }}{% endif %}{% endfor %}";
constexpr std::string_view kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% "
    "elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif "
    "%}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

jinja::Value optional_string(const std::optional<std::string>& s) { return s ? jinja::Value(*s) : jinja::Value(); }

}  // namespace

std::optional<ChatFormat> parse_chat_format(std::string_view name) {
  if (name == "chatml") return ChatFormat::kChatMl;
  if (name == "llama2") return ChatFormat::kLlama2;
  if (name == "llama3") return ChatFormat::kLlama3;
  if (name == "mistral") return ChatFormat::kMistral;
  if (name == "zephyr") return ChatFormat::kZephyr;
  return std::nullopt;
}

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl: return "chatml";
    case ChatFormat::kLlama2: return "llama2";
    case ChatFormat::kLlama3: return "llama3";
    case ChatFormat::kMistral: return "mistral";
    case ChatFormat::kZephyr: return "zephyr";
  }
  return "unknown";
}

std::string_view chat_format_template(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl: return kChatMl;
    case ChatFormat::kLlama2: return kLlama2;
    case ChatFormat::kLlama3: return kLlama3;
    case ChatFormat::kMistral: return kMistral;
    case ChatFormat::kZephyr: return kZephyr;
  }
  return kChatMl;
}

ChatTemplate::ChatTemplate(std::string_view jinja, std::string source, const TokenizerConfig& special_tokens)
    : source_(std::move(source)),
      text_(jinja),
      bos_token_(special_tokens.bos_token),
      eos_token_(special_tokens.eos_token),
      unk_token_(special_tokens.unk_token),
      pad_token_(special_tokens.pad_token) {
  try {
    template_ = std::make_unique<jinja::Template>(jinja);
  } catch (const jinja::TemplateError& error) {
    throw TokenizerError(fmt::format("{}: the chat template cannot be parsed: {}", source_, error.what()));
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::from_config(const TokenizerConfig& config, std::optional<ChatFormat> override_format) {
  if (override_format) {
    return ChatTemplate(chat_format_template(*override_format),
                        fmt::format("the built-in {} chat template", chat_format_name(*override_format)), config);
  }
  if (!config.chat_template) {
    throw TokenizerError(fmt::format("{}: no chat_template; give the config a template file or a built-in format "
                                     "(model.chat_template: chatml, llama2, llama3, mistral or zephyr)",
                                     config.source.empty() ? std::string("tokenizer_config.json") : config.source));
  }
  return ChatTemplate(*config.chat_template, config.chat_template_source, config);
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& tools) const {
  // transformers' apply_chat_template cannot render an empty conversation either.
  if (messages.empty()) throw TokenizerError("chat: the conversation has no messages");
  std::vector<jinja::Value> message_values;
  message_values.reserve(messages.size());
  for (const ChatMessage& message : messages) {
    jinja::Value m = jinja::Value::dict();
    m.dict_entries().set("role", jinja::Value(message.role));
    m.dict_entries().set("content", jinja::Value(message.content));
    if (!message.tool_calls.is_null()) m.dict_entries().set("tool_calls", jinja::Value::from_json(message.tool_calls));
    if (message.tool_call_id) m.dict_entries().set("tool_call_id", jinja::Value(*message.tool_call_id));
    if (message.name) m.dict_entries().set("name", jinja::Value(*message.name));
    message_values.push_back(std::move(m));
  }
  // As transformers' apply_chat_template: the special tokens it knows, tools and
  // documents None when not given.
  jinja::Value variables = jinja::Value::dict();
  jinja::Dict& v = variables.dict_entries();
  v.set("messages", jinja::Value::list(std::move(message_values)));
  v.set("tools", jinja::Value::from_json(tools));
  v.set("documents", jinja::Value::none());
  v.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  for (const auto& [name, token] : {std::pair{"bos_token", &bos_token_}, std::pair{"eos_token", &eos_token_},
                                    std::pair{"unk_token", &unk_token_}, std::pair{"pad_token", &pad_token_}}) {
    if (*token) v.set(name, optional_string(*token));
  }
  try {
    return template_->render(variables);
  } catch (const jinja::TemplateError& error) {
    if (error.raised_by_template()) {
      throw TokenizerError(fmt::format("the chat template refuses this conversation: {}", error.message()));
    }
    throw TokenizerError(fmt::format("{}: the chat template failed: {}", source_, error.what()));
  }
}

}  // namespace pagedllm::tokenizer
