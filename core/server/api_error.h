#pragma once
// Errors the HTTP API reports, in OpenAI's shape:
//   {"error": {"message": "...", "type": "...", "param": "..." | null, "code": "..." | null}}
// Every failure a client can cause is one of these with a 4xx status; 5xx are
// the server's own condition (not ready, overloaded, shutting down, engine failure).

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

namespace pagedllm::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string type, std::optional<std::string> param = std::nullopt,
           std::optional<std::string> code = std::nullopt)
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::optional<std::string>& param() const { return param_; }
  const std::optional<std::string>& code() const { return code_; }
  // Sent as Retry-After with 503s.
  std::optional<std::chrono::seconds> retry_after;

  // The JSON body.
  std::string body() const;

 private:
  int status_;
  std::string type_;
  std::optional<std::string> param_;
  std::optional<std::string> code_;
};

// --- The errors by class ---
// 400: the request is malformed or outside a limit; `param` names the field.
ApiError invalid_request(std::string message, std::optional<std::string> param = std::nullopt);
// 401
ApiError unauthorized(std::string message);
// 404 for routes; model_not_found for a model that is not served.
ApiError not_found(std::string message, std::optional<std::string> code = std::string("not_found"));
// 405
ApiError method_not_allowed(std::string message);
// 413
ApiError request_too_large(std::string message);
// 503 with Retry-After.
ApiError unavailable(std::string message, std::string code, std::chrono::seconds retry_after);
// 500: the engine failed while serving the request.
ApiError internal_error(std::string message);

}  // namespace pagedllm::server
