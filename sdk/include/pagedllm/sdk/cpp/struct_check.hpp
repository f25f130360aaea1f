#pragma once
// Reading a struct another party filled (the host, or another plugin), which
// may be of an older or newer minor than this plugin. The rule (sdk/README.md,
// "Versioning rules"): a field is there when PLLM_HAS_FIELD says so; a field
// appended after 2.0 that is not there reads as absent; only a struct without
// the fields SDK 2.0 defined is refused. pllm::require(ptr, "what") applies it:
//
//   const pllm_tensor& q = pllm::require(args.query, "attention_cpu: layer args: query");

#include <string>
#include <string_view>

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/error.hpp"

namespace pllm {

// Whether `s` has every field its struct had in SDK 2.0: the last 2.0 field of
// each struct, named once here. These never change within the major.
inline bool has_2_0_fields(const pllm_tensor& s) { return PLLM_HAS_FIELD(pllm_tensor, &s, strides); }
inline bool has_2_0_fields(const pllm_attention_layer_args& s) {
  return PLLM_HAS_FIELD(pllm_attention_layer_args, &s, stream);
}
inline bool has_2_0_fields(const pllm_attention_create_args& s) {
  return PLLM_HAS_FIELD(pllm_attention_create_args, &s, device);
}
inline bool has_2_0_fields(const pllm_model_create_args& s) {
  return PLLM_HAS_FIELD(pllm_model_create_args, &s, dtype);
}
inline bool has_2_0_fields(const pllm_sampler_create_args& s) {
  return PLLM_HAS_FIELD(pllm_sampler_create_args, &s, device);
}
inline bool has_2_0_fields(const pllm_speculator_create_args& s) {
  return PLLM_HAS_FIELD(pllm_speculator_create_args, &s, num_speculative_tokens);
}
// The constraint kind came with 2.1: its structs' first fields are 2.1's.
inline bool has_2_0_fields(const pllm_constraint_create_args& s) {
  return PLLM_HAS_FIELD(pllm_constraint_create_args, &s, num_special_tokens);
}
inline bool has_2_0_fields(const pllm_attention_ref& s) { return PLLM_HAS_FIELD(pllm_attention_ref, &s, backend); }
inline bool has_2_0_fields(const pllm_kv_cache_spec& s) { return PLLM_HAS_FIELD(pllm_kv_cache_spec, &s, dtype); }
inline bool has_2_0_fields(const pllm_batch& s) { return PLLM_HAS_FIELD(pllm_batch, &s, hidden_indices); }
inline bool has_2_0_fields(const pllm_device_memory& s) {
  return PLLM_HAS_FIELD(pllm_device_memory, &s, total_bytes);
}
inline bool has_2_0_fields(const pllm_host_api& s) { return PLLM_HAS_FIELD(pllm_host_api, &s, progress); }
inline bool has_2_0_fields(const pllm_speculator_target& s) {
  return PLLM_HAS_FIELD(pllm_speculator_target, &s, info);
}
inline bool has_2_0_fields(const pllm_speculator_buffer& s) {
  return PLLM_HAS_FIELD(pllm_speculator_buffer, &s, device);
}
// Structs that appeared after 2.0 must have the fields of the minor that
// introduced them (the collectives kind: SDK 2.1).
inline bool has_2_0_fields(const pllm_collectives_create_args& s) {
  return PLLM_HAS_FIELD(pllm_collectives_create_args, &s, device);
}
inline bool has_2_0_fields(const pllm_collectives_ref& s) { return PLLM_HAS_FIELD(pllm_collectives_ref, &s, comm); }
inline bool has_2_0_fields(const pllm_communicator_info& s) {
  return PLLM_HAS_FIELD(pllm_communicator_info, &s, world_size);
}

// `s`, after checking that it is there and has its 2.0 fields; otherwise a
// PLLM_ERROR_INVALID_ARGUMENT naming `what` and the struct_size it declared.
template <class T>
const T& require(const T* s, std::string_view what) {
  if (!s) throw Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(what) + " is null");
  if (!has_2_0_fields(*s)) {
    throw Error(PLLM_ERROR_INVALID_ARGUMENT,
                std::string(what) + ": struct_size " + std::to_string(s->struct_size) +
                    " is too small for the fields SDK 2.0 defines (" + std::to_string(sizeof(T)) +
                    " bytes in this plugin's SDK): the struct was not set up with struct_size, or comes from "
                    "code not built with the pagedllm SDK " + std::to_string(PLLM_SDK_VERSION_MAJOR) + ".x");
  }
  return *s;
}

template <class T>
T& require(T* s, std::string_view what) {
  return const_cast<T&>(require(static_cast<const T*>(s), what));
}

}  // namespace pllm
