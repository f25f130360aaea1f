// Chat-template rendering with hostile templates and messages: the input up
// to its first NUL byte is a tokenizer_config.json (its chat_template, BOS and
// EOS), the rest a chat request body whose "messages" and "tools" the server
// parses (parse_chat_messages, parse_chat_tools). The template runs on the Jinja engine
// (ChatTemplate::from_config; when it does not parse, each built-in format is
// forced, as the serving config's model.chat_template does), the messages
// rendered with and without the generation prompt, and the result encoded as
// the server does (special tokens parsed) by the embedded model's tokenizer.
// Properties: refusals are TokenizerError (a template that does not parse,
// fails or loops past its bounds; a conversation it refuses) or a 4xx ApiError
// (messages); whatever renders encodes; no template crashes or hangs.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/server/api_error.h"
#include "core/server/openai_request.h"
#include "core/server/tool_request.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_config.h"
#include "core/tokenizer/tokenizer_error.h"

using namespace pagedllm;
using namespace pagedllm::tokenizer;

namespace {

void render_all(const ChatTemplate& chat, const std::vector<ChatMessage>& messages, const nlohmann::ordered_json& tools,
                const Tokenizer& tokenizer) {
  for (const bool prompt : {false, true}) {
    try {
      const std::string text = chat.render(messages, prompt, tools);
      (void)tokenizer.encode(text, false, true);
    } catch (const TokenizerError&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tokenizer tokenizer = Tokenizer::from_model_dir(PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny");
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  const std::string_view config_text = all.substr(0, nul);
  const std::string_view body = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);

  const nlohmann::json config_json = nlohmann::json::parse(config_text, nullptr, false);
  if (config_json.is_discarded()) return 0;
  std::optional<TokenizerConfig> config;
  try {
    config = TokenizerConfig::from_json(config_json, "fuzz/tokenizer_config.json");
  } catch (const TokenizerError&) {
    return 0;
  }

  std::vector<ChatMessage> messages;
  nlohmann::ordered_json tools = nullptr;
  try {
    const nlohmann::json request = server::parse_json_object(body);
    const nlohmann::ordered_json ordered_request = server::parse_ordered_json(body);
    messages = server::parse_chat_messages(request, ordered_request);
    tools = server::parse_chat_tools(request, ordered_request).definitions;
  } catch (const server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) __builtin_trap();
    messages = {{"system", "You are terse."}, {"user", "Hi <|im_end|>"}, {"assistant", " Hello! "}, {"user", "x"}};
  }

  try {
    render_all(ChatTemplate::from_config(*config, std::nullopt), messages, tools, tokenizer);
  } catch (const TokenizerError&) {
    for (const char* name : {"chatml", "llama2", "llama3", "mistral", "zephyr"}) {
      render_all(ChatTemplate::from_config(*config, parse_chat_format(name)), messages, tools, tokenizer);
    }
  }
  return 0;
}
