// An OpenAI request body as the server parses it: parse_generation_request
// (JSON, every field, prompts tokenized, chat messages rendered with the
// model's template) against the embedded model's tokenizer, then each
// prompt's engine request through the engine's own validation
// (to_scheduler_request). The first byte picks the endpoint (even:
// /v1/completions, odd: /v1/chat/completions); the rest is the body.
// Properties: a refusal is an ApiError with a 4xx status (never a 500 for the
// user's mistake) or a RequestRejected; nothing else escapes.

#include <cstdint>
#include <string_view>

#include "core/server/api_error.h"
#include "core/server/openai_request.h"
#include "tools/fuzz/fuzz_engine.h"

using namespace pagedllm;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fuzz::ParseOnlyEngine engine;
  if (size == 0) return 0;
  const auto kind = (data[0] & 1) ? server::ApiKind::kChat : server::ApiKind::kCompletion;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    const server::GenerationPlan plan = server::parse_generation_request(kind, body, engine);
    if (plan.prompts.empty()) __builtin_trap();  // a plan always has a prompt
    for (std::size_t i = 0; i < plan.prompts.size() && i < 64; ++i) {
      try {
        (void)to_scheduler_request(server::make_engine_request(plan, i), engine.limits());
      } catch (const RequestRejected&) {
      }
    }
  } catch (const server::ApiError& e) {
    if (e.status() < 400 || e.status() >= 500) __builtin_trap();
  }
  return 0;
}
