// generation_config.json: the sampling defaults and EOS ids of a model directory.

#include <catch2/catch.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "core/engine/generation_config.h"
#include "tests/support/temp_dir.h"

namespace pagedllm {
namespace {

using Catch::Matchers::Contains;

std::string error_of(const std::string& json) {
  const testing::TempDir dir;
  dir.write("generation_config.json", json);
  try {
    read_generation_defaults(dir.path(), {}, std::nullopt);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  FAIL("expected a std::runtime_error");
  return {};
}

TEST_CASE("generation_config.json: defaults and EOS ids", "[generation_config]") {
  const testing::TempDir dir;
  dir.write("generation_config.json", R"({"temperature": 0.6, "top_p": 0.9, "top_k": 40, "eos_token_id": [2, 7]})");
  const std::vector<std::int32_t> model_eos{5};
  const GenerationDefaults d = read_generation_defaults(dir.path(), model_eos, 9);
  CHECK(d.temperature == 0.6f);
  CHECK(d.top_p == 0.9f);
  CHECK(d.top_k == 40);
  CHECK(d.eos_token_ids == std::vector<std::int32_t>{2, 7});
  const testing::TempDir empty;
  CHECK(read_generation_defaults(empty.path(), model_eos, 9).eos_token_ids == model_eos);
  CHECK(read_generation_defaults(empty.path(), {}, 9).eos_token_ids == std::vector<std::int32_t>{9});
}

TEST_CASE("generation_config.json: numbers it cannot hold are errors naming the file", "[generation_config]") {
  // Found by tools/fuzz (fuzz_model_config): a number JSON itself cannot hold escaped as
  // nlohmann's out_of_range instead of the documented runtime_error naming the file.
  CHECK_THAT(error_of(R"({"top_k": 6382e3082})"), Contains("generation_config.json: not valid JSON"));
  // Values the field's type cannot hold were converted anyway (undefined behaviour).
  CHECK_THAT(error_of(R"({"temperature": 1e300})"), Contains("'temperature' = 1e+300 is not a number in range"));
  CHECK_THAT(error_of(R"({"top_k": 1e20})"), Contains("'top_k'"));
  CHECK_THAT(error_of(R"({"top_k": 4.5})"), Contains("is not an integer number in range"));
  CHECK_THAT(error_of(R"({"eos_token_id": 4294967296})"), Contains("'eos_token_id' must be a token id"));
  CHECK_THAT(error_of(R"({"eos_token_id": [1, -3]})"), Contains("'eos_token_id' must be a token id"));
}

}  // namespace
}  // namespace pagedllm
