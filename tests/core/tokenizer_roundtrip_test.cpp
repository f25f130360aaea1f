// Large-scale properties: the optimized merge loop agrees with a plain
// reference BPE, and decode(encode(x)) == x over the Python standard library
// and random Unicode. Also prints encode throughput (never asserted).

#include <catch2/catch.hpp>

#include <chrono>
#include <iostream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "core/tokenizer/json_fields.h"
#include "core/tokenizer/pre_tokenizer.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/utf8.h"
#include "tests/core/tokenizer_test_support.h"

namespace pagedllm::tokenizer {
namespace {

using testing::fixture_dir;

// The textbook BPE: merge the lowest-ranked adjacent pair (leftmost on ties)
// until no pair has a merge. Quadratic, obviously correct.
class ReferenceBpe {
 public:
  explicit ReferenceBpe(const nlohmann::json& model) : ignore_merges_(model.value("ignore_merges", false)) {
    for (const auto& [token, id] : model.at("vocab").items()) vocab_[token] = id.get<TokenId>();
    std::size_t rank = 0;
    for (const auto& merge : model.at("merges")) {
      std::pair<std::string, std::string> pair;
      if (merge.is_string()) {
        const std::string line = merge.get<std::string>();
        pair = {line.substr(0, line.find(' ')), line.substr(line.find(' ') + 1)};
      } else {
        pair = {merge[0].get<std::string>(), merge[1].get<std::string>()};
      }
      ranks_.emplace(pair, rank++);
    }
  }

  std::vector<TokenId> encode_word(const std::string& word) const {
    if (ignore_merges_ && vocab_.count(word) != 0) return {vocab_.at(word)};
    std::vector<std::string> symbols;
    for (std::size_t pos = 0; pos < word.size();) {
      const std::size_t length = utf8::sequence_length(static_cast<unsigned char>(word[pos]));
      symbols.push_back(word.substr(pos, length));
      pos += length;
    }
    while (true) {
      std::size_t best_rank = SIZE_MAX;
      std::size_t best_position = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        const auto it = ranks_.find({symbols[i], symbols[i + 1]});
        if (it != ranks_.end() && it->second < best_rank) {
          best_rank = it->second;
          best_position = i;
        }
      }
      if (best_rank == SIZE_MAX) break;
      symbols[best_position] += symbols[best_position + 1];
      symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_position) + 1);
    }
    std::vector<TokenId> ids;
    for (const std::string& symbol : symbols) ids.push_back(vocab_.at(symbol));
    return ids;
  }

 private:
  bool ignore_merges_;
  std::map<std::string, TokenId> vocab_;
  std::map<std::pair<std::string, std::string>, std::size_t> ranks_;
};

TEST_CASE("the merge loop agrees with the reference BPE on the Python stdlib", "[tokenizer][bpe]") {
  const std::size_t stride = testing::kSanitizedBuild ? 40 : 4;
  for (const char* name : {"bytelevel_gpt2", "bytelevel_llama3"}) {
    const std::string path = fixture_dir(name) + "/tokenizer.json";
    const auto json = nlohmann::json::parse(testing::read_file(path));
    const ReferenceBpe reference(json.at("model"));
    const auto pre_tokenizer = make_pre_tokenizer(json.at("pre_tokenizer"), JsonPlace(path, "pre_tokenizer"));
    const Tokenizer tokenizer = Tokenizer::from_file(path);
    std::size_t words = 0;
    for (const auto& file : testing::stdlib_files(stride)) {
      const std::string text = testing::read_file(file);
      if (utf8::find_invalid(text)) continue;
      std::vector<PreToken> pieces{{text, true}};
      pre_tokenizer->pre_tokenize(pieces);
      std::vector<TokenId> expected;
      for (const PreToken& piece : pieces) {
        const std::vector<TokenId> ids = reference.encode_word(piece.text);
        expected.insert(expected.end(), ids.begin(), ids.end());
      }
      words += pieces.size();
      INFO(name << ": " << file.string());
      // Sources never spell the fixture's special tokens, so parsing is moot.
      REQUIRE(tokenizer.encode(text, false, true) == expected);
    }
    CHECK(words > 10'000);
  }
}

TEST_CASE("decode(encode(x)) == x over the Python standard library", "[tokenizer]") {
  const auto files = testing::stdlib_files(testing::kSanitizedBuild ? 25 : 1);
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    std::size_t bytes = 0;
    std::size_t tokens = 0;
    std::chrono::duration<double> encode_time{0};
    for (const auto& file : files) {
      const std::string text = testing::read_file(file);
      if (utf8::find_invalid(text)) continue;
      const auto start = std::chrono::steady_clock::now();
      const std::vector<TokenId> ids = tokenizer.encode(text, false);
      encode_time += std::chrono::steady_clock::now() - start;
      bytes += text.size();
      tokens += ids.size();
      INFO(name << ": " << file.string());
      REQUIRE(tokenizer.decode(ids) == text);
    }
    std::cout << "[tokenizer] " << name << ": encoded " << files.size() << " stdlib files, " << bytes / 1e6
              << " MB -> " << tokens << " tokens at " << bytes / 1e6 / encode_time.count() << " MB/s\n";
  }
}

std::string random_unicode(std::mt19937& rng, std::size_t length) {
  // Mostly ASCII and common scripts, some astral and control characters.
  std::uniform_int_distribution<int> bucket(0, 9);
  std::string text;
  for (std::size_t i = 0; i < length; ++i) {
    char32_t c = 0;
    switch (bucket(rng)) {
      case 0: case 1: case 2: c = std::uniform_int_distribution<char32_t>(0x20, 0x7E)(rng); break;
      case 3: c = U" \n\t\r"[std::uniform_int_distribution<int>(0, 3)(rng)]; break;
      case 4: c = std::uniform_int_distribution<char32_t>(0x00, 0x7F)(rng); break;
      case 5: c = std::uniform_int_distribution<char32_t>(0x80, 0x7FF)(rng); break;
      case 6: c = std::uniform_int_distribution<char32_t>(0x4E00, 0x9FFF)(rng); break;
      case 7: c = std::uniform_int_distribution<char32_t>(0x800, 0xD7FF)(rng); break;
      case 8: c = std::uniform_int_distribution<char32_t>(0xE000, 0xFFFF)(rng); break;
      default: c = std::uniform_int_distribution<char32_t>(0x10000, 0x10FFFF)(rng); break;
    }
    // U+2581 is SentencePiece's space marker: it decodes to ' ' by design.
    if (c == 0x2581) c = 'x';
    utf8::append(text, c);
  }
  return text;
}

TEST_CASE("decode(encode(x)) == x for random Unicode", "[tokenizer]") {
  std::mt19937 rng(20240611);
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    for (int round = 0; round < 300; ++round) {
      const std::string text = random_unicode(rng, std::uniform_int_distribution<std::size_t>(0, 60)(rng));
      INFO(name << ": round " << round);
      REQUIRE(tokenizer.decode(tokenizer.encode(text, false)) == text);
      REQUIRE(tokenizer.decode(tokenizer.encode(text, true), true) == text);
    }
  }
}

}  // namespace
}  // namespace pagedllm::tokenizer
