#pragma once
// EngineMetrics as Prometheus text exposition format 0.0.4 (GET /metrics).
// Names follow vLLM's with a "pagedllm:" prefix; every sample carries the
// label model_name. docs/server.md lists them.

#include <string>

#include "core/engine/engine_metrics.h"

namespace pagedllm::server {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string render_prometheus(const EngineMetrics& metrics, const std::string& model_name);

}  // namespace pagedllm::server
