#include "tools/bench/bench_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

namespace pagedllm::bench {

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = q / 100.0 * static_cast<double>(values.size() - 1);
  const auto low = static_cast<std::size_t>(std::floor(rank));
  const auto high = static_cast<std::size_t>(std::ceil(rank));
  return values[low] + (values[high] - values[low]) * (rank - static_cast<double>(low));
}

LatencyStats latency_stats(const std::vector<double>& values) {
  LatencyStats s;
  if (values.empty()) return s;
  s.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50 = percentile(values, 50);
  s.p90 = percentile(values, 90);
  s.p99 = percentile(values, 99);
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

Summary summarize(const std::vector<RequestRecord>& records, double duration_s) {
  Summary s;
  s.duration_s = duration_s;
  std::vector<double> ttft, itl, e2e;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.input_tokens += r.input_tokens;
    s.output_tokens += r.output_tokens;
    // A request whose output never had text (ids that decode to nothing, which a random-weight model with a
    // vocabulary larger than its tokenizer's mostly emits) has no time to first token to count.
    if (r.ttft_s > 0) ttft.push_back(r.ttft_s);
    itl.insert(itl.end(), r.itl_s.begin(), r.itl_s.end());
    e2e.push_back(r.e2e_s);
  }
  if (duration_s > 0) {
    s.request_throughput = s.completed / duration_s;
    s.output_throughput = static_cast<double>(s.output_tokens) / duration_s;
    s.total_token_throughput = static_cast<double>(s.input_tokens + s.output_tokens) / duration_s;
  }
  s.ttft = latency_stats(ttft);
  s.itl = latency_stats(itl);
  s.e2e = latency_stats(e2e);
  return s;
}

std::string format_summary(const Summary& s) {
  std::string out;
  auto line = [&](const std::string& name, const std::string& value) { out += fmt::format("{:<40}{:>14}\n", name, value); };
  auto latency = [&](const char* title, const char* key, const LatencyStats& l) {
    out += fmt::format("{:-^54}\n", std::string(" ") + title + " ");
    line(fmt::format("Mean {} (ms):", key), fmt::format("{:.2f}", l.mean * 1e3));
    line(fmt::format("Median {} (ms):", key), fmt::format("{:.2f}", l.p50 * 1e3));
    line(fmt::format("P99 {} (ms):", key), fmt::format("{:.2f}", l.p99 * 1e3));
  };
  out += fmt::format("{:=^54}\n", " Serving Benchmark Result ");
  line("Successful requests:", std::to_string(s.completed));
  line("Failed requests:", std::to_string(s.failed));
  line("Benchmark duration (s):", fmt::format("{:.2f}", s.duration_s));
  line("Total input tokens:", std::to_string(s.input_tokens));
  line("Total generated tokens:", std::to_string(s.output_tokens));
  line("Request throughput (req/s):", fmt::format("{:.2f}", s.request_throughput));
  line("Output token throughput (tok/s):", fmt::format("{:.2f}", s.output_throughput));
  line("Total token throughput (tok/s):", fmt::format("{:.2f}", s.total_token_throughput));
  latency("Time to First Token", "TTFT", s.ttft);
  latency("Inter-token Latency", "ITL", s.itl);
  latency("End-to-end Latency", "E2E", s.e2e);
  out += fmt::format("{:=^54}\n", "");
  return out;
}

namespace {
nlohmann::json to_json(const LatencyStats& l) {
  return {{"mean", l.mean}, {"p50", l.p50}, {"p90", l.p90}, {"p99", l.p99}, {"max", l.max}};
}
}  // namespace

nlohmann::json to_json(const Summary& s) {
  return {{"completed", s.completed},
          {"failed", s.failed},
          {"duration_s", s.duration_s},
          {"input_tokens", s.input_tokens},
          {"output_tokens", s.output_tokens},
          {"request_throughput", s.request_throughput},
          {"output_throughput", s.output_throughput},
          {"total_token_throughput", s.total_token_throughput},
          {"ttft_s", to_json(s.ttft)},
          {"itl_s", to_json(s.itl)},
          {"e2e_s", to_json(s.e2e)}};
}

nlohmann::json to_json(const RequestRecord& r) {
  return {{"input_tokens", r.input_tokens}, {"max_tokens", r.max_tokens}, {"start_s", r.start_s},
          {"success", r.success},           {"error", r.error},           {"output_tokens", r.output_tokens},
          {"ttft_s", r.ttft_s},             {"itl_s", r.itl_s},           {"e2e_s", r.e2e_s}};
}

}  // namespace pagedllm::bench
