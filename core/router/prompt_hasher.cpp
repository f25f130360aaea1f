#include "core/router/prompt_hasher.h"

#include <fstream>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "core/config/config_error.h"
#include "core/server/api_error.h"
#include "core/server/openai_request.h"
#include "core/server/request_fields.h"
#include "core/server/tool_request.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm::router {
namespace {

// The chat template as pagedllm-host picks it (llm_engine_startup): model.chat_template's Jinja file or
// built-in format, else the model's own.
std::optional<tokenizer::ChatTemplate> load_chat_template(const RouterConfig& config,
                                                          const tokenizer::Tokenizer& tokenizer) {
  const std::optional<tokenizer::ChatFormat> format =
      config.chat_template ? tokenizer::parse_chat_format(*config.chat_template) : std::nullopt;
  if (config.chat_template && !format) {
    std::ifstream file(*config.chat_template, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    if (!file) throw ConfigError(fmt::format("model.chat_template: cannot read {}", *config.chat_template));
    try {
      return tokenizer::ChatTemplate(text.str(), *config.chat_template, tokenizer.config());
    } catch (const tokenizer::TokenizerError& error) {
      throw ConfigError(fmt::format("model.chat_template: {}", error.what()));
    }
  }
  if (format || tokenizer.config().chat_template) {
    return tokenizer::ChatTemplate::from_config(tokenizer.config(), format);
  }
  return std::nullopt;
}

bool is_token_ids(const nlohmann::json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const nlohmann::json& item : value) {
    if (!item.is_number_integer()) return false;
  }
  return true;
}

}  // namespace

PromptHasher::PromptHasher(const RouterConfig& config)
    : block_size_(config.block_size), tokenizer_(tokenizer::Tokenizer::from_model(config.model_path.string())) {
  chat_template_ = load_chat_template(config, tokenizer_);
}

std::vector<std::int32_t> PromptHasher::completion_tokens(const nlohmann::json& request) const {
  const nlohmann::json* prompt = server::field(request, "prompt");
  if (!prompt) return {};
  // A batch's first prompt: the batch's requests run side by side on the replica it goes to.
  const nlohmann::json& first =
      prompt->is_array() && !prompt->empty() && !is_token_ids(*prompt) ? prompt->front() : *prompt;
  if (first.is_string()) return tokenizer_.encode(first.get<std::string>(), /*add_special_tokens=*/true);
  if (is_token_ids(first)) {
    std::vector<std::int32_t> ids;
    for (const nlohmann::json& id : first) {
      if (!id.is_number_integer()) return {};
      const auto value = id.get<std::int64_t>();
      if (value < 0 || value > std::numeric_limits<std::int32_t>::max()) return {};
      ids.push_back(static_cast<std::int32_t>(value));
    }
    return ids;
  }
  return {};
}

std::vector<std::int32_t> PromptHasher::chat_tokens(const nlohmann::json& request, std::string_view body) const {
  if (!chat_template_) return {};
  const nlohmann::ordered_json ordered_request = server::parse_ordered_json(body);
  const server::ChatTools tools = server::parse_chat_tools(request, ordered_request);
  const std::vector<tokenizer::ChatMessage> messages = server::parse_chat_messages(request, ordered_request);
  const std::string text = chat_template_->render(messages, /*add_generation_prompt=*/true, tools.definitions);
  // The template writes BOS and the turn markers itself.
  return tokenizer_.encode(text, /*add_special_tokens=*/false, /*parse_special=*/true);
}

std::vector<BlockHash> PromptHasher::chain(PromptKind kind, const nlohmann::json& request,
                                           std::string_view body) const {
  std::vector<std::int32_t> tokens;
  try {
    switch (kind) {
      case PromptKind::kCompletion:
        tokens = completion_tokens(request);
        break;
      case PromptKind::kChat:
        tokens = chat_tokens(request, body);
        break;
    }
  } catch (const server::ApiError&) {
    return {};
  } catch (const tokenizer::TokenizerError&) {
    return {};
  } catch (const nlohmann::json::exception&) {
    return {};
  }
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, tokens, block_size_, /*extra_key=*/"");
  return hashes;
}

}  // namespace pagedllm::router
