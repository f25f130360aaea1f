// models_llama on CUDA (plugins/lib/llama_cuda) through the real plugin .so files:
// the CUDA model with attention_cuda on cuda:0 against the HF transformers
// oracle (tools/testing/hf_oracle.py, float32) over paged batches (prefill, chunked prefill, decode, mixed; the
// cache's unused slots hold NaN), in f32, bf16 and f16; f32 greedy decoding
// equal to the CPU model's on models/pagedllm-tiny; device weights through
// get_tensor. Cases that need a GPU skip without one; the create errors of a
// CUDA device that cannot be used run everywhere.
//
// Tolerances, per compute dtype (the weights are stored in that dtype, so
// they are exact on both sides and only the forward's rounding counts):
//   f32   the CPU fidelity tests' (fidelity_test.cpp): logits 1e-4 + 1e-5 |ref|,
//         hidden 5e-5 + 1e-5 |ref|. cuBLAS runs f32 GEMMs in f32 (CUBLAS_COMPUTE_32F
//         without TF32) and every kernel accumulates in f32, so only the
//         summation order differs from the CPU forward, whose worst errors
//         against transformers in f32 are 0.2 to 0.3 of these tolerances.
//   bf16  u = 2^-8. Measured with llama_reference.py's forward run in bf16 on the
//         same 3-layer model and prompts (tools/testing, torch on the CPU): worst
//         |logits err| 0.27 and |hidden err| 0.079 with f32 norms, softmax and
//         SiLU as here (0.45 and 0.11 with those in bf16 too), for |logits| up
//         to 14.5. Tolerance logits 0.5 + 0.02 |ref| (0.79 at 14.5: 3x the
//         expected error), hidden 0.15 + 0.02 |ref|. A wrong context token or a
//         lost norm weight moves logits by 2.5 to 12 (fidelity_test.cpp).
//   f16   u = 2^-11, 8x below bf16's, activations of these models far inside
//         f16's range: expected errors ~0.034 (logits) and ~0.01 (hidden).
//         Tolerance logits 0.08 + 0.005 |ref|, hidden 0.025 + 0.005 |ref|.

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "tests/plugins/models_llama/cuda_placement.h"
#include "tests/plugins/models_llama/llama_harness.h"
#include "tests/support/cuda_device.h"

using namespace llama_test;
using Catch::Matchers::Contains;
using Chunk = PagedRunner::Chunk;

namespace {

const std::filesystem::path kTinyModel = PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny";

struct DtypeCase {
  const char* stored;  // make_tiny_llama.py --dtype; the model runs in it (dtype auto)
  pllm_dtype dtype;
  Tolerance logits, hidden;
};
const DtypeCase kDtypes[] = {
    {"f32", PLLM_DTYPE_F32, {1e-4, 1e-5}, {5e-5, 1e-5}},
    {"bf16", PLLM_DTYPE_BF16, {0.5, 0.02}, {0.15, 0.02}},
    {"f16", PLLM_DTYPE_F16, {0.08, 0.005}, {0.025, 0.005}},
};

// Runs `steps` over `sequences` on CUDA in the case's dtype and compares every row with the oracle.
void run_cuda_scenario(const std::filesystem::path& model, const DtypeCase& c,
                       const std::vector<std::vector<int32_t>>& sequences,
                       const std::vector<std::vector<Chunk>>& steps) {
  const OracleOutput oracle = oracle_logits(model, sequences);
  DeviceTensors tensors;
  PagedRunner runner(model, "{}", "{}", 4, 96, 7, cuda_placement(tensors, PLLM_DTYPE_INVALID));
  REQUIRE(runner.info().dtype == c.dtype);
  for (const auto& s : sequences) runner.add_sequence(s);
  Checker checker{oracle, c.logits, c.hidden};
  for (std::size_t i = 0; i < steps.size(); ++i) {
    INFO("step " << i);
    checker.check_all(runner.step(steps[i]));
  }
  checker.require_within_tolerance();
}

struct CreateError {
  pllm_status status;
  std::string message;
};

// The error creating models_llama on `device` (FAIL if it is created).
CreateError create_error(const std::filesystem::path& dir, pllm_device device, pllm_dtype dtype = PLLM_DTYPE_INVALID) {
  try {
    Model model(dir, "{}", dtype, device);
  } catch (const pagedllm::PluginCallError& e) {
    return {e.status(), e.what()};
  }
  FAIL("the model was created on cuda:" << device.index);
  return {};
}

}  // namespace

TEST_CASE("models_llama: a CUDA device that cannot be used is a clear error from create", "[models_llama][cuda]") {
  const std::string no_device = pagedllm::testing::cuda_device_unavailable_reason();
  int count = 0;
  if (no_device.empty()) REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  // Without a usable device (this CI machine: no driver) cuda:0 fails; with
  // one, the first ordinal past the last.
  const pllm_device device{PLLM_DEVICE_CUDA, no_device.empty() ? count : 0};
  const CreateError e = create_error(kTinyModel, device);
  CHECK(e.status == PLLM_ERROR_DEVICE);
  if (no_device.empty()) {
    CHECK_THAT(e.message, Contains("there is no cuda:" + std::to_string(count)));
  } else {
    // CUDA's error name and reason, e.g. "cudaErrorInsufficientDriver (CUDA
    // driver version is insufficient for CUDA runtime version)".
    CHECK_THAT(e.message, Contains("models_llama: cannot use cuda:0: cudaError"));
    CHECK_THAT(e.message, Contains(no_device));
  }
}

TEST_CASE("models_llama: CUDA refuses a dtype other than f32, f16 and bf16", "[models_llama][cuda]") {
  const CreateError e = create_error(kTinyModel, {PLLM_DEVICE_CUDA, 0}, PLLM_DTYPE_I8);
  CHECK(e.status == PLLM_ERROR_UNSUPPORTED);
  CHECK_THAT(e.message, Contains("f32, f16 or bf16; model dtype i8 is not supported"));
}

TEST_CASE("models_llama on CUDA matches the oracle: prefill, chunked prefill, decode, mixed", "[models_llama][cuda]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  require_oracle();
  for (const DtypeCase& c : kDtypes) {
    INFO("dtype " << c.stored);
    TempDir dir;
    // head_dim 32: attention_cuda's kernels are built for head_dim 32, 64 and 128.
    make_model(dir.path(), std::string("--head-dim 32 --dtype ") + c.stored);
    {
      INFO("single prefill");
      run_cuda_scenario(dir.path(), c, {random_tokens(23, 1)}, {{{0, 23}}});
    }
    {
      INFO("chunked prefill");
      run_cuda_scenario(dir.path(), c, {random_tokens(23, 1)}, {{{0, 7}}, {{0, 9}}, {{0, 7}}});
    }
    {
      INFO("decode after a prefill");
      std::vector<std::vector<Chunk>> steps = {{{0, 9}}};
      for (int i = 0; i < 14; ++i) steps.push_back({{0, 1}});
      run_cuda_scenario(dir.path(), c, {random_tokens(23, 2)}, steps);
    }
    {
      INFO("mixed decodes and prefill chunks");
      std::vector<std::vector<int32_t>> sequences;
      for (std::size_t i = 0; i < kMixedLengths.size(); ++i) {
        sequences.push_back(random_tokens(kMixedLengths[i], 10 + uint32_t(i)));
      }
      run_cuda_scenario(dir.path(), c, sequences, kMixedSteps);
    }
  }
}

TEST_CASE("models_llama on CUDA: Qwen3 (q/k norms), biases of every projection, mixtures of experts, sliding "
          "windows, Gemma 3, Phi-3, YaRN, through the one decoder layer",
          "[models_llama][cuda][families]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  require_oracle();
  // hf_oracle.py's presets with head_dim 32: Qwen3-0.6B's shape (bf16), Qwen3 with attention_bias and a Llama
  // with attention_bias and mlp_bias, Mixtral's and Qwen3-MoE's routing, sliding windows (Mistral's on every
  // layer, Qwen2's on layer 1), Gemma 3 ((1 + w) sandwich norms, GeGLU-tanh, local and global RoPE, the
  // embedding scale, logit soft-capping), Phi-3 (fused tensors, window; longrope), Qwen2.5's YaRN (f32), each
  // in its stored dtype, in mixed steps of prefill chunks and decodes.
  const std::pair<const char*, const DtypeCase*> presets[] = {
      {"qwen3", &kDtypes[1]},   {"qwen3_bias", &kDtypes[0]}, {"llama_bias", &kDtypes[0]},
      {"mixtral", &kDtypes[0]}, {"qwen3_moe", &kDtypes[0]}, {"mistral_window", &kDtypes[0]},
      {"qwen2_window", &kDtypes[0]}, {"gemma3", &kDtypes[0]}, {"phi3", &kDtypes[0]},
      {"phi3_longrope", &kDtypes[0]}, {"qwen2_yarn", &kDtypes[0]}};
  for (const auto& [preset, dtype_case] : presets) {
    INFO(preset);
    TempDir dir;
    const auto r = run_command(std::string(kPython) + " " PAGEDLLM_SOURCE_DIR "/tools/testing/hf_oracle.py make "
                               "--preset " + preset + " " + quote(dir.path().string()));
    REQUIRE(r.exit_code == 0);
    std::vector<std::vector<int32_t>> sequences;
    for (std::size_t i = 0; i < kMixedLengths.size(); ++i) {
      sequences.push_back(random_tokens(kMixedLengths[i], 40 + uint32_t(i)));
    }
    run_cuda_scenario(dir.path(), *dtype_case, sequences, kMixedSteps);
  }
}

TEST_CASE("models_llama on CUDA: llama3 RoPE, tied embeddings, odd sizes, rows asked for", "[models_llama][cuda]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  require_oracle();
  // hidden 36 and intermediate 100: rows that are not a multiple of the bf16
  // 16-byte vector (8 elements), so the scalar kernel variants run too.
  TempDir dir;
  make_model(dir.path(), "--dtype bf16 --rope-scaling llama3 --tie-word-embeddings --hidden-size 36 "
                         "--intermediate-size 100 --num-heads 4 --num-kv-heads 1 --head-dim 32 --num-layers 2");
  const std::vector<std::vector<int32_t>> sequences = {random_tokens(99, 3), random_tokens(35, 4)};
  const OracleOutput oracle = oracle_logits(dir.path(), sequences);
  DeviceTensors tensors;
  PagedRunner runner(dir.path(), "{}", "{}", 4, 96, 7, cuda_placement(tensors, PLLM_DTYPE_INVALID));
  for (const auto& s : sequences) runner.add_sequence(s);
  const DtypeCase& bf16 = kDtypes[1];
  Checker checker{oracle, bf16.logits, bf16.hidden};
  // Out of order, with a repeat; hidden rows differ from logits rows.
  const std::vector<int32_t> logits_rows = {79, 0, 49, 79}, hidden_rows = {3, 50};
  checker.check(runner.step({{0, 50}, {1, 30}}, logits_rows, hidden_rows), logits_rows, hidden_rows);
  const auto none = runner.step({{1, 1}, {0, 45}}, {}, {});
  CHECK(none.logits.empty());
  CHECK(none.hidden.empty());
  for (int i = 0; i < 4; ++i) checker.check_all(runner.step({{0, 1}, {1, 1}}));
  checker.require_within_tolerance();
}

TEST_CASE("models_llama: f32 on CUDA greedy-decodes pagedllm-tiny exactly as the CPU does", "[models_llama][cuda]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  const std::vector<std::vector<int32_t>> prompts = {{0, 412, 37, 5120, 999, 64}, {0, 7}, {0, 8000, 1, 2, 3, 4, 5, 6, 7}};
  constexpr int kNewTokens = 24;
  DeviceTensors tensors;
  PagedRunner cpu(kTinyModel, "{}", "{}");
  PagedRunner gpu(kTinyModel, "{}", "{}", 4, 96, 7, cuda_placement(tensors, PLLM_DTYPE_F32));
  REQUIRE(gpu.info().dtype == PLLM_DTYPE_F32);
  std::vector<Chunk> step;
  for (std::size_t s = 0; s < prompts.size(); ++s) {
    cpu.add_sequence(prompts[s]);
    gpu.add_sequence(prompts[s]);
    step.push_back({int32_t(s), int32_t(prompts[s].size())});
  }
  double worst_logit_diff = 0.0;
  for (int i = 0; i < kNewTokens; ++i) {
    INFO("new token " << i);
    std::vector<int32_t> last_rows;
    int32_t end = 0;
    for (const Chunk& c : step) last_rows.push_back((end += c.len) - 1);
    const auto a = cpu.step(step, last_rows, {});
    const auto b = gpu.step(step, last_rows, {});
    step.clear();
    for (std::size_t s = 0; s < prompts.size(); ++s) {
      std::vector<float> sorted = a.logits[s];
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      // f32 on both sides, summed in different orders: logits agree to ~1e-5,
      // so a top-two margin below 1e-3 could legitimately go either way. The
      // float64 oracle's smallest margin on these prompts is 0.0117.
      REQUIRE(sorted[0] - sorted[1] > 1e-3f);
      for (std::size_t v = 0; v < a.logits[s].size(); ++v) {
        worst_logit_diff = std::max(worst_logit_diff, double(std::abs(a.logits[s][v] - b.logits[s][v])));
      }
      const auto next_cpu = int32_t(std::max_element(a.logits[s].begin(), a.logits[s].end()) - a.logits[s].begin());
      const auto next_gpu = int32_t(std::max_element(b.logits[s].begin(), b.logits[s].end()) - b.logits[s].begin());
      REQUIRE(next_gpu == next_cpu);
      cpu.append_token(int32_t(s), next_cpu);
      gpu.append_token(int32_t(s), next_cpu);
      step.push_back({int32_t(s), 1});
    }
  }
  INFO("worst |logit difference| CPU f32 vs CUDA f32: " << worst_logit_diff);
  CHECK(worst_logit_diff < 1e-3);
}

TEST_CASE("models_llama on CUDA: info and get_tensor describe device memory", "[models_llama][cuda]") {
  PAGEDLLM_REQUIRE_CUDA_DEVICE();
  Model model(kTinyModel, "{}", PLLM_DTYPE_INVALID, {PLLM_DEVICE_CUDA, 0});
  CHECK(model.info().dtype == PLLM_DTYPE_BF16);  // auto: as pagedllm-tiny stores it
  const pllm_tensor embed = model.tensor("model.embed_tokens.weight");
  CHECK(embed.device.type == PLLM_DEVICE_CUDA);
  CHECK(embed.dtype == PLLM_DTYPE_BF16);
  REQUIRE(embed.ndim == 2);
  CHECK(embed.shape[0] == 8192);
  CHECK(embed.shape[1] == 256);
  // Row 4321 of the embedding, bit for bit as stored.
  const pllm::safetensors::File file(kTinyModel / "model.safetensors");
  const auto* stored = file.find("model.embed_tokens.weight");
  REQUIRE(stored != nullptr);
  std::vector<uint16_t> row(256), want(256);
  std::memcpy(want.data(), reinterpret_cast<const unsigned char*>(stored->data) + 4321 * 256 * 2, 512);
  REQUIRE(cudaMemcpy(row.data(), static_cast<const uint16_t*>(embed.data) + 4321 * 256, 512, cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  CHECK(row == want);
  const pllm_tensor k = model.tensor("model.layers.5.self_attn.k_proj.weight");
  CHECK(k.device.type == PLLM_DEVICE_CUDA);
  CHECK(k.shape[0] == 64);
  CHECK(k.shape[1] == 256);
}
