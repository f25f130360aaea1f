#include "core/host/plugin_check.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include <fmt/format.h>
#include <fmt/ostream.h>

#include "core/config/kv_sizing_method.h"
#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_kind.h"

namespace pagedllm {

namespace fs = std::filesystem;

PluginRegistry make_plugin_registry(const HostConfig& config) {
  std::vector<fs::path> paths = config.plugin_search_paths;
  for (auto& p : PluginRegistry::environment_search_paths()) paths.push_back(std::move(p));
  for (auto& p : PluginRegistry::default_search_paths()) paths.push_back(std::move(p));
  return PluginRegistry(std::move(paths));
}

namespace {

// Asks the plugin to validate its options; an error points at the option's line.
std::optional<std::string> validate_options(const HostConfig& config, const PluginSlot& slot,
                                            const PluginLibrary& library) {
  pllm_error error{};
  const std::string json = slot.options.dump();
  const pllm_status status = library.descriptor().validate_options(json.c_str(), &error);
  if (status == PLLM_OK) return std::nullopt;
  std::string path = slot.key_path + ".options";
  if (error.key[0] != '\0') path += std::string(".") + error.key;
  return fmt::format("{}: {}.options: plugin '{}' rejected its options: {}", config.sources.locate(path),
                     slot.key_path, library.name(), error.message);
}

// Which way the engine will size the KV pool, as far as the loaded plugins tell.
std::string describe_kv_sizing(const HostConfig& config, const PluginCheckReport& report) {
  const auto attention = std::find_if(report.plugins.begin(), report.plugins.end(), [](const ConfiguredPlugin& p) {
    return p.kind == PLLM_PLUGIN_KIND_ATTENTION && p.library != nullptr;
  });
  if (attention == report.plugins.end()) {
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

PluginCheckReport load_configured_plugins(const HostConfig& config, PluginRegistry& registry) {
  PluginCheckReport report;
  std::vector<std::pair<const PluginSlot*, pllm_plugin_kind>> slots{
      {&config.model.plugin, PLLM_PLUGIN_KIND_MODEL},
      {&config.attention, PLLM_PLUGIN_KIND_ATTENTION},
      {&config.sampler, PLLM_PLUGIN_KIND_SAMPLER},
  };
  if (config.speculative) slots.emplace_back(&config.speculative->plugin, PLLM_PLUGIN_KIND_SPECULATOR);

  for (const auto& [slot, kind] : slots) {
    ConfiguredPlugin configured{slot, kind, nullptr};
    const std::string where = config.sources.locate(slot->key_path + ".plugin");
    try {
      configured.library = registry.load(slot->plugin, kind, slot->key_path + ".plugin");
      if (auto error = validate_options(config, *slot, *configured.library)) report.errors.push_back(*error);
    } catch (const PluginLoadError& e) {
      report.errors.push_back(fmt::format("{}: {}.plugin: {}", where, slot->key_path, e.what()));
    }
    report.plugins.push_back(std::move(configured));
  }
  return report;
}

void print_check_summary(const HostConfig& config, const PluginCheckReport& report, std::ostream& out) {
  fmt::print(out, "{:<12}{:<18}{:<12}{:<10}{:<6}{}\n", "slot", "plugin", "kind", "version", "sdk", "file");
  for (const auto& p : report.plugins) {
    if (!p.library) {
      fmt::print(out, "{:<12}{:<18}{:<12}{:<10}{:<6}{}\n", p.slot->key_path, p.slot->plugin,
                 plugin_kind_name(p.kind), "-", "-", "(not loaded)");
      continue;
    }
    std::error_code ec;
    const fs::path file = fs::weakly_canonical(p.library->file(), ec);
    fmt::print(out, "{:<12}{:<18}{:<12}{:<10}{:<6}{}\n", p.slot->key_path, p.library->name(),
               plugin_kind_name(p.library->kind()), p.library->version(), p.library->sdk_version().str(),
               (ec ? p.library->file() : file).string());
  }
  std::error_code ec;
  const bool model_present = fs::exists(config.model.path, ec);  // a directory or a GGUF file
  fmt::print(out, "model       {}{}\n", config.model.path.string(), model_present ? "" : "  (not found)");
  fmt::print(out, "device      {}\n", config.device.str());
  fmt::print(out, "cache       block_size {}, kv_cache_bytes {}, swap_space {}, prefix caching {}\n",
             config.cache.block_size, config.cache.kv_cache_bytes, config.cache.swap_space_bytes,
             config.cache.enable_prefix_caching ? "on" : "off");
  fmt::print(out, "kv sizing   {}\n", describe_kv_sizing(config, report));
  fmt::print(out, "scheduler   max_num_seqs {}, max_num_batched_tokens {}, chunked prefill {}, preemption {}\n",
             config.scheduler.max_num_seqs, config.scheduler.max_num_batched_tokens,
             config.scheduler.enable_chunked_prefill ? "on" : "off",
             config.scheduler.preemption_mode == PreemptionMode::kSwap ? "swap" : "recompute");
  fmt::print(out, "server      {}:{}{}\n", config.server.host, config.server.port,
             config.server.api_key ? " (API key required)" : "");
}

}  // namespace pagedllm
