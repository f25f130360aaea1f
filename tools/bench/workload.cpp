#include "tools/bench/workload.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace pagedllm::bench {

LengthRange LengthRange::parse(const std::string& text) {
  auto number = [&](const std::string& part) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || part.empty() || value < 1) {
      throw std::invalid_argument(fmt::format("'{}' is not a length (N or MIN:MAX, positive)", text));
    }
    return value;
  };
  const std::size_t colon = text.find(':');
  if (colon == std::string::npos) {
    const int n = number(text);
    return {n, n};
  }
  LengthRange range{number(text.substr(0, colon)), number(text.substr(colon + 1))};
  if (range.min > range.max) throw std::invalid_argument(fmt::format("'{}': MIN is larger than MAX", text));
  return range;
}

std::string LengthRange::str() const { return min == max ? std::to_string(min) : fmt::format("{}:{}", min, max); }

std::vector<PlannedRequest> make_workload(const WorkloadSpec& spec, const std::vector<std::int32_t>& token_pool) {
  if (token_pool.empty()) throw std::invalid_argument("the token pool is empty");
  if (spec.shared_prefix_len < 0) {
    throw std::invalid_argument(fmt::format("the shared prefix length is negative ({})", spec.shared_prefix_len));
  }
  const int longest_window = std::max(spec.input_len.max, spec.shared_prefix_len);
  if (spec.contiguous_prompts && token_pool.size() < static_cast<std::size_t>(longest_window)) {
    throw std::invalid_argument(fmt::format("the prompt text has {} tokens, fewer than the longest prompt ({})",
                                            token_pool.size(), longest_window));
  }
  std::mt19937_64 random(spec.seed);
  std::uniform_int_distribution<int> input(spec.input_len.min, spec.input_len.max);
  std::uniform_int_distribution<int> output(spec.output_len.min, spec.output_len.max);
  std::uniform_int_distribution<std::size_t> token(0, token_pool.size() - 1);
  std::exponential_distribution<double> gap(spec.request_rate.value_or(1.0));
  // Appends `length` tokens to `prompt`: a window of the pool, or tokens drawn one by one.
  auto append_tokens = [&](std::vector<std::int32_t>& prompt, std::size_t length) {
    if (spec.contiguous_prompts) {
      const std::size_t start = std::uniform_int_distribution<std::size_t>(0, token_pool.size() - length)(random);
      prompt.insert(prompt.end(), token_pool.begin() + std::ptrdiff_t(start),
                    token_pool.begin() + std::ptrdiff_t(start + length));
    } else {
      for (std::size_t i = 0; i < length; ++i) prompt.push_back(token_pool[token(random)]);
    }
  };
  std::vector<std::int32_t> shared_prefix;
  if (spec.shared_prefix_len > 0) append_tokens(shared_prefix, static_cast<std::size_t>(spec.shared_prefix_len));
  std::vector<PlannedRequest> requests(static_cast<std::size_t>(spec.num_requests));
  double clock = 0;
  for (PlannedRequest& r : requests) {
    if (spec.request_rate) {
      r.arrival_s = clock;
      clock += gap(random);
    }
    const auto length = static_cast<std::size_t>(input(random));
    r.prompt = shared_prefix;
    append_tokens(r.prompt, length);
    r.max_tokens = output(random);
  }
  return requests;
}

}  // namespace pagedllm::bench
