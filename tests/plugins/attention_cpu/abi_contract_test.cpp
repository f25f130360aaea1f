// attention_cpu against the SDK 2.0 contract (abi_contract.h): growable
// structs from other parties, unknown dtypes, and what a slot -1 row reads.

#include "tests/plugins/attention_cpu/abi_contract.h"

using namespace attention_test;

TEST_CASE("attention_cpu accepts 2.0-sized and newer structs and refuses too-small ones", "[attention_cpu][abi]") {
  check_create_args_sizes("attention_cpu", {PLLM_DEVICE_CPU, 0});
  Backend backend("{}");
  check_spec_and_batch_sizes(backend, "attention_cpu");
  check_layer_args_refusals(backend, "attention_cpu");

  // Layer args from a newer minor (a model plugin built against 2.1) run as usual.
  const HostBatch hb = one_token_batch(contract_spec(PLLM_DTYPE_F32));
  backend.plan(hb.view());
  TypedBuffer q(PLLM_DTYPE_F32, std::vector<float>(32, 0.5f)), out(PLLM_DTYPE_F32, std::vector<float>(32, 0.0f));
  LayerTensors t;
  t.query = t.key = t.value = q.tensor3(1, 1, 32);
  t.output = out.tensor3(1, 1, 32);
  NextMinor<pllm_attention_layer_args> newer{t.args()};
  NextMinor<pllm_tensor> newer_query{t.query};
  newer.current.query = newer_query.get();
  backend.run(0, *newer.get());
  CHECK(out.to_f32()[0] == 0.5f);  // one key: the output is its value
}

TEST_CASE("attention_cpu refuses an unknown dtype as unsupported", "[attention_cpu][abi]") {
  Backend backend("{}");
  check_unknown_dtypes(backend, "attention_cpu");
}

TEST_CASE("attention_cpu: a slot -1 row attends to itself and the step's new tokens as cached", "[attention_cpu][abi]") {
  for (const char* variant : {R"({"variant":"reference"})", R"({"variant":"optimized"})"}) {
    INFO(variant);
    Backend backend(variant);
    check_slot_minus_one_rows(backend);
  }
}
