// spec_eagle's verify() on the device (plugins/spec_eagle/cuda_verifier.h)
// against the host's pllm::verify_drafts (rejection_sampler.hpp, whose output
// distribution rejection_sampler_test.cpp tests against the target's): the
// same tokens, not only the same distribution, on the same p, q, drafts and
// seeds. Random cases over vocabularies of 7 to 8192 and K = 1..5, every row
// of a batch of its own kind: dense p and q; p == q; q(x) == 0 where p(x) > 0;
// a residual that is zero everywhere (q = 2p, so a rejection draws from p);
// a truncated target (p = 0 on ids q proposes); one-hot p; greedy rows with
// ties. Drafts are drawn from q, so acceptances and rejections both occur at
// every position (counted). Invalid values and a row without mass give the
// host's message. The output distribution is tested on the device too: the
// chi-square of rejection_sampler_test.cpp on fewer rows (kDeviceTrials; the
// same alpha per test, so the same bound on a false failure, less power). In
// the emulated build the emulator's copy counters show the
// only copy down is the tokens and 20 bytes a sequence.

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pagedllm/sdk/cpp/rejection_sampler.hpp"
#include "tests/plugins/spec_eagle/eagle_harness.h"
#include "tests/plugins/spec_eagle/rejection_cases.h"
#include "tests/support/cuda_device.h"
#ifdef PAGEDLLM_CUDA_EMULATION
#include "cuda_emulation/copy_counters.h"
#endif

using namespace eagle_test;
using Catch::Matchers::Contains;

namespace {

// Device copies of host floats, freed with the object.
class DeviceFloats {
 public:
  explicit DeviceFloats(const std::vector<float>& host) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, std::max<std::size_t>(1, host.size()) * sizeof(float)) == cudaSuccess);
    data_ = static_cast<float*>(p);
    REQUIRE(cudaMemcpy(data_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceFloats() { (void)cudaFree(data_); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() const { return data_; }

 private:
  float* data_ = nullptr;
};

enum RowKind { kDense, kEqual, kDraftZero, kResidualZero, kTruncatedTarget, kOneHot, kGreedy, kNumKinds };

// One verify call's arrays.
struct Call : VerifyArrays {
  int64_t rows = 0, vocab = 0;

  float& p_at(int64_t s, int64_t i, int64_t x) { return p[std::size_t((s * (k + 1) + i) * vocab + x)]; }
  float& q_at(int64_t s, int64_t i, int64_t x) { return q[std::size_t((s * k + i) * vocab + x)]; }

  // The outputs of one verify, on `p_data`/`q_data` on `device`.
  struct Result {
    std::vector<int32_t> tokens, counts;
  };
  pllm_verify_args args(const float* p_data, const float* q_data, pllm_device device, pllm_tensor& pt,
                        pllm_tensor& qt) const {
    return verify_args(rows, vocab, p_data, q_data, device, pt, qt);
  }
  Result host() const {
    Result r{std::vector<int32_t>(std::size_t(rows * (k + 1)), -1), std::vector<int32_t>(std::size_t(rows), 0)};
    pllm_tensor pt{}, qt{};
    pllm_verify_output out{sizeof out, r.tokens.data(), r.counts.data()};
    pllm::verify_drafts(args(p.data(), q.data(), {PLLM_DEVICE_CPU, 0}, pt, qt), out);
    return r;
  }
  Result device(Speculator& spec) const {
    const DeviceFloats dp(p), dq(q);
    Result r{std::vector<int32_t>(std::size_t(rows * (k + 1)), -1), std::vector<int32_t>(std::size_t(rows), 0)};
    pllm_tensor pt{}, qt{};
    pllm_verify_output out{sizeof out, r.tokens.data(), r.counts.data()};
    spec.verify(args(dp.data(), dq.data(), {PLLM_DEVICE_CUDA, 0}, pt, qt), out);
    return r;
  }
};

std::vector<float> skewed_dist(std::mt19937_64& rng, int64_t vocab) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> d(static_cast<std::size_t>(vocab));
  float total = 0.0f;
  for (float& x : d) total += x = u(rng) * u(rng) * u(rng);  // skewed, as model outputs are
  for (float& x : d) x /= total;
  return d;
}

// A draw from `d` (not necessarily normalised).
int32_t draw_from(std::mt19937_64& rng, const std::vector<float>& d) {
  return std::discrete_distribution<int32_t>(d.begin(), d.end())(rng);
}

Call random_call(uint64_t seed, int64_t rows, int64_t k, int64_t vocab) {
  std::mt19937_64 rng(seed);
  Call c;
  c.rows = rows;
  c.k = k;
  c.vocab = vocab;
  c.num_drafts.resize(std::size_t(rows));
  c.drafts.assign(std::size_t(rows * k), 0);
  c.p.assign(std::size_t(rows * (k + 1) * vocab), 0.0f);
  c.q.assign(std::size_t(rows * k * vocab), 0.0f);
  c.greedy.assign(std::size_t(rows), 0);
  c.seeds.resize(std::size_t(rows));
  c.offsets.resize(std::size_t(rows));
  for (int64_t s = 0; s < rows; ++s) {
    const auto kind = RowKind(s % kNumKinds);
    // Most rows use every draft slot; some fewer (core's rows near max_tokens).
    c.num_drafts[std::size_t(s)] = int32_t(s % 5 == 4 ? int64_t(rng() % uint64_t(k + 1)) : k);
    c.seeds[std::size_t(s)] = rng();
    c.offsets[std::size_t(s)] = rng() % 100000;
    c.greedy[std::size_t(s)] = kind == kGreedy;
    for (int64_t i = 0; i <= k; ++i) {
      std::vector<float> p = skewed_dist(rng, vocab), q = skewed_dist(rng, vocab);
      switch (kind) {
        case kEqual:
          q = p;
          break;
        case kDraftZero:
          for (int64_t x = 0; x < vocab; x += 2) q[std::size_t(x)] = 0.0f;
          break;
        case kResidualZero:
          for (int64_t x = 0; x < vocab; ++x) q[std::size_t(x)] = 2.0f * p[std::size_t(x)];
          break;
        case kTruncatedTarget:
          for (int64_t x = 1; x < vocab; x += 2) p[std::size_t(x)] = 0.0f;
          break;
        case kOneHot:
          std::fill(p.begin(), p.end(), 0.0f);
          p[std::size_t(rng() % uint64_t(vocab))] = 1.0f;
          break;
        case kGreedy: {
          // A tie for the maximum at two ids: the lower one is the argmax.
          const auto top = *std::max_element(p.begin(), p.end());
          p[std::size_t(rng() % uint64_t(vocab))] = top;
          break;
        }
        case kDense:
        case kNumKinds:
          break;
      }
      for (int64_t x = 0; x < vocab; ++x) c.p_at(s, i, x) = p[std::size_t(x)];
      if (i == k) continue;
      for (int64_t x = 0; x < vocab; ++x) c.q_at(s, i, x) = q[std::size_t(x)];
      // Greedy drafts: the argmax half of the time, so matches and mismatches occur.
      const int32_t argmax = int32_t(std::max_element(p.begin(), p.end()) - p.begin());
      c.drafts[std::size_t(s * k + i)] = kind == kGreedy && rng() % 2 == 0 ? argmax : draw_from(rng, q);
    }
  }
  return c;
}

Speculator& cuda_speculator() {
  static Model target(kTargetDir, "{}", PLLM_DTYPE_F32, {PLLM_DEVICE_CUDA, 0});
  static Speculator spec(kDraftDir, target, "{}", 4, nullptr, {PLLM_DEVICE_CUDA, 0});
  return spec;
}

}  // namespace

TEST_CASE("spec_eagle: verify on cuda:0 gives the host rejection sampler's tokens", "[spec_eagle][cuda][verify]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Speculator& spec = cuda_speculator();
  int64_t rows_checked = 0, accepted_drafts = 0, rejections = 0, bonus = 0;
  uint64_t seed = 1;
  for (const int64_t vocab : {int64_t(7), int64_t(64), int64_t(1000), int64_t(8192)}) {
    for (int64_t k = 1; k <= 5; ++k) {
      const int64_t rows = vocab >= 1000 ? 2 * kNumKinds : 4 * kNumKinds;
      const Call c = random_call(seed++, rows, k, vocab);
      INFO("vocab " << vocab << ", K = " << k);
      const Call::Result host = c.host(), device = c.device(spec);
      for (int64_t s = 0; s < rows; ++s) {
        INFO("row " << s << " (kind " << s % kNumKinds << ")");
        const int32_t n = device.counts[std::size_t(s)];
        REQUIRE(n == host.counts[std::size_t(s)]);
        for (int64_t j = 0; j < n; ++j) {
          CHECK(device.tokens[std::size_t(s * (k + 1) + j)] == host.tokens[std::size_t(s * (k + 1) + j)]);
        }
        accepted_drafts += n - 1;
        (n - 1 == c.num_drafts[std::size_t(s)] ? bonus : rejections) += 1;
        ++rows_checked;
      }
    }
  }
  std::printf("verify on cuda:0 vs the host: %lld rows compared (%lld drafts accepted, %lld rejections, %lld bonus "
              "tokens)\n",
              static_cast<long long>(rows_checked), static_cast<long long>(accepted_drafts),
              static_cast<long long>(rejections), static_cast<long long>(bonus));
  CHECK(rejections > rows_checked / 4);
  CHECK(bonus > rows_checked / 8);
}

TEST_CASE("spec_eagle: verify on cuda:0 refuses what the host refuses, with its message",
          "[spec_eagle][cuda][verify]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Speculator& spec = cuda_speculator();
  Call c = random_call(99, 2 * kNumKinds, 3, 64);
  const auto both_messages = [&]() {
    std::string host, device;
    try {
      c.host();
    } catch (const pllm::Error& e) {
      host = e.what();
    }
    try {
      c.device(spec);
    } catch (const pagedllm::PluginCallError& e) {
      device = e.what();
    }
    return std::make_pair(host, device);
  };
  SECTION("a NaN in q on the row a rejection draws from") {
    // A rejection reads p_i and q_i whole; the accept test of a draft 17 reads q_i(17).
    for (int64_t s = 0; s < c.rows; ++s) {
      for (int64_t i = 0; i < c.k; ++i) c.q_at(s, i, 17) = std::numeric_limits<float>::quiet_NaN();
    }
    const auto [host, device] = both_messages();
    CHECK_THAT(host, Contains("draft_probs["));
    CHECK_THAT(host, Contains("(probabilities must be finite and non-negative)"));
    CHECK_THAT(device, Contains(host));
  }
  SECTION("a negative p where the accept test reads it") {
    c.p_at(0, 0, c.drafts[0]) = -0.25f;
    const auto [host, device] = both_messages();
    CHECK_THAT(host, Contains("target_probs[0, 0, " + std::to_string(c.drafts[0]) + "] = -0.250000"));
    CHECK_THAT(device, Contains(host));
  }
  SECTION("an infinity in a greedy row's p") {
    c.p_at(kGreedy, 0, 5) = std::numeric_limits<float>::infinity();
    const auto [host, device] = both_messages();
    CHECK_THAT(host, Contains("target_probs[6, 0, 5] = inf"));
    CHECK_THAT(device, Contains(host));
  }
  SECTION("a bonus row without mass") {
    c.num_drafts[0] = 0;
    for (int64_t x = 0; x < c.vocab; ++x) c.p_at(0, 0, x) = 0.0f;
    const auto [host, device] = both_messages();
    CHECK_THAT(host, Contains("target_probs[0, 0] has no mass"));
    CHECK_THAT(device, Contains(host));
  }
}

TEST_CASE("spec_eagle: verify takes p and q on its device or both in host memory", "[spec_eagle][cuda][verify]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Speculator& spec = cuda_speculator();
  const Call c = random_call(7, kNumKinds, 2, 64);
  const Call::Result host = c.host();
  // Host memory through the CUDA plugin: the host path, the same tokens.
  std::vector<int32_t> tokens(host.tokens.size(), -1), counts(host.counts.size(), 0);
  pllm_tensor pt{}, qt{};
  pllm_verify_output out{sizeof out, tokens.data(), counts.data()};
  spec.verify(c.args(c.p.data(), c.q.data(), {PLLM_DEVICE_CPU, 0}, pt, qt), out);
  CHECK(counts == host.counts);
  // p on the device, q on the host: refused.
  const DeviceFloats dp(c.p);
  pllm_verify_args mixed = c.args(dp.data(), c.q.data(), {PLLM_DEVICE_CUDA, 0}, pt, qt);
  qt.device = {PLLM_DEVICE_CPU, 0};
  try {
    spec.verify(mixed, out);
    FAIL("verify accepted p and q on different devices");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK_THAT(std::string(e.what()), Contains("target_probs and draft_probs must be on the same device"));
  }
}

TEST_CASE("spec_eagle: on cuda:0 it lends device memory for p and q, where verify reads them",
          "[spec_eagle][cuda][verify]") {
  // What core does (speculator.h allocate_buffer): the sampler writes p and q
  // into buffers the speculator lent, and verify() reads them there.
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Speculator& spec = cuda_speculator();
  const Call c = random_call(11, kNumKinds, 3, 1000);
  const Call::Result host = c.host();
  const pllm_speculator_buffer p = spec.allocate_buffer(c.p.size() * sizeof(float));
  const pllm_speculator_buffer q = spec.allocate_buffer(c.q.size() * sizeof(float));
  for (const pllm_speculator_buffer& buffer : {p, q}) {
    REQUIRE(buffer.data != nullptr);
    CHECK(buffer.device.type == PLLM_DEVICE_CUDA);
    CHECK(buffer.device.index == 0);
    CHECK(reinterpret_cast<std::uintptr_t>(buffer.data) % 256 == 0);
  }
  CHECK(p.bytes >= c.p.size() * sizeof(float));
  REQUIRE(cudaMemcpy(p.data, c.p.data(), c.p.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(q.data, c.q.data(), c.q.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  std::vector<int32_t> tokens(host.tokens.size(), -1), counts(host.counts.size(), 0);
  pllm_tensor pt{}, qt{};
  pllm_verify_output out{sizeof out, tokens.data(), counts.data()};
  spec.verify(c.args(static_cast<const float*>(p.data), static_cast<const float*>(q.data), p.device, pt, qt), out);
  REQUIRE(counts == host.counts);
  for (int64_t s = 0; s < c.rows; ++s) {
    for (int64_t j = 0; j < counts[std::size_t(s)]; ++j) {
      CHECK(tokens[std::size_t(s * (c.k + 1) + j)] == host.tokens[std::size_t(s * (c.k + 1) + j)]);
    }
  }
  spec.free_buffer(p.data);
  spec.free_buffer(q.data);
  try {
    spec.free_buffer(q.data);
    FAIL("free_buffer took back a buffer twice");
  } catch (const pagedllm::PluginCallError& e) {
    CHECK_THAT(std::string(e.what()), Contains("not a buffer this instance lent"));
  }
}

TEST_CASE("spec_eagle: verify on cuda:0 keeps the target's distribution (chi-square)", "[spec_eagle][cuda][verify]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Speculator& spec = cuda_speculator();
  constexpr int64_t kDeviceTrials = 20'000;
  for (int family = 0; family < 5; ++family) {
    for (const int64_t k : {int64_t(1), int64_t(3)}) {
      const Case c = make_case(family, k);
      INFO(c.name << ", K = " << k);
      Rows r = sample_rows(c, kDeviceTrials, 300 + uint64_t(family) * 10 + uint64_t(k));
      const DeviceFloats dp(r.p), dq(r.q);
      pllm_verify_output out = r.output();
      spec.verify(r.args(kVocab, dp.data(), dq.data(), {PLLM_DEVICE_CUDA, 0}), out);
      std::vector<int64_t> first(kVocab, 0), second(kVocab, 0);
      for (int64_t s = 0; s < r.n; ++s) {
        REQUIRE(r.count(s) >= 1);
        for (int64_t j = 0; j + 1 < r.count(s); ++j) REQUIRE(r.token(s, j) == r.drafts[std::size_t(s * k + j)]);
        ++first[std::size_t(r.token(s, 0))];
        if (r.count(s) >= 2) ++second[std::size_t(r.token(s, 1))];
      }
      const ChiSquare c1 = chi_square(first, c.p[0]), c2 = chi_square(second, c.p[1]);
      std::printf("on cuda:0: %-38s K=%lld  token 1: chi2 %7.2f df %d  token 2: chi2 %7.2f df %d (critical %.2f)\n",
                  c.name.c_str(), static_cast<long long>(k), c1.statistic, c1.df, c2.statistic, c2.df, c1.critical());
      CHECK(c1.passes());
      CHECK(c2.passes());
    }
  }
}

#ifdef PAGEDLLM_CUDA_EMULATION
TEST_CASE("spec_eagle: verify on cuda:0 copies down the tokens and 20 bytes a sequence, nothing vocabulary-sized",
          "[spec_eagle][cuda][verify][copies]") {
  Speculator& spec = cuda_speculator();
  constexpr int64_t kRows = 12, kK = 4, kVocabSize = 8192;
  const Call c = random_call(3, kRows, kK, kVocabSize);
  const DeviceFloats dp(c.p), dq(c.q);
  std::vector<int32_t> tokens(static_cast<std::size_t>(kRows * (kK + 1)));
  std::vector<int32_t> counts(static_cast<std::size_t>(kRows));
  pllm_tensor pt{}, qt{};
  pllm_verify_output out{sizeof out, tokens.data(), counts.data()};
  const pllm_verify_args args = c.args(dp.data(), dq.data(), {PLLM_DEVICE_CUDA, 0}, pt, qt);
  pagedllm::cuda::emulation::reset_copy_counters();
  spec.verify(args, out);
  const auto copies = pagedllm::cuda::emulation::copy_counters();
  // Down: per sequence its K + 1 output ids and a 20-byte result (count, status, where a bad value was).
  CHECK(copies.device_to_host_bytes == uint64_t(kRows * ((kK + 1) * 4 + 20)));
  CHECK(copies.device_to_host_copies == 1);
  // Up: per sequence seed, offset, draft count and greedy flag (24 bytes) and its K drafts.
  CHECK(copies.host_to_device_bytes == uint64_t(kRows * (24 + kK * 4)));
  CHECK(copies.host_to_device_copies == 1);
}
#endif
