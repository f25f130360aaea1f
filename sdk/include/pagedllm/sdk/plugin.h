#ifndef PAGEDLLM_SDK_PLUGIN_H
#define PAGEDLLM_SDK_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "pagedllm/sdk/host.h"
#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The one symbol every plugin exports. It takes nothing, allocates nothing and
 * returns a descriptor with static storage duration. */
#define PLLM_PLUGIN_ENTRY_SYMBOL "pagedllm_plugin_entry"

typedef enum pllm_plugin_kind {
  PLLM_PLUGIN_KIND_INVALID = 0,
  PLLM_PLUGIN_KIND_ATTENTION = 1,  /* pllm_attention_api */
  PLLM_PLUGIN_KIND_MODEL = 2,      /* pllm_model_api */
  PLLM_PLUGIN_KIND_SAMPLER = 3,    /* pllm_sampler_api */
  PLLM_PLUGIN_KIND_SPECULATOR = 4, /* pllm_speculator_api */
  PLLM_PLUGIN_KIND_COLLECTIVES = 5, /* pllm_collectives_api (SDK 2.1) */
  PLLM_PLUGIN_KIND_CONSTRAINT = 6, /* pllm_constraint_api (SDK 2.1) */
  PLLM_PLUGIN_KIND_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never a kind */
} pllm_plugin_kind;

typedef struct pllm_plugin_descriptor {
  uint32_t struct_size;
  /* The SDK version the plugin was compiled against (PLLM_SDK_VERSION_*). */
  uint16_t sdk_major;
  uint16_t sdk_minor;
  pllm_plugin_kind kind;
  /* Name used in configs ("attention_cpu"); [a-z0-9_]+. */
  const char* name;
  /* The plugin's own version ("1.2.0"), independent of the SDK's. */
  const char* version;
  const char* description;
  /* Called once after the host accepted the descriptor and before anything
   * else; `host` stays valid until shutdown returns. Required. */
  pllm_status (*init)(const pllm_host_api* host, pllm_error* error);
  /* Called once before the library is unloaded. Optional (NULL). */
  void (*shutdown)(void);
  /* Validates this plugin's options (a JSON object, "{}" when none were given)
   * without creating anything: the host calls it for --check and before create.
   * Unknown keys are errors; error->key names the offending key. Required. */
  pllm_status (*validate_options)(const char* options_json, pllm_error* error);
  /* The kind's function table: a pllm_<kind>_api whose own struct_size says
   * which of its slots the plugin knows. */
  const void* kind_api;
} pllm_plugin_descriptor;

typedef const pllm_plugin_descriptor* (*pllm_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif

#endif
