#pragma once
// The host configuration: YAML -> typed, validated config. Unknown keys, wrong
// types and impossible values are ConfigErrors naming file, line and key path.
// Relative paths in the file are relative to the file's directory; relative
// paths given with --set are relative to the working directory.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/engine_config.h"
#include "core/config/source_map.h"

namespace pagedllm {

enum class DeviceType { kCpu, kCuda };

struct DeviceConfig {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  std::string str() const;  // "cpu", "cuda:0"
};

// A config slot naming a plugin and the options handed to it.
struct PluginSlot {
  std::string plugin;  // a name ("attention_cpu") or a path to a .so
  nlohmann::json options = nlohmann::json::object();
  std::string key_path;  // where the slot is in the config ("attention")
};

struct ModelConfig {
  PluginSlot plugin;
  std::filesystem::path path;
  std::string dtype = "auto";  // auto | f32 | f16 | bf16
  // A chat format ("chatml", "llama3", ...) that replaces the model's own
  // template, or gives one to a model without a template.
  std::optional<std::string> chat_template;
  // The most alternatives a request may ask per token (logprobs / top_logprobs),
  // as vLLM's max_logprobs; -1 = the whole vocabulary (full log-softmax rows, for
  // comparing the engine with a reference model).
  int max_logprobs = 20;
};

struct SpeculativeConfig {
  PluginSlot plugin;
  std::filesystem::path draft;
  int num_speculative_tokens = 4;
  // A request that arrives while this many or more are unfinished decodes
  // without drafts (vLLM's speculative_disable_by_batch_size): in a large
  // batch the target's K extra rows per sequence cost more than drafts save.
  // Unset: every request that can speculate does.
  std::optional<int> disable_by_batch_size;
};

// Tensor parallelism (docs/tensor-parallel.md): the model split over
// tensor_parallel_size ranks (processes mpirun starts), which meet through a
// collectives plugin: backend mpi (collectives_mpi, CPU ranks) or nccl
// (collectives_nccl, CUDA ranks); `collectives` is that plugin's slot
// ("parallel", its options from parallel.options). Set only when the section is.
struct ParallelConfig {
  int tensor_parallel_size = 1;
  // mpi: collectives_mpi (the CPU; CUDA memory staged through the host); nccl: collectives_nccl (CUDA).
  std::string backend = "mpi";
  PluginSlot collectives;
  // CUDA: rank r's device, devices[r] (several ranks may share one); empty: cuda:(B + local rank)
  // for `device: cuda:B`.
  std::vector<DeviceConfig> devices;
};

// Cross-origin requests from browsers (docs/server.md "CORS"): nothing is allowed unless origins are listed.
struct CorsConfig {
  // Exact origins ("https://app.example:8443", scheme://host[:port]) whose pages may call the API, or "*"
  // for any; empty: no CORS headers, preflights refused.
  std::vector<std::string> allowed_origins;
  // How long a browser may cache a preflight's answer (Access-Control-Max-Age).
  int max_age_s = 600;
};

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (printed at start)
  // When not empty, /v1/* requires "Authorization: Bearer <key>" with one of these keys: server.api_key
  // (a key or a list), replaced by the host's --api-key options or PAGEDLLM_API_KEY (core/host/main.cpp).
  std::vector<std::string> api_keys;
  CorsConfig cors;
  // How chat responses split a reasoning model's thinking into reasoning_content: none, deepseek_r1 or
  // qwen3 (core/server/reasoning_parser.h).
  std::string reasoning_parser = "none";
  // How chat output is parsed into tool calls: auto, none, hermes, llama3_json, mistral, glm45 or qwen3_coder
  // (core/server/tool_call_parser.h). auto: the format the model's chat template writes calls in, and tools
  // refused when it shows none; none: tools are still rendered into the prompt, the output is not parsed.
  std::string tool_call_parser = "auto";
  // Threads running the HTTP event loop; connections and streams do not need one each.
  int io_threads = 2;
  // Larger request bodies are refused with 413.
  std::uint64_t max_request_body_bytes = 8ull << 20;
  // Engine requests (one per prompt) in flight at once; more are refused with 503.
  int max_concurrent_requests = 1024;
  // Seconds a connection may wait for (the header of) its next request.
  double keep_alive_timeout_s = 60.0;
  // Seconds a request body may take to arrive once its header has.
  double request_timeout_s = 30.0;
  // Seconds a response write may make no progress before the client counts as
  // gone (its requests are aborted).
  double send_timeout_s = 60.0;
  // On SIGINT/SIGTERM: seconds in-flight requests may take to finish before
  // they are aborted.
  double shutdown_grace_period_s = 30.0;
};

struct HostConfig {
  ModelConfig model;
  DeviceConfig device;
  PluginSlot attention;
  PluginSlot sampler;
  std::optional<SpeculativeConfig> speculative;
  std::optional<ParallelConfig> parallel;
  // Structured output's constraint engine (SDK 2.1); unset: constrained requests are refused.
  std::optional<PluginSlot> constraint;
  CacheConfig cache;
  SchedulerConfig scheduler;
  ServerConfig server;
  std::vector<std::filesystem::path> plugin_search_paths;
  std::string log_level = "info";

  // Where every key came from, for errors found after loading.
  SourceMap sources;
};

// Loads `file`, applies the --set overrides ("a.b.c=value", value in YAML
// syntax) and validates. Throws ConfigError.
HostConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

// The same from YAML text (tests); `file` names it in messages and anchors
// relative paths.
HostConfig parse_config(const std::string& yaml_text, const std::filesystem::path& file,
                        const std::vector<std::string>& overrides = {});

}  // namespace pagedllm
