#pragma once
// generation_config.json of an HF model directory: the sampling defaults the
// model was released with and its end-of-sequence tokens.

#include <filesystem>
#include <span>

#include "core/engine/engine.h"

namespace pagedllm {

// Reads `model_dir`/generation_config.json when present. EOS ids: the file's
// eos_token_id (an id or a list), else `model_eos_ids` (config.json, as the
// model plugin reports them), else `tokenizer_eos`. Throws std::runtime_error
// naming the file for malformed JSON or wrongly typed fields.
GenerationDefaults read_generation_defaults(const std::filesystem::path& model_dir,
                                            std::span<const std::int32_t> model_eos_ids,
                                            std::optional<std::int32_t> tokenizer_eos);

}  // namespace pagedllm
