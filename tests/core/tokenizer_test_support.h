#pragma once
// Shared helpers for the tokenizer tests: fixture paths, expected cases and
// the Python standard library as a large text corpus.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tokenizer/token_id.h"
#include "core/tokenizer/tokenizer.h"

namespace pagedllm::tokenizer::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitizedBuild = true;
#else
inline constexpr bool kSanitizedBuild = false;
#endif

inline const char* const kFixtureNames[] = {"spm_llama2", "bytelevel_gpt2", "bytelevel_llama3"};

inline std::string fixture_dir(const std::string& name) {
  return std::string(PAGEDLLM_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

struct ExpectedCase {
  std::string text;
  std::vector<TokenId> ids;
};

inline std::vector<ExpectedCase> expected_cases(const std::string& name) {
  const auto json = nlohmann::json::parse(read_file(fixture_dir(name) + "/expected.json"));
  std::vector<ExpectedCase> cases;
  for (const auto& entry : json.at("cases")) {
    cases.push_back({entry.at("text").get<std::string>(), entry.at("ids").get<std::vector<TokenId>>()});
  }
  return cases;
}

// The .py files of the Python standard library (sorted), every `stride`-th one.
inline std::vector<std::filesystem::path> stdlib_files(std::size_t stride = 1) {
  std::vector<std::filesystem::path> files;
  const std::filesystem::path root = "/usr/lib/python3.11";
  if (!std::filesystem::exists(root)) return files;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    if (entry.is_regular_file() && entry.path().extension() == ".py") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<std::filesystem::path> sampled;
  for (std::size_t i = 0; i < files.size(); i += stride) sampled.push_back(files[i]);
  return sampled;
}

}  // namespace pagedllm::tokenizer::testing
