#include "core/host/one_shot.h"

#include <chrono>
#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

#include "core/engine/engine.h"

namespace pagedllm {

int run_one_shot(const HostConfig& config, PluginRegistry& registry, const GenerateOptions& options,
                 std::FILE* out, TensorParallelGroup* group) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  std::unique_ptr<Engine> engine = Engine::create(config, registry, group);
  engine->start();
  const auto ready = Clock::now();
  fmt::print(stderr, "pagedllm-host: {} ready in {:.2f} s\n", engine->model().served_name,
             std::chrono::duration<double>(ready - started).count());

  const GenerationDefaults& defaults = engine->generation_defaults();
  GenerateRequest request;
  request.prompt_token_ids = engine->tokenizer().encode(options.prompt);
  SamplingOptions& sampling = request.sampling;
  sampling.max_tokens = options.max_tokens;
  sampling.temperature = options.temperature.value_or(defaults.temperature.value_or(1.0f));
  sampling.top_p = options.top_p.value_or(defaults.top_p.value_or(1.0f));
  sampling.top_k = options.top_k.value_or(defaults.top_k.value_or(0));
  sampling.min_p = options.min_p.value_or(0.0f);
  sampling.repetition_penalty =
      options.repetition_penalty.value_or(defaults.repetition_penalty.value_or(1.0f));
  sampling.seed = options.seed;
  sampling.stop = options.stop;
  sampling.ignore_eos = options.ignore_eos;
  request.speculative = options.speculative;

  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  RequestOutput last;
  std::optional<Clock::time_point> first_token;
  try {
    engine->submit(std::move(request), [&](RequestOutput&& output) {
      for (const SequenceDelta& delta : output.sequences) {
        if (!delta.text.empty()) {
          std::fwrite(delta.text.data(), 1, delta.text.size(), out);
          std::fflush(out);
        }
      }
      std::lock_guard lock(mutex);
      if (!first_token && output.num_generated_tokens > 0) first_token = Clock::now();
      if (output.finished) {
        last = std::move(output);
        done = true;
        done_signal.notify_one();
      }
    });
  } catch (const RequestRejected& e) {
    fmt::print(stderr, "pagedllm-host: the request was refused: {}\n", e.reason());
    engine->shutdown(ShutdownMode::kAbort);
    return 2;
  }
  {
    std::unique_lock lock(mutex);
    done_signal.wait(lock, [&] { return done; });
  }
  const auto finished = Clock::now();
  engine->shutdown(ShutdownMode::kDrain);
  std::fputc('\n', out);
  std::fflush(out);
  if (last.error) {
    fmt::print(stderr, "pagedllm-host: generation failed: {}\n", *last.error);
    return 1;
  }
  const char* reason = last.sequences.empty() || !last.sequences.back().finish_reason
                           ? "?"
                           : to_string(*last.sequences.back().finish_reason);
  const double total = std::chrono::duration<double>(finished - ready).count();
  const double ttft = first_token ? std::chrono::duration<double>(*first_token - ready).count() : total;
  const int decoded = std::max(0, last.num_generated_tokens - 1);
  fmt::print(stderr,
             "pagedllm-host: {} prompt tokens, {} generated (finish: {}); first token after {:.3f} s "
             "({:.1f} prompt tok/s), then {:.1f} tok/s\n",
             last.num_prompt_tokens, last.num_generated_tokens, reason, ttft,
             ttft > 0 ? last.num_prompt_tokens / ttft : 0.0,
             total > ttft ? decoded / (total - ttft) : 0.0);
  const EngineMetrics metrics = engine->metrics();
  if (metrics.spec_decode_num_drafts > 0) {
    const auto drafts = static_cast<double>(metrics.spec_decode_num_drafts);
    std::string per_position;
    for (const std::int64_t accepted : metrics.spec_decode_accepted_per_position) {
      per_position += fmt::format("{}{:.2f}", per_position.empty() ? "" : " ", static_cast<double>(accepted) / drafts);
    }
    fmt::print(stderr,
               "pagedllm-host: speculative: {} verifications, {} of {} drafts accepted ({:.1f}%), mean "
               "acceptance length {:.2f} tokens per step; acceptance rate by draft position: {}\n",
               metrics.spec_decode_num_drafts, metrics.spec_decode_accepted_tokens, metrics.spec_decode_draft_tokens,
               metrics.spec_decode_draft_tokens > 0 ? 100.0 * static_cast<double>(metrics.spec_decode_accepted_tokens) /
                                                          static_cast<double>(metrics.spec_decode_draft_tokens)
                                                    : 0.0,
               1.0 + static_cast<double>(metrics.spec_decode_accepted_tokens) / drafts, per_position);
  }
  return 0;
}

}  // namespace pagedllm
