#include "core/host/plugin_check.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/config/kv_sizing_method.h"
#include "core/plugin/plugin_kind.h"

namespace pagedllm {

namespace fs = std::filesystem;

namespace {

// Which way the engine will size the KV pool, as far as the loaded plugins tell.
std::string describe_kv_sizing(const HostConfig& config, const ConfiguredPlugins& configured) {
  const auto attention =
      std::find_if(configured.plugins.begin(), configured.plugins.end(), [](const ConfiguredPlugin& p) {
        return p.kind == PLLM_PLUGIN_KIND_ATTENTION && p.library != nullptr;
      });
  if (attention == configured.plugins.end()) {
    return fmt::format("not known: the attention plugin '{}' is not loaded (a backend that reports device memory "
                       "sizes from gpu_memory_utilization {}, any other from kv_cache_bytes {})",
                       config.attention.plugin, config.cache.gpu_memory_utilization, config.cache.kv_cache_bytes);
  }
  const PluginLibrary& library = *attention->library;
  const bool reports_memory = library.api<pllm_attention_api>().memory_info != nullptr;
  switch (kv_sizing_method(config, reports_memory)) {
    case KvSizingMethod::kConfiguredBytes:
      return fmt::format("kv_cache_bytes {} ('{}' does not report device memory)", config.cache.kv_cache_bytes,
                         library.name());
    case KvSizingMethod::kExplicitBytesOnDevice:
      return fmt::format("kv_cache_bytes {}, written in the config, checked against the free memory '{}' reports",
                         config.cache.kv_cache_bytes, library.name());
    case KvSizingMethod::kProfiled:
      return fmt::format("gpu_memory_utilization {} of the memory '{}' reports, after a profiling step of "
                         "max_num_batched_tokens {} tokens",
                         config.cache.gpu_memory_utilization, library.name(),
                         config.scheduler.max_num_batched_tokens);
  }
  return {};
}

}  // namespace

void print_check_summary(const HostConfig& config, const ConfiguredPlugins& configured, std::ostream& out) {
  fmt::print(out, "{:<12}{:<21}{:<12}{:<10}{:<6}{}\n", "slot", "plugin", "kind", "version", "sdk", "file");
  for (const auto& p : configured.plugins) {
    if (!p.library) {
      fmt::print(out, "{:<12}{:<21}{:<12}{:<10}{:<6}{}\n", p.slot->key_path, p.slot->plugin,
                 plugin_kind_name(p.kind), "-", "-", "(not loaded)");
      continue;
    }
    std::error_code ec;
    const fs::path file = fs::weakly_canonical(p.library->file(), ec);
    fmt::print(out, "{:<12}{:<21}{:<12}{:<10}{:<6}{}\n", p.slot->key_path, p.library->name(),
               plugin_kind_name(p.library->kind()), p.library->version(), p.library->sdk_version().str(),
               (ec ? p.library->file() : file).string());
  }
  std::error_code ec;
  const bool model_present = fs::exists(config.model.path, ec);  // a directory or a GGUF file
  fmt::print(out, "model       {}{}\n", config.model.path.string(), model_present ? "" : "  (not found)");
  fmt::print(out, "device      {}\n", config.device.str());
  fmt::print(out, "cache       block_size {}, dtype {}, kv_cache_bytes {}, swap_space {}, prefix caching {}\n",
             config.cache.block_size, config.cache.dtype, config.cache.kv_cache_bytes, config.cache.swap_space_bytes,
             config.cache.enable_prefix_caching ? "on" : "off");
  fmt::print(out, "kv sizing   {}\n", describe_kv_sizing(config, configured));
  fmt::print(out, "scheduler   max_num_seqs {}, max_num_batched_tokens {}, chunked prefill {}, preemption {}\n",
             config.scheduler.max_num_seqs, config.scheduler.max_num_batched_tokens,
             config.scheduler.enable_chunked_prefill ? "on" : "off",
             config.scheduler.preemption_mode == PreemptionMode::kSwap ? "swap" : "recompute");
  fmt::print(out, "server      {}:{}{}{}\n", config.server.host, config.server.port,
             config.server.cors.allowed_origins.empty()
                 ? ""
                 : fmt::format(", CORS for {}", fmt::join(config.server.cors.allowed_origins, ", ")),
             config.server.api_keys.empty() ? ""
             : config.server.api_keys.size() == 1
                 ? " (API key required)"
                 : fmt::format(" (one of {} API keys required)", config.server.api_keys.size()));
}

}  // namespace pagedllm
