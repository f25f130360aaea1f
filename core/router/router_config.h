#pragma once
// pagedllm-router's configuration (docs/router.md): the replicas it spreads requests over, how it picks one,
// how it checks them, and where it listens. Read as strictly as the host's config: unknown keys, wrong types
// and impossible values are ConfigErrors naming the file, line and key.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/config/source_map.h"

namespace pagedllm::router {

enum class RoutingPolicy { kPrefixAffinity, kRoundRobin };

struct ReplicaConfig {
  std::string url;  // as written: http://HOST:PORT
  std::string host;
  std::string port;
};

struct RouterConfig {
  // The model the replicas serve, for rendering prompts as they do: its tokenizer and chat template.
  std::filesystem::path model_path;
  // model.chat_template as the host reads it: a built-in format's name or a Jinja file (resolved).
  std::optional<std::string> chat_template;

  std::vector<ReplicaConfig> replicas;

  RoutingPolicy policy = RoutingPolicy::kPrefixAffinity;
  int block_size = 16;  // the replicas' cache.block_size: the prompt's hash chain is cut at it
  // The affine replica is skipped when its requests in flight exceed the least loaded replica's by more than this.
  int load_margin = 4;
  std::int64_t affinity_entries = 1 << 16;  // block hashes remembered (LRU)

  double health_interval_s = 1.0;
  double health_timeout_s = 2.0;
  double connect_timeout_s = 5.0;

  std::string host = "127.0.0.1";
  int port = 8100;  // 0 = any free port (printed at start)
  int io_threads = 2;
  std::uint64_t max_request_body_bytes = 8u << 20;
  // SIGINT/SIGTERM: requests in flight get this long to finish before the router stops.
  double shutdown_grace_period_s = 30.0;

  std::string log_level = "info";
  SourceMap sources;
};

// "http://127.0.0.1:8001" -> host and port; nullopt for anything else (https, a path, no port).
std::optional<ReplicaConfig> parse_replica_url(const std::string& url);

RouterConfig parse_router_config(const std::string& yaml_text, const std::filesystem::path& file,
                                 const std::vector<std::string>& overrides);
RouterConfig load_router_config(const std::filesystem::path& file, const std::vector<std::string>& overrides);

std::string_view policy_name(RoutingPolicy policy);

}  // namespace pagedllm::router
