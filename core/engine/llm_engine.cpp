// The engine implementation: plugins, scheduler and tokenizer wired into the
// loop of docs/architecture.md "One engine step", on one engine thread.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/common/strings.h"
#include "core/config/config_error.h"
#include "core/engine/engine.h"
#include "core/engine/generation_config.h"
#include "core/engine/kv_cache_sizing.h"
#include "core/engine/plugin_batch.h"
#include "core/engine/request_validation.h"
#include "core/engine/seeds.h"
#include "core/engine/sequence_output.h"
#include "core/engine/speculative_decoder.h"
#include "core/plugin/configured_plugins.h"
#include "core/plugin/plugin_instance.h"
#include "core/scheduler/scheduler.h"
#include "core/tokenizer/tokenizer_error.h"

namespace pagedllm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

pllm_device to_plugin_device(const DeviceConfig& device) {
  return {device.type == DeviceType::kCuda ? PLLM_DEVICE_CUDA : PLLM_DEVICE_CPU, device.index};
}

pllm_dtype to_plugin_dtype(const std::string& dtype) {
  if (dtype == "f32") return PLLM_DTYPE_F32;
  if (dtype == "f16") return PLLM_DTYPE_F16;
  if (dtype == "bf16") return PLLM_DTYPE_BF16;
  return PLLM_DTYPE_INVALID;  // "auto": as stored
}

std::vector<pllm_block_copy> to_block_copies(const std::vector<BlockMapping>& mappings) {
  std::vector<pllm_block_copy> copies;
  copies.reserve(mappings.size());
  for (const BlockMapping& m : mappings) copies.push_back({m.src, m.dst});
  return copies;
}

// A request between submit() and the engine thread picking it up.
struct PendingRequest {
  RequestId id = -1;
  Request scheduled;
  GenerateRequest request;
  OutputCallback callback;
  std::uint64_t seed = 0;
  Clock::time_point arrival;
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
  std::vector<bool> finished;
};

class LlmEngine final : public Engine {
 public:
  LlmEngine(const HostConfig& config, PluginRegistry& registry);
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
  // ---- engine thread ----
  void loop();
  // Takes queued requests and aborts; false when the loop should end.
  bool drain_inbox();
  bool step();
  void run_block_operations(const SchedulerOutput& output);
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
  // Samples every row that is not verifying drafts, on the model's device; a
  // request with a non-finite logits row goes to `faulty` and gets no sample.
  std::vector<SequenceSample> sample(const SchedulerOutput& output, const pllm_tensor& logits,
                                     StepSamples& sampled, std::vector<RequestId>& faulty);
  // Speculative decoding: rows of speculative requests, their verification,
  // and drafting for the next step.
  bool speculative_row(const ScheduledSequence& row) const;
  // Token rows whose hidden state the draft reads; first_hidden_row[r] is where
  // batch row r's begin among them (-1: none).
  std::vector<std::int32_t> hidden_indices(const SchedulerOutput& output,
                                           std::vector<std::int32_t>& first_hidden_row) const;
  std::vector<SequenceSample> verify_drafts(const SchedulerOutput& output, const pllm_tensor& logits,
                                            std::vector<RequestId>& faulty);
  void propose_drafts(const SchedulerOutput& output, const pllm_tensor& hidden,
                      const std::vector<std::int32_t>& first_hidden_row);
  void publish(const UpdateResult& result, const StepSamples& sampled);
  // Runs a client's callback; a callback that throws loses its output, not the engine.
  void deliver(const OutputCallback& callback, RequestOutput&& out);
  void end_request(RequestId id, LiveRequest& live, RequestOutput& out, FinishReason reason,
                   const std::optional<std::string>& error);
  void abort_everything(const std::optional<std::string>& error);
  void update_metrics(const std::function<void(EngineMetrics&)>& change);
  LiveRequest& live(RequestId id) { return live_.at(id); }

  // ---- immutable after construction ----
  HostConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  AttentionInstance attention_;
  ModelInstance model_instance_;
  SamplerInstance sampler_;
  std::unique_ptr<SpeculativeDecoder> speculative_;  // with a speculative: section
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

LlmEngine::LlmEngine(const HostConfig& config, PluginRegistry& registry)
    : config_(config),
      log_(logger("engine")),
      tokenizer_(tokenizer::Tokenizer::from_model(config.model.path.string())) {
  const ConfiguredPlugins configured = load_configured_plugins(config, registry);
  if (!configured.ok()) throw ConfigError(join(configured.errors, "\n"));
  const auto library_of = [&](pllm_plugin_kind kind) {
    for (const ConfiguredPlugin& plugin : configured.plugins) {
      if (plugin.kind == kind) return std::shared_ptr<const PluginLibrary>(plugin.library);
    }
    throw ConfigError("no plugin configured for a required slot");
  };
  const pllm_device device = to_plugin_device(config.device);

  const auto started = Clock::now();
  const std::string model_options = config.model.plugin.options.dump();
  const std::string model_path = config.model.path.string();
  pllm_model_create_args model_args{sizeof(pllm_model_create_args), model_options.c_str(),
                                    model_path.c_str(), device, to_plugin_dtype(config.model.dtype)};
  log_->info("loading model {} with {}", model_path, config.model.plugin.plugin);
  model_instance_ = create_plugin_instance<pllm_model_api, pllm_model>(
      library_of(PLLM_PLUGIN_KIND_MODEL), model_args);
  log_->info("model loaded in {:.2f} s", seconds_between(started, Clock::now()));

  pllm_error error{};
  model_info_.struct_size = sizeof(pllm_model_info);
  check_plugin_call(model_instance_.api().get_info(model_instance_.get(), &model_info_, &error), error,
                    model_instance_.library(), "get_info");

  const std::string attention_options = config.attention.options.dump();
  pllm_attention_create_args attention_args{sizeof(pllm_attention_create_args),
                                            attention_options.c_str(), device};
  attention_ = create_plugin_instance<pllm_attention_api, pllm_attention_backend>(
      library_of(PLLM_PLUGIN_KIND_ATTENTION), attention_args);
  const std::string sampler_options = config.sampler.options.dump();
  // Models leave their logits on their device (SDK 2.0): the sampler samples
  // there, and only ids and requested logprobs cross to the host.
  pllm_sampler_create_args sampler_args{sizeof(pllm_sampler_create_args), sampler_options.c_str(), device};
  sampler_ = create_plugin_instance<pllm_sampler_api, pllm_sampler>(
      library_of(PLLM_PLUGIN_KIND_SAMPLER), sampler_args);
  if (config.speculative) {
    const SpeculativeConfig& spec = *config.speculative;
    const std::string spec_options = spec.plugin.options.dump();
    const std::string draft_path = spec.draft.string();
    const pllm_speculator_target target{sizeof(pllm_speculator_target), &model_instance_.api(),
                                        model_instance_.get(), &model_info_};
    pllm_speculator_create_args spec_args{sizeof(pllm_speculator_create_args), spec_options.c_str(),
                                          draft_path.c_str(), device, &target, spec.num_speculative_tokens};
    log_->info("loading draft {} with {} (K={})", draft_path, spec.plugin.plugin, spec.num_speculative_tokens);
    speculative_ = std::make_unique<SpeculativeDecoder>(
        spec,
        create_plugin_instance<pllm_speculator_api, pllm_speculator>(library_of(PLLM_PLUGIN_KIND_SPECULATOR),
                                                                     spec_args),
        model_info_, attention_, sampler_, config.cache.block_size);
  }

  // ---- the model and its tokenizer must agree ----
  if (static_cast<int>(tokenizer_.vocab_size()) > model_info_.vocab_size) {
    throw ConfigError(fmt::format("{}: the tokenizer has {} tokens but the model's vocabulary has {}",
                                  tokenizer_.source(), tokenizer_.vocab_size(), model_info_.vocab_size));
  }
  std::optional<tokenizer::ChatFormat> chat_override;
  if (config.model.chat_template) chat_override = tokenizer::parse_chat_format(*config.model.chat_template);
  if (chat_override || tokenizer_.config().chat_template) {
    chat_template_ = tokenizer::ChatTemplate::from_config(tokenizer_.config(), chat_override);
  }
  defaults_ = read_generation_defaults(
      config.model.path,
      std::span<const std::int32_t>(model_info_.eos_token_ids,
                                    static_cast<std::size_t>(std::max(0, model_info_.num_eos_token_ids))),
      tokenizer_.eos_id());

  // ---- limits ----
  const int model_limit = model_info_.max_position_embeddings;
  int max_model_len = config.scheduler.max_model_len > 0 ? config.scheduler.max_model_len : model_limit;
  if (model_limit > 0 && max_model_len > model_limit) {
    throw ConfigError(fmt::format("{}: scheduler.max_model_len={} exceeds the model's "
                                  "max_position_embeddings={}",
                                  config.sources.locate("scheduler.max_model_len"), max_model_len,
                                  model_limit));
  }
  // A GGUF file is served under its name without ".gguf" (SmolLM2-135M-Instruct.Q4_1).
  model_.served_name = (config.model.path.extension() == ".gguf" ? config.model.path.stem()
                                                                  : config.model.path.filename()).string();
  if (model_.served_name.empty()) model_.served_name = config.model.path.parent_path().filename().string();
  model_.architecture = model_info_.architecture ? model_info_.architecture : "";
  model_.vocab_size = model_info_.vocab_size;
  model_.max_model_len = max_model_len;
  model_.num_layers = model_info_.num_layers;
  model_.hidden_size = model_info_.hidden_size;

  // ---- the KV cache: bytes per block from the backend, blocks from the budget ----
  // The draft's layers share the pool and the block tables, after the target's.
  const int num_kv_layers = model_info_.num_layers + (speculative_ ? speculative_->num_draft_layers() : 0);
  const int num_speculative_tokens = speculative_ ? speculative_->num_speculative_tokens() : 0;
  const KvCacheSizing sizing = size_and_allocate_kv_cache(
      {config, attention_, model_instance_,
       pllm_kv_cache_spec{sizeof(pllm_kv_cache_spec), num_kv_layers, model_info_.num_kv_heads, model_info_.head_dim,
                          config.cache.block_size, model_info_.dtype},
       max_model_len, num_speculative_tokens});
  const int num_device_blocks = sizing.num_device_blocks;
  num_host_blocks_ = sizing.num_host_blocks;

  SchedulerConfig scheduler_config = config.scheduler;
  scheduler_config.max_model_len = max_model_len;
  scheduler_config.num_lookahead_tokens = num_speculative_tokens;
  scheduler_config.num_draft_slots = std::max(0, num_speculative_tokens - 1);
  try {
    scheduler_ = std::make_unique<Scheduler>(scheduler_config, config.cache, num_device_blocks,
                                             num_host_blocks_);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(fmt::format("{}: {}", config.sources.locate("scheduler"), e.what()));
  }

  limits_.vocab_size = model_info_.vocab_size;
  limits_.max_logprobs = config.model.max_logprobs < 0 ? model_info_.vocab_size : config.model.max_logprobs;
  limits_.max_model_len = max_model_len;
  limits_.max_n = scheduler_config.max_num_seqs;
  limits_.scheduler = scheduler_config;
  limits_.block_size = config.cache.block_size;
  limits_.num_device_blocks = num_device_blocks;
  limits_.speculative_decoding = speculative_ != nullptr;
  metrics_.scheduler = scheduler_->stats();
  metrics_.speculative_decoding_enabled = speculative_ != nullptr;

  log_->info("{}; max_model_len={}", describe_kv_cache_sizing(sizing, config.cache.block_size, config.device.str()),
             max_model_len);
}

// ---- client side ----------------------------------------------------------------

void LlmEngine::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable() || stop_requested_) return;
  loop_running_ = true;
  thread_ = std::thread([this] { loop(); });
}

RequestId LlmEngine::submit(GenerateRequest request, OutputCallback on_output) {
  Request scheduled = to_scheduler_request(request, limits_);
  std::lock_guard lock(mutex_);
  if (!failure_.empty()) {
    throw EngineUnavailable("the engine failed and is not serving: " + failure_, std::chrono::seconds(30));
  }
  if (!accepting_) throw EngineUnavailable("the engine is shutting down", std::chrono::seconds(5));
  PendingRequest pending;
  pending.id = next_request_id_++;
  pending.scheduled = std::move(scheduled);
  pending.scheduled.id = pending.id;
  pending.seed = request.sampling.seed ? *request.sampling.seed : seed_generator_();
  pending.request = std::move(request);
  pending.callback = std::move(on_output);
  pending.arrival = Clock::now();
  const RequestId id = pending.id;
  in_flight_.insert(id);
  inbox_.push_back(std::move(pending));
  wake_.notify_one();
  return id;
}

bool LlmEngine::abort(RequestId request) {
  std::lock_guard lock(mutex_);
  if (!in_flight_.contains(request)) return false;
  abort_inbox_.push_back(request);
  wake_.notify_one();
  return true;
}

void LlmEngine::shutdown(ShutdownMode mode) {
  std::thread thread;
  {
    std::lock_guard lock(mutex_);
    accepting_ = false;
    if (!stop_requested_ || mode == ShutdownMode::kAbort) shutdown_mode_ = mode;
    stop_requested_ = true;
    thread = std::move(thread_);
    wake_.notify_one();
  }
  if (thread.joinable()) {
    thread.join();
  } else if (!loop_running_) {
    // Never started: requests queued before start() still get their final output.
    std::deque<PendingRequest> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(inbox_);
      in_flight_.clear();
    }
    for (PendingRequest& p : pending) {
      RequestOutput out;
      out.request_id = p.id;
      out.finished = true;
      out.num_prompt_tokens = static_cast<int>(p.request.prompt_token_ids.size());
      for (int i = 0; i < p.request.sampling.n; ++i) {
        SequenceDelta delta;
        delta.index = i;
        delta.finish_reason = FinishReason::kAborted;
        out.sequences.push_back(std::move(delta));
      }
      p.callback(std::move(out));
    }
  }
}

std::string LlmEngine::health_detail() const {
  {
    std::lock_guard lock(mutex_);
    if (!failure_.empty()) return "the engine loop failed: " + failure_;
    if (stop_requested_ && !loop_running_) return "the engine is shut down";
  }
  if (!loop_running_) return "the engine loop is not running";
  const std::int64_t started = step_started_ns_.load();
  if (started != 0) {
    const std::int64_t now = Clock::now().time_since_epoch().count();
    // A step far longer than any seen so far (and over a minute) is a hang,
    // not a big batch: CPU prefill steps legitimately take seconds.
    const std::int64_t limit = std::max<std::int64_t>(60'000'000'000, 20 * longest_step_ns_.load());
    if (now - started > limit) {
      return fmt::format("the current engine step has been running for {:.0f} s",
                         static_cast<double>(now - started) / 1e9);
    }
  }
  return "";
}

std::optional<std::string> LlmEngine::failure() const {
  std::lock_guard lock(mutex_);
  if (failure_.empty()) return std::nullopt;
  return failure_;
}

EngineMetrics LlmEngine::metrics() const {
  std::lock_guard lock(metrics_mutex_);
  return metrics_;
}

void LlmEngine::update_metrics(const std::function<void(EngineMetrics&)>& change) {
  std::lock_guard lock(metrics_mutex_);
  change(metrics_);
}

// ---- engine thread --------------------------------------------------------------

void LlmEngine::loop() {
  log_->debug("engine loop started");
  try {
    while (drain_inbox()) {
      if (!scheduler_->has_unfinished()) continue;
      if (!step()) {
        // Nothing could be scheduled (every request waits for blocks that a
        // swap-in cannot get yet): wait for an abort or a new request.
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::milliseconds(10));
      }
    }
  } catch (const std::exception& e) {
    log_->error("engine step failed: {}", e.what());
    {
      std::lock_guard lock(mutex_);
      failure_ = e.what();
      accepting_ = false;
    }
    abort_everything(std::string("the engine failed: ") + e.what());
  }
  step_started_ns_ = 0;
  loop_running_ = false;
  log_->debug("engine loop stopped");
}

bool LlmEngine::drain_inbox() {
  std::deque<PendingRequest> arrived;
  std::vector<RequestId> aborted;
  bool stop = false;
  ShutdownMode mode = ShutdownMode::kDrain;
  {
    std::unique_lock lock(mutex_);
    const auto has_work = [&] {
      return !inbox_.empty() || !abort_inbox_.empty() || stop_requested_ || scheduler_->has_unfinished();
    };
    wake_.wait(lock, has_work);
    arrived.swap(inbox_);
    aborted.swap(abort_inbox_);
    stop = stop_requested_;
    mode = shutdown_mode_;
  }
  // 0: speculation is never turned off by load.
  const std::size_t disable_at = config_.speculative && config_.speculative->disable_by_batch_size
                                     ? static_cast<std::size_t>(*config_.speculative->disable_by_batch_size)
                                     : 0;
  for (PendingRequest& p : arrived) {
    const auto prompt_tokens = static_cast<std::int64_t>(p.request.prompt_token_ids.size());
    if (p.scheduled.speculative && disable_at > 0 && scheduler_->num_unfinished() >= disable_at) {
      decode_without_speculation(p.scheduled, p.request.cache_salt);
      update_metrics([](EngineMetrics& m) { ++m.spec_decode_disabled_by_batch_size; });
    }
    try {
      scheduler_->add_request(std::move(p.scheduled));
    } catch (const RequestRejected& e) {
      // submit() ran the same checks, so this is an engine bug; fail the request, not the engine.
      log_->error("request {} refused after it was accepted: {}", p.id, e.what());
      RequestOutput out;
      out.request_id = p.id;
      out.finished = true;
      out.error = e.reason();
      deliver(p.callback, std::move(out));
      std::lock_guard lock(mutex_);
      in_flight_.erase(p.id);
      continue;
    }
    LiveRequest request;
    request.request = std::move(p.request);
    request.callback = std::move(p.callback);
    request.seed = p.seed;
    request.arrival = p.arrival;
    live_.emplace(p.id, std::move(request));
    update_metrics([&](EngineMetrics& m) { m.prompt_tokens_total += prompt_tokens; });
  }
  for (const RequestId id : aborted) {
    const auto found = live_.find(id);
    if (found == live_.end()) continue;  // finished meanwhile
    scheduler_->abort(id);
    RequestOutput out;
    end_request(id, found->second, out, FinishReason::kAborted, std::nullopt);
  }
  if (!arrived.empty() || !aborted.empty()) {
    const SchedulerStats stats = scheduler_->stats();
    update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
  }
  if (stop && (mode == ShutdownMode::kAbort || !scheduler_->has_unfinished())) {
    abort_everything(std::nullopt);
    return false;
  }
  return true;
}

bool LlmEngine::step() {
  SchedulerOutput output = scheduler_->schedule();
  if (output.empty()) return false;
  const auto started = Clock::now();
  step_started_ns_ = started.time_since_epoch().count();

  for (const ScheduledSequence& row : output.sequences) {
    LiveRequest& request = live(row.request_id);
    if (!request.first_scheduled) {
      request.first_scheduled = started;
      request.num_cached_prompt_tokens = row.num_computed_tokens;
      update_metrics([&](EngineMetrics& m) { m.queue_time.observe(seconds_between(request.arrival, started)); });
    }
  }

  run_block_operations(output);

  std::vector<std::int32_t> first_hidden_row;
  const std::vector<std::int32_t> hidden_rows = hidden_indices(output, first_hidden_row);
  const pllm_batch batch = plugin_batch_view(output.batch, hidden_rows);

  pllm_error error{};
  check_plugin_call(attention_.api().plan(attention_.get(), &batch, &error), error, attention_.library(),
                    "plan");
  pllm_tensor logits{}, hidden{};
  logits.struct_size = hidden.struct_size = sizeof(pllm_tensor);
  pllm_forward_output forward{sizeof(pllm_forward_output), &logits, &hidden};
  const pllm_attention_ref attention = attention_ref(attention_);
  check_plugin_call(model_instance_.api().forward(model_instance_.get(), &batch, &attention, &forward, &error),
                    error, model_instance_.library(), "forward");

  StepSamples sampled;
  std::vector<SequenceSample> samples;
  if (batch.num_logits > 0) {
    if (logits.dtype != PLLM_DTYPE_F32 || logits.ndim != 2 || logits.shape[0] != batch.num_logits ||
        logits.shape[1] != model_info_.vocab_size) {
      throw PluginCallError(PLLM_ERROR_INTERNAL,
                            fmt::format("plugin '{}': forward returned logits that are not f32 [{}, {}]",
                                        model_instance_.library().name(), batch.num_logits,
                                        model_info_.vocab_size));
    }
    std::vector<RequestId> faulty;
    samples = sample(output, logits, sampled, faulty);
    if (speculative_) {
      std::vector<SequenceSample> verified = verify_drafts(output, logits, faulty);
      samples.insert(samples.end(), std::make_move_iterator(verified.begin()),
                     std::make_move_iterator(verified.end()));
    }
    if (!faulty.empty()) {
      // A faulty request's other rows (its other sequences) commit nothing either.
      std::unordered_set<SequenceId> dropped;
      for (const ScheduledSequence& row : output.sequences) {
        if (std::find(faulty.begin(), faulty.end(), row.request_id) != faulty.end()) dropped.insert(row.sequence_id);
      }
      std::erase_if(samples, [&](const SequenceSample& s) { return dropped.contains(s.sequence_id); });
      end_requests_with_non_finite_logits(faulty);
    }
  }
  const UpdateResult result = scheduler_->update(output, samples);
  publish(result, sampled);
  if (speculative_ && batch.num_hidden > 0) {
    if (hidden.dtype != PLLM_DTYPE_F32 || hidden.ndim != 2 || hidden.shape[0] != batch.num_hidden ||
        hidden.shape[1] != model_info_.hidden_size || hidden.strides[1] != 1) {
      throw PluginCallError(PLLM_ERROR_INTERNAL,
                            fmt::format("plugin '{}': forward returned hidden states that are not f32 [{}, {}]",
                                        model_instance_.library().name(), batch.num_hidden,
                                        model_info_.hidden_size));
    }
    propose_drafts(output, hidden, first_hidden_row);
  }

  const auto finished = Clock::now();
  const std::int64_t duration = (finished - started).count();
  if (duration > longest_step_ns_) longest_step_ns_ = duration;
  step_started_ns_ = 0;
  const SchedulerStats stats = scheduler_->stats();
  update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
  return true;
}

void LlmEngine::end_requests_with_non_finite_logits(const std::vector<RequestId>& flagged) {
  std::vector<RequestId> faulty = flagged;
  std::sort(faulty.begin(), faulty.end());
  faulty.erase(std::unique(faulty.begin(), faulty.end()), faulty.end());
  for (const RequestId id : faulty) {
    const std::string error = fmt::format("plugin '{}': forward returned non-finite logits (NaN or +inf, or all "
                                          "-inf) for this request; it was ended, the engine serves the others",
                                          model_instance_.library().name());
    log_->error("request {}: {}", id, error);
    scheduler_->abort(id);
    RequestOutput out;
    end_request(id, live(id), out, FinishReason::kAborted, error);
  }
}

void LlmEngine::run_block_operations(const SchedulerOutput& output) {
  pllm_error error{};
  const auto run = [&](auto fn, const std::vector<BlockMapping>& mappings, const char* what) {
    if (mappings.empty()) return;
    const std::vector<pllm_block_copy> copies = to_block_copies(mappings);
    check_plugin_call(fn(attention_.get(), copies.data(), static_cast<std::int64_t>(copies.size()), &error),
                      error, attention_.library(), what);
  };
  run(attention_.api().swap_out, output.blocks_to_swap_out, "swap_out");
  run(attention_.api().swap_in, output.blocks_to_swap_in, "swap_in");
  run(attention_.api().copy_blocks, output.blocks_to_copy, "copy_blocks");
}

std::vector<SequenceSample> LlmEngine::sample(const SchedulerOutput& output, const pllm_tensor& logits,
                                              StepSamples& sampled, std::vector<RequestId>& faulty) {
  // One sampler row per token to sample. A prompt that completes for an n > 1
  // request is sampled n times from the same logits row, once per sequence.
  struct Slot {
    std::size_t row = 0;  // index into output.sequences
    int sequence_index = 0;
    int logits_row = 0;
    const Sequence* sequence = nullptr;  // the row's sequence (the parent when forking)
  };
  std::vector<Slot> slots;
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    if (row.num_samples == 0 || row.num_draft_tokens > 0) continue;  // drafts: verify_drafts()
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    if (state == nullptr) continue;
    int index = 0;
    for (std::size_t s = 0; s < state->sequences.size(); ++s) {
      if (state->sequences[s].id == row.sequence_id) index = static_cast<int>(s);
    }
    const Sequence* sequence = &state->sequences[static_cast<std::size_t>(index)];
    for (int j = 0; j < row.num_samples; ++j) {
      slots.push_back({r, row.num_samples > 1 ? j : index, row.first_logits_index, sequence});
    }
  }

  if (slots.empty()) return {};
  std::vector<pllm_sample_row> rows(slots.size());
  int max_top = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const ScheduledSequence& row = output.sequences[slots[i].row];
    LiveRequest& request = live(row.request_id);
    const SamplingOptions& options = request.request.sampling;
    const int index = slots[i].sequence_index;
    if (static_cast<int>(request.params.size()) <= index) {
      request.params.resize(static_cast<std::size_t>(options.n));
      for (int s = 0; s < options.n; ++s) {
        pllm_sampling_params& p = request.params[static_cast<std::size_t>(s)];
        p.struct_size = sizeof(pllm_sampling_params);
        p.temperature = options.temperature;
        p.top_p = options.top_p;
        p.top_k = std::max(0, options.top_k);
        p.min_p = options.min_p;
        p.presence_penalty = options.presence_penalty;
        p.frequency_penalty = options.frequency_penalty;
        p.repetition_penalty = options.repetition_penalty;
        p.seed = sequence_seed(request.seed, s);
        p.num_top_logprobs = options.logprobs.value_or(0);
      }
    }
    max_top = std::max(max_top, options.logprobs.value_or(0));
    const Sequence* sequence = slots[i].sequence;
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    const bool forking = row.num_samples > 1;
    pllm_sample_row& out = rows[i];
    out.struct_size = sizeof(pllm_sample_row);
    out.params = &request.params[static_cast<std::size_t>(index)];
    out.prompt_token_ids = request.request.prompt_token_ids.data();
    out.num_prompt_tokens = static_cast<std::int32_t>(prompt_len);
    // Output tokens so far: none at the prompt; after it, the sequence's tail
    // (after recompute preemption a prefill row also continues a sequence).
    const std::size_t num_outputs = forking ? 0 : sequence->token_ids.size() - prompt_len;
    out.output_token_ids = sequence->token_ids.data() + prompt_len;
    out.num_output_tokens = static_cast<std::int32_t>(num_outputs);
    out.random_offset = num_outputs;
    // The sampler gathers the row on the model's device.
    out.logits_row = slots[i].logits_row;
  }

  const std::size_t n = slots.size();
  std::vector<std::int32_t> tokens(n);
  std::vector<float> logprobs(n);
  std::vector<std::int32_t> top_tokens(n * static_cast<std::size_t>(max_top));
  std::vector<float> top_logprobs(n * static_cast<std::size_t>(max_top));
  std::vector<std::int32_t> status(n);
  pllm_sample_batch batch{sizeof(pllm_sample_batch), static_cast<std::int32_t>(n), sizeof(pllm_sample_row),
                          rows.data(), &logits};
  pllm_sample_output out{sizeof(pllm_sample_output), tokens.data(), logprobs.data(), max_top,
                         max_top > 0 ? top_tokens.data() : nullptr, max_top > 0 ? top_logprobs.data() : nullptr,
                         status.data()};
  pllm_error error{};
  check_plugin_call(sampler_.api().sample(sampler_.get(), &batch, &out, &error), error, sampler_.library(),
                    "sample");

  std::vector<SequenceSample> samples;
  for (std::size_t i = 0; i < n; ++i) {
    const ScheduledSequence& row = output.sequences[slots[i].row];
    if (status[i] == PLLM_SAMPLE_NON_FINITE_LOGITS) {
      faulty.push_back(row.request_id);
      continue;
    }
    if (status[i] != PLLM_SAMPLE_OK) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': sample returned row status {}",
                                                             sampler_.library().name(), status[i]));
    }
    if (tokens[i] < 0 || tokens[i] >= model_info_.vocab_size) {
      throw PluginCallError(PLLM_ERROR_INTERNAL, fmt::format("plugin '{}': sampled token {} outside the "
                                                             "vocabulary of {}",
                                                             sampler_.library().name(), tokens[i],
                                                             model_info_.vocab_size));
    }
    if (samples.empty() || samples.back().sequence_id != row.sequence_id) {
      samples.push_back({row.sequence_id, {}, {}});
    }
    samples.back().token_ids.push_back(tokens[i]);
    SampledToken& token = sampled[{row.request_id, slots[i].sequence_index}];
    token.token = tokens[i];
    token.logprob.token_id = tokens[i];
    token.logprob.logprob = logprobs[i];
    const int wanted = live(row.request_id).request.sampling.logprobs.value_or(0);
    for (int k = 0; k < wanted; ++k) {
      const std::size_t at = i * static_cast<std::size_t>(max_top) + static_cast<std::size_t>(k);
      if (top_tokens[at] < 0) break;
      token.logprob.top.emplace_back(top_tokens[at], top_logprobs[at]);
    }
  }
  return samples;
}

bool LlmEngine::speculative_row(const ScheduledSequence& row) const {
  if (!speculative_) return false;
  const SequenceGroup* state = scheduler_->request_state(row.request_id);
  return state != nullptr && state->request.speculative;
}

std::vector<std::int32_t> LlmEngine::hidden_indices(const SchedulerOutput& output,
                                                    std::vector<std::int32_t>& first_hidden_row) const {
  // The draft reads the target's feature at every position it fills its own KV for.
  std::vector<std::int32_t> rows;
  first_hidden_row.assign(output.sequences.size(), -1);
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    if (!speculative_row(output.sequences[r])) continue;
    first_hidden_row[r] = static_cast<std::int32_t>(rows.size());
    for (std::int32_t t = output.batch.query_start_loc[r]; t < output.batch.query_start_loc[r + 1]; ++t) {
      rows.push_back(t);
    }
  }
  return rows;
}

std::vector<SequenceSample> LlmEngine::verify_drafts(const SchedulerOutput& output, const pllm_tensor& logits,
                                                     std::vector<RequestId>& faulty) {
  std::vector<VerifyRequest> requests;
  for (const ScheduledSequence& row : output.sequences) {
    if (row.num_draft_tokens == 0) continue;
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    if (state == nullptr) continue;
    const Sequence* sequence = state->find_sequence(row.sequence_id);
    const LiveRequest& request = live(row.request_id);
    const std::span<const std::int32_t> tokens(sequence->token_ids);
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    requests.push_back({row.request_id, row.sequence_id,
                        std::span<const std::int32_t>(sequence->draft_token_ids)
                            .first(static_cast<std::size_t>(row.num_draft_tokens)),
                        row.first_logits_index, &request.params.front(), tokens.first(prompt_len),
                        tokens.subspan(prompt_len)});
  }
  if (requests.empty()) return {};
  std::vector<std::uint8_t> non_finite;
  std::vector<std::vector<std::int32_t>> accepted = speculative_->verify(requests, logits, non_finite);
  update_metrics([&](EngineMetrics& m) {
    m.spec_decode_accepted_per_position.resize(static_cast<std::size_t>(speculative_->num_speculative_tokens()), 0);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (non_finite[i]) continue;
      const auto num_accepted = static_cast<std::int64_t>(accepted[i].size()) - 1;  // the last token is not a draft
      ++m.spec_decode_num_drafts;
      m.spec_decode_draft_tokens += static_cast<std::int64_t>(requests[i].drafts.size());
      m.spec_decode_accepted_tokens += num_accepted;
      for (std::int64_t d = 0; d < num_accepted; ++d) ++m.spec_decode_accepted_per_position[static_cast<std::size_t>(d)];
    }
  });
  std::vector<SequenceSample> samples;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (non_finite[i]) {
      faulty.push_back(requests[i].request);
      continue;
    }
    samples.push_back({requests[i].sequence, std::move(accepted[i]), {}});
  }
  return samples;
}

void LlmEngine::propose_drafts(const SchedulerOutput& output, const pllm_tensor& hidden,
                               const std::vector<std::int32_t>& first_hidden_row) {
  const int k = speculative_->num_speculative_tokens();
  std::vector<DraftRequest> requests;
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    // Requests that ended this step are no longer speculative rows: nothing to draft.
    if (first_hidden_row[r] < 0 || !speculative_row(row)) continue;
    const std::int32_t row_hidden = first_hidden_row[r];
    const SequenceGroup* state = scheduler_->request_state(row.request_id);
    const Sequence* sequence = state->find_sequence(row.sequence_id);
    if (sequence == nullptr || sequence->finished()) continue;  // its blocks are gone
    const int computed = sequence->num_computed_tokens - row.num_computed_tokens;
    if (computed <= 0) continue;
    const LiveRequest& request = live(row.request_id);
    DraftRequest draft;
    draft.request = row.request_id;
    draft.sequence = row.sequence_id;
    draft.block_table = std::span<const std::int32_t>(output.batch.block_tables)
                            .subspan(r * static_cast<std::size_t>(output.batch.max_blocks_per_seq),
                                     static_cast<std::size_t>(output.batch.max_blocks_per_seq));
    draft.first_position = row.num_computed_tokens;
    for (int j = 0; j < computed; ++j) {
      draft.next_tokens.push_back(sequence->token_ids[static_cast<std::size_t>(row.num_computed_tokens + j + 1)]);
      draft.hidden_rows.push_back(row_hidden + j);
    }
    const std::size_t prompt_len = request.request.prompt_token_ids.size();
    const int num_tokens = sequence->num_tokens();
    const int outputs = num_tokens - static_cast<int>(prompt_len);
    if (row.num_samples > 0) {
      // Drafts the next step can use: within max_tokens and the context.
      draft.num_drafts = std::min({k, state->request.max_tokens - outputs - 1,
                                   limits_.max_model_len - num_tokens});
      draft.num_drafts = std::max(0, draft.num_drafts);
      draft.params = &request.params.front();
    }
    const std::span<const std::int32_t> tokens(sequence->token_ids);
    draft.prompt = tokens.first(prompt_len);
    draft.outputs = tokens.subspan(prompt_len);
    requests.push_back(std::move(draft));
  }
  if (requests.empty()) return;
  const std::vector<std::vector<std::int32_t>> drafts = speculative_->propose(requests, hidden);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (!drafts[i].empty()) scheduler_->set_draft_tokens(requests[i].sequence, drafts[i]);
  }
}

void LlmEngine::publish(const UpdateResult& result, const StepSamples& sampled) {
  const auto now = Clock::now();
  std::map<RequestId, RequestOutput> outputs;  // ordered: deterministic callback order
  std::int64_t new_tokens = 0;
  std::vector<double> first_token_latencies;
  std::vector<double> inter_token_gaps;
  for (const SequenceUpdate& update : result.sequences) {
    if (update.new_token_ids.empty() && !update.finish_reason) continue;
    LiveRequest& request = live(update.request_id);
    const auto index = static_cast<std::size_t>(update.sequence_index);
    while (request.outputs.size() <= index) {
      request.outputs.emplace_back(tokenizer_, request.request.sampling, request.request.prompt_token_ids,
                                   defaults_.eos_token_ids);
      request.last_token_time.emplace_back();
      request.finished.push_back(false);
    }
    RequestOutput& out = outputs[update.request_id];
    SequenceDelta delta;
    delta.index = update.sequence_index;
    bool stopped = false;
    for (const std::int32_t token : update.new_token_ids) {
      if (request.request.sampling.logprobs) {
        const auto found = sampled.find({update.request_id, update.sequence_index});
        if (found != sampled.end() && found->second.token == token) delta.logprobs.push_back(found->second.logprob);
      }
      ++new_tokens;
      ++request.num_generated_tokens;
      if (request.outputs[index].push(token, delta)) {
        stopped = true;
        break;
      }
    }
    if (!update.new_token_ids.empty()) {
      if (!request.first_token) {
        request.first_token = now;
        first_token_latencies.push_back(seconds_between(request.arrival, now));
      }
      if (const auto last = request.last_token_time[index]) {
        inter_token_gaps.push_back(seconds_between(*last, now));
      }
      request.last_token_time[index] = now;
    }
    if (stopped && !update.finish_reason) {
      scheduler_->finish_sequence(update.sequence_id, FinishReason::kStop);
    } else if (!stopped && update.finish_reason) {
      request.outputs[index].finish(*update.finish_reason, delta);
    }
    if (delta.finish_reason) request.finished[index] = true;
    out.sequences.push_back(std::move(delta));
  }
  // One lock for the step's observations, not one per sequence.
  update_metrics([&](EngineMetrics& m) {
    m.generation_tokens_total += new_tokens;
    for (const double latency : first_token_latencies) m.time_to_first_token.observe(latency);
    for (const double gap : inter_token_gaps) m.inter_token_latency.observe(gap);
  });

  for (auto& [id, out] : outputs) {
    LiveRequest& request = live(id);
    if (scheduler_->request_state(id) == nullptr) {
      end_request(id, request, out, FinishReason::kStop, std::nullopt);
      continue;
    }
    out.request_id = id;
    out.num_prompt_tokens = static_cast<int>(request.request.prompt_token_ids.size());
    out.num_cached_prompt_tokens = request.num_cached_prompt_tokens;
    out.num_generated_tokens = request.num_generated_tokens;
    deliver(request.callback, std::move(out));
  }
}

void LlmEngine::deliver(const OutputCallback& callback, RequestOutput&& out) {
  const RequestId id = out.request_id;
  try {
    callback(std::move(out));
  } catch (const std::exception& e) {
    log_->error("the output callback of request {} threw: {}", id, e.what());
  }
}

// Sends the request's last output: `out` holds this step's deltas; every
// sequence without a finish reason yet ends with `reason`.
void LlmEngine::end_request(RequestId id, LiveRequest& request, RequestOutput& out, FinishReason reason,
                            const std::optional<std::string>& error) {
  const auto now = Clock::now();
  const int n = request.request.sampling.n;
  while (static_cast<int>(request.finished.size()) < n) {
    request.outputs.emplace_back(tokenizer_, request.request.sampling, request.request.prompt_token_ids,
                                 defaults_.eos_token_ids);
    request.finished.push_back(false);
    request.last_token_time.emplace_back();
  }
  for (int i = 0; i < n; ++i) {
    if (request.finished[static_cast<std::size_t>(i)]) continue;
    auto found = std::find_if(out.sequences.begin(), out.sequences.end(),
                              [i](const SequenceDelta& d) { return d.index == i; });
    if (found == out.sequences.end()) {
      out.sequences.push_back(SequenceDelta{});
      found = std::prev(out.sequences.end());
      found->index = i;
    }
    if (reason == FinishReason::kAborted) {
      found->finish_reason = FinishReason::kAborted;
    } else {
      request.outputs[static_cast<std::size_t>(i)].finish(reason, *found);
    }
    request.finished[static_cast<std::size_t>(i)] = true;
  }
  std::sort(out.sequences.begin(), out.sequences.end(),
            [](const SequenceDelta& a, const SequenceDelta& b) { return a.index < b.index; });
  out.request_id = id;
  out.finished = true;
  out.error = error;
  out.num_prompt_tokens = static_cast<int>(request.request.prompt_token_ids.size());
  out.num_cached_prompt_tokens = request.num_cached_prompt_tokens;
  out.num_generated_tokens = request.num_generated_tokens;

  const bool aborted = std::any_of(out.sequences.begin(), out.sequences.end(), [](const SequenceDelta& d) {
    return d.finish_reason == FinishReason::kAborted;
  });
  const bool length = std::any_of(out.sequences.begin(), out.sequences.end(), [](const SequenceDelta& d) {
    return d.finish_reason == FinishReason::kLength;
  });
  update_metrics([&](EngineMetrics& m) {
    if (aborted) {
      ++m.requests_aborted;
      return;
    }
    m.e2e_request_latency.observe(seconds_between(request.arrival, now));
    if (length) {
      ++m.requests_finished_length;
    } else {
      ++m.requests_finished_stop;
    }
  });
  OutputCallback callback = std::move(request.callback);
  if (speculative_) speculative_->forget(id);
  live_.erase(id);
  {
    std::lock_guard lock(mutex_);
    in_flight_.erase(id);
  }
  deliver(callback, std::move(out));
}

void LlmEngine::abort_everything(const std::optional<std::string>& error) {
  std::deque<PendingRequest> pending;
  {
    std::lock_guard lock(mutex_);
    pending.swap(inbox_);
  }
  for (PendingRequest& p : pending) {
    LiveRequest request;
    request.request = std::move(p.request);
    request.callback = std::move(p.callback);
    request.arrival = p.arrival;
    live_.emplace(p.id, std::move(request));
  }
  std::vector<RequestId> ids;
  for (const auto& [id, request] : live_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (const RequestId id : ids) {
    try {
      scheduler_->abort(id);
    } catch (const std::exception& e) {
      log_->error("aborting request {}: {}", id, e.what());
    }
    RequestOutput out;
    end_request(id, live(id), out, FinishReason::kAborted, error);
  }
  const SchedulerStats stats = scheduler_->stats();
  update_metrics([&](EngineMetrics& m) { m.scheduler = stats; });
}

}  // namespace

std::unique_ptr<Engine> Engine::create(const HostConfig& config, PluginRegistry& registry) {
  return std::make_unique<LlmEngine>(config, registry);
}

}  // namespace pagedllm
