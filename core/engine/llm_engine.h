#pragma once
// The engine's implementation, internal to core/engine (clients use engine.h):
// the LlmEngine class, whose members are defined by concern in
//   llm_engine_startup.cpp      plugins, model, tokenizer, limits, KV cache; Engine::create
//   llm_engine_intake.cpp       submit() / abort() from clients; admission into the scheduler
//   llm_engine_step.cpp         one step: schedule -> block ops -> plan -> forward -> sample -> update
//   llm_engine_speculation.cpp  the step's speculative part: hidden rows, verification, drafting
//   llm_engine_beam.cpp         beam search: each step's beams from the sampled candidates, the results
//   llm_engine_output.cpp       outputs to callbacks, a request's last output
//   llm_engine_lifecycle.cpp    start(), the engine loop, shutdown, ending everything
//   llm_engine_status.cpp       health, failure and metrics, for clients

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/common/logging.h"
#include "core/engine/beam_search.h"
#include "core/engine/engine.h"
#include "core/engine/model_runner.h"
#include "core/engine/request_validation.h"
#include "core/engine/sequence_output.h"
#include "core/engine/speculative_decoder.h"
#include "core/engine/structured_output.h"
#include "core/engine/tensor_parallel.h"
#include "core/plugin/plugin_instance.h"
#include "core/scheduler/scheduler.h"

namespace pagedllm {

class LlmEngine final : public Engine {
 public:
  LlmEngine(const HostConfig& config, PluginRegistry& registry, TensorParallelGroup* group);
  ~LlmEngine() override { shutdown(ShutdownMode::kAbort); }

  void start() override;
  RequestId submit(GenerateRequest request, OutputCallback on_output) override;
  bool abort(RequestId request) override;
  void shutdown(ShutdownMode mode) override;
  bool healthy() const override { return health_detail().empty(); }
  std::string health_detail() const override;
  std::optional<std::string> failure() const override;
  EngineMetrics metrics() const override;
  const tokenizer::Tokenizer& tokenizer() const override { return tokenizer_; }
  const tokenizer::ChatTemplate* chat_template() const override {
    return chat_template_ ? &*chat_template_ : nullptr;
  }
  const ModelDescription& model() const override { return model_; }
  const GenerationDefaults& generation_defaults() const override { return defaults_; }
  int max_logprobs() const override { return limits_.max_logprobs; }
  int max_n() const override { return limits_.max_n; }

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
  }

  // A request between submit() and the engine thread picking it up.
  struct PendingRequest {
    RequestId id = -1;
    Request scheduled;
    GenerateRequest request;
    OutputCallback callback;
    std::uint64_t seed = 0;
    Clock::time_point arrival;
    ConstraintGrammar grammar;  // compiled by submit() when the request is constrained
  };

  // A request the engine thread owns: what the scheduler does not keep.
  struct LiveRequest {
    GenerateRequest request;
    OutputCallback callback;
    std::uint64_t seed = 0;
    Clock::time_point arrival;
    std::optional<Clock::time_point> first_scheduled;
    std::optional<Clock::time_point> first_token;
    int num_cached_prompt_tokens = 0;
    int num_generated_tokens = 0;
    // Per sequence index (0..n-1), created as sequences appear.
    std::vector<SequenceOutput> outputs;
    // When each sequence last produced a token (unset before its first).
    std::vector<std::optional<Clock::time_point>> last_token_time;
    std::vector<pllm_sampling_params> params;
    // What the params' logit_bias and min_tokens pointers point into.
    std::vector<std::int32_t> logit_bias_ids;
    std::vector<float> logit_bias_values;
    std::vector<std::int32_t> min_tokens_banned_ids;
    // prompt_logprobs: what the prompt's positions reported so far (entry i is
    // prompt token i + 1), the scoring rows' parameters, and whether they were sent.
    std::vector<TokenLogprob> prompt_logprobs;
    pllm_sampling_params prompt_params{};
    bool prompt_logprobs_sent = false;
    std::vector<bool> finished;
    // Structured output: the compiled constraint and, per sequence index, its matcher.
    ConstraintGrammar grammar;
    std::vector<std::unique_ptr<ConstraintMatcher>> matchers;
    // Beam search: the search, its sampler parameters (greedy, its candidates as top
    // logprobs), and the sequence of each of the search's live beams, in its order.
    std::unique_ptr<BeamSearch> beam;
    pllm_sampling_params beam_params{};
    std::vector<SequenceId> beam_sequences;
  };

  // ---- engine thread ----
  // llm_engine_lifecycle.cpp: runs steps until shutdown or a failure.
  void loop();
  // llm_engine_intake.cpp: takes queued requests and aborts; false when the loop should end.
  bool drain_inbox();
  // llm_engine_step.cpp: one step; false when nothing could be scheduled.
  bool step();
  // Ends every request one of whose logits rows the sampler flagged as
  // non-finite (NaN, +inf, or all -inf: a model fault): only those requests
  // fail, before update() commits this step's KV of theirs to the prefix cache.
  void end_requests_with_non_finite_logits(const std::vector<RequestId>& faulty);
  struct SampledToken {
    std::int32_t token = -1;
    TokenLogprob logprob;
  };
  // Sampled tokens per (request, sequence index), in row order.
  using StepSamples = std::map<std::pair<RequestId, int>, SampledToken>;
  // A beam row's best tokens, per (request, sequence).
  using BeamCandidates = std::map<RequestId, std::map<SequenceId, std::vector<BeamSearch::Candidate>>>;
  // Samples every row that is not verifying drafts, on the model's device; a
  // request with a non-finite logits row goes to `faulty` and gets no sample.
  // Beam rows give their candidates to `beams` instead.
  std::vector<SequenceSample> sample(const SchedulerOutput& output, const pllm_tensor& logits,
                                     StepSamples& sampled, BeamCandidates& beams, std::vector<RequestId>& faulty);
  // llm_engine_beam.cpp: the request's beam search and its sampler parameters, at admission.
  void start_beam_search(LiveRequest& request, int max_new_tokens);
  // One BeamStep per live beam-search request in `candidates` (every live beam of it sampled).
  std::vector<BeamStep> step_beams(const BeamCandidates& candidates);
  // Records which sequence runs each beam; ends the requests whose search is over.
  void finish_beam_steps(const UpdateResult& result);
  // The logprobs of the prompt tokens that this step's prompt_logprobs rows
  // predict (sampler rows that score the given token), kept on the request.
  void score_prompts(const SchedulerOutput& output, const pllm_tensor& logits, std::vector<RequestId>& faulty);
  // llm_engine_speculation.cpp: rows of speculative requests, their
  // verification, and drafting for the next step.
  bool speculative_row(const ScheduledSequence& row) const;
  // Token rows whose hidden state the draft reads; first_hidden_row[r] is where
  // batch row r's begin among them (-1: none).
  std::vector<std::int32_t> hidden_indices(const SchedulerOutput& output,
                                           std::vector<std::int32_t>& first_hidden_row) const;
  std::vector<SequenceSample> verify_drafts(const SchedulerOutput& output, const pllm_tensor& logits,
                                            std::vector<RequestId>& faulty);
  void propose_drafts(const SchedulerOutput& output, const pllm_tensor& hidden,
                      const std::vector<std::int32_t>& first_hidden_row);
  // The grammar matcher of sequence `index` of a constrained request (made on
  // first use); null for an unconstrained one.
  pllm_constraint_matcher* constraint_matcher(LiveRequest& request, int index);
  // llm_engine_output.cpp: this step's news to each request's callback.
  void publish(const UpdateResult& result, const StepSamples& sampled);
  // Puts the request's prompt logprobs into `out` once the whole prompt has them (once).
  void attach_prompt_logprobs(LiveRequest& request, RequestOutput& out);
  // Runs a client's callback; a callback that throws loses its output, not the engine.
  void deliver(const OutputCallback& callback, RequestOutput&& out);
  // Sends the request's last output and forgets the request.
  void end_request(RequestId id, LiveRequest& live, RequestOutput& out, FinishReason reason,
                   const std::optional<std::string>& error);
  // llm_engine_lifecycle.cpp: ends every queued and live request (shutdown, or the loop failed).
  void abort_everything(const std::optional<std::string>& error);
  // llm_engine_status.cpp: one change to the metrics clients read.
  void update_metrics(const std::function<void(EngineMetrics&)>& change);
  LiveRequest& live(RequestId id) { return live_.at(id); }

  // ---- immutable after construction ----
  HostConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  AttentionInstance attention_;
  ModelInstance model_instance_;
  std::unique_ptr<ModelRunner> runner_;  // over attention_ and model_instance_
  SamplerInstance sampler_;
  std::unique_ptr<SpeculativeDecoder> speculative_;  // with a speculative: section
  std::unique_ptr<StructuredOutput> structured_output_;  // with a constraint: section
  std::unique_ptr<TensorParallelDriver> tensor_parallel_;  // rank 0 of tensor_parallel_size > 1
  pllm_model_info model_info_{};
  tokenizer::Tokenizer tokenizer_;
  std::optional<tokenizer::ChatTemplate> chat_template_;
  ModelDescription model_;
  GenerationDefaults defaults_;
  RequestLimits limits_;
  int num_host_blocks_ = 0;

  // ---- engine thread only ----
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<RequestId, LiveRequest> live_;

  // ---- shared, under mutex_ ----
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<PendingRequest> inbox_;
  std::vector<RequestId> abort_inbox_;
  std::unordered_set<RequestId> in_flight_;  // submitted, not yet finished
  RequestId next_request_id_ = 0;
  std::mt19937_64 seed_generator_{std::random_device{}()};
  bool accepting_ = true;
  bool stop_requested_ = false;
  ShutdownMode shutdown_mode_ = ShutdownMode::kDrain;
  std::string failure_;
  std::thread thread_;

  // ---- watched by health_detail() ----
  std::atomic<bool> loop_running_{false};
  std::atomic<std::int64_t> step_started_ns_{0};  // 0 while no step runs
  std::atomic<std::int64_t> longest_step_ns_{0};

  mutable std::mutex metrics_mutex_;
  EngineMetrics metrics_;
};

}  // namespace pagedllm
