#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "core/plugin/abi_table.h"
#include "core/plugin/plugin_error.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "tests/support/temp_dir.h"

using namespace pagedllm;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = PAGEDLLM_FIXTURE_PLUGIN_DIR;

const std::string kHost = kHostSdkVersion.str();
const std::string kNewerMinor = SdkVersion{kHostSdkVersion.major, kHostSdkVersion.minor + 1}.str();
const std::string kOtherMajor = SdkVersion{kHostSdkVersion.major + 1, kHostSdkVersion.minor}.str();

std::string load_error(PluginRegistry& registry, const std::string& name, pllm_plugin_kind kind) {
  try {
    registry.load(name, kind, "sampler.plugin");
  } catch (const PluginLoadError& e) {
    return e.what();
  }
  FAIL("expected PluginLoadError loading " << name);
  return {};
}

}  // namespace

TEST_CASE("a plugin loads by name from the search paths", "[plugin_registry]") {
  testing::TempDir empty;
  PluginRegistry registry({empty.path(), kFixtures});
  auto plugin = registry.load("fixture_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  CHECK(plugin->name() == "fixture_sampler");
  CHECK(plugin->version() == "1.2.3");
  CHECK(plugin->kind() == PLLM_PLUGIN_KIND_SAMPLER);
  CHECK(plugin->sdk_version() == kHostSdkVersion);
  CHECK(plugin->file() == kFixtures / "fixture_sampler.so");
  CHECK(plugin->api<pllm_sampler_api>().sample != nullptr);
}

TEST_CASE("a plugin loads by explicit path, and a file is loaded once", "[plugin_registry]") {
  PluginRegistry registry({});
  auto by_path = registry.load((kFixtures / "fixture_sampler.so").string(), PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  auto again = registry.load((kFixtures / "." / "fixture_sampler.so").string(), PLLM_PLUGIN_KIND_SAMPLER, "x");
  CHECK(by_path.get() == again.get());
}

TEST_CASE("an instance keeps its library loaded after the registry is gone", "[plugin_registry]") {
  SamplerInstance sampler;
  {
    PluginRegistry registry({kFixtures});
    auto plugin = registry.load("fixture_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
    pllm_sampler_create_args args{sizeof(args), "{}", {PLLM_DEVICE_CPU, 0}};
    sampler = create_plugin_instance<pllm_sampler_api, pllm_sampler>(plugin, args);
  }
  // The registry and every other reference are gone; the code must still be mapped.
  float logits[] = {0.f, 3.f, 1.f};
  pllm_sampling_params params{};
  pllm_sample_row row{sizeof(row), &params, nullptr, 0, nullptr, 0, 0, 0, 0, 0};
  const pllm_tensor logits_tensor{sizeof(pllm_tensor), logits, PLLM_DTYPE_F32, {PLLM_DEVICE_CPU, 0}, 2, {1, 3}, {3, 1}};
  pllm_sample_batch batch{sizeof(batch), 1, sizeof(row), &row, &logits_tensor, nullptr, 0, nullptr};
  int32_t token = -1;
  float logprob = 0;
  pllm_sample_output out{sizeof(out), &token, &logprob, 0, nullptr, nullptr, nullptr};
  pllm_error error{};
  REQUIRE(sampler.api().sample(sampler.get(), &batch, &out, &error) == PLLM_OK);
  CHECK(token == 1);
}

TEST_CASE("a plugin that is not found names the directories searched", "[plugin_registry]") {
  testing::TempDir a, b;
  PluginRegistry registry({a.path(), b.path()});
  const std::string message = load_error(registry, "no_such_plugin", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("plugin 'no_such_plugin' not found"));
  CHECK_THAT(message, Contains(a.path().string()));
  CHECK_THAT(message, Contains(b.path().string()));
  CHECK_THAT(message, Contains("plugins.search_paths"));
}

TEST_CASE("a plugin built against an older minor loads", "[plugin_registry][versioning]") {
  // This host emulates the next minor; the fixture was built against the current one.
  PluginRegistry registry({kFixtures}, SdkVersion{kHostSdkVersion.major, kHostSdkVersion.minor + 1});
  auto plugin = registry.load("fixture_raw_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  CHECK(plugin->sdk_version() == kHostSdkVersion);
  CHECK(plugin->api<pllm_sampler_api>().sample != nullptr);
}

namespace {
// The sampler table as a next minor might declare it: SDK 2.0's slots, then one more.
struct NextMinorSamplerApi {
  uint32_t struct_size;
  decltype(pllm_sampler_api::create) create;
  decltype(pllm_sampler_api::destroy) destroy;
  decltype(pllm_sampler_api::sample) sample;
  decltype(pllm_sampler_api::probabilities) probabilities;
  void (*added_in_next_minor)(void);
};
}  // namespace

TEST_CASE("slots appended after a plugin's minor read as absent", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  auto plugin = registry.load("fixture_raw_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  const pllm_sampler_api& current = plugin->api<pllm_sampler_api>();
  REQUIRE(current.struct_size == sizeof(pllm_sampler_api));
  const auto next = pad_table_to_host_layout<NextMinorSamplerApi>(&current);
  CHECK(next.sample == current.sample);
  CHECK(next.probabilities == current.probabilities);
  CHECK(next.added_in_next_minor == nullptr);
}

TEST_CASE("a table shorter than the plugin's SDK allows is refused", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_short_table", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("declares a function table of"));
  CHECK_THAT(message, Contains("corrupt or was not built with the pagedllm SDK"));
}

TEST_CASE("a plugin of the host's own version loads", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  auto plugin = registry.load("fixture_raw_sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  CHECK(plugin->api<pllm_sampler_api>().probabilities != nullptr);
}

TEST_CASE("a plugin built against a newer minor is refused with both versions", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_newer_minor", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains((kFixtures / "fixture_newer_minor.so").string()));
  CHECK_THAT(message, Contains("built against pagedllm SDK " + kNewerMinor));
  CHECK_THAT(message, Contains("this host's SDK " + kHost));
  CHECK_THAT(message, Contains("Upgrade the host"));
}

TEST_CASE("a plugin built against SDK 1.x is refused by this SDK 2 host", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_sdk_1_1", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains((kFixtures / "fixture_sdk_1_1.so").string()));
  CHECK_THAT(message, Contains("plugin 'fixture_sdk_1_1' was built against pagedllm SDK 1.1, but this host implements "
                               "SDK " + kHost + "; a host loads only plugins of its own major version 2"));
  CHECK_THAT(message, Contains("Rebuild the plugin against SDK 2.x"));
}

TEST_CASE("a descriptor without SDK 2.0's fields is refused", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_short_descriptor", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("plugin 'fixture_short_descriptor': its descriptor is"));
  CHECK_THAT(message, Contains("too small for the fields SDK 2.0 defines"));
}

TEST_CASE("an unknown plugin kind is refused, not a crash", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  CHECK_THAT(load_error(registry, "fixture_unknown_kind", PLLM_PLUGIN_KIND_SAMPLER),
             Contains("plugin 'fixture_unknown_kind' declares an unknown kind 99"));
  CHECK_THAT(load_error(registry, "fixture_sentinel_kind", PLLM_PLUGIN_KIND_SAMPLER),
             Contains("plugin 'fixture_sentinel_kind' declares an unknown kind 2147483647"));
}

TEST_CASE("a plugin of another major is refused with both versions", "[plugin_registry][versioning]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_other_major", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("built against pagedllm SDK " + kOtherMajor));
  CHECK_THAT(message, Contains("this host implements SDK " + kHost));
  CHECK_THAT(message, Contains("Rebuild the plugin"));
}

TEST_CASE("a plugin of the wrong kind is refused", "[plugin_registry]") {
  PluginRegistry registry({kFixtures});
  std::string message;
  try {
    registry.load("fixture_sampler", PLLM_PLUGIN_KIND_ATTENTION, "attention.plugin");
  } catch (const PluginLoadError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("plugin 'fixture_sampler' is a sampler plugin, but attention.plugin needs an "
                               "attention plugin"));
}

TEST_CASE("a shared object without the entry symbol is refused", "[plugin_registry]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_no_entry", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("fixture_no_entry.so"));
  CHECK_THAT(message, Contains("does not export 'pagedllm_plugin_entry'"));
  CHECK_THAT(message, Contains("PAGEDLLM_PLUGIN"));
}

TEST_CASE("a file that is not an ELF shared object is refused", "[plugin_registry]") {
  testing::TempDir dir;
  const auto text = dir.write("text_file.so", "this is not a shared library\n");
  const auto empty = dir.write("empty.so", "");
  PluginRegistry registry({dir.path()});
  for (const auto& name : {"text_file", "empty"}) {
    const std::string message = load_error(registry, name, PLLM_PLUGIN_KIND_SAMPLER);
    CHECK_THAT(message, Contains(std::string(name) + ".so"));
    CHECK_THAT(message, Contains("not an ELF shared object"));
  }
  // An executable is ELF but not a shared object.
  PluginRegistry exe_registry({});
  std::string message;
  try {
    exe_registry.load(PAGEDLLM_BINARY_DIR "/bin/pagedllm-host", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  } catch (const PluginLoadError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains("is an executable program, not an ELF shared object"));
}

TEST_CASE("a plugin whose init fails is refused with its message", "[plugin_registry]") {
  PluginRegistry registry({kFixtures});
  const std::string message = load_error(registry, "fixture_init_fails", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("plugin 'fixture_init_fails' failed to initialise"));
  CHECK_THAT(message, Contains("no compatible device was found"));
}

TEST_CASE("a file named for one plugin holding another is refused", "[plugin_registry]") {
  testing::TempDir dir;
  fs::copy_file(kFixtures / "fixture_sampler.so", dir.path() / "impostor.so");
  PluginRegistry registry({dir.path()});
  const std::string message = load_error(registry, "impostor", PLLM_PLUGIN_KIND_SAMPLER);
  CHECK_THAT(message, Contains("named for plugin 'impostor' but the plugin inside calls itself 'fixture_sampler'"));
}

TEST_CASE("a plugin loaded by path whose file is named for another plugin is refused naming both", "[plugin_registry]") {
  testing::TempDir dir;
  fs::copy_file(kFixtures / "fixture_sampler.so", dir.path() / "renamed.so");
  PluginRegistry registry({});
  const std::string path = (dir.path() / "renamed.so").string();
  std::string message;
  try {
    registry.load(path, PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
  } catch (const PluginLoadError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Contains(path + ": the file is named for plugin 'renamed' but the plugin inside calls itself "
                               "'fixture_sampler'"));
  CHECK_THAT(message, Contains("Rename the file to fixture_sampler.so"));
  CHECK_THAT(message, !Contains("in the config"));  // by path, renaming the file is the fix
}
