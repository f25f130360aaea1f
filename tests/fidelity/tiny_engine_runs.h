#pragma once
// What the engine-against-engine tests on the embedded model (models/pagedllm-tiny)
// share: their prompts, and serving them in rounds with greedy decoding
// (test_engine_cuda's CUDA against CPU, test_engine_kv_dtype's bf16 against f32 KV;
// test_engine_fidelity serves its models against HF's with serve_in_rounds too).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/engine/engine.h"

namespace pagedllm::testing {

inline constexpr int kTinyVocab = 8192;

// A prompt of more than four 16-token blocks first (admitted first under
// preemption), one token past bos, and two whose decodes cross a block boundary
// (test_engine_fidelity's lengths).
inline std::vector<std::vector<std::int32_t>> tiny_prompts() {
  const std::vector<int> lengths = {70, 2, 13, 29};
  std::vector<std::vector<std::int32_t>> out;
  for (std::size_t p = 0; p < lengths.size(); ++p) {
    std::mt19937 rng(static_cast<std::uint32_t>(7 + p));
    std::uniform_int_distribution<int> token(1, kTinyVocab - 1);
    std::vector<std::int32_t> prompt{0};  // bos
    while (static_cast<int>(prompt.size()) < lengths[p]) prompt.push_back(token(rng));
    out.push_back(std::move(prompt));
  }
  return out;
}

struct EngineRun {
  std::vector<std::vector<std::int32_t>> tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;
  std::vector<std::string> errors;
  std::vector<int> cached_prompt_tokens;  // each request's prompt tokens found in the prefix cache
  EngineMetrics metrics;
};

// Serves every prompt `repeats` times greedily (new_tokens each, ignoring eos) on a
// created, not yet started engine, each round after the previous one, then drains it:
// with full-vocabulary logprobs (`vocab` of them), or, when `speculative`, without them
// (a request that asks for logprobs never speculates). The first round is queued before the engine
// starts, so two engines schedule the same steps; each round finishes before the next
// starts, so the next one finds its blocks cached.
inline EngineRun serve_in_rounds(Engine& engine, const std::vector<std::vector<std::int32_t>>& prompts,
                                 int repeats, int new_tokens, bool speculative, int vocab = kTinyVocab) {
  const std::size_t total = prompts.size() * static_cast<std::size_t>(repeats);
  EngineRun run;
  run.tokens.resize(total);
  run.logprobs.resize(total);
  run.errors.resize(total);
  run.cached_prompt_tokens.resize(total);
  std::mutex mutex;
  std::condition_variable done_signal;
  std::size_t done = 0;
  for (int r = 0; r < repeats; ++r) {
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const std::size_t slot = static_cast<std::size_t>(r) * prompts.size() + p;
      GenerateRequest request;
      request.prompt_token_ids = prompts[p];
      request.sampling.temperature = 0.0f;
      request.sampling.max_tokens = new_tokens;
      request.sampling.ignore_eos = true;
      if (!speculative) request.sampling.logprobs = vocab;
      engine.submit(std::move(request), [&, slot](RequestOutput&& out) {
        std::lock_guard lock(mutex);
        for (SequenceDelta& delta : out.sequences) {
          run.tokens[slot].insert(run.tokens[slot].end(), delta.token_ids.begin(), delta.token_ids.end());
          for (TokenLogprob& lp : delta.logprobs) run.logprobs[slot].push_back(std::move(lp));
        }
        run.cached_prompt_tokens[slot] = out.num_cached_prompt_tokens;
        if (out.error) run.errors[slot] = *out.error;
        if (out.finished) {
          ++done;
          done_signal.notify_all();
        }
      });
    }
    if (r == 0) engine.start();
    std::unique_lock lock(mutex);
    const std::size_t target = (static_cast<std::size_t>(r) + 1) * prompts.size();
    REQUIRE(done_signal.wait_for(lock, std::chrono::seconds(300), [&] { return done == target; }));
  }
  // After the loop stopped: the last step's counters are published after its outputs went out.
  engine.shutdown(ShutdownMode::kDrain);
  run.metrics = engine.metrics();
  return run;
}

}  // namespace pagedllm::testing
