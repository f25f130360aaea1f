// The engine end to end over real plugins: fixture_rule_model (whose greedy
// continuation is known in closed form, see its source), the real
// attention_cpu and sampler plugins, and the bytelevel_gpt2 tokenizer fixture.
// Checks the request lifecycle: outputs, stop conditions, n > 1, seeds,
// logprobs, abort, rejection, preemption, shutdown and engine failure.

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/config/config.h"
#include "core/engine/engine.h"
#include "core/plugin/configured_plugins.h"
#include "tests/support/temp_dir.h"

using namespace pagedllm;
namespace fs = std::filesystem;

namespace {

constexpr int kMaxPositions = 256;

// Everything a request produced, gathered from its outputs.
struct Collected {
  struct Sequence {
    std::string text;
    std::vector<std::int32_t> tokens;
    std::vector<TokenLogprob> logprobs;
    std::optional<FinishReason> finish_reason;
    std::string stop_string;
    std::int32_t stop_token_id = -1;
  };
  std::vector<Sequence> sequences;
  std::vector<TokenLogprob> prompt_logprobs;
  int num_prompt_logprobs_outputs = 0;  // outputs that carried them
  std::optional<std::string> error;
  int num_outputs = 0;
  int num_prompt_tokens = 0;
  int num_cached_prompt_tokens = 0;
  bool finished = false;
};

// Gathers a request's outputs; wait() blocks until the last one.
class Collector {
 public:
  OutputCallback callback() {
    return [this](RequestOutput&& out) {
      // The engine thread: Catch2's assertions are not thread-safe (ThreadSanitizer), so a
      // broken protocol is recorded here and asserted by wait() on the test's thread.
      std::lock_guard lock(mutex_);
      if (result_.finished) violation_ = "an output after the final one";
      ++result_.num_outputs;
      result_.num_prompt_tokens = out.num_prompt_tokens;
      result_.num_cached_prompt_tokens = out.num_cached_prompt_tokens;
      if (!out.prompt_logprobs.empty()) {
        result_.prompt_logprobs = out.prompt_logprobs;
        ++result_.num_prompt_logprobs_outputs;
      }
      for (SequenceDelta& delta : out.sequences) {
        if (result_.sequences.size() <= static_cast<std::size_t>(delta.index)) {
          result_.sequences.resize(static_cast<std::size_t>(delta.index) + 1);
        }
        Collected::Sequence& s = result_.sequences[static_cast<std::size_t>(delta.index)];
        if (s.finish_reason.has_value()) violation_ = "a delta after its sequence's end";
        s.text += delta.text;
        s.tokens.insert(s.tokens.end(), delta.token_ids.begin(), delta.token_ids.end());
        s.logprobs.insert(s.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
        s.finish_reason = delta.finish_reason;
        s.stop_string = delta.stop_string;
        s.stop_token_id = delta.stop_token_id;
      }
      if (out.error) result_.error = out.error;
      result_.finished = out.finished;
      done_.notify_all();
    };
  }
  // Blocks until the first output arrived.
  void wait_first() {
    std::unique_lock lock(mutex_);
    REQUIRE(done_.wait_for(lock, std::chrono::seconds(60), [&] { return result_.num_outputs > 0 || result_.finished; }));
    REQUIRE(violation_.empty());
  }
  Collected wait() {
    std::unique_lock lock(mutex_);
    REQUIRE(done_.wait_for(lock, std::chrono::seconds(120), [&] { return result_.finished; }));
    REQUIRE(violation_.empty());
    return result_;
  }

 private:
  std::mutex mutex_;
  std::string violation_;
  std::condition_variable done_;
  Collected result_;
};

// The rule fixture_rule_model follows: the greedy token after `token` at `position`.
std::int32_t rule_next(std::int32_t token, int position, int vocab) {
  return (7 * token + 3 * position + 1) % vocab;
}

std::vector<std::int32_t> rule_continuation(const std::vector<std::int32_t>& prompt, int count, int vocab) {
  std::vector<std::int32_t> out;
  std::int32_t token = prompt.back();
  int position = static_cast<int>(prompt.size()) - 1;
  for (int i = 0; i < count; ++i) {
    token = rule_next(token, position++, vocab);
    out.push_back(token);
  }
  return out;
}

class EngineFixture {
 public:
  // `eos` = -1: the tokenizer's <|endoftext|>. `extra_yaml` adds config sections.
  explicit EngineFixture(const std::vector<std::string>& overrides = {}, int eos = -1,
                         const std::string& extra_yaml = "") {
    const fs::path tokenizer_dir = fs::path(PAGEDLLM_SOURCE_DIR) / "tests/fixtures/tokenizer/bytelevel_gpt2";
    const fs::path model_dir = dir_.path() / "rule-model";
    fs::create_directories(model_dir);
    fs::copy_file(tokenizer_dir / "tokenizer.json", model_dir / "tokenizer.json");
    fs::copy_file(tokenizer_dir / "tokenizer_config.json", model_dir / "tokenizer_config.json");
    vocab_ = static_cast<int>(tokenizer::Tokenizer::from_model_dir(model_dir.string()).vocab_size());
    if (eos < 0) eos = *tokenizer::Tokenizer::from_model_dir(model_dir.string()).eos_id();
    dir_.write("rule-model/config.json", fmt::format(R"({{"vocab_size": {}, "eos_token_id": {},
      "max_position_embeddings": {}}})", vocab_, eos, kMaxPositions));
    const std::string yaml = fmt::format(R"(
model: {{plugin: {fixtures}/fixture_rule_model.so, path: rule-model}}
device: cpu
attention: {{plugin: attention_cpu, options: {{variant: optimized, num_threads: 1}}}}
sampler: {{plugin: sampler, options: {{num_threads: 1}}}}
cache: {{block_size: 4, kv_cache_bytes: 1MiB, swap_space: 64KiB}}
scheduler: {{max_num_seqs: 16, max_num_batched_tokens: 64}}
plugins: {{search_paths: [{plugins}]}}
{extra}
)",
                                         fmt::arg("fixtures", PAGEDLLM_FIXTURE_PLUGIN_DIR),
                                         fmt::arg("plugins", PAGEDLLM_PLUGIN_DIR), fmt::arg("extra", extra_yaml));
    const fs::path file = dir_.write("engine.yaml", yaml);
    config_ = load_config(file, overrides);
    registry_ = std::make_unique<PluginRegistry>(make_plugin_registry(config_));
    engine_ = Engine::create(config_, *registry_);
  }

  Engine& engine() { return *engine_; }
  int vocab() const { return vocab_; }

  GenerateRequest request(const std::string& prompt, int max_tokens) {
    GenerateRequest r;
    r.prompt_token_ids = engine_->tokenizer().encode(prompt);
    r.sampling.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    r.sampling.ignore_eos = true;
    return r;
  }

  Collected run(GenerateRequest r) {
    Collector collector;
    engine_->submit(std::move(r), collector.callback());
    return collector.wait();
  }

  // Submits every request before waiting for any, so they share batches, then starts the
  // engine if the test has not (so a test can have them all queued before the first step);
  // their outputs, in the same order.
  std::vector<Collected> run_together(std::vector<GenerateRequest> requests) {
    std::vector<std::unique_ptr<Collector>> collectors;
    for (GenerateRequest& r : requests) {
      collectors.push_back(std::make_unique<Collector>());
      engine_->submit(std::move(r), collectors.back()->callback());
    }
    engine_->start();
    std::vector<Collected> outputs;
    for (auto& c : collectors) outputs.push_back(c->wait());
    return outputs;
  }

 private:
  testing::TempDir dir_;
  HostConfig config_;
  std::unique_ptr<PluginRegistry> registry_;
  std::unique_ptr<Engine> engine_;
  int vocab_ = 0;
};

void require_drained(const Engine& engine) {
  // Gauges are published after each step; give the last one a moment.
  for (int i = 0; i < 200; ++i) {
    const EngineMetrics m = engine.metrics();
    if (m.scheduler.num_running == 0 && m.scheduler.num_waiting == 0 && m.scheduler.num_swapped == 0 &&
        m.scheduler.kv.num_free_device_blocks == m.scheduler.kv.num_device_blocks) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const EngineMetrics m = engine.metrics();
  CHECK(m.scheduler.num_running == 0);
  CHECK(m.scheduler.num_waiting == 0);
  CHECK(m.scheduler.kv.num_free_device_blocks == m.scheduler.kv.num_device_blocks);
}

}  // namespace

TEST_CASE("greedy output follows the model and max_tokens ends it with length", "[engine]") {
  EngineFixture f;
  f.engine().start();
  GenerateRequest r = f.request("def fibonacci(n):", 12);
  const std::vector<std::int32_t> prompt = r.prompt_token_ids;
  const Collected out = f.run(std::move(r));
  REQUIRE(out.sequences.size() == 1);
  const auto expected = rule_continuation(prompt, 12, f.vocab());
  CHECK(out.sequences[0].tokens == expected);
  CHECK(out.sequences[0].finish_reason == FinishReason::kLength);
  CHECK(out.sequences[0].text == f.engine().tokenizer().decode(expected, true));
  CHECK(out.num_prompt_tokens == static_cast<int>(prompt.size()));
  CHECK_FALSE(out.error);
  require_drained(f.engine());
  const EngineMetrics m = f.engine().metrics();
  CHECK(m.generation_tokens_total == 12);
  CHECK(m.prompt_tokens_total == static_cast<std::int64_t>(prompt.size()));
  CHECK(m.requests_finished_length == 1);
  CHECK(m.time_to_first_token.count() == 1);
  CHECK(m.inter_token_latency.count() == 11);
  CHECK(m.e2e_request_latency.count() == 1);
}

TEST_CASE("EOS ends a sequence unless ignore_eos, stop tokens end it too", "[engine]") {
  // Make the 5th greedy token the model's EOS.
  std::vector<std::int32_t> prompt;
  int vocab = 0;
  {
    EngineFixture probe;
    prompt = probe.engine().tokenizer().encode("import os");
    vocab = probe.vocab();
  }
  const auto path = rule_continuation(prompt, 10, vocab);
  // The EOS: the first token from the 4th on that does not appear before it.
  std::size_t k = 3;
  while (std::find(path.begin(), path.begin() + static_cast<long>(k), path[k]) != path.begin() + static_cast<long>(k)) ++k;
  REQUIRE(k < 8);
  const std::int32_t eos = path[k];
  EngineFixture f({}, eos);
  f.engine().start();

  GenerateRequest r = f.request("import os", 10);
  r.sampling.ignore_eos = false;
  Collected out = f.run(r);
  CHECK(out.sequences[0].tokens == std::vector<std::int32_t>(path.begin(), path.begin() + static_cast<long>(k) + 1));
  CHECK(out.sequences[0].finish_reason == FinishReason::kStop);
  CHECK(out.sequences[0].stop_token_id == -1);

  r.sampling.ignore_eos = true;
  out = f.run(r);
  CHECK(out.sequences[0].tokens == path);
  CHECK(out.sequences[0].finish_reason == FinishReason::kLength);

  r.sampling.stop_token_ids = {path[0]};
  out = f.run(r);
  CHECK(out.sequences[0].tokens == std::vector<std::int32_t>(path.begin(), path.begin() + 1));
  CHECK(out.sequences[0].finish_reason == FinishReason::kStop);
  CHECK(out.sequences[0].stop_token_id == path[0]);

  // min_tokens: neither EOS nor a stop token may be sampled before it, so the
  // sequence follows the rule up to EOS, then takes another token there.
  r.sampling.stop_token_ids = {path[1]};
  r.sampling.ignore_eos = false;
  r.sampling.min_tokens = static_cast<int>(k) + 2;
  out = f.run(r);
  const std::vector<std::int32_t>& tokens = out.sequences[0].tokens;
  REQUIRE(tokens.size() >= k + 2);
  CHECK(tokens[0] == path[0]);
  CHECK(tokens[1] != path[1]);
  for (std::size_t i = 0; i < k + 2; ++i) CHECK(tokens[i] != eos);
  r.sampling.min_tokens = 11;
  CHECK_THROWS_AS(f.engine().submit(r, [](RequestOutput&&) {}), RequestRejected);  // more than max_tokens
  require_drained(f.engine());
}

TEST_CASE("prompt logprobs equal the rule model's log-softmax, chunked and past the prefix cache", "[engine]") {
  EngineFixture f;  // max_num_batched_tokens 64: a 100-token prompt is prefilled in two chunks
  f.engine().start();
  GenerateRequest r;
  for (int i = 0; i < 100; ++i) r.prompt_token_ids.push_back((i * 37 + 11) % f.vocab());
  r.sampling.max_tokens = 2;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.sampling.prompt_logprobs = 2;
  // The rule model: logit(v) = -|v - target| / 4 at each position (fixture_rule_model.cpp).
  const auto expected = [&](std::size_t position, std::int32_t token) {
    const int target = rule_next(r.prompt_token_ids[position], static_cast<int>(position), f.vocab());
    double sum = 0;
    for (int v = 0; v < f.vocab(); ++v) sum += std::exp(-std::abs(v - target) / 4.0);
    return -std::abs(token - target) / 4.0 - std::log(sum);
  };
  for (int round = 0; round < 2; ++round) {  // the second would hit the prefix cache without prompt_logprobs
    INFO("round " << round);
    const Collected out = f.run(r);
    CHECK(out.num_cached_prompt_tokens == 0);
    CHECK(out.num_prompt_logprobs_outputs == 1);
    REQUIRE(out.prompt_logprobs.size() == 99);
    for (std::size_t i = 0; i < 99; ++i) {
      const TokenLogprob& lp = out.prompt_logprobs[i];
      INFO("prompt token " << i + 1);
      CHECK(lp.token_id == r.prompt_token_ids[i + 1]);
      CHECK(lp.logprob == Approx(expected(i, lp.token_id)).margin(1e-4));
      REQUIRE(lp.top.size() == 2);
      const int target = rule_next(r.prompt_token_ids[i], static_cast<int>(i), f.vocab());
      CHECK(lp.top[0].first == target);
      CHECK(lp.top[1].first == (target > 0 ? target - 1 : 1));  // a tie with target + 1: the lower id
    }
    CHECK(out.sequences[0].tokens == rule_continuation(r.prompt_token_ids, 2, f.vocab()));
  }
  r.sampling.prompt_logprobs = std::nullopt;
  CHECK(f.run(r).num_cached_prompt_tokens > 0);  // the cache itself still works
  require_drained(f.engine());
}

TEST_CASE("with a sampler of SDK 2.0 the engine refuses logit_bias, min_tokens and prompt_logprobs", "[engine]") {
  EngineFixture f({fmt::format("sampler.plugin={}/fixture_sdk_2_0.so", PAGEDLLM_FIXTURE_PLUGIN_DIR)});
  f.engine().start();
  const auto rejected_param = [&](GenerateRequest r) -> std::string {
    try {
      f.engine().submit(std::move(r), [](RequestOutput&&) {});
    } catch (const RequestRejected& e) {
      CHECK_THAT(e.reason(), Catch::Matchers::Contains("SDK 2.1"));
      return e.param();
    }
    return "(accepted)";
  };
  GenerateRequest r = f.request("hello", 3);
  r.sampling.logit_bias = {{3, 1.0f}};
  CHECK(rejected_param(r) == "logit_bias");
  r.sampling.logit_bias.clear();
  r.sampling.min_tokens = 2;
  CHECK(rejected_param(r) == "min_tokens");
  r.sampling.min_tokens = 0;
  r.sampling.prompt_logprobs = 0;
  CHECK(rejected_param(r) == "prompt_logprobs");
  r.sampling.prompt_logprobs = std::nullopt;
  CHECK(f.run(r).sequences[0].tokens.size() == 3);  // what it can do, it still does
  require_drained(f.engine());
}

TEST_CASE("logit_bias steers greedy decoding and min_tokens suspends stop strings", "[engine]") {
  EngineFixture f;
  f.engine().start();
  const Collected full = f.run(f.request("class A:", 12));
  const std::vector<std::int32_t>& path = full.sequences[0].tokens;
  REQUIRE(path.size() == 12);

  // The rule model's logits are -|v - target| / 4 (fixture_rule_model.cpp): the
  // target path[0] at 0, its neighbours at -0.25.
  REQUIRE(path[0] > 0);
  GenerateRequest r = f.request("class A:", 12);
  r.sampling.logit_bias = {{path[0], -1.0f}};  // -1 < -0.25: the lower neighbour wins the tie
  CHECK(f.run(r).sequences[0].tokens[0] == path[0] - 1);
  r.sampling.logit_bias = {{path[0] + 1, 0.5f}};  // 0.25 > 0
  CHECK(f.run(r).sequences[0].tokens[0] == path[0] + 1);

  // A stop string within the text of the first min_tokens tokens does not stop.
  r.sampling.logit_bias = {};
  r.sampling.stop = {full.sequences[0].text.substr(0, 3)};
  r.sampling.min_tokens = 12;
  const Collected unstopped = f.run(r);
  CHECK(unstopped.sequences[0].text == full.sequences[0].text);
  CHECK(unstopped.sequences[0].finish_reason == FinishReason::kLength);
  require_drained(f.engine());
}

TEST_CASE("stop strings cut the text across token boundaries", "[engine]") {
  EngineFixture f;
  f.engine().start();
  const Collected full = f.run(f.request("class A:", 24));
  const std::string text = full.sequences[0].text;
  REQUIRE(text.size() > 12);
  // A stop string in the middle of the text, very likely spanning tokens.
  const std::string stop = text.substr(text.size() / 2, 4);
  const std::string before = text.substr(0, text.find(stop));

  GenerateRequest r = f.request("class A:", 24);
  r.sampling.stop = {stop};
  Collected out = f.run(r);
  CHECK(out.sequences[0].text == before);
  CHECK(out.sequences[0].finish_reason == FinishReason::kStop);
  CHECK(out.sequences[0].stop_string == stop);
  CHECK(out.sequences[0].tokens.size() < full.sequences[0].tokens.size());

  r.sampling.include_stop_str_in_output = true;
  out = f.run(r);
  CHECK(out.sequences[0].text == before + stop);
  require_drained(f.engine());
}

TEST_CASE("n > 1 forks share the prompt, sample independently and reproducibly", "[engine]") {
  EngineFixture f;
  f.engine().start();
  GenerateRequest r = f.request("x = [", 16);
  r.sampling.n = 4;
  r.sampling.temperature = 1.0f;
  r.sampling.seed = 1234;
  const Collected a = f.run(r);
  const Collected b = f.run(r);
  REQUIRE(a.sequences.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    CHECK(a.sequences[i].tokens.size() == 16);
    CHECK(a.sequences[i].finish_reason == FinishReason::kLength);
    CHECK(a.sequences[i].tokens == b.sequences[i].tokens);  // same seed, same outputs
  }
  // With a flat-ish distribution (logit slope 1/4 per id) forks diverge.
  bool any_differ = false;
  for (std::size_t i = 1; i < 4; ++i) any_differ |= a.sequences[i].tokens != a.sequences[0].tokens;
  CHECK(any_differ);

  // The first sequence of n equals the n = 1 request with the same seed.
  r.sampling.n = 1;
  const Collected single = f.run(r);
  CHECK(single.sequences[0].tokens == a.sequences[0].tokens);
  require_drained(f.engine());
}

TEST_CASE("a seeded request samples the same tokens whatever shares its batch", "[engine]") {
  EngineFixture f;
  f.engine().start();
  GenerateRequest seeded = f.request("for i in range(10):", 20);
  seeded.sampling.temperature = 0.8f;
  seeded.sampling.top_p = 0.9f;
  seeded.sampling.seed = 7;
  const Collected alone = f.run(seeded);

  std::vector<GenerateRequest> crowd;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest other = f.request(fmt::format("noise {}", i), 15 + i);
    other.sampling.temperature = 1.0f;
    crowd.push_back(std::move(other));
  }
  crowd.push_back(seeded);
  CHECK(f.run_together(std::move(crowd)).back().sequences[0].tokens == alone.sequences[0].tokens);
  require_drained(f.engine());
}

TEST_CASE("logprobs report the sampled token and the top alternatives", "[engine]") {
  EngineFixture f;
  f.engine().start();
  GenerateRequest r = f.request("while True:", 6);
  r.sampling.logprobs = 3;
  const Collected out = f.run(r);
  const auto& s = out.sequences[0];
  REQUIRE(s.logprobs.size() == 6);
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(s.logprobs[i].token_id == s.tokens[i]);
    REQUIRE(s.logprobs[i].top.size() == 3);
    CHECK(s.logprobs[i].top[0].first == s.tokens[i]);  // greedy: the sampled token is the top one
    CHECK(s.logprobs[i].top[0].second == Approx(s.logprobs[i].logprob));
    CHECK(s.logprobs[i].top[1].second <= s.logprobs[i].top[0].second);
    CHECK(s.logprobs[i].logprob <= 0.0f);
  }
}

TEST_CASE("prefix caching: a repeated prompt reuses cached blocks and gives the same output", "[engine]") {
  EngineFixture f;
  f.engine().start();
  const std::string prompt = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n";
  const Collected first = f.run(f.request(prompt, 8));
  const Collected second = f.run(f.request(prompt, 8));
  CHECK(first.num_cached_prompt_tokens == 0);
  CHECK(second.num_cached_prompt_tokens > 0);
  CHECK(second.sequences[0].tokens == first.sequences[0].tokens);
  CHECK(f.engine().metrics().scheduler.kv.prefix_cache_hit_tokens > 0);
}

TEST_CASE("under KV pressure requests are preempted and still produce the right tokens", "[engine]") {
  const std::string mode = GENERATE(std::string("recompute"), std::string("swap"));
  CAPTURE(mode);
  // 40 blocks of 4 tokens: 8 requests of ~40 tokens cannot all stay resident.
  EngineFixture f({"cache.kv_cache_bytes=" + std::to_string(40 * 2 * 2 * 4 * 8 * 4), "scheduler.max_model_len=96",
                   "cache.swap_space=1MiB", "cache.enable_prefix_caching=false",
                   "scheduler.preemption_mode=" + mode});
  f.engine().start();
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(f.request(fmt::format("request number {} says hello", i), 30));
    expected.push_back(rule_continuation(requests.back().prompt_token_ids, 30, f.vocab()));
  }
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  for (std::size_t i = 0; i < outputs.size(); ++i) CHECK(outputs[i].sequences[0].tokens == expected[i]);
  CHECK(f.engine().metrics().scheduler.num_preemptions() > 0);
  require_drained(f.engine());
}

TEST_CASE("beam search groups under KV pressure are preempted whole and find the same hypotheses", "[engine][beam]") {
  const std::string mode = GENERATE(std::string("recompute"), std::string("swap"));
  CAPTURE(mode);
  // Four beam searches of width 3 (up to 3 x 7 blocks each) and four plain requests: 40 blocks
  // cannot hold them all. The rule model's logits depend on token and position only, so the
  // searches must find exactly what they find with room to spare.
  const auto run = [](EngineFixture& f) {
    std::vector<GenerateRequest> requests;
    for (int i = 0; i < 8; ++i) {
      requests.push_back(f.request(fmt::format("request number {} says hello", i), 20));
      if (i % 2 == 1) continue;
      requests.back().sampling.n = 2;
      requests.back().sampling.logprobs = 0;
      requests.back().sampling.beam_search = BeamSearchOptions{3, 1.0f, BeamSearchOptions::EarlyStopping::kFalse};
    }
    return f.run_together(std::move(requests));
  };
  EngineFixture roomy({"scheduler.max_model_len=96"});
  const std::vector<Collected> expected = run(roomy);
  EngineFixture tight({"cache.kv_cache_bytes=" + std::to_string(40 * 2 * 2 * 4 * 8 * 4), "scheduler.max_model_len=96",
                       "cache.swap_space=1MiB", "cache.enable_prefix_caching=false",
                       "scheduler.preemption_mode=" + mode});
  const std::vector<Collected> outputs = run(tight);
  CHECK(roomy.engine().metrics().scheduler.num_preemptions() == 0);
  CHECK(tight.engine().metrics().scheduler.num_preemptions() > 0);
  for (std::size_t i = 0; i < outputs.size(); i += 2) {
    REQUIRE(outputs[i].sequences.size() == 2);
    REQUIRE(expected[i].sequences.size() == 2);
    for (std::size_t s = 0; s < 2; ++s) {
      CHECK(outputs[i].sequences[s].tokens == expected[i].sequences[s].tokens);
      CHECK(outputs[i].sequences[s].tokens.size() == 20);  // ignore_eos: only max_tokens ends a hypothesis
      CHECK(outputs[i].sequences[s].finish_reason == FinishReason::kLength);
    }
    // Best first: at equal lengths, by summed logprob.
    const auto sum = [](const Collected::Sequence& s) {
      double total = 0;
      for (const TokenLogprob& t : s.logprobs) total += t.logprob;
      return total;
    };
    CHECK(sum(outputs[i].sequences[0]) >= sum(outputs[i].sequences[1]));
    CHECK(outputs[i].num_outputs == 1);  // the hypotheses come once, when the search ends
  }
  require_drained(tight.engine());
}

TEST_CASE("abort ends a running request within a step and frees its blocks", "[engine]") {
  EngineFixture f({"model.options.step_delay_ms=5"});
  f.engine().start();
  Collector running;
  const RequestId id = f.engine().submit(f.request("print('hello')", 200), running.callback());
  running.wait_first();
  CHECK(f.engine().abort(id));
  const Collected out = running.wait();
  CHECK(out.sequences[0].finish_reason == FinishReason::kAborted);
  CHECK(out.sequences[0].tokens.size() < 200);
  CHECK_FALSE(f.engine().abort(id));  // already finished
  require_drained(f.engine());
  CHECK(f.engine().metrics().requests_aborted == 1);

  // A request aborted before the engine picked it up still gets its final output.
  Collector queued;
  const RequestId second = f.engine().submit(f.request("x", 5), queued.callback());
  f.engine().abort(second);
  const Collected q = queued.wait();
  CHECK(q.finished);
}

TEST_CASE("bad requests are refused before queueing, naming the field", "[engine]") {
  EngineFixture f;
  const auto rejected_param = [&](GenerateRequest r) -> std::string {
    try {
      f.engine().submit(std::move(r), [](RequestOutput&&) {});
    } catch (const RequestRejected& e) {
      CHECK_FALSE(e.reason().empty());
      return e.param();
    }
    return "(accepted)";
  };
  GenerateRequest ok = f.request("hello", 4);
  GenerateRequest r = ok;
  r.prompt_token_ids.clear();
  CHECK(rejected_param(r) == "prompt");
  r = ok;
  r.prompt_token_ids.assign(kMaxPositions, 5);
  CHECK(rejected_param(r) == "prompt");
  r = ok;
  r.prompt_token_ids.push_back(f.vocab());
  CHECK(rejected_param(r) == "prompt");
  r = ok;
  r.sampling.max_tokens = kMaxPositions;
  CHECK(rejected_param(r) == "max_tokens");
  r = ok;
  r.sampling.max_tokens = 0;
  CHECK(rejected_param(r) == "max_tokens");
  r = ok;
  r.sampling.n = 17;
  CHECK(rejected_param(r) == "n");
  r = ok;
  r.sampling.temperature = 2.5f;
  CHECK(rejected_param(r) == "temperature");
  r = ok;
  r.sampling.top_p = 0.0f;
  CHECK(rejected_param(r) == "top_p");
  r = ok;
  r.sampling.logprobs = 21;
  CHECK(rejected_param(r) == "logprobs");
  r = ok;
  r.sampling.stop = {""};
  CHECK(rejected_param(r) == "stop");
  r = ok;
  r.sampling.repetition_penalty = 0.0f;
  CHECK(rejected_param(r) == "repetition_penalty");
  r = ok;
  r.sampling.logit_bias = {{3, 100.5f}};
  CHECK(rejected_param(r) == "logit_bias");
  r.sampling.logit_bias = {{f.vocab(), 1.0f}};
  CHECK(rejected_param(r) == "logit_bias");
  r.sampling.logit_bias = {{3, 1.0f}, {3, 2.0f}};
  CHECK(rejected_param(r) == "logit_bias");
  r.sampling.logit_bias.clear();
  for (int i = 0; i < 301; ++i) r.sampling.logit_bias.emplace_back(i, 1.0f);
  CHECK(rejected_param(r) == "logit_bias");
  r = ok;
  r.sampling.min_tokens = -1;
  CHECK(rejected_param(r) == "min_tokens");
  r.sampling.min_tokens = 5;  // max_tokens 4
  CHECK(rejected_param(r) == "min_tokens");
  r = ok;
  r.sampling.prompt_logprobs = 21;
  CHECK(rejected_param(r) == "prompt_logprobs");
  CHECK(f.engine().metrics().scheduler.num_rejected == 0);  // never reached the scheduler
}

TEST_CASE("unset max_tokens runs to the context limit", "[engine]") {
  EngineFixture f;
  f.engine().start();
  GenerateRequest r = f.request("a", 1);
  r.sampling.max_tokens.reset();
  const Collected out = f.run(r);
  CHECK(static_cast<int>(out.sequences[0].tokens.size()) + out.num_prompt_tokens == kMaxPositions);
  CHECK(out.sequences[0].finish_reason == FinishReason::kLength);
}

TEST_CASE("shutdown drains or aborts in-flight requests", "[engine]") {
  const bool drain = GENERATE(true, false);
  EngineFixture f({"model.options.step_delay_ms=2"});
  f.engine().start();
  std::vector<std::unique_ptr<Collector>> collectors;
  for (int i = 0; i < 4; ++i) {
    collectors.push_back(std::make_unique<Collector>());
    f.engine().submit(f.request(fmt::format("job {}", i), 40), collectors.back()->callback());
  }
  f.engine().shutdown(drain ? ShutdownMode::kDrain : ShutdownMode::kAbort);
  for (auto& c : collectors) {
    const Collected out = c->wait();
    CHECK(out.sequences[0].finish_reason == (drain ? FinishReason::kLength : FinishReason::kAborted));
  }
  CHECK_THROWS_AS(f.engine().submit(f.request("late", 4), [](RequestOutput&&) {}), EngineUnavailable);
  CHECK_FALSE(f.engine().healthy());
}

TEST_CASE("a failing plugin fails the engine: requests end with the error, health says why", "[engine]") {
  EngineFixture f({"model.options.fail_after_steps=3"});
  f.engine().start();
  CHECK(f.engine().healthy());
  const Collected out = f.run(f.request("doomed", 20));
  REQUIRE(out.error);
  CHECK_THAT(*out.error, Catch::Contains("forward failed on purpose"));
  CHECK(out.sequences[0].finish_reason == FinishReason::kAborted);
  for (int i = 0; i < 100 && f.engine().healthy(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(f.engine().healthy());
  CHECK_THAT(f.engine().health_detail(), Catch::Contains("forward failed on purpose"));
  CHECK_THROWS_AS(f.engine().submit(f.request("after", 4), [](RequestOutput&&) {}), EngineUnavailable);
}

namespace {

// A prompt of token ids and its greedy continuation by fixture_rule_model's rule.
struct RulePrompt {
  std::vector<std::int32_t> prompt;
  std::vector<std::int32_t> continuation;
};

GenerateRequest greedy_ids(const std::vector<std::int32_t>& prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt_token_ids = prompt;
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  return r;
}

}  // namespace

TEST_CASE("a model that returns NaN logits mid-run fails only the requests they belong to", "[engine][fault]") {
  constexpr int kTokens = 12;
  const int vocab = EngineFixture().vocab();
  const RulePrompt faulty{{10, 11, 12}, rule_continuation({10, 11, 12}, kTokens, vocab)};
  const RulePrompt healthy{{40, 41, 42, 43}, rule_continuation({40, 41, 42, 43}, kTokens, vocab)};
  // The faulty request's fourth generated token triggers the fault when it is fed back.
  const std::int32_t trigger = faulty.continuation[3];
  const auto holds = [](const RulePrompt& p, std::int32_t token) {
    return std::count(p.prompt.begin(), p.prompt.end(), token) + std::count(p.continuation.begin(),
                                                                            p.continuation.end(), token);
  };
  REQUIRE(holds(healthy, trigger) == 0);
  REQUIRE(std::count(faulty.continuation.begin(), faulty.continuation.begin() + 3, trigger) == 0);

  EngineFixture f({"model.options.fault=nan", fmt::format("model.options.fault_token={}", trigger)});
  f.engine().start();
  GenerateRequest two = greedy_ids({50, trigger}, kTokens);  // faults at its first sample: both sequences
  two.sampling.n = 2;
  two.sampling.temperature = 0.7f;
  two.sampling.seed = 1;
  const std::vector<Collected> outputs =
      f.run_together({greedy_ids(faulty.prompt, kTokens), greedy_ids(healthy.prompt, kTokens)});

  REQUIRE(outputs[0].error);
  CHECK_THAT(*outputs[0].error, Catch::Contains("plugin 'fixture_rule_model'") && Catch::Contains("non-finite"));
  CHECK(outputs[0].sequences[0].finish_reason == FinishReason::kAborted);
  // Tokens sampled before the fault were delivered.
  CHECK(outputs[0].sequences[0].tokens ==
        std::vector<std::int32_t>(faulty.continuation.begin(), faulty.continuation.begin() + 4));
  CHECK_FALSE(outputs[1].error);
  CHECK(outputs[1].sequences[0].tokens == healthy.continuation);
  CHECK(outputs[1].sequences[0].finish_reason == FinishReason::kLength);

  // The engine keeps serving: healthy, and the same healthy prompt (a prefix-cache hit) and
  // a faulty n = 2 request behave the same again.
  CHECK(f.engine().healthy());
  const Collected again = f.run(greedy_ids(healthy.prompt, kTokens));
  CHECK_FALSE(again.error);
  CHECK(again.sequences[0].tokens == healthy.continuation);
  const Collected forked = f.run(two);
  REQUIRE(forked.error);
  REQUIRE(forked.sequences.size() == 2);
  for (const Collected::Sequence& s : forked.sequences) CHECK(s.finish_reason == FinishReason::kAborted);
  CHECK(f.engine().healthy());
  require_drained(f.engine());
  CHECK(f.engine().metrics().requests_aborted == 2);
}

TEST_CASE("a model call that fails or throws mid-run fails the engine, naming the plugin", "[engine][fault]") {
  const int vocab = EngineFixture().vocab();
  const std::vector<std::int32_t> prompt{10, 11, 12};
  const std::int32_t trigger = rule_continuation(prompt, 4, vocab)[3];
  const auto [fault, message] = GENERATE(table<std::string, std::string>(
      {{"error", "forward failed on command (fault: error)"},
       {"throw", "forward threw on command (fault: throw)"},
       {"throw_unknown", "unknown exception"}}));
  CAPTURE(fault);
  EngineFixture f({"model.options.fault=" + fault, fmt::format("model.options.fault_token={}", trigger)});
  // Both queued before the engine starts: submitted after the fault, the second would be
  // refused (the engine no longer serves), which ThreadSanitizer's slowness made happen.
  const std::vector<Collected> outputs = f.run_together({greedy_ids(prompt, 8), greedy_ids({40, 41, 42}, 200)});
  for (const Collected& out : outputs) {
    REQUIRE(out.error);
    CHECK_THAT(*out.error, Catch::Contains("plugin 'fixture_rule_model': forward failed") && Catch::Contains(message));
    for (const Collected::Sequence& s : out.sequences) CHECK(s.finish_reason == FinishReason::kAborted);
  }
  CHECK(outputs[0].sequences[0].tokens.size() == 4);
  for (int i = 0; i < 100 && f.engine().healthy(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK_FALSE(f.engine().healthy());
  CHECK_THAT(f.engine().health_detail(), Catch::Contains("plugin 'fixture_rule_model'") && Catch::Contains(message));
  CHECK_THROWS_AS(f.engine().submit(greedy_ids(prompt, 2), [](RequestOutput&&) {}), EngineUnavailable);
}

TEST_CASE("engine creation refuses a cache too small for one full-length sequence", "[engine]") {
  CHECK_THROWS_WITH(EngineFixture({"cache.kv_cache_bytes=4KiB"}),
                    Catch::Contains("kv_cache_bytes") && Catch::Contains("max_model_len"));
}

// ---- Speculative decoding over fixture_rule_speculator: a draft that follows
// the model's rule but misses at every third position, so steps accept some
// drafts and reject others.

namespace {

std::string speculative_yaml(int k, int wrong_every = 3, const std::string& extra = "") {
  return fmt::format("speculative: {{plugin: {}/fixture_rule_speculator.so, draft: rule-model, "
                     "num_speculative_tokens: {}, options: {{wrong_every: {}}}{}}}",
                     PAGEDLLM_FIXTURE_PLUGIN_DIR, k, wrong_every, extra);
}

}  // namespace

TEST_CASE("speculative greedy output equals plain decoding token for token, in mixed batches and under preemption",
          "[engine][speculative]") {
  const std::string mode = GENERATE(std::string("none"), std::string("recompute"), std::string("swap"));
  const int k = GENERATE(1, 3);
  CAPTURE(mode, k);
  std::vector<std::string> overrides;
  if (mode != "none") {
    // 30 blocks of 4 tokens (target 2 layers + draft 1, K and V, 1 head of 8 f32): 10 requests
    // of up to ~55 tokens cannot all stay resident.
    overrides = {"cache.kv_cache_bytes=" + std::to_string(30 * 3 * 2 * 4 * 8 * 4), "scheduler.max_model_len=96",
                 "cache.swap_space=1MiB", "scheduler.preemption_mode=" + mode};
  }
  EngineFixture f(overrides, -1, speculative_yaml(k));
  f.engine().start();
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 10; ++i) {
    const int max_tokens = 20 + 3 * i;
    GenerateRequest r = f.request(fmt::format("prompt {} {}", i, std::string(static_cast<std::size_t>(i % 4), 'x')),
                                  max_tokens);
    r.speculative = i % 5 != 4;  // two requests opt out and share batches with the others
    expected.push_back(rule_continuation(r.prompt_token_ids, max_tokens, f.vocab()));
    requests.push_back(std::move(r));
  }
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Collected& out = outputs[i];
    CAPTURE(i);
    REQUIRE_FALSE(out.error);
    CHECK(out.sequences[0].tokens == expected[i]);
    CHECK(out.sequences[0].finish_reason == FinishReason::kLength);
  }
  require_drained(f.engine());
  const EngineMetrics m = f.engine().metrics();
  CHECK(m.speculative_decoding_enabled);
  CHECK(m.spec_decode_num_drafts > 0);
  CHECK(m.spec_decode_accepted_tokens > 0);
  CHECK(m.spec_decode_accepted_tokens < m.spec_decode_draft_tokens);  // the misses are rejected
  REQUIRE(m.spec_decode_accepted_per_position.size() == static_cast<std::size_t>(k));
  CHECK(m.spec_decode_accepted_per_position[0] > 0);
  for (int i = 1; i < k; ++i) {
    CHECK(m.spec_decode_accepted_per_position[static_cast<std::size_t>(i)] <=
          m.spec_decode_accepted_per_position[static_cast<std::size_t>(i) - 1]);
  }
  // Fewer steps than tokens: speculation paid off.
  std::int64_t total = 0;
  for (const auto& e : expected) total += static_cast<std::int64_t>(e.size());
  CHECK(m.generation_tokens_total == total);
  if (mode != "none") CHECK(m.scheduler.num_preemptions() > 0);
}

TEST_CASE("speculative decoding: a perfect draft is always accepted, an opted-out request never drafts",
          "[engine][speculative]") {
  EngineFixture f({}, -1, speculative_yaml(4, /*wrong_every=*/0));
  f.engine().start();
  GenerateRequest plain = f.request("no drafts for me", 20);
  plain.speculative = false;
  const std::vector<std::int32_t> plain_prompt = plain.prompt_token_ids;
  CHECK(f.run(std::move(plain)).sequences[0].tokens == rule_continuation(plain_prompt, 20, f.vocab()));
  CHECK(f.engine().metrics().spec_decode_num_drafts == 0);

  GenerateRequest r = f.request("all drafts accepted", 21);
  const std::vector<std::int32_t> prompt = r.prompt_token_ids;
  CHECK(f.run(std::move(r)).sequences[0].tokens == rule_continuation(prompt, 21, f.vocab()));
  const EngineMetrics m = f.engine().metrics();
  // The prompt's step samples token 1 and drafts 4; each verification then yields 5 tokens.
  CHECK(m.spec_decode_num_drafts == 4);
  CHECK(m.spec_decode_accepted_tokens == m.spec_decode_draft_tokens);
  CHECK(m.spec_decode_draft_tokens == 4 + 4 + 4 + 4);
}

TEST_CASE("speculative decoding: requests arriving at disable_by_batch_size unfinished decode without drafts",
          "[engine][speculative]") {
  // A perfect draft at K = 4: a speculative request of 21 tokens takes exactly
  // 4 verifications (the prompt's step samples token 1 and drafts 4, each
  // verification yields 5), a plain one none.
  // Steps of 2 ms: none of the five can finish while they are being submitted.
  EngineFixture f({"model.options.step_delay_ms=2"}, -1,
                  speculative_yaml(4, /*wrong_every=*/0, ", disable_by_batch_size: 2"));
  f.engine().start();
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 5; ++i) {
    GenerateRequest r = f.request(fmt::format("burst {}", i), 21);
    expected.push_back(rule_continuation(r.prompt_token_ids, 21, f.vocab()));
    requests.push_back(std::move(r));
  }
  // Submitted together, before the first can finish: the first two speculate.
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    CAPTURE(i);
    REQUIRE_FALSE(outputs[i].error);
    CHECK(outputs[i].sequences[0].tokens == expected[i]);
  }
  EngineMetrics m = f.engine().metrics();
  CHECK(m.spec_decode_disabled_by_batch_size == 3);
  CHECK(m.spec_decode_num_drafts == 2 * 4);

  // Alone again, a request speculates.
  GenerateRequest r = f.request("after the burst", 21);
  const std::vector<std::int32_t> prompt = r.prompt_token_ids;
  CHECK(f.run(std::move(r)).sequences[0].tokens == rule_continuation(prompt, 21, f.vocab()));
  m = f.engine().metrics();
  CHECK(m.spec_decode_disabled_by_batch_size == 3);
  CHECK(m.spec_decode_num_drafts == 3 * 4);
}

TEST_CASE("speculative greedy and sampled requests in one batch: greedy follows the rule, seeded ones reproduce",
          "[engine][speculative]") {
  // Greedy rows are verified by exact match in core and sampled ones by the
  // speculator's rejection sampler; one step holds both, their logits rows interleaved.
  EngineFixture f({}, -1, speculative_yaml(3));
  f.engine().start();
  const auto seeded = [&](const std::string& prompt, std::uint64_t seed) {
    GenerateRequest r = f.request(prompt, 25);
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = 0.9f;
    r.sampling.seed = seed;
    return r;
  };
  const Collected alone = f.run(seeded("sampled among greedy", 77));
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = i % 2 == 0 ? f.request(fmt::format("greedy {}", i), 22 + i)
                                   : seeded(i == 3 ? "sampled among greedy" : fmt::format("other {}", i),
                                            i == 3 ? 77 : static_cast<std::uint64_t>(i));
    expected.push_back(i % 2 == 0 ? rule_continuation(r.prompt_token_ids, 22 + i, f.vocab())
                                  : std::vector<std::int32_t>{});
    requests.push_back(std::move(r));
  }
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Collected& out = outputs[i];
    CAPTURE(i);
    REQUIRE_FALSE(out.error);
    if (i % 2 == 0) CHECK(out.sequences[0].tokens == expected[i]);
    if (i == 3) CHECK(out.sequences[0].tokens == alone.sequences[0].tokens);
    if (i % 2 == 1) CHECK(out.sequences[0].tokens.size() == 25);
  }
  CHECK(f.engine().metrics().spec_decode_num_drafts > 0);
  require_drained(f.engine());
}

TEST_CASE("speculative sampling reproduces with a seed whatever shares the batch, n > 1 and logprobs still work",
          "[engine][speculative]") {
  EngineFixture f({}, -1, speculative_yaml(3));
  f.engine().start();
  const auto seeded = [&](const std::string& prompt) {
    GenerateRequest r = f.request(prompt, 30);
    r.sampling.temperature = 0.9f;
    r.sampling.top_k = 20;
    r.sampling.seed = 1234;
    return r;
  };
  const Collected alone = f.run(seeded("the same seed"));
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 4; ++i) {
    GenerateRequest other = seeded(fmt::format("company {}", i));
    other.sampling.seed = 99 + i;
    if (i == 1) other.sampling.n = 2;
    if (i == 2) other.sampling.logprobs = 2;
    requests.push_back(std::move(other));
  }
  requests.push_back(seeded("the same seed"));
  std::vector<Collected> others = f.run_together(std::move(requests));
  const Collected together = others.back();
  others.pop_back();
  CHECK(together.sequences[0].tokens == alone.sequences[0].tokens);
  CHECK(alone.sequences[0].tokens.size() == 30);
  for (std::size_t i = 0; i < others.size(); ++i) {
    const Collected& out = others[i];
    CAPTURE(i);
    REQUIRE_FALSE(out.error);
    CHECK(out.sequences.size() == (i == 1 ? 2u : 1u));
    for (const auto& s : out.sequences) CHECK(s.tokens.size() == 30);
    if (i == 2) CHECK(out.sequences[0].logprobs.size() == 30);
  }
  CHECK(f.engine().metrics().spec_decode_num_drafts > 0);
  require_drained(f.engine());
}

#ifdef PAGEDLLM_HAVE_CONSTRAINT_XGRAMMAR
// ---- Structured output under speculation (constraint_xgrammar over the
// fixture tokenizer's vocabulary). Under a grammar the rule model's greedy
// token is the allowed token nearest its rule (logits -|v - target| / 4), and
// the fixture draft's likewise, so masked drafts are accepted or rejected as
// the rule and the draft's misses fall; the reference for every constrained
// request is the same request decoded without speculation in the same engine.

namespace {

// What each constraint admits, checked independently of the grammar engine:
// std::regex for the regex, the list for the choice, nlohmann::json for the schema.
struct ConstraintCase {
  OutputConstraint constraint;
  std::function<bool(const std::string&)> valid;
};

std::vector<ConstraintCase> constraint_cases() {
  std::vector<ConstraintCase> cases;
  cases.push_back({{OutputConstraint::Type::kRegex, "[a-z]{3,9}-[0-9]{2,8}", "guided_regex"},
                   [](const std::string& text) {
                     return std::regex_match(text, std::regex("[a-z]{3,9}-[0-9]{2,8}"));
                   }});
  cases.push_back({{OutputConstraint::Type::kChoice, R"(["alpha", "beta", "gamma delta"])", "guided_choice"},
                   [](const std::string& text) { return text == "alpha" || text == "beta" || text == "gamma delta"; }});
  cases.push_back({{OutputConstraint::Type::kJsonSchema,
                    R"({"type": "object", "properties": {"ok": {"type": "boolean"},
                        "tag": {"type": "string", "maxLength": 6}}, "required": ["ok", "tag"],
                        "additionalProperties": false})",
                    "guided_json"},
                   [](const std::string& text) {
                     const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
                     if (j.is_discarded() || !j.is_object() || j.size() != 2) return false;
                     const auto ok = j.find("ok");
                     const auto tag = j.find("tag");
                     return ok != j.end() && ok->is_boolean() && tag != j.end() && tag->is_string() &&
                            tag->get<std::string>().size() <= 6;
                   }});
  return cases;
}

}  // namespace

TEST_CASE("constrained requests, speculative or not, preempted or not, give what each gives alone without either",
          "[engine][speculative][constraint]") {
  const std::string mode = GENERATE(std::string("none"), std::string("recompute"), std::string("swap"));
  // K, and the fixture draft's vocabulary: 100 ids leave out EOS (956) and most letters, so
  // masks often leave the draft nothing and its drafts stop there.
  const std::pair<int, int> setup = GENERATE(std::make_pair(1, 0), std::make_pair(3, 0), std::make_pair(3, 100));
  const int k = setup.first;
  const int draft_vocab = setup.second;
  CAPTURE(mode, k, draft_vocab);
  std::vector<std::string> overrides;
  if (mode != "none") {
    // 30 blocks of 4 tokens (target 2 layers + draft 1): 18 requests of up to ~50 tokens cannot all stay.
    overrides = {"cache.kv_cache_bytes=" + std::to_string(30 * 3 * 2 * 4 * 8 * 4), "scheduler.max_model_len=96",
                 "cache.swap_space=1MiB", "scheduler.preemption_mode=" + mode};
  }
  EngineFixture f(overrides, -1,
                  fmt::format("speculative: {{plugin: {}/fixture_rule_speculator.so, draft: rule-model, "
                              "num_speculative_tokens: {}, options: {{wrong_every: 3, draft_vocab_size: {}}}}}\n"
                              "constraint: {{plugin: constraint_xgrammar, options: {{any_whitespace: false}}}}",
                              PAGEDLLM_FIXTURE_PLUGIN_DIR, k, draft_vocab));
  // The reference: each request alone on an engine without a speculator or KV pressure.
  EngineFixture reference({}, -1, "constraint: {plugin: constraint_xgrammar, options: {any_whitespace: false}}");
  reference.engine().start();
  const std::vector<ConstraintCase> cases = constraint_cases();
  const auto request = [&](EngineFixture& engine, int i) {
    GenerateRequest r =
        engine.request(fmt::format("answer {} {}", i, std::string(static_cast<std::size_t>(i % 4), 'q')), 40);
    r.sampling.ignore_eos = false;
    r.constraint = cases[static_cast<std::size_t>(i) % cases.size()].constraint;
    return r;
  };
  // All queued before the first step (run_together starts the engine): the pool fills at once.
  std::vector<GenerateRequest> requests;
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 9; ++i) {
    const Collected alone = reference.run(request(reference, i));
    REQUIRE_FALSE(alone.error);
    expected.push_back(alone.sequences[0].tokens);
    for (const bool speculate : {true, false}) {
      GenerateRequest r = request(f, i);
      r.speculative = speculate;
      requests.push_back(std::move(r));
    }
  }
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  for (std::size_t i = 0; i < outputs.size(); i += 2) {
    const Collected& speculative = outputs[i];
    const Collected& plain = outputs[i + 1];
    CAPTURE(i / 2);
    REQUIRE_FALSE(speculative.error);
    REQUIRE_FALSE(plain.error);
    CHECK(speculative.sequences[0].tokens == expected[i / 2]);
    CHECK(plain.sequences[0].tokens == expected[i / 2]);
    CHECK(speculative.sequences[0].finish_reason == FinishReason::kStop);
    CAPTURE(speculative.sequences[0].text);
    CHECK(cases[(i / 2) % cases.size()].valid(speculative.sequences[0].text));
  }
  require_drained(f.engine());
  const EngineMetrics m = f.engine().metrics();
  // Every speculative request here is constrained: drafts were proposed under the grammar and some accepted.
  CHECK(m.spec_decode_num_drafts > 0);
  CHECK(m.spec_decode_accepted_tokens > 0);
  if (mode != "none") CHECK(m.scheduler.num_preemptions() > 0);
}

TEST_CASE("a constrained request that ignores EOS speculates past the grammar's end, as plain decoding does",
          "[engine][speculative][constraint]") {
  // After the choice the grammar allows only EOS; the request goes on drawing it to max_tokens.
  // Drafts then are EOS after EOS, which the matcher accepts past its end and rolls back after
  // each drafting round (constraint_xgrammar counts those stop tokens).
  const std::string yaml = fmt::format("speculative: {{plugin: {}/fixture_rule_speculator.so, draft: rule-model, "
                                       "num_speculative_tokens: 3}}\n"
                                       "constraint: {{plugin: constraint_xgrammar}}",
                                       PAGEDLLM_FIXTURE_PLUGIN_DIR);
  EngineFixture f({}, -1, yaml);
  const auto request = [&](bool speculate) {
    GenerateRequest r = f.request("pick one", 16);
    r.constraint = OutputConstraint{OutputConstraint::Type::kChoice, R"(["alpha", "beta"])", "guided_choice"};
    r.speculative = speculate;
    return r;
  };
  std::vector<GenerateRequest> requests;
  requests.push_back(request(true));
  requests.push_back(request(false));
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  REQUIRE_FALSE(outputs[0].error);
  REQUIRE_FALSE(outputs[1].error);
  CHECK(outputs[0].sequences[0].tokens == outputs[1].sequences[0].tokens);
  CHECK(outputs[0].sequences[0].tokens.size() == 16);
  CHECK(outputs[0].sequences[0].finish_reason == FinishReason::kLength);
  const std::string& text = outputs[0].sequences[0].text;
  CHECK((text.rfind("alpha", 0) == 0 || text.rfind("beta", 0) == 0));
  CHECK(f.engine().metrics().spec_decode_accepted_tokens > 0);
}

TEST_CASE("speculative constrained sampling: outputs follow the grammar, a seeded one reproduces in any batch",
          "[engine][speculative][constraint]") {
  // Sampled rows: q of the masked draft logits, p of the masked target rows, the speculator's rejection
  // sampler between them, the matcher settled on what it returns.
  EngineFixture f({}, -1,
                  fmt::format("speculative: {{plugin: {}/fixture_rule_speculator.so, draft: rule-model, "
                              "num_speculative_tokens: 3, options: {{wrong_every: 3, draft_vocab_size: 100}}}}\n"
                              "constraint: {{plugin: constraint_xgrammar, options: {{any_whitespace: false}}}}",
                              PAGEDLLM_FIXTURE_PLUGIN_DIR));
  f.engine().start();
  const std::vector<ConstraintCase> cases = constraint_cases();
  const auto sampled = [&](int i, std::uint64_t seed) {
    GenerateRequest r = f.request(fmt::format("sample {}", i), 40);
    r.sampling.ignore_eos = false;
    r.sampling.temperature = 0.7f;
    r.sampling.seed = seed;
    r.constraint = cases[static_cast<std::size_t>(i) % cases.size()].constraint;
    return r;
  };
  const Collected alone = f.run(sampled(0, 5));
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(sampled(i, i == 3 ? 5 : static_cast<std::uint64_t>(100 + i)));
  requests[3] = sampled(0, 5);
  const std::vector<Collected> outputs = f.run_together(std::move(requests));
  CHECK(outputs[3].sequences[0].tokens == alone.sequences[0].tokens);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    CAPTURE(i, outputs[i].sequences[0].text);
    REQUIRE_FALSE(outputs[i].error);
    CHECK(outputs[i].sequences[0].finish_reason == FinishReason::kStop);
    CHECK(cases[(i == 3 ? 0 : i) % cases.size()].valid(outputs[i].sequences[0].text));
  }
  CHECK(f.engine().metrics().spec_decode_num_drafts > 0);
  require_drained(f.engine());
}
#endif

// ---- KV pool sizing on a device with memory_info, over fixture_device_attention:
// the plain fixture attention on a simulated device memory (its source says how
// free memory moves). fixture_rule_model: 2 layers, 1 KV head, head_dim 8, f32,
// so with block_size 4 a block is 2 * 2 * 1 * 4 * 8 * 4 = 512 bytes (768 with one
// draft layer); max_model_len 256 needs 64 blocks. The profiling step of
// max_num_batched_tokens 64 over max_num_seqs 16 is 16 prefills of 4 tokens, one
// block each: a 16-block profiling cache.

namespace {

constexpr std::uint64_t kMiB = 1ull << 20;
constexpr std::uint64_t kGiB = 1ull << 30;

struct SimulatedDevice {
  std::uint64_t total = 0;
  std::uint64_t used = 0;
  std::uint64_t per_token = 0;
  std::uint64_t per_logits_row = 0;
  std::uint64_t per_hidden_row = 0;
};

// Overrides that put the engine on the simulated device, with the cache section
// replaced so kv_cache_bytes is not written unless `cache_yaml` writes it.
std::vector<std::string> on_simulated_device(const SimulatedDevice& d, const std::string& cache_yaml) {
  return {fmt::format("attention={{plugin: {}/fixture_device_attention.so, options: {{simulated_device: "
                      "{{total_bytes: {}, used_bytes: {}, activation_bytes_per_token: {}, "
                      "activation_bytes_per_logits_row: {}, activation_bytes_per_hidden_row: {}}}}}}}",
                      PAGEDLLM_FIXTURE_PLUGIN_DIR, d.total, d.used, d.per_token, d.per_logits_row,
                      d.per_hidden_row),
          "cache={block_size: 4, " + cache_yaml + "}"};
}

int device_blocks(const Engine& engine) { return engine.metrics().scheduler.kv.num_device_blocks; }

}  // namespace

TEST_CASE("a device pool is what gpu_memory_utilization leaves after the profiling step", "[engine][kv_sizing]") {
  const SimulatedDevice device{8 * kMiB, 1 * kMiB, 1024, 1536, 0};
  EngineFixture f(on_simulated_device(device, "gpu_memory_utilization: 0.5"));
  // The step's workspace: 64 tokens and one logits row per sequence (16); the
  // budget is total * 0.5 - (in use after profiling - the profiling cache).
  const std::uint64_t activations = 64 * 1024 + 16 * 1536;
  const std::uint64_t budget = 4 * kMiB - (1 * kMiB + activations);
  CHECK(budget / 512 == 5968);
  CHECK(device_blocks(f.engine()) == 5968);

  // The final cache replaced the profiling one: generation runs on it.
  f.engine().start();
  GenerateRequest r = f.request("def fibonacci(n):", 12);
  const std::vector<std::int32_t> prompt = r.prompt_token_ids;
  const Collected out = f.run(std::move(r));
  REQUIRE_FALSE(out.error);
  CHECK(out.sequences[0].tokens == rule_continuation(prompt, 12, f.vocab()));
  require_drained(f.engine());
}

TEST_CASE("with a speculator the profiling step asks logits for 1 + K rows and hidden for every token",
          "[engine][kv_sizing]") {
  const SimulatedDevice device{8 * kMiB, 1 * kMiB, 1024, 1536, 256};
  EngineFixture f(on_simulated_device(device, "gpu_memory_utilization: 0.5"), -1, speculative_yaml(2));
  // K = 2: min(64 tokens, 16 sequences * 3) = 48 logits rows, 64 hidden rows;
  // a block holds the draft's layer too (768 bytes).
  const std::uint64_t activations = 64 * 1024 + 48 * 1536 + 64 * 256;
  const std::uint64_t budget = 4 * kMiB - (1 * kMiB + activations);
  CHECK(budget / 768 == 3893);
  CHECK(device_blocks(f.engine()) == 3893);
}

TEST_CASE("kv_cache_bytes written in the config wins over gpu_memory_utilization on a device",
          "[engine][kv_sizing]") {
  const SimulatedDevice device{8 * kMiB, 1 * kMiB, 1024, 1536, 0};
  SECTION("in the file's cache section") {
    EngineFixture f(on_simulated_device(device, "gpu_memory_utilization: 0.5, kv_cache_bytes: 1MiB"));
    CHECK(device_blocks(f.engine()) == 2048);
  }
  SECTION("by --set") {
    std::vector<std::string> overrides = on_simulated_device(device, "gpu_memory_utilization: 0.5");
    overrides.push_back("cache.kv_cache_bytes=3MiB");
    EngineFixture f(overrides);
    CHECK(device_blocks(f.engine()) == 6144);
  }
  SECTION("but it must fit in the free memory") {
    // 7 MiB free; 7.5 MiB asked.
    CHECK_THROWS_WITH(EngineFixture(on_simulated_device(device, "kv_cache_bytes: 7680KiB")),
                      Catch::Contains("--set cache=") &&
                          Catch::Contains("cache.kv_cache_bytes=7864320 (15360 blocks, 0.01 GiB) does not fit in "
                                          "the 0.01 GiB free on cpu") &&
                          Catch::Contains("lower kv_cache_bytes"));
  }
}

TEST_CASE("device sizing refuses what cannot work, naming the key to change", "[engine][kv_sizing]") {
  SECTION("a pool that cannot hold one max_model_len sequence") {
    // 7 GiB in use and 1 GiB of activations leave nothing of 16 GiB * 0.5.
    const SimulatedDevice device{16 * kGiB, 7 * kGiB, 16 * kMiB, 0, 0};
    CHECK_THROWS_WITH(
        EngineFixture(on_simulated_device(device, "gpu_memory_utilization: 0.5")),
        Catch::Contains("cache.gpu_memory_utilization=0.5 leaves 0.00 GiB for the KV cache on cpu (0 blocks of 4 "
                        "tokens), fewer than the 64 blocks (0.00 GiB) one sequence of max_model_len=256 needs: "
                        "weights and runtime use 7.00 GiB and the largest step's activations 1.00 GiB of 16.00 GiB, "
                        "so 8.00 GiB would be needed in all (gpu_memory_utilization 0.500); lower "
                        "scheduler.max_model_len or scheduler.max_num_batched_tokens, or raise "
                        "gpu_memory_utilization"));
  }
  SECTION("memory in use beyond gpu_memory_utilization") {
    const SimulatedDevice device{16 * kGiB, 9 * kGiB, 1024, 0, 0};
    CHECK_THROWS_WITH(EngineFixture(on_simulated_device(device, "gpu_memory_utilization: 0.5")),
                      Catch::Contains("cache.gpu_memory_utilization=0.5 allows 8.00 GiB of the 16.00 GiB on cpu, "
                                      "but the model and runtime already use 9.00 GiB before any KV cache; raise "
                                      "gpu_memory_utilization"));
  }
  SECTION("a profiling step that runs out of memory") {
    const SimulatedDevice device{16 * kGiB, 1 * kGiB, 1 * kGiB, 0, 0};
    CHECK_THROWS_WITH(EngineFixture(on_simulated_device(device, "gpu_memory_utilization: 0.5")),
                      Catch::Contains("scheduler.max_num_batched_tokens: the profiling step (64 tokens in 16 prefill "
                                      "sequences, 16 logits rows, 0 hidden rows) ran out of device memory on cpu") &&
                          Catch::Contains("lower scheduler.max_num_batched_tokens (or scheduler.max_num_seqs)"));
  }
}

TEST_CASE("without memory_info the pool is kv_cache_bytes, whatever gpu_memory_utilization says",
          "[engine][kv_sizing]") {
  EngineFixture f({fmt::format("attention.plugin={}/fixture_attention.so", PAGEDLLM_FIXTURE_PLUGIN_DIR),
                   "attention.options={}", "cache.gpu_memory_utilization=0.01"});
  CHECK(device_blocks(f.engine()) == 1 * kMiB / 512);
}

TEST_CASE("cache.dtype is the KV cache's element type: a 16-bit block is half an f32 one", "[engine][kv_sizing]") {
  // fixture_rule_model reports f32, so auto is f32: 1 MiB of 512-byte blocks.
  SECTION("auto and f32") {
    CHECK(device_blocks(EngineFixture().engine()) == 2048);
    CHECK(device_blocks(EngineFixture({"cache.dtype=f32"}).engine()) == 2048);
  }
  SECTION("bf16 and f16, which attention_cpu fills from the model's f32 keys and values") {
    const std::string dtype = GENERATE(std::string("bf16"), std::string("f16"));
    CAPTURE(dtype);
    EngineFixture f({"cache.dtype=" + dtype});
    CHECK(device_blocks(f.engine()) == 4096);
    f.engine().start();
    GenerateRequest r = f.request("def fibonacci(n):", 12);
    const std::vector<std::int32_t> prompt = r.prompt_token_ids;
    const Collected out = f.run(std::move(r));
    REQUIRE_FALSE(out.error);
    CHECK(out.sequences[0].tokens == rule_continuation(prompt, 12, f.vocab()));
    require_drained(f.engine());
  }
}

TEST_CASE("an attention backend that cannot hold cache.dtype refuses it at startup, naming the key",
          "[engine][kv_sizing]") {
  const std::vector<std::string> f32_only = {
      fmt::format("attention.plugin={}/fixture_attention.so", PAGEDLLM_FIXTURE_PLUGIN_DIR), "attention.options={}"};
  std::vector<std::string> bf16 = f32_only;
  bf16.push_back("cache.dtype=bf16");
  CHECK_THROWS_WITH(EngineFixture(bf16),
                    Catch::Contains("--set cache.dtype=bf16: cache.dtype: the attention backend 'fixture_attention' "
                                    "refused a KV cache of bf16: plugin 'fixture_attention': bytes_per_block "
                                    "failed") &&
                        Catch::Contains("fixture_attention: the KV cache must be f32; use a dtype it supports, or "
                                        "auto (the model's dtype)"));
  std::vector<std::string> written_auto = f32_only;
  written_auto.push_back("cache.dtype=auto");
  CHECK(device_blocks(EngineFixture(written_auto).engine()) == 2048);
}
