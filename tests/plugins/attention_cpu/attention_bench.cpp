// attention_cpu_bench: times the reference and optimized kernels on a
// decode-heavy batch and on one long prefill chunk, and prints the ratios.
// Not a test: timings are never asserted. Each number is the median of
// `iterations` timed steps after one warm-up step.
// Usage: attention_cpu_bench [num_seqs] [context_len] [iterations] [prefill_len]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/plugins/attention_cpu/paged_scenario.h"

using namespace attention_test;

namespace {

const char* kNames[3] = {"reference", "optimized/1 thread", "optimized/default threads"};
const char* kOptions[3] = {R"({"variant": "reference"})", R"({"variant": "optimized", "num_threads": 1})",
                           R"({"variant": "optimized"})"};

// Median seconds per step of `chunks` (after writing `filled` tokens of context) for each variant.
void time_variants(const Scenario& scenario, const std::vector<int32_t>& filled, const std::vector<Chunk>& chunks,
                   int32_t num_decode, int iterations, double seconds[3]) {
  for (int v = 0; v < 3; ++v) {
    Backend backend(kOptions[v]);
    backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
    if (std::any_of(filled.begin(), filled.end(), [](int32_t n) { return n > 0; })) scenario.fill(backend, filled);
    scenario.run_step(backend, chunks, num_decode);  // warm-up
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      scenario.run_step(backend, chunks, num_decode);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
    seconds[v] = times[times.size() / 2];
    std::printf("  %-26s %8.3f ms/step (median of %d)\n", kNames[v], seconds[v] * 1e3, iterations);
  }
  std::printf("  speed-up over reference: %.1fx (1 thread), %.1fx (default threads)\n", seconds[0] / seconds[1],
              seconds[0] / seconds[2]);
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t num_seqs = argc > 1 ? std::atoi(argv[1]) : 16;
  const int32_t context = argc > 2 ? std::atoi(argv[2]) : 512;
  const int iterations = std::max(1, argc > 3 ? std::atoi(argv[3]) : 20);
  const int32_t prefill = argc > 4 ? std::atoi(argv[4]) : 512;
  Config config;
  config.num_kv_heads = 4;
  config.group = 4;
  config.head_dim = 128;
  config.block_size = 16;
  double seconds[3];
  {
    std::vector<int32_t> lens(std::size_t(num_seqs), context + 1);
    Scenario scenario(config, lens, 1u);
    std::vector<Chunk> decode;
    for (int32_t s = 0; s < num_seqs; ++s) decode.push_back({s, context, 1});
    std::printf("decode batch: %d seqs x %d context, %d kv heads x GQA %d, head_dim %d, block %d, f32\n", num_seqs,
                context, config.num_kv_heads, config.group, config.head_dim, config.block_size);
    time_variants(scenario, std::vector<int32_t>(std::size_t(num_seqs), context), decode, num_seqs, iterations,
                  seconds);
  }
  if (prefill > 0) {
    // The models_llama "small" model's attention shape: 4 kv heads x GQA 2, head_dim 64.
    config.group = 2;
    config.head_dim = 64;
    Scenario scenario(config, {prefill}, 2u);
    std::printf("prefill: 1 seq, one %d-token chunk, %d kv heads x GQA %d, head_dim %d, block %d, f32\n", prefill,
                config.num_kv_heads, config.group, config.head_dim, config.block_size);
    time_variants(scenario, {0}, {{0, 0, prefill}}, 0, std::max(3, iterations / 4), seconds);
  }
  return 0;
}
