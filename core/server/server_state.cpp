#include "core/server/server_state.h"

#include <fmt/format.h>

#include "core/common/logging.h"

namespace pagedllm::server {

namespace {

ToolCallParsing choose_tool_call_parsing(const ServerConfig& config, const tokenizer::ChatTemplate* chat_template) {
  if (config.tool_call_parser != "auto") return {*parse_tool_call_format(config.tool_call_parser), ""};
  if (chat_template == nullptr) {
    host_log().info("tool calls: not parsed (server.tool_call_parser auto, and the model has no chat template)");
    return {ToolCallFormat::kNone, "the model has no chat template to recognise its tool-call format in: set "
                                   "server.tool_call_parser (hermes, llama3_json, mistral, glm45 or qwen3_coder)"};
  }
  if (const auto format = tool_call_format_of_template(chat_template->text())) {
    host_log().info("tool calls: parsed as {} (server.tool_call_parser auto, recognised in the chat template {})",
                    tool_call_format_name(*format), chat_template->source());
    return {*format, ""};
  }
  host_log().info("tool calls: not parsed (server.tool_call_parser auto, and the chat template {} shows no "
                  "<tool_call>, <|python_tag|> or [TOOL_CALLS]); requests offering tools are refused",
                  chat_template->source());
  return {ToolCallFormat::kNone,
          fmt::format("the model's chat template ({}) shows no tool-call format this server recognises: set "
                      "server.tool_call_parser (hermes, llama3_json, mistral, glm45 or qwen3_coder; none renders "
                      "tools without parsing calls)",
                      chat_template->source())};
}

}  // namespace

ServerState::ServerState(Engine& engine, ServerConfig config)
    : engine_(engine),
      config_(std::move(config)),
      tool_call_parsing_(choose_tool_call_parsing(config_, engine.chat_template())),
      started_(std::chrono::system_clock::now()) {}

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
