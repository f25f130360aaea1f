// attention_cuda's kernels (paged_attention_kernels.cuh, cache_write_kernels.cuh)
// compiled as host code and launched straight into the SIMT emulator
// (plugins/lib/cuda_emulation; this file is compiled with
// cuda_emulation.h included first, as the emulated build's .cu files are),
// through the same Scenario as the plugin tests: NaN-poisoned pool, permuted
// block tables, chunked prefill, a mixed step, a decode-only step, read-only
// slot -1 rows, split-K partitions — against the dense double reference.
// Runs everywhere (no GPU): it checks the kernels' index math, masks, online
// softmax merges and partition reduction; the GPU cases in
// attention_cuda_test.cpp check the real device. Tolerances: dense_tolerance()
// (paged_scenario.h), atol scaled by context / 256 as in attention_cuda_test.cpp.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "cache_write_kernels.cuh"
#include "paged_attention_kernels.cuh"
#include "step_metadata.h"
#include "cuda_common/launch.cuh"
#include "tests/plugins/attention_cpu/paged_scenario.h"

using namespace attention_test;
namespace ac = pagedllm::attention_cuda;

namespace {

// The plugin's plan/run, with host memory standing in for the device and
// the emulation for the launches: the cache in attention_cuda's layout, the
// work list from the plugin's own WorkList::build.
class EmulatedBackend {
 public:
  explicit EmulatedBackend(ac::SplitPolicy policy) : policy_(policy) {}

  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, int64_t /*host_blocks*/) {
    spec_ = spec;
    const std::size_t layer_bytes = std::size_t(device_blocks) * std::size_t(spec.num_kv_heads) *
                                    std::size_t(spec.block_size) * std::size_t(spec.head_dim) *
                                    std::size_t(pllm_dtype_size(spec.dtype));
    // All-ones bytes are NaN in f32, f16 and bf16: the Scenario's poison()
    // without its one-CTA-per-slot cost, which the emulation cannot afford.
    pool_.assign(layer_bytes * 2 * std::size_t(spec.num_layers), std::byte{0xff});
    layer_bytes_ = layer_bytes;
  }

  void plan(const pllm_batch& b) {
    qsl_.assign(b.query_start_loc, b.query_start_loc + b.num_seqs + 1);
    lens_.assign(b.seq_lens, b.seq_lens + b.num_seqs);
    tables_.assign(b.block_tables, b.block_tables + std::size_t(b.num_seqs) * std::size_t(b.max_blocks_per_seq));
    slots_.assign(b.slot_mapping, b.slot_mapping + b.num_tokens);
    work_.build(b, policy_);
    step_ = {};
    step_.query_start_loc = qsl_.data();
    step_.seq_lens = lens_.data();
    step_.block_tables = tables_.data();
    step_.slot_mapping = slots_.data();
    step_.work = work_.work.data();
    step_.combine = work_.combine.data();
    step_.num_tokens = b.num_tokens;
    step_.num_work = int32_t(work_.work.size());
    step_.num_combine = int32_t(work_.combine.size());
    step_.max_blocks_per_seq = b.max_blocks_per_seq;
    step_.max_tile_rows = work_.max_tile_rows;
  }

  void run(int32_t layer, const pllm_attention_layer_args& args) {
    ac::LayerCache cache;
    cache.keys = pool_.data() + std::size_t(layer) * 2 * layer_bytes_;
    cache.values = pool_.data() + (std::size_t(layer) * 2 + 1) * layer_bytes_;
    cache.num_kv_heads = spec_.num_kv_heads;
    cache.head_dim = spec_.head_dim;
    cache.block_size = spec_.block_size;
    cache.dtype = spec_.dtype;
    ac::AttentionLaunch launch;
    launch.cache = cache;
    launch.step = step_;
    launch.query = rows_of(*args.query);
    launch.output = rows_of(*args.output);
    launch.num_heads = int32_t(args.query->shape[1]);
    launch.scale = args.scale;
    partials_.assign(std::size_t(ac::partial_floats(work_.num_partials, launch.num_heads, cache.head_dim)), 0.0f);
    const int64_t vectors = int64_t(work_.num_partials) * ac::kTileRows * launch.num_heads;
    launch.partials.out = partials_.data();
    launch.partials.max = partials_.data() + vectors * cache.head_dim;
    launch.partials.sum = launch.partials.max + vectors;
    if (step_.num_tokens == 0) return;
    pagedllm::cuda::visit_storage_type(spec_.dtype, "emulated attention", [&](auto zero) {
      using T = decltype(zero);
      switch (cache.head_dim) {
        case 32: return run_typed<T, 32>(launch, args);
        case 64: return run_typed<T, 64>(launch, args);
        case 128: return run_typed<T, 128>(launch, args);
        default: FAIL("head_dim " << cache.head_dim);
      }
    });
  }

 private:
  static ac::DeviceRows rows_of(const pllm_tensor& t) { return {t.data, t.strides[0], t.strides[1]}; }

  template <class T, int HeadDim>
  void run_typed(const ac::AttentionLaunch& launch, const pllm_attention_layer_args& args) const {
    const ac::DeviceRows key = rows_of(*args.key), value = rows_of(*args.value);
    namespace cuda = pagedllm::cuda;
    cuda::launch<ac::device::write_kv_kernel<T>>(dim3(unsigned(step_.num_tokens), 2), ac::device::kWriteThreads, 0,
                                                 nullptr, launch.cache, step_.slot_mapping, key, value);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const int32_t group = launch.num_heads / launch.cache.num_kv_heads;
    const int32_t chunks = (step_.max_tile_rows * group + ac::kMaxQueryVectors - 1) / ac::kMaxQueryVectors;
    cuda::launch<ac::device::paged_attention_kernel<T, HeadDim>>(
        dim3(unsigned(step_.num_work), unsigned(launch.cache.num_kv_heads * chunks)), ac::device::kThreads, 0, nullptr,
        launch, chunks);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    if (step_.num_combine > 0) {
      cuda::launch<ac::device::combine_partitions_kernel<T>>(dim3(unsigned(step_.num_combine), unsigned(launch.num_heads)),
                                                             ac::device::kThreads, 0, nullptr, launch, HeadDim);
      REQUIRE(cudaGetLastError() == cudaSuccess);
    }
  }

  ac::SplitPolicy policy_;
  pllm_kv_cache_spec spec_{};
  std::vector<std::byte> pool_;
  std::size_t layer_bytes_ = 0;
  std::vector<int32_t> qsl_, lens_, tables_;
  std::vector<int64_t> slots_;
  ac::WorkList work_;
  ac::DeviceStep step_;
  std::vector<float> partials_;
};

struct SeqPlan {
  int32_t context_len;
  int32_t query_len;
};

void check_emulated(const Config& config, const std::vector<SeqPlan>& plans, ac::SplitPolicy policy, uint32_t seed) {
  std::vector<int32_t> seq_lens, context_lens;
  int32_t max_len = 0;
  for (const auto& p : plans) {
    seq_lens.push_back(p.context_len + p.query_len);
    context_lens.push_back(p.context_len);
    max_len = std::max(max_len, seq_lens.back());
  }
  Scenario scenario(config, seq_lens, seed, /*spare_blocks=*/1);
  EmulatedBackend backend(policy);
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  Tolerance tol = dense_tolerance(config.dtype);
  tol.atol *= std::max(1.0, double(max_len) / 256.0);
  auto check_step = [&](const std::vector<Chunk>& chunks, int32_t num_decode, bool write, const char* what) {
    const auto expected = scenario.dense(chunks);
    const auto got = scenario.run_step(backend, chunks, num_decode, write);
    for (int32_t layer = 0; layer < config.num_layers; ++layer) {
      INFO(what << ", layer " << layer);
      REQUIRE(compare(got[std::size_t(layer)], expected[std::size_t(layer)], tol, nullptr) == "");
    }
  };
  // One prefill step of whole contexts keeps the emulation quick; chunking is the plugin tests' job.
  std::vector<Chunk> context;
  for (std::size_t s = 0; s < plans.size(); ++s) {
    if (plans[s].context_len > 0) context.push_back({int32_t(s), 0, plans[s].context_len});
  }
  if (!context.empty()) check_step(context, 0, true, "context prefill");
  std::vector<Chunk> mixed;
  for (std::size_t s = 0; s < plans.size(); ++s) mixed.push_back({int32_t(s), plans[s].context_len, plans[s].query_len});
  int32_t num_decode = 0;
  while (num_decode < int32_t(plans.size()) && plans[std::size_t(num_decode)].query_len <= 5) ++num_decode;
  check_step(mixed, num_decode, true, "mixed step");
  check_step(std::vector<Chunk>(mixed.begin(), mixed.begin() + num_decode), num_decode, true, "decode-only step");
  check_step(mixed, num_decode, false, "mixed step, read-only (slot -1)");
}

// Decodes, speculative 1 + 3 and 1 + 4 rows, prefill chunks on cached
// context (one of two tiles, the second partial), a fresh prefill.
const std::vector<SeqPlan> kMixed = {{19, 1}, {1, 1}, {12, 4}, {5, 5}, {6, 13}, {0, 9}};

}  // namespace

TEST_CASE("attention_cuda kernels under SIMT emulation equal dense attention", "[attention_cuda][emulated]") {
  struct Case {
    pllm_dtype dtype;
    int32_t head_dim, group, num_kv_heads, block_size;
  };
  // Every token-group width: f32 x 128 is one token per warp (32 lanes a row,
  // no merge between groups); f16 x 32 is 8 tokens per warp (4 lanes a row).
  const Case c = GENERATE(Case{PLLM_DTYPE_F32, 64, 4, 2, 16}, Case{PLLM_DTYPE_F32, 32, 12, 1, 1},
                          Case{PLLM_DTYPE_F16, 128, 8, 1, 16}, Case{PLLM_DTYPE_BF16, 64, 1, 2, 16},
                          Case{PLLM_DTYPE_F32, 128, 2, 1, 16}, Case{PLLM_DTYPE_F16, 32, 4, 1, 16});
  CAPTURE(int(c.dtype), c.head_dim, c.group, c.num_kv_heads, c.block_size);
  Config config;
  config.dtype = c.dtype;
  config.head_dim = c.head_dim;
  config.group = c.group;
  config.num_kv_heads = c.num_kv_heads;
  config.block_size = c.block_size;
  check_emulated(config, kMixed, ac::SplitPolicy{512, 1024}, 4242u + uint32_t(c.head_dim + c.group));
}

TEST_CASE("attention_cuda kernels under SIMT emulation: split-K partitions equal dense attention",
          "[attention_cuda][emulated]") {
  Config config;
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  config.head_dim = 64;
  config.group = 4;
  config.num_kv_heads = 1;
  CAPTURE(int(config.dtype));
  // Partitions of 16 from 24 positions on: 100 + 1 is 7 partitions, the last
  // partial; the speculative rows end in one partition; the chunk's 2 tiles
  // are split; the last decode is not.
  const std::vector<SeqPlan> plans = {{100, 1}, {45, 4}, {30, 12}, {20, 1}};
  check_emulated(config, plans, ac::SplitPolicy{16, 24}, 99u);
}
