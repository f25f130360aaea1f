#include "core/tokenizer/chat_template.h"

#include <fmt/format.h>

#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/unicode_properties.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::tokenizer {
namespace {

// Python's str.strip(): Unicode whitespace plus the ASCII separators 0x1C-0x1F.
bool is_python_space(char32_t c) { return unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

std::string python_strip(std::string_view text) {
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t length = 0;
    if (!is_python_space(utf8::decode_at(text, begin, &length))) break;
    begin += length;
  }
  std::size_t end = text.size();
  while (end > begin) {
    std::size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    std::size_t length = 0;
    if (!is_python_space(utf8::decode_at(text, start, &length))) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

// The literal default system prompt of a ChatML template, e.g. Qwen2's
// '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n'. The template's newline is
// either a real one (tokenizer_config.json's JSON "\n", as Qwen publishes it) or Jinja's
// escape (JSON "\\n").
std::optional<std::string> chatml_default_system(std::string_view jinja) {
  constexpr std::string_view kOpen = "<|im_start|>system";
  constexpr std::string_view kClose = "<|im_end|>";
  const std::size_t open = jinja.find(kOpen);
  if (open == std::string_view::npos) return std::nullopt;
  std::size_t begin = open + kOpen.size();
  if (jinja.substr(begin, 1) == "\n") {
    begin += 1;
  } else if (jinja.substr(begin, 2) == "\\n") {
    begin += 2;
  } else {
    return std::nullopt;
  }
  const std::size_t close = jinja.find(kClose, begin);
  if (close == std::string_view::npos) return std::nullopt;
  const std::string_view body = jinja.substr(begin, close - begin);
  // Only a plain literal: anything with quotes or Jinja syntax is the
  // conversation's own system message.
  if (body.empty() || body.find_first_of("'\"{}+\\\n") != std::string_view::npos) return std::nullopt;
  return std::string(body);
}

void require_alternation(std::span<const ChatMessage> messages, std::string_view format) {
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const bool expect_user = i % 2 == 0;
    if ((messages[i].role == "user") != expect_user || (!expect_user && messages[i].role != "assistant")) {
      throw TokenizerError(fmt::format(
          "chat ({} format): message {} has role '{}'; roles must alternate user/assistant/user/... "
          "(after an optional first system message)",
          format, i, messages[i].role));
    }
  }
}

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
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama2:
      return "llama2";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kMistral:
      return "mistral";
    case ChatFormat::kZephyr:
      return "zephyr";
  }
  return "unknown";
}

ChatFormat detect_chat_format(std::string_view jinja, const std::string& source) {
  constexpr std::string_view kOverrideHint =
      "set the chat template format explicitly (chatml, llama2, llama3, mistral or zephyr) to override";
  if (jinja.find("<|im_start|>") != std::string_view::npos) return ChatFormat::kChatMl;
  if (jinja.find("<|start_header_id|>") != std::string_view::npos) {
    if (jinja.find("Cutting Knowledge Date") != std::string_view::npos) {
      throw TokenizerError(fmt::format(
          "{}: this is a Llama 3.1+ chat template (tools and date preamble), which is not supported; {}", source,
          kOverrideHint));
    }
    return ChatFormat::kLlama3;
  }
  if (jinja.find("[INST]") != std::string_view::npos) {
    return jinja.find("<<SYS>>") != std::string_view::npos ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  }
  if (jinja.find("<|user|>") != std::string_view::npos && jinja.find("<|assistant|>") != std::string_view::npos) {
    return ChatFormat::kZephyr;
  }
  throw TokenizerError(fmt::format(
      "{}: unrecognised chat_template (it is none of ChatML, Llama 2, Llama 3, Mistral, Zephyr); {}", source,
      kOverrideHint));
}

ChatTemplate::ChatTemplate(ChatFormat format, std::string bos_token, std::string eos_token,
                           std::optional<std::string> default_system_message)
    : format_(format),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      default_system_message_(std::move(default_system_message)) {}

ChatTemplate ChatTemplate::from_config(const TokenizerConfig& config, std::optional<ChatFormat> override_format) {
  std::optional<std::string> default_system;
  ChatFormat format;
  if (override_format) {
    format = *override_format;
  } else if (config.chat_template) {
    format = detect_chat_format(*config.chat_template, config.chat_template_source);
  } else {
    throw TokenizerError(fmt::format("{}: no chat_template; set the chat template format explicitly "
                                     "(chatml, llama2, llama3, mistral or zephyr)",
                                     config.source.empty() ? std::string("tokenizer_config.json") : config.source));
  }
  if (format == ChatFormat::kChatMl && config.chat_template) default_system = chatml_default_system(*config.chat_template);
  return ChatTemplate(format, config.bos_token.value_or(""), config.eos_token.value_or(""), std::move(default_system));
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages, bool add_generation_prompt) const {
  // transformers' apply_chat_template cannot render an empty conversation either.
  if (messages.empty()) throw TokenizerError("chat: the conversation has no messages");
  std::string out;
  switch (format_) {
    case ChatFormat::kChatMl:
      if (default_system_message_ && messages.front().role != "system") {
        out += fmt::format("<|im_start|>system\n{}<|im_end|>\n", *default_system_message_);
      }
      for (const ChatMessage& message : messages) {
        out += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", message.role, message.content);
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kLlama3:
      for (std::size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos_token_;
        out += fmt::format("<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>", messages[i].role,
                           python_strip(messages[i].content));
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kLlama2: {
      std::optional<std::string> system;
      std::span<const ChatMessage> turns = messages;
      if (!turns.empty() && turns.front().role == "system") {
        system = turns.front().content;
        turns = turns.subspan(1);
      }
      require_alternation(turns, "llama2");
      for (std::size_t i = 0; i < turns.size(); ++i) {
        std::string content = turns[i].content;
        if (i == 0 && system) content = fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", *system, content);
        if (turns[i].role == "user") {
          out += fmt::format("{}[INST] {} [/INST]", bos_token_, python_strip(content));
        } else {
          out += fmt::format(" {} {}", python_strip(content), eos_token_);
        }
      }
      return out;
    }
    case ChatFormat::kMistral:
      require_alternation(messages, "mistral");
      out += bos_token_;
      for (const ChatMessage& message : messages) {
        if (message.role == "user") {
          out += fmt::format("[INST] {} [/INST]", message.content);
        } else {
          out += message.content + eos_token_;
        }
      }
      return out;
    case ChatFormat::kZephyr:
      for (std::size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& message = messages[i];
        if (message.role == "user" || message.role == "system" || message.role == "assistant") {
          out += fmt::format("<|{}|>\n{}{}\n", message.role, message.content, eos_token_);
        }
        if (i + 1 == messages.size() && add_generation_prompt) out += "<|assistant|>\n";
      }
      return out;
  }
  return out;
}

}  // namespace pagedllm::tokenizer
