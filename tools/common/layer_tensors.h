#pragma once
// One attention layer's four activations and the pllm_attention_layer_args a
// backend's run() takes, which since SDK 2.0 holds them by pointer: args()
// points into the object it is called on, which must outlive every use of
// what it returns (a copy's args() points into the copy).

#include "pagedllm/sdk.h"

namespace pagedllm::tools {

struct LayerTensors {
  pllm_tensor query{};
  pllm_tensor key{};
  pllm_tensor value{};
  pllm_tensor output{};
  float scale = 1.0f;
  void* stream = nullptr;
  int32_t sliding_window = 0;

  pllm_attention_layer_args args() const {
    pllm_attention_layer_args a{};
    a.struct_size = sizeof a;
    a.query = &query;
    a.key = &key;
    a.value = &value;
    a.output = &output;
    a.scale = scale;
    a.stream = stream;
    a.sliding_window = sliding_window;
    return a;
  }
};

}  // namespace pagedllm::tools
