#pragma once
// pagedllm-bench's workload: request lengths (fixed or uniform in a range),
// arrival times (Poisson at a rate, or all at once), prompts of exact token
// lengths from a pool of real token ids: each token drawn on its own, or a
// contiguous window of the pool (a text's own continuation), optionally after
// a prefix every request shares (a system prompt). Deterministic for a seed.

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
  // false: every prompt token drawn from the pool on its own (text-like
  // tokens in no order); true: each prompt the pool's tokens from a random
  // offset on, so the prompt reads like the text it came from.
  bool contiguous_prompts = false;
  // Every prompt starts with the same this many tokens (drawn once, like the
  // rest), followed by input_len tokens of its own: many requests on one long
  // system prompt, the workload a prefix cache serves. 0: no shared prefix.
  int shared_prefix_len = 0;
};

// `token_pool` must not be empty, and with contiguous_prompts must hold at
// least input_len.max and shared_prefix_len tokens; shared_prefix_len must not
// be negative (std::invalid_argument otherwise).
std::vector<PlannedRequest> make_workload(const WorkloadSpec& spec, const std::vector<std::int32_t>& token_pool);

}  // namespace pagedllm::bench
