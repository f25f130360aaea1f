#pragma once
// --set path.to.key=value: the value is parsed as YAML (so lists and mappings
// work: --set plugins.search_paths=[a,b]) and replaces that key in the config
// tree before validation, creating the mappings on the way when missing.

#include <filesystem>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/config/source_map.h"

namespace pagedllm {

// Applies one override to `root` and records its origin. Throws ConfigError.
void apply_override(YAML::Node& root, const std::string& override_text, SourceMap& sources);

// A YAML config file as its reader sees it: the tree with every --set applied and where each value came from.
struct ConfigDocument {
  YAML::Node root;
  SourceMap sources;
};

// Parses `yaml_text` (read from `file`, which names it in errors with line and column) and applies `overrides`
// in order. Throws ConfigError.
ConfigDocument parse_config_document(const std::string& yaml_text, const std::filesystem::path& file,
                                     const std::vector<std::string>& overrides);

// The text of config file `file`. Throws ConfigError naming it when it cannot be read.
std::string read_config_file(const std::filesystem::path& file);

}  // namespace pagedllm
