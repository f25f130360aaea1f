#pragma once
// pagedllm-router's serving loop: listens on server.host:server.port, starts a session per connection and a
// health watch per replica, all on one io_context run by server.io_threads threads, until SIGINT or SIGTERM
// (then a drain: no new connections, requests in flight finish within server.shutdown_grace_period_s).

#include "core/router/router_config.h"

namespace pagedllm::router {

// Loads the model's tokenizer (ConfigError / TokenizerError when it cannot), serves, and returns the exit code.
int serve_router(const RouterConfig& config);

}  // namespace pagedllm::router
