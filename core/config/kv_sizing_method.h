#pragma once
// Which way the KV pool is sized: decided by the config and by whether the
// attention backend reports device memory (pllm_attention_api.memory_info).
// The engine sizes by it (core/engine/kv_cache_sizing.h); --check reports it.

#include "core/config/config.h"

namespace pagedllm {

enum class KvSizingMethod {
  kConfiguredBytes,        // no memory_info: cache.kv_cache_bytes
  kExplicitBytesOnDevice,  // memory_info, and cache.kv_cache_bytes written in the config
  kProfiled,               // memory_info: cache.gpu_memory_utilization after a profiling step
};

inline KvSizingMethod kv_sizing_method(const HostConfig& config, bool backend_reports_device_memory) {
  if (!backend_reports_device_memory) return KvSizingMethod::kConfiguredBytes;
  // 0 written explicitly means "derive from the device" (core/config/engine_config.h).
  if (config.sources.written("cache.kv_cache_bytes") && config.cache.kv_cache_bytes > 0) {
    return KvSizingMethod::kExplicitBytesOnDevice;
  }
  return KvSizingMethod::kProfiled;
}

}  // namespace pagedllm
