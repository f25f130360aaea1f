// The whole engine on cuda:0 (models_llama on llama_cuda, attention_cuda, f32)
// against the whole engine on the CPU (models_llama on llama_cpu, attention_cpu)
// on the embedded model models/pagedllm-tiny: the emulated device in CI, a GPU
// on one. The CPU engine is the oracle here; it is itself checked against HF
// transformers along the same paths by test_engine_fidelity.
//
// Paths: one prefill per prompt then decodes; chunked prefill (a 16-token
// budget); decode after prefix-cache hits (every prompt served twice);
// preemption by recompute and by swap (8 KV blocks for 4 requests needing 12).
// Both engines get the same pool in blocks and the same scheduler limits, and
// the requests are queued before they start, so they schedule the same steps;
// each path checks that it happened (chunks, hits, preemptions, swapped blocks)
// and happened alike on both. One case runs a CPU, a CUDA and again a CPU engine in
// one process: the plugins with CUDA stay loaded from one engine to the next (what
// crashed on an H100 when they did not: docs/gpu-validation.md, "The H100 crash").
//
// What is compared: greedy output token for token, and the full-vocabulary
// logprobs of every generated token (model.max_logprobs -1, logprobs = 8192:
// the log-softmax of the whole logits row, straight from forward -> sampler).
//
// Tolerance, per entry: |cuda - cpu| <= 1e-4 + 1e-5 |cpu|, test_engine_fidelity's
// (logprobs reach about -30 here). Both engines compute in f32 from the same
// weights (pagedllm-tiny's bf16 widen exactly to f32 on both sides) and differ only
// in summation order: the CPU engine's worst deviation from transformers on this
// model is ~2e-5 (test_engine_fidelity), cuBLAS's f32 GEMMs (CUBLAS_COMPUTE_32F,
// no TF32; the emulator rounds a double sum once) and attention_cuda's f32 online
// softmax are no worse, so the two differ by a few 1e-5 at most. Measured on the
// emulated cuda:0: 7.6e-6 on every path (0.026 of the tolerance; each case prints
// it). A wrong context token, RoPE angle or norm weight moves logprobs by 1e-2 or more. Greedy output must be identical: the CPU engine's smallest top-two
// logprob margin over these continuations is checked to exceed 1e-3, far above
// what f32 reordering can flip.

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plugin/configured_plugins.h"
#include "tests/fidelity/tiny_engine_runs.h"
#include "tests/support/cuda_device.h"
#include "tests/support/temp_dir.h"

using namespace pagedllm;
using pagedllm::testing::EngineRun;

namespace {

constexpr int kNewTokens = 12;
constexpr int kVocab = testing::kTinyVocab;
constexpr int kBlockSize = 16;
constexpr double kAtol = 1e-4;
constexpr double kRtol = 1e-5;
constexpr double kMinMargin = 1e-3;
// pagedllm-tiny's f32 K and V of one block over its 6 layers (2 kv heads x 32 dims).
constexpr std::int64_t kBlockBytes = 6 * 2 * 2 * 32 * 4 * kBlockSize;

// configs/eagle-cuda.yaml's speculator: the EAGLE-1 head on the target's device.
const std::string kSpeculative = "speculative: {plugin: spec_eagle, draft: " PAGEDLLM_SOURCE_DIR
                                 "/models/pagedllm-tiny-eagle, num_speculative_tokens: 3, "
                                 "options: {draft_vocab_size: 1024}}";


// Serves every prompt `repeats` times greedily on the CPU or on cuda:0, each round
// after the previous one: with full-vocabulary logprobs, or, `speculative`, without
// them (a request that asks for logprobs never speculates) and with the EAGLE head.
EngineRun run_engine(bool cuda, const std::vector<std::string>& overrides, int repeats, bool speculative = false) {
  testing::TempDir dir;
  const std::string yaml = fmt::format(R"(
model: {{plugin: models_llama, path: {source}/models/pagedllm-tiny, dtype: {dtype}, max_logprobs: -1{threads}}}
device: {device}
attention: {{plugin: {attention}}}
sampler: {{plugin: sampler, options: {{num_threads: 1}}}}
cache: {{block_size: {block}, kv_cache_bytes: 4MiB, swap_space: 4MiB}}
scheduler: {{max_num_seqs: 16, max_num_batched_tokens: 512, max_model_len: 256}}
plugins: {{search_paths: [{plugins}]}}
logging: {{level: warn}}
{speculative}
)",
                                       fmt::arg("source", PAGEDLLM_SOURCE_DIR),
                                       fmt::arg("dtype", cuda ? "f32" : "auto"),
                                       fmt::arg("threads", cuda ? "" : ", options: {num_threads: 1}"),
                                       fmt::arg("device", cuda ? "cuda:0" : "cpu"),
                                       fmt::arg("attention", cuda ? "attention_cuda" : "attention_cpu"),
                                       fmt::arg("block", kBlockSize), fmt::arg("plugins", PAGEDLLM_PLUGIN_DIR),
                                       fmt::arg("speculative", speculative ? kSpeculative : ""));
  const HostConfig config = load_config(dir.write(cuda ? "cuda.yaml" : "cpu.yaml", yaml), overrides);
  PluginRegistry registry = make_plugin_registry(config);
  std::unique_ptr<Engine> engine = Engine::create(config, registry);
  REQUIRE(engine->model().vocab_size == kVocab);

  return testing::serve_in_rounds(*engine, testing::tiny_prompts(), repeats, kNewTokens, speculative);
}

// The CUDA engine's greedy tokens equal the CPU engine's, every logprob within tolerance.
void check_equal(const std::string& path, const EngineRun& cpu, const EngineRun& gpu) {
  double worst_abs = 0.0, worst_ratio = 0.0, smallest_margin = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < cpu.tokens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(cpu.errors[i].empty());
    REQUIRE(gpu.errors[i].empty());
    REQUIRE(cpu.tokens[i].size() == static_cast<std::size_t>(kNewTokens));
    REQUIRE(cpu.logprobs[i].size() == cpu.tokens[i].size());
    REQUIRE(gpu.logprobs[i].size() == gpu.tokens[i].size());
    CHECK(gpu.tokens[i] == cpu.tokens[i]);
    for (std::size_t t = 0; t < std::min(cpu.tokens[i].size(), gpu.tokens[i].size()); ++t) {
      CAPTURE(t);
      std::vector<double> want(kVocab, NAN), got(kVocab, NAN);
      for (const auto& [id, logprob] : cpu.logprobs[i][t].top) want.at(static_cast<std::size_t>(id)) = logprob;
      for (const auto& [id, logprob] : gpu.logprobs[i][t].top) got.at(static_cast<std::size_t>(id)) = logprob;
      std::vector<double> sorted = want;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      smallest_margin = std::min(smallest_margin, sorted[0] - sorted[1]);
      for (std::size_t v = 0; v < want.size(); ++v) {
        // A missing id (NaN) or a non-finite logprob is an infinite error.
        const double err = std::isfinite(want[v]) && std::isfinite(got[v]) ? std::abs(got[v] - want[v]) : INFINITY;
        worst_abs = std::max(worst_abs, err);
        worst_ratio = std::max(worst_ratio, err / (kAtol + kRtol * std::abs(want[v])));
      }
      if (gpu.tokens[i][t] != cpu.tokens[i][t]) break;  // the contexts differ from here on
    }
  }
  std::printf("engine CUDA vs CPU, %s: worst |logprob difference| %.3g (%.3f of the tolerance), smallest top-two "
              "margin %.4f\n",
              path.c_str(), worst_abs, worst_ratio, smallest_margin);
  CHECK(worst_ratio <= 1.0);
  CHECK(smallest_margin > kMinMargin);
}

// Both engines along one path, the CPU engine first (check_equal). Returns both runs for the
// path's own checks.
std::pair<EngineRun, EngineRun> compare(const std::string& path, const std::vector<std::string>& overrides,
                                        int repeats = 1) {
  EngineRun cpu = run_engine(false, overrides, repeats);
  EngineRun gpu = run_engine(true, overrides, repeats);
  check_equal(path, cpu, gpu);
  return {std::move(cpu), std::move(gpu)};
}

// Whether the plugin `name` is mapped in this process (dlopen with RTLD_NOLOAD loads nothing).
bool plugin_mapped(const std::string& name) {
  void* handle = dlopen((std::string(PAGEDLLM_PLUGIN_DIR) + "/" + name + ".so").c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (handle != nullptr) dlclose(handle);
  return handle != nullptr;
}

// 8 blocks: fewer than the 12 the 4 requests need at full length, enough for the
// longest (82 tokens) alone.
std::vector<std::string> preemption(const std::string& mode) {
  return {fmt::format("cache.kv_cache_bytes={}", 8 * kBlockBytes), "scheduler.max_model_len=96",
          "cache.enable_prefix_caching=false", "scheduler.preemption_mode=" + mode};
}

}  // namespace

TEST_CASE("engine on CUDA equals the CPU engine: one prefill per prompt, then decodes", "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  compare("prefill + decode", {});
}

// Engines one after another in one process, as in each case here: the CPU engine's
// models_llama.so (which in a CUDA build holds the CUDA forward too) and sampler.so outlive it, so
// the CUDA engine finds them loaded, and the CPU engine after it finds them again. On an H100 the
// CUDA engine that loaded them again after the CPU engine had unloaded them crashed
// (core/plugin/plugin_library.cpp, keep_loaded_if_cuda). attention_cpu, without CUDA, unloads with
// its engine. The last CPU engine gives the first one's output exactly.
TEST_CASE("engines on the CPU, on CUDA, then on the CPU again in one process: plugins with CUDA stay loaded",
          "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const EngineRun cpu = run_engine(false, {}, 1);
  CHECK(plugin_mapped("models_llama"));
  CHECK(plugin_mapped("sampler"));
  CHECK_FALSE(plugin_mapped("attention_cpu"));
  const EngineRun gpu = run_engine(true, {}, 1);
  check_equal("CPU, then CUDA", cpu, gpu);
  CHECK(plugin_mapped("attention_cuda"));
  const EngineRun cpu_again = run_engine(false, {}, 1);
  CHECK(cpu_again.tokens == cpu.tokens);
  for (std::size_t i = 0; i < cpu.logprobs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(cpu_again.logprobs[i].size() == cpu.logprobs[i].size());
    for (std::size_t t = 0; t < cpu.logprobs[i].size(); ++t) {
      CHECK(cpu_again.logprobs[i][t].top == cpu.logprobs[i][t].top);
    }
  }
}

TEST_CASE("engine on CUDA equals the CPU engine: chunked prefill with a 16-token budget",
          "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const auto [cpu, gpu] = compare("chunked prefill (16)", {"scheduler.max_num_batched_tokens=16"});
  // The 70-token prompt alone takes 5 prefill steps; then 11 decodes.
  for (const EngineRun* run : {&cpu, &gpu}) CHECK(run->metrics.scheduler.num_steps >= 5 + kNewTokens - 1);
  CHECK(gpu.metrics.scheduler.num_steps == cpu.metrics.scheduler.num_steps);
}

TEST_CASE("engine on CUDA equals the CPU engine: decode after prefix-cache hits", "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const auto [cpu, gpu] = compare("prefix-cache hits", {}, 2);
  for (const EngineRun* run : {&cpu, &gpu}) {
    // The second round finds at least the 70-token prompt's 4 full blocks.
    CHECK(run->metrics.scheduler.kv.prefix_cache_hit_tokens >= 4 * kBlockSize);
  }
  CHECK(gpu.metrics.scheduler.kv.prefix_cache_hit_tokens == cpu.metrics.scheduler.kv.prefix_cache_hit_tokens);
}

TEST_CASE("engine on CUDA equals the CPU engine: preemption by recompute", "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const auto [cpu, gpu] = compare("preemption (recompute)", preemption("recompute"));
  CHECK(cpu.metrics.scheduler.num_preemptions_recompute > 0);
  CHECK(gpu.metrics.scheduler.num_preemptions_recompute == cpu.metrics.scheduler.num_preemptions_recompute);
}

TEST_CASE("engine on CUDA equals the CPU engine: preemption by swap", "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const auto [cpu, gpu] = compare("preemption (swap)", preemption("swap"));
  CHECK(cpu.metrics.scheduler.num_preemptions_swap > 0);
  CHECK(gpu.metrics.scheduler.num_preemptions_swap == cpu.metrics.scheduler.num_preemptions_swap);
  // The swapped sequences' blocks went to the host pool and came back through attention_cuda's copy stream.
  CHECK(gpu.metrics.scheduler.kv.num_swapped_in_blocks > 0);
  CHECK(gpu.metrics.scheduler.kv.num_swapped_in_blocks == cpu.metrics.scheduler.kv.num_swapped_in_blocks);
}

// The EAGLE head on cuda:0 (spec_eagle's CUDA head, verifying on llama_cuda) changes
// how many tokens a step yields, never which: its greedy output is the CPU engine's
// plain greedy output, after prefix-cache hits and under swap preemption too
// (test_speculative_greedy_cuda has recompute). (Speculation computes no logprobs:
// tokens only.)
TEST_CASE("engine on CUDA with EAGLE speculation gives the CPU engine's greedy output", "[engine][cuda][cpu_equal]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const std::string path = GENERATE(std::string("prefill + decode"), std::string("prefix-cache hits"),
                                    std::string("preemption (swap)"));
  CAPTURE(path);
  const bool swap = path == "preemption (swap)";
  const int repeats = path == "prefix-cache hits" ? 2 : 1;
  const std::vector<std::string> overrides = swap ? preemption("swap") : std::vector<std::string>{};
  const EngineRun cpu = run_engine(false, overrides, repeats);
  const EngineRun gpu = run_engine(true, overrides, repeats, true);
  for (std::size_t i = 0; i < cpu.tokens.size(); ++i) {
    CAPTURE(i);
    CHECK(gpu.errors[i].empty());
    CHECK(gpu.tokens[i] == cpu.tokens[i]);
  }
  CHECK(gpu.metrics.spec_decode_num_drafts > 0);
  CHECK(gpu.metrics.spec_decode_accepted_tokens > 0);
  if (swap) CHECK(gpu.metrics.scheduler.num_preemptions_swap > 0);
  if (repeats == 2) CHECK(gpu.metrics.scheduler.kv.prefix_cache_hit_tokens >= 4 * kBlockSize);
}
