#ifndef PAGEDLLM_SDK_HOST_H
#define PAGEDLLM_SDK_HOST_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pllm_log_level {
  PLLM_LOG_TRACE = 0,
  PLLM_LOG_DEBUG = 1,
  PLLM_LOG_INFO = 2,
  PLLM_LOG_WARN = 3,
  PLLM_LOG_ERROR = 4,
  PLLM_LOG_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never a level */
} pllm_log_level;

/* Services the host offers a plugin. The host passes one table per loaded
 * plugin to its init(); it stays valid until the plugin's shutdown() returns.
 * `context` is the host's and must be passed back unchanged. Append-only:
 * check struct_size (PLLM_HAS_FIELD) before using a field added after 2.0.
 * Every service may be called from any thread, concurrently, between init()
 * and the return of shutdown() (sdk/README.md, "Threads and reentrancy"). */
typedef struct pllm_host_api {
  uint32_t struct_size;
  void* context;
  /* The host's version string ("0.1.0"). */
  const char* host_version;
  /* Writes one message to the host's log under this plugin's name. */
  void (*log)(void* context, pllm_log_level level, const char* message);
  /* Nonzero when a message at `level` would be written: skip formatting otherwise. */
  int32_t (*log_enabled)(void* context, pllm_log_level level);
  /* Reports progress of long work (weights loading): `done` of `total` units of `task`. */
  void (*progress)(void* context, const char* task, uint64_t done, uint64_t total);
} pllm_host_api;

#ifdef __cplusplus
}
#endif

#endif
