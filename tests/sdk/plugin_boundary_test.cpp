// The C++ helpers seen from the host: options are validated strictly, every
// exception inside a plugin becomes a status and a message, and the plugin's
// log lines arrive in the host's log under the plugin's name.

#include <catch2/catch.hpp>

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/ringbuffer_sink.h>

#include "core/common/logging.h"
#include "core/plugin/host_services.h"
#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk/cpp/struct_check.hpp"
#include "tests/support/temp_dir.h"

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
  pllm_sample_row row{sizeof(row), &params, nullptr, 0, nullptr, 0, 0, 0, 0, 0};
  const pllm_tensor logits_tensor{sizeof(pllm_tensor), logits, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, 2, {1, 2}, {2, 1}};
  pllm_sample_batch batch{sizeof(batch), 1, sizeof(row), &row, &logits_tensor, nullptr, 0, nullptr};
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

namespace {
void ignore_log(void*, pllm_log_level, const char*) {}
int32_t log_nothing(void*, pllm_log_level) { return 0; }
void ignore_progress(void*, const char*, uint64_t, uint64_t) {}
}  // namespace

TEST_CASE("a plugin accepts host services of a newer minor and refuses a table without 2.0's", "[sdk][boundary]") {
  // A private copy of the fixture, so re-initialising it leaves the registry's copy alone.
  testing::TempDir dir;
  std::filesystem::copy_file(std::filesystem::path(PAGEDLLM_FIXTURE_PLUGIN_DIR) / "fixture_sampler.so",
                             dir.path() / "fixture_sampler.so");
  // Declared before the library: it must outlive the plugin's shutdown.
  struct NextMinorHost {
    pllm_host_api current;
    void (*added_in_next_minor)(void*);
  } newer{{sizeof(NextMinorHost), nullptr, "test", &ignore_log, &log_nothing, &ignore_progress}, nullptr};
  const auto plugin = PluginLibrary::load(dir.path() / "fixture_sampler.so");
  pllm_error error{};
  CHECK(plugin->descriptor().init(&newer.current, &error) == PLLM_OK);

  pllm_host_api old = newer.current;
  old.struct_size = offsetof(pllm_host_api, progress);
  const pllm_status status = plugin->descriptor().init(&old, &error);
  CHECK(status == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(error.message, Contains("fixture_sampler: init: host services: struct_size " +
                                     std::to_string(offsetof(pllm_host_api, progress)) + " is too small"));
}

TEST_CASE("host services may be called from several plugin threads at once", "[sdk][threads]") {
  // The contract (sdk/README.md, "Threads and reentrancy"); the TSan build checks the locking.
  HostServices services("threaded_plugin");
  const pllm_host_api* host = services.api();
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  logger("threaded_plugin")->sinks().push_back(ring);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([host, t] {
      const std::string task = "task " + std::to_string(t);
      for (uint64_t i = 0; i <= 100; ++i) {
        host->progress(host->context, task.c_str(), i, 100);
        if (host->log_enabled(host->context, PLLM_LOG_DEBUG)) host->log(host->context, PLLM_LOG_DEBUG, "step");
      }
      host->log(host->context, PLLM_LOG_INFO, ("done " + task).c_str());
    });
  }
  for (auto& thread : threads) thread.join();
  logger("threaded_plugin")->sinks().pop_back();
  // Each task logs its own tenths (0%, 10%, ..., 100%) however the threads interleave: 4 x 11 + 4 lines fit the ring.
  int done = 0;
  std::map<std::string, int> progress_lines;
  for (const std::string& line : ring->last_formatted()) {
    done += line.find("done task") != std::string::npos;
    for (int t = 0; t < 4; ++t) {
      const std::string task = "task " + std::to_string(t) + ": ";
      progress_lines[task] += line.find(task) != std::string::npos;
    }
  }
  CHECK(done == 4);
  for (const auto& [task, lines] : progress_lines) {
    INFO(task);
    CHECK(lines == 11);
  }
}

namespace {
// pllm_attention_layer_args as a 2.1 might declare it: 2.0's fields, then one appended.
struct LayerArgs_2_1 {
  uint32_t struct_size;
  const pllm_tensor* query;
  const pllm_tensor* key;
  const pllm_tensor* value;
  const pllm_tensor* output;
  float scale;
  void* stream;
  const pllm_tensor* key_scales;  // appended in the next minor
};
static_assert(offsetof(LayerArgs_2_1, stream) == offsetof(pllm_attention_layer_args, stream));
}  // namespace

TEST_CASE("PLLM_HAS_FIELD: a field appended after the filler's minor reads as absent", "[sdk][versioning]") {
  // A 2.0 model plugin fills the struct (struct_size = 2.0's sizeof: its fields end with stream); a 2.1
  // backend reads it.
  LayerArgs_2_1 seen_by_2_1{};
  seen_by_2_1.struct_size = offsetof(pllm_attention_layer_args, stream) + sizeof(void*);
  CHECK(PLLM_HAS_FIELD(LayerArgs_2_1, &seen_by_2_1, stream));
  CHECK_FALSE(PLLM_HAS_FIELD(LayerArgs_2_1, &seen_by_2_1, key_scales));

  // A 2.1 model plugin fills it; a 2.0 backend reads its 2.0 fields and nothing more.
  struct {
    pllm_attention_layer_args current;
    const pllm_tensor* key_scales;
  } from_2_1{};
  from_2_1.current.struct_size = sizeof from_2_1;
  CHECK(pllm::has_2_0_fields(from_2_1.current));

  // One that lacks a 2.0 field is refused by name.
  pllm_attention_layer_args too_small{};
  too_small.struct_size = offsetof(pllm_attention_layer_args, stream);
  CHECK_FALSE(pllm::has_2_0_fields(too_small));
  CHECK_THROWS_WITH(pllm::require(&too_small, "backend: layer args"),
                    Contains("backend: layer args: struct_size " +
                             std::to_string(offsetof(pllm_attention_layer_args, stream)) + " is too small"));
}
