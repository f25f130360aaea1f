#include "core/config/config.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <regex>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/config/config_overrides.h"
#include "core/config/yaml_reader.h"

namespace pagedllm {

namespace fs = std::filesystem;

std::string DeviceConfig::str() const {
  switch (type) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return fmt::format("cuda:{}", index);
  }
  return "invalid";
}

namespace {

constexpr std::int64_t kMaxInt = std::numeric_limits<int>::max();

// Relative paths from the file are anchored at the file's directory, those
// from --set at the working directory: each is relative to where it was written.
fs::path resolve_path(const std::string& value, const YamlMapReader& reader, std::string_view key) {
  fs::path p(value);
  if (p.is_absolute() || reader.sources().is_override(reader.key_path(key))) return p;
  return (reader.sources().file().parent_path() / p).lexically_normal();
}

PluginSlot read_plugin_slot(YamlMapReader& section, const std::string& key_path) {
  PluginSlot slot;
  slot.key_path = key_path;
  slot.plugin = section.require_string("plugin");
  if (slot.plugin.find('/') != std::string::npos) slot.plugin = resolve_path(slot.plugin, section, "plugin").string();
  slot.options = section.get_json_object("options");
  return slot;
}

std::optional<DeviceConfig> parse_device(const std::string& text) {
  DeviceConfig device;
  if (text == "cpu") return device;
  if (text == "cuda") {
    device.type = DeviceType::kCuda;
    return device;
  }
  if (text.starts_with("cuda:")) {
    const std::string ordinal = text.substr(5);
    if (!ordinal.empty() && ordinal.size() < 4 && ordinal.find_first_not_of("0123456789") == std::string::npos) {
      device.type = DeviceType::kCuda;
      device.index = std::stoi(ordinal);
      return device;
    }
  }
  return std::nullopt;
}

DeviceConfig read_device(YamlMapReader& root) {
  const std::string text = root.get_string("device", "cpu");
  if (const std::optional<DeviceConfig> device = parse_device(text)) return *device;
  root.fail("device", fmt::format("must be cpu, cuda or cuda:N, got \"{}\"", text));
}

// parallel.devices: one CUDA device per rank, several ranks on one device allowed.
std::vector<DeviceConfig> read_rank_devices(YamlMapReader& parallel, const DeviceConfig& device, int ranks) {
  std::vector<DeviceConfig> devices;
  if (!parallel.is_set("devices")) return devices;
  const std::vector<std::string> texts = parallel.get_string_list("devices");
  if (device.type != DeviceType::kCuda) {
    parallel.fail("devices", "a device per rank is for CUDA ranks; device is cpu (every CPU rank computes on its "
                             "own process's cores)");
  }
  if (std::ssize(texts) != ranks) {
    parallel.fail("devices", fmt::format("names {} devices for tensor_parallel_size {}: give one per rank",
                                         texts.size(), ranks));
  }
  for (const std::string& text : texts) {
    const std::optional<DeviceConfig> rank_device = parse_device(text);
    if (!rank_device || rank_device->type != DeviceType::kCuda) {
      parallel.fail("devices", fmt::format("each must be cuda or cuda:N, got \"{}\"", text));
    }
    devices.push_back(*rank_device);
  }
  return devices;
}

CacheConfig read_cache(YamlMapReader section) {
  CacheConfig c;
  c.block_size = static_cast<int>(section.get_int("block_size", c.block_size, 1, 1024));
  if ((c.block_size & (c.block_size - 1)) != 0) {
    section.fail("block_size", fmt::format("must be a power of two, got {}", c.block_size));
  }
  c.gpu_memory_utilization = section.get_double("gpu_memory_utilization", c.gpu_memory_utilization, 0.01, 1.0);
  c.kv_cache_bytes = section.get_bytes("kv_cache_bytes", c.kv_cache_bytes);
  c.swap_space_bytes = section.get_bytes("swap_space", c.swap_space_bytes);
  c.enable_prefix_caching = section.get_bool("enable_prefix_caching", c.enable_prefix_caching);
  c.watermark = section.get_double("watermark", c.watermark, 0.0, 0.5);
  c.dtype = section.get_choice("dtype", c.dtype, {"auto", "f32", "f16", "bf16"});
  section.finish();
  return c;
}

SchedulerConfig read_scheduler(YamlMapReader section) {
  SchedulerConfig s;
  s.max_num_seqs = static_cast<int>(section.get_int("max_num_seqs", s.max_num_seqs, 1, 65536));
  s.max_num_batched_tokens =
      static_cast<int>(section.get_int("max_num_batched_tokens", s.max_num_batched_tokens, 1, kMaxInt));
  s.max_model_len = static_cast<int>(section.get_int("max_model_len", s.max_model_len, 0, kMaxInt));
  s.enable_chunked_prefill = section.get_bool("enable_chunked_prefill", s.enable_chunked_prefill);
  s.max_num_partial_prefills =
      static_cast<int>(section.get_int("max_num_partial_prefills", s.max_num_partial_prefills, 1, 1024));
  s.long_prefill_token_threshold =
      static_cast<int>(section.get_int("long_prefill_token_threshold", s.long_prefill_token_threshold, 0, kMaxInt));
  s.preemption_mode = section.get_choice("preemption_mode", "recompute", {"recompute", "swap"}) == "swap"
                          ? PreemptionMode::kSwap
                          : PreemptionMode::kRecompute;
  s.policy = section.get_choice("policy", "fcfs", {"fcfs", "priority"}) == "priority" ? SchedulingPolicy::kPriority
                                                                                      : SchedulingPolicy::kFcfs;
  if (!s.enable_chunked_prefill && s.max_model_len > s.max_num_batched_tokens) {
    section.fail("max_num_batched_tokens",
                 fmt::format("is {}, smaller than max_model_len {}: without chunked prefill a whole prompt must "
                             "fit in one step. Raise it or enable chunked prefill",
                             s.max_num_batched_tokens, s.max_model_len));
  }
  section.finish();
  return s;
}

// server.api_key: one key or a list of them (several clients, or a key being rotated), none empty.
std::vector<std::string> read_api_keys(YamlMapReader& section) {
  std::vector<std::string> keys;
  if (section.is_list("api_key")) {
    keys = section.get_string_list("api_key");
    if (keys.empty()) section.fail("api_key", "is an empty list (leave it out, or null, for no key)");
  } else if (auto key = section.get_optional_string("api_key")) {
    keys.push_back(std::move(*key));
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) section.fail("api_key", "must not be empty (leave it out, or null, for no key)");
    if (std::find(keys.begin(), keys.begin() + i, keys[i]) != keys.begin() + i) {
      section.fail("api_key", fmt::format("lists the same key twice (entries {} and {})",
                                          std::find(keys.begin(), keys.end(), keys[i]) - keys.begin(), i));
    }
  }
  return keys;
}

// True for "*" and for scheme://host[:port] with scheme http or https, no path, query or trailing slash:
// the form a browser sends in its Origin header.
bool is_origin(const std::string& origin) {
  if (origin == "*") return true;
  static const std::regex form(R"(^https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$)");
  return std::regex_match(origin, form);
}

CorsConfig read_cors(YamlMapReader section) {
  CorsConfig c;
  c.allowed_origins = section.get_string_list("allowed_origins");
  for (std::size_t i = 0; i < c.allowed_origins.size(); ++i) {
    if (!is_origin(c.allowed_origins[i])) {
      section.fail("allowed_origins", fmt::format("entry {} '{}' is not an origin: scheme://host[:port] with scheme "
                                                  "http or https and no path (as a browser sends it), or \"*\"",
                                                  i, c.allowed_origins[i]));
    }
  }
  c.max_age_s = static_cast<int>(section.get_int("max_age_s", c.max_age_s, 0, 86400));
  section.finish();
  return c;
}

ServerConfig read_server(YamlMapReader section) {
  ServerConfig s;
  s.host = section.get_string("host", s.host);
  s.port = static_cast<int>(section.get_int("port", s.port, 0, 65535));
  s.api_keys = read_api_keys(section);
  s.cors = read_cors(section.child("cors"));
  s.reasoning_parser = section.get_choice("reasoning_parser", s.reasoning_parser, {"none", "deepseek_r1", "qwen3"});
  s.tool_call_parser = section.get_choice("tool_call_parser", s.tool_call_parser,
                                         {"auto", "none", "hermes", "llama3_json", "mistral", "glm45", "qwen3_coder"});
  s.io_threads = static_cast<int>(section.get_int("io_threads", s.io_threads, 1, 256));
  s.max_request_body_bytes = section.get_bytes("max_request_body", s.max_request_body_bytes);
  if (s.max_request_body_bytes < 1024) {
    section.fail("max_request_body", fmt::format("must be at least 1KiB, got {} bytes", s.max_request_body_bytes));
  }
  s.max_concurrent_requests =
      static_cast<int>(section.get_int("max_concurrent_requests", s.max_concurrent_requests, 1, 1 << 20));
  constexpr double kDay = 86400.0;
  s.keep_alive_timeout_s = section.get_double("keep_alive_timeout_s", s.keep_alive_timeout_s, 0.001, kDay);
  s.request_timeout_s = section.get_double("request_timeout_s", s.request_timeout_s, 0.001, kDay);
  s.send_timeout_s = section.get_double("send_timeout_s", s.send_timeout_s, 0.001, kDay);
  s.shutdown_grace_period_s = section.get_double("shutdown_grace_period_s", s.shutdown_grace_period_s, 0.0, kDay);
  section.finish();
  return s;
}

HostConfig read_root(const YAML::Node& root_node, SourceMap sources) {
  HostConfig config;
  config.sources = std::move(sources);
  YamlMapReader root(root_node, "", config.sources);

  {
    if (!root.is_set("model")) root.fail("model", "is required (model: {plugin: ..., path: ...})");
    YamlMapReader model = root.child("model");
    config.model.plugin = read_plugin_slot(model, "model");
    config.model.path = resolve_path(model.require_string("path"), model, "path");
    config.model.dtype = model.get_choice("dtype", "auto", {"auto", "f32", "f16", "bf16"});
    config.model.max_logprobs =
        static_cast<int>(model.get_int("max_logprobs", config.model.max_logprobs, -1, 1 << 24));
    if (model.is_set("chat_template")) {
      // A built-in format's name, or a Jinja file that replaces the model's template.
      const std::string value = model.require_string("chat_template");
      constexpr std::string_view kFormats[] = {"chatml", "llama2", "llama3", "mistral", "zephyr"};
      if (std::find(std::begin(kFormats), std::end(kFormats), value) != std::end(kFormats)) {
        config.model.chat_template = value;
      } else {
        const fs::path file = resolve_path(value, model, "chat_template");
        std::error_code error;
        if (!fs::is_regular_file(file, error)) {
          model.fail("chat_template", fmt::format("'{}' is neither a Jinja file (no file at {}) nor a built-in "
                                                  "format (chatml, llama2, llama3, mistral, zephyr)",
                                                  value, file.string()));
        }
        config.model.chat_template = file.string();
      }
    }
    model.finish();
  }
  config.device = read_device(root);
  {
    if (!root.is_set("attention")) root.fail("attention", "is required (attention: {plugin: ...})");
    YamlMapReader attention = root.child("attention");
    config.attention = read_plugin_slot(attention, "attention");
    attention.finish();
  }
  {
    if (!root.is_set("sampler")) root.fail("sampler", "is required (sampler: {plugin: sampler})");
    YamlMapReader sampler = root.child("sampler");
    config.sampler = read_plugin_slot(sampler, "sampler");
    sampler.finish();
  }
  YamlMapReader spec = root.child("speculative");
  if (root.is_set("speculative")) {
    SpeculativeConfig s;
    s.plugin = read_plugin_slot(spec, "speculative");
    s.draft = resolve_path(spec.require_string("draft"), spec, "draft");
    s.num_speculative_tokens = static_cast<int>(spec.get_int("num_speculative_tokens", 4, 1, 16));
    if (spec.is_set("disable_by_batch_size")) {
      s.disable_by_batch_size = static_cast<int>(spec.get_int("disable_by_batch_size", 0, 1, 1 << 20));
    }
    spec.finish();
    config.speculative = std::move(s);
  }
  YamlMapReader parallel = root.child("parallel");
  if (root.is_set("parallel")) {
    ParallelConfig p;
    p.tensor_parallel_size = static_cast<int>(parallel.get_int("tensor_parallel_size", 1, 1, 4096));
    const bool on_cuda = config.device.type == DeviceType::kCuda;
    p.backend = parallel.get_choice("backend", on_cuda ? "nccl" : "mpi", {"mpi", "nccl"});
    if (p.backend == "nccl" && !on_cuda) {
      parallel.fail("backend", "nccl moves CUDA memory; device is cpu: use backend: mpi");
    }
    p.devices = read_rank_devices(parallel, config.device, p.tensor_parallel_size);
    p.collectives.key_path = "parallel";
    p.collectives.plugin = "collectives_" + p.backend;
    p.collectives.options = parallel.get_json_object("options");
    parallel.finish();
    config.parallel = std::move(p);
  }
  if (root.is_set("constraint")) {
    YamlMapReader constraint = root.child("constraint");
    config.constraint = read_plugin_slot(constraint, "constraint");
    constraint.finish();
  }
  config.cache = read_cache(root.child("cache"));
  config.scheduler = read_scheduler(root.child("scheduler"));
  config.server = read_server(root.child("server"));
  {
    YamlMapReader plugins = root.child("plugins");
    const std::vector<std::string> paths = plugins.get_string_list("search_paths");
    for (std::size_t i = 0; i < paths.size(); ++i) {
      config.plugin_search_paths.push_back(resolve_path(paths[i], plugins, "search_paths"));
    }
    plugins.finish();
  }
  {
    YamlMapReader logging = root.child("logging");
    config.log_level = logging.get_choice("level", "info", {"trace", "debug", "info", "warn", "error", "off"});
    logging.finish();
  }
  root.finish();
  return config;
}

}  // namespace

HostConfig parse_config(const std::string& yaml_text, const fs::path& file, const std::vector<std::string>& overrides) {
  ConfigDocument document = parse_config_document(yaml_text, file, overrides);
  return read_root(document.root, std::move(document.sources));
}

HostConfig load_config(const fs::path& file, const std::vector<std::string>& overrides) {
  return parse_config(read_config_file(file), file, overrides);
}

}  // namespace pagedllm
