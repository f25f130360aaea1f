// attention_cuda against attention_cpu (reference variant) and the dense
// double-precision reference, on identical randomized paged batches: pools
// poisoned with NaN, scattered (non-contiguous) block tables, contexts filled
// by chunked prefill, then decode, speculative multi-row decode, prefill
// chunks over cached context, mixed batches, read-only (slot -1) rows, and
// long contexts on the split-K path. GPU cases; they skip without a device.
//
// Tolerances, per dtype (|got - ref| <= atol + rtol |ref|):
//   vs dense: dense_tolerance() (paged_scenario.h: f32 summation error over
//     < 256 terms, plus the final rounding to f16/bf16), with atol scaled by
//     context / 256 for longer contexts: the worst-case f32 summation error
//     grows linearly with the number of terms, and outputs (convex
//     combinations of V in [-1, 1]) stay O(1/sqrt(context)) >> that bound, so
//     a lost or duplicated partition is still far outside it.
//   vs attention_cpu: both are within the dense tolerance of the truth, so
//     within twice of each other; for f16/bf16 the two f32 results may round
//     to neighbouring values, one ulp = at most 2u |x| apart, which 2 rtol covers.

#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tests/plugins/attention_cpu/paged_scenario.h"
#include "tests/plugins/attention_cuda/cuda_backend.h"
#include "tests/support/cuda_device.h"

using namespace attention_test;

namespace {

constexpr const char* kCpuOracle = R"({"variant": "reference"})";

struct SeqPlan {
  int32_t context_len;
  int32_t query_len;
};

// Decodes first (one at a block boundary, one with a single cached token),
// then speculative decodes with 1 + K rows, then prefill chunks on cached
// context, a fresh prefill and a chunk longer than one 8-row tile.
const std::vector<SeqPlan> kMixed = {{37, 1}, {1, 1}, {32, 1}, {63, 1}, {40, 4},
                                     {17, 5}, {20, 13}, {0, 9}, {31, 5}, {70, 29}};

Tolerance scaled(Tolerance t, int32_t context) {
  t.atol *= std::max(1.0, double(context) / 256.0);
  return t;
}

// Fills every sequence's context by chunked prefill, then runs one mixed
// step, its decodes alone (a decode-only batch), then the mixed step
// read-only (slot -1, NaN K/V: nothing may be written, outputs unchanged);
// every step on both backends, checked against the dense reference and each
// other.
void check_against_cpu(const Config& config, uint32_t seed, const std::vector<SeqPlan>& plans,
                       const std::string& cuda_options = "{}") {
  std::vector<int32_t> seq_lens;
  int32_t max_len = 0;
  for (const auto& s : plans) {
    seq_lens.push_back(s.context_len + s.query_len);
    max_len = std::max(max_len, seq_lens.back());
  }
  Scenario scenario(config, seq_lens, seed);
  Backend cpu(kCpuOracle);
  CudaBackend gpu(cuda_options);
  cpu.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  gpu.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  scenario.poison(cpu);
  scenario.poison(gpu);

  const Tolerance dense_tol = scaled(dense_tolerance(config.dtype), max_len);
  const Tolerance cross_tol{2 * dense_tol.atol, 2 * dense_tol.rtol};
  double max_dense_error = 0;
  auto check_step = [&](const std::vector<Chunk>& chunks, int32_t num_decode, bool write, const char* what) {
    const auto expected = scenario.dense(chunks);
    const auto from_cpu = scenario.run_step(cpu, chunks, num_decode, write);
    const auto from_gpu = scenario.run_step(gpu, chunks, num_decode, write);
    for (int32_t layer = 0; layer < config.num_layers; ++layer) {
      INFO(what << ", layer " << layer);
      const auto l = std::size_t(layer);
      REQUIRE(compare(from_gpu[l], expected[l], dense_tol, &max_dense_error) == "");
      INFO("against attention_cpu");
      REQUIRE(compare(from_gpu[l], from_cpu[l], cross_tol, nullptr) == "");
    }
  };

  std::vector<int32_t> context_lens;
  for (const auto& p : plans) context_lens.push_back(p.context_len);
  for (const auto& chunks : scenario.prefill_steps(context_lens)) check_step(chunks, 0, true, "context prefill step");

  std::vector<Chunk> mixed;
  for (std::size_t s = 0; s < plans.size(); ++s) mixed.push_back({int32_t(s), plans[s].context_len, plans[s].query_len});
  // The leading sequences with at most 1 + 4 rows are the decodes (speculative ones included).
  int32_t num_decode = 0;
  while (num_decode < int32_t(plans.size()) && plans[std::size_t(num_decode)].query_len <= 5) ++num_decode;
  check_step(mixed, num_decode, true, "mixed step");
  // The decodes alone (rewriting the same K/V): a decode-only batch.
  const std::vector<Chunk> decodes(mixed.begin(), mixed.begin() + num_decode);
  if (!decodes.empty()) check_step(decodes, num_decode, true, "decode-only step");
  check_step(mixed, num_decode, false, "the mixed step again, read-only (slot -1)");
  INFO("max |attention_cuda - dense| = " << max_dense_error);
  SUCCEED();
}

}  // namespace

TEST_CASE("attention_cuda matches attention_cpu: decode, speculative rows, prefill chunks, mixed",
          "[attention_cuda][gpu]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  // Under emulation every dtype x head_dim, GQA 1 and 8 (4 adds no new path).
  const bool small = pagedllm::testing::emulated_small_shapes();
  Config config;
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16);
  config.head_dim = GENERATE(32, 64, 128);
  config.group = GENERATE_COPY(filter([=](int g) { return !small || g != 4; }, values({1, 4, 8})));
  config.block_size = GENERATE(1, 16);
  CAPTURE(int(config.dtype), config.head_dim, config.group, config.block_size);
  check_against_cpu(config, 2024u + uint32_t(config.group * 1000 + config.head_dim * 10 + config.block_size), kMixed);
}

TEST_CASE("attention_cuda matches attention_cpu: GQA groups beyond one CTA and several layers",
          "[attention_cuda][gpu]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.num_layers = 3;
  config.num_kv_heads = 1;
  config.group = GENERATE(12, 16);  // more query heads per kv head than one CTA's 8 query vectors
  config.head_dim = 64;
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  CAPTURE(config.group, int(config.dtype));
  check_against_cpu(config, 77u + uint32_t(config.group), kMixed);
}

TEST_CASE("attention_cuda long contexts: the split-K path over several partitions equals the unsplit one",
          "[attention_cuda][gpu]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16);
  const bool small = pagedllm::testing::emulated_small_shapes();
  config.head_dim = GENERATE_COPY(filter([=](int d) { return !small || d == 64; }, values({64, 128})));
  config.group = 4;
  config.block_size = 16;
  // partition 256: the 2100-token decode spans 9 partitions, the last one
  // partial; the speculative decode's rows end in different partitions; the
  // prefill chunk's tiles are split too (their context exceeds 300). Under
  // emulation the same structure at a seventh of the size: partitions of 32,
  // the 300-token decode over 10 of them.
  const std::vector<SeqPlan> plans = small ? std::vector<SeqPlan>{{300, 1}, {111, 4}, {143, 12}, {13, 1}}
                                           : std::vector<SeqPlan>{{2100, 1}, {777, 4}, {1000, 24}, {100, 1}};
  const bool split = GENERATE(true, false);
  const std::string options = !split ? R"({"split_min_context": 1000000})"
                              : small ? R"({"partition_size": 32, "split_min_context": 40})"
                                      : R"({"partition_size": 256, "split_min_context": 300})";
  CAPTURE(int(config.dtype), config.head_dim, options);
  check_against_cpu(config, 31337u + uint32_t(config.head_dim), plans, options);
}

TEST_CASE("attention_cuda matches attention_cpu under a sliding window, split or not", "[attention_cuda][gpu][window]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const bool small = pagedllm::testing::emulated_small_shapes();
  Config config;
  config.sliding_window = GENERATE(1, 7, 40);
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  config.head_dim = 64;
  config.group = 4;
  config.block_size = 16;
  // Partitions wholly before a row's window hold none of its keys: the combine weighs them 0.
  const std::vector<SeqPlan> plans = small ? std::vector<SeqPlan>{{300, 1}, {111, 4}, {143, 12}, {13, 1}}
                                           : std::vector<SeqPlan>{{2100, 1}, {777, 4}, {1000, 24}, {100, 1}};
  const std::string options = GENERATE(as<std::string>{}, R"({"split_min_context": 1000000})",
                                       R"({"partition_size": 32, "split_min_context": 40})");
  CAPTURE(config.sliding_window, int(config.dtype), options);
  check_against_cpu(config, 4711u + uint32_t(config.sliding_window), kMixed, options);
  check_against_cpu(config, 4712u + uint32_t(config.sliding_window), plans, options);
}
