// llama_long_context: one sequence of each given context length through
// models_llama and an attention backend, as the engine runs them, for
// tools/bench/long_context_bench.py (issue 19: attention at 1k-16k tokens).
// Not a test.
//
//   llama_long_context MODEL_DIR CONTEXTS CHUNK DECODE_STEPS THREADS [ATTENTION]
//
// CONTEXTS: comma-separated token counts. For each, a fresh sequence of that
// many token ids (a fixed pseudo-random rule) is prefilled in chunks of CHUNK
// tokens (chunked prefill, as the scheduler does with max_num_batched_tokens),
// then decodes DECODE_STEPS greedy tokens one step at a time. ATTENTION: the
// attention plugin's name or .so path (default attention_cpu), so two builds of
// the kernel can be compared in one run. The KV cache has the model's dtype,
// block size 16. Prints one JSON line per context: the prefill's seconds and
// tokens/s, the median decode step's tokens/s, and the load average around it.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/paged_runner.h"

using namespace llama_test;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

std::vector<int32_t> parse_contexts(const std::string& text) {
  std::vector<int32_t> contexts;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const int value = std::atoi(item.c_str());
    expect(value > 0, "CONTEXTS: '" + item + "' is not a positive token count");
    contexts.push_back(value);
  }
  expect(!contexts.empty(), "CONTEXTS is empty");
  return contexts;
}

std::string load_average() {
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) != 3) return "null";
  char text[64];
  std::snprintf(text, sizeof text, "[%.2f, %.2f, %.2f]", load[0], load[1], load[2]);
  return text;
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s MODEL_DIR CONTEXTS CHUNK DECODE_STEPS THREADS [ATTENTION]\n", argv[0]);
    return 2;
  }
  const std::filesystem::path model = argv[1];
  const std::vector<int32_t> contexts = parse_contexts(argv[2]);
  const int32_t chunk = std::atoi(argv[3]), decode_steps = std::atoi(argv[4]), threads = std::atoi(argv[5]);
  expect(chunk > 0 && decode_steps > 0 && threads >= 0, "CHUNK and DECODE_STEPS must be positive, THREADS >= 0");
  Placement placement;
  if (argc > 6) placement.attention_plugin = argv[6];

  const int32_t block_size = 16;
  int32_t blocks = 0, longest = 0;
  for (int32_t context : contexts) {
    blocks += (context + decode_steps + block_size - 1) / block_size;
    longest = std::max(longest, (context + decode_steps + block_size - 1) / block_size);
  }
  const std::string options = "{\"num_threads\": " + std::to_string(threads) + "}";
  PagedRunner runner(model, options, options, block_size, blocks, 7, placement, longest);
  const int32_t vocab = runner.info().vocab_size;
  expect(runner.info().max_position_embeddings >= int64_t(longest) * block_size,
         "the model's max_position_embeddings is below the longest context plus the decode steps");

  for (int32_t context : contexts) {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < context; ++i) {
      ids.push_back(int32_t((2654435761u + uint32_t(i) * 40503u) % uint32_t(vocab)));
    }
    const int32_t seq = runner.add_sequence(ids);
    const std::string load_before = load_average();
    PagedRunner::Step step;
    const auto start = std::chrono::steady_clock::now();
    for (int32_t done = 0; done < context; done += chunk) {
      const int32_t len = std::min(chunk, context - done);
      const bool last = done + len == context;
      step = runner.step({{seq, len}}, last ? std::vector<int32_t>{len - 1} : std::vector<int32_t>{}, {});
    }
    const double prefill_seconds = seconds_since(start);
    std::vector<double> times;
    for (int32_t i = 0; i < decode_steps; ++i) {
      runner.append_token(seq, argmax(step.logits.at(0)));
      const auto step_start = std::chrono::steady_clock::now();
      step = runner.step({{seq, 1}}, {0}, {});
      times.push_back(seconds_since(step_start));
    }
    std::sort(times.begin(), times.end());
    std::printf("{\"context\": %d, \"chunk\": %d, \"prefill_s\": %.4f, \"prefill_tok_s\": %.2f, \"decode_steps\": %d, "
                "\"decode_tok_s\": %.3f, \"threads\": %d, \"attention\": \"%s\", \"load_average_start\": %s, "
                "\"load_average_end\": %s}\n",
                context, chunk, prefill_seconds, context / prefill_seconds, decode_steps,
                1.0 / times[times.size() / 2], threads, placement.attention_plugin.c_str(), load_before.c_str(),
                load_average().c_str());
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "llama_long_context: %s\n", e.what());
  return 1;
}
