// pagedllm-host as an operator runs it: exit codes, messages, --check output.

#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "pagedllm/sdk/version.h"
#include "tests/server/child_process.h"
#include "tests/server/http_test_client.h"
#include "tests/support/run_command.h"

using pagedllm::testing::run_command;
using pagedllm::testing::TempDir;
using Catch::Matchers::Contains;

namespace {

const std::string kHost = PAGEDLLM_BINARY_DIR "/bin/pagedllm-host";
const std::string kServe = PAGEDLLM_SOURCE_DIR "/configs/serve.yaml";
const std::string kTiny = PAGEDLLM_SOURCE_DIR "/configs/tiny.yaml";
const std::string kFixtures = PAGEDLLM_FIXTURE_PLUGIN_DIR;
const std::string kSdk = std::to_string(PLLM_SDK_VERSION_MAJOR) + "." + std::to_string(PLLM_SDK_VERSION_MINOR);

std::string host(const std::string& args) { return "'" + kHost + "' " + args; }

}  // namespace

TEST_CASE("the version flag prints the host and SDK versions", "[host_cli]") {
  const auto r = run_command(host("--version"));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("pagedllm-host " PAGEDLLM_HOST_VERSION));
  CHECK_THAT(r.out, Contains("plugin SDK " + kSdk));
}

TEST_CASE("the help flag prints usage and exits 0", "[host_cli]") {
  const auto r = run_command(host("--help"));
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("--config FILE"));
  CHECK_THAT(r.out, Contains("--set PATH=VALUE"));
}

TEST_CASE("usage errors exit 2", "[host_cli]") {
  auto r = run_command(host(""));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--config FILE is required"));
  r = run_command(host("--config"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--config needs a value"));
  r = run_command(host("--config x.yaml --frobnicate"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("unknown argument '--frobnicate'"));
  r = run_command(host("--config '" + kServe + "' --log-level loud --check"));
  CHECK(r.exit_code == 2);
}

TEST_CASE("check mode validates configs/serve.yaml and summarises its plugins", "[host_cli]") {
  const auto r = run_command(host("--config '" + kServe + "' --check"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("is valid"));
  CHECK_THAT(r.out, Contains("models_llama"));
  CHECK_THAT(r.out, Contains("attention_cpu"));
  CHECK_THAT(r.out, Contains("sampler"));
  CHECK_THAT(r.out, Contains(PAGEDLLM_BINARY_DIR "/plugins/attention_cpu.so"));
  CHECK_THAT(r.out, Contains(kSdk));
}

TEST_CASE("check mode says how the KV pool will be sized", "[host_cli]") {
  auto r = run_command(host("--config '" + kServe + "' --check"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("kv sizing   kv_cache_bytes 536870912 ('attention_cpu' does not report device memory)"));

  // A backend with memory_info: the simulated device of fixture_device_attention.
  const std::string device_attention = "--set 'attention={plugin: " + kFixtures +
                                       "/fixture_device_attention.so, options: {simulated_device: {total_bytes: 1}}}'";
  r = run_command(host("--config '" + kServe + "' --check " + device_attention));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("kv sizing   kv_cache_bytes 536870912, written in the config, checked against the free "
                             "memory 'fixture_device_attention' reports"));
  r = run_command(host("--config '" + kServe + "' --check " + device_attention + " --set 'cache={block_size: 16}'"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("kv sizing   gpu_memory_utilization 0.9 of the memory 'fixture_device_attention' "
                             "reports, after a profiling step of max_num_batched_tokens 2048 tokens"));
}

TEST_CASE("a misspelled config key exits 2 naming the key and its line", "[host_cli]") {
  TempDir dir;
  const auto config = dir.write("bad.yaml", "model: {plugin: models_llama, path: m}\nattention: {plugin: attention_cpu}\n"
                                            "sampler: {plugin: sampler}\ncache:\n  blok_size: 16\n");
  const auto r = run_command(host("--config '" + config.string() + "' --check"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains(config.string() + ":5:3: cache.blok_size: unknown key (did you mean 'block_size'?)"));
}

TEST_CASE("a config naming a missing plugin exits 2 naming it", "[host_cli]") {
  const auto r = run_command(host("--config '" + kServe + "' --check --set attention.plugin=attention_nonexistent"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("attention.plugin: plugin 'attention_nonexistent' not found"));
  CHECK_THAT(r.err, Contains("--set attention.plugin=attention_nonexistent"));
}

TEST_CASE("every bad plugin is reported in one run", "[host_cli]") {
  const auto r = run_command(host("--config '" + kServe + "' --check --set attention.plugin=nope_a --set sampler.plugin=nope_b"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("'nope_a' not found"));
  CHECK_THAT(r.err, Contains("'nope_b' not found"));
}

TEST_CASE("a plugin of the wrong kind or a newer SDK exits 2 with the reason", "[host_cli]") {
  auto r = run_command(host("--config '" + kServe + "' --check --set attention.plugin=" + kFixtures + "/fixture_sampler.so"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("is a sampler plugin, but attention.plugin needs an attention plugin"));

  r = run_command(host("--config '" + kServe + "' --check --set sampler.plugin=" + kFixtures + "/fixture_newer_minor.so"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("newer than this host's SDK " + kSdk));
}

TEST_CASE("plugin option errors point at the option, in the file or in --set", "[host_cli]") {
  TempDir dir;
  // A model that exists: --check reads its configuration too.
  const auto config = dir.write("opts.yaml", "model: {plugin: models_llama, path: " PAGEDLLM_SOURCE_DIR
                                             "/models/pagedllm-tiny}\nattention: {plugin: attention_cpu}\n"
                                             "sampler:\n  plugin: " + kFixtures + "/fixture_sampler.so\n"
                                             "  options:\n    tie_brake: lowest\n");
  auto r = run_command(host("--config '" + config.string() + "' --check"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains(config.string() + ":6:5: sampler.options: plugin 'fixture_sampler' rejected its options: "
                                               "tie_brake: unknown option (did you mean 'tie_break'?)"));

  r = run_command(host("--config '" + config.string() + "' --check --set 'sampler.options={tie_break: random}'"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--set sampler.options={tie_break: random}: sampler.options"));
  CHECK_THAT(r.err, Contains("tie_break: must be one of lowest, highest"));

  r = run_command(host("--config '" + config.string() + "' --check --set 'sampler.options={tie_break: highest}'"));
  CHECK(r.exit_code == 0);
}

namespace {

// A model directory for fixture_rule_model (see its source) with the
// bytelevel_gpt2 tokenizer fixture, and a config serving it on the CPU.
std::string write_rule_model_config(const TempDir& dir) {
  const std::string tokenizer = PAGEDLLM_SOURCE_DIR "/tests/fixtures/tokenizer/bytelevel_gpt2";
  run_command("cp '" + tokenizer + "/tokenizer.json' '" + tokenizer + "/tokenizer_config.json' '" +
              dir.path().string() + "/'");
  dir.write("config.json", R"({"vocab_size": 957, "eos_token_id": 956, "max_position_embeddings": 64})");
  return dir
      .write("serve.yaml", "model: {plugin: " + kFixtures + "/fixture_rule_model.so, path: .}\n"
                           "attention: {plugin: attention_cpu}\nsampler: {plugin: sampler}\n"
                           "cache: {block_size: 16, kv_cache_bytes: 1MiB}\n"
                           "plugins: {search_paths: [" PAGEDLLM_BINARY_DIR "/plugins]}\n")
      .string();
}

}  // namespace

TEST_CASE("one-shot generation (--prompt) streams a completion to stdout and a summary to stderr", "[host_cli]") {
  TempDir dir;
  const std::string config = write_rule_model_config(dir);
  const auto r = run_command(host("--config '" + config + "' --prompt 'def f():' --max-tokens 6 --temperature 0"));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_FALSE(r.out.empty());
  CHECK_THAT(r.err, Contains("ready in"));
  CHECK_THAT(r.err, Contains("6 generated (finish: length)"));
  // Greedy is deterministic.
  const auto again = run_command(host("--config '" + config + "' --prompt 'def f():' --max-tokens 6 --temperature 0"));
  CHECK(again.out == r.out);
}

TEST_CASE("one-shot generation (--prompt) refuses bad settings with exit 2", "[host_cli]") {
  TempDir dir;
  const std::string config = write_rule_model_config(dir);
  auto r = run_command(host("--config '" + config + "' --max-tokens 5"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--max-tokens only applies to one-shot generation"));
  r = run_command(host("--config '" + config + "' --prompt x --max-tokens lots"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--max-tokens needs a number, got 'lots'"));
  r = run_command(host("--config '" + config + "' --prompt x --max-tokens 100"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("maximum context length is 64 tokens"));
  r = run_command(host("--config '" + config + "' --prompt x --temperature 9"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("temperature must be in [0, 2]"));
  r = run_command(host("--config '" + config + "' --prompt x --check"));
  CHECK(r.exit_code == 2);
}

TEST_CASE("serve mode: listens, answers, drains and exits 0 on SIGTERM", "[host_cli]") {
  TempDir dir;
  const std::string config = write_rule_model_config(dir);
  pagedllm::testing::ChildProcess server({kHost, "--config", config, "--set", "server.port=0"});
  const std::string line = server.read_line();
  INFO(line);
  REQUIRE_THAT(line, Contains("pagedllm-host: listening on http://127.0.0.1:"));
  CHECK_THAT(line, Contains("ready in"));
  const auto port = static_cast<unsigned short>(std::stoi(line.substr(line.rfind(':') + 1)));
  pagedllm::testing::TestConnection c(port);
  CHECK(c.request(pagedllm::testing::http::verb::get, "/health").result_int() == 200);
  const auto r = c.post("/v1/completions", {{"prompt", "def f():"}, {"max_tokens", 6}, {"temperature", 0}});
  REQUIRE(r.result_int() == 200);
  CHECK(nlohmann::json::parse(r.body())["usage"]["completion_tokens"] == 6);
  server.signal(SIGTERM);
  CHECK(server.wait(std::chrono::seconds(30)) == 0);
}

TEST_CASE("serve mode: API keys from --api-key, or PAGEDLLM_API_KEY, replace server.api_key, any listed key opens /v1",
          "[host_cli]") {
  TempDir dir;
  const std::string config = write_rule_model_config(dir);
  const auto status_with = [](unsigned short port, const std::string& key) {
    pagedllm::testing::TestConnection c(port);
    return c.request(pagedllm::testing::http::verb::get, "/v1/models", "", {{"Authorization", "Bearer " + key}})
        .result_int();
  };
  struct Launch {
    std::vector<std::string> argv;
    std::vector<std::string> accepted, refused;
  };
  const std::vector<std::string> host_args = {kHost, "--config", config, "--set", "server.port=0", "--set",
                                              "server.api_key=from-config"};
  std::vector<Launch> launches;
  launches.push_back({host_args, {"k1", "k2"}, {"from-config"}});
  launches.back().argv.insert(launches.back().argv.end(), {"--api-key", "k1", "--api-key=k2"});
  launches.push_back({{"/usr/bin/env", "PAGEDLLM_API_KEY=e1,e2"}, {"e1", "e2"}, {"from-config", "e1,e2"}});
  launches.back().argv.insert(launches.back().argv.end(), host_args.begin(), host_args.end());
  launches.push_back({host_args, {"from-config"}, {"k1"}});
  for (const Launch& launch : launches) {
    INFO(launch.argv.back());
    pagedllm::testing::ChildProcess server(launch.argv);
    const std::string line = server.read_line();
    REQUIRE_THAT(line, Contains("pagedllm-host: listening on http://127.0.0.1:"));
    const auto port = static_cast<unsigned short>(std::stoi(line.substr(line.rfind(':') + 1)));
    for (const std::string& key : launch.accepted) CHECK(status_with(port, key) == 200);
    for (const std::string& key : launch.refused) CHECK(status_with(port, key) == 401);
    server.signal(SIGTERM);
    CHECK(server.wait(std::chrono::seconds(30)) == 0);
  }
  auto r = run_command(host("--config '" + config + "' --api-key ''"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--api-key needs a non-empty key"));
  r = run_command("PAGEDLLM_API_KEY=a,,b " + host("--config '" + config + "'"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("PAGEDLLM_API_KEY holds an empty key"));
}

namespace {

// A serving host on the rule model with fault_token 900 (see fixture_rule_model's
// source): a prompt ending in token 900 triggers `fault`; the rule's greedy
// continuation of [5, 6] (46, 329, 399, 892) never reaches it.
struct FaultyHost {
  explicit FaultyHost(const std::string& fault)
      : config(write_rule_model_config(dir)),
        server({kHost, "--config", config, "--set", "server.port=0", "--set", "model.options.fault=" + fault, "--set",
                "model.options.fault_token=900"}) {
    const std::string line = server.read_line();
    INFO(line);
    REQUIRE_THAT(line, Contains("pagedllm-host: listening on http://127.0.0.1:"));
    port = static_cast<unsigned short>(std::stoi(line.substr(line.rfind(':') + 1)));
  }
  TempDir dir;
  std::string config;
  pagedllm::testing::ChildProcess server;
  unsigned short port = 0;
};

const nlohmann::json kHealthyPrompt = {{"prompt", {5, 6}}, {"max_tokens", 4}, {"temperature", 0}};
const nlohmann::json kFaultyPrompt = {{"prompt", {5, 900}}, {"max_tokens", 4}, {"temperature", 0}};

}  // namespace

TEST_CASE("serve mode: NaN logits fail only their request, with a 500 naming the plugin, and the host keeps serving",
          "[host_cli][fault]") {
  FaultyHost host("nan");
  pagedllm::testing::TestConnection c(host.port);
  const auto failed = c.post("/v1/completions", kFaultyPrompt);
  CHECK(failed.result_int() == 500);
  const auto error = nlohmann::json::parse(failed.body())["error"];
  CHECK(error["code"] == "internal_error");
  CHECK_THAT(error["message"].get<std::string>(),
             Contains("plugin 'fixture_rule_model'") && Contains("non-finite logits"));
  const auto served = c.post("/v1/completions", kHealthyPrompt);
  REQUIRE(served.result_int() == 200);
  CHECK(nlohmann::json::parse(served.body())["usage"]["completion_tokens"] == 4);
  CHECK(c.request(pagedllm::testing::http::verb::get, "/health").result_int() == 200);
  host.server.signal(SIGTERM);
  CHECK(host.server.wait(std::chrono::seconds(30)) == 0);
}

TEST_CASE("serve mode: a model call that fails ends the requests in flight naming the plugin, then the host exits 1",
          "[host_cli][fault]") {
  const std::string fault = GENERATE("error", "throw");
  CAPTURE(fault);
  FaultyHost host(fault);
  pagedllm::testing::TestConnection c(host.port);
  REQUIRE(c.post("/v1/completions", kHealthyPrompt).result_int() == 200);
  const auto failed = c.post("/v1/completions", kFaultyPrompt);
  CHECK(failed.result_int() == 500);
  CHECK_THAT(nlohmann::json::parse(failed.body())["error"]["message"].get<std::string>(),
             Contains("plugin 'fixture_rule_model': forward failed") && Contains("fault: " + fault));
  // No signal: the host stops by itself.
  CHECK(host.server.wait(std::chrono::seconds(30)) == 1);
}

TEST_CASE("serve mode: a model that cannot be loaded, or a port in use, exits 1 with the reason", "[host_cli]") {
  TempDir dir;
  const std::string config = write_rule_model_config(dir);
  auto r = run_command(host("--config '" + config + "' --set model.path=/nonexistent/model"));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("/nonexistent/model"));

  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor taken(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  r = run_command(host("--config '" + config + "' --set server.port=" + std::to_string(taken.local_endpoint().port())));
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Contains("cannot bind 127.0.0.1:" + std::to_string(taken.local_endpoint().port())));
}

TEST_CASE("configs/tiny.yaml: greedy output of the embedded model is deterministic and the same with both attention variants", "[host_cli]") {
  const std::string generate = "--config '" + kTiny + "' --prompt 'def fibonacci(n):' --max-tokens 48 --temperature 0";
  const auto first = run_command(host(generate));
  INFO(first.err);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.err, Contains("48 generated"));
  const auto again = run_command(host(generate));
  CHECK(again.out == first.out);
  const auto reference = run_command(host(generate + " --set attention.options.variant=reference"));
  CHECK(reference.exit_code == 0);
  CHECK(reference.out == first.out);
}

TEST_CASE("cache.dtype by --set: the KV cache's element type in the startup log, a bad one exits 2", "[host_cli]") {
  const std::string generate = "--config '" + kTiny + "' --prompt 'def fibonacci(n):' --max-tokens 8 --temperature 0";
  auto r = run_command(host(generate));
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("tokens in f32, 49152 bytes per block"));
  r = run_command(host(generate + " --set cache.dtype=bf16"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("tokens in bf16, 24576 bytes per block"));
  CHECK_THAT(r.err, Contains("8 generated"));
  r = run_command(host("--config '" + kTiny + "' --check --set cache.dtype=bf16"));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("cache       block_size 16, dtype bf16, kv_cache_bytes 536870912"));
  r = run_command(host("--config '" + kTiny + "' --check --set cache.dtype=fp8"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--set cache.dtype=fp8: cache.dtype: must be one of auto, f32, f16, bf16, got \"fp8\""));
}

TEST_CASE("check mode reads the model's configuration as serving would, and a missing model is said missing once",
          "[host_cli]") {
  TempDir dir;
  // A model directory that needs no weights to be refused: config.json is read first.
  const std::filesystem::path model = dir.path() / "qwen";
  std::filesystem::create_directories(model);
  for (const char* file : {"config.json", "tokenizer.json", "tokenizer_config.json"}) {
    std::filesystem::copy_file(PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny/" + std::string(file), model / file);
  }
  const auto check = [&](const std::string& path) {
    return run_command(host("--config '" + kTiny + "' --check --set model.path=" + path));
  };
  std::ifstream original(model / "config.json");
  const std::string config((std::istreambuf_iterator<char>(original)), std::istreambuf_iterator<char>());
  const auto edit = [&](const std::string& from, const std::string& to) {
    std::string edited = config;
    edited.replace(edited.find(from), from.size(), to);
    std::ofstream(model / "config.json", std::ios::trunc) << edited;
  };

  edit("\"LlamaForCausalLM\"", "\"Gemma2ForCausalLM\"");
  auto r = check(model.string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("plugin 'models_llama': check_model failed") &&
                        Contains((model / "config.json").string() + ": 'architectures' is [\"Gemma2ForCausalLM\"]"));

  edit("\"rope_scaling\": null", "\"rope_scaling\": null, \"sliding_window\": 4096");
  r = check(model.string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("'sliding_window' is 4096"));

  r = check((dir.path() / "nowhere").string());
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("model.path: " + (dir.path() / "nowhere").string() + " does not exist"));

  // Serving a missing model: exit 1, the path named as missing, once (not as a missing tokenizer.json).
  r = run_command(host("--config '" + kTiny + "' --set model.path=" + (dir.path() / "nowhere").string()));
  CHECK(r.exit_code == 1);
  const std::string missing = (dir.path() / "nowhere").string() + " does not exist";
  CHECK_THAT(r.err, Contains(missing));
  CHECK(r.err.find(missing) == r.err.rfind(missing));
  CHECK_THAT(r.err, !Contains("tokenizer.json"));
}

TEST_CASE("serve mode: --chat-template FILE replaces the model's template, a missing or broken one exits 2 naming it", "[host_cli]") {
  TempDir dir;
  const std::string path =
      dir.write("it's mine.jinja", "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}\n");
  auto r = run_command(host("--config '" + kTiny + "' --check --chat-template \"" + path + "\""));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  r = run_command(host("--config '" + kTiny + "' --check --chat-template '" + dir.path().string() + "/missing.jinja'"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("model.chat_template: '" + dir.path().string() + "/missing.jinja' is neither a Jinja file"));
  const std::string broken = dir.write("broken.jinja", "{% for m in messages %}\n{{ m.content }\n");
  r = run_command(host("--config '" + kTiny + "' --prompt hi --max-tokens 1 --chat-template '" + broken + "'"));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("broken.jinja: the chat template cannot be parsed: line 2"));
}
