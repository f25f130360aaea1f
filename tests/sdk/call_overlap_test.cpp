// The C++ wrapper's check that calls on one plugin instance never overlap
// (sdk/README.md, "Threads and reentrancy"), seen through the C table as the
// host sees it. This target is compiled with PAGEDLLM_CHECK_CALL_OVERLAP=1 (the
// Debug default), so the environment variable is what turns it off. A plugin
// class lives in this executable; its sample() blocks until the test lets it
// go, so the second call deterministically arrives while the first runs.

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "pagedllm/sdk.hpp"

using Catch::Matchers::Contains;

namespace {

// Set by the test: sample() announces that it runs, then waits for release.
std::atomic<bool> sample_running{false};
std::atomic<bool> release_sample{false};

class BlockingSampler : public pllm::SamplerPlugin {
 public:
  struct Options {
    static Options parse(pllm::OptionReader&) { return {}; }
  };
  BlockingSampler(const Options&, const pllm_sampler_create_args&) {}
  void sample(const pllm_sample_batch&, pllm_sample_output&) {
    sample_running = true;
    while (!release_sample) std::this_thread::yield();
    sample_running = false;
  }
  void probabilities(const pllm_sample_batch&, const pllm_probabilities_output&) {}
};

void no_log(void*, pllm_log_level, const char*) {}
int32_t never(void*, pllm_log_level) { return 0; }
void no_progress(void*, const char*, uint64_t, uint64_t) {}

struct Probe {
  const pllm_plugin_descriptor* descriptor = nullptr;
  const pllm_sampler_api* api = nullptr;
  pllm_sampler* instance = nullptr;
  pllm_host_api host{sizeof(pllm_host_api), nullptr, "test", &no_log, &never, &no_progress};

  // Initialises the plugin (which reads PAGEDLLM_CHECK_CALL_OVERLAP) and creates an instance.
  explicit Probe(const char* overlap_setting) {
    if (overlap_setting) {
      setenv("PAGEDLLM_CHECK_CALL_OVERLAP", overlap_setting, 1);
    } else {
      unsetenv("PAGEDLLM_CHECK_CALL_OVERLAP");
    }
    descriptor = pllm::detail::descriptor<BlockingSampler>("blocking_sampler", "0.0.1", "test");
    api = static_cast<const pllm_sampler_api*>(descriptor->kind_api);
    pllm_error error{};
    REQUIRE(descriptor->init(&host, &error) == PLLM_OK);
    pllm_sampler_create_args args{sizeof(args), "{}", {PLLM_DEVICE_CPU, 0}};
    REQUIRE(api->create(&args, &instance, &error) == PLLM_OK);
  }
  ~Probe() {
    api->destroy(instance);
    descriptor->shutdown();
  }

  // Starts a sample() on another thread that blocks until released; returns its status.
  std::future<pllm_status> start_blocking_sample() {
    release_sample = false;
    auto running = std::async(std::launch::async, [this] {
      pllm_sample_batch batch{};
      pllm_sample_output out{};
      pllm_error error{};
      return api->sample(instance, &batch, &out, &error);
    });
    while (!sample_running) std::this_thread::yield();
    return running;
  }
};

}  // namespace

TEST_CASE("a call overlapping another on the same instance fails naming the plugin and both calls",
          "[sdk][threads]") {
  Probe probe(nullptr);  // the build's default: on
  auto first = probe.start_blocking_sample();

  pllm_error error{};
  pllm_probabilities_output probs{};
  probs.struct_size = sizeof probs;
  pllm_sample_batch batch{};
  const pllm_status status = probe.api->probabilities(probe.instance, &batch, &probs, &error);
  CHECK(status == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(error.message, Contains("plugin 'blocking_sampler': probabilities() was called on an instance while its "
                                     "sample() was still running"));
  CHECK_THAT(error.message, Contains("Threads and reentrancy"));

  // The running call is undisturbed, and once it returned the instance takes calls again.
  release_sample = true;
  CHECK(first.get() == PLLM_OK);
  CHECK(probe.api->probabilities(probe.instance, &batch, &probs, &error) == PLLM_OK);
}

TEST_CASE("calls on different instances may run at the same time", "[sdk][threads]") {
  Probe probe(nullptr);
  pllm_sampler* other = nullptr;
  pllm_error error{};
  pllm_sampler_create_args args{sizeof(args), "{}", {PLLM_DEVICE_CPU, 0}};
  REQUIRE(probe.api->create(&args, &other, &error) == PLLM_OK);
  auto first = probe.start_blocking_sample();
  pllm_probabilities_output probs{};
  probs.struct_size = sizeof probs;
  pllm_sample_batch batch{};
  CHECK(probe.api->probabilities(other, &batch, &probs, &error) == PLLM_OK);
  release_sample = true;
  CHECK(first.get() == PLLM_OK);
  probe.api->destroy(other);
}

TEST_CASE("PAGEDLLM_CHECK_CALL_OVERLAP=0 turns the check off", "[sdk][threads]") {
  Probe probe("0");
  auto first = probe.start_blocking_sample();
  pllm_error error{};
  pllm_probabilities_output probs{};
  probs.struct_size = sizeof probs;
  pllm_sample_batch batch{};
  CHECK(probe.api->probabilities(probe.instance, &batch, &probs, &error) == PLLM_OK);
  release_sample = true;
  CHECK(first.get() == PLLM_OK);
}
