// pagedllm-bench: the workload and the statistics, then the tool end to end
// against the fake server (JSON and plots).

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <vector>

#include "tests/server/child_process.h"
#include "tests/support/run_command.h"
#include "tools/bench/bench_stats.h"
#include "tools/bench/workload.h"

using namespace pagedllm::bench;
using pagedllm::testing::ChildProcess;
using pagedllm::testing::run_command;
using pagedllm::testing::TempDir;
using Catch::Matchers::Contains;

TEST_CASE("length ranges: N or MIN:MAX", "[bench]") {
  CHECK(LengthRange::parse("128").min == 128);
  CHECK(LengthRange::parse("128").max == 128);
  const LengthRange r = LengthRange::parse("64:256");
  CHECK(r.min == 64);
  CHECK(r.max == 256);
  CHECK(r.str() == "64:256");
  for (const char* bad : {"", "0", "-3", "abc", "5:", ":5", "9:3", "1.5"}) {
    INFO(bad);
    CHECK_THROWS_AS(LengthRange::parse(bad), std::invalid_argument);
  }
}

TEST_CASE("workloads: exact lengths from the pool, Poisson arrivals, same seed same workload", "[bench]") {
  const std::vector<std::int32_t> pool{10, 20, 30};
  WorkloadSpec spec;
  spec.num_requests = 2000;
  spec.input_len = {4, 8};
  spec.output_len = {16, 16};
  spec.request_rate = 50.0;
  spec.seed = 7;
  const auto a = make_workload(spec, pool);
  REQUIRE(a.size() == 2000);
  int min_len = 100, max_len = 0;
  for (const auto& r : a) {
    min_len = std::min(min_len, static_cast<int>(r.prompt.size()));
    max_len = std::max(max_len, static_cast<int>(r.prompt.size()));
    CHECK(r.max_tokens == 16);
    for (const auto id : r.prompt) CHECK((id == 10 || id == 20 || id == 30));
  }
  CHECK(min_len == 4);
  CHECK(max_len == 8);
  CHECK(a.front().arrival_s == 0.0);
  // 2000 exponential gaps at rate 50: the last arrival near 40 s (sd ~0.9 s).
  CHECK(std::abs(a.back().arrival_s - 40.0) < 5.0);
  for (std::size_t i = 1; i < a.size(); ++i) CHECK(a[i].arrival_s >= a[i - 1].arrival_s);
  const auto b = make_workload(spec, pool);
  CHECK(b[1234].prompt == a[1234].prompt);
  CHECK(b[1234].arrival_s == a[1234].arrival_s);
  spec.seed = 8;
  CHECK(make_workload(spec, pool)[1].prompt != a[1].prompt);
  spec.request_rate.reset();
  CHECK(make_workload(spec, pool).back().arrival_s == 0.0);
}

TEST_CASE("workloads: contiguous prompts are windows of the pool at seeded offsets", "[bench]") {
  std::vector<std::int32_t> pool(50);
  std::iota(pool.begin(), pool.end(), 100);  // token i of the text is 100 + i
  WorkloadSpec spec;
  spec.num_requests = 500;
  spec.input_len = {1, 50};
  spec.seed = 3;
  spec.contiguous_prompts = true;
  const auto a = make_workload(spec, pool);
  std::set<std::int32_t> starts;
  for (const auto& r : a) {
    REQUIRE(!r.prompt.empty());
    REQUIRE(r.prompt.size() <= 50);
    for (std::size_t i = 1; i < r.prompt.size(); ++i) REQUIRE(r.prompt[i] == r.prompt[i - 1] + 1);
    REQUIRE(r.prompt.back() <= 149);  // never past the end of the text
    starts.insert(r.prompt.front());
  }
  CHECK(starts.size() > 30);  // offsets spread over the text
  CHECK(make_workload(spec, pool)[77].prompt == a[77].prompt);
  spec.input_len = {51, 51};
  CHECK_THROWS_WITH(make_workload(spec, pool), "the prompt text has 50 tokens, fewer than the longest prompt (51)");
}

TEST_CASE("workloads: a shared prefix starts every prompt, the suffixes are drawn per request", "[bench]") {
  std::vector<std::int32_t> pool(300);
  std::iota(pool.begin(), pool.end(), 1000);
  WorkloadSpec spec;
  spec.num_requests = 40;
  spec.input_len = {16, 16};
  spec.shared_prefix_len = 200;
  spec.seed = 5;
  for (const bool contiguous : {false, true}) {
    INFO("contiguous " << contiguous);
    spec.contiguous_prompts = contiguous;
    const auto a = make_workload(spec, pool);
    const std::vector<std::int32_t> prefix(a[0].prompt.begin(), a[0].prompt.begin() + 200);
    std::set<std::vector<std::int32_t>> suffixes;
    for (const auto& r : a) {
      REQUIRE(r.prompt.size() == 216);
      CHECK(std::equal(prefix.begin(), prefix.end(), r.prompt.begin()));
      suffixes.emplace(r.prompt.begin() + 200, r.prompt.end());
    }
    // Drawn token by token, no two suffixes coincide; as windows (285 offsets for 40 draws) a few may.
    CHECK(suffixes.size() >= (contiguous ? 30u : 40u));
    if (contiguous) {
      for (std::size_t i = 1; i < prefix.size(); ++i) REQUIRE(prefix[i] == prefix[i - 1] + 1);
    } else {
      CHECK(std::set<std::int32_t>(prefix.begin(), prefix.end()).size() > 100);  // drawn, not one token repeated
    }
    CHECK(make_workload(spec, pool)[31].prompt == a[31].prompt);
  }
  spec.shared_prefix_len = 301;
  CHECK_THROWS_WITH(make_workload(spec, pool), "the prompt text has 300 tokens, fewer than the longest prompt (301)");
  spec.shared_prefix_len = -1;
  CHECK_THROWS_WITH(make_workload(spec, pool), "the shared prefix length is negative (-1)");
}

TEST_CASE("percentiles interpolate like numpy, the summary counts only successes", "[bench]") {
  CHECK(percentile({}, 50) == 0.0);
  CHECK(percentile({3, 1, 2}, 50) == 2.0);
  CHECK(percentile({1, 2, 3, 4}, 50) == 2.5);
  CHECK(percentile({1, 2, 3, 4}, 99) == Approx(3.97));
  CHECK(percentile({5}, 99) == 5.0);
  RequestRecord ok;
  ok.success = true;
  ok.input_tokens = 10;
  ok.output_tokens = 20;
  ok.ttft_s = 0.1;
  ok.itl_s = {0.01, 0.03};
  ok.e2e_s = 0.5;
  RequestRecord failed;
  failed.error = "HTTP 503";
  RequestRecord no_text = ok;  // its tokens decoded to no text: no chunk to time
  no_text.ttft_s = 0;
  no_text.itl_s.clear();
  const Summary s = summarize({ok, ok, failed, no_text}, 2.0);
  CHECK(s.completed == 3);
  CHECK(s.failed == 1);
  CHECK(s.request_throughput == 1.5);
  CHECK(s.output_throughput == 30.0);
  CHECK(s.total_token_throughput == 45.0);
  CHECK(s.ttft.mean == Approx(0.1));
  CHECK(s.ttft.p50 == Approx(0.1));
  CHECK(s.itl.p50 == Approx(0.02));
  CHECK(s.e2e.p99 == Approx(0.5));
  CHECK_THAT(format_summary(s), Contains("Output token throughput (tok/s):"));
}

TEST_CASE("pagedllm-bench against a server: summary, JSON, plots", "[bench]") {
  ChildProcess server({PAGEDLLM_BINARY_DIR "/bin/pagedllm-fake-server", "--step-ms", "2"});
  const std::string line = server.read_line();
  REQUIRE_THAT(line, Contains("listening on "));
  const std::string url = line.substr(line.find("http://"), line.find(" (ready") - line.find("http://"));
  TempDir dir;
  const auto json_path = dir.path() / "result.json";
  const auto plots = dir.path() / "plots";
  const auto r = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") + " --url " + url +
                             " --num-requests 24 --input-len 8:32 --output-len 12 --request-rate 200 --concurrency 8"
                             " --json '" + json_path.string() + "' --plot-dir '" + plots.string() + "'");
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("Successful requests:"));
  CHECK_THAT(r.out, Contains("Median TTFT (ms):"));
  std::ifstream in(json_path);
  const auto result = nlohmann::json::parse(in);
  CHECK(result["summary"]["completed"] == 24);
  CHECK(result["summary"]["failed"] == 0);
  CHECK(result["summary"]["output_tokens"] == 24 * 12);
  CHECK(result["summary"]["request_throughput"].get<double>() > 0);
  CHECK(result["config"]["concurrency"] == 8);
  REQUIRE(result["requests"].size() == 24);
  for (const auto& req : result["requests"]) {
    CHECK(req["success"] == true);
    CHECK(req["output_tokens"] == 12);
    CHECK(req["input_tokens"].get<int>() >= 8);
    CHECK(req["ttft_s"].get<double>() > 0);
    CHECK(req["itl_s"].size() >= 1);
  }
  for (const char* png : {"ttft.png", "itl.png", "e2e.png", "throughput.png"}) {
    INFO(png);
    CHECK(std::filesystem::file_size(plots / png) > 1000);
  }

  // Prompts from a file: windows of its tokens.
  const auto text = dir.path() / "prompts.py";
  {
    std::ofstream out(text);
    for (int i = 0; i < 40; ++i) out << "def f" << i << "(x):\n    return x * " << i << "\n";
  }
  const auto windows_json = dir.path() / "windows.json";
  const auto w = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") + " --url " + url +
                             " --num-requests 6 --input-len 16 --output-len 4 --prompt-file '" + text.string() +
                             "' --json '" + windows_json.string() + "'");
  INFO(w.out << w.err);
  REQUIRE(w.exit_code == 0);
  std::ifstream windows_in(windows_json);
  const auto windows = nlohmann::json::parse(windows_in);
  CHECK(windows["summary"]["completed"] == 6);
  CHECK(windows["config"]["prompt_file"] == text.string());

  // A shared prefix: every request's prompt is the prefix plus its own input.
  const auto shared_json = dir.path() / "shared.json";
  const auto p = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") + " --url " + url +
                             " --num-requests 6 --shared-prefix-len 40 --input-len 8 --output-len 4 --concurrency 3"
                             " --json '" + shared_json.string() + "'");
  INFO(p.out << p.err);
  REQUIRE(p.exit_code == 0);
  CHECK_THAT(p.out, Contains("input 40 shared + 8 tokens"));
  std::ifstream shared_in(shared_json);
  const auto shared = nlohmann::json::parse(shared_in);
  CHECK(shared["config"]["shared_prefix_len"] == 40);
  CHECK(shared["summary"]["completed"] == 6);
  for (const auto& req : shared["requests"]) CHECK(req["input_tokens"] == 48);
  server.signal(SIGTERM);
  CHECK(server.wait(std::chrono::seconds(10)) == 0);

  const auto bad = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") + " --input-len 0");
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("--input-len"));
  const auto missing = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") +
                                   " --prompt-file '" + (dir.path() / "no-such-file").string() + "'");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.err, Contains("--prompt-file: cannot read"));
  const auto negative = run_command(std::string(PAGEDLLM_BINARY_DIR "/bin/pagedllm-bench") + " --shared-prefix-len -4");
  CHECK(negative.exit_code == 2);
  CHECK_THAT(negative.err, Contains("--shared-prefix-len must be a number >= 0"));
}
