// attention_cpu: both kernels against a dense reference attention, through the
// real plugin .so. Every scenario poisons the whole pool with NaN first, fills
// the sequences' contexts by chunked prefill (checked too), then runs a mixed
// batch: decode sequences first, then prefill chunks on top of cached context.

#include <catch2/catch.hpp>

#include "tests/plugins/attention_cpu/paged_scenario.h"

using namespace attention_test;

namespace {

struct Variant {
  const char* name;
  const char* options;
};

const Variant kVariants[] = {
    {"reference", R"({"variant": "reference"})"},
    {"optimized/1 thread", R"({"variant": "optimized", "num_threads": 1})"},
    {"optimized/3 threads", R"({"variant": "optimized", "num_threads": 3})"},
};

// Context lengths and final query lengths of the mixed batch: four decodes
// (one right at a block boundary for block size 16/32, one with a single
// cached token), then prefill chunks with and without cached context.
struct SeqPlan {
  int32_t context_len;
  int32_t query_len;
};
const std::vector<SeqPlan> kMixed = {{37, 1}, {1, 1}, {32, 1}, {63, 1}, {20, 13}, {0, 9}, {31, 5}};

// Long prefill chunks for the optimized kernel's tiled path (64 / group rows
// per item, 128-key tiles): chunk lengths that are multiples of neither, a
// chunk starting mid-block and just past a key-tile boundary (130), cached
// context longer than the chunk (300 > 200), a fresh prefill, and a decode.
const std::vector<SeqPlan> kLongPrefill = {{300, 200}, {0, 150}, {5, 1}, {130, 77}};

// Long contexts with few kv heads: decodes and a short chunk (per-row path)
// over contexts of thousands of tokens, few enough items that the optimized
// kernel with 3 threads splits each context into pieces and merges their
// softmax states (flash-decoding); with 1 thread it walks them whole.
const std::vector<SeqPlan> kLongContexts = {{2900, 1}, {1100, 1}, {700, 3}};

void check_scenario(const Config& config, uint32_t seed, const std::vector<SeqPlan>& plans = kMixed) {
  std::vector<int32_t> seq_lens;
  for (const auto& s : plans) seq_lens.push_back(s.context_len + s.query_len);
  Scenario scenario(config, seq_lens, seed);

  std::vector<std::unique_ptr<Backend>> backends;
  for (const auto& v : kVariants) {
    backends.push_back(std::make_unique<Backend>(v.options));
    backends.back()->allocate_cache(scenario.spec(), scenario.num_device_blocks(), 2);
    scenario.poison(*backends.back());
  }
  const Tolerance dense_tol = dense_tolerance(config.dtype);
  // Variants against each other: both within dense_tol of the truth, so within
  // twice of each other (f32 differences come from summation order only).
  const Tolerance cross_tol{2 * dense_tol.atol, 2 * dense_tol.rtol};
  double max_dense_error = 0;

  auto check_step = [&](const std::vector<Chunk>& chunks, int32_t num_decode, const char* what) {
    const auto expected = scenario.dense(chunks);
    std::vector<std::vector<std::vector<float>>> got;
    for (std::size_t i = 0; i < backends.size(); ++i) {
      got.push_back(scenario.run_step(*backends[i], chunks, num_decode));
      for (int32_t layer = 0; layer < config.num_layers; ++layer) {
        INFO(what << ", variant " << kVariants[i].name << ", layer " << layer);
        const std::string mismatch = compare(got[i][std::size_t(layer)], expected[std::size_t(layer)], dense_tol,
                                             &max_dense_error);
        REQUIRE(mismatch == "");
        if (i > 0) {
          INFO("against the reference variant");
          REQUIRE(compare(got[i][std::size_t(layer)], got[0][std::size_t(layer)], cross_tol, nullptr) == "");
        }
      }
    }
  };

  // Chunked prefill of the contexts, random chunk sizes.
  std::vector<int32_t> context_lens;
  for (const auto& p : plans) context_lens.push_back(p.context_len);
  for (const auto& chunks : scenario.prefill_steps(context_lens)) check_step(chunks, 0, "context prefill step");

  std::vector<Chunk> mixed;
  int32_t num_decode = 0;
  for (std::size_t s = 0; s < plans.size(); ++s) {
    mixed.push_back({int32_t(s), plans[s].context_len, plans[s].query_len});
    if (plans[s].query_len == 1) ++num_decode;
  }
  check_step(mixed, num_decode, "mixed decode + prefill step");
  // The largest error seen, for the README's tolerance section (visible with -s).
  INFO("max |plugin - dense| = " << max_dense_error);
  SUCCEED();
}

}  // namespace

TEST_CASE("paged attention equals dense attention, f32", "[attention_cpu][attention]") {
  Config config;
  config.group = GENERATE(1, 2, 4);
  config.head_dim = GENERATE(64, 128, 13);
  config.block_size = GENERATE(1, 16, 32);
  CAPTURE(config.group, config.head_dim, config.block_size);
  check_scenario(config, 1234u + uint32_t(config.group * 1000 + config.head_dim * 10 + config.block_size));
}

TEST_CASE("paged attention equals dense attention, f16 and bf16", "[attention_cpu][attention]") {
  Config config;
  config.dtype = GENERATE(PLLM_DTYPE_F16, PLLM_DTYPE_BF16);
  config.group = GENERATE(1, 4);
  config.head_dim = GENERATE(64, 13);
  config.block_size = GENERATE(1, 16);
  CAPTURE(int(config.dtype), config.group, config.head_dim, config.block_size);
  check_scenario(config, 99u + uint32_t(config.group * 1000 + config.head_dim * 10 + config.block_size));
}

TEST_CASE("paged attention with several layers keeps layers apart", "[attention_cpu][attention]") {
  Config config;
  config.num_layers = 3;
  config.group = 2;
  config.block_size = 16;
  config.head_dim = GENERATE(64, 128);
  check_scenario(config, 7u);
}

TEST_CASE("paged attention equals dense attention, long prefill chunks", "[attention_cpu][attention]") {
  Config config;
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_F16, PLLM_DTYPE_BF16);
  config.group = GENERATE(1, 2, 4);
  config.head_dim = GENERATE(64, 13);
  config.block_size = GENERATE(1, 16, 32);
  CAPTURE(int(config.dtype), config.group, config.head_dim, config.block_size);
  check_scenario(config, 555u + uint32_t(config.group * 1000 + config.head_dim * 10 + config.block_size), kLongPrefill);
}

// The contexts are written cheaply (Scenario::fill: every token its own
// one-key sequence) and only the long step is checked, against the dense
// double-precision attention and the reference kernel. head_dim 64 goes with
// block 16 and 13 with block 1 (16 cases, not 32: a short ctest), each with
// the whole context and with a window of 333 keys (pieces of a split context
// then hold no key of a row's window, which the merge must weigh 0). Every
// combination but head_dim 13 with group 1 (too little work to wake the pool)
// is split.
TEST_CASE("paged attention equals dense attention, long contexts split across threads", "[attention_cpu][attention]") {
  Config config;
  config.num_kv_heads = GENERATE(1, 2);
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  config.group = GENERATE(1, 4);
  config.head_dim = GENERATE(64, 13);
  config.block_size = config.head_dim == 64 ? 16 : 1;
  config.sliding_window = GENERATE(0, 333);
  CAPTURE(config.num_kv_heads, int(config.dtype), config.group, config.head_dim, config.block_size,
          config.sliding_window);
  std::vector<int32_t> seq_lens, context_lens;
  std::vector<Chunk> step;
  int32_t num_decode = 0;
  for (std::size_t s = 0; s < kLongContexts.size(); ++s) {
    seq_lens.push_back(kLongContexts[s].context_len + kLongContexts[s].query_len);
    context_lens.push_back(kLongContexts[s].context_len);
    step.push_back({int32_t(s), kLongContexts[s].context_len, kLongContexts[s].query_len});
    if (kLongContexts[s].query_len == 1) ++num_decode;
  }
  Scenario scenario(config, seq_lens, 4242u + uint32_t(config.group * 100 + config.head_dim + config.block_size));
  const auto expected = scenario.dense(step);
  const Tolerance dense_tol = dense_tolerance(config.dtype);
  const Tolerance cross_tol{2 * dense_tol.atol, 2 * dense_tol.rtol};
  double max_dense_error = 0;
  std::vector<std::vector<float>> reference;
  for (const auto& v : kVariants) {
    Backend backend(v.options);
    backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
    scenario.poison(backend);
    scenario.fill(backend, context_lens);
    const auto got = scenario.run_step(backend, step, num_decode);
    INFO("variant " << v.name);
    REQUIRE(compare(got[0], expected[0], dense_tol, &max_dense_error) == "");
    if (reference.empty()) {
      reference = got;
    } else {
      INFO("against the reference variant");
      REQUIRE(compare(got[0], reference[0], cross_tol, nullptr) == "");
    }
  }
  INFO("max |plugin - dense| = " << max_dense_error);
  SUCCEED();
}

// The window of Mistral v0.1 and Gemma's local layers: keys (p - window, p] only. Windows of one key,
// shorter than a block, a block, and longer than some contexts, over the mixed steps (decodes, speculative
// rows, chunked prefills) and the tiled path's long chunks (a window inside one 128-key tile and across
// tiles); contexts split across threads: the long-contexts case below.
TEST_CASE("paged attention equals dense attention under a sliding window", "[attention_cpu][attention][window]") {
  Config config;
  config.sliding_window = GENERATE(1, 5, 16, 140);
  config.group = GENERATE(1, 4);
  config.block_size = GENERATE(1, 16);
  CAPTURE(config.sliding_window, config.group, config.block_size);
  const uint32_t seed = 8080u + uint32_t(config.sliding_window * 100 + config.group * 10 + config.block_size);
  check_scenario(config, seed);
  check_scenario(config, seed + 1, kLongPrefill);
}
