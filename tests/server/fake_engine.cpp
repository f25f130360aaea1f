#include "tests/server/fake_engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/stop_matcher.h"

namespace pagedllm::testing {

using Clock = std::chrono::steady_clock;

struct FakeEngine::Sequence {
  int index = 0;
  int generated = 0;
  bool finished = false;
  tokenizer::IncrementalDetokenizer detokenizer;
  std::optional<tokenizer::StopMatcher> stop;
};

struct FakeEngine::Active {
  RequestId id = -1;
  GenerateRequest request;
  OutputCallback callback;
  std::vector<Sequence> sequences;
  int max_tokens = 0;
  bool abort_requested = false;
  bool started = false;
  int generated = 0;
  Clock::time_point arrival;
  Clock::time_point last_token;
};

FakeEngine::FakeEngine(FakeEngineOptions options)
    : options_(std::move(options)), tokenizer_(tokenizer::Tokenizer::from_model_dir(options_.tokenizer_dir)) {
  if (options_.has_chat_template) chat_template_ = tokenizer::ChatTemplate::from_config(tokenizer_.config(), std::nullopt);
  model_.served_name = options_.served_name;
  model_.architecture = "FakeForCausalLM";
  model_.vocab_size = static_cast<int>(tokenizer_.vocab_size());
  model_.max_model_len = options_.max_model_len;
  metrics_.scheduler.kv.num_device_blocks = kNumBlocks;
  metrics_.scheduler.kv.num_free_device_blocks = kNumBlocks;
}

FakeEngine::~FakeEngine() { shutdown(ShutdownMode::kAbort); }

void FakeEngine::start() {
  std::lock_guard lock(mutex_);
  if (started_) return;
  started_ = running_ = true;
  thread_ = std::thread([this] { loop(); });
}

RequestId FakeEngine::submit(GenerateRequest request, OutputCallback on_output) {
  std::lock_guard lock(mutex_);
  if (!accepting_) throw EngineUnavailable("the engine is shutting down", std::chrono::seconds(1));
  if (unavailable_) throw EngineUnavailable(*unavailable_, std::chrono::seconds(2));
  const RequestId id = next_id_++;
  const int prompt_len = static_cast<int>(request.prompt_token_ids.size());
  const int max_len = options_.max_model_len;
  if (reject_next_) {
    const auto [reason, param] = *std::exchange(reject_next_, std::nullopt);
    throw RequestRejected(id, reason, param);
  }
  if (prompt_len == 0) throw RequestRejected(id, "the prompt is empty");
  if (prompt_len >= max_len) throw RequestRejected(id, fmt::format("prompt of {} tokens >= max_model_len {}", prompt_len, max_len));
  if (request.sampling.max_tokens && prompt_len + *request.sampling.max_tokens > max_len) {
    throw RequestRejected(id, fmt::format("prompt ({}) + max_tokens ({}) > max_model_len ({})", prompt_len,
                                          *request.sampling.max_tokens, max_len));
  }
  if (request.sampling.n < 1 || request.sampling.n > max_n()) throw RequestRejected(id, "n out of range");
  if (request.sampling.logprobs && *request.sampling.logprobs > max_logprobs()) {
    throw RequestRejected(id, "logprobs out of range");
  }
  auto active = std::make_unique<Active>();
  active->id = id;
  active->max_tokens = request.sampling.max_tokens.value_or(max_len - prompt_len);
  active->arrival = Clock::now();
  for (int s = 0; s < request.sampling.n; ++s) {
    Sequence sequence{s, 0, false,
                      tokenizer::IncrementalDetokenizer(tokenizer_, request.sampling.skip_special_tokens,
                                                        request.prompt_token_ids),
                      std::nullopt};
    if (!request.sampling.stop.empty()) {
      sequence.stop.emplace(request.sampling.stop, request.sampling.include_stop_str_in_output);
    }
    active->sequences.push_back(std::move(sequence));
  }
  requests_.push_back(request);
  active->request = std::move(request);
  active->callback = std::move(on_output);
  active_.emplace(id, std::move(active));
  changed_.notify_all();
  return id;
}

bool FakeEngine::abort(RequestId request) {
  std::lock_guard lock(mutex_);
  const auto it = active_.find(request);
  if (it == active_.end() || it->second->abort_requested) return false;
  it->second->abort_requested = true;
  aborted_.push_back(request);
  changed_.notify_all();
  return true;
}

void FakeEngine::shutdown(ShutdownMode mode) {
  std::unique_lock lock(mutex_);
  accepting_ = false;
  if (mode == ShutdownMode::kAbort) {
    for (auto& [id, active] : active_) active->abort_requested = true;
    paused_ = false;
  }
  changed_.notify_all();
  if (running_) changed_.wait(lock, [&] { return active_.empty(); });
  running_ = false;
  changed_.notify_all();
  lock.unlock();
  if (thread_.joinable()) thread_.join();
}

bool FakeEngine::healthy() const {
  std::lock_guard lock(mutex_);
  return running_ && healthy_;
}

std::string FakeEngine::health_detail() const {
  std::lock_guard lock(mutex_);
  if (!running_) return "the engine is not running";
  return healthy_ ? "" : health_detail_;
}

EngineMetrics FakeEngine::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void FakeEngine::pause() {
  std::lock_guard lock(mutex_);
  paused_ = true;
}

void FakeEngine::resume() {
  std::lock_guard lock(mutex_);
  paused_ = false;
  changed_.notify_all();
}

void FakeEngine::set_health(bool healthy, std::string detail) {
  std::lock_guard lock(mutex_);
  healthy_ = healthy;
  health_detail_ = std::move(detail);
}

void FakeEngine::set_unavailable(std::optional<std::string> reason) {
  std::lock_guard lock(mutex_);
  unavailable_ = std::move(reason);
}

void FakeEngine::reject_next(std::string reason, std::string param) {
  std::lock_guard lock(mutex_);
  reject_next_.emplace(std::move(reason), std::move(param));
}

void FakeEngine::fail_next_step(std::string error) {
  std::lock_guard lock(mutex_);
  fail_next_ = std::move(error);
}

std::vector<GenerateRequest> FakeEngine::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

std::vector<RequestId> FakeEngine::aborted() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

int FakeEngine::num_active() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(active_.size());
}

bool FakeEngine::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changed_.wait_for(lock, timeout, [&] { return active_.empty(); });
}

void FakeEngine::loop() {
  std::unique_lock lock(mutex_);
  while (running_) {
    changed_.wait_for(lock, options_.step_interval, [&] { return !running_; });
    if (!running_) break;
    const bool aborts = std::any_of(active_.begin(), active_.end(), [](const auto& a) { return a.second->abort_requested; });
    if (active_.empty() || (paused_ && !aborts)) continue;
    std::vector<std::pair<OutputCallback, RequestOutput>> deliveries;
    step(deliveries);
    // Callbacks run without the lock: they may call abort().
    lock.unlock();
    for (auto& [callback, output] : deliveries) callback(std::move(output));
    lock.lock();
    changed_.notify_all();
  }
}

void FakeEngine::step(std::vector<std::pair<OutputCallback, RequestOutput>>& deliveries) {
  const auto now = Clock::now();
  std::optional<std::string> failure = std::exchange(fail_next_, std::nullopt);
  int blocks_in_use = 0;
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = *it->second;
    const auto& prompt = a.request.prompt_token_ids;
    const auto& sampling = a.request.sampling;
    RequestOutput out;
    out.request_id = a.id;
    out.num_prompt_tokens = static_cast<int>(prompt.size());
    if (!a.started) {
      a.started = true;
      metrics_.prompt_tokens_total += static_cast<std::int64_t>(prompt.size());
      metrics_.queue_time.observe(std::chrono::duration<double>(now - a.arrival).count());
    }
    const bool paused_here = paused_ && !a.abort_requested && !failure;
    for (Sequence& s : a.sequences) {
      if (s.finished || paused_here) continue;
      SequenceDelta delta;
      delta.index = s.index;
      if (failure || a.abort_requested) {
        delta.finish_reason = FinishReason::kAborted;
      } else {
        const std::int32_t token = prompt[static_cast<std::size_t>(s.generated + s.index) % prompt.size()];
        ++s.generated;
        ++a.generated;
        ++metrics_.generation_tokens_total;
        delta.token_ids.push_back(token);
        if (sampling.logprobs) {
          TokenLogprob lp{token, -(0.5f + 0.125f * static_cast<float>(s.generated - 1)), {}};
          for (int j = 0; j < *sampling.logprobs; ++j) {
            lp.top.emplace_back((token + 1 + j) % model_.vocab_size, -1.0f - static_cast<float>(j));
          }
          delta.logprobs.push_back(std::move(lp));
        }
        const bool stop_token = std::find(sampling.stop_token_ids.begin(), sampling.stop_token_ids.end(), token) !=
                                sampling.stop_token_ids.end();
        if (stop_token) {
          delta.finish_reason = FinishReason::kStop;
          delta.stop_token_id = token;
        } else {
          std::string text = s.detokenizer.push(token);
          if (s.generated >= a.max_tokens) text += s.detokenizer.finish();
          if (s.stop) {
            const tokenizer::StopMatch match = s.stop->push(text);
            text = match.text;
            if (match.stopped) {
              delta.finish_reason = FinishReason::kStop;
              delta.stop_string = sampling.stop[*match.stop_index];
            } else if (s.generated >= a.max_tokens) {
              text += s.stop->finish();
            }
          }
          for (int r = 0; r < options_.text_repeat; ++r) delta.text += text;
          if (!delta.finish_reason && s.generated >= a.max_tokens) delta.finish_reason = FinishReason::kLength;
        }
        if (a.generated == 1) metrics_.time_to_first_token.observe(std::chrono::duration<double>(now - a.arrival).count());
        if (a.generated > 1) metrics_.inter_token_latency.observe(std::chrono::duration<double>(now - a.last_token).count());
        a.last_token = now;
      }
      if (delta.finish_reason) s.finished = true;
      out.sequences.push_back(std::move(delta));
    }
    out.num_generated_tokens = a.generated;
    if (failure) out.error = *failure;
    out.finished = std::all_of(a.sequences.begin(), a.sequences.end(), [](const Sequence& s) { return s.finished; });
    if (!out.finished) {
      const int tokens = static_cast<int>(prompt.size()) + a.max_tokens;
      blocks_in_use += (tokens + kBlockSize - 1) / kBlockSize;
      if (!out.sequences.empty()) deliveries.emplace_back(a.callback, std::move(out));
      ++it;
      continue;
    }
    const auto ended = [&](FinishReason reason) {
      return std::any_of(out.sequences.begin(), out.sequences.end(),
                         [&](const SequenceDelta& d) { return d.finish_reason == reason; });
    };
    if (ended(FinishReason::kAborted)) {
      ++metrics_.requests_aborted;
    } else if (ended(FinishReason::kStop)) {
      ++metrics_.requests_finished_stop;
    } else {
      ++metrics_.requests_finished_length;
    }
    deliveries.emplace_back(a.callback, std::move(out));
    metrics_.e2e_request_latency.observe(std::chrono::duration<double>(now - a.arrival).count());
    it = active_.erase(it);
  }
  metrics_.scheduler.num_running = static_cast<int>(active_.size());
  metrics_.scheduler.kv.num_free_device_blocks = kNumBlocks - std::min(blocks_in_use, kNumBlocks);
}

}  // namespace pagedllm::testing
