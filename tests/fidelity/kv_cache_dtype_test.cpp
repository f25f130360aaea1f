// cache.dtype: bf16 against the default f32 KV cache, the whole engine on the CPU
// (models_llama, attention_cpu) on the embedded model models/pagedllm-tiny, along
// the paths that move cached keys and values around: one prefill per prompt then
// decodes, chunked prefill (a 16-token budget), decode after prefix-cache hits
// (every prompt served twice), preemption by recompute and by swap (8 KV blocks
// for 4 requests needing 12). Both engines get the same pool in blocks (the bf16
// one half the bytes) and the same scheduler limits, and the requests are queued
// before they start, so they schedule the same steps; each path checks that it
// happened alike on both. Last, EAGLE speculation over a bf16 cache, whose draft
// layer shares the pool, against the plain bf16 engine.
//
// What is compared: greedy output token for token, and the full-vocabulary
// logprobs of every generated token (model.max_logprobs -1, logprobs = 8192).
//
// Tolerance, per entry: |bf16 - f32| <= kAtol = 0.04. attention_cpu rounds each
// f32 key and value to bf16 as it stores them (8 significant bits: a relative
// error of up to 2^-9 ~ 2e-3 per element), so attention scores and the weighted
// sums of values carry errors of that order in each of the 6 layers, and the
// logits (up to ~25 in size here) move with them. Measured: a worst |logprob
// difference| of 0.017 on every path (each case prints it; an f16 cache, 3 bits
// more, gives 0.0025), 0.42 of the tolerance; one prompt token changed in the
// 70-token prompt moves them by 0.22. Both engines take the exact bf16 path
// (cpu_bf16_compute: exact), so the cache is all that differs: vdpbf16ps rounds
// the activations to bf16 at every product, which amplifies any difference (a
// worst of 0.065 with it). Greedy output must be identical: the change of the
// f32 engine's top-two gap at any position (0.009) is checked to stay under half
// the smallest gap (0.032), so it is no accident that no argmax flips.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plugin/configured_plugins.h"
#include "tests/fidelity/tiny_engine_runs.h"
#include "tests/support/temp_dir.h"

using namespace pagedllm;
using pagedllm::testing::EngineRun;

namespace {

constexpr int kNewTokens = 12;
constexpr int kVocab = testing::kTinyVocab;
constexpr int kBlockSize = 16;
constexpr double kAtol = 0.04;
// pagedllm-tiny's layers; its EAGLE head adds one to the pool.
constexpr int kModelLayers = 6;
constexpr std::int64_t kKvCacheBytes = 4 << 20;

// A path's settings for an engine whose KV cache is in the dtype given.
using PathOverrides = std::function<std::vector<std::string>(const std::string&)>;

// K and V of one block over `layers` layers of 2 kv heads x 32 dims.
std::int64_t block_bytes(const std::string& cache_dtype, int layers = kModelLayers) {
  return layers * 2 * 2 * 32 * kBlockSize * (cache_dtype == "bf16" ? 2 : 4);
}

// configs/eagle.yaml's speculator: the EAGLE-1 head, whose draft layer shares the pool.
const std::string kSpeculative = "speculative: {plugin: spec_eagle, draft: " PAGEDLLM_SOURCE_DIR
                                 "/models/pagedllm-tiny-eagle, num_speculative_tokens: 3, "
                                 "options: {draft_vocab_size: 1024, num_threads: 1}}";

// Serves every prompt `repeats` times greedily, each round after the previous one, with the KV
// cache in `cache_dtype`; `path_overrides(cache_dtype)` are the path's settings. With full-vocabulary
// logprobs, or, `speculative`, without them (a request that asks for logprobs never speculates)
// and with the EAGLE head.
EngineRun run_engine(const std::string& cache_dtype,
                     const PathOverrides& path_overrides,
                     int repeats, bool speculative = false) {
  testing::TempDir dir;
  const std::string yaml = fmt::format(R"(
model: {{plugin: models_llama, path: {source}/models/pagedllm-tiny, max_logprobs: -1,
        options: {{num_threads: 1, cpu_bf16_compute: exact}}}}
device: cpu
attention: {{plugin: attention_cpu}}
sampler: {{plugin: sampler, options: {{num_threads: 1}}}}
cache: {{block_size: {block}, kv_cache_bytes: {kv_bytes}, swap_space: 4MiB, dtype: {dtype}}}
scheduler: {{max_num_seqs: 16, max_num_batched_tokens: 512, max_model_len: 256}}
plugins: {{search_paths: [{plugins}]}}
logging: {{level: warn}}
{speculative}
)",
                                       fmt::arg("source", PAGEDLLM_SOURCE_DIR), fmt::arg("block", kBlockSize),
                                       fmt::arg("kv_bytes", kKvCacheBytes), fmt::arg("dtype", cache_dtype),
                                       fmt::arg("plugins", PAGEDLLM_PLUGIN_DIR),
                                       fmt::arg("speculative", speculative ? kSpeculative : ""));
  const HostConfig config = load_config(dir.write("engine.yaml", yaml), path_overrides(cache_dtype));
  PluginRegistry registry = make_plugin_registry(config);
  std::unique_ptr<Engine> engine = Engine::create(config, registry);
  REQUIRE(engine->model().vocab_size == kVocab);

  return testing::serve_in_rounds(*engine, testing::tiny_prompts(), repeats, kNewTokens, speculative);
}

const PathOverrides no_overrides = [](const std::string&) { return std::vector<std::string>{}; };

// Both engines along one path: the bf16 engine's greedy tokens equal the f32 engine's, every
// logprob within kAtol. Returns both runs for the path's own checks.
std::pair<EngineRun, EngineRun> compare(
    const std::string& path, const PathOverrides& path_overrides,
    int repeats = 1) {
  const EngineRun f32 = run_engine("f32", path_overrides, repeats);
  const EngineRun bf16 = run_engine("bf16", path_overrides, repeats);
  double worst = 0.0, worst_gap_change = 0.0, smallest_margin = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < f32.tokens.size(); ++i) {
    CAPTURE(i);
    REQUIRE(f32.errors[i].empty());
    REQUIRE(bf16.errors[i].empty());
    REQUIRE(f32.tokens[i].size() == static_cast<std::size_t>(kNewTokens));
    REQUIRE(f32.logprobs[i].size() == f32.tokens[i].size());
    REQUIRE(bf16.logprobs[i].size() == bf16.tokens[i].size());
    CHECK(bf16.tokens[i] == f32.tokens[i]);
    for (std::size_t t = 0; t < std::min(f32.tokens[i].size(), bf16.tokens[i].size()); ++t) {
      CAPTURE(t);
      std::vector<double> want(kVocab, NAN), got(kVocab, NAN);
      for (const auto& [id, logprob] : f32.logprobs[i][t].top) want.at(static_cast<std::size_t>(id)) = logprob;
      for (const auto& [id, logprob] : bf16.logprobs[i][t].top) got.at(static_cast<std::size_t>(id)) = logprob;
      // The f32 engine's top two: greedy output changes only if their gap changes by more than the gap.
      std::vector<std::size_t> order(want.size());
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                        [&](std::size_t a, std::size_t b) { return want[a] > want[b]; });
      const double gap = want[order[0]] - want[order[1]];
      smallest_margin = std::min(smallest_margin, gap);
      worst_gap_change = std::max(worst_gap_change, std::abs(got[order[0]] - got[order[1]] - gap));
      for (std::size_t v = 0; v < want.size(); ++v) {
        // A missing id (NaN) or a non-finite logprob is an infinite error.
        worst = std::max(worst, std::isfinite(want[v]) && std::isfinite(got[v]) ? std::abs(got[v] - want[v])
                                                                                 : INFINITY);
      }
      if (bf16.tokens[i][t] != f32.tokens[i][t]) break;  // the contexts differ from here on
    }
  }
  std::printf("engine bf16 vs f32 KV cache, %s: worst |logprob difference| %.3g (%.3f of the tolerance), smallest "
              "top-two margin %.4f, its largest change %.3g\n",
              path.c_str(), worst, worst / kAtol, smallest_margin, worst_gap_change);
  CHECK(worst <= kAtol);
  CHECK(worst_gap_change < smallest_margin / 2);
  return {f32, bf16};
}

// 8 blocks of `layers` layers in either dtype: fewer than the 12 the 4 requests need at full
// length, enough for the longest (82 tokens) alone.
PathOverrides preemption(const std::string& mode,
                                                                       int layers = kModelLayers) {
  return [mode, layers](const std::string& cache_dtype) {
    return std::vector<std::string>{fmt::format("cache.kv_cache_bytes={}", 8 * block_bytes(cache_dtype, layers)),
                                    "scheduler.max_model_len=96", "cache.enable_prefix_caching=false",
                                    "scheduler.preemption_mode=" + mode};
  };
}

}  // namespace

TEST_CASE("a bf16 KV cache holds twice the blocks of f32 in the same bytes and gives its greedy output",
          "[engine][kv_dtype]") {
  const auto [f32, bf16] = compare("prefill + decode", no_overrides);
  CHECK(f32.metrics.scheduler.kv.num_device_blocks == kKvCacheBytes / block_bytes("f32"));
  CHECK(bf16.metrics.scheduler.kv.num_device_blocks == kKvCacheBytes / block_bytes("bf16"));
  CHECK(bf16.metrics.scheduler.kv.num_device_blocks == 2 * f32.metrics.scheduler.kv.num_device_blocks);
}

TEST_CASE("a bf16 KV cache gives the f32 cache's output: chunked prefill with a 16-token budget",
          "[engine][kv_dtype]") {
  const auto [f32, bf16] = compare("chunked prefill (16)", [](const std::string&) {
    return std::vector<std::string>{"scheduler.max_num_batched_tokens=16"};
  });
  // The 70-token prompt alone takes 5 prefill steps; then 11 decodes.
  CHECK(bf16.metrics.scheduler.num_steps >= 5 + kNewTokens - 1);
  CHECK(bf16.metrics.scheduler.num_steps == f32.metrics.scheduler.num_steps);
}

TEST_CASE("a bf16 KV cache gives the f32 cache's output: decode after prefix-cache hits", "[engine][kv_dtype]") {
  const auto [f32, bf16] = compare("prefix-cache hits", no_overrides, 2);
  // The second round finds at least the 70-token prompt's 4 full blocks.
  CHECK(bf16.metrics.scheduler.kv.prefix_cache_hit_tokens >= 4 * kBlockSize);
  CHECK(bf16.metrics.scheduler.kv.prefix_cache_hit_tokens == f32.metrics.scheduler.kv.prefix_cache_hit_tokens);
}

TEST_CASE("a bf16 KV cache gives the f32 cache's output: preemption by recompute", "[engine][kv_dtype]") {
  const auto [f32, bf16] = compare("preemption (recompute)", preemption("recompute"));
  CHECK(bf16.metrics.scheduler.kv.num_device_blocks == 8);
  CHECK(bf16.metrics.scheduler.num_preemptions_recompute > 0);
  CHECK(bf16.metrics.scheduler.num_preemptions_recompute == f32.metrics.scheduler.num_preemptions_recompute);
}

TEST_CASE("a bf16 KV cache gives the f32 cache's output: preemption by swap", "[engine][kv_dtype]") {
  const auto [f32, bf16] = compare("preemption (swap)", preemption("swap"));
  CHECK(bf16.metrics.scheduler.kv.num_device_blocks == 8);
  CHECK(bf16.metrics.scheduler.num_preemptions_swap > 0);
  CHECK(bf16.metrics.scheduler.num_preemptions_swap == f32.metrics.scheduler.num_preemptions_swap);
  // The swapped sequences' bf16 blocks went to the host pool and came back.
  CHECK(bf16.metrics.scheduler.kv.num_swapped_in_blocks > 0);
  CHECK(bf16.metrics.scheduler.kv.num_swapped_in_blocks == f32.metrics.scheduler.kv.num_swapped_in_blocks);
}

// The draft's layer is in the pool too (spec_eagle writes its f32 keys and values like the model's),
// and speculation changes how many tokens a step yields, never which: EAGLE over a bf16 cache gives
// the plain bf16 engine's greedy output, after prefix-cache hits and under swap preemption too.
TEST_CASE("EAGLE speculation over a bf16 KV cache gives the bf16 engine's greedy output", "[engine][kv_dtype]") {
  const std::string path = GENERATE(std::string("prefill + decode"), std::string("prefix-cache hits"),
                                    std::string("preemption (swap)"));
  CAPTURE(path);
  const bool swap = path == "preemption (swap)";
  const int repeats = path == "prefix-cache hits" ? 2 : 1;
  // Both pools of 8 blocks in the swap path: the draft's layer makes the speculating engine's larger.
  const EngineRun plain = run_engine("bf16", swap ? preemption("swap") : no_overrides, repeats);
  const EngineRun eagle = run_engine("bf16", swap ? preemption("swap", kModelLayers + 1) : no_overrides, repeats, true);
  for (std::size_t i = 0; i < plain.tokens.size(); ++i) {
    CAPTURE(i);
    CHECK(eagle.errors[i].empty());
    CHECK(eagle.tokens[i] == plain.tokens[i]);
  }
  CHECK(eagle.metrics.spec_decode_num_drafts > 0);
  CHECK(eagle.metrics.spec_decode_accepted_tokens > 0);
  if (swap) {
    CHECK(eagle.metrics.scheduler.kv.num_device_blocks == 8);
    CHECK(eagle.metrics.scheduler.num_preemptions_swap > 0);
  }
  if (repeats == 2) CHECK(eagle.metrics.scheduler.kv.prefix_cache_hit_tokens >= 4 * kBlockSize);
}
