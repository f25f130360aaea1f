#pragma once
// pagedllm-host --prompt: one completion streamed to stdout, through the same
// engine API the HTTP server uses.

#include <cstdio>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/host/cli_options.h"
#include "core/plugin/plugin_registry.h"

namespace pagedllm {

// Loads the engine, generates, streams the text to `out` as it is produced and
// a summary (time to ready, tokens, speed) to stderr. Returns the exit code:
// 0, 2 for a request the engine refuses (the reason is printed), 1 when the
// engine fails. Loading errors propagate as exceptions. `group`: rank 0's, under tensor parallelism.
int run_one_shot(const HostConfig& config, PluginRegistry& registry, const GenerateOptions& options,
                 std::FILE* out, TensorParallelGroup* group = nullptr);

}  // namespace pagedllm
