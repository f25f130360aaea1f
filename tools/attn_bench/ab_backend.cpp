#include "tools/attn_bench/ab_backend.h"

#include <utility>

#include <fmt/format.h>

#include "core/plugin/plugin_error.h"
#include "common/dtype_name.h"
#include "tools/attn_bench/device_side.h"

namespace pagedllm::attn_bench {

AbBackend::AbBackend(std::string side, const BackendSpec& spec, const pllm_device& device, PluginRegistry& registry)
    : side_(std::move(side)), spec_(spec), device_(device) {
  try {
    library_ = registry.load(spec_.plugin, PLLM_PLUGIN_KIND_ATTENTION, "--" + side_);
  } catch (const PluginLoadError& e) {
    throw BenchError(fmt::format("--{} {}: {}", side_, spec_.plugin, e.what()));
  }
  pllm_error error{};
  if (library_->descriptor().validate_options(spec_.options_json.c_str(), &error) != PLLM_OK) {
    const std::string key = error.key[0] != '\0' ? fmt::format(" (option '{}')", error.key) : std::string();
    throw BenchError(fmt::format("--{} {}: plugin '{}' rejected its options {}{}: {}", side_, spec_.plugin,
                                 library_->name(), spec_.options_json, key, error.message));
  }
}

std::string AbBackend::label() const {
  const std::string on = device_.type == PLLM_DEVICE_CPU ? std::string() : " on " + device_label(device_);
  return spec_.options_json == "{}" ? fmt::format("{} ({}{})", side_, spec_.plugin, on)
                                    : fmt::format("{} ({} {}{})", side_, spec_.plugin, spec_.options_json, on);
}

template <class F>
void AbBackend::call(F&& f, const char* what, const CaseSpec* c) {
  pllm_error error{};
  const pllm_status status = f(&error);
  if (status == PLLM_OK) return;
  const std::string where = c ? fmt::format(" [case {}]", c->name()) : std::string();
  if (status == PLLM_ERROR_UNSUPPORTED) {
    // A plugin may refuse a case and still run the others; refusing its device is fatal.
    const std::string message =
        fmt::format("{}: {} refused{}: the plugin does not support this case ({}): {}", label(), what, where,
                    c ? fmt::format("dtype {}, head_dim {}, block_size {}, gqa {}", plugins::dtype_name(c->dtype),
                                    c->head_dim, c->block_size, c->gqa)
                      : "device " + device_label(device_),
                    error.message);
    if (c) throw CaseUnsupported(message);
    throw BenchError(message);
  }
  if (status == PLLM_ERROR_OUT_OF_MEMORY) {
    throw BenchError(fmt::format("{}: {} ran out of memory{}: {}; lower --context, --batch or --kv-heads", label(),
                                 what, where, error.message));
  }
  throw BenchError(
      fmt::format("{}: {} failed{} ({}): {}", label(), what, where, pllm_status_name(status), error.message));
}

void AbBackend::create() {
  instance_.reset();
  pllm_attention_create_args args{};
  args.struct_size = sizeof args;
  args.options_json = spec_.options_json.c_str();
  args.device = device_;
  pllm_attention_backend* handle = nullptr;
  const auto& api = library_->api<pllm_attention_api>();
  call([&](pllm_error* e) { return api.create(&args, &handle, e); }, "create", nullptr);
  if (!handle) throw BenchError(fmt::format("{}: create returned success but no backend", label()));
  instance_ = AttentionInstance(library_, handle);
}

uint64_t AbBackend::bytes_per_block(const pllm_kv_cache_spec& spec, const CaseSpec& c) {
  uint64_t bytes = 0;
  call([&](pllm_error* e) { return instance_.api().bytes_per_block(instance_.get(), &spec, &bytes, e); },
       "bytes_per_block", &c);
  return bytes;
}

void AbBackend::allocate_cache(const pllm_kv_cache_spec& spec, int64_t device_blocks, const CaseSpec& c) {
  call([&](pllm_error* e) { return instance_.api().allocate_cache(instance_.get(), &spec, device_blocks, 0, e); },
       "allocate_cache", &c);
}

void AbBackend::plan(const pllm_batch& batch, const CaseSpec& c) {
  call([&](pllm_error* e) { return instance_.api().plan(instance_.get(), &batch, e); }, "plan", &c);
}

void AbBackend::run(const pllm_attention_layer_args& args, const CaseSpec& c) {
  call([&](pllm_error* e) { return instance_.api().run(instance_.get(), 0, &args, e); }, "run", &c);
}

}  // namespace pagedllm::attn_bench
