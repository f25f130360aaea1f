// Encoding against ids computed independently when the fixtures were built:
// sentencepiece's own encoder (spm_llama2) and a plain Python BPE with the
// `regex` module doing the GPT-2 / Llama-3 splits (bytelevel_*).

#include <catch2/catch.hpp>

#include "core/tokenizer/tokenizer.h"
#include "tests/core/tokenizer_test_support.h"

namespace pagedllm::tokenizer {
namespace {

using testing::expected_cases;
using testing::fixture_dir;

TEST_CASE("encode matches the independent reference ids on every fixture", "[tokenizer][bpe]") {
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    const auto cases = expected_cases(name);
    REQUIRE(cases.size() > 80);
    for (const auto& expected : cases) {
      INFO(name << ": text = " << expected.text);
      CHECK(tokenizer.encode(expected.text, false) == expected.ids);
    }
  }
}

TEST_CASE("decode inverts encode on the fixture texts", "[tokenizer]") {
  for (const char* name : testing::kFixtureNames) {
    const Tokenizer tokenizer = Tokenizer::from_model_dir(fixture_dir(name));
    for (const auto& expected : expected_cases(name)) {
      INFO(name << ": text = " << expected.text);
      CHECK(tokenizer.decode(expected.ids) == expected.text);
    }
  }
}

TEST_CASE("add_special_tokens adds BOS per the post-processor and config", "[tokenizer]") {
  const Tokenizer llama2 = Tokenizer::from_model_dir(fixture_dir("spm_llama2"));
  CHECK(llama2.encode("Hello") == std::vector<TokenId>{1, 952, 1048, 319, 538});
  CHECK(llama2.encode("") == std::vector<TokenId>{1});
  CHECK(llama2.bos_id() == 1);
  CHECK(llama2.eos_id() == 2);

  const Tokenizer llama3 = Tokenizer::from_model_dir(fixture_dir("bytelevel_llama3"));
  const TokenId begin_of_text = *llama3.token_to_id("<|begin_of_text|>");
  const std::vector<TokenId> plain = llama3.encode("Hello", false);
  std::vector<TokenId> with_bos = {begin_of_text};
  with_bos.insert(with_bos.end(), plain.begin(), plain.end());
  CHECK(llama3.encode("Hello") == with_bos);
  CHECK(llama3.eos_id() == llama3.token_to_id("<|eot_id|>"));

  const Tokenizer gpt2 = Tokenizer::from_model_dir(fixture_dir("bytelevel_gpt2"));
  CHECK(gpt2.encode("Hello") == gpt2.encode("Hello", false));
}

TEST_CASE("the tokenizer.json post-processor applies without tokenizer_config.json", "[tokenizer]") {
  const Tokenizer llama2 = Tokenizer::from_file(fixture_dir("spm_llama2") + "/tokenizer.json");
  CHECK(llama2.encode("Hello") == std::vector<TokenId>{1, 952, 1048, 319, 538});
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
