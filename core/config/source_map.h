#pragma once
// Where each key of the configuration came from: a line of the config file or
// a --set override. Errors found long after parsing (a plugin rejecting one of
// its options) can still point at the line to fix.

#include <filesystem>
#include <map>
#include <string>

#include <yaml-cpp/yaml.h>

namespace pagedllm {

class SourceMap {
 public:
  SourceMap() = default;
  explicit SourceMap(std::filesystem::path file) : file_(std::move(file)) {}

  // Records the position of `node` and everything under it, keyed by dotted path.
  void record_file_nodes(const YAML::Node& node, const std::string& path);
  // Marks `path` and everything under it as coming from a --set override whose
  // value is `value` (the keys of a mapping value count as written by it).
  void record_override(const std::string& path, const std::string& override_text, const YAML::Node& value);

  // "serve.yaml:12:5" for a key from the file, "--set a.b=c" for an override,
  // falling back to the nearest ancestor path, then to the file itself.
  std::string locate(const std::string& path) const;
  // True when `path` (or an ancestor) was set by --set.
  bool is_override(const std::string& path) const;
  // True when the file or a --set wrote this very key, not only an ancestor:
  // what tells a value the user chose from a default.
  bool written(const std::string& path) const { return origins_.contains(path); }

  const std::filesystem::path& file() const { return file_; }

 private:
  struct Origin {
    std::string where;
    bool from_override = false;
  };
  const Origin* find(const std::string& path) const;
  void record(const std::string& path, const YAML::Mark& mark);
  void record_override_nodes(const std::string& path, const std::string& where, const YAML::Node& node);

  std::filesystem::path file_;
  std::map<std::string, Origin> origins_;
};

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_key_path(const std::string& parent, const std::string& key);

}  // namespace pagedllm
