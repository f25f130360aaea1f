#pragma once
// A test double of the engine: the real tokenizer (a fixture), requests that
// "generate" by repeating their prompt's tokens, one token per sequence per
// step on a thread of its own, with the output, abort, shutdown, health and
// metrics behaviour that engine.h promises. Tests steer it (pause, fail,
// refuse) and read what it was asked (requests, aborts).
//
// Sequence s of a request emits prompt[(k + s) % prompt_len] as its k-th token,
// so a prompt's text comes back (shifted per sequence). Stop strings, stop
// token ids, max_tokens and the context limit end sequences as the engine would.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/engine/engine.h"

namespace pagedllm::testing {

struct FakeEngineOptions {
  std::string tokenizer_dir = PAGEDLLM_SOURCE_DIR "/tests/fixtures/tokenizer/bytelevel_llama3";
  std::string served_name = "fake-model";
  int max_model_len = 256;
  std::chrono::microseconds step_interval{500};
  bool has_chat_template = true;
  // Each delta's text repeated this many times: bulky streams at little cost per event.
  int text_repeat = 1;
  GenerationDefaults defaults;
};

class FakeEngine final : public Engine {
 public:
  static constexpr int kNumBlocks = 1024;
  static constexpr int kBlockSize = 16;

  explicit FakeEngine(FakeEngineOptions options = {});
  ~FakeEngine() override;

  void start() override;
  RequestId submit(GenerateRequest request, OutputCallback on_output) override;
  bool abort(RequestId request) override;
  void shutdown(ShutdownMode mode) override;
  bool healthy() const override;
  std::string health_detail() const override;
  // fail_next_step() fails requests, never the fake engine itself.
  std::optional<std::string> failure() const override { return std::nullopt; }
  EngineMetrics metrics() const override;
  const tokenizer::Tokenizer& tokenizer() const override { return tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const override {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const ModelDescription& model() const override { return model_; }
  const GenerationDefaults& generation_defaults() const override { return options_.defaults; }
  int max_logprobs() const override { return 20; }
  int max_n() const override { return 8; }

  // --- Test controls ---
  void pause();  // no steps until resume()
  void resume();
  void set_health(bool healthy, std::string detail);
  // submit() throws EngineUnavailable(reason) while set.
  void set_unavailable(std::optional<std::string> reason);
  // The next submit() throws RequestRejected(reason, param).
  void reject_next(std::string reason, std::string param);
  // The next step fails: every request in flight ends with this error.
  void fail_next_step(std::string error);

  // --- What it was asked ---
  std::vector<GenerateRequest> requests() const;
  std::vector<RequestId> aborted() const;  // ids passed to abort() that were in flight
  int num_active() const;
  // Waits until no request is in flight; false on timeout.
  bool wait_idle(std::chrono::milliseconds timeout) const;

 private:
  struct Sequence;
  struct Active;

  void loop();
  // One step over every active request; fills `deliveries`.
  void step(std::vector<std::pair<OutputCallback, RequestOutput>>& deliveries);

  FakeEngineOptions options_;
  tokenizer::Tokenizer tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  ModelDescription model_;

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::thread thread_;
  bool started_ = false;
  bool running_ = false;
  bool accepting_ = true;
  bool paused_ = false;
  bool drain_ = false;
  bool healthy_ = true;
  std::string health_detail_;
  std::optional<std::string> unavailable_;
  std::optional<std::string> fail_next_;
  std::optional<std::pair<std::string, std::string>> reject_next_;
  RequestId next_id_ = 1;
  std::map<RequestId, std::unique_ptr<Active>> active_;
  std::vector<GenerateRequest> requests_;
  std::vector<RequestId> aborted_;
  EngineMetrics metrics_;
};

}  // namespace pagedllm::testing
