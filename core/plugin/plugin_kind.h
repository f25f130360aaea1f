#pragma once

#include <optional>
#include <string_view>

#include "pagedllm/sdk/plugin.h"

namespace pagedllm {

// "attention", "model", "sampler", "speculator", "collectives", "constraint".
std::string_view plugin_kind_name(pllm_plugin_kind kind);

}  // namespace pagedllm
