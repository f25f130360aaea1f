#pragma once
// What the HTTP server's connections share: the engine, the limits, the
// bookkeeping of engine requests in flight (for 503s, the shutdown drain and
// abort), and the gate through which engine outputs reach the I/O threads.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/server/tool_call_parser.h"

namespace pagedllm::server {

class HttpSession;

// Engine outputs are posted to a connection's strand from the engine thread.
// Once the server stops, the I/O objects go away; closing the gate first makes
// later outputs drop instead of touching them.
class OutputGate {
 public:
  // Runs `post` (which posts to an executor) unless the gate is closed.
  template <class Post>
  void pass(Post&& post) {
    std::lock_guard lock(mutex_);
    if (open_) post();
  }
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }

 private:
  std::mutex mutex_;
  bool open_ = true;
};

class ServerState {
 public:
  ServerState(Engine& engine, ServerConfig config);

  Engine& engine() { return engine_; }
  const ServerConfig& config() const { return config_; }
  // server.tool_call_parser, or with "auto" the format the model's chat template shows (chosen, and logged,
  // once at start).
  const ToolCallParsing& tool_call_parsing() const { return tool_call_parsing_; }
  OutputGate& gate() { return gate_; }
  std::int64_t started_unix() const {
    return std::chrono::duration_cast<std::chrono::seconds>(started_.time_since_epoch()).count();
  }

  // --- Shutdown ---
  bool draining() const { return draining_.load(); }
  void set_draining() { draining_.store(true); }

  // --- Engine requests in flight ---
  // Reserves room for `count` requests under max_concurrent_requests.
  bool try_reserve(int count);
  // Gives back reservations that were never submitted.
  void release(int count);
  // Thread-safe, in either order: the engine may finish a request before
  // submit() has returned its id to the connection.
  void request_submitted(RequestId id);
  void request_finished(RequestId id);
  int engine_requests_in_flight() const { return reserved_.load(); }
  // engine.abort() on every request in flight.
  void abort_all();

  // --- HTTP exchanges that have not sent their whole response ---
  void exchange_started() { ++exchanges_; }
  void exchange_ended() { --exchanges_; }
  int exchanges_in_flight() const { return exchanges_.load(); }

  // --- Connections ---
  void add_session(HttpSession* session, std::weak_ptr<HttpSession> handle);
  void remove_session(HttpSession* session);
  std::vector<std::shared_ptr<HttpSession>> sessions();
  std::size_t num_sessions();

 private:
  Engine& engine_;
  const ServerConfig config_;
  const ToolCallParsing tool_call_parsing_;
  const std::chrono::system_clock::time_point started_;
  OutputGate gate_;
  std::atomic<bool> draining_{false};
  std::atomic<int> reserved_{0};
  std::atomic<int> exchanges_{0};

  std::mutex mutex_;
  std::unordered_set<RequestId> in_flight_;
  std::unordered_set<RequestId> finished_before_submitted_;
  std::unordered_map<HttpSession*, std::weak_ptr<HttpSession>> sessions_;
};

}  // namespace pagedllm::server
