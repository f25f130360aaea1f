#include "core/router/router_metrics.h"

#include <fmt/format.h>

namespace pagedllm::router {
namespace {

std::string escape_label(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void family(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

template <typename Value>
void per_replica(std::string& out, const std::vector<ReplicaCounters>& replicas, const char* name, const char* type,
                 const char* help, Value ReplicaCounters::*field) {
  family(out, name, type, help);
  for (const ReplicaCounters& replica : replicas) {
    out += fmt::format("{}{{replica=\"{}\"}} {}\n", name, escape_label(replica.url),
                       static_cast<std::uint64_t>(replica.*field));
  }
}

void total(std::string& out, const char* name, const char* help, std::uint64_t value) {
  family(out, name, "counter", help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

std::string render_router_metrics(const ReplicaSet& replicas, const RouterCounters& counters) {
  const std::vector<ReplicaCounters> snapshot = replicas.counters();
  std::string out;
  total(out, "pagedllm_router:requests_total", "Requests received for the replicas.", counters.requests.load());
  total(out, "pagedllm_router:unavailable_total", "Requests answered 503: no replica was up.",
        counters.unavailable.load());
  total(out, "pagedllm_router:retries_total", "Requests retried on another replica after theirs failed.",
        counters.retries.load());
  total(out, "pagedllm_router:failed_streams_total", "Streams ended with an error event: their replica broke.",
        counters.failed_streams.load());
  total(out, "pagedllm_router:client_disconnects_total", "Clients gone before their answer ended.",
        counters.client_disconnects.load());
  family(out, "pagedllm_router:affinity_entries", "gauge", "Block hashes in the affinity table.");
  out += fmt::format("pagedllm_router:affinity_entries {}\n", replicas.affinity_entries());
  per_replica(out, snapshot, "pagedllm_router:replica_up", "gauge", "1 while the replica is in service.",
              &ReplicaCounters::up);
  per_replica(out, snapshot, "pagedllm_router:replica_in_flight", "gauge", "Requests in flight on the replica.",
              &ReplicaCounters::in_flight);
  per_replica(out, snapshot, "pagedllm_router:replica_requests_total", "counter",
              "Requests sent to the replica (each try counts).", &ReplicaCounters::requests);
  per_replica(out, snapshot, "pagedllm_router:replica_affinity_hits_total", "counter",
              "Requests sent to the replica because it served their longest known prefix.",
              &ReplicaCounters::affinity_hits);
  per_replica(out, snapshot, "pagedllm_router:replica_load_overrides_total", "counter",
              "Requests sent here, the least loaded, because their prefix's replica was busy or down.",
              &ReplicaCounters::load_overrides);
  per_replica(out, snapshot, "pagedllm_router:replica_failures_total", "counter",
              "Requests the replica failed (no answer, or a broken connection).", &ReplicaCounters::failures);
  per_replica(out, snapshot, "pagedllm_router:replica_retries_total", "counter",
              "Requests the replica failed before any byte reached the client, retried elsewhere.",
              &ReplicaCounters::retries);
  per_replica(out, snapshot, "pagedllm_router:replica_health_failures_total", "counter",
              "Health probes the replica failed.", &ReplicaCounters::health_failures);
  return out;
}

}  // namespace pagedllm::router
