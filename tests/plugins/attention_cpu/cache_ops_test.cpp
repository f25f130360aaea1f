// attention_cpu: block copy / swap round trips (observed through attention:
// a sequence whose table points at the copies must attend exactly as before),
// range checks with their messages, options, devices and dtypes.

#include <catch2/catch.hpp>

#include "tests/plugins/attention_cpu/paged_scenario.h"

using namespace attention_test;
using Catch::Matchers::Contains;

TEST_CASE("copy_blocks, swap_out and swap_in preserve block contents in every layer", "[attention_cpu][cache_ops]") {
  Config config;
  config.num_layers = 2;
  config.group = 2;
  config.block_size = GENERATE(1, 16);
  config.dtype = GENERATE(PLLM_DTYPE_F32, PLLM_DTYPE_BF16);
  const char* options = GENERATE(R"({"variant": "reference"})", R"({"variant": "optimized", "num_threads": 2})");
  CAPTURE(config.block_size, int(config.dtype), options);
  Backend backend(options);
  check_block_round_trips(config, backend);
}

TEST_CASE("block operations reject out-of-range block ids with a message", "[attention_cpu][cache_ops]") {
  Config config;
  Scenario scenario(config, {20}, 3u);
  Backend backend("{}");
  REQUIRE_THROWS_WITH(backend.copy_blocks({{0, 1}}), Contains("not allocated"));
  backend.allocate_cache(scenario.spec(), 8, 4);

  auto e = call_error([&] { backend.copy_blocks({{0, 1}, {2, 8}}); });
  CHECK(e.status() == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(e.what(), Contains("copy_blocks") && Contains("destination block 8") && Contains("device pool of 8"));
  e = call_error([&] { backend.swap_out({{-1, 0}}); });
  CHECK_THAT(e.what(), Contains("swap_out") && Contains("source block -1"));
  e = call_error([&] { backend.swap_out({{0, 4}}); });
  CHECK_THAT(e.what(), Contains("destination block 4") && Contains("host swap pool of 4"));
  e = call_error([&] { backend.swap_in({{4, 0}}); });
  CHECK_THAT(e.what(), Contains("swap_in") && Contains("source block 4") && Contains("host swap pool"));
  backend.copy_blocks({});  // nothing to do is fine

  SECTION("plan checks block tables and slots against the pool") {
    HostBatch sb = scenario.make_batch({{0, 0, 20}});
    sb.block_tables[1] = 8;
    e = call_error([&] { backend.plan(sb.view()); });
    CHECK_THAT(e.what(), Contains("block_tables[0][1] = 8"));
    sb = scenario.make_batch({{0, 0, 20}});
    sb.slot_mapping[3] = 8 * 16;
    e = call_error([&] { backend.plan(sb.view()); });
    CHECK_THAT(e.what(), Contains("slot_mapping[3] = 128"));
    sb = scenario.make_batch({{0, 0, 20}});
    sb.seq_lens[0] = 19;
    e = call_error([&] { backend.plan(sb.view()); });
    CHECK_THAT(e.what(), Contains("seq_len 19"));
  }
}

TEST_CASE("attention_cpu options are validated strictly", "[attention_cpu][options]") {
  auto e = call_error([] { Backend b(R"({"variant": "optimized", "num_thread": 2})"); });
  CHECK(e.status() == PLLM_ERROR_INVALID_CONFIG);
  CHECK(e.key() == "num_thread");
  CHECK_THAT(e.what(), Contains("unknown option") && Contains("did you mean 'num_threads'"));

  e = call_error([] { Backend b(R"({"variant": "fast"})"); });
  CHECK(e.key() == "variant");
  CHECK_THAT(e.what(), Contains("reference, optimized"));

  e = call_error([] { Backend b(R"({"num_threads": -1})"); });
  CHECK(e.key() == "num_threads");

  e = call_error([] { Backend b("{}", pllm_device{PLLM_DEVICE_CUDA, 0}); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.what(), Contains("CPU") && Contains("attention_cuda"));
}

TEST_CASE("bytes_per_block counts K and V of every layer, unsupported dtypes are refused", "[attention_cpu][cache_ops]") {
  Backend backend("{}");
  pllm_kv_cache_spec spec{};
  spec.struct_size = sizeof spec;
  spec.num_layers = 22;
  spec.num_kv_heads = 4;
  spec.head_dim = 64;
  spec.block_size = 16;
  spec.dtype = PLLM_DTYPE_F32;
  CHECK(backend.bytes_per_block(spec) == 2ull * 22 * 4 * 16 * 64 * 4);
  spec.dtype = PLLM_DTYPE_BF16;
  CHECK(backend.bytes_per_block(spec) == 2ull * 22 * 4 * 16 * 64 * 2);
  spec.dtype = PLLM_DTYPE_I8;
  const auto e = call_error([&] { backend.bytes_per_block(spec); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.what(), Contains("i8"));
  spec.dtype = PLLM_DTYPE_F16;
  spec.head_dim = 0;
  CHECK_THROWS_WITH(backend.bytes_per_block(spec), Contains("head_dim must be positive"));
}

TEST_CASE("run checks its call order and tensor shapes", "[attention_cpu][attention]") {
  Config config;
  Scenario scenario(config, {5}, 5u);
  Backend backend("{}");
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  CHECK_THROWS_WITH(backend.run(0, args), Contains("before plan"));
  const HostBatch sb = scenario.make_batch({{0, 0, 5}});
  backend.plan(sb.view());
  CHECK_THROWS_WITH(backend.run(1, args), Contains("layer 1 is out of range"));
  CHECK_THROWS_WITH(backend.run(0, args), Contains("query"));
}
