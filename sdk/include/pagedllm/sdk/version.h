#ifndef PAGEDLLM_SDK_VERSION_H
#define PAGEDLLM_SDK_VERSION_H

/* The version of the plugin ABI these headers describe.
 *
 * MAJOR changes when something a plugin relies on changes incompatibly; a host
 * loads only plugins of its own major. MINOR grows when tables or structs gain
 * fields at their end (append-only); a host loads plugins of any minor up to its
 * own, and treats the fields an older plugin does not know as absent.
 * sdk/README.md states the rules in full. */
#define PLLM_SDK_VERSION_MAJOR 1
#define PLLM_SDK_VERSION_MINOR 1

#endif
