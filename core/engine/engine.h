#pragma once
// The engine: one thread that runs the loop of docs/architecture.md "One engine
// step" over the configured plugins, and a thread-safe API for its clients (the
// CLI now, the HTTP server, tests).
//
//   auto engine = Engine::create(config, registry);   // loads plugins, weights, tokenizer
//   engine->start();
//   RequestId id = engine->submit(request, [](RequestOutput&& out) { ... });
//   engine->abort(id);                                 // from any thread
//   engine->shutdown(ShutdownMode::kDrain);
//
// Outputs are delivered by the request's callback, on the engine thread, in
// order, once per step in which the request made progress; the last one has
// `finished` set. Callbacks must be quick and must not block or call back into
// the engine except abort(): hand the output to another thread instead.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/engine/engine_metrics.h"
#include "core/plugin/plugin_registry.h"
#include "core/scheduler/request.h"
#include "core/tokenizer/chat_template.h"
#include "core/tokenizer/tokenizer.h"

namespace pagedllm {

class TensorParallelGroup;  // core/engine/tensor_parallel.h
// vLLM's use_beam_search with HF transformers' semantics (docs/server.md "Beam
// search"): beam_width beams, the request's n best finished hypotheses returned,
// best first. Greedy-style requests only (Engine::submit() says which fields not).
struct BeamSearchOptions {
  // HF's early_stopping: kTrue stops once beam_width hypotheses are finished; kFalse
  // once no running beam can beat the worst of them at its current length; kNever
  // as kFalse, but a positive length_penalty counts a running beam at max_tokens.
  enum class EarlyStopping { kFalse, kTrue, kNever };
  int beam_width = 2;  // vLLM's best_of; >= n
  // A finished hypothesis scores its summed logprob / (its output length ^ length_penalty).
  float length_penalty = 1.0f;
  EarlyStopping early_stopping = EarlyStopping::kFalse;
};

// Per-request generation parameters, as the OpenAI API (and vLLM's extensions)
// name them. Ranges are checked by Engine::submit(), which throws
// RequestRejected naming the field.
struct SamplingOptions {
  int n = 1;
  // Output tokens per sequence. Unset: up to the model's context limit.
  std::optional<int> max_tokens;
  float temperature = 1.0f;  // 0 = greedy; [0, 2]
  float top_p = 1.0f;        // (0, 1]
  int top_k = 0;             // 0 or -1 = off
  float min_p = 0.0f;        // [0, 1]
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  float repetition_penalty = 1.0f; // (0, 2]
  // Unset: drawn from the engine's generator, so unseeded requests differ.
  std::optional<std::uint64_t> seed;
  // Text that ends a sequence; not included in the output text unless asked.
  std::vector<std::string> stop;
  std::vector<std::int32_t> stop_token_ids;
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  // Top alternatives to report per sampled token (0 = the sampled token's own
  // logprob only); unset = no logprobs. At most Engine::max_logprobs().
  std::optional<int> logprobs;
  bool skip_special_tokens = true;
  // OpenAI's logit_bias: (token id, bias in [-100, 100]) added to the token's
  // logit before the penalties; ids distinct, at most RequestLimits::max_logit_bias.
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  // vLLM's min_tokens: before this many output tokens, EOS (unless ignore_eos)
  // and stop_token_ids cannot be sampled and stop strings are not matched.
  int min_tokens = 0;
  // vLLM's prompt_logprobs: the logprob of every prompt token after the first
  // (of the model's raw logits at the position before it) and this many top
  // alternatives; unset = none. The prompt then skips the prefix cache.
  std::optional<int> prompt_logprobs;
  // Unset: sampling. Set: beam search, and n is how many of its hypotheses are returned.
  std::optional<BeamSearchOptions> beam_search;
};

// Structured output: what the request's text must be (OpenAI's response_format,
// vLLM's guided_* / structured_outputs). Enforced by the configured constraint
// plugin's token masks inside the sampler.
struct OutputConstraint {
  enum class Type { kJsonObject, kJsonSchema, kRegex, kChoice, kStructuralTag };
  Type type = Type::kJsonObject;
  // The schema (JSON), the regex, the choices as a JSON array, or an xgrammar structural tag (JSON:
  // tool calls' fixed text around their arguments' schemas, core/server/tool_request.h).
  std::string text;
  std::string field;  // the API field it came from ("response_format.json_schema.schema"), for errors
};

struct GenerateRequest {
  std::vector<std::int32_t> prompt_token_ids;
  SamplingOptions sampling;
  int priority = 0;  // under the priority policy: lower first
  // Requests with different salts never share prefix-cache blocks.
  std::string cache_salt;
  // Use speculative decoding when the engine has a speculator (false: decode
  // one token per step). Requests with n > 1, beam search or logprobs never speculate.
  bool speculative = true;
  // Unset: unconstrained. Constrained requests speculate too (docs/structured-output.md).
  std::optional<OutputConstraint> constraint;
};

struct TokenLogprob {
  std::int32_t token_id = -1;
  float logprob = 0.0f;
  // The top alternatives, most likely first (SamplingOptions::logprobs of them).
  std::vector<std::pair<std::int32_t, float>> top;
};

// What one of a request's n sequences did in one step.
struct SequenceDelta {
  int index = 0;  // 0..n-1, the OpenAI "index"
  // New text since the previous delta: detokenized incrementally, stop strings
  // removed (unless include_stop_str_in_output), incomplete UTF-8 held back.
  std::string text;
  std::vector<std::int32_t> token_ids;
  std::vector<TokenLogprob> logprobs;  // one per token when logprobs were asked
  // Set on the sequence's last delta.
  std::optional<FinishReason> finish_reason;
  // What stopped it, for finish_reason kStop: the stop string or token (as
  // vLLM's stop_reason); empty / -1 for EOS.
  std::string stop_string;
  std::int32_t stop_token_id = -1;
};

struct RequestOutput {
  RequestId request_id = -1;
  std::vector<SequenceDelta> sequences;  // only sequences with news
  bool finished = false;                 // the request's last output
  // Set when the request ended because the engine failed (a plugin error);
  // every sequence then ends with kAborted.
  std::optional<std::string> error;
  int num_prompt_tokens = 0;
  int num_cached_prompt_tokens = 0;  // prefix-cache hit
  int num_generated_tokens = 0;      // all sequences, so far
  // With SamplingOptions::prompt_logprobs: prompt tokens 1..L-1 (token 0 has
  // none), once, in the first output after the whole prompt was computed.
  std::vector<TokenLogprob> prompt_logprobs;
};

using OutputCallback = std::function<void(RequestOutput&&)>;

// The engine cannot take requests now (starting, shutting down, failed, or its
// queue is full). HTTP maps it to 503 with Retry-After.
class EngineUnavailable : public std::runtime_error {
 public:
  EngineUnavailable(const std::string& reason, std::chrono::seconds retry_after)
      : std::runtime_error(reason), retry_after_(retry_after) {}
  std::chrono::seconds retry_after() const { return retry_after_; }

 private:
  std::chrono::seconds retry_after_;
};

// Defaults from the model's generation_config.json, applied by clients (the
// server, the CLI) to fields the user left unset.
struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
  std::optional<float> repetition_penalty;
  std::vector<std::int32_t> eos_token_ids;  // generation_config.json, else config.json, else tokenizer
};

struct ModelDescription {
  std::string served_name;  // the model directory's name: what /v1/models lists
  std::string architecture;
  int vocab_size = 0;
  int max_model_len = 0;  // config limit, or the model's own
  int num_layers = 0;
  int hidden_size = 0;
};

enum class ShutdownMode {
  kDrain,  // finish in-flight requests, refuse new ones
  kAbort,  // end in-flight requests now (finish_reason kAborted)
};

class Engine {
 public:
  // Loads the configured plugins, the model (with progress) and its tokenizer,
  // and sizes the KV cache. Throws ConfigError / PluginLoadError /
  // PluginCallError / TokenizerError with a message naming what was wrong.
  // With parallel.tensor_parallel_size > 1, `group` is rank 0's (TensorParallelGroup::join): the
  // engine drives the other ranks' workers (core/engine/tensor_parallel.h), which must be alive.
  static std::unique_ptr<Engine> create(const HostConfig& config, PluginRegistry& registry,
                                        TensorParallelGroup* group = nullptr);

  virtual ~Engine() = default;

  // Starts the engine thread. Requests submitted before start() wait for it.
  virtual void start() = 0;

  // Thread-safe. Validates the request and queues it. Throws RequestRejected
  // (the user's mistake: the message names the field and the limit) or
  // EngineUnavailable.
  virtual RequestId submit(GenerateRequest request, OutputCallback on_output) = 0;
  // Thread-safe. Ends the request within one engine step: its blocks return to
  // the pool and its callback receives a final output with kAborted. False if
  // the request is unknown or already finished.
  virtual bool abort(RequestId request) = 0;

  // Stops accepting requests, drains or aborts what is in flight, joins the
  // engine thread. Idempotent.
  virtual void shutdown(ShutdownMode mode) = 0;

  // True while the engine thread is running its loop: false before start(),
  // after shutdown, after a failed step, or when a step has not completed for
  // far longer than steps take (a hung plugin).
  virtual bool healthy() const = 0;
  // Why healthy() is false ("" when healthy).
  virtual std::string health_detail() const = 0;
  // Why the engine loop failed (a plugin error inside a step: every request in flight
  // ended with it, and the engine takes no more); nullopt while it has not failed.
  // A failure is final, unlike a slow step. serve() stops the host on it.
  virtual std::optional<std::string> failure() const = 0;

  virtual EngineMetrics metrics() const = 0;

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  // The model's chat template (or the config's model.chat_template); nullptr
  // when there is none, so chat requests must be refused.
  virtual const tokenizer::ChatTemplate* chat_template() const = 0;
  virtual const ModelDescription& model() const = 0;
  virtual const GenerationDefaults& generation_defaults() const = 0;
  // Limits submit() enforces, for clients that check early.
  virtual int max_logprobs() const = 0;
  virtual int max_n() const = 0;
};

}  // namespace pagedllm
