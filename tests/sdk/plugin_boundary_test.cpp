// The C++ helpers seen from the host: options are validated strictly, every
// exception inside a plugin becomes a status and a message, and the plugin's
// log lines arrive in the host's log under the plugin's name.

#include <catch2/catch.hpp>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "core/common/logging.h"
#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"

using namespace pagedllm;
using Catch::Matchers::Contains;

namespace {

std::shared_ptr<PluginLibrary> load_fixture_sampler() {
  static PluginRegistry registry({PAGEDLLM_FIXTURE_PLUGIN_DIR});
  return registry.load("fixture_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
}

SamplerInstance create_sampler(const std::string& options_json) {
  pllm_sampler_create_args args{sizeof(args), options_json.c_str(), {PLLM_DEVICE_CPU, 0}};
  return create_plugin_instance<pllm_sampler_api, pllm_sampler>(load_fixture_sampler(), args);
}

struct Validation {
  pllm_status status;
  std::string message;
  std::string key;
};

Validation validate(const std::string& options_json) {
  pllm_error error{};
  const pllm_status status = load_fixture_sampler()->descriptor().validate_options(options_json.c_str(), &error);
  return {status, error.message, error.key};
}

}  // namespace

TEST_CASE("valid options are accepted", "[sdk][options]") {
  CHECK(validate("{}").status == PLLM_OK);
  CHECK(validate("null").status == PLLM_OK);
  CHECK(validate(R"({"tie_break": "highest", "fail_on_sample": false})").status == PLLM_OK);
}

TEST_CASE("an unknown option is rejected with its key and a suggestion", "[sdk][options]") {
  const auto v = validate(R"({"tie_brake": "highest"})");
  CHECK(v.status == PLLM_ERROR_INVALID_CONFIG);
  CHECK(v.key == "tie_brake");
  CHECK_THAT(v.message, Contains("unknown option (did you mean 'tie_break'?)"));
}

TEST_CASE("an option of the wrong type or value is rejected with its key", "[sdk][options]") {
  auto v = validate(R"({"fail_on_sample": "yes"})");
  CHECK(v.status == PLLM_ERROR_INVALID_CONFIG);
  CHECK(v.key == "fail_on_sample");
  CHECK_THAT(v.message, Contains("expected true or false"));

  v = validate(R"({"tie_break": "random"})");
  CHECK(v.key == "tie_break");
  CHECK_THAT(v.message, Contains("must be one of lowest, highest"));

  v = validate("{not json");
  CHECK(v.status == PLLM_ERROR_INVALID_CONFIG);
  CHECK_THAT(v.message, Contains("not valid JSON"));

  v = validate("[1, 2]");
  CHECK(v.status == PLLM_ERROR_INVALID_CONFIG);
  CHECK_THAT(v.message, Contains("must be a mapping"));
}

TEST_CASE("create with bad options fails cleanly", "[sdk][options]") {
  try {
    create_sampler(R"({"tie_brake": 1})");
    FAIL("create should have failed");
  } catch (const PluginCallError& e) {
    CHECK(e.status() == PLLM_ERROR_INVALID_CONFIG);
    CHECK(e.key() == "tie_brake");
    CHECK_THAT(e.what(), Contains("plugin 'fixture_sampler': create failed (invalid config)"));
  }
}

TEST_CASE("an exception inside a plugin becomes a status and a message", "[sdk][boundary]") {
  auto sampler = create_sampler(R"({"fail_on_sample": true})");
  float logits[] = {1.f, 2.f};
  pllm_sampling_params params{};
  pllm_sample_row row{sizeof(row), &params, nullptr, 0, nullptr, 0, 0, 0};
  const pllm_tensor logits_tensor{logits, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, 2, {1, 2}, {2, 1}};
  pllm_sample_batch batch{sizeof(batch), 1, sizeof(row), &row, &logits_tensor};
  int32_t token = -1;
  float logprob = 0;
  pllm_sample_output out{sizeof(out), &token, &logprob, 0, nullptr, nullptr, nullptr};
  pllm_error error{};
  CHECK(sampler.api().sample(sampler.get(), &batch, &out, &error) == PLLM_ERROR_INTERNAL);
  CHECK(std::string(error.message) == "sample failed on purpose");
}

TEST_CASE("a plugin's own refusal keeps its status", "[sdk][boundary]") {
  pllm_sampler_create_args args{sizeof(args), "{}", {PLLM_DEVICE_CUDA, 0}};
  try {
    create_plugin_instance<pllm_sampler_api, pllm_sampler>(load_fixture_sampler(), args);
    FAIL("create should have failed");
  } catch (const PluginCallError& e) {
    CHECK(e.status() == PLLM_ERROR_UNSUPPORTED);
    CHECK_THAT(e.what(), Contains("runs on the CPU only"));
  }
}

TEST_CASE("a plugin's log lines reach the host's log under its name", "[sdk][logging]") {
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  auto plugin_logger = logger("fixture_sampler");
  plugin_logger->sinks().push_back(ring);
  auto sampler = create_sampler(R"({"tie_break": "highest"})");
  plugin_logger->sinks().pop_back();
  const auto lines = ring->last_formatted();
  REQUIRE(!lines.empty());
  CHECK_THAT(lines.back(), Contains("fixture sampler created (tie_break=highest)"));
  CHECK_THAT(lines.back(), Contains("fixture_sampler"));
}
