// attention_cuda block operations and cache lifetime, observed through
// attention (a sequence whose table points at copied or swapped-in blocks
// must attend exactly as before): copy_blocks, swap_out/swap_in through the
// pinned host pool, allocate_cache twice (SDK 1.1 profiling), memory_info,
// and device out-of-memory. GPU cases; they skip without a device.

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "tests/plugins/attention_cpu/paged_scenario.h"
#include "tests/plugins/attention_cuda/cuda_backend.h"
#include "tests/support/cuda_device.h"

using namespace attention_test;
using Catch::Matchers::Contains;

TEST_CASE("attention_cuda copy_blocks, swap_out and swap_in preserve blocks in every layer",
          "[attention_cuda][gpu][cache_ops]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.num_layers = 2;
  config.group = 2;
  config.block_size = GENERATE(1, 16);
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  CAPTURE(config.block_size, int(config.dtype));
  CudaBackend backend("{}");
  check_block_round_trips(config, backend);
}

// As the swap round trip above, with no host synchronisation from the prefill
// to the check: the prefill's kernels, swap_out, the NaN poisoning's kernels,
// swap_in and the check's plan all in flight together, as in an engine step
// that keeps the device busy. Only the plugin's events order them (the copy
// stream waits for the last kernels; run() waits for the copies and the
// metadata upload; the upload waits for the kernels that read the previous
// metadata). On the emulated device a missing one of those waits fails the
// operation it should have ordered, naming both (the stream ordering check):
// each of the plugin's four cudaStreamWaitEvent calls deleted in turn made this
// case fail, e.g. "kernel write_kv_kernel<float> ... on stream 3 writes device
// buffer #1 ..., which cudaMemcpyAsync(DeviceToHost, ...) on stream 1 reads, with
// no event wait or synchronisation between them". On a GPU it would be a race
// this test might not see.
TEST_CASE("attention_cuda orders swaps and metadata uploads against run() by events alone",
          "[attention_cuda][gpu][cache_ops]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.num_layers = 2;
  config.group = 2;
  const int32_t len = 40;
  const int32_t blocks = (len + config.block_size - 1) / config.block_size;
  Scenario scenario(config, {len}, 17u, /*spare_blocks=*/blocks + 1);
  const int64_t host_blocks = blocks;
  CudaBackend backend("{}");
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), host_blocks);
  const std::vector<int32_t> original(scenario.table(0).begin(), scenario.table(0).begin() + blocks);
  const std::vector<int32_t> spare = scenario.free_blocks();
  std::vector<pllm_block_copy> out, in;
  for (int32_t i = 0; i < blocks; ++i) {
    out.push_back({original[std::size_t(i)], host_blocks - 1 - i});
    in.push_back({host_blocks - 1 - i, spare[std::size_t(i)]});
  }

  // The largest step first, synchronously: the plugin's staging and metadata buffers
  // grow to it, so later plans grow nothing (cudaFreeHost would synchronise the device).
  scenario.poison(backend);

  backend.defer_synchronisation(true);
  scenario.run_step(backend, {{0, 0, len}});  // writes the sequence's K/V (outputs not copied back)
  backend.swap_out(out);
  scenario.poison(backend);  // overwrites every device block, the swapped-out ones too
  backend.swap_in(in);
  std::copy(spare.begin(), spare.begin() + blocks, scenario.table(0).begin());
  const std::vector<Chunk> read = {{0, len - 1, 1}};
  const HostBatch check = scenario.make_batch(read, 1, /*write=*/false);
  backend.plan(check.view());  // the upload overwrites metadata the poisoning's kernels read
  backend.defer_synchronisation(false);
  expect_cache_holds_sequence(scenario, backend, 0, len);
}

TEST_CASE("attention_cuda allocate_cache twice replaces the cache, and memory_info sees it",
          "[attention_cuda][gpu][cache_ops]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.group = 4;
  const int32_t len = 50;
  Scenario scenario(config, {len}, 5u);
  CudaBackend backend("{}");
  const pllm_device_memory before = backend.memory_info();
  CHECK(before.total_bytes > 0);
  CHECK(before.free_bytes <= before.total_bytes);

  // The profiling cache: small, used for a step, then replaced.
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 1);
  scenario.poison(backend);
  scenario.run_step(backend, {{0, 0, len}});

  // The final cache: 1 GiB (16 MiB under emulation, whose poisoning runs a
  // kernel per slot) more than the first, which must be gone.
  const uint64_t per_block = backend.bytes_per_block(scenario.spec());
  const uint64_t big_bytes = pagedllm::testing::emulated_small_shapes() ? uint64_t(16) << 20 : uint64_t(1) << 30;
  const int64_t big_blocks = int64_t(big_bytes / per_block);
  backend.allocate_cache(scenario.spec(), big_blocks, 4);
  const pllm_device_memory after = backend.memory_info();
  INFO("free before " << before.free_bytes << ", after " << after.free_bytes << ", cache " << big_blocks * per_block);
  CHECK(after.free_bytes + uint64_t(big_blocks) * per_block / 2 < before.free_bytes);
  CHECK(after.total_bytes == before.total_bytes);

  // The new cache works (its contents start undefined: poison, write, read).
  scenario.poison(backend);
  scenario.run_step(backend, {{0, 0, len}});
  expect_cache_holds_sequence(scenario, backend, 0, len);
}

TEST_CASE("attention_cuda: a cache larger than the device is OUT_OF_MEMORY naming the bytes",
          "[attention_cuda][gpu][cache_ops]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  Scenario scenario(config, {16}, 1u);
  CudaBackend backend("{}");
  const pllm_device_memory info = backend.memory_info();
  const uint64_t per_block = backend.bytes_per_block(scenario.spec());
  const int64_t too_many = int64_t(info.total_bytes / per_block) * 2;
  try {
    backend.allocate_cache(scenario.spec(), too_many, 0);
    FAIL("allocate_cache of twice the device's memory succeeded");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK(e.status() == PLLM_ERROR_OUT_OF_MEMORY);
    CHECK_THAT(e.what(), Contains(std::to_string(uint64_t(too_many) * per_block) + " bytes requested"));
  }
  // The backend stays usable after the failure.
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  scenario.poison(backend);
  scenario.run_step(backend, {{0, 0, 16}});
  expect_cache_holds_sequence(scenario, backend, 0, 16);
}

TEST_CASE("attention_cuda: a layer refused for its launch grid has written nothing", "[attention_cuda][gpu][errors]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  config.num_kv_heads = 1;
  config.head_dim = 32;
  const int32_t len = 20;
  Scenario scenario(config, {len}, 11u);
  CudaBackend backend("{}");
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  scenario.poison(backend);
  scenario.run_step(backend, {{0, 0, len}});

  // Rewrite the last position with NaN K/V, for a query of 8 x 65536 heads on
  // the one kv head: a CTA holds 8 query vectors, so grid.y would need 65536.
  const HostBatch rewrite = scenario.make_batch({{0, len - 1, 1}}, 1);
  backend.plan(rewrite.view());
  const int64_t heads = int64_t(8) * 65536;
  TypedBuffer q(config.dtype, std::vector<float>(std::size_t(heads * config.head_dim), 0.5f));
  TypedBuffer out(config.dtype, std::vector<float>(q.size(), 0.0f));
  TypedBuffer nan_kv(config.dtype, std::vector<float>(std::size_t(config.head_dim), std::nanf("")));
  LayerTensors tensors;
  tensors.query = q.tensor3(1, heads, config.head_dim);
  tensors.key = nan_kv.tensor3(1, 1, config.head_dim);
  tensors.value = nan_kv.tensor3(1, 1, config.head_dim);
  tensors.output = out.tensor3(1, heads, config.head_dim);
  const auto e = call_error([&] { backend.run(0, tensors.args()); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.what(), Contains("grid dimension"));

  // The refused layer's K/V never reached the cache: the sequence attends as before.
  expect_cache_holds_sequence(scenario, backend, 0, len);
}
