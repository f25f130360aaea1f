#pragma once
// Shared helpers for the tokenizer tests: fixture paths, the expectations HF
// `tokenizers` / `transformers` produced for them (tools/tokenizer_fixtures/make_fixtures.py),
// and the Python standard library as a large text corpus.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
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

// The fixtures whose decode(encode(x)) gives x back for any text (no normalizer,
// no <unk>): the round-trip and streaming property tests run on these.
inline const char* const kFixtureNames[] = {"spm_llama2", "bytelevel_gpt2", "bytelevel_llama3"};
// Every fixture with HF expectations.
inline const char* const kHfFixtureNames[] = {"spm_llama2",       "spm_metaspace",   "bytelevel_gpt2",
                                              "bytelevel_llama3", "bytelevel_qwen2", "bytelevel_normalized"};

inline std::string fixture_dir(const std::string& name) {
  return std::string(PAGEDLLM_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + name;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

inline nlohmann::json read_json(const std::string& path) {
  const std::string text = read_file(path);
  if (text.empty()) throw std::runtime_error(path + " is missing or empty");
  return nlohmann::json::parse(text);
}

// One test text and what HF made of it (make_fixtures.py's docstring defines the fields).
struct ExpectedCase {
  std::string text;
  std::vector<TokenId> ids;           // special tokens in the text are plain text
  std::vector<TokenId> parsed;        // special tokens in the text recognised
  std::vector<TokenId> with_special;  // AutoTokenizer(text): parsed + the post-processor's tokens
  std::string decoded;                // decode(parsed)
  std::string skipped;                // decode(parsed, skip_special_tokens=True)
};

inline std::vector<ExpectedCase> expected_cases(const std::string& name) {
  const auto texts = read_json(std::string(PAGEDLLM_SOURCE_DIR) + "/tests/fixtures/tokenizer/texts.json").at("texts");
  const auto json = read_json(fixture_dir(name) + "/expected.json").at("cases");
  if (texts.size() != json.size()) throw std::runtime_error(name + ": expected.json and texts.json differ in length");
  std::vector<ExpectedCase> cases;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto& entry = json[i];
    ExpectedCase expected;
    expected.text = texts[i].get<std::string>();
    expected.ids = entry.at("ids").get<std::vector<TokenId>>();
    expected.parsed = entry.at("parsed").is_null() ? expected.ids : entry.at("parsed").get<std::vector<TokenId>>();
    expected.with_special = entry.at("special").at(0).get<std::vector<TokenId>>();
    expected.with_special.insert(expected.with_special.end(), expected.parsed.begin(), expected.parsed.end());
    for (const auto& id : entry.at("special").at(1)) expected.with_special.push_back(id.get<TokenId>());
    expected.decoded = entry.at("decoded").is_null() ? expected.text : entry.at("decoded").get<std::string>();
    expected.skipped = entry.at("skipped").is_null() ? expected.decoded : entry.at("skipped").get<std::string>();
    cases.push_back(std::move(expected));
  }
  return cases;
}

// Id sequences (random ones, and text with specials and cut characters spliced in) and
// HF's decode of them.
struct ExpectedDecode {
  std::vector<TokenId> ids;
  std::string decoded;
  std::string skipped;
  std::vector<std::string> prefixes;  // decode(ids[:n]) for n = 0..size (streams only)
};

inline std::vector<ExpectedDecode> expected_decodes(const std::string& name, const char* section) {
  std::vector<ExpectedDecode> decodes;
  const nlohmann::json json = read_json(fixture_dir(name) + "/expected.json");
  for (const auto& entry : json.at(section)) {
    ExpectedDecode expected;
    expected.ids = entry.at("ids").get<std::vector<TokenId>>();
    expected.skipped = entry.at("skipped").get<std::string>();
    if (entry.contains("prefixes")) {
      expected.prefixes = entry.at("prefixes").get<std::vector<std::string>>();
      expected.decoded = expected.prefixes.back();
    } else {
      expected.decoded = entry.at("decoded").get<std::string>();
    }
    decodes.push_back(std::move(expected));
  }
  return decodes;
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
