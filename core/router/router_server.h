#pragma once
// pagedllm-router's serving loop: listens on server.host:server.port, starts a session per connection and a
// health watch per replica, all on one io_context run by server.io_threads threads, until SIGINT or SIGTERM.

#include "core/router/router_config.h"

namespace pagedllm::router {

// Loads the model's tokenizer (ConfigError / TokenizerError when it cannot), serves, and returns the exit code.
int serve_router(const RouterConfig& config);

}  // namespace pagedllm::router
