#include "core/router/router_config.h"


#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/config/config_error.h"
#include "core/config/config_overrides.h"
#include "core/config/yaml_reader.h"
#include "core/tokenizer/chat_template.h"

namespace pagedllm::router {
namespace fs = std::filesystem;
namespace {

constexpr double kDay = 86400.0;

// Relative paths from the file are anchored at its directory, those from --set at the working directory.
fs::path resolve_path(const std::string& value, const YamlMapReader& reader, std::string_view key) {
  fs::path path(value);
  if (path.is_absolute() || reader.sources().is_override(reader.key_path(key))) return path;
  return (reader.sources().file().parent_path() / path).lexically_normal();
}

void read_model(YamlMapReader model, RouterConfig& config) {
  config.model_path = resolve_path(model.require_string("path"), model, "path");
  if (model.is_set("chat_template")) {
    const std::string value = model.require_string("chat_template");
    if (tokenizer::parse_chat_format(value)) {
      config.chat_template = value;
    } else {
      const fs::path file = resolve_path(value, model, "chat_template");
      std::error_code error;
      if (!fs::is_regular_file(file, error)) {
        model.fail("chat_template", fmt::format("'{}' is neither a Jinja file (no file at {}) nor a built-in format "
                                                "(chatml, llama2, llama3, mistral, zephyr)",
                                                value, file.string()));
      }
      config.chat_template = file.string();
    }
  }
  model.finish();
}

void read_replicas(YamlMapReader& root, RouterConfig& config) {
  if (!root.is_set("replicas")) root.fail("replicas", "is required (replicas: [{url: http://HOST:PORT}, ...])");
  for (YamlMapReader& replica : root.children("replicas")) {
    const std::string url = replica.require_string("url");
    std::optional<ReplicaConfig> parsed = parse_replica_url(url);
    if (!parsed) replica.fail("url", fmt::format("'{}' is not http://HOST:PORT", url));
    for (const ReplicaConfig& earlier : config.replicas) {
      if (earlier.host == parsed->host && earlier.port == parsed->port) {
        replica.fail("url", fmt::format("'{}' is listed twice", url));
      }
    }
    replica.finish();
    config.replicas.push_back(std::move(*parsed));
  }
  if (config.replicas.empty()) root.fail("replicas", "must list at least one replica");
}

void read_routing(YamlMapReader routing, RouterConfig& config) {
  const std::string policy = routing.get_choice("policy", "prefix_affinity", {"prefix_affinity", "round_robin"});
  config.policy = policy == "round_robin" ? RoutingPolicy::kRoundRobin : RoutingPolicy::kPrefixAffinity;
  config.block_size = static_cast<int>(routing.get_int("block_size", config.block_size, 1, 1 << 16));
  config.load_margin = static_cast<int>(routing.get_int("load_margin", config.load_margin, 0, 1 << 20));
  config.affinity_entries = routing.get_int("affinity_entries", config.affinity_entries, 1, std::int64_t{1} << 32);
  routing.finish();
}

void read_health(YamlMapReader health, RouterConfig& config) {
  config.health_interval_s = health.get_double("interval_s", config.health_interval_s, 0.01, kDay);
  config.health_timeout_s = health.get_double("timeout_s", config.health_timeout_s, 0.01, kDay);
  health.finish();
}

void read_server(YamlMapReader server, RouterConfig& config) {
  config.host = server.get_string("host", config.host);
  config.port = static_cast<int>(server.get_int("port", config.port, 0, 65535));
  config.io_threads = static_cast<int>(server.get_int("io_threads", config.io_threads, 1, 256));
  config.max_request_body_bytes = server.get_bytes("max_request_body", config.max_request_body_bytes);
  if (config.max_request_body_bytes < 1024) {
    server.fail("max_request_body", fmt::format("must be at least 1KiB, got {} bytes", config.max_request_body_bytes));
  }
  config.connect_timeout_s = server.get_double("connect_timeout_s", config.connect_timeout_s, 0.01, kDay);
  config.shutdown_grace_period_s =
      server.get_double("shutdown_grace_period_s", config.shutdown_grace_period_s, 0.0, kDay);
  server.finish();
}

RouterConfig read_root(const YAML::Node& root_node, SourceMap sources) {
  RouterConfig config;
  config.sources = std::move(sources);
  YamlMapReader root(root_node, "", config.sources);
  if (!root.is_set("model")) root.fail("model", "is required (model: {path: ...}, the model the replicas serve)");
  read_model(root.child("model"), config);
  read_replicas(root, config);
  read_routing(root.child("routing"), config);
  read_health(root.child("health"), config);
  read_server(root.child("server"), config);
  YamlMapReader logging = root.child("logging");
  config.log_level = logging.get_choice("level", config.log_level, {"trace", "debug", "info", "warn", "error", "off"});
  logging.finish();
  root.finish();
  return config;
}

}  // namespace

std::optional<ReplicaConfig> parse_replica_url(const std::string& url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) return std::nullopt;
  std::string_view authority = std::string_view(url).substr(kScheme.size());
  if (authority.ends_with('/')) authority.remove_suffix(1);
  const std::size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || authority.find('/') != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string_view port = authority.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
    return std::nullopt;
  }
  const int port_number = std::stoi(std::string(port));
  if (port_number < 1 || port_number > 65535) return std::nullopt;
  std::string_view host = authority.substr(0, colon);
  // [::1]:8000: the brackets are the URL's, not the address's.
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return ReplicaConfig{url, std::string(host), std::string(port)};
}

RouterConfig parse_router_config(const std::string& yaml_text, const fs::path& file,
                                 const std::vector<std::string>& overrides) {
  ConfigDocument document = parse_config_document(yaml_text, file, overrides);
  return read_root(document.root, std::move(document.sources));
}

RouterConfig load_router_config(const fs::path& file, const std::vector<std::string>& overrides) {
  return parse_router_config(read_config_file(file), file, overrides);
}

std::string_view policy_name(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::kPrefixAffinity:
      return "prefix_affinity";
    case RoutingPolicy::kRoundRobin:
      return "round_robin";
  }
  return "unknown";
}

}  // namespace pagedllm::router
