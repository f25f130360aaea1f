// spec_eagle on CUDA (plugins/spec_eagle/cuda_eagle_head.cpp) through the real
// plugin .so files. The create errors run everywhere (a CPU target on cuda:0
// is plugin_test.cpp's, for builds with and without CUDA); the cases that need
// a GPU print "SKIPPED: no CUDA device" without one.
//
// The CUDA head is compared with the CPU head (EagleHead, itself checked
// against the float64 PyTorch oracle in draft_fidelity_test.cpp) on the
// committed models/pagedllm-tiny and its head: the same steps as that test (two
// sequences, the draft as a chunked prefill in two steps, then two chain
// steps) on a CPU pair (models_llama + attention_cpu, f32) and a CUDA pair
// (models_llama on cuda:0 + attention_cuda), both heads fed the same f32
// features (the CPU target's), so the comparison covers the draft alone; a
// last chain step continues one sequence of two (feature_rows).
//
// Tolerances on logits (|cuda - cpu| <= atol + rtol |cpu|):
//   f32   1e-4 + 1e-5 |ref|, the CPU head's own against float64. cuBLAS runs
//         f32 GEMMs in f32 (CUBLAS_COMPUTE_32F, no TF32) and every kernel
//         accumulates in f32, so only summation orders differ; the CPU head's
//         worst error against float64 is 1.4e-5, so two such heads differ by
//         about 3e-5 at most.
//   bf16  0.5 + 0.02 |ref|, models_llama's CUDA bf16 tolerance. The head's
//         weights are stored in bf16, so they are exact; its activations are
//         rounded to bf16 (u = 2^-8): the features, fc's output and bias add,
//         q/k/v, attention, o, norm, gate/up, SiLU, down, the predicted
//         feature. Measured with tools/testing/eagle_reference.py --dtype
//         bfloat16 (every op in bf16, softmax and norms too, so more rounding
//         than the CUDA kernels' f32 internals) against its float64 run, the
//         features given, on 6 sequences of 10 to 50 tokens plus 2 chain rows:
//         worst |logits err| 0.140 for |logits| up to 11.5, 0.24 of this
//         tolerance (at most 0.73 here). Real mistakes are far outside: (feature, embedding) instead of (embedding, feature) moves
//         logits by up to 36, features one row off by up to 4.2, a read of an
//         unwritten cache slot gives NaN (draft_fidelity_test.cpp).
// With a draft vocabulary (option draft_vocab_size), the tokens outside it
// must be exactly -inf on both sides, the same set, and the rest within the
// tolerance.

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "tests/plugins/models_llama/cuda_placement.h"
#include "tests/plugins/models_llama/llama_harness.h"
#include "tests/plugins/spec_eagle/eagle_harness.h"
#include "tests/support/cuda_device.h"
#include "tests/support/thrown.h"

using namespace eagle_test;
using Catch::Matchers::Contains;
using llama_test::Mismatch;
using llama_test::Tolerance;
using Chunk = EagleRunner::Chunk;

namespace {

struct CreateError {
  pllm_status status = PLLM_OK;
  std::string message;
};

// The error creating spec_eagle on `device` for `target` with `info` and
// `api` (the test fails if it is created).
CreateError create_error(const Model& target, pllm_device device, const pllm_model_api& api,
                         const pllm_model_info& info) {
  const std::string path = kDraftDir.string();
  pllm_speculator_create_args args{};
  args.struct_size = sizeof args;
  args.options_json = "{}";
  args.draft_path = path.c_str();
  args.device = device;
  const pllm_speculator_target target_ref{sizeof(pllm_speculator_target), &api, target.handle(), &info};
  args.target = &target_ref;
  args.num_speculative_tokens = 3;
  const auto e = pagedllm::testing::thrown<pagedllm::PluginCallError>(
      [&] { pagedllm::create_plugin_instance<pllm_speculator_api, pllm_speculator>(speculator_library(), args); });
  return {e.status(), e.what()};
}

const Model& cpu_target() {
  static Model model(kTargetDir, R"({"num_threads": 1})");
  return model;
}

// A target that claims its weights live on cuda:`claimed_device`: the CPU
// model's tensors relabelled (never read: create fails before).
int32_t claimed_device = 0;
const pllm_model_api* real_api = nullptr;
pllm_status relabelled_get_tensor(pllm_model* model, const char* name, pllm_tensor* out, pllm_error* error) {
  const pllm_status status = real_api->get_tensor(model, name, out, error);
  out->device = {PLLM_DEVICE_CUDA, claimed_device};
  return status;
}

}  // namespace

TEST_CASE("spec_eagle: on CUDA, a target without get_tensor is refused", "[spec_eagle][cuda]") {
  pllm_model_api api = cpu_target().api();
  api.get_tensor = nullptr;
  const CreateError e = create_error(cpu_target(), {PLLM_DEVICE_CUDA, 0}, api, cpu_target().info());
  CHECK(e.status == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.message, Contains("no get_tensor"));
}

TEST_CASE("spec_eagle: on CUDA, a target dtype other than f32, f16 and bf16 is refused", "[spec_eagle][cuda]") {
  pllm_model_info info = cpu_target().info();
  info.dtype = PLLM_DTYPE_I8;
  const CreateError e = create_error(cpu_target(), {PLLM_DEVICE_CUDA, 0}, cpu_target().api(), info);
  CHECK(e.status == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.message, Contains("f32, f16 or bf16; the target's is i8"));
}

TEST_CASE("spec_eagle: a CUDA device that cannot be used is a clear error from create", "[spec_eagle][cuda]") {
  const std::string no_device = pagedllm::testing::cuda_device_unavailable_reason();
  int count = 0;
  if (no_device.empty()) REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  // Without a usable device (this CI machine: no driver) cuda:0 fails; with
  // one, the first ordinal past the last. The target claims to be there too.
  claimed_device = no_device.empty() ? count : 0;
  real_api = &cpu_target().api();
  pllm_model_api api = cpu_target().api();
  api.get_tensor = &relabelled_get_tensor;
  // A CUDA target computes in its weights' dtype (the CPU target keeps bf16 weights but
  // reports f32 activations), so the claimed target's dtype is its embedding's.
  pllm_model_info info = cpu_target().info();
  pllm_tensor embedding{};
  embedding.struct_size = sizeof embedding;
  pllm_error error{};
  REQUIRE(real_api->get_tensor(cpu_target().handle(), "model.embed_tokens.weight", &embedding, &error) == PLLM_OK);
  info.dtype = embedding.dtype;
  const CreateError e = create_error(cpu_target(), {PLLM_DEVICE_CUDA, claimed_device}, api, info);
  CHECK(e.status == PLLM_ERROR_DEVICE);
  if (no_device.empty()) {
    CHECK_THAT(e.message, Contains("spec_eagle: there is no cuda:" + std::to_string(count)));
  } else {
    CHECK_THAT(e.message, Contains("spec_eagle: cannot use cuda:0: cudaError"));
    CHECK_THAT(e.message, Contains(no_device));
  }
}

namespace {

// The logits rows of the four draft steps of draft_fidelity_test.cpp, fed
// `features`, and of a chain step over one of its two sequences.
std::vector<std::vector<float>> draft_steps(EagleRunner& runner, const std::vector<std::vector<int32_t>>& tokens,
                                            const std::vector<std::vector<std::vector<float>>>& features) {
  const int32_t len[2] = {13, 9}, split[2] = {7, 4};
  const std::vector<std::vector<int32_t>> chain = {{811, 4096}, {77, 8000}};
  const int32_t a = runner.add_sequence(), b = runner.add_sequence();
  std::vector<std::vector<float>> rows;
  const auto keep = [&](const std::vector<std::vector<float>>& step) { rows.insert(rows.end(), step.begin(), step.end()); };

  std::vector<int32_t> rows_all(std::size_t(split[0] + split[1]));
  std::iota(rows_all.begin(), rows_all.end(), 0);
  std::vector<std::vector<float>> f1(features[0].begin(), features[0].begin() + split[0]);
  f1.insert(f1.end(), features[1].begin(), features[1].begin() + split[1]);
  keep(runner.draft_step({{a, 0, slice(tokens[0], 1, std::size_t(split[0]) + 1)},
                          {b, 0, slice(tokens[1], 1, std::size_t(split[1]) + 1)}},
                         f1, rows_all));
  std::vector<std::vector<float>> f2(features[0].begin() + split[0], features[0].end());
  f2.insert(f2.end(), features[1].begin() + split[1], features[1].end());
  const int32_t rest0 = len[0] - split[0], rest1 = len[1] - split[1];
  keep(runner.draft_step({{a, split[0], slice(tokens[0], std::size_t(split[0]) + 1, std::size_t(len[0]) + 1)},
                          {b, split[1], slice(tokens[1], std::size_t(split[1]) + 1, std::size_t(len[1]) + 1)}},
                         f2, {rest0 - 1, rest0 + rest1 - 1}));
  keep(runner.draft_step({{a, len[0], {chain[0][0]}}, {b, len[1], {chain[1][0]}}}, {}, {0, 1}));
  keep(runner.draft_step({{a, len[0] + 1, {chain[0][1]}}, {b, len[1] + 1, {chain[1][1]}}}, {}, {0, 1}));
  // A third chain step continues sequence b only (feature_rows picks the
  // previous call's row 1), as core does once a sequence stops drafting.
  keep(runner.draft_step({{b, len[1] + 2, {4242}}}, {}, {0}, {1}));
  return rows;
}

struct Variant {
  const char* name;
  pllm_dtype dtype;
  const char* draft_options;
  Tolerance tolerance;
};
const Variant kVariants[] = {
    {"f32", PLLM_DTYPE_F32, "{}", {1e-4, 1e-5}},
    {"bf16", PLLM_DTYPE_BF16, "{}", {0.5, 0.02}},
    {"f32, a draft vocabulary of 1000 tokens", PLLM_DTYPE_F32, R"({"draft_vocab_size": 1000})", {1e-4, 1e-5}},
    {"bf16, a draft vocabulary of 1000 tokens", PLLM_DTYPE_BF16, R"({"draft_vocab_size": 1000})", {0.5, 0.02}},
};

}  // namespace

TEST_CASE("spec_eagle on CUDA matches the CPU head: chunked prefill and chain steps, f32 and bf16, draft vocabulary",
          "[spec_eagle][cuda]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const std::vector<std::vector<int32_t>> tokens = {random_tokens(14, 1), random_tokens(10, 2)};
  const int32_t len[2] = {13, 9};
  for (const Variant& v : kVariants) {
    INFO(v.name);
    // The CPU pair: the target's features of every position, and the CPU head's logits.
    EagleRunner cpu(R"({"num_threads": 2})", R"({"variant": "optimized"})", v.draft_options);
    const int32_t a = cpu.add_sequence(), b = cpu.add_sequence();
    std::vector<int32_t> all(std::size_t(len[0] + len[1]));
    std::iota(all.begin(), all.end(), 0);
    const auto features = cpu.target_step(
        {{a, 0, slice(tokens[0], 0, std::size_t(len[0]))}, {b, 0, slice(tokens[1], 0, std::size_t(len[1]))}}, all);
    const std::vector<std::vector<std::vector<float>>> seq_features = {
        {features.begin(), features.begin() + len[0]}, {features.begin() + len[0], features.end()}};
    const auto want = draft_steps(cpu, tokens, seq_features);

    llama_test::DeviceTensors tensors;
    EagleRunner gpu("{}", "{}", v.draft_options, llama_test::cuda_placement(tensors, v.dtype));
    REQUIRE(gpu.info().dtype == v.dtype);
    const auto got = draft_steps(gpu, tokens, seq_features);

    REQUIRE(got.size() == want.size());
    Mismatch mismatch;
    int64_t excluded = 0, excluded_differently = 0;
    for (std::size_t r = 0; r < got.size(); ++r) {
      std::vector<float> kept;
      std::vector<double> kept_ref;
      for (std::size_t i = 0; i < got[r].size(); ++i) {
        const bool cpu_never = std::isinf(want[r][i]) && want[r][i] < 0;
        const bool gpu_never = std::isinf(got[r][i]) && got[r][i] < 0;
        if (cpu_never) ++excluded;
        if (cpu_never != gpu_never) ++excluded_differently;
        if (!cpu_never) {
          kept.push_back(got[r][i]);
          kept_ref.push_back(want[r][i]);
        }
      }
      mismatch.add(kept, kept_ref, v.tolerance);
    }
    std::printf("spec_eagle CUDA vs CPU head, %s: worst |err| %.3g (%.3f of the tolerance); %lld logits -inf\n", v.name,
                mismatch.worst_abs, mismatch.worst_ratio, static_cast<long long>(excluded));
    CHECK(excluded_differently == 0);
    // Full vocabulary: nothing is excluded; 1000 tokens: the other 7192 of each row.
    const bool reduced = std::string(v.draft_options).find("draft_vocab_size") != std::string::npos;
    CHECK(excluded == (reduced ? int64_t(got.size()) * (8192 - 1000) : 0));
    CHECK(mismatch.worst_ratio <= 1.0);
  }
}
