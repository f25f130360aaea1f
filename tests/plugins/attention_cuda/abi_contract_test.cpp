// attention_cuda against the SDK 2.0 contract (tests/plugins/attention_cpu/abi_contract.h),
// on cuda:0 (the emulator in CI): growable structs from other parties, unknown
// dtypes, and what a slot -1 row reads — the same as attention_cpu.

#include "tests/plugins/attention_cpu/abi_contract.h"
#include "tests/plugins/attention_cuda/cuda_backend.h"
#include "tests/support/cuda_device.h"

using namespace attention_test;

TEST_CASE("attention_cuda accepts 2.0-sized and newer structs and refuses too-small ones", "[attention_cuda][abi]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  check_create_args_sizes("attention_cuda", {PLLM_DEVICE_CUDA, 0});
  CudaBackend backend("{}");
  check_spec_and_batch_sizes(backend.raw(), "attention_cuda");
  check_layer_args_refusals(backend.raw(), "attention_cuda");
}

TEST_CASE("attention_cuda refuses an unknown dtype as unsupported", "[attention_cuda][abi]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  CudaBackend backend("{}");
  check_unknown_dtypes(backend.raw(), "attention_cuda");
}

TEST_CASE("attention_cuda: a slot -1 row attends to itself and the step's new tokens as cached",
          "[attention_cuda][abi]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  CudaBackend backend("{}");
  check_slot_minus_one_rows(backend);
}
