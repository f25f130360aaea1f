#pragma once
// What the engine measures, as plain data: a snapshot the HTTP server renders
// as Prometheus text (GET /metrics) and the CLI summarises. Gauges describe now;
// counters and histograms only grow over the engine's life.

#include <array>
#include <cstdint>
#include <vector>

#include "core/scheduler/scheduler_stats.h"

namespace pagedllm {

// A cumulative histogram in Prometheus' shape: counts[i] is the number of
// observations <= upper_bounds[i]; the implicit +Inf bucket is `count`.
class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds);

  void observe(double value);

  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Cumulative, one per upper bound.
  const std::vector<std::uint64_t>& cumulative_counts() const { return counts_; }
  std::uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<std::uint64_t> counts_;
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
};

// Latency buckets in seconds, the ones vLLM uses for the same series.
std::vector<double> time_to_first_token_buckets();
std::vector<double> inter_token_latency_buckets();
std::vector<double> request_latency_buckets();

struct EngineMetrics {
  // Queues and the KV cache, read from the scheduler after the last step.
  SchedulerStats scheduler;

  // --- Counters ---
  std::int64_t prompt_tokens_total = 0;       // prompt tokens of requests that started
  std::int64_t generation_tokens_total = 0;   // tokens sampled (accepted drafts included)
  std::int64_t requests_finished_stop = 0;    // EOS, stop token or stop string
  std::int64_t requests_finished_length = 0;  // max_tokens or the context limit
  std::int64_t requests_aborted = 0;          // client gone, shutdown, or engine failure
  std::int64_t spec_decode_num_drafts = 0;      // verifications (one per sequence and step with drafts)
  std::int64_t spec_decode_draft_tokens = 0;    // drafts verified by the target
  std::int64_t spec_decode_accepted_tokens = 0;
  // [i]: verifications that accepted draft i + 1 (so also drafts 1..i).
  std::vector<std::int64_t> spec_decode_accepted_per_position;
  // Requests that could speculate but arrived at speculative.disable_by_batch_size.
  std::int64_t spec_decode_disabled_by_batch_size = 0;
  bool speculative_decoding_enabled = false;

  // --- Histograms (seconds) ---
  Histogram time_to_first_token{time_to_first_token_buckets()};  // arrival -> first token
  Histogram inter_token_latency{inter_token_latency_buckets()};  // between tokens of a sequence
  Histogram e2e_request_latency{request_latency_buckets()};      // arrival -> finished
  Histogram queue_time{request_latency_buckets()};               // arrival -> first scheduled
};

}  // namespace pagedllm
