#include <catch2/catch.hpp>

#include <string>

#include "core/config/config.h"
#include "core/config/config_error.h"
#include "core/config/yaml_reader.h"

using namespace pagedllm;
using Catch::Matchers::Contains;

namespace {

const std::string kMinimal = R"(model:
  plugin: models_llama
  path: ../models/tiny
attention:
  plugin: attention_cpu
sampler:
  plugin: sampler
)";

std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_config(yaml, "/etc/pagedllm/test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  FAIL("expected a ConfigError");
  return {};
}

}  // namespace

TEST_CASE("a minimal config gets the documented defaults", "[config]") {
  const HostConfig c = parse_config(kMinimal, "/etc/pagedllm/test.yaml");
  CHECK(c.model.plugin.plugin == "models_llama");
  CHECK(c.model.path == "/etc/models/tiny");  // relative to the file's directory
  CHECK(c.model.dtype == "auto");
  CHECK(c.model.max_logprobs == 20);
  CHECK(c.device.str() == "cpu");
  CHECK(c.attention.options == nlohmann::json::object());
  CHECK(c.cache.block_size == 16);
  CHECK(c.cache.enable_prefix_caching);
  CHECK(c.cache.dtype == "auto");
  CHECK(c.scheduler.max_num_seqs == 256);
  CHECK(c.scheduler.max_num_batched_tokens == 8192);
  CHECK(c.scheduler.preemption_mode == PreemptionMode::kRecompute);
  CHECK(c.server.port == 8000);
  CHECK(c.server.api_keys.empty());
  CHECK(c.server.cors.allowed_origins.empty());
  CHECK_FALSE(c.speculative.has_value());
  CHECK(c.log_level == "info");
  CHECK_FALSE(parse_config(kMinimal + "speculative: {plugin: spec_eagle, draft: d}\n", "/etc/x.yaml")
                  .speculative->disable_by_batch_size.has_value());
}

TEST_CASE("every section is read into typed values", "[config]") {
  const HostConfig c = parse_config(kMinimal + R"(device: cuda:1
speculative:
  plugin: spec_eagle
  draft: /models/draft
  num_speculative_tokens: 3
  disable_by_batch_size: 16
cache: {block_size: 32, gpu_memory_utilization: 0.8, kv_cache_bytes: 2GiB, swap_space: 512MB, enable_prefix_caching: false,
        dtype: bf16}
scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, preemption_mode: swap, policy: priority}
server: {host: 0.0.0.0, port: 9000, api_key: secret}
plugins: {search_paths: [plugins, /opt/plugins]}
logging: {level: debug}
)",
                                      "/etc/pagedllm/test.yaml");
  CHECK(c.device.type == DeviceType::kCuda);
  CHECK(c.device.index == 1);
  REQUIRE(c.speculative.has_value());
  CHECK(c.speculative->plugin.plugin == "spec_eagle");
  CHECK(c.speculative->draft == "/models/draft");
  CHECK(c.speculative->num_speculative_tokens == 3);
  CHECK(c.speculative->disable_by_batch_size == std::optional<int>(16));
  CHECK(c.cache.block_size == 32);
  CHECK(c.cache.kv_cache_bytes == (2ull << 30));
  CHECK(c.cache.swap_space_bytes == 512'000'000ull);
  CHECK_FALSE(c.cache.enable_prefix_caching);
  CHECK(c.cache.dtype == "bf16");
  CHECK(c.scheduler.preemption_mode == PreemptionMode::kSwap);
  CHECK(c.scheduler.policy == SchedulingPolicy::kPriority);
  CHECK(c.server.api_keys == std::vector<std::string>{"secret"});
  CHECK(c.plugin_search_paths == std::vector<std::filesystem::path>{"/etc/pagedllm/plugins", "/opt/plugins"});
  CHECK(c.log_level == "debug");
}

TEST_CASE("plugin options are handed on as JSON with YAML's scalar types", "[config]") {
  const HostConfig c = parse_config(R"(model: {plugin: m, path: p}
attention:
  plugin: attention_cpu
  options:
    variant: reference
    num_threads: 2
    scale: 0.5
    flag: true
    quoted: "42"
    nested: {list: [1, two]}
sampler: {plugin: sampler}
)",
                                      "/x/c.yaml");
  const auto& o = c.attention.options;
  CHECK(o["variant"] == "reference");
  CHECK(o["num_threads"] == 2);
  CHECK(o["scale"] == 0.5);
  CHECK(o["flag"] == true);
  CHECK(o["quoted"] == "42");
  CHECK(o["nested"]["list"] == nlohmann::json::array({1, "two"}));
}

TEST_CASE("an unknown key names file, line, key path and a suggestion", "[config]") {
  const std::string message = config_error(kMinimal + "scheduler:\n  max_num_seq: 4\n");
  CHECK_THAT(message, Contains("/etc/pagedllm/test.yaml:9:3: scheduler.max_num_seq: unknown key"));
  CHECK_THAT(message, Contains("did you mean 'max_num_seqs'?"));

  const std::string top = config_error(kMinimal + "shceduler: {}\n");
  CHECK_THAT(top, Contains("test.yaml:8:1: shceduler: unknown key (did you mean 'scheduler'?)"));
}

TEST_CASE("wrong types are errors naming the key", "[config]") {
  CHECK_THAT(config_error(kMinimal + "scheduler: {max_num_seqs: many}\n"),
             Contains("scheduler.max_num_seqs: expected an integer, got \"many\""));
  CHECK_THAT(config_error(kMinimal + "scheduler: {max_num_seqs: \"8\"}\n"),
             Contains("scheduler.max_num_seqs: expected an integer"));
  CHECK_THAT(config_error(kMinimal + "cache: {enable_prefix_caching: yes}\n"),
             Contains("cache.enable_prefix_caching: expected true or false"));
  CHECK_THAT(config_error(kMinimal + "cache: [1, 2]\n"), Contains("cache: expected a mapping"));
  CHECK_THAT(config_error(kMinimal + "plugins: {search_paths: here}\n"),
             Contains("plugins.search_paths: expected a list"));
  CHECK_THAT(config_error(kMinimal + "cache: {kv_cache_bytes: lots}\n"), Contains("cache.kv_cache_bytes: expected a size"));
}

TEST_CASE("impossible values are errors naming the key", "[config]") {
  CHECK_THAT(config_error(kMinimal + "cache: {block_size: 0}\n"), Contains("cache.block_size: must be in [1, 1024], got 0"));
  CHECK_THAT(config_error(kMinimal + "cache: {block_size: 24}\n"), Contains("cache.block_size: must be a power of two"));
  CHECK_THAT(config_error(kMinimal + "cache: {gpu_memory_utilization: 1.5}\n"),
             Contains("cache.gpu_memory_utilization: must be in"));
  CHECK_THAT(config_error(kMinimal + "server: {port: 70000}\n"), Contains("server.port: must be in [0, 65535]"));
  CHECK_THAT(config_error(kMinimal + "speculative: {plugin: spec_eagle, draft: d, disable_by_batch_size: 0}\n"),
             Contains("speculative.disable_by_batch_size: must be in [1, 1048576], got 0"));
  CHECK_THAT(config_error(kMinimal + "device: gpu\n"), Contains("device: must be cpu, cuda or cuda:N"));
  CHECK_THAT(config_error(kMinimal + "scheduler: {preemption_mode: pause}\n"),
             Contains("scheduler.preemption_mode: must be one of recompute, swap"));
  CHECK_THAT(config_error(kMinimal + "cache: {dtype: fp8}\n"),
             Contains("test.yaml:8:9: cache.dtype: must be one of auto, f32, f16, bf16, got \"fp8\""));
  CHECK_THAT(config_error(kMinimal + "scheduler: {enable_chunked_prefill: false, max_model_len: 4096, "
                                     "max_num_batched_tokens: 1024}\n"),
             Contains("without chunked prefill a whole prompt must fit in one step"));
  CHECK_THAT(config_error(kMinimal + "server: {api_key: \"\"}\n"), Contains("server.api_key: must not be empty"));
  CHECK_THAT(config_error(kMinimal, {"model.max_logprobs=-2"}), Contains("model.max_logprobs: must be in [-1, "));
  CHECK(parse_config(kMinimal, "/etc/x.yaml", {"model.max_logprobs=-1"}).model.max_logprobs == -1);
}

TEST_CASE("the server section's limits and timeouts", "[config]") {
  const HostConfig defaults = parse_config(kMinimal, "/etc/pagedllm/test.yaml");
  CHECK(defaults.server.io_threads == 2);
  CHECK(defaults.server.max_request_body_bytes == (8ull << 20));
  CHECK(defaults.server.max_concurrent_requests == 1024);
  CHECK(defaults.server.keep_alive_timeout_s == 60.0);
  CHECK(defaults.server.request_timeout_s == 30.0);
  CHECK(defaults.server.send_timeout_s == 60.0);
  CHECK(defaults.server.shutdown_grace_period_s == 30.0);

  const HostConfig c = parse_config(kMinimal + R"(server:
  io_threads: 4
  max_request_body: 64KiB
  max_concurrent_requests: 100
  keep_alive_timeout_s: 5
  request_timeout_s: 2.5
  send_timeout_s: 10
  shutdown_grace_period_s: 0
)",
                                    "/etc/pagedllm/test.yaml");
  CHECK(c.server.io_threads == 4);
  CHECK(c.server.max_request_body_bytes == 65536);
  CHECK(c.server.max_concurrent_requests == 100);
  CHECK(c.server.keep_alive_timeout_s == 5.0);
  CHECK(c.server.request_timeout_s == 2.5);
  CHECK(c.server.send_timeout_s == 10.0);
  CHECK(c.server.shutdown_grace_period_s == 0.0);

  CHECK_THAT(config_error(kMinimal + "server: {io_threads: 0}\n"), Contains("server.io_threads: must be in [1, 256]"));
  CHECK_THAT(config_error(kMinimal + "server: {max_request_body: 100}\n"),
             Contains("server.max_request_body: must be at least 1KiB, got 100 bytes"));
  CHECK_THAT(config_error(kMinimal + "server: {max_concurrent_requests: 0}\n"),
             Contains("server.max_concurrent_requests: must be in"));
  CHECK_THAT(config_error(kMinimal + "server: {keep_alive_timeout_s: 0}\n"),
             Contains("server.keep_alive_timeout_s: must be in"));
  CHECK_THAT(config_error(kMinimal + "server: {send_timeout_s: soon}\n"), Contains("server.send_timeout_s"));
  CHECK_THAT(config_error(kMinimal + "server: {max_streams: 3}\n"), Contains("server.max_streams: unknown key"));
}

TEST_CASE("server.api_key takes one key or several, server.cors lists origins, none by default", "[config]") {
  HostConfig c = parse_config(kMinimal + "server: {api_key: [one, two]}\n", "/etc/x.yaml");
  CHECK(c.server.api_keys == std::vector<std::string>{"one", "two"});
  CHECK_THAT(config_error(kMinimal + "server: {api_key: []}\n"), Contains("server.api_key: is an empty list"));
  CHECK_THAT(config_error(kMinimal + "server: {api_key: [a, \"\"]}\n"), Contains("server.api_key: must not be empty"));
  CHECK_THAT(config_error(kMinimal + "server: {api_key: [a, b, a]}\n"),
             Contains("server.api_key: lists the same key twice (entries 0 and 2)"));
  c = parse_config(kMinimal + "server: {cors: {allowed_origins: [\"http://localhost:5173\", \"https://app.example\", "
                               "\"http://[::1]:8080\", \"*\"], max_age_s: 60}}\n",
                   "/etc/x.yaml");
  CHECK(c.server.cors.allowed_origins ==
        std::vector<std::string>{"http://localhost:5173", "https://app.example", "http://[::1]:8080", "*"});
  CHECK(c.server.cors.max_age_s == 60);
  for (const char* bad : {"localhost:5173", "http://app.example/", "https://app.example/path", "ftp://x", ""}) {
    INFO(bad);
    CHECK_THAT(config_error(kMinimal + "server: {cors: {allowed_origins: [\"" + bad + "\"]}}\n"),
               Contains("server.cors.allowed_origins: entry 0 '" + std::string(bad) + "' is not an origin"));
  }
  CHECK_THAT(config_error(kMinimal + "server: {cors: {allowed_origin: [x]}}\n"),
             Contains("server.cors.allowed_origin: unknown key (did you mean 'allowed_origins'?)"));
  CHECK(parse_config(kMinimal + "server: {reasoning_parser: qwen3}\n", "/etc/x.yaml").server.reasoning_parser ==
        "qwen3");
  CHECK(parse_config(kMinimal, "/etc/x.yaml").server.reasoning_parser == "none");
  CHECK_THAT(config_error(kMinimal + "server: {reasoning_parser: granite}\n"), Contains("server.reasoning_parser"));
}

TEST_CASE("required sections and keys are named when missing", "[config]") {
  CHECK_THAT(config_error("attention: {plugin: a}\nsampler: {plugin: s}\n"), Contains("model: is required"));
  CHECK_THAT(config_error("model: {plugin: m}\nattention: {plugin: a}\nsampler: {plugin: s}\n"),
             Contains("model.path: is required"));
  CHECK_THAT(config_error("model: {plugin: m, path: p}\nsampler: {plugin: s}\n"), Contains("attention: is required"));
}

TEST_CASE("malformed YAML is an error with its line", "[config]") {
  CHECK_THAT(config_error("model: {plugin: m\nattention: x\n"), Contains("/etc/pagedllm/test.yaml:"));
  CHECK_THAT(config_error("model: {plugin: m\nattention: x\n"), Contains("not valid YAML"));
  CHECK_THAT(config_error("- a\n- b\n"), Contains("expected a mapping"));
}

TEST_CASE("overrides given with --set replace values and are validated like the file", "[config][overrides]") {
  const HostConfig c = parse_config(kMinimal, "/etc/pagedllm/test.yaml",
                                    {"scheduler.max_num_seqs=64", "attention.options.variant=reference",
                                     "attention.plugin=other_attention", "plugins.search_paths=[a, /b]",
                                     "model.path=relative/model", "cache.dtype=bf16"});
  CHECK(c.scheduler.max_num_seqs == 64);
  CHECK(c.cache.dtype == "bf16");
  CHECK(c.attention.options["variant"] == "reference");
  CHECK(c.attention.plugin == "other_attention");
  // Paths given on the command line are relative to the working directory.
  CHECK(c.plugin_search_paths == std::vector<std::filesystem::path>{"a", "/b"});
  CHECK(c.model.path == "relative/model");

  CHECK_THAT(config_error(kMinimal, {"scheduler.max_num_seqs=0"}),
             Contains("--set scheduler.max_num_seqs=0: scheduler.max_num_seqs: must be in [1, 65536], got 0"));
  CHECK_THAT(config_error(kMinimal, {"cache.dtype=BF16"}),
             Contains("--set cache.dtype=BF16: cache.dtype: must be one of auto, f32, f16, bf16, got \"BF16\""));
  CHECK_THAT(config_error(kMinimal, {"cache.blok_size=8"}),
             Contains("--set cache.blok_size=8: cache.blok_size: unknown key (did you mean 'block_size'?)"));
  CHECK_THAT(config_error(kMinimal, {"no_equals_sign"}), Contains("expected path.to.key=value"));
  CHECK_THAT(config_error(kMinimal, {"a..b=1"}), Contains("is not a key path"));
  CHECK_THAT(config_error(kMinimal, {"model.plugin.name=x"}), Contains("'model.plugin' is not a mapping"));
  CHECK_THAT(config_error(kMinimal, {"cache.block_size=[1"}), Contains("the value is not valid YAML"));
  // Found by tools/fuzz (fuzz_config): a --set on a file whose top level is not a mapping threw
  // yaml-cpp's BadSubscript instead of a ConfigError.
  CHECK_THAT(config_error("just a scalar\n", {"cache.block_size=32"}),
             Contains("--set cache.block_size=32: the config's top level is not a mapping of sections"));
  CHECK_THAT(config_error("- a\n- b\n", {"cache.block_size=32"}), Contains("is not a mapping of sections"));
}

TEST_CASE("plugin options that are not valid UTF-8 are refused naming the key", "[config]") {
  // Found by tools/fuzz (fuzz_config): the engine hands options to plugins as JSON text, and
  // dump() threw nlohmann's type_error 316 on such a string (exit 1, no key named).
  const std::string yaml =
      "model:\n  plugin: models_llama\n  path: ../models/tiny\nsampler:\n  plugin: sampler\n"
      "attention:\n  plugin: attention_cpu\n  options:\n    variant: \"\xFD\xFE\"\n";
  CHECK_THAT(config_error(yaml), Contains("attention.options: holds text that is not valid UTF-8"));
  CHECK_THAT(config_error(kMinimal, {"sampler.options={a: \"\xC3\"}"}), Contains("sampler.options"));
}

TEST_CASE("the source map tells a key the config wrote from a default", "[config][overrides]") {
  // What decides whether cache.kv_cache_bytes overrides device-memory sizing.
  const std::string with_cache = kMinimal + "cache:\n  block_size: 8\n  kv_cache_bytes: 1MiB\n";
  CHECK(parse_config(with_cache, "/etc/pagedllm/test.yaml").sources.written("cache.kv_cache_bytes"));
  CHECK_FALSE(parse_config(kMinimal, "/etc/pagedllm/test.yaml").sources.written("cache.kv_cache_bytes"));
  // An ancestor in the file is not the key.
  const std::string block_size_only = kMinimal + "cache:\n  block_size: 8\n";
  CHECK_FALSE(parse_config(block_size_only, "/etc/pagedllm/test.yaml").sources.written("cache.kv_cache_bytes"));
  CHECK(parse_config(kMinimal, "/etc/pagedllm/test.yaml", {"cache.kv_cache_bytes=2MiB"})
            .sources.written("cache.kv_cache_bytes"));
  // A --set of a whole mapping writes the keys it holds and drops what the file wrote.
  const HostConfig replaced =
      parse_config(with_cache, "/etc/pagedllm/test.yaml", {"cache={block_size: 4, swap_space: 1MiB}"});
  CHECK(replaced.sources.written("cache.swap_space"));
  CHECK_FALSE(replaced.sources.written("cache.kv_cache_bytes"));
  CHECK(replaced.sources.locate("cache.swap_space") == "--set cache={block_size: 4, swap_space: 1MiB}");
}

TEST_CASE("byte sizes accept decimal and binary units", "[config]") {
  CHECK(parse_byte_size("1024") == 1024);
  CHECK(parse_byte_size("1KiB") == 1024);
  CHECK(parse_byte_size("1.5GiB") == 1610612736ull);
  CHECK(parse_byte_size("2 MB") == 2'000'000ull);
  CHECK_THROWS_WITH(parse_byte_size("2XB"), Contains("expected a size"));
  CHECK_THROWS_WITH(parse_byte_size("-1"), Contains("expected a size"));
}

TEST_CASE("the shipped configs are valid", "[config]") {
  const HostConfig serve = load_config(PAGEDLLM_SOURCE_DIR "/configs/serve.yaml");
  CHECK(serve.model.plugin.plugin == "models_llama");
  CHECK(serve.model.path.filename() == "SmolLM2-135M-Instruct.Q4_1.gguf");
  const HostConfig c = load_config(PAGEDLLM_SOURCE_DIR "/configs/tiny.yaml");
  CHECK(c.model.plugin.plugin == "models_llama");
  CHECK(c.model.path.filename() == "pagedllm-tiny");
  CHECK(c.attention.plugin == "attention_cpu");
  CHECK(c.model.path.is_absolute());
  const HostConfig cuda = load_config(PAGEDLLM_SOURCE_DIR "/configs/serve-cuda.yaml");
  CHECK(cuda.device.str() == "cuda:0");
  CHECK(cuda.attention.plugin == "attention_cuda");
  CHECK(cuda.model.dtype == "f32");
  CHECK(cuda.model.path == c.model.path);
  CHECK(cuda.cache.gpu_memory_utilization == 0.9);
  // The pool is sized from device memory, not from a byte budget.
  CHECK_FALSE(cuda.sources.written("cache.kv_cache_bytes"));
}

TEST_CASE("a missing config file is a clear error", "[config]") {
  CHECK_THROWS_WITH(load_config("/nonexistent/serve.yaml"),
                    Contains("/nonexistent/serve.yaml: cannot read the config file"));
}

TEST_CASE("parallel: tensor_parallel_size and the collectives backend, checked strictly", "[config]") {
  CHECK_FALSE(parse_config(kMinimal, "/etc/x.yaml").parallel.has_value());
  const HostConfig c = parse_config(kMinimal + "parallel: {tensor_parallel_size: 2, options: {timeout_seconds: 5}}\n",
                                    "/etc/x.yaml");
  REQUIRE(c.parallel.has_value());
  CHECK(c.parallel->tensor_parallel_size == 2);
  CHECK(c.parallel->backend == "mpi");  // the default on the CPU
  CHECK(c.parallel->collectives.plugin == "collectives_mpi");
  CHECK(c.parallel->collectives.key_path == "parallel");
  CHECK(c.parallel->collectives.options == nlohmann::json{{"timeout_seconds", 5}});
  const HostConfig cuda = parse_config(kMinimal + "device: cuda:0\nparallel: {tensor_parallel_size: 2}\n",
                                       "/etc/x.yaml");
  CHECK(cuda.parallel->collectives.plugin == "collectives_nccl");  // the default on CUDA

  CHECK_THAT(config_error(kMinimal + "parallel: {tensor_paralel_size: 2}\n"),
             Contains("parallel.tensor_paralel_size: unknown key (did you mean 'tensor_parallel_size'?)"));
  CHECK_THAT(config_error(kMinimal + "parallel: {tensor_parallel_size: 0}\n"),
             Contains("parallel.tensor_parallel_size"));
  CHECK_THAT(config_error(kMinimal + "parallel: {backend: gloo}\n"), Contains("parallel.backend: must be one of"));
  CHECK_THAT(config_error(kMinimal + "parallel: {backend: nccl}\n"),
             Contains("parallel.backend: nccl moves CUDA memory; device is cpu: use backend: mpi"));
  // mpi on CUDA: collectives_mpi stages the device buffers through host memory.
  const HostConfig staged = parse_config(kMinimal + "device: cuda\nparallel: {backend: mpi}\n", "/etc/x.yaml");
  CHECK(staged.parallel->collectives.plugin == "collectives_mpi");
  CHECK(staged.parallel->devices.empty());

  // A device per rank (several ranks may share one), CUDA only, one per rank.
  const HostConfig shared = parse_config(
      kMinimal + "device: cuda:0\nparallel: {tensor_parallel_size: 3, devices: [cuda:0, cuda:0, cuda:2]}\n",
      "/etc/x.yaml");
  REQUIRE(shared.parallel->devices.size() == 3);
  CHECK(shared.parallel->devices[1].str() == "cuda:0");
  CHECK(shared.parallel->devices[2].str() == "cuda:2");
  CHECK_THAT(config_error(kMinimal + "device: cuda\nparallel: {tensor_parallel_size: 2, devices: [cuda:0]}\n"),
             Contains("parallel.devices: names 1 devices for tensor_parallel_size 2: give one per rank"));
  CHECK_THAT(config_error(kMinimal + "device: cuda\nparallel: {tensor_parallel_size: 2, devices: [cuda:0, cpu]}\n"),
             Contains("parallel.devices: each must be cuda or cuda:N, got \"cpu\""));
  CHECK_THAT(config_error(kMinimal + "parallel: {tensor_parallel_size: 2, devices: [cuda:0, cuda:1]}\n"),
             Contains("parallel.devices: a device per rank is for CUDA ranks; device is cpu"));
}

TEST_CASE("model.chat_template: a built-in format's name or a Jinja file, relative to the config", "[config]") {
  const std::string with_format = R"(model:
  plugin: models_llama
  path: ../models/tiny
  chat_template: llama3
attention:
  plugin: attention_cpu
sampler:
  plugin: sampler
)";
  CHECK(parse_config(with_format, "/etc/x.yaml").model.chat_template == "llama3");
  CHECK_THAT(config_error(kMinimal, {"model.chat_template=/no/such/template.jinja"}),
             Contains("model.chat_template: '/no/such/template.jinja' is neither a Jinja file (no file at "
                      "/no/such/template.jinja) nor a built-in format"));
  // A file relative to the config file's directory.
  const std::string source_dir = PAGEDLLM_SOURCE_DIR;
  const std::string with_file = kMinimal.substr(0, kMinimal.find("attention:")) +
                                "  chat_template: tests/fixtures/tokenizer/texts.json\n" +
                                kMinimal.substr(kMinimal.find("attention:"));
  CHECK(parse_config(with_file, source_dir + "/serve.yaml").model.chat_template ==
        source_dir + "/tests/fixtures/tokenizer/texts.json");
}
