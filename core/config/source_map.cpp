#include "core/config/source_map.h"

#include <fmt/format.h>

namespace pagedllm {

std::string join_key_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

void SourceMap::record(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return;
  // yaml-cpp counts from 0; editors count from 1.
  origins_[path] = {fmt::format("{}:{}:{}", file_.string(), mark.line + 1, mark.column + 1), false};
}

void SourceMap::record_file_nodes(const YAML::Node& node, const std::string& path) {
  if (node.IsMap()) {
    for (const auto& item : node) {
      if (!item.first.IsScalar()) continue;
      const std::string child = join_key_path(path, item.first.Scalar());
      // A key's own position is where errors about it (unknown, wrong type) belong.
      record(child, item.first.Mark());
      record_file_nodes(item.second, child);
    }
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string element = fmt::format("{}[{}]", path, i);
      record(element, node[i].Mark());
      record_file_nodes(node[i], element);
    }
  }
}

void SourceMap::record_override(const std::string& path, const std::string& override_text,
                                const YAML::Node& value) {
  // Drop what the file said about this subtree: all of it comes from the override now.
  for (auto it = origins_.lower_bound(path); it != origins_.end() && it->first.starts_with(path);) {
    const char next = it->first.size() > path.size() ? it->first[path.size()] : '\0';
    if (next == '\0' || next == '.' || next == '[') {
      it = origins_.erase(it);
    } else {
      ++it;
    }
  }
  record_override_nodes(path, "--set " + override_text, value);
}

void SourceMap::record_override_nodes(const std::string& path, const std::string& where, const YAML::Node& node) {
  origins_[path] = {where, true};
  if (!node.IsMap()) return;
  for (const auto& item : node) {
    if (item.first.IsScalar()) record_override_nodes(join_key_path(path, item.first.Scalar()), where, item.second);
  }
}

const SourceMap::Origin* SourceMap::find(const std::string& path) const {
  std::string current = path;
  while (true) {
    if (auto it = origins_.find(current); it != origins_.end()) return &it->second;
    const auto cut = current.find_last_of(".[");
    if (cut == std::string::npos) return nullptr;
    current.resize(cut);
  }
}

std::string SourceMap::locate(const std::string& path) const {
  if (const Origin* origin = find(path)) return origin->where;
  return file_.string();
}

bool SourceMap::is_override(const std::string& path) const {
  const Origin* origin = find(path);
  return origin && origin->from_override;
}

}  // namespace pagedllm
