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
//                     static constexpr uint32_t kFeatures;               (optional, SDK 2.4: PLLM_ATTENTION_* bits)
//   ModelPlugin:      pllm_model_info info();
//                     void forward(const pllm_batch&, const pllm_attention_ref&, pllm_forward_output&);
//                     pllm_tensor get_tensor(const char* name);          (optional)
//                     static void check_model(const Options&, const pllm_model_create_args&);  (optional, SDK 2.3)
//   SamplerPlugin:    void sample(const pllm_sample_batch&, pllm_sample_output&);
//                     void probabilities(const pllm_sample_batch&, const pllm_probabilities_output&);  (optional)
//   SpeculatorPlugin: pllm_speculator_info info();
//                     void draft(const pllm_draft_args&, pllm_draft_output&);
//                     void verify(const pllm_verify_args&, pllm_verify_output&);
//                     pllm_speculator_buffer allocate_buffer(uint64_t bytes);  (optional, both or neither)
//                     void free_buffer(void* data);
//   CollectivesPlugin: pllm_communicator_info info();                   (SDK 2.1)
//                     void all_reduce(void* buffer, int64_t count, pllm_dtype, pllm_reduce_op, void* stream);
//                     void all_gather(const void* send, void* recv, int64_t count, pllm_dtype, void* stream);
//                     void broadcast(void* buffer, int64_t bytes, int32_t root, void* stream);
//                     void barrier();
//   ConstraintPlugin (SDK 2.1; the handles are the plugin's own objects, cast):
//                     pllm_constraint_grammar* compile(const pllm_constraint_spec&);   (any thread: no overlap check)
//                     void release_grammar(pllm_constraint_grammar*);                 (any thread: no overlap check)
//                     pllm_constraint_matcher* create_matcher(const pllm_constraint_grammar*);
//                     void destroy_matcher(pllm_constraint_matcher*);
//                     void fill_bitmask(std::span<pllm_constraint_matcher* const>, uint32_t* bitmask, int32_t words);
//                     bool accept_token(pllm_constraint_matcher*, int32_t token);
//                     void rollback(pllm_constraint_matcher*, int32_t num_tokens);
//                     bool is_terminated(const pllm_constraint_matcher*);
//
// A plugin that needs one-time setup gives its class `static void plugin_init()`
// (called after the host services are available) and `static void plugin_shutdown()`.
//
// The wrapper checks what crosses the boundary before the class sees it: a
// struct another party filled must have its SDK 2.0 fields (pllm::require,
// struct_check.hpp), and calls on one instance must not overlap (sdk/README.md,
// "Threads and reentrancy"). The overlap check is an atomic flag per instance:
// a call that finds another call of the same instance still running fails with
// PLLM_ERROR_INVALID_ARGUMENT naming the plugin and both calls, and the running
// call goes on undisturbed. It is on when the plugin is compiled without NDEBUG
// (or with -DPAGEDLLM_CHECK_CALL_OVERLAP=1, off with =0); the environment
// variable PAGEDLLM_CHECK_CALL_OVERLAP=1 or =0, read when the plugin is
// initialised, overrides that.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <utility>

#include "pagedllm/sdk.h"
#include "pagedllm/sdk/cpp/error.hpp"
#include "pagedllm/sdk/cpp/host.hpp"
#include "pagedllm/sdk/cpp/options.hpp"
#include "pagedllm/sdk/cpp/struct_check.hpp"

#ifndef PAGEDLLM_CHECK_CALL_OVERLAP
#ifdef NDEBUG
#define PAGEDLLM_CHECK_CALL_OVERLAP 0
#else
#define PAGEDLLM_CHECK_CALL_OVERLAP 1
#endif
#endif

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
struct CollectivesPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_COLLECTIVES; };
struct ConstraintPlugin { static constexpr pllm_plugin_kind kind = PLLM_PLUGIN_KIND_CONSTRAINT; };

namespace detail {

template <class T>
typename T::Options parse_options(const char* options_json) {
  const nlohmann::json parsed = OptionReader::parse(options_json);
  OptionReader reader(parsed);
  typename T::Options options = T::Options::parse(reader);
  reader.finish();
  return options;
}

// The plugin's name (set with its descriptor) for the wrapper's own messages,
// and whether the call-overlap check runs. Hidden: one copy per plugin library.
inline __attribute__((visibility("hidden"))) const char* plugin_name = "";
inline __attribute__((visibility("hidden"))) std::atomic<bool> check_call_overlap{PAGEDLLM_CHECK_CALL_OVERLAP != 0};

// PAGEDLLM_CHECK_CALL_OVERLAP=1 or =0 in the environment overrides the build's default.
inline void read_call_overlap_setting() {
  const char* value = std::getenv("PAGEDLLM_CHECK_CALL_OVERLAP");
  if (value && (std::strcmp(value, "0") == 0 || std::strcmp(value, "1") == 0)) {
    check_call_overlap.store(value[0] == '1', std::memory_order_relaxed);
  }
}

// What the host's handle points at: the plugin's object and the name of the
// call running on it (null when none).
template <class T>
struct Instance {
  template <class... Args>
  explicit Instance(Args&&... args) : plugin(std::forward<Args>(args)...) {}
  std::atomic<const char*> call_in_flight{nullptr};
  T plugin;
};

// Marks `call` as running on an instance for its lifetime; throws when another
// call of the same instance is running.
class CallScope {
 public:
  CallScope(std::atomic<const char*>& in_flight, const char* call) {
    if (!check_call_overlap.load(std::memory_order_relaxed)) return;
    const char* running = nullptr;
    if (!in_flight.compare_exchange_strong(running, call, std::memory_order_acquire)) {
      throw Error(PLLM_ERROR_INVALID_ARGUMENT,
                  std::string("plugin '") + plugin_name + "': " + call + "() was called on an instance while its " +
                      running + "() was still running; calls on one instance must not overlap (sdk/README.md, "
                      "\"Threads and reentrancy\")");
    }
    in_flight_ = &in_flight;
  }
  ~CallScope() {
    if (in_flight_) in_flight_->store(nullptr, std::memory_order_release);
  }
  CallScope(const CallScope&) = delete;
  CallScope& operator=(const CallScope&) = delete;

 private:
  std::atomic<const char*>* in_flight_ = nullptr;
};

template <class T, class Handle, class Args>
pllm_status create(const Args* args, Handle** out, pllm_error* error) noexcept {
  return guard(error, [&] {
    if (!out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "create: null output");
    *out = nullptr;
    const Args& checked = require(args, std::string(plugin_name) + ": create args");
    const auto options = parse_options<T>(checked.options_json);
    *out = reinterpret_cast<Handle*>(new Instance<T>(options, checked));
  });
}

template <class T, class Handle>
void destroy(Handle* self) noexcept {
  delete reinterpret_cast<Instance<T>*>(self);
}

// Runs `body` on the plugin object behind `self` as the call `name`: guarded
// (exceptions become a status) and checked against overlapping calls.
template <class T, class Handle, class Body>
pllm_status call(Handle* self, const char* name, pllm_error* error, Body&& body) noexcept {
  return guard(error, [&] {
    if (!self) throw Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(name) + ": null plugin instance");
    auto& instance = *reinterpret_cast<Instance<T>*>(self);
    const CallScope scope(instance.call_in_flight, name);
    std::forward<Body>(body)(instance.plugin);
  });
}

// Copies a C++-built info struct into the caller's, writing only the bytes the
// caller's struct_size declares and keeping that struct_size.
template <class Info>
void copy_info_out(const Info& info, Info* out) {
  if (!out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "null output struct");
  if constexpr (requires { has_2_0_fields(*out); }) require(out, std::string(plugin_name) + ": output struct");
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
          return call<T>(s, "bytes_per_block", e, [&](T& p) {
            if (!out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "bytes_per_block: null output");
            *out = p.bytes_per_block(require(spec, std::string(plugin_name) + ": kv cache spec"));
          });
        },
        [](H* s, const pllm_kv_cache_spec* spec, int64_t d, int64_t h, pllm_error* e) noexcept {
          return call<T>(s, "allocate_cache", e, [&](T& p) {
            p.allocate_cache(require(spec, std::string(plugin_name) + ": kv cache spec"), d, h);
          });
        },
        [](H* s, const pllm_batch* batch, pllm_error* e) noexcept {
          return call<T>(s, "plan", e, [&](T& p) { p.plan(require(batch, std::string(plugin_name) + ": batch")); });
        },
        [](H* s, int32_t layer, const pllm_attention_layer_args* args, pllm_error* e) noexcept {
          return call<T>(s, "run", e, [&](T& p) {
            p.run(layer, require(args, std::string(plugin_name) + ": layer args"));
          });
        },
        [](H* s, const pllm_block_copy* pairs, int64_t n, pllm_error* e) noexcept {
          return call<T>(s, "swap_out", e, [&](T& p) { p.swap_out(pairs_of(pairs, n)); });
        },
        [](H* s, const pllm_block_copy* pairs, int64_t n, pllm_error* e) noexcept {
          return call<T>(s, "swap_in", e, [&](T& p) { p.swap_in(pairs_of(pairs, n)); });
        },
        [](H* s, const pllm_block_copy* pairs, int64_t n, pllm_error* e) noexcept {
          return call<T>(s, "copy_blocks", e, [&](T& p) { p.copy_blocks(pairs_of(pairs, n)); });
        },
        memory_info_slot(),
        features(),
    };
    return &api;
  }
  static constexpr uint32_t features() {
    if constexpr (requires { T::kFeatures; }) {
      return T::kFeatures;
    } else {
      return 0;
    }
  }
  using MemoryInfo = pllm_status (*)(H*, pllm_device_memory*, pllm_error*);
  static constexpr MemoryInfo memory_info_slot() {
    if constexpr (requires(T& t) { t.memory_info(); }) {
      return [](H* s, pllm_device_memory* out, pllm_error* e) noexcept {
        return call<T>(s, "memory_info", e, [&](T& p) { copy_info_out(p.memory_info(), out); });
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
          return call<T>(s, "get_info", e, [&](T& p) { copy_info_out(p.info(), out); });
        },
        [](H* s, const pllm_batch* batch, const pllm_attention_ref* attention, pllm_forward_output* out,
           pllm_error* e) noexcept {
          return call<T>(s, "forward", e, [&](T& p) {
            if (!batch || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "forward: null batch or output");
            p.forward(*batch, require(attention, std::string(plugin_name) + ": forward: attention"), *out);
          });
        },
        get_tensor_slot(),
        check_model_slot(),
    };
    return &api;
  }
  using CheckModel = pllm_status (*)(const pllm_model_create_args*, pllm_error*);
  static constexpr CheckModel check_model_slot() {
    if constexpr (requires(const typename T::Options& o, const pllm_model_create_args& a) {
                    T::check_model(o, a);
                  }) {
      return [](const pllm_model_create_args* args, pllm_error* e) noexcept {
        return guard(e, [&] {
          const pllm_model_create_args& checked = require(args, std::string(plugin_name) + ": check_model args");
          T::check_model(parse_options<T>(checked.options_json), checked);
        });
      };
    } else {
      return nullptr;
    }
  }
  using GetTensor = pllm_status (*)(H*, const char*, pllm_tensor*, pllm_error*);
  static constexpr GetTensor get_tensor_slot() {
    if constexpr (requires(T& t, const char* name) { t.get_tensor(name); }) {
      return [](H* s, const char* name, pllm_tensor* out, pllm_error* e) noexcept {
        return call<T>(s, "get_tensor", e, [&](T& p) { copy_info_out(p.get_tensor(name), out); });
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
          return call<T>(s, "sample", e, [&](T& p) {
            if (!batch || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "sample: null batch or output");
            p.sample(*batch, *out);
          });
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
        return call<T>(s, "probabilities", e, [&](T& p) {
          if (!batch || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "probabilities: null batch or output");
          p.probabilities(*batch, *out);
        });
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
          return call<T>(s, "get_info", e, [&](T& p) { copy_info_out(p.info(), out); });
        },
        [](H* s, const pllm_draft_args* args, pllm_draft_output* out, pllm_error* e) noexcept {
          return call<T>(s, "draft", e, [&](T& p) {
            if (!args || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "draft: null args or output");
            p.draft(*args, *out);
          });
        },
        [](H* s, const pllm_verify_args* args, pllm_verify_output* out, pllm_error* e) noexcept {
          return call<T>(s, "verify", e, [&](T& p) {
            if (!args || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "verify: null args or output");
            p.verify(*args, *out);
          });
        },
        allocate_buffer_slot(),
        free_buffer_slot(),
    };
    return &api;
  }
  static constexpr bool kHasAllocate = requires(T& t, uint64_t bytes) { t.allocate_buffer(bytes); };
  static constexpr bool kHasFree = requires(T& t, void* data) { t.free_buffer(data); };
  static_assert(kHasAllocate == kHasFree, "a speculator has both allocate_buffer and free_buffer, or neither");
  using AllocateBuffer = pllm_status (*)(H*, uint64_t, pllm_speculator_buffer*, pllm_error*);
  static constexpr AllocateBuffer allocate_buffer_slot() {
    if constexpr (kHasAllocate) {
      return [](H* s, uint64_t bytes, pllm_speculator_buffer* out, pllm_error* e) noexcept {
        return call<T>(s, "allocate_buffer", e, [&](T& p) {
          if (bytes == 0) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "allocate_buffer: 0 bytes");
          // Checked before allocating, so that a bad output struct leaks nothing.
          require(out, std::string(plugin_name) + ": allocate_buffer output");
          copy_info_out(p.allocate_buffer(bytes), out);
        });
      };
    } else {
      return nullptr;
    }
  }
  using FreeBuffer = pllm_status (*)(H*, void*, pllm_error*);
  static constexpr FreeBuffer free_buffer_slot() {
    if constexpr (kHasFree) {
      return [](H* s, void* data, pllm_error* e) noexcept {
        return call<T>(s, "free_buffer", e, [&](T& p) {
          if (!data) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "free_buffer: null data");
          p.free_buffer(data);
        });
      };
    } else {
      return nullptr;
    }
  }
};

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_COLLECTIVES> {
  using H = pllm_communicator;
  static const pllm_collectives_api* table() {
    static const pllm_collectives_api api = {
        sizeof(pllm_collectives_api),
        &create<T, H, pllm_collectives_create_args>,
        &destroy<T, H>,
        [](H* s, pllm_communicator_info* out, pllm_error* e) noexcept {
          return call<T>(s, "get_info", e, [&](T& p) { copy_info_out(p.info(), out); });
        },
        [](H* s, void* buffer, int64_t count, pllm_dtype dtype, pllm_reduce_op op, void* stream,
           pllm_error* e) noexcept {
          return call<T>(s, "all_reduce", e, [&](T& p) {
            if (count < 0 || (count > 0 && !buffer)) {
              throw Error(PLLM_ERROR_INVALID_ARGUMENT, "all_reduce: null buffer or negative count");
            }
            p.all_reduce(buffer, count, dtype, op, stream);
          });
        },
        [](H* s, const void* send, void* recv, int64_t count, pllm_dtype dtype, void* stream,
           pllm_error* e) noexcept {
          return call<T>(s, "all_gather", e, [&](T& p) {
            if (count < 0 || (count > 0 && (!send || !recv))) {
              throw Error(PLLM_ERROR_INVALID_ARGUMENT, "all_gather: null buffer or negative count");
            }
            p.all_gather(send, recv, count, dtype, stream);
          });
        },
        [](H* s, void* buffer, int64_t bytes, int32_t root, void* stream, pllm_error* e) noexcept {
          return call<T>(s, "broadcast", e, [&](T& p) {
            if (bytes < 0 || (bytes > 0 && !buffer)) {
              throw Error(PLLM_ERROR_INVALID_ARGUMENT, "broadcast: null buffer or negative size");
            }
            p.broadcast(buffer, bytes, root, stream);
          });
        },
        [](H* s, pllm_error* e) noexcept { return call<T>(s, "barrier", e, [&](T& p) { p.barrier(); }); },
    };
    return &api;
  }
};

template <class T>
struct KindApi<T, PLLM_PLUGIN_KIND_CONSTRAINT> {
  using H = pllm_constraint_engine;
  // compile() and release_grammar() run on any thread, beside the engine thread's calls
  // (pllm_constraint_api): guarded, but outside the per-instance overlap check.
  template <class Body>
  static pllm_status unserialised(H* s, const char* name, pllm_error* e, Body&& body) noexcept {
    return guard(e, [&] {
      if (!s) throw Error(PLLM_ERROR_INVALID_ARGUMENT, std::string(name) + ": null plugin instance");
      std::forward<Body>(body)(reinterpret_cast<Instance<T>*>(s)->plugin);
    });
  }
  static const pllm_constraint_api* table() {
    static const pllm_constraint_api api = {
        sizeof(pllm_constraint_api),
        &create<T, H, pllm_constraint_create_args>,
        &destroy<T, H>,
        [](H* s, const pllm_constraint_spec* spec, pllm_constraint_grammar** out, pllm_error* e) noexcept {
          return unserialised(s, "compile", e, [&](T& p) {
            if (!spec || !out || spec->struct_size < sizeof(pllm_constraint_spec)) {
              throw Error(PLLM_ERROR_INVALID_ARGUMENT, "compile: null or short spec, or null output");
            }
            *out = nullptr;
            *out = p.compile(*spec);
          });
        },
        [](H* s, pllm_constraint_grammar* grammar) noexcept {
          pllm_error ignored{};
          (void)unserialised(s, "release_grammar", &ignored, [&](T& p) { p.release_grammar(grammar); });
        },
        [](H* s, const pllm_constraint_grammar* grammar, pllm_constraint_matcher** out, pllm_error* e) noexcept {
          return call<T>(s, "create_matcher", e, [&](T& p) {
            if (!grammar || !out) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "create_matcher: null grammar or output");
            *out = nullptr;
            *out = p.create_matcher(grammar);
          });
        },
        [](H* s, pllm_constraint_matcher* matcher) noexcept {
          pllm_error ignored{};
          (void)call<T>(s, "destroy_matcher", &ignored, [&](T& p) { p.destroy_matcher(matcher); });
        },
        [](H* s, pllm_constraint_matcher* const* matchers, int32_t n, uint32_t* bitmask, int32_t words,
           pllm_error* e) noexcept {
          return call<T>(s, "fill_bitmask", e, [&](T& p) {
            if (n < 0 || (n > 0 && (!matchers || !bitmask)) || words <= 0) {
              throw Error(PLLM_ERROR_INVALID_ARGUMENT, "fill_bitmask: bad matchers, bitmask or word count");
            }
            p.fill_bitmask(std::span<pllm_constraint_matcher* const>(matchers, static_cast<std::size_t>(n)), bitmask,
                           words);
          });
        },
        [](H* s, pllm_constraint_matcher* matcher, int32_t token, int32_t* accepted, pllm_error* e) noexcept {
          return call<T>(s, "accept_token", e, [&](T& p) {
            if (!matcher || !accepted) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "accept_token: null matcher or output");
            *accepted = p.accept_token(matcher, token) ? 1 : 0;
          });
        },
        [](H* s, pllm_constraint_matcher* matcher, int32_t n, pllm_error* e) noexcept {
          return call<T>(s, "rollback", e, [&](T& p) {
            if (!matcher || n < 0) throw Error(PLLM_ERROR_INVALID_ARGUMENT, "rollback: null matcher or negative count");
            p.rollback(matcher, n);
          });
        },
        [](H* s, const pllm_constraint_matcher* matcher) noexcept -> int32_t {
          int32_t terminated = 0;
          pllm_error ignored{};
          (void)call<T>(s, "is_terminated", &ignored, [&](T& p) {
            if (matcher) terminated = p.is_terminated(matcher) ? 1 : 0;
          });
          return terminated;
        },
    };
    return &api;
  }
};

template <class T>
pllm_status plugin_init(const pllm_host_api* host_services, pllm_error* error) noexcept {
  return guard(error, [&] {
    host_api = &require(host_services, std::string(plugin_name) + ": init: host services");
    read_call_overlap_setting();
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
  plugin_name = name;
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
