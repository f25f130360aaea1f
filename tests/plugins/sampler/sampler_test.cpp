// sampler: the real plugin .so against plain reference computations, on the
// CPU and (in a CUDA build) on the emulated cuda:0; and the two against each
// other on identical inputs.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"

#ifdef PAGEDLLM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

using Catch::Matchers::Contains;

namespace {

constexpr pllm_device kCpu{PLLM_DEVICE_CPU, 0};
constexpr pllm_device kCuda{PLLM_DEVICE_CUDA, 0};

// Every device a sampler of this build runs on: each test runs on all of them.
std::vector<pllm_device> devices() {
#ifdef PAGEDLLM_HAVE_CUDA
  return {kCpu, kCuda};
#else
  return {kCpu};
#endif
}
#define EACH_DEVICE GENERATE(Catch::Generators::from_range(devices()))

std::string name_of(const pllm_device& d) { return d.type == PLLM_DEVICE_CPU ? "cpu" : "cuda:0"; }

// Memory on `device` holding a copy of `host` (freed with the object).
class DeviceFloats {
 public:
  DeviceFloats(const pllm_device& device, const std::vector<float>& host) : device_(device) {
#ifdef PAGEDLLM_HAVE_CUDA
    if (device.type == PLLM_DEVICE_CUDA) {
      REQUIRE(cudaMalloc(&data_, std::max<std::size_t>(1, host.size()) * sizeof(float)) == cudaSuccess);
      REQUIRE(cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
      return;
    }
#endif
    copy_ = host;
    data_ = copy_.data();
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  ~DeviceFloats() {
#ifdef PAGEDLLM_HAVE_CUDA
    if (device_.type == PLLM_DEVICE_CUDA) (void)cudaFree(data_);
#endif
  }
  float* data() const { return static_cast<float*>(data_); }
  std::vector<float> to_host(std::size_t count) const {
    std::vector<float> out(count);
#ifdef PAGEDLLM_HAVE_CUDA
    if (device_.type == PLLM_DEVICE_CUDA) {
      REQUIRE(cudaMemcpy(out.data(), data_, count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
      return out;
    }
#endif
    std::copy_n(copy_.begin(), count, out.begin());
    return out;
  }

 private:
  pllm_device device_;
  void* data_ = nullptr;
  std::vector<float> copy_;
};

std::shared_ptr<pagedllm::PluginLibrary> sampler_library() {
  static pagedllm::PluginRegistry registry({PAGEDLLM_BINARY_DIR "/plugins"});
  return registry.load("sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler.plugin");
}

pllm_sampling_params params(float temperature = 1.0f) {
  pllm_sampling_params p{};
  p.struct_size = sizeof p;
  p.temperature = temperature;
  p.top_p = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.repetition_penalty = 1.0f;
  p.seed = 0;
  return p;
}

// One request row: its parameters, history and logits.
struct Row {
  pllm_sampling_params params;
  std::vector<float> logits;
  std::vector<int32_t> prompt, output;
  uint64_t offset = 0;
  // logit_bias and min_tokens' banned ids (params' pointers are set from these per call).
  std::vector<int32_t> bias_ids{};
  std::vector<float> bias_values{};
  std::vector<int32_t> banned{};
  int32_t scored = -1;  // >= 0: a PLLM_SAMPLE_ROW_SCORE row reporting this token
};

// Structured output: per row, the allowed tokens (bit id % 32 of word id / 32); empty = unconstrained.
using Masks = std::vector<std::vector<uint32_t>>;

struct Result {
  std::vector<int32_t> status;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

class Sampler {
 public:
  explicit Sampler(const pllm_device& device, const std::string& options = "{}") : device_(device) {
    pllm_sampler_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options.c_str();
    args.device = device;
    instance_ = pagedllm::create_plugin_instance<pllm_sampler_api, pllm_sampler>(sampler_library(), args);
  }

  // All rows share one vocabulary; logits are laid out with a padded row
  // stride (vocab + 3) so the plugin must honour strides[0].
  // with_logprobs false passes null logprobs (a speculator's draft and verify calls);
  // with_status false, a null row_status (a non-finite row fails the call).
  Result sample(const std::vector<Row>& rows, int32_t max_top = 0, bool with_logprobs = true,
                bool with_status = false) {
    Batch b(rows, device_, masks, mask_words);
    Result r;
    r.status.assign(rows.size(), -7);
    r.tokens.assign(rows.size(), -7);
    r.logprobs.assign(rows.size(), NAN);
    r.top_ids.assign(rows.size() * std::size_t(max_top), -7);
    r.top_logprobs.assign(rows.size() * std::size_t(max_top), NAN);
    pllm_sample_output out{};
    out.struct_size = sizeof out;
    out.token_ids = r.tokens.data();
    out.logprobs = with_logprobs ? r.logprobs.data() : nullptr;
    out.max_top_logprobs = max_top;
    out.top_token_ids = r.top_ids.data();
    out.top_logprobs = r.top_logprobs.data();
    out.row_status = with_status ? r.status.data() : nullptr;
    pllm_error error{};
    pagedllm::check_plugin_call(instance_.api().sample(instance_.get(), &b.batch, &out, &error), error,
                                instance_.library(), "sample");
    return r;
  }

  // [rows, vocab] processed distributions.
  // on_device: the probabilities are written to the sampler's device, else to the host.
  std::vector<std::vector<float>> probabilities(const std::vector<Row>& rows, bool on_device = false,
                                                std::vector<int32_t>* status = nullptr) {
    Batch b(rows, device_, masks, mask_words);
    const int64_t vocab = int64_t(rows[0].logits.size());
    const pllm_device where = on_device ? device_ : kCpu;
    DeviceFloats out_probs(where, std::vector<float>(rows.size() * std::size_t(vocab), NAN));
    pllm_tensor t{};
    t.struct_size = sizeof t;
    t.data = out_probs.data();
    t.dtype = PLLM_DTYPE_F32;
    t.device = where;
    t.ndim = 2;
    t.shape[0] = int64_t(rows.size());
    t.shape[1] = vocab;
    t.strides[0] = vocab;
    t.strides[1] = 1;
    pllm_error error{};
    REQUIRE(instance_.api().probabilities != nullptr);
    if (status) status->assign(rows.size(), -7);
    const pllm_probabilities_output out_struct{sizeof(pllm_probabilities_output), &t,
                                               status ? status->data() : nullptr};
    pagedllm::check_plugin_call(instance_.api().probabilities(instance_.get(), &b.batch, &out_struct, &error),
                                error, instance_.library(), "probabilities");
    const std::vector<float> flat = out_probs.to_host(rows.size() * std::size_t(vocab));
    std::vector<std::vector<float>> out;
    for (std::size_t r = 0; r < rows.size(); ++r) {
      out.emplace_back(flat.begin() + std::ptrdiff_t(r * std::size_t(vocab)),
                       flat.begin() + std::ptrdiff_t((r + 1) * std::size_t(vocab)));
    }
    return out;
  }

 private:
  // The logits of `in` on `device`, row r's at row (r + 1) of a tensor with a
  // spare first row and a padded row stride (vocab + 3), so the plugin must
  // honour logits_row and strides[0]; padding and the spare row are NaN and must
  // never be read.
  struct Batch {
    std::vector<pllm_sampling_params> params;
    std::vector<pllm_sample_row> rows;
    std::unique_ptr<DeviceFloats> logits;
    pllm_tensor logits_tensor{};
    pllm_sample_batch batch{};
    std::vector<uint32_t> bitmask;
    std::vector<uint8_t> constrained;
    Batch(const std::vector<Row>& in, const pllm_device& device, const Masks& masks = {}, int32_t mask_words = 0) {
      const std::size_t vocab = in[0].logits.size();
      const std::size_t words = mask_words > 0 ? std::size_t(mask_words) : (vocab + 31) / 32;
      // Unconstrained rows' mask words stay zero (allowing nothing): constrained_rows says which to read.
      if (!masks.empty()) {
        REQUIRE(masks.size() == in.size());
        bitmask.assign(in.size() * words, 0u);
        constrained.assign(in.size(), 0);
        for (std::size_t r = 0; r < in.size(); ++r) {
          if (masks[r].empty()) continue;
          std::copy_n(masks[r].begin(), std::min(words, masks[r].size()), bitmask.begin() + std::ptrdiff_t(r * words));
          constrained[r] = 1;
        }
        batch.token_bitmask = bitmask.data();
        batch.bitmask_words = int32_t(words);
        batch.constrained_rows = constrained.data();
      }
      const std::size_t stride = vocab + 3;
      std::vector<float> host((in.size() + 1) * stride, NAN);
      params.reserve(in.size());
      for (std::size_t r = 0; r < in.size(); ++r) {
        std::copy(in[r].logits.begin(), in[r].logits.end(), host.begin() + std::ptrdiff_t((r + 1) * stride));
        params.push_back(in[r].params);
        if (PLLM_HAS_FIELD(pllm_sampling_params, &params.back(), min_tokens_banned_ids)) {
          params.back().num_logit_bias = int32_t(in[r].bias_ids.size());
          params.back().logit_bias_token_ids = in[r].bias_ids.data();
          params.back().logit_bias_values = in[r].bias_values.data();
          params.back().num_min_tokens_banned_ids = int32_t(in[r].banned.size());
          params.back().min_tokens_banned_ids = in[r].banned.data();
        }
        pllm_sample_row row{};
        row.struct_size = sizeof row;
        row.params = &params.back();
        row.prompt_token_ids = in[r].prompt.data();
        row.num_prompt_tokens = int32_t(in[r].prompt.size());
        row.output_token_ids = in[r].output.data();
        row.num_output_tokens = int32_t(in[r].output.size());
        row.random_offset = in[r].offset;
        row.logits_row = int32_t(r + 1);
        if (in[r].scored >= 0) {
          row.flags = PLLM_SAMPLE_ROW_SCORE;
          row.scored_token_id = in[r].scored;
        }
        rows.push_back(row);
      }
      logits = std::make_unique<DeviceFloats>(device, host);
      batch.struct_size = sizeof batch;
      batch.num_rows = int32_t(in.size());
      batch.row_stride = sizeof(pllm_sample_row);
      batch.rows = rows.data();
      logits_tensor.struct_size = sizeof logits_tensor;
      logits_tensor.data = logits->data();
      logits_tensor.dtype = PLLM_DTYPE_F32;
      logits_tensor.device = device;
      logits_tensor.ndim = 2;
      logits_tensor.shape[0] = int64_t(in.size() + 1);
      logits_tensor.shape[1] = int64_t(vocab);
      logits_tensor.strides[0] = int64_t(stride);
      logits_tensor.strides[1] = 1;
      batch.logits = &logits_tensor;
    }
  };
  pllm_device device_;
  pagedllm::SamplerInstance instance_;

 public:
  // Structured output for the next calls: one mask per row (empty: none), and the words per
  // row the batch declares (0: ceil(vocab / 32), the right width).
  Masks masks;
  int32_t mask_words = 0;
};

std::vector<float> random_logits(std::mt19937& rng, std::size_t vocab, float spread = 4.0f) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> l(vocab);
  for (auto& x : l) x = normal(rng);
  return l;
}

std::vector<double> log_softmax(const std::vector<float>& l) {
  const double m = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (float x : l) s += std::exp(double(x) - m);
  std::vector<double> out;
  for (float x : l) out.push_back(double(x) - m - std::log(s));
  return out;
}

// The reference pipeline (sdk/sampler.h's order): logit_bias, min_tokens' ban
// while the output is shorter than min_tokens, penalties, then temperature,
// min-p, top-k, top-p; returns the processed distribution.
std::vector<double> reference_penalized(const Row& row) {
  std::vector<double> l(row.logits.begin(), row.logits.end());
  const auto& p = row.params;
  if (p.struct_size >= sizeof(pllm_sampling_params)) {
    for (std::size_t i = 0; i < row.bias_ids.size(); ++i) {
      l[std::size_t(row.bias_ids[i])] = double(row.logits[std::size_t(row.bias_ids[i])] + row.bias_values[i]);
    }
    if (int32_t(row.output.size()) < p.min_tokens) {
      for (int32_t id : row.banned) l[std::size_t(id)] = -INFINITY;
    }
  }
  std::vector<int> count(l.size(), 0);
  std::vector<bool> seen(l.size(), false);
  for (int32_t t : row.prompt) seen[std::size_t(t)] = true;
  for (int32_t t : row.output) {
    seen[std::size_t(t)] = true;
    ++count[std::size_t(t)];
  }
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
    l[i] -= double(p.frequency_penalty) * count[i] + (count[i] > 0 ? double(p.presence_penalty) : 0.0);
  }
  return l;
}

std::vector<double> reference_distribution(const Row& row) {
  const auto& p = row.params;
  std::vector<double> l = reference_penalized(row);
  std::vector<double> probs(l.size(), 0.0);
  if (p.temperature < 1e-5f) {
    probs[std::size_t(std::max_element(l.begin(), l.end()) - l.begin())] = 1.0;
    return probs;
  }
  for (auto& x : l) x /= double(p.temperature);
  std::vector<int32_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return l[std::size_t(a)] > l[std::size_t(b)]; });
  const double m = l[std::size_t(order[0])];
  std::vector<double> w(l.size());
  for (std::size_t i = 0; i < l.size(); ++i) w[i] = std::exp(l[i] - m);
  std::size_t keep = 0;
  while (keep < order.size() && w[std::size_t(order[keep])] >= double(p.min_p)) ++keep;
  if (p.top_k > 0) keep = std::min(keep, std::size_t(p.top_k));
  if (p.top_p < 1.0f) {
    double total = 0;
    for (std::size_t i = 0; i < keep; ++i) total += w[std::size_t(order[i])];
    double cum = 0;
    for (std::size_t i = 0; i < keep; ++i) {
      cum += w[std::size_t(order[i])];
      if (cum >= double(p.top_p) * total) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) total += w[std::size_t(order[i])];
  for (std::size_t i = 0; i < keep; ++i) probs[std::size_t(order[i])] = w[std::size_t(order[i])] / total;
  return probs;
}

}  // namespace

TEST_CASE("greedy rows take the argmax, lowest id on ties", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  Sampler sampler(device);
  std::mt19937 rng(1);
  std::vector<Row> rows;
  for (int i = 0; i < 5; ++i) {
    Row r{params(0.0f), random_logits(rng, 3000), {}, {}, uint64_t(i)};
    rows.push_back(r);
  }
  rows[1].params.temperature = 0.5e-5f;  // below the greedy threshold
  rows[2].logits[17] = rows[2].logits[2000] = 100.0f;  // a tie
  const Result result = sampler.sample(rows);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& l = rows[r].logits;
    const int32_t expected = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    CHECK(result.tokens[r] == expected);
    CHECK(result.logprobs[r] == Approx(log_softmax(l)[std::size_t(expected)]).margin(1e-5));
  }
  CHECK(result.tokens[2] == 17);
  const auto probs = sampler.probabilities(rows);
  CHECK(probs[2][17] == 1.0f);
  CHECK(std::accumulate(probs[2].begin(), probs[2].end(), 0.0) == 1.0);
}

TEST_CASE("a row's token depends only on its seed and offset, not on its batch", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(2);
  Row probe{params(1.0f), random_logits(rng, 5000, 1.0f), {1, 2, 3}, {4}, 7};
  probe.params.seed = 42;
  probe.params.top_p = 0.95f;
  Sampler one_thread(device);
  const int32_t alone = one_thread.sample({probe}).tokens[0];

  std::vector<Row> crowd;
  for (int i = 0; i < 9; ++i) {
    Row other{params(0.3f + 0.1f * float(i)), random_logits(rng, 5000), {}, {}, uint64_t(100 + i)};
    other.params.seed = uint64_t(i);
    other.params.top_k = i * 10;
    crowd.push_back(other);
  }
  for (std::size_t position : {std::size_t(0), std::size_t(4), std::size_t(9)}) {
    std::vector<Row> batch = crowd;
    batch.insert(batch.begin() + std::ptrdiff_t(position), probe);
    CHECK(one_thread.sample(batch).tokens[position] == alone);
    Sampler threaded(device, R"({"num_threads": 3})");
    CHECK(threaded.sample(batch).tokens[position] == alone);
  }
  // Other offsets (the request's later tokens) draw other numbers.
  std::set<int32_t> seen;
  for (uint64_t offset = 0; offset < 20; ++offset) {
    Row r = probe;
    r.offset = offset;
    seen.insert(one_thread.sample({r}).tokens[0]);
  }
  CHECK(seen.size() > 5);
}

TEST_CASE("temperature sampling follows softmax(logits / T): chi-square", "[sampler][statistics]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  // 20000 draws (offsets 0..19999 of one seed) over 8 tokens, T = 0.7.
  // Under the null hypothesis the statistic is chi-square with 7 degrees of
  // freedom; 29.88 is its 1 - 1e-4 quantile, so a correct sampler fails with
  // probability 1e-4 for a random seed, and never for this fixed seed once it
  // passed: the test is deterministic.
  const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, 2.0f, 1.5f, -1.0f, 0.25f};
  const float temperature = 0.7f;
  const int draws = 20000;
  std::vector<Row> rows;
  for (int i = 0; i < draws; ++i) {
    Row r{params(temperature), logits, {}, {}, uint64_t(i)};
    r.params.seed = 2024;
    rows.push_back(r);
  }
  Sampler sampler(device);
  const Result result = sampler.sample(rows);
  std::vector<int> counts(logits.size(), 0);
  for (int32_t t : result.tokens) ++counts[std::size_t(t)];
  std::vector<float> scaled;
  for (float l : logits) scaled.push_back(l / temperature);
  const auto lp = log_softmax(scaled);
  double chi2 = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double expected = draws * std::exp(lp[i]);
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  INFO("chi2 = " << chi2);
  CHECK(chi2 < 29.88);
}

TEST_CASE("top-k, top-p and min-p keep exactly the reference set and never sample outside it", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const Case cases[] = {{1.0f, 5, 1.0f, 0.0f},  {0.8f, 0, 0.9f, 0.0f}, {1.2f, 0, 1.0f, 0.1f},
                        {1.0f, 50, 0.8f, 0.05f}, {0.5f, 1, 1.0f, 0.0f}, {2.0f, 3000, 0.5f, 0.0f},
                        {1.0f, 0, 1.0f, 0.0f}};
  std::mt19937 rng(3);
  Sampler sampler(device);
  for (const Case& c : cases) {
    CAPTURE(c.temperature, c.top_k, c.top_p, c.min_p);
    Row row{params(c.temperature), random_logits(rng, 2000, 3.0f), {}, {}, 0};
    // Quantised logits create ties, which the (logit desc, id asc) order breaks.
    for (auto& x : row.logits) x = std::round(x * 4.0f) / 4.0f;
    row.params.top_k = c.top_k;
    row.params.top_p = c.top_p;
    row.params.min_p = c.min_p;
    const auto expected = reference_distribution(row);
    const auto got = sampler.probabilities({row})[0];
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("token " << i);
      REQUIRE((got[i] > 0) == (expected[i] > 0));
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-7));
    }
    std::vector<Row> draws;
    for (int i = 0; i < 500; ++i) {
      Row r = row;
      r.offset = uint64_t(i);
      r.params.seed = 9;
      draws.push_back(r);
    }
    for (int32_t t : sampler.sample(draws).tokens) REQUIRE(expected[std::size_t(t)] > 0);
  }
}

TEST_CASE("penalties change logits exactly as the formulas say", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(4);
  Row row{params(1.0f), random_logits(rng, 64, 2.0f), {}, {}, 0};
  row.prompt = {1, 2, 3, 3, 40, 41};
  row.output = {3, 5, 5, 5, 40, 63};
  Sampler sampler(device);
  SECTION("each penalty alone and all together") {
    const float rep = GENERATE(1.0f, 1.3f, 0.8f);
    const float presence = GENERATE(0.0f, 0.5f, -0.4f);
    const float frequency = GENERATE(0.0f, 0.25f);
    row.params.repetition_penalty = rep;
    row.params.presence_penalty = presence;
    row.params.frequency_penalty = frequency;
    const auto expected = reference_distribution(row);
    const auto got = sampler.probabilities({row})[0];
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("token " << i << ", rep " << rep << ", presence " << presence << ", frequency " << frequency);
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-7));
    }
  }
  SECTION("greedy rows are penalised too") {
    row.logits.assign(64, 0.0f);
    row.logits[5] = 3.0f;   // output 3 times
    row.logits[7] = 2.0f;   // never seen
    row.params.temperature = 0.0f;
    row.params.frequency_penalty = 0.5f;  // token 5: 3 - 1.5 = 1.5 < 2
    CHECK(sampler.sample({row}).tokens[0] == 7);
    // A positive logit is divided, a negative one multiplied.
    row.params.frequency_penalty = 0.0f;
    row.params.repetition_penalty = 2.0f;
    row.logits[5] = 3.0f;  // -> 1.5
    row.logits[7] = 1.6f;
    CHECK(sampler.sample({row}).tokens[0] == 7);
  }
}

TEST_CASE("logprobs are the raw log-softmax, top-N sorted with ties by id and padded with -1", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(5);
  Row row{params(0.6f), random_logits(rng, 4000), {1, 2}, {3, 3}, 11};
  row.params.repetition_penalty = 1.5f;
  row.params.frequency_penalty = 0.3f;
  row.params.top_k = 20;
  row.params.seed = 77;
  row.logits[100] = row.logits[50] = 30.0f;  // tied best: 50 must come first
  Row fewer = row;
  fewer.params.num_top_logprobs = 2;
  row.params.num_top_logprobs = 6;
  Sampler sampler(device);
  const int32_t capacity = 4;
  const Result r = sampler.sample({row, fewer}, capacity);
  const auto lp = log_softmax(row.logits);
  for (int i = 0; i < 2; ++i) {
    CHECK(r.logprobs[std::size_t(i)] == Approx(lp[std::size_t(r.tokens[std::size_t(i)])]).margin(1e-5));
  }
  std::vector<int32_t> order(lp.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return lp[std::size_t(a)] > lp[std::size_t(b)]; });
  REQUIRE(order[0] == 50);
  // Row 0: min(6, capacity 4) entries.
  for (int j = 0; j < capacity; ++j) {
    CHECK(r.top_ids[std::size_t(j)] == order[std::size_t(j)]);
    CHECK(r.top_logprobs[std::size_t(j)] == Approx(lp[std::size_t(order[std::size_t(j)])]).margin(1e-5));
  }
  // Row 1: 2 entries, then padding.
  CHECK(r.top_ids[4] == 50);
  CHECK(r.top_ids[5] == 100);
  CHECK(r.top_ids[6] == -1);
  CHECK(r.top_ids[7] == -1);
  CHECK(std::isinf(r.top_logprobs[7]));
}

TEST_CASE("top-N over the whole vocabulary (a partial sort past 64): every id once, sorted, ties by id",
          "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(9);
  Row row{params(0.0f), random_logits(rng, 1000), {}, {}, 0};
  for (int i = 0; i < 40; ++i) row.logits[std::size_t(10 * i + 3)] = 2.5f;  // runs of ties
  const int32_t vocab = 1000;
  for (const int32_t wanted : {65, 500, vocab}) {
    INFO("num_top_logprobs " << wanted);
    row.params.num_top_logprobs = wanted;
    Sampler sampler(device);
    const Result r = sampler.sample({row}, vocab + 2);
    const auto lp = log_softmax(row.logits);
    std::vector<int32_t> order(lp.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return row.logits[std::size_t(a)] > row.logits[std::size_t(b)]; });
    bool same_order = true;
    double worst = 0.0;
    for (int32_t j = 0; j < wanted; ++j) {
      same_order = same_order && r.top_ids[std::size_t(j)] == order[std::size_t(j)];
      worst = std::max(worst, std::abs(double(r.top_logprobs[std::size_t(j)]) - lp[std::size_t(order[std::size_t(j)])]));
    }
    CHECK(same_order);
    CHECK(worst < 1e-5);
    CHECK(r.top_ids[std::size_t(wanted)] == -1);
    CHECK(std::isinf(r.top_logprobs[std::size_t(vocab + 1)]));
  }
}

TEST_CASE("without logprobs asked, tokens are the same and non-finite logits are still refused", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(5);
  std::vector<Row> rows;
  for (int i = 0; i < 6; ++i) {
    Row row{params(i % 2 == 0 ? 0.0f : 0.8f), random_logits(rng, 3000, 2.0f), {5, 6}, {7, 7}, uint64_t(i)};
    row.params.seed = uint64_t(11 + i);
    row.params.repetition_penalty = 1.3f;
    rows.push_back(row);
  }
  Sampler sampler(device);
  const Result with = sampler.sample(rows);
  const Result without = sampler.sample(rows, 0, false);
  CHECK(without.tokens == with.tokens);
  for (const float bad : {NAN, INFINITY}) {
    Row row{params(0.0f), std::vector<float>(10, 0.0f), {}, {}, 0};
    row.logits[4] = bad;
    CHECK_THROWS_WITH(sampler.sample({row}, 0, false), Contains("NaN"));
  }
  Row all_masked{params(0.0f), std::vector<float>(10, -INFINITY), {}, {}, 0};
  CHECK_THROWS_WITH(sampler.sample({all_masked}, 0, false), Contains("all -inf"));
  all_masked.logits[9] = -1e30f;
  CHECK(sampler.sample({all_masked}, 0, false).tokens[0] == 9);
}

TEST_CASE("sampler rejects bad parameters, token ids and options", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  Sampler sampler(device);
  Row row{params(1.0f), std::vector<float>(10, 0.0f), {}, {}, 0};
  row.params.top_p = 0.0f;
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("top_p must be in (0, 1]"));
  row.params.top_p = 1.0f;
  row.output = {10};
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("output token 0 = 10 is outside the vocabulary"));
  row.output = {};
  row.logits[3] = NAN;
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("NaN"));
  try {
    Sampler bad(device, R"({"num_treads": 2})");
    FAIL("unknown option accepted");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK(e.status() == PLLM_ERROR_INVALID_CONFIG);
    CHECK(e.key() == "num_treads");
    CHECK_THAT(e.what(), Contains("did you mean 'num_threads'"));
  }
}

TEST_CASE("logit_bias and min_tokens change logits before the penalties (sdk/sampler.h)", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(8);
  Row row{params(1.0f), random_logits(rng, 64, 2.0f), {1, 2, 3}, {3, 5, 5}, 0};
  row.bias_ids = {5, 9, 60, 3};
  row.bias_values = {-1.5f, 2.25f, 6.0f, -100.0f};
  row.banned = {9, 0, 9, 63};  // may repeat (EOS also a stop token id)
  row.params.repetition_penalty = 1.2f;
  row.params.frequency_penalty = 0.3f;
  Sampler sampler(device);
  SECTION("probabilities equal the reference's, ban active or not") {
    const int32_t min_tokens = GENERATE(0, 3, 4);  // 3 outputs so far: banned only at 4
    const float temperature = GENERATE(0.6f, 1.0f);
    row.params.min_tokens = min_tokens;
    row.params.temperature = temperature;
    const auto expected = reference_distribution(row);
    const auto got = sampler.probabilities({row})[0];
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("token " << i << ", min_tokens " << min_tokens << ", temperature " << temperature);
      REQUIRE(got[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-7));
    }
    CHECK((got[9] == 0.0f) == (min_tokens == 4));
    CHECK(std::max_element(got.begin(), got.end()) - got.begin() == 60);  // +6 on a spread of 2
  }
  SECTION("greedy: a bias picks the argmax, a ban removes it, logprobs stay raw") {
    row.params.temperature = 0.0f;
    row.params.repetition_penalty = 1.0f;
    row.params.frequency_penalty = 0.0f;
    row.bias_ids = {17};
    row.bias_values = {100.0f};
    row.banned = {};
    const Result biased = sampler.sample({row});
    CHECK(biased.tokens[0] == 17);
    CHECK(biased.logprobs[0] == Approx(log_softmax(row.logits)[17]).margin(1e-5));
    row.banned = {17};
    row.params.min_tokens = 4;
    const Result banned = sampler.sample({row});
    std::vector<float> without = row.logits;
    without[17] = -INFINITY;
    CHECK(banned.tokens[0] == int32_t(std::max_element(without.begin(), without.end()) - without.begin()));
    row.output.push_back(7);  // the 4th output token: min_tokens reached
    CHECK(sampler.sample({row}).tokens[0] == 17);
  }
  SECTION("a seeded row never draws a banned token while min_tokens is not reached") {
    row.logits.assign(64, 0.0f);
    row.logits[9] = 8.0f;  // would be drawn almost always
    row.params.min_tokens = 10;
    row.bias_ids = {};
    row.bias_values = {};
    for (uint64_t offset = 0; offset < 200; ++offset) {
      row.offset = offset;
      row.params.seed = offset * 7 + 1;
      REQUIRE(sampler.sample({row}).tokens[0] != 9);
    }
  }
  SECTION("a 2.0 filler's params (without the 2.1 fields) are sampled as before") {
    row.params.temperature = 0.0f;
    row.params.repetition_penalty = 1.0f;
    row.params.frequency_penalty = 0.0f;
    Row old = row;
    old.params.struct_size = offsetof(pllm_sampling_params, num_logit_bias);
    old.params.min_tokens = 0;
    row.bias_ids = {};
    row.bias_values = {};
    row.banned = {};
    CHECK(sampler.sample({old}).tokens == sampler.sample({row}).tokens);
  }
}

TEST_CASE("a scoring row reports its given token's raw logprob and the top alternatives", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(21);
  Sampler sampler(device);
  std::vector<Row> rows;
  for (int i = 0; i < 6; ++i) {
    Row row{params(i % 2 == 0 ? 0.0f : 0.8f), random_logits(rng, 200), {1, 2}, {3}, uint64_t(i)};
    row.params.num_top_logprobs = 3;
    // Penalties, a bias and a ban change nothing a scoring row reports.
    row.params.repetition_penalty = 1.5f;
    row.bias_ids = {7};
    row.bias_values = {50.0f};
    row.banned = {int32_t(i * 11)};
    row.params.min_tokens = 5;
    row.scored = int32_t(i * 11);
    rows.push_back(row);
  }
  const Result r = sampler.sample(rows, 3);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    INFO("row " << i);
    const auto expected = log_softmax(rows[i].logits);
    CHECK(r.tokens[i] == rows[i].scored);
    CHECK(r.logprobs[i] == Approx(expected[std::size_t(rows[i].scored)]).margin(1e-5));
    std::vector<int32_t> order(200);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return rows[i].logits[std::size_t(a)] > rows[i].logits[std::size_t(b)];
    });
    for (int j = 0; j < 3; ++j) {
      CHECK(r.top_ids[i * 3 + std::size_t(j)] == order[std::size_t(j)]);
      const double top = expected[std::size_t(order[std::size_t(j)])];
      CHECK(r.top_logprobs[i * 3 + std::size_t(j)] == Approx(top).margin(1e-5));
    }
  }
  rows[0].scored = 200;
  CHECK_THROWS_WITH(sampler.sample({rows[0]}), Contains("scored token 200 is outside the vocabulary"));
}

TEST_CASE("logit_bias and min_tokens arguments are checked", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  Sampler sampler(device);
  Row row{params(1.0f), std::vector<float>(10, 0.0f), {}, {}, 0};
  row.bias_ids = {3, 4, 3};
  row.bias_values = {1.0f, 2.0f, 3.0f};
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("logit_bias lists token 3 twice"));
  row.bias_ids = {3, 10};
  row.bias_values = {1.0f, 2.0f};
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("logit_bias token 1 = 10 is outside the vocabulary"));
  row.bias_ids = {3};
  row.bias_values = {INFINITY};
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("logit_bias value 0 is not finite"));
  row.bias_ids = {};
  row.bias_values = {};
  row.params.min_tokens = -1;
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("min_tokens must be >= 0"));
  row.params.min_tokens = 2;
  row.banned = {-1};
  CHECK_THROWS_WITH(sampler.sample({row}), Contains("min_tokens banned token 0 = -1 is outside the vocabulary"));
}

TEST_CASE("with row_status, a row of non-finite logits is flagged and the others are sampled", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  CAPTURE(name_of(device));
  std::mt19937 rng(12);
  std::vector<Row> rows;
  for (int i = 0; i < 5; ++i) {
    Row row{params(i % 2 == 0 ? 0.0f : 0.9f), random_logits(rng, 300), {}, {}, uint64_t(i)};
    row.params.seed = 5;
    row.params.num_top_logprobs = 2;
    rows.push_back(row);
  }
  rows[1].logits[7] = NAN;
  rows[3].logits.assign(300, -INFINITY);
  Sampler sampler(device);
  const Result alone = sampler.sample({rows[0], rows[2], rows[4]}, 2);
  const Result r = sampler.sample(rows, 2, true, true);
  CHECK(r.status == std::vector<int32_t>{PLLM_SAMPLE_OK, PLLM_SAMPLE_NON_FINITE_LOGITS, PLLM_SAMPLE_OK,
                                         PLLM_SAMPLE_NON_FINITE_LOGITS, PLLM_SAMPLE_OK});
  CHECK(r.tokens[1] == -1);
  CHECK(r.tokens[3] == -1);
  CHECK(r.top_ids[2] == -1);
  CHECK(r.tokens[0] == alone.tokens[0]);
  CHECK(r.tokens[2] == alone.tokens[1]);
  CHECK(r.tokens[4] == alone.tokens[2]);
  std::vector<int32_t> status;
  const auto probs = sampler.probabilities(rows, false, &status);
  CHECK(status[1] == PLLM_SAMPLE_NON_FINITE_LOGITS);
  CHECK(status[2] == PLLM_SAMPLE_OK);
  CHECK(std::accumulate(probs[1].begin(), probs[1].end(), 0.0) == 0.0);
  CHECK(std::accumulate(probs[2].begin(), probs[2].end(), 0.0) == Approx(1.0).epsilon(1e-5));
}

// A random mask allowing `allowed` tokens of `vocab` (at least one).
std::vector<uint32_t> random_mask(std::mt19937& rng, std::size_t vocab, std::size_t allowed) {
  std::vector<uint32_t> mask((vocab + 31) / 32, 0u);
  std::vector<std::size_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), std::size_t{0});
  std::shuffle(ids.begin(), ids.end(), rng);
  for (std::size_t k = 0; k < allowed; ++k) mask[ids[k] / 32] |= 1u << (ids[k] % 32);
  return mask;
}

bool allowed_by(const std::vector<uint32_t>& mask, int32_t id) { return (mask[std::size_t(id) / 32] >> (id % 32)) & 1u; }

// The reference: the same row with its disallowed logits at -inf, unconstrained.
Row masked_out(const Row& row, const std::vector<uint32_t>& mask) {
  Row ref = row;
  for (std::size_t v = 0; !mask.empty() && v < ref.logits.size(); ++v) {
    if (!allowed_by(mask, int32_t(v))) ref.logits[v] = -INFINITY;
  }
  return ref;
}

TEST_CASE("a token mask restricts a row exactly as -inf logits for its disallowed tokens would", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  INFO(name_of(device));
  std::mt19937 rng(77);
  const std::size_t vocab = 1000;  // not a multiple of 32: the last word is partial
  std::vector<Row> rows, reference;
  Masks masks;
  const float temperatures[] = {0.0f, 0.8f, 1.3f};
  for (int i = 0; i < 24; ++i) {
    Row row{params(temperatures[i % 3]), random_logits(rng, vocab, 3.0f), {}, {}, uint64_t(i)};
    row.params.seed = uint64_t(500 + i);
    row.params.top_k = i % 4 == 1 ? 5 : 0;
    row.params.top_p = i % 4 == 2 ? 0.5f : 1.0f;
    row.params.repetition_penalty = i % 5 == 3 ? 1.3f : 1.0f;
    row.params.num_top_logprobs = 3;
    row.output = {int32_t(i), int32_t(2 * i)};
    // Every other row unconstrained, beside the constrained ones in the same batch.
    masks.push_back(i % 2 == 0 ? random_mask(rng, vocab, i % 8 == 0 ? 1 : std::size_t(3 + 7 * i))
                               : std::vector<uint32_t>{});
    rows.push_back(row);
    reference.push_back(masked_out(row, masks.back()));
  }
  Sampler constrained(device), plain(device);
  constrained.masks = masks;
  for (const uint64_t shift : {0u, 13u, 101u}) {
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r].offset = reference[r].offset = shift + r;
    const Result a = constrained.sample(rows, 3);
    const Result b = plain.sample(reference, 3);
    CHECK(a.tokens == b.tokens);
    CHECK(a.top_ids == b.top_ids);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      INFO("row " << r);
      if (!masks[r].empty()) CHECK(allowed_by(masks[r], a.tokens[r]));
      CHECK(a.logprobs[r] == b.logprobs[r]);  // the reported logprobs are of the masked distribution
      // Alternatives with a finite logprob are allowed tokens (a row allowing fewer than 3 lists -inf ones after).
      for (std::size_t j = 0; j < 3; ++j) {
        const int32_t id = a.top_ids[r * 3 + j];
        if (!masks[r].empty() && a.top_logprobs[r * 3 + j] > -INFINITY) CHECK(allowed_by(masks[r], id));
      }
    }
  }
  // probabilities() (what a speculator verifies against) honours the mask too.
  const auto p = constrained.probabilities(rows);
  const auto q = plain.probabilities(reference);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t v = 0; v < vocab; ++v) REQUIRE(p[r][v] == q[r][v]);
  }
}

TEST_CASE("a mask allowing no finite logit flags the row, and a mask of the wrong width is refused", "[sampler]") {
  const pllm_device device = EACH_DEVICE;
  INFO(name_of(device));
  std::mt19937 rng(5);
  const Row ok{params(0.0f), random_logits(rng, 64), {}, {}, 0};
  Row only_inf = ok;
  only_inf.logits[9] = -INFINITY;
  Sampler sampler(device);
  sampler.masks = {{}, {0u, 0u}, {1u << 9, 0u}};
  const Result r = sampler.sample({ok, ok, only_inf}, 0, true, true);
  CHECK(r.status ==
        std::vector<int32_t>{PLLM_SAMPLE_OK, PLLM_SAMPLE_NON_FINITE_LOGITS, PLLM_SAMPLE_NON_FINITE_LOGITS});
  CHECK(r.tokens[1] == -1);
  sampler.masks = {{}, {~0u, ~0u, ~0u}};
  sampler.mask_words = 3;
  CHECK_THROWS_WITH(sampler.sample({ok, ok}), Contains("bitmask_words is 3") && Contains("needs 2"));
}

#ifdef PAGEDLLM_HAVE_CUDA
// Masks on the emulated cuda:0 against the CPU: the same tokens, top ids and logprobs.
TEST_CASE("CUDA masks exactly as the CPU does", "[sampler][cuda]") {
  std::mt19937 rng(91);
  std::vector<Row> rows;
  Masks masks;
  for (int i = 0; i < 40; ++i) {
    Row row{params(i % 3 == 0 ? 0.0f : 0.9f), random_logits(rng, 2000, 3.0f), {}, {}, uint64_t(i * 5)};
    row.params.seed = uint64_t(70 + i);
    row.params.num_top_logprobs = i % 4;
    masks.push_back(i % 3 != 2 ? random_mask(rng, 2000, std::size_t(1 + 31 * i)) : std::vector<uint32_t>{});
    rows.push_back(row);
  }
  Sampler cpu(kCpu), gpu(kCuda);
  cpu.masks = gpu.masks = masks;
  const Result a = cpu.sample(rows, 3);
  const Result b = gpu.sample(rows, 3);
  CHECK(a.tokens == b.tokens);
  CHECK(a.top_ids == b.top_ids);
  for (std::size_t r = 0; r < rows.size(); ++r) CHECK(a.logprobs[r] == Approx(b.logprobs[r]).margin(1e-6));
}
#endif

#ifdef PAGEDLLM_HAVE_CUDA
// Identical inputs through the CPU sampler and the emulated CUDA one: the same
// tokens and top ids for greedy and seeded rows with every feature, logprobs and
// probabilities within 1e-6 (double sums added in another order, rounded to f32).
TEST_CASE("CUDA samples exactly what the CPU samples, every feature, greedy and seeded", "[sampler][cuda]") {
  std::mt19937 rng(31);
  std::vector<Row> rows;
  const float temperatures[] = {0.0f, 0.7f, 1.0f, 1.6f};
  for (int i = 0; i < 48; ++i) {
    Row row{params(temperatures[i % 4]), random_logits(rng, 1500, 3.0f), {}, {}, uint64_t(i * 3)};
    // Quantised logits: many ties, which both must break by id.
    if (i % 3 == 0) {
      for (auto& x : row.logits) x = std::round(x * 2.0f) / 2.0f;
    }
    if (i % 11 == 5) row.logits[std::size_t(i)] = -INFINITY;
    row.params.seed = uint64_t(1000 + i);
    row.params.top_k = (i / 4) % 3 == 1 ? 1 + i * 7 : 0;
    row.params.top_p = (i / 2) % 3 == 2 ? 0.3f + 0.01f * float(i) : 1.0f;
    row.params.min_p = i % 5 == 4 ? 0.02f * float(i % 7) : 0.0f;
    row.params.repetition_penalty = i % 6 < 2 ? 1.0f : 1.0f + 0.05f * float(i % 9);
    row.params.frequency_penalty = i % 4 == 1 ? 0.3f : 0.0f;
    row.params.presence_penalty = i % 7 == 2 ? -0.4f : 0.0f;
    row.params.num_top_logprobs = i % 5;
    for (int t = 0; t < i % 13; ++t) row.prompt.push_back(int32_t((i * 37 + t * 101) % 1500));
    for (int t = 0; t < i % 9; ++t) row.output.push_back(int32_t((i * 53 + t * 7) % 40));
    // logit_bias on some rows (on history tokens too), min_tokens banning or not yet.
    for (int t = 0; t < (i % 3 == 1 ? 1 + i % 5 : 0); ++t) {
      row.bias_ids.push_back(int32_t((i * 29 + t * 211) % 1500));
      row.bias_values.push_back(float(t % 2 == 0 ? 1 : -1) * (0.75f + 7.5f * float(t)));
    }
    if (i % 4 == 3) {
      row.params.min_tokens = i % 8 == 3 ? 100 : 0;
      row.banned = {int32_t(i % 40), int32_t((i * 53) % 40), 1499};
      if (!row.bias_ids.empty()) row.banned.push_back(row.bias_ids[0]);
    }
    if (i % 10 == 9) row.scored = int32_t((i * 97) % 1500);
    rows.push_back(row);
  }
  Sampler cpu(kCpu), gpu(kCuda);
  const Result a = cpu.sample(rows, 4);
  const Result b = gpu.sample(rows, 4);
  CHECK(a.tokens == b.tokens);
  CHECK(a.top_ids == b.top_ids);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    INFO("row " << r);
    CHECK(a.logprobs[r] == Approx(b.logprobs[r]).margin(1e-6));
    for (int j = 0; j < 4; ++j) {
      const std::size_t at = r * 4 + std::size_t(j);
      if (a.top_ids[at] >= 0) CHECK(a.top_logprobs[at] == Approx(b.top_logprobs[at]).margin(1e-6));
    }
  }
  // Other draws of the same rows (later offsets) agree too.
  for (Row& row : rows) row.offset += 17;
  CHECK(cpu.sample(rows).tokens == gpu.sample(rows).tokens);
  const auto p = cpu.probabilities(rows);
  for (const bool on_device : {false, true}) {
    const auto q = gpu.probabilities(rows, on_device);
    for (std::size_t r = 0; r < rows.size(); ++r) {
      for (std::size_t v = 0; v < p[r].size(); ++v) {
        INFO("row " << r << ", token " << v << ", on device " << on_device);
        REQUIRE((p[r][v] > 0) == (q[r][v] > 0));
        REQUIRE(p[r][v] == Approx(q[r][v]).margin(1e-6));
      }
    }
  }
}
#endif
