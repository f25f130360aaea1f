// Speculative decoding on the real pair: the embedded model models/pagedllm-tiny
// and its EAGLE-1 head, through configs/eagle.yaml (test_speculative_greedy)
// or, built as test_speculative_greedy_cuda, configs/eagle-cuda.yaml (the pair
// on cuda:0 with attention_cuda, f32; skipped without a device). Greedy output
// with speculation must equal greedy output without it, token for token. Both
// kinds run in one engine at once (plain ones opt out per request), so every
// batch mixes speculative and plain rows; the second section shrinks the KV
// cache so that requests are preempted in the middle of speculation.
//
// The equality holds when the target's argmax at a position does not depend
// on the batch it is computed in (a verify row of 1 + K tokens or a plain
// decode row). Both devices compute in f32, where a different summation order
// moves logits by ~1e-5 (models_llama's CPU/CUDA comparison), so only a
// near-tie could flip, and the float64 oracle's smallest top-two margin on
// greedy continuations of this model is 0.0117 (models_llama cuda_test.cpp).
//
// A third case runs seeded sampled speculation (p and q in the buffers
// spec_eagle lends): a request gives alone the tokens it gives in a batch.

#include <catch2/catch.hpp>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plugin/configured_plugins.h"
#ifdef PAGEDLLM_SPECULATIVE_ON_CUDA
#include "tests/support/cuda_device.h"
#endif

using namespace pagedllm;

namespace {

class Tokens {
 public:
  OutputCallback callback() {
    return [this](RequestOutput&& out) {
      std::lock_guard lock(mutex_);
      for (const SequenceDelta& d : out.sequences) tokens_.insert(tokens_.end(), d.token_ids.begin(), d.token_ids.end());
      if (out.error) error_ = *out.error;
      done_ = out.finished;
      cv_.notify_all();
    };
  }
  std::vector<std::int32_t> wait() {
    std::unique_lock lock(mutex_);
    REQUIRE(cv_.wait_for(lock, std::chrono::seconds(300), [&] { return done_; }));
    REQUIRE(error_.empty());
    return tokens_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::int32_t> tokens_;
  std::string error_;
  bool done_ = false;
};

const std::vector<std::string> kPrompts = {
    "def fibonacci(n):",
    "import os\nimport sys\n\ndef main():",
    "class Stack:\n    def __init__(self):",
    "# Read a file and count its lines\nwith open(path) as f:",
    "def quicksort(items):\n    if len(items) <= 1:",
    "for i in range(10):",
    "try:\n    import json\nexcept ImportError:",
    "def __repr__(self):\n        return",
    "    @property\n    def name(self):",
    "if __name__ == '__main__':",
    "def parse_args(argv=None):\n    parser = argparse.ArgumentParser(",
    "result = {}\nfor key, value in items:",
};

}  // namespace

TEST_CASE("EAGLE on the embedded model: greedy output with speculation equals greedy output without it",
          "[speculative][fidelity]") {
#ifdef PAGEDLLM_SPECULATIVE_ON_CUDA
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const char* const config_file = PAGEDLLM_SOURCE_DIR "/configs/eagle-cuda.yaml";
#else
  const char* const config_file = PAGEDLLM_SOURCE_DIR "/configs/eagle.yaml";
#endif
  const bool pressure = GENERATE(false, true);
  CAPTURE(pressure);
  // Under the CUDA emulator half the prompts, and half the pressure run's pool.
  std::size_t num_prompts = kPrompts.size();
  int pool_blocks = 40;
#ifdef PAGEDLLM_SPECULATIVE_ON_CUDA
  if (pagedllm::testing::emulated_small_shapes()) {
    num_prompts /= 2;
    pool_blocks = 20;  // still above the 16 blocks of one max_model_len sequence
  }
#endif
  std::vector<std::string> overrides = {"plugins.search_paths=[" PAGEDLLM_PLUGIN_DIR "]"};
#ifndef PAGEDLLM_SPECULATIVE_ON_CUDA
  overrides.push_back("attention.options.num_threads=1");
#endif
  if (pressure) {
    // 40 blocks of 16 tokens for 24 requests of up to ~80 tokens: preemption by recompute.
    overrides.push_back("cache.kv_cache_bytes=" + std::to_string(pool_blocks * 7 * 2 * 2 * 32 * 4 * 16));
    overrides.push_back("scheduler.max_model_len=256");
  }
  const HostConfig config = load_config(config_file, overrides);
  PluginRegistry registry = make_plugin_registry(config);
  const auto engine = Engine::create(config, registry);

  std::vector<std::unique_ptr<Tokens>> speculative, plain;
  for (std::size_t i = 0; i < num_prompts; ++i) {
    for (const bool speculate : {true, false}) {
      GenerateRequest r;
      r.prompt_token_ids = engine->tokenizer().encode(kPrompts[i]);
      r.sampling.temperature = 0.0f;
      r.sampling.max_tokens = 24 + static_cast<int>(i % 4) * 16;
      r.sampling.ignore_eos = true;
      r.speculative = speculate;
      auto& list = speculate ? speculative : plain;
      list.push_back(std::make_unique<Tokens>());
      engine->submit(std::move(r), list.back()->callback());
    }
  }
  // Started once every request waits: admission, and with it the preemption the pressure case counts on, does
  // not depend on how many steps the engine runs while the requests are being submitted.
  engine->start();
  for (std::size_t i = 0; i < num_prompts; ++i) {
    CAPTURE(kPrompts[i]);
    CHECK(speculative[i]->wait() == plain[i]->wait());
  }
  const EngineMetrics m = engine->metrics();
  CHECK(m.spec_decode_num_drafts > 0);
  const double mean_acceptance_length =
      1.0 + static_cast<double>(m.spec_decode_accepted_tokens) / static_cast<double>(m.spec_decode_num_drafts);
  WARN(fmt::format("mean acceptance length {:.2f} ({} of {} drafts accepted)", mean_acceptance_length,
                   m.spec_decode_accepted_tokens, m.spec_decode_draft_tokens));
  CHECK(mean_acceptance_length > 1.5);  // offline the head accepts ~1.5 of 4 drafts; below this it is broken
  if (pressure) CHECK(m.scheduler.num_preemptions() > 0);
  engine->shutdown(ShutdownMode::kDrain);
}

TEST_CASE("EAGLE on the embedded model: seeded sampled speculation reproduces whatever shares its batch",
          "[speculative]") {
  // Sampled requests keep p and q in buffers spec_eagle lends core (host
  // memory on the CPU, the device's on cuda:0), one slot per request in a
  // step's q buffer. A seeded request's tokens are a function of its own p, q
  // and seeds only, so it gives alone what it gives among others drafting
  // fewer tokens (near max_tokens) or greedily: a slot mixed up between
  // requests would change them.
#ifdef PAGEDLLM_SPECULATIVE_ON_CUDA
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const char* const config_file = PAGEDLLM_SOURCE_DIR "/configs/eagle-cuda.yaml";
#else
  const char* const config_file = PAGEDLLM_SOURCE_DIR "/configs/eagle.yaml";
#endif
  std::vector<std::string> overrides = {"plugins.search_paths=[" PAGEDLLM_PLUGIN_DIR "]"};
#ifndef PAGEDLLM_SPECULATIVE_ON_CUDA
  overrides.push_back("attention.options.num_threads=1");
#endif
  // A pool of 64 blocks and a 512-token profiling step: enough for these five
  // requests, and quick to size under the CUDA emulator.
  overrides.push_back("cache.kv_cache_bytes=" + std::to_string(64 * 7 * 2 * 2 * 32 * 4 * 16));
  overrides.push_back("scheduler.max_num_batched_tokens=512");
  overrides.push_back("scheduler.max_model_len=256");
  const HostConfig config = load_config(config_file, overrides);
  PluginRegistry registry = make_plugin_registry(config);
  const auto engine = Engine::create(config, registry);
  engine->start();
  const auto request = [&](std::size_t prompt, float temperature, int max_tokens, std::uint64_t seed) {
    GenerateRequest r;
    r.prompt_token_ids = engine->tokenizer().encode(kPrompts[prompt]);
    r.sampling.temperature = temperature;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    r.sampling.max_tokens = max_tokens;
    r.sampling.ignore_eos = true;
    return r;
  };
  Tokens alone;
  engine->submit(request(0, 0.7f, 20, 42), alone.callback());
  const std::vector<std::int32_t> expected = alone.wait();
  REQUIRE(expected.size() == 20);

  std::vector<std::unique_ptr<Tokens>> together;
  for (std::size_t i = 0; i < 4; ++i) {
    together.push_back(std::make_unique<Tokens>());
    // Others: sampled with fewer tokens left (fewer drafts), and greedy.
    GenerateRequest r = i == 0 ? request(0, 0.7f, 20, 42)
                               : request(i, i == 2 ? 0.0f : 1.0f, 5 + 3 * static_cast<int>(i), 7 + i);
    engine->submit(std::move(r), together.back()->callback());
  }
  CHECK(together[0]->wait() == expected);
  for (std::size_t i = 1; i < together.size(); ++i) CHECK(together[i]->wait().size() == 5 + 3 * i);
  CHECK(engine->metrics().spec_decode_num_drafts > 0);
  engine->shutdown(ShutdownMode::kDrain);
}
