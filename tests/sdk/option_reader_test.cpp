#include <catch2/catch.hpp>

#include "pagedllm/sdk/cpp/options.hpp"
#include "tests/support/thrown.h"

using Catch::Matchers::Contains;

namespace {

pllm::Error error_of(const std::function<void()>& body) { return pagedllm::testing::thrown<pllm::Error>(body); }

}  // namespace

TEST_CASE("OptionReader reads typed values with defaults", "[sdk][options]") {
  const auto json = nlohmann::json::parse(R"({"n": 3, "x": 0.5, "flag": true, "name": "a", "big": 5000000000})");
  pllm::OptionReader r(json);
  CHECK(r.get<int>("n", 0) == 3);
  CHECK(r.get<double>("x", 0) == 0.5);
  CHECK(r.get<double>("n", 0) == 3.0);  // an integer is a valid number
  CHECK(r.get<bool>("flag", false));
  CHECK(r.get<std::string>("name", "") == "a");
  CHECK(r.get<int>("absent", 7) == 7);
  CHECK(r.get<std::int64_t>("big", 0) == 5000000000);
  r.finish();
}

TEST_CASE("OptionReader rejects out-of-range and mistyped values", "[sdk][options]") {
  const auto json = nlohmann::json::parse(R"({"big": 5000000000, "neg": -1, "s": "1", "f": 1.5})");
  pllm::OptionReader r(json);
  CHECK_THAT(error_of([&] { r.get<int>("big", 0); }).what(), Contains("out of range"));
  CHECK_THAT(error_of([&] { r.get<unsigned>("neg", 0); }).what(), Contains("out of range"));
  CHECK_THAT(error_of([&] { r.get<int>("s", 0); }).what(), Contains("expected an integer"));
  CHECK_THAT(error_of([&] { r.get<int>("f", 0); }).what(), Contains("expected an integer"));
  CHECK_THAT(error_of([&] { r.get_in_range<double>("f", 0, 0, 1); }).what(), Contains("must be in [0"));
  CHECK_THAT(error_of([&] { r.require<int>("missing"); }).what(), Contains("missing: is required"));
}

TEST_CASE("OptionReader checks nested mappings with full key paths", "[sdk][options]") {
  const auto json = nlohmann::json::parse(R"({"kernel": {"tile": 64, "tiel": 1}})");
  pllm::OptionReader r(json);
  auto kernel = r.child("kernel");
  CHECK(kernel.get<int>("tile", 0) == 64);
  const auto e = error_of([&] { kernel.finish(); });
  CHECK(e.key() == "kernel.tiel");
  CHECK_THAT(e.what(), Contains("did you mean 'tile'?"));
  r.finish();  // "kernel" itself was read
}
