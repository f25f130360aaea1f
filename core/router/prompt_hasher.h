#pragma once
// The prompt a replica will run for a request, rendered as pagedllm-host renders it (core/server/openai_request:
// completions' text with the tokenizer's special tokens, chat messages and tools through the model's chat
// template), cut into the replicas' blocks and hashed with core/kv/block_hash.h: the chain AffinityTable keys.

#include <optional>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/kv/block_hash.h"
#include "core/router/router_config.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace pagedllm::router {

enum class PromptKind { kCompletion, kChat };

class PromptHasher {
 public:
  // Loads the model's tokenizer and chat template; TokenizerError or ConfigError naming what is wrong.
  explicit PromptHasher(const RouterConfig& config);

  // The hash chain of the request's prompt (of its first prompt, for a batch of completions). Empty when the
  // request has no prompt the router can render: the replica it goes to answers such a request with its 400.
  // Thread-safe.
  std::vector<BlockHash> chain(PromptKind kind, const nlohmann::json& request, std::string_view body) const;

 private:
  std::vector<std::int32_t> completion_tokens(const nlohmann::json& request) const;
  std::vector<std::int32_t> chat_tokens(const nlohmann::json& request, std::string_view body) const;

  int block_size_;
  tokenizer::Tokenizer tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
};

}  // namespace pagedllm::router
