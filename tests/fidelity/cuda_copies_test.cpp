// What crosses from the device in a served run (SDK 2.0's contract): the engine
// on the emulated cuda:0 (models_llama on llama_cuda, attention_cuda, the CUDA
// sampler) serves requests while the emulator counts every copy between host
// and device memory (cuda_emulation/copy_counters.h). sampler.h
// says only sampled ids, their raw logprobs, a status, and the requested top
// logprobs cross: 12 + 8 N bytes per sampled token, for N top logprobs. Before
// 2.0 every step copied its logits rows down (pagedllm-tiny's vocabulary of
// 8192: 32 KiB a row), so one logits row crossing would miss the total by 32 KiB.

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plugin/configured_plugins.h"
#include "cuda_emulation/copy_counters.h"
#include "tests/support/temp_dir.h"

using namespace pagedllm;

TEST_CASE("engine on cuda:0: only sampled ids and requested logprobs cross to the host", "[cuda][copies]") {
  constexpr int kRequests = 4, kNewTokens = 6, kTopLogprobs = 3, kVocab = 8192;
  testing::TempDir dir;
  const std::string yaml = fmt::format(R"(
model: {{plugin: models_llama, path: {source}/models/pagedllm-tiny, dtype: f32}}
device: cuda:0
attention: {{plugin: attention_cuda}}
sampler: {{plugin: sampler}}
cache: {{block_size: 16, kv_cache_bytes: 4MiB}}
scheduler: {{max_num_seqs: 16, max_num_batched_tokens: 512, max_model_len: 256}}
plugins: {{search_paths: [{plugins}]}}
logging: {{level: warn}}
)",
                                       fmt::arg("source", PAGEDLLM_SOURCE_DIR), fmt::arg("plugins", PAGEDLLM_PLUGIN_DIR));
  const HostConfig config = load_config(dir.write("cuda.yaml", yaml), {});
  PluginRegistry registry = make_plugin_registry(config);
  std::unique_ptr<Engine> engine = Engine::create(config, registry);
  REQUIRE(engine->model().vocab_size == kVocab);

  std::mutex mutex;
  std::condition_variable done_signal;
  int done = 0, tokens = 0, logprobs = 0;
  std::vector<std::string> errors;
  for (int r = 0; r < kRequests; ++r) {
    GenerateRequest request;
    std::mt19937 rng(static_cast<std::uint32_t>(r));
    request.prompt_token_ids = {0};
    for (int t = 0; t < 9 + 7 * r; ++t) request.prompt_token_ids.push_back(1 + int(rng() % (kVocab - 1)));
    // Greedy and seeded sampled requests alike: the same bytes cross.
    request.sampling.temperature = r % 2 == 0 ? 0.0f : 0.8f;
    request.sampling.seed = 100 + r;
    request.sampling.max_tokens = kNewTokens;
    request.sampling.ignore_eos = true;
    request.sampling.logprobs = kTopLogprobs;
    engine->submit(std::move(request), [&](RequestOutput&& out) {
      std::lock_guard lock(mutex);
      for (const SequenceDelta& delta : out.sequences) {
        tokens += static_cast<int>(delta.token_ids.size());
        for (const TokenLogprob& lp : delta.logprobs) logprobs += static_cast<int>(lp.top.size());
      }
      if (out.error) errors.push_back(*out.error);
      if (out.finished) {
        ++done;
        done_signal.notify_all();
      }
    });
  }
  // Counted from here: loading, KV sizing and the profiling step are not a served step.
  cuda::emulation::reset_copy_counters();
  engine->start();
  {
    std::unique_lock lock(mutex);
    REQUIRE(done_signal.wait_for(lock, std::chrono::seconds(300), [&] { return done == kRequests; }));
  }
  engine->shutdown(ShutdownMode::kDrain);
  const cuda::emulation::CopyCounters copies = cuda::emulation::copy_counters();
  CHECK(errors.empty());
  REQUIRE(tokens == kRequests * kNewTokens);
  CHECK(logprobs == tokens * kTopLogprobs);
  const std::uint64_t contract = std::uint64_t(tokens) * (12 + 8 * kTopLogprobs);
  std::printf("engine on cuda:0, %d sampled tokens with %d top logprobs: %llu bytes device->host in %llu copies "
              "(contract %llu; 1.x: %llu bytes of logits), %llu bytes host->device\n",
              tokens, kTopLogprobs, static_cast<unsigned long long>(copies.device_to_host_bytes),
              static_cast<unsigned long long>(copies.device_to_host_copies),
              static_cast<unsigned long long>(contract),
              static_cast<unsigned long long>(std::uint64_t(tokens) * kVocab * 4),
              static_cast<unsigned long long>(copies.host_to_device_bytes));
  CHECK(copies.device_to_host_bytes == contract);
  // One copy per step that samples: never a row at a time.
  CHECK(copies.device_to_host_copies <= std::uint64_t(kNewTokens + kRequests));
}
