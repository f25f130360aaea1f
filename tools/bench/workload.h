#pragma once
// pagedllm-bench's workload: request lengths (fixed or uniform in a range),
// arrival times (Poisson at a rate, or all at once), prompts of exact token
// lengths drawn from a pool of real token ids. Deterministic for a seed.

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace pagedllm::bench {

// "128" (fixed) or "64:256" (uniform, inclusive).
struct LengthRange {
  int min = 0;
  int max = 0;
  static LengthRange parse(const std::string& text);  // throws std::invalid_argument
  std::string str() const;
};

struct PlannedRequest {
  double arrival_s = 0;  // since the start; 0 for all under a fixed concurrency
  std::vector<std::int32_t> prompt;
  int max_tokens = 0;
};

struct WorkloadSpec {
  int num_requests = 100;
  LengthRange input_len{128, 128};
  LengthRange output_len{128, 128};
  // Poisson arrivals at this many requests per second; unset = all at once.
  std::optional<double> request_rate;
  std::uint64_t seed = 0;
};

// `token_pool` must not be empty.
std::vector<PlannedRequest> make_workload(const WorkloadSpec& spec, const std::vector<std::int32_t>& token_pool);

}  // namespace pagedllm::bench
