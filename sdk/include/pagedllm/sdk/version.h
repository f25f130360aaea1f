#ifndef PAGEDLLM_SDK_VERSION_H
#define PAGEDLLM_SDK_VERSION_H

/* The version of the plugin ABI these headers describe.
 *
 * MAJOR changes when something a plugin relies on changes incompatibly; a host
 * loads only plugins of its own major. MINOR grows when tables or structs gain
 * fields at their end (append-only); a host loads plugins of any minor up to its
 * own, and treats the fields an older plugin does not know as absent.
 * sdk/README.md states the rules in full. */
#define PLLM_SDK_VERSION_MAJOR 2
#define PLLM_SDK_VERSION_MINOR 4

#include <stddef.h>

/* Nonzero when `field` lies within the struct's declared struct_size: the one way
 * to tell whether a struct from another party has a field. A struct from an older
 * minor lacks the fields appended after it, which then read as absent; a consumer
 * refuses only a struct that lacks a field of its major's first minor (X.0). */
#define PLLM_HAS_FIELD(type, ptr, field) \
  ((ptr)->struct_size >= offsetof(type, field) + sizeof(((type*)0)->field))

#endif
