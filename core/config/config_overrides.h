#pragma once
// --set path.to.key=value: the value is parsed as YAML (so lists and mappings
// work: --set plugins.search_paths=[a,b]) and replaces that key in the config
// tree before validation, creating the mappings on the way when missing.

#include <string>

#include <yaml-cpp/yaml.h>

#include "core/config/source_map.h"

namespace pagedllm {

// Applies one override to `root` and records its origin. Throws ConfigError.
void apply_override(YAML::Node& root, const std::string& override_text, SourceMap& sources);

}  // namespace pagedllm
