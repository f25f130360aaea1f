// spec_eagle's draft() against the float64 PyTorch oracle
// (tools/testing/eagle_reference.py), on the committed models/pagedllm-tiny
// (6 layers, hidden 256, vocab 8192, bf16) and its EAGLE-1 head: the real .so
// files, the draft's KV layer (6) in the target's paged attention_cpu pool
// whose unused slots hold NaN, permuted non-contiguous block tables. Two
// sequences: a target prefill gives the features; the draft runs over them
// as a chunked prefill in two steps (logits of every row of the first chunk,
// of the last row of each sequence in the second), then two chain steps whose
// features are the draft's own predictions (no features given), as core runs
// it when drafting K tokens.
//
// Tolerance. The oracle is fed the plugin's own f32 features (it reports how
// far they are from its float64 target's: a check that the test feeds the
// right rows), so the comparison covers the draft alone: fc (K = 512), one
// decoder layer and lm_head in f32 against float64, the same error budget as
// models_llama's fidelity tests:
//   logits  |got - ref| <= 1e-4 + 1e-5 |ref|
// The measured worst error is printed (see the plugin README for the numbers).
//
// With a draft vocabulary (option draft_vocab_size, the N most frequent tokens
// of draft_vocab.json) the logits of those N tokens meet the same tolerance
// and every other logit is exactly -inf.

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/llama_harness.h"
#include "tests/plugins/spec_eagle/eagle_harness.h"

using namespace eagle_test;
using llama_test::Matrix;
using llama_test::Mismatch;
using llama_test::Tolerance;
using Chunk = EagleRunner::Chunk;

namespace {

constexpr Tolerance kLogitsTolerance{1e-4, 1e-5};

struct Variant {
  const char* name;
  const char* attention;
  const char* model;
  const char* draft;
  int64_t draft_vocab_size;  // as in `draft`; 0: the whole vocabulary
};
// The target and the draft multiply the bf16 weights exactly (cpu_bf16_compute: exact): the f32 tolerances are
// for f32 activations, which the default (vdpbf16ps) rounds to bf16 on CPUs with AVX512-BF16.
const Variant kVariants[] = {
    {"reference attention, 1 thread each", R"({"variant": "reference"})",
     R"({"num_threads": 1, "cpu_bf16_compute": "exact"})", R"({"num_threads": 1, "cpu_bf16_compute": "exact"})", 0},
    {"optimized attention, 3 model and draft threads", R"({"variant": "optimized", "num_threads": 2})",
     R"({"num_threads": 3, "cpu_bf16_compute": "exact"})", R"({"num_threads": 3, "cpu_bf16_compute": "exact"})", 0},
    {"optimized attention, 2 threads, a draft vocabulary of 1000 tokens",
     R"({"variant": "optimized", "num_threads": 2})", R"({"num_threads": 2, "cpu_bf16_compute": "exact"})",
     R"({"num_threads": 2, "draft_vocab_size": 1000, "cpu_bf16_compute": "exact"})", 1000},
};

// in_vocab[token]: whether the draft may propose it (the first `size` ids of
// the committed draft_vocab.json; every token for size 0).
std::vector<bool> draft_vocabulary(int64_t size) {
  if (size == 0) return std::vector<bool>(8192, true);
  std::ifstream in(kDraftDir / "draft_vocab.json");
  const nlohmann::json file = nlohmann::json::parse(in);
  std::vector<bool> in_vocab(8192, false);
  for (int64_t i = 0; i < size; ++i) in_vocab[std::size_t(file["token_ids"][std::size_t(i)].get<int32_t>())] = true;
  return in_vocab;
}

// Adds a draft logits row to `mismatch` over the draft vocabulary; counts in
// `not_excluded` the other tokens whose logit is not exactly -inf.
void add_row(Mismatch& mismatch, int64_t& not_excluded, const std::vector<float>& got, const std::vector<double>& ref,
             const std::vector<bool>& in_vocab) {
  std::vector<float> kept;
  std::vector<double> kept_ref;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (in_vocab[i]) {
      kept.push_back(got[i]);
      kept_ref.push_back(ref[i]);
    } else if (!(std::isinf(got[i]) && got[i] < 0)) {
      ++not_excluded;
    }
  }
  mismatch.add(kept, kept_ref, kLogitsTolerance);
}

struct OracleSequence {
  Matrix logits;  // [row = position][vocab]
  double feature_diff;
};

std::vector<OracleSequence> run_oracle(const nlohmann::json& input) {
  llama_test::TempDir io;
  const auto in = io.write("in.json", input.dump());
  const auto out = io.path() / "out.json";
  const auto r = llama_test::run_command(std::string(llama_test::kPython) +
                                         " " PAGEDLLM_SOURCE_DIR "/tools/testing/eagle_reference.py --target " +
                                         llama_test::quote(kTargetDir.string()) + " --head " +
                                         llama_test::quote(kDraftDir.string()) + " --input " +
                                         llama_test::quote(in.string()) + " --output " +
                                         llama_test::quote(out.string()));
  llama_test::expect(r.exit_code == 0, "eagle_reference.py failed: " + r.err);
  std::ifstream file(out);
  const nlohmann::json result = nlohmann::json::parse(file);
  std::vector<OracleSequence> sequences;
  for (const auto& s : result["sequences"]) {
    sequences.push_back({s["logits"].get<Matrix>(), s["feature_max_abs_diff"].get<double>()});
  }
  return sequences;
}

}  // namespace

TEST_CASE("spec_eagle: draft logits over a chunked prefill and two chain steps match the oracle",
          "[spec_eagle][fidelity]") {
  llama_test::require_oracle();
  // Sequence s has tokens x_0 .. x_L: the target sees x_0 .. x_{L-1}; draft
  // row t pairs f_t with x_{t+1}; then chain tokens y_1, y_2.
  const std::vector<std::vector<int32_t>> tokens = {random_tokens(14, 1), random_tokens(10, 2)};
  const std::vector<std::vector<int32_t>> chain = {{811, 4096}, {77, 8000}};
  const int32_t len[2] = {13, 9};
  const int32_t split[2] = {7, 4};  // rows of the first draft chunk

  for (const Variant& v : kVariants) {
    INFO(v.name);
    EagleRunner runner(v.model, v.attention, v.draft);
    const int32_t a = runner.add_sequence(), b = runner.add_sequence();

    // The target prefill: features of every position.
    std::vector<int32_t> all(std::size_t(len[0] + len[1]));
    std::iota(all.begin(), all.end(), 0);
    const auto features = runner.target_step(
        {{a, 0, slice(tokens[0], 0, std::size_t(len[0]))}, {b, 0, slice(tokens[1], 0, std::size_t(len[1]))}}, all);
    const std::vector<std::vector<std::vector<float>>> seq_features = {
        {features.begin(), features.begin() + len[0]}, {features.begin() + len[0], features.end()}};

    // Draft chunk 1: rows [0, split) of each sequence, logits everywhere.
    const int32_t rows1 = split[0] + split[1];
    std::vector<int32_t> rows_all(static_cast<std::size_t>(rows1));
    std::iota(rows_all.begin(), rows_all.end(), 0);
    std::vector<std::vector<float>> f1(seq_features[0].begin(), seq_features[0].begin() + split[0]);
    f1.insert(f1.end(), seq_features[1].begin(), seq_features[1].begin() + split[1]);
    const auto logits1 = runner.draft_step({{a, 0, slice(tokens[0], 1, std::size_t(split[0]) + 1)},
                                            {b, 0, slice(tokens[1], 1, std::size_t(split[1]) + 1)}},
                                           f1, rows_all);
    // Draft chunk 2: the rest, logits of each sequence's last row.
    std::vector<std::vector<float>> f2(seq_features[0].begin() + split[0], seq_features[0].end());
    f2.insert(f2.end(), seq_features[1].begin() + split[1], seq_features[1].end());
    const int32_t rest0 = len[0] - split[0], rest1 = len[1] - split[1];
    const auto logits2 = runner.draft_step(
        {{a, split[0], slice(tokens[0], std::size_t(split[0]) + 1, std::size_t(len[0]) + 1)},
         {b, split[1], slice(tokens[1], std::size_t(split[1]) + 1, std::size_t(len[1]) + 1)}},
        f2, {rest0 - 1, rest0 + rest1 - 1});
    // Two chain steps, one decode row per sequence, features from the draft.
    const auto logits3 = runner.draft_step({{a, len[0], {chain[0][0]}}, {b, len[1], {chain[1][0]}}}, {}, {0, 1});
    const auto logits4 =
        runner.draft_step({{a, len[0] + 1, {chain[0][1]}}, {b, len[1] + 1, {chain[1][1]}}}, {}, {0, 1});

    nlohmann::json input = {{"sequences", nlohmann::json::array()}};
    for (int s = 0; s < 2; ++s) {
      input["sequences"].push_back({{"tokens", tokens[std::size_t(s)]},
                                    {"features", seq_features[std::size_t(s)]},
                                    {"chain_tokens", chain[std::size_t(s)]}});
    }
    const std::vector<OracleSequence> oracle = run_oracle(input);
    REQUIRE(oracle.size() == 2);

    const std::vector<bool> in_vocab = draft_vocabulary(v.draft_vocab_size);
    Mismatch step1, step2, chain1, chain2;
    int64_t not_excluded = 0;
    for (int32_t t = 0; t < rows1; ++t) {
      const int s = t < split[0] ? 0 : 1;
      const int32_t position = s == 0 ? t : t - split[0];
      add_row(step1, not_excluded, logits1[std::size_t(t)], oracle[std::size_t(s)].logits[std::size_t(position)],
              in_vocab);
    }
    for (int s = 0; s < 2; ++s) {
      const auto& ref = oracle[std::size_t(s)].logits;
      add_row(step2, not_excluded, logits2[std::size_t(s)], ref[std::size_t(len[s] - 1)], in_vocab);
      add_row(chain1, not_excluded, logits3[std::size_t(s)], ref[std::size_t(len[s])], in_vocab);
      add_row(chain2, not_excluded, logits4[std::size_t(s)], ref[std::size_t(len[s] + 1)], in_vocab);
      CHECK(oracle[std::size_t(s)].feature_diff < 1e-3);
    }
    CHECK(not_excluded == 0);
    std::printf("%s: worst |err| (ratio to tolerance): chunk 1 %.3g (%.3f), chunk 2 %.3g (%.3f), chain 1 %.3g (%.3f), "
                "chain 2 %.3g (%.3f); features vs float64 target %.3g / %.3g\n",
                v.name, step1.worst_abs, step1.worst_ratio, step2.worst_abs, step2.worst_ratio, chain1.worst_abs,
                chain1.worst_ratio, chain2.worst_abs, chain2.worst_ratio, oracle[0].feature_diff,
                oracle[1].feature_diff);
    CHECK(step1.worst_ratio <= 1.0);
    CHECK(step2.worst_ratio <= 1.0);
    CHECK(chain1.worst_ratio <= 1.0);
    CHECK(chain2.worst_ratio <= 1.0);
  }
}
