#ifndef PAGEDLLM_SDK_STATUS_H
#define PAGEDLLM_SDK_STATUS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible call across the plugin boundary returns a status and, on
 * failure, fills the caller's pllm_error with a message. No exception ever
 * crosses the boundary. */
typedef enum pllm_status {
  PLLM_OK = 0,
  PLLM_ERROR_INVALID_ARGUMENT = 1, /* a call's arguments are wrong (a bug in the caller) */
  PLLM_ERROR_INVALID_CONFIG = 2,   /* the plugin's options or a model file are invalid */
  PLLM_ERROR_NOT_FOUND = 3,        /* a file, tensor or name does not exist */
  PLLM_ERROR_UNSUPPORTED = 4,      /* valid, but this plugin cannot do it (dtype, device, shape) */
  PLLM_ERROR_OUT_OF_MEMORY = 5,    /* host or device memory ran out */
  PLLM_ERROR_IO = 6,               /* reading or mapping a file failed */
  PLLM_ERROR_DEVICE = 7,           /* the device (driver, kernel launch) failed */
  PLLM_ERROR_INTERNAL = 8,         /* a bug in the plugin */
  PLLM_ERROR_COMMUNICATION = 9,    /* a collective failed: a rank died or hung, the transport broke (SDK 2.1) */
  PLLM_STATUS_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never returned */
} pllm_status;

#define PLLM_ERROR_MESSAGE_CAPACITY 2048
#define PLLM_ERROR_KEY_CAPACITY 256

/* Owned by the caller, filled by the callee on failure. `key` optionally names
 * the offending option as a dotted path inside the plugin's own options
 * ("variant", "kernel.tile"), so the host can point at the config line. Both
 * strings are NUL-terminated and truncated to fit. Frozen for the whole major
 * (no struct_size): its two fixed buffers are the whole of an error. */
typedef struct pllm_error {
  char message[PLLM_ERROR_MESSAGE_CAPACITY];
  char key[PLLM_ERROR_KEY_CAPACITY];
} pllm_error;

/* A short stable name for a status ("invalid config"). */
static inline const char* pllm_status_name(pllm_status status) {
  switch (status) {
    case PLLM_OK: return "ok";
    case PLLM_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case PLLM_ERROR_INVALID_CONFIG: return "invalid config";
    case PLLM_ERROR_NOT_FOUND: return "not found";
    case PLLM_ERROR_UNSUPPORTED: return "unsupported";
    case PLLM_ERROR_OUT_OF_MEMORY: return "out of memory";
    case PLLM_ERROR_IO: return "i/o error";
    case PLLM_ERROR_DEVICE: return "device error";
    case PLLM_ERROR_INTERNAL: return "internal error";
    case PLLM_ERROR_COMMUNICATION: return "communication error";
    case PLLM_STATUS_FORCE_32BIT: break;
  }
  return "unknown status";
}

#ifdef __cplusplus
}
#endif

#endif
