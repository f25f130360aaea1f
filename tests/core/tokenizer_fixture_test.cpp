// Encoding and decoding against HF: every expectation in tests/fixtures/tokenizer/ was
// produced by `tokenizers` / `transformers` (tools/tokenizer_fixtures/make_fixtures.py;
// the ctest tokenizer_fixtures_match_hf recomputes them with the installed HF packages).

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/tokenizer/tokenizer.h"
#include "tests/core/tokenizer_test_support.h"

namespace pagedllm::tokenizer {
namespace {

using testing::expected_cases;
using testing::expected_decodes;
using testing::fixture_dir;

TEST_CASE("encode equals HF tokenizers on every fixture", "[tokenizer][bpe]") {
  for (const char* name : testing::kHfFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    const auto cases = expected_cases(name);
    REQUIRE(cases.size() > 300);
    for (const auto& expected : cases) {
      INFO(name << ": text = " << expected.text);
      // encode_special_tokens=True: "<s>" in user text is text.
      CHECK(tokenizer.encode(expected.text, false, false) == expected.ids);
      // HF's default: special tokens in the text are recognised.
      CHECK(tokenizer.encode(expected.text, false, true) == expected.parsed);
      // transformers' AutoTokenizer(text): the post-processor as tokenizer_config.json sets it up.
      CHECK(tokenizer.encode(expected.text, true, true) == expected.with_special);
    }
  }
}

TEST_CASE("decode equals HF decode, with and without skip_special_tokens", "[tokenizer]") {
  for (const char* name : testing::kHfFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    for (const auto& expected : expected_cases(name)) {
      INFO(name << ": text = " << expected.text);
      CHECK(tokenizer.decode(expected.parsed, false) == expected.decoded);
      CHECK(tokenizer.decode(expected.parsed, true) == expected.skipped);
    }
    // Random ids: special tokens anywhere, byte tokens that cut characters (U+FFFD).
    const auto decodes = expected_decodes(name, "random_decodes");
    REQUIRE(decodes.size() >= 100);
    for (const auto& expected : decodes) {
      INFO(name << ": ids = " << nlohmann::json(expected.ids).dump());
      CHECK(tokenizer.decode(expected.ids, false) == expected.decoded);
      CHECK(tokenizer.decode(expected.ids, true) == expected.skipped);
    }
  }
}

TEST_CASE("add_special_tokens follows tokenizer_config.json like transformers", "[tokenizer]") {
  const Tokenizer llama2 = Tokenizer::from_model_dir(fixture_dir("spm_llama2"));
  CHECK(llama2.encode("") == std::vector<TokenId>{1});
  CHECK(llama2.bos_id() == 1);
  CHECK(llama2.eos_id() == 2);

  const Tokenizer llama3 = Tokenizer::from_model_dir(fixture_dir("bytelevel_llama3"));
  CHECK(llama3.encode("Hello").front() == *llama3.token_to_id("<|begin_of_text|>"));
  CHECK(llama3.eos_id() == llama3.token_to_id("<|eot_id|>"));

  const Tokenizer gpt2 = Tokenizer::from_model_dir(fixture_dir("bytelevel_gpt2"));
  CHECK(gpt2.encode("Hello") == gpt2.encode("Hello", false));
}

TEST_CASE("add_bos_token / add_eos_token per tokenizer class, as transformers applies them", "[tokenizer]") {
  // config_variants.json: tokenizer_config.json variants and AutoTokenizer(text)'s ids.
  const auto json = testing::read_json(std::string(PAGEDLLM_SOURCE_DIR) + "/tests/fixtures/tokenizer/config_variants.json");
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "pagedllm_tokenizer_config_variants";
  std::filesystem::create_directories(dir);
  std::size_t checked = 0;
  for (const auto& variant : json.at("variants")) {
    std::filesystem::copy_file(fixture_dir(variant.at("fixture").get<std::string>()) + "/tokenizer.json",
                               dir / "tokenizer.json", std::filesystem::copy_options::overwrite_existing);
    std::ofstream(dir / "tokenizer_config.json") << variant.at("config").dump();
    const Tokenizer tokenizer = Tokenizer::from_model_dir(dir.string());
    for (const auto& expected : variant.at("cases")) {
      INFO(variant.at("fixture").get<std::string>() << " with " << variant.at("config").dump() << ": '"
                                                     << expected.at("text").get<std::string>() << "'");
      CHECK(tokenizer.encode(expected.at("text").get<std::string>(), true, true) ==
            expected.at("ids").get<std::vector<TokenId>>());
      ++checked;
    }
  }
  std::filesystem::remove_all(dir);
  CHECK(checked >= 20);
}

TEST_CASE("the tokenizer.json post-processor applies without tokenizer_config.json", "[tokenizer]") {
  const Tokenizer llama2 = Tokenizer::from_file(fixture_dir("spm_llama2") + "/tokenizer.json");
  std::vector<TokenId> with_bos = {1};
  const std::vector<TokenId> plain = llama2.encode("Hello", false);
  with_bos.insert(with_bos.end(), plain.begin(), plain.end());
  CHECK(llama2.encode("Hello") == with_bos);
  CHECK_FALSE(llama2.bos_id().has_value());
}

TEST_CASE("ignore_merges takes whole words from the vocabulary", "[tokenizer][bpe]") {
  const Tokenizer llama3 = Tokenizer::from_model_dir(fixture_dir("bytelevel_llama3"));
  // "Ġpagedllm" was added to the vocabulary without merges that build it.
  const std::vector<TokenId> ids = llama3.encode(" pagedllm", false);
  REQUIRE(ids.size() == 1);
  CHECK(ids[0] == *llama3.token_to_id("Ġpagedllm"));
}

}  // namespace
}  // namespace pagedllm::tokenizer
