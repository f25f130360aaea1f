// EngineMetrics -> Prometheus text exposition format 0.0.4.

#include <catch2/catch.hpp>

#include <sstream>
#include <string>

#include "core/server/prometheus_metrics.h"

using namespace pagedllm;
using namespace pagedllm::server;
using Catch::Matchers::Contains;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    if (l == line) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("gauges, counters and the finish-reason counter", "[server][metrics]") {
  EngineMetrics m;
  m.scheduler.num_running = 3;
  m.scheduler.num_waiting = 2;
  m.scheduler.num_swapped = 1;
  m.scheduler.num_preemptions_recompute = 4;
  m.scheduler.num_preemptions_swap = 1;
  m.scheduler.kv.num_device_blocks = 100;
  m.scheduler.kv.num_free_device_blocks = 75;
  m.scheduler.kv.prefix_cache_queried_tokens = 640;
  m.scheduler.kv.prefix_cache_hit_tokens = 320;
  m.prompt_tokens_total = 1000;
  m.generation_tokens_total = 2000;
  m.requests_finished_stop = 7;
  m.requests_finished_length = 8;
  m.requests_aborted = 9;
  const std::string text = render_prometheus(m, "tiny");
  CHECK(has_line(text, "# TYPE pagedllm:num_requests_running gauge"));
  CHECK(has_line(text, "pagedllm:num_requests_running{model_name=\"tiny\"} 3"));
  CHECK(has_line(text, "pagedllm:num_requests_waiting{model_name=\"tiny\"} 2"));
  CHECK(has_line(text, "pagedllm:num_requests_swapped{model_name=\"tiny\"} 1"));
  CHECK(has_line(text, "pagedllm:kv_cache_usage_perc{model_name=\"tiny\"} 0.25"));
  CHECK(has_line(text, "pagedllm:kv_cache_blocks_in_use{model_name=\"tiny\"} 25"));
  CHECK(has_line(text, "pagedllm:kv_cache_num_blocks{model_name=\"tiny\"} 100"));
  CHECK(has_line(text, "# TYPE pagedllm:prefix_cache_queries_total counter"));
  CHECK(has_line(text, "pagedllm:prefix_cache_queries_total{model_name=\"tiny\"} 640"));
  CHECK(has_line(text, "pagedllm:prefix_cache_hits_total{model_name=\"tiny\"} 320"));
  CHECK(has_line(text, "pagedllm:prompt_tokens_total{model_name=\"tiny\"} 1000"));
  CHECK(has_line(text, "pagedllm:generation_tokens_total{model_name=\"tiny\"} 2000"));
  CHECK(has_line(text, "pagedllm:num_preemptions_total{model_name=\"tiny\"} 5"));
  CHECK(has_line(text, "pagedllm:request_success_total{finished_reason=\"stop\",model_name=\"tiny\"} 7"));
  CHECK(has_line(text, "pagedllm:request_success_total{finished_reason=\"length\",model_name=\"tiny\"} 8"));
  CHECK(has_line(text, "pagedllm:request_success_total{finished_reason=\"abort\",model_name=\"tiny\"} 9"));
  // Speculative decoding counters only when it is on.
  CHECK_THAT(text, !Contains("spec_decode"));
  m.speculative_decoding_enabled = true;
  m.spec_decode_draft_tokens = 40;
  m.spec_decode_accepted_tokens = 30;
  const std::string spec = render_prometheus(m, "tiny");
  CHECK(has_line(spec, "pagedllm:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 40"));
  CHECK(has_line(spec, "pagedllm:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 30"));
}

TEST_CASE("histograms are cumulative with +Inf, sum and count", "[server][metrics]") {
  EngineMetrics m;
  m.time_to_first_token.observe(0.003);  // in le=0.005 and above
  m.time_to_first_token.observe(0.03);   // in le=0.04 and above
  m.time_to_first_token.observe(5000.0); // only +Inf
  const std::string text = render_prometheus(m, "tiny");
  CHECK(has_line(text, "# TYPE pagedllm:time_to_first_token_seconds histogram"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"tiny\"} 0"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_bucket{le=\"0.005\",model_name=\"tiny\"} 1"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_bucket{le=\"0.04\",model_name=\"tiny\"} 2"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_bucket{le=\"2560\",model_name=\"tiny\"} 2"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"tiny\"} 3"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_sum{model_name=\"tiny\"} 5000.033"));
  CHECK(has_line(text, "pagedllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 3"));
  for (const char* name : {"pagedllm:inter_token_latency_seconds", "pagedllm:e2e_request_latency_seconds",
                           "pagedllm:request_queue_time_seconds"}) {
    CHECK(has_line(text, std::string("# TYPE ") + name + " histogram"));
    CHECK(has_line(text, std::string(name) + "_count{model_name=\"tiny\"} 0"));
  }
}

TEST_CASE("every family has HELP and TYPE, label values are escaped", "[server][metrics]") {
  const std::string text = render_prometheus(EngineMetrics{}, "a\"b\\c\nd");
  CHECK(has_line(text, "pagedllm:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\"} 0"));
  std::istringstream in(text);
  std::string previous;
  int families = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("# TYPE ")) {
      ++families;
      CHECK(previous.starts_with("# HELP " + line.substr(7, line.find(' ', 7) - 7) + " "));
    }
    previous = line;
  }
  CHECK(families == 16);
}
