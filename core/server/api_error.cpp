#include "core/server/api_error.h"

#include <nlohmann/json.hpp>

namespace pagedllm::server {

std::string ApiError::body() const {
  nlohmann::json error = {{"message", what()}, {"type", type_}, {"param", nullptr}, {"code", nullptr}};
  if (param_) error["param"] = *param_;
  if (code_) error["code"] = *code_;
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

ApiError invalid_request(std::string message, std::optional<std::string> param) {
  return ApiError(400, std::move(message), "invalid_request_error", std::move(param));
}

ApiError unauthorized(std::string message) {
  return ApiError(401, std::move(message), "invalid_request_error", std::nullopt, "invalid_api_key");
}

ApiError not_found(std::string message, std::optional<std::string> code) {
  return ApiError(404, std::move(message), "invalid_request_error", std::nullopt, std::move(code));
}

ApiError method_not_allowed(std::string message) {
  return ApiError(405, std::move(message), "invalid_request_error", std::nullopt, "method_not_allowed");
}

ApiError request_too_large(std::string message) {
  return ApiError(413, std::move(message), "invalid_request_error", std::nullopt, "request_too_large");
}

ApiError unavailable(std::string message, std::string code, std::chrono::seconds retry_after) {
  ApiError error(503, std::move(message), "service_unavailable", std::nullopt, std::move(code));
  error.retry_after = retry_after;
  return error;
}

ApiError internal_error(std::string message) {
  return ApiError(500, std::move(message), "server_error", std::nullopt, "internal_error");
}

}  // namespace pagedllm::server
