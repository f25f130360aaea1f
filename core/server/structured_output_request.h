#pragma once
// The structured-output fields of a completions or chat request: OpenAI's
// response_format ({"type": "json_object"} or {"type": "json_schema",
// "json_schema": {"name": ..., "schema": {...}}}), vLLM's structured_outputs
// ({"json": schema, "regex": ..., "choice": [...], "json_object": true}) and its
// older guided_json / guided_regex / guided_choice. At most one constraint per
// request; a malformed one is a 400 naming the field. Whether a schema or regex
// compiles is the constraint plugin's judgement, in Engine::submit() (also a 400).

#include <optional>

#include <nlohmann/json.hpp>

#include "core/engine/engine.h"

namespace pagedllm::server {

std::optional<OutputConstraint> parse_output_constraint(const nlohmann::json& request);

}  // namespace pagedllm::server
