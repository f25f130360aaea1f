// llama_quant_eval: one weight precision of models_llama (through attention_cpu,
// as the engine runs it) on held-out token windows and in decode, for
// tools/bench/quant_accuracy.py, which compares the precisions. Not a test.
//
//   llama_quant_eval MODEL_DIR VARIANT TOKENS_FILE LOGITS_OUT [decode_steps] [threads] [chunk]
//
// VARIANT: f32, bf16, f16, auto (model.dtype) or int8, int8_w8a8,
// int8_weight_only (model.options.quantization, dtype auto), or bf16_exact
// (bf16 with model.options.cpu_bf16_compute exact). TOKENS_FILE:
// int32 windows, count, length, then count x length token ids; each window is
// prefilled as one sequence (in steps of `chunk` tokens when given: chunk <=
// 16 runs every product on the few-row kernels, as batched decode and
// speculative verification do) and every position's logits are written to
// LOGITS_OUT as f32 [count x length, vocab] (count 0: nothing). Then one
// sequence decodes greedily `decode_steps` tokens (default 128) after a
// 32-token prompt. Prints one JSON line: the variant, tokens/s of the window
// prefills and the median decode step, the model's description.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/paged_runner.h"

using namespace llama_test;
using Chunk = PagedRunner::Chunk;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

struct Variant {
  pllm_dtype dtype = PLLM_DTYPE_INVALID;
  std::string quantization = "none";
  std::string bf16_compute = "vdpbf16ps";
};

Variant parse_variant(const std::string& name) {
  if (name == "f32") return {PLLM_DTYPE_F32, "none"};
  if (name == "bf16") return {PLLM_DTYPE_BF16, "none"};
  if (name == "bf16_exact") return {PLLM_DTYPE_BF16, "none", "exact"};
  if (name == "f16") return {PLLM_DTYPE_F16, "none"};
  if (name == "auto") return {};
  if (name == "int8" || name == "int8_w8a8" || name == "int8_weight_only") return {PLLM_DTYPE_INVALID, name};
  throw std::runtime_error("unknown variant '" + name +
                           "' (f32, bf16, bf16_exact, f16, auto, int8, int8_w8a8, int8_weight_only)");
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL_DIR VARIANT TOKENS_FILE LOGITS_OUT [decode_steps] [threads] [chunk]\n",
                 argv[0]);
    return 2;
  }
  const std::filesystem::path model = argv[1];
  const std::string variant_name = argv[2];
  const Variant variant = parse_variant(variant_name);
  const int32_t decode_steps = argc > 5 ? std::atoi(argv[5]) : 128;
  const int threads = argc > 6 ? std::atoi(argv[6]) : 0;
  const int32_t chunk = argc > 7 ? std::atoi(argv[7]) : 0;  // 0: a window in one step

  std::ifstream in(argv[3], std::ios::binary);
  int32_t header[2] = {0, 0};
  in.read(reinterpret_cast<char*>(header), sizeof header);
  expect(bool(in) && header[0] >= 0 && header[1] > 0, std::string(argv[3]) + ": bad header");
  const int32_t windows = header[0], length = header[1];
  std::vector<int32_t> ids(std::size_t(windows) * std::size_t(length));
  in.read(reinterpret_cast<char*>(ids.data()), std::streamsize(ids.size() * sizeof(int32_t)));
  expect(bool(in), std::string(argv[3]) + ": truncated");

  const std::string model_options = "{\"num_threads\": " + std::to_string(threads) + ", \"quantization\": \"" +
                                    variant.quantization + "\", \"cpu_bf16_compute\": \"" + variant.bf16_compute +
                                    "\"}";
  const std::string attention_options = "{\"num_threads\": " + std::to_string(threads) + "}";
  const int32_t block_size = 16, prompt = 32;
  const int32_t blocks =
      windows * ((length + block_size - 1) / block_size) + (prompt + decode_steps) / block_size + 2;
  Placement placement;
  placement.dtype = variant.dtype;
  PagedRunner runner(model, model_options, attention_options, block_size, blocks, 7, placement);
  const int32_t vocab = runner.info().vocab_size;

  std::ofstream out(argv[4], std::ios::binary | std::ios::trunc);
  double prefill_seconds = 0;
  for (int32_t w = 0; w < windows; ++w) {
    const int32_t seq = runner.add_sequence({ids.begin() + std::ptrdiff_t(w) * length,
                                             ids.begin() + std::ptrdiff_t(w + 1) * length});
    const int32_t step_len = chunk > 0 ? chunk : length;
    for (int32_t first = 0; first < length; first += step_len) {
      const int32_t len = std::min(step_len, length - first);
      std::vector<int32_t> rows(static_cast<std::size_t>(len));
      std::iota(rows.begin(), rows.end(), 0);
      const auto start = std::chrono::steady_clock::now();
      const PagedRunner::Step step = runner.step({{seq, len}}, rows, {});
      prefill_seconds += seconds_since(start);
      for (const std::vector<float>& row : step.logits) {
        expect(int32_t(row.size()) == vocab, "a logits row is not vocab wide");
        out.write(reinterpret_cast<const char*>(row.data()), std::streamsize(row.size() * sizeof(float)));
      }
    }
  }
  expect(bool(out), std::string(argv[4]) + ": write failed");

  std::vector<int32_t> start_ids;
  for (int32_t i = 0; i < prompt; ++i) {
    start_ids.push_back(int32_t((2654435761u + uint32_t(i) * 40503u) % uint32_t(vocab)));
  }
  const int32_t seq = runner.add_sequence(start_ids);
  auto step = runner.step({{seq, prompt}}, {prompt - 1}, {});
  std::vector<double> times;
  for (int32_t i = 0; i < decode_steps; ++i) {
    runner.append_token(seq, argmax(step.logits[0]));
    const auto start = std::chrono::steady_clock::now();
    step = runner.step({{seq, 1}}, {0}, {});
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  const double decode = times.empty() ? 0.0 : 1.0 / times[times.size() / 2];
  const double prefill = windows ? windows * double(length) / prefill_seconds : 0.0;
  std::printf("{\"variant\": \"%s\", \"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"windows\": %d, "
              "\"length\": %d, \"vocab\": %d}\n",
              variant_name.c_str(), prefill, decode, windows, length, vocab);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "llama_quant_eval: %s\n", e.what());
  return 1;
}
