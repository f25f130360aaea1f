#include "core/config/config_overrides.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "core/config/config_error.h"

namespace pagedllm {

namespace {

std::vector<std::string> split_key_path(const std::string& path, const std::string& override_text) {
  std::vector<std::string> keys;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string key = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) {
      throw ConfigError(fmt::format("--set {}: '{}' is not a key path like scheduler.max_num_seqs",
                                    override_text, path));
    }
    keys.push_back(key);
    if (dot == std::string::npos) return keys;
    start = dot + 1;
  }
}

}  // namespace

void apply_override(YAML::Node& root, const std::string& override_text, SourceMap& sources) {
  const std::size_t eq = override_text.find('=');
  if (eq == std::string::npos) {
    throw ConfigError(fmt::format("--set {}: expected path.to.key=value", override_text));
  }
  const std::string path = override_text.substr(0, eq);
  const std::vector<std::string> keys = split_key_path(path, override_text);

  YAML::Node value;
  try {
    value = YAML::Load(override_text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("--set {}: the value is not valid YAML: {}", override_text, e.msg));
  }

  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // A file whose top level is a scalar or a list has no keys to set (yaml-cpp would throw its own BadSubscript).
  if (!root.IsMap()) {
    throw ConfigError(fmt::format("--set {}: the config's top level is not a mapping of sections, so it has no key '{}'",
                                  override_text, keys.front()));
  }
  // yaml-cpp nodes are references: walking with reset() keeps `root` intact.
  YAML::Node current;
  current.reset(root);
  std::string walked;
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    walked = walked.empty() ? keys[i] : walked + "." + keys[i];
    YAML::Node next = current[keys[i]];
    if (!next.IsDefined() || next.IsNull()) {
      current[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next.reset(current[keys[i]]);
    } else if (!next.IsMap()) {
      throw ConfigError(fmt::format("--set {}: '{}' is not a mapping, so it has no key '{}'", override_text,
                                    walked, keys[i + 1]));
    }
    current.reset(next);
  }
  current[keys.back()] = value;
  sources.record_override(path, override_text, value);
}

ConfigDocument parse_config_document(const std::string& yaml_text, const std::filesystem::path& file,
                                     const std::vector<std::string>& overrides) {
  ConfigDocument document{YAML::Node(), SourceMap(file)};
  try {
    document.root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}:{}:{}: not valid YAML: {}", file.string(), e.mark.line + 1, e.mark.column + 1,
                                  e.msg));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: not valid YAML: {}", file.string(), e.msg));
  }
  document.sources.record_file_nodes(document.root, "");
  for (const std::string& override_text : overrides) apply_override(document.root, override_text, document.sources);
  return document;
}

std::string read_config_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the config file: {}", file.string(), std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace pagedllm
