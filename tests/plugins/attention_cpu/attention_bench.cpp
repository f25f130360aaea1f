// attention_cpu_bench: times the reference and optimized kernels on a
// decode-heavy batch and prints the ratio. Not a test: timings are never
// asserted. Usage: attention_cpu_bench [num_seqs] [context_len] [iterations]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/plugins/attention_cpu/paged_scenario.h"

using namespace attention_test;

int main(int argc, char** argv) {
  const int32_t num_seqs = argc > 1 ? std::atoi(argv[1]) : 16;
  const int32_t context = argc > 2 ? std::atoi(argv[2]) : 512;
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 20;
  Config config;
  config.num_kv_heads = 4;
  config.group = 4;
  config.head_dim = 128;
  config.block_size = 16;
  std::vector<int32_t> lens(std::size_t(num_seqs), context + 1);
  Scenario scenario(config, lens, 1u);
  std::vector<Chunk> decode;
  for (int32_t s = 0; s < num_seqs; ++s) decode.push_back({s, context, 1});

  std::printf("decode batch: %d seqs x %d context, %d kv heads x GQA %d, head_dim %d, block %d, f32\n", num_seqs,
              context, config.num_kv_heads, config.group, config.head_dim, config.block_size);
  double seconds[3] = {0, 0, 0};
  const char* names[3] = {"reference", "optimized/1 thread", "optimized/default threads"};
  const char* options[3] = {R"({"variant": "reference"})", R"({"variant": "optimized", "num_threads": 1})",
                            R"({"variant": "optimized"})"};
  for (int v = 0; v < 3; ++v) {
    Backend backend(options[v]);
    backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
    scenario.fill(backend, std::vector<int32_t>(std::size_t(num_seqs), context));
    scenario.run_step(backend, decode, num_seqs);  // warm-up
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) scenario.run_step(backend, decode, num_seqs);
    seconds[v] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
    std::printf("  %-26s %8.3f ms/step\n", names[v], seconds[v] * 1e3);
  }
  std::printf("speed-up over reference: %.1fx (1 thread), %.1fx (default threads)\n", seconds[0] / seconds[1],
              seconds[0] / seconds[2]);
  return 0;
}
