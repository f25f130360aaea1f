#pragma once
// pagedllm-host's serve mode: the HTTP server in front of a started engine
// until SIGINT or SIGTERM.

#include <chrono>

#include "core/config/config.h"
#include "core/engine/engine.h"

namespace pagedllm::server {

// Listens on config.host:port, prints "listening on URL (ready in S s)" to
// stdout, and serves until SIGINT or SIGTERM, or until the engine fails
// (Engine::failure(): a plugin error). Then: stop accepting, let in-flight
// requests finish for up to shutdown_grace_period_s (a second signal cuts it
// short; after a failure the engine has already ended them with the error), abort
// what is left, shut the engine down, close every connection. Returns the exit
// code: 0 after a signal, 1 after an engine failure. Throws std::system_error
// when it cannot listen.
int serve(Engine& engine, const ServerConfig& config, std::chrono::steady_clock::time_point started);

}  // namespace pagedllm::server
