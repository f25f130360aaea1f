#pragma once
// Writing a plugin in C++: derive the class from the tag of its kind, give it
// a nested `Options` type with `static Options parse(pllm::OptionReader&)`, a
// constructor `(const Options&, const pllm_<kind>_create_args&)` and the kind's
// methods (below), then export it with one macro:
//
//   PAGEDLLM_PLUGIN(MyAttention, "my_attention", "0.1.0", "What it is")
//
// The macro defines the entry symbol and a descriptor whose function table
// calls the class; every call is wrapped in pllm::guard, so exceptions become
// a status and a message and never cross into the host.
//
// Methods per kind (optional ones may be left out, and their slot is NULL):
//   AttentionPlugin:  uint64_t bytes_per_block(const pllm_kv_cache_spec&);
//                     void allocate_cache(const pllm_kv_cache_spec&, int64_t device_blocks, int64_t host_blocks);
//                     void plan(const pllm_batch&);
//                     void run(int32_t layer, const pllm_attention_layer_args&);
//                     void swap_out(std::span<const pllm_block_copy>);
//                     void swap_in(std::span<const pllm_block_copy>);
//                     void copy_blocks(std::span<const pllm_block_copy>);
//                     pllm_device_memory memory_info();                  (optional, SDK 1.1)
//   ModelPlugin:      pllm_model_info info();
//                     void forward(const pllm_batch&, pllm_attention_ref, pllm_forward_output&);
//                     pllm_tensor get_tensor(const char* name);          (optional)
//   SamplerPlugin:    void sample(const pllm_sample_batch&, pllm_sample_output&);
//                     void probabilities(const pllm_sample_batch&, const pllm_probabilities_output&);  (optional)
//   SpeculatorPlugin: pllm_speculator_info info();
//                     void draft(const pllm_draft_args&, pllm_draft_output&);
//                     void verify(const pllm_verify_args&, pllm_verify_output&);
//
// A plugin that needs one-time setup gives its class `static void plugin_init()`
// (called after the host services are available) and `static void plugin_shutdown()`.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/host.hpp"
#include "pagedllm/sdk/cpp/options.hpp"

namespace pllm {

// Kind tags: a plugin class derives from exactly one.
struct AttentionPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_ATTENTION; };
struct ModelPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_MODEL; };
struct SamplerPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_SAMPLER; };

// Row r of a sample batch, honouring the caller's row_stride (a caller built
// against another minor may pass larger rows).
inline const pllm_sample_row& sample_row(const pllm_sample_batch& batch, int64_t r) {
  return *reinterpret_cast<const pllm_sample_row*>(reinterpret_cast<const char*>(batch.rows) +
                                                   r * int64_t(batch.row_stride));
}
struct SpeculatorPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_SPECULATOR; };

namespace detail {

template <class T>
typename T::Options parse_options(const char* options_json) {
  const nlohmann::json parsed = OptionReader::parse(options_json);
  OptionReader reader(parsed);
  typename T::Options options = T::Options::parse(reader);
  reader.finish();
  return options;
}

template <class T, class Handle, class Args>
pllm_status create(const Args* args, Handle** out, pllm_error* error) noexcept {
  return guard(error, [&] {
    if (!args || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "create: null arguments");
    *out = nullptr;
    const auto options = parse_options<T>(args->options_json);
    *out = reinterpret_cast<Handle*>(new T(options, *args));
  });
}

template <class T, class Handle>
void destroy(Handle* self) noexcept {
  delete reinterpret_cast<T*>(self);
}

template <class T, class Handle>
T& self_of(Handle* self) {
  if (!self) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "null plugin instance");
  return *reinterpret_cast<T*>(self);
}

// Copies a C++-built info struct into the caller's, writing only the bytes the
// caller's struct_size declares and keeping that struct_size.
template <class Info>
void copy_info_out(const Info& info, Info* out) {
  if (!out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "null output struct");
  const std::uint32_t caller_size = out->struct_size;
  std::memcpy(static_cast<void*>(out), &info, std::min<std::size_t>(caller_size, sizeof(Info)));
  out->struct_size = caller_size;
}

inline std::span<const pllm_block_copy> pairs_of(const pllm_block_copy* pairs, int64_t count) {
  if (count < 0 || (count > 0 && !pairs)) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "bad block copy list");
  return {pairs, static_cast<std::size_t>(count)};
}

template <class T, pllm_plugin_kind Kind = T::kind>
struct KindApi;

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_ATTENTION> {
  using H = pllm_attention_backend;
  static const pllm_attention_api* table() {
    static const pllm_attention_api api = {
        sizeof(pllm_attention_api),
        &create<T, H, pllm_attention_create_args>,
        &destroy<T, H>,
        [](H* s, const pllm_kv_cache_spec* spec, uint64_t* out, pllm_error* e) noexcept {
          return guard(e, [&] { *out = self_of<T>(s).bytes_per_block(*spec); });
        },
        [](H* s, const pllm_kv_cache_spec* spec, int64_t d, int64_t h, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).allocate_cache(*spec, d, h); });
        },
        [](H* s, const pllm_batch* batch, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).plan(*batch); });
        },
        [](H* s, int32_t layer, const pllm_attention_layer_args* args, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).run(layer, *args); });
        },
        [](H* s, const pllm_block_copy* p, int64_t n, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).swap_out(pairs_of(p, n)); });
        },
        [](H* s, const pllm_block_copy* p, int64_t n, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).swap_in(pairs_of(p, n)); });
        },
        [](H* s, const pllm_block_copy* p, int64_t n, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).copy_blocks(pairs_of(p, n)); });
        },
        memory_info_slot(),
    };
    return &api;
  }
  using MemoryInfo = pllm_status (*)(H*, pllm_device_memory*, pllm_error*);
  static constexpr MemoryInfo memory_info_slot() {
    if constexpr (requires(T& t) { t.memory_info(); }) {
      return [](H* s, pllm_device_memory* out, pllm_error* e) noexcept {
        return guard(e, [&] { copy_info_out(self_of<T>(s).memory_info(), out); });
      };
    } else {
      return nullptr;
    }
  }
};

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_MODEL> {
  using H = pllm_model;
  static const pllm_model_api* table() {
    static const pllm_model_api api = {
        sizeof(pllm_model_api),
        &create<T, H, pllm_model_create_args>,
        &destroy<T, H>,
        [](H* s, pllm_model_info* out, pllm_error* e) noexcept {
          return guard(e, [&] { copy_info_out(self_of<T>(s).info(), out); });
        },
        [](H* s, const pllm_batch* batch, pllm_attention_ref attention, pllm_forward_output* out,
           pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).forward(*batch, attention, *out); });
        },
        get_tensor_slot(),
    };
    return &api;
  }
  using GetTensor = pllm_status (*)(H*, const char*, pllm_tensor*, pllm_error*);
  static constexpr GetTensor get_tensor_slot() {
    if constexpr (requires(T& t, const char* name) { t.get_tensor(name); }) {
      return [](H* s, const char* name, pllm_tensor* out, pllm_error* e) noexcept {
        return guard(e, [&] { *out = self_of<T>(s).get_tensor(name); });
      };
    } else {
      return nullptr;
    }
  }
};

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_SAMPLER> {
  using H = pllm_sampler;
  static const pllm_sampler_api* table() {
    static const pllm_sampler_api api = {
        sizeof(pllm_sampler_api),
        &create<T, H, pllm_sampler_create_args>,
        &destroy<T, H>,
        [](H* s, const pllm_sample_batch* batch, pllm_sample_output* out, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).sample(*batch, *out); });
        },
        probabilities_slot(),
    };
    return &api;
  }
  using Probabilities = pllm_status (*)(H*, const pllm_sample_batch*, const pllm_probabilities_output*, pllm_error*);
  static constexpr Probabilities probabilities_slot() {
    if constexpr (requires(T& t, const pllm_sample_batch& b, const pllm_probabilities_output& p) {
                    t.probabilities(b, p);
                  }) {
      return [](H* s, const pllm_sample_batch* batch, const pllm_probabilities_output* out, pllm_error* e) noexcept {
        return guard(e, [&] { self_of<T>(s).probabilities(*batch, *out); });
      };
    } else {
      return nullptr;
    }
  }
};

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_SPECULATOR> {
  using H = pllm_speculator;
  static const pllm_speculator_api* table() {
    static const pllm_speculator_api api = {
        sizeof(pllm_speculator_api),
        &create<T, H, pllm_speculator_create_args>,
        &destroy<T, H>,
        [](H* s, pllm_speculator_info* out, pllm_error* e) noexcept {
          return guard(e, [&] { copy_info_out(self_of<T>(s).info(), out); });
        },
        [](H* s, const pllm_draft_args* args, pllm_draft_output* out, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).draft(*args, *out); });
        },
        [](H* s, const pllm_verify_args* args, pllm_verify_output* out, pllm_error* e) noexcept {
          return guard(e, [&] { self_of<T>(s).verify(*args, *out); });
        },
    };
    return &api;
  }
};

template <class T>
pllm_status plugin_init(const pllm_host_api* host_services, pllm_error* error) noexcept {
  return guard(error, [&] {
    if (!host_services) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "init: null host services");
    host_api = host_services;
    if constexpr (requires { T::plugin_init(); }) T::plugin_init();
  });
}

template <class T>
void plugin_shutdown() noexcept {
  if constexpr (requires { T::plugin_shutdown(); }) {
    try {
      T::plugin_shutdown();
    } catch (...) {
      // Nothing can be reported during unload; shutdown must not throw.
    }
  }
  host_api = nullptr;
}

template <class T>
pllm_status validate_options(const char* options_json, pllm_error* error) noexcept {
  return guard(error, [&] { (void)parse_options<T>(options_json); });
}

template <class T>
const pllm_plugin_descriptor* descriptor(const char* name, const char* version, const char* description) {
  static const pllm_plugin_descriptor d = {
      sizeof(pllm_plugin_descriptor),
      PLLM_SDK_VERSION_MAJOR,
      PLLM_SDK_VERSION_MINOR,
      T::kind,
      name,
      version,
      description,
      &plugin_init<T>,
      &plugin_shutdown<T>,
      &validate_options<T>,
      KindApi<T>::table(),
  };
  return &d;
}

}  // namespace detail
}  // namespace pllm

// Exports `Class` as this library's plugin. Use once per library.
#define PAGEDLLM_PLUGIN(Class, name, version, description)                                   \
  extern "C" __attribute__((visibility("default"))) const pllm_plugin_descriptor*            \
  pagedllm_plugin_entry(void) {                                                              \
    return ::pllm::detail::descriptor<Class>(name, version, description);                    \
  }
