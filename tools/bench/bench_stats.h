#pragma once
// What pagedllm-bench measured per request, and the summary it prints and
// writes: throughput, TTFT, inter-token latency and end-to-end latency.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagedllm::bench {

struct RequestRecord {
  int input_tokens = 0;
  int max_tokens = 0;
  double start_s = 0;         // when it was sent, since the run started
  bool success = false;
  std::string error;
  int output_tokens = 0;      // from the usage chunk
  double ttft_s = 0;          // send -> first chunk with text; 0: no chunk had text
  std::vector<double> itl_s;  // between consecutive chunks with text
  double e2e_s = 0;           // send -> [DONE]
};

struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};

// Linear interpolation between closest ranks (numpy's default); zeros when empty.
double percentile(std::vector<double> values, double q);
LatencyStats latency_stats(const std::vector<double>& values);

struct Summary {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;  // first send -> last finish
  std::int64_t input_tokens = 0;
  std::int64_t output_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_throughput = 0;   // output tokens / duration
  double total_token_throughput = 0;
  LatencyStats ttft, itl, e2e;
};

Summary summarize(const std::vector<RequestRecord>& records, double duration_s);
std::string format_summary(const Summary& summary);
nlohmann::json to_json(const Summary& summary);
nlohmann::json to_json(const RequestRecord& record);

}  // namespace pagedllm::bench
