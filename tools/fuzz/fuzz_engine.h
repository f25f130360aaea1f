#pragma once
// An engine that parses but never generates: the server's request parsers
// need one.

#include <chrono>
#include <optional>
#include <string>

#include "core/engine/engine.h"
#include "core/engine/request_validation.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace pagedllm::fuzz {

// The embedded model's tokenizer and chat template, what the server parses
// requests against. submit() runs the engine's own request validation and
// then refuses (nothing generates); everything else answers like an idle engine.
class ParseOnlyEngine final : public Engine {
 public:
  explicit ParseOnlyEngine(const std::string& model_dir = PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny")
      : tokenizer_(tokenizer::Tokenizer::from_model_dir(model_dir)),
        chat_template_(tokenizer::ChatTemplate::from_config(tokenizer_.config(), std::nullopt)) {
    model_.served_name = "pagedllm-tiny";
    model_.architecture = "LlamaForCausalLM";
    model_.vocab_size = static_cast<int>(tokenizer_.vocab_size());
    model_.max_model_len = 512;
    limits_.vocab_size = model_.vocab_size;
    limits_.max_model_len = model_.max_model_len;
    limits_.max_n = 8;
    limits_.scheduler.max_num_seqs = 8;
    limits_.block_size = 16;
    limits_.num_device_blocks = 256;
  }

  void start() override {}
  std::optional<std::string> failure() const override { return std::nullopt; }
  RequestId submit(GenerateRequest request, OutputCallback) override {
    (void)to_scheduler_request(request, limits_);
    throw EngineUnavailable("the fuzz engine generates nothing", std::chrono::seconds(1));
  }
  bool abort(RequestId) override { return false; }
  void shutdown(ShutdownMode) override {}
  bool healthy() const override { return true; }
  std::string health_detail() const override { return {}; }
  EngineMetrics metrics() const override { return {}; }
  const tokenizer::Tokenizer& tokenizer() const override { return tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const override { return &chat_template_; }
  const ModelDescription& model() const override { return model_; }
  const GenerationDefaults& generation_defaults() const override { return defaults_; }
  int max_logprobs() const override { return limits_.max_logprobs; }
  int max_n() const override { return limits_.max_n; }

  const RequestLimits& limits() const { return limits_; }

 private:
  tokenizer::Tokenizer tokenizer_;
  tokenizer::ChatTemplate chat_template_;
  ModelDescription model_;
  GenerationDefaults defaults_;
  RequestLimits limits_;
};

}  // namespace pagedllm::fuzz
