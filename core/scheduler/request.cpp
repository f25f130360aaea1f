#include "core/scheduler/request.h"

#include <utility>

#include <fmt/format.h>

namespace pagedllm {

const char* to_string(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "abort";
  }
  return "unknown";
}

RequestRejected::RequestRejected(RequestId request, const std::string& reason, std::string param)
    : std::invalid_argument(fmt::format("request {} rejected: {}", request, reason)),
      request_id_(request),
      reason_(reason),
      param_(std::move(param)) {}

}  // namespace pagedllm
