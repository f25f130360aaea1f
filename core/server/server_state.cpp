#include "core/server/server_state.h"

namespace pagedllm::server {

bool ServerState::try_reserve(int count) {
  int current = reserved_.load();
  do {
    if (current + count > config_.max_concurrent_requests) return false;
  } while (!reserved_.compare_exchange_weak(current, current + count));
  return true;
}

void ServerState::release(int count) { reserved_ -= count; }

void ServerState::request_submitted(RequestId id) {
  std::lock_guard lock(mutex_);
  if (finished_before_submitted_.erase(id) == 0) in_flight_.insert(id);
}

void ServerState::request_finished(RequestId id) {
  {
    std::lock_guard lock(mutex_);
    if (in_flight_.erase(id) == 0) finished_before_submitted_.insert(id);
  }
  --reserved_;
}

void ServerState::abort_all() {
  std::vector<RequestId> ids;
  {
    std::lock_guard lock(mutex_);
    ids.assign(in_flight_.begin(), in_flight_.end());
  }
  for (const RequestId id : ids) engine_.abort(id);
}

void ServerState::add_session(HttpSession* session, std::weak_ptr<HttpSession> handle) {
  std::lock_guard lock(mutex_);
  sessions_.emplace(session, std::move(handle));
}

void ServerState::remove_session(HttpSession* session) {
  std::lock_guard lock(mutex_);
  sessions_.erase(session);
}

std::vector<std::shared_ptr<HttpSession>> ServerState::sessions() {
  std::vector<std::shared_ptr<HttpSession>> alive;
  std::lock_guard lock(mutex_);
  alive.reserve(sessions_.size());
  for (const auto& [raw, weak] : sessions_) {
    if (auto session = weak.lock()) alive.push_back(std::move(session));
  }
  return alive;
}

std::size_t ServerState::num_sessions() {
  std::lock_guard lock(mutex_);
  return sessions_.size();
}

}  // namespace pagedllm::server
