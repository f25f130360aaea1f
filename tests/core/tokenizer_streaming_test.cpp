// Incremental detokenization and stop strings.

#include <catch2/catch.hpp>

#include <random>

#include "core/tokenizer/incremental_detokenizer.h"
#include "core/tokenizer/stop_matcher.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/tokenizer/utf8.h"
#include "tests/core/tokenizer_test_support.h"

namespace pagedllm::tokenizer {
namespace {

// Streams `ids` through a detokenizer; every chunk must be valid UTF-8.
std::string stream(const Tokenizer& tokenizer, std::span<const TokenId> ids, bool skip_special,
                   std::span<const TokenId> prompt = {}) {
  IncrementalDetokenizer detokenizer(tokenizer, skip_special, prompt);
  std::string out;
  for (const TokenId id : ids) {
    const std::string chunk = detokenizer.push(id);
    REQUIRE_FALSE(utf8::find_invalid(chunk).has_value());
    out += chunk;
  }
  out += detokenizer.finish();
  CHECK(detokenizer.emitted() == out);
  return out;
}

const std::vector<std::string> kTexts = {
    "Hello world! I'm streaming text.",
    " leading space and  double  spaces ",
    "你好，世界！🙂🚀 emoji and ünïcödé",
    "def f(x):\n    return x * 2\n\n\tdone",
    "Приветствую! αβγ ٣٤٥ 😀😀😀",
    "\n\n",
};

TEST_CASE("streaming equals full decode for every prefix", "[detokenize]") {
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir(name));
    for (const std::string& text : kTexts) {
      const std::vector<TokenId> ids = tokenizer.encode(text, true);
      for (std::size_t length = 0; length <= ids.size(); ++length) {
        const std::span<const TokenId> prefix(ids.data(), length);
        INFO(name << ": '" << text << "' prefix " << length);
        REQUIRE(stream(tokenizer, prefix, false) == tokenizer.decode(prefix, false));
        REQUIRE(stream(tokenizer, prefix, true) == tokenizer.decode(prefix, true));
      }
    }
  }
}

TEST_CASE("streaming equals HF decode of every prefix and of random id sequences", "[detokenize]") {
  // The expectations are transformers' decode (make_fixtures.py): text with special tokens
  // and characters cut by single byte tokens spliced in, and random ids.
  for (const char* name : testing::kHfFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir(name));
    const auto streams = testing::expected_decodes(name, "streams");
    REQUIRE(streams.size() >= 5);
    for (const auto& expected : streams) {
      REQUIRE(expected.prefixes.size() == expected.ids.size() + 1);
      for (std::size_t length = 0; length <= expected.ids.size(); ++length) {
        const std::span<const TokenId> prefix(expected.ids.data(), length);
        INFO(name << ": " << nlohmann::json(expected.ids).dump() << " prefix " << length);
        CHECK(stream(tokenizer, prefix, false) == expected.prefixes[length]);
      }
      INFO(name << ": " << nlohmann::json(expected.ids).dump());
      CHECK(stream(tokenizer, expected.ids, true) == expected.skipped);
    }
    for (const auto& expected : testing::expected_decodes(name, "random_decodes")) {
      INFO(name << ": " << nlohmann::json(expected.ids).dump());
      CHECK(stream(tokenizer, expected.ids, false) == expected.decoded);
      CHECK(stream(tokenizer, expected.ids, true) == expected.skipped);
    }
  }
}

TEST_CASE("streaming handles special tokens and random id sequences", "[detokenize]") {
  std::mt19937 rng(7);
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir(name));
    std::uniform_int_distribution<TokenId> any_id(0, static_cast<TokenId>(tokenizer.vocab_size()) - 1);
    for (int round = 0; round < 200; ++round) {
      // Real text ids with random tokens (specials, stray bytes) spliced in.
      std::vector<TokenId> ids = tokenizer.encode(kTexts[static_cast<std::size_t>(round) % kTexts.size()], false);
      for (int extra = 0; extra < 3; ++extra) {
        const auto at = std::uniform_int_distribution<std::size_t>(0, ids.size())(rng);
        ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(at), any_id(rng));
      }
      INFO(name << ": round " << round);
      for (const bool skip : {false, true}) {
        REQUIRE(stream(tokenizer, ids, skip) == tokenizer.decode(ids, skip));
      }
    }
  }
}

TEST_CASE("streaming after a prompt keeps the leading space of the first token", "[detokenize]") {
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir(name));
    const std::vector<TokenId> prompt = tokenizer.encode("The answer is", true);
    const std::vector<TokenId> all = tokenizer.encode("The answer is 42, you see.", true);
    REQUIRE(std::equal(prompt.begin(), prompt.end(), all.begin()));
    const std::span<const TokenId> generated(all.data() + prompt.size(), all.size() - prompt.size());
    INFO(name);
    CHECK(tokenizer.decode(prompt) + stream(tokenizer, generated, false, prompt) == tokenizer.decode(all));
    CHECK(stream(tokenizer, generated, false, prompt) == " 42, you see.");
  }
}

TEST_CASE("a multi-byte character is held back until complete", "[detokenize]") {
  const Tokenizer tokenizer = Tokenizer::from_model_dir(testing::fixture_dir("bytelevel_gpt2"));
  // U+10348 is not in the training corpus: four byte tokens in this small vocabulary.
  const std::vector<TokenId> ids = tokenizer.encode("\U00010348", false);
  REQUIRE(ids.size() > 1);
  IncrementalDetokenizer detokenizer(tokenizer, false);
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) CHECK(detokenizer.push(ids[i]).empty());
  CHECK(detokenizer.push(ids.back()) == "\U00010348");
}

std::string run_stops(StopMatcher& matcher, const std::vector<std::string>& chunks, bool* stopped) {
  std::string out;
  *stopped = false;
  for (const std::string& chunk : chunks) {
    const StopMatch match = matcher.push(chunk);
    out += match.text;
    if (match.stopped) {
      *stopped = true;
      return out;
    }
  }
  return out + matcher.finish();
}

TEST_CASE("stop strings match across chunk boundaries and hold back partial matches", "[stop]") {
  StopMatcher matcher({"\n\nUser:", "</answer>"});
  StopMatch match = matcher.push("The answer");
  CHECK(match.text == "The answer");
  match = matcher.push(" is 4.\n");
  CHECK(match.text == " is 4.");  // "\n" may start "\n\nUser:"
  match = matcher.push("\nUs");
  CHECK(match.text.empty());
  match = matcher.push("er: next");
  CHECK(match.stopped);
  CHECK(match.stop_index == 0u);
  CHECK(match.text.empty());
  CHECK(matcher.push("more").text.empty());

  bool stopped = false;
  StopMatcher false_start({"</answer>"});
  CHECK(run_stops(false_start, {"a </ans", "wer is not", " here"}, &stopped) == "a </answer is not here");
  CHECK_FALSE(stopped);

  StopMatcher earliest({"bc", "abcd"});
  CHECK(run_stops(earliest, {"xab", "cd"}, &stopped) == "xa");
  CHECK(stopped);

  StopMatcher including({"END"}, true);
  CHECK(run_stops(including, {"done E", "N", "D tail"}, &stopped) == "done END");

  StopMatcher unicode({"。"});
  CHECK(run_stops(unicode, {"你好", "\xE3\x80\x82", "x"}, &stopped) == "你好");

  CHECK_THROWS_AS(StopMatcher({""}), TokenizerError);
}

TEST_CASE("unchecked text (min_tokens) matches no stop string, one ending after it still counts", "[stop]") {
  StopMatcher matcher({"END", "ab"});
  CHECK(matcher.push_unchecked("xEND") == "xEND");  // no stop string starts at its end: nothing held
  CHECK(matcher.push_unchecked("a") == "");                // "a" may start "ab": held back
  StopMatch match = matcher.push("b tail");               // "ab" ends in checked text
  CHECK(match.stopped);
  CHECK(match.stop_index == 1u);
  CHECK(match.text == "");

  StopMatcher inner({"abcd", "bc"});
  CHECK(inner.push_unchecked("abc") == "");  // a prefix of "abcd", holding all of "bc"
  bool stopped = false;
  CHECK(run_stops(inner, {"x"}, &stopped) == "abcx");  // "bc" ended in unchecked text
  CHECK_FALSE(stopped);
}

TEST_CASE("stop matcher on random chunkings equals a whole-text search", "[stop]") {
  std::mt19937 rng(11);
  const std::vector<std::string> stops = {"abab", "ba", "cc"};
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const auto length = std::uniform_int_distribution<int>(0, 20)(rng);
    for (int i = 0; i < length; ++i) text.push_back("abcd"[std::uniform_int_distribution<int>(0, 3)(rng)]);
    // The first stop string to complete, scanning the text left to right.
    std::size_t expected_end = text.size();
    std::size_t completion = SIZE_MAX;
    for (const std::string& stop : stops) {
      const std::size_t position = text.find(stop);
      if (position == std::string::npos) continue;
      if (position + stop.size() < completion || (position + stop.size() == completion && position < expected_end)) {
        completion = position + stop.size();
        expected_end = position;
      }
    }
    std::vector<std::string> chunks;
    for (std::size_t pos = 0; pos < text.size();) {
      const auto size = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
      chunks.push_back(text.substr(pos, size));
      pos += size;
    }
    StopMatcher matcher(stops);
    bool stopped = false;
    INFO(text);
    CHECK(run_stops(matcher, chunks, &stopped) == text.substr(0, expected_end));
    CHECK(stopped == (expected_end != text.size()));
  }
}

}  // namespace
}  // namespace pagedllm::tokenizer
