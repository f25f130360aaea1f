// attention_cuda where there is no GPU (CI, dev machines) or the caller is
// wrong: create() on a machine without a usable device and with a CPU device
// are clear errors, never a crash; options are validated strictly. These run
// everywhere; on a machine with a GPU the device case checks the other branch.

#include <catch2/catch.hpp>

#include <string>

#include "tests/plugins/attention_cpu/paged_scenario.h"
#include "tests/support/cuda_device.h"

using namespace attention_test;
using Catch::Matchers::Contains;

namespace {

// validate_options, as `pagedllm-host --check` calls it: needs no device.
pllm_status validate(const char* options_json, pllm_error& error) {
  error = pllm_error{};
  return attention_library("attention_cuda")->descriptor().validate_options(options_json, &error);
}

}  // namespace

TEST_CASE("attention_cuda on a CPU device is refused, naming attention_cpu", "[attention_cuda][errors]") {
  const auto e = call_error([] { Backend b("{}", pllm_device{PLLM_DEVICE_CPU, 0}, "attention_cuda"); });
  CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.what(), Contains("CUDA devices only") && Contains("device: cpu") && Contains("attention_cpu"));
}

TEST_CASE("attention_cuda without a usable device is a DEVICE error with CUDA's reason", "[attention_cuda][errors]") {
  const std::string no_device = pagedllm::testing::cuda_device_unavailable_reason();
  if (!no_device.empty()) {
    // This machine: no driver (cudaErrorInsufficientDriver) or no device.
    const auto e = call_error([] { Backend b("{}", pllm_device{PLLM_DEVICE_CUDA, 0}, "attention_cuda"); });
    CHECK(e.status() == PLLM_ERROR_DEVICE);
    CHECK_THAT(e.what(), Contains("no usable CUDA device for cuda:0") && Contains("cudaGetDeviceCount"));
    return;
  }
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  const auto e = call_error([&] { Backend b("{}", pllm_device{PLLM_DEVICE_CUDA, count}, "attention_cuda"); });
  CHECK(e.status() == PLLM_ERROR_DEVICE);
  CHECK_THAT(e.what(), Contains("cuda:" + std::to_string(count) + " does not exist"));
  Backend usable("{}", pllm_device{PLLM_DEVICE_CUDA, 0}, "attention_cuda");
}

TEST_CASE("attention_cuda options are validated strictly", "[attention_cuda][errors][options]") {
  pllm_error error{};
  CHECK(validate("{}", error) == PLLM_OK);
  CHECK(validate(R"({"partition_size": 256, "split_min_context": 0})", error) == PLLM_OK);

  CHECK(validate(R"({"partition_sise": 256})", error) == PLLM_ERROR_INVALID_CONFIG);
  CHECK(std::string(error.key) == "partition_sise");
  CHECK_THAT(error.message, Contains("unknown option") && Contains("did you mean 'partition_size'"));

  CHECK(validate(R"({"partition_size": 8})", error) == PLLM_ERROR_INVALID_CONFIG);
  CHECK(std::string(error.key) == "partition_size");
  CHECK_THAT(error.message, Contains("must be in [16, 1048576]"));

  CHECK(validate(R"({"split_min_context": -1})", error) == PLLM_ERROR_INVALID_CONFIG);
  CHECK(std::string(error.key) == "split_min_context");

  CHECK(validate(R"({"variant": "reference"})", error) == PLLM_ERROR_INVALID_CONFIG);
  CHECK(std::string(error.key) == "variant");

  // create() checks options before it looks for a device.
  const auto e = call_error([] { Backend b(R"({"partition_size": "big"})", pllm_device{PLLM_DEVICE_CUDA, 0}, "attention_cuda"); });
  CHECK(e.status() == PLLM_ERROR_INVALID_CONFIG);
  CHECK(e.key() == "partition_size");
}

TEST_CASE("attention_cuda: after a failed plan, run() is refused until a plan succeeds", "[attention_cuda][gpu][errors]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Config config;
  Scenario scenario(config, {20}, 9u);
  Backend backend("{}", pllm_device{PLLM_DEVICE_CUDA, 0}, "attention_cuda");
  backend.allocate_cache(scenario.spec(), scenario.num_device_blocks(), 0);
  const HostBatch good = scenario.make_batch({{0, 0, 20}});
  backend.plan(good.view());
  HostBatch bad = scenario.make_batch({{0, 19, 1}}, 1);
  bad.block_size += 1;  // differs from the cache's
  CHECK_THROWS_WITH(backend.plan(bad.view()), Contains("block_size"));
  // The empty args would fail run()'s tensor checks; the failed plan must be reported first.
  pllm_attention_layer_args args{};
  args.struct_size = sizeof args;
  CHECK_THROWS_WITH(backend.run(0, args), Contains("run() before plan()"));
  backend.plan(good.view());
  CHECK_THROWS_WITH(backend.run(0, args), Contains("query"));
}
