/* A plugin claiming to be built against the SDK minor after the installed one. */
#include <pagedllm/sdk.h>

static pllm_status oot_init(const pllm_host_api* host, pllm_error* error) {
  (void)host;
  (void)error;
  return PLLM_OK;
}

static pllm_status oot_validate(const char* options_json, pllm_error* error) {
  (void)options_json;
  (void)error;
  return PLLM_OK;
}

static const pllm_sampler_api oot_api = {sizeof(pllm_sampler_api), 0, 0, 0, 0};

static const pllm_plugin_descriptor oot_descriptor = {
    sizeof(pllm_plugin_descriptor), PLLM_SDK_VERSION_MAJOR, PLLM_SDK_VERSION_MINOR + 1, PLLM_PLUGIN_KIND_SAMPLER,
    "oot_newer_minor", "0.1.0", "claims a newer SDK", oot_init, 0, oot_validate, &oot_api,
};

__attribute__((visibility("default"))) const pllm_plugin_descriptor* pagedllm_plugin_entry(void) {
  return &oot_descriptor;
}
