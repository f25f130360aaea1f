// pagedllm-constraint-bench: what structured output adds to one engine step, measured on the
// plugins themselves (docs/benchmarks.md "Structured output"). A model's vocabulary and tokenizer
// (a model directory or GGUF file), random logits, and B rows: each step the unconstrained side
// samples the rows; the constrained side fills the rows' next-token bitmasks (constraint plugin),
// samples with them and has each matcher accept its token, exactly the calls
// core/engine/llm_engine_step.cpp adds. Both sides run interleaved, in the same process, on the same
// logits; the ratio is constrained / unconstrained. The forward pass is not included: the ratio is
// of the sampling part of a step, an upper bound on what constraints add to a whole step.
//
// Usage: pagedllm-constraint-bench <model path> [--batch B]... [--steps N] [--repeats R]

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/engine/engine.h"
#include "core/engine/structured_output.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "core/tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

const char* const kSchema =
    R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},)"
    R"( "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name", "age", "tags"]})";

struct Side {
  double seconds = 0;
  std::int64_t steps = 0;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <model path> [--batch B]... [--steps N] [--repeats R]\n", argv[0]);
    return 2;
  }
  std::vector<int> batches;
  int steps = 32, repeats = 5;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batch") batches.push_back(std::stoi(argv[i + 1]));
    if (flag == "--steps") steps = std::stoi(argv[i + 1]);
    if (flag == "--repeats") repeats = std::stoi(argv[i + 1]);
  }
  if (batches.empty()) batches = {1, 32};
  using namespace pagedllm;
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_model(argv[1]);
  const int vocab = static_cast<int>(tok.vocab_size());
  PluginRegistry registry(PluginRegistry::default_search_paths());
  const std::vector<std::int32_t> stops{tok.eos_id().value_or(0)};
  const StructuredOutput structured(registry.load("constraint_xgrammar", PLLM_PLUGIN_KIND_CONSTRAINT, "constraint"),
                                    "{}", tok, vocab, stops);
  pllm_sampler_create_args sampler_args{sizeof(pllm_sampler_create_args), "{}", {PLLM_DEVICE_CPU, 0}};
  const SamplerInstance sampler = create_plugin_instance<pllm_sampler_api, pllm_sampler>(
      registry.load("sampler", PLLM_PLUGIN_KIND_SAMPLER, "sampler"), sampler_args);
  const ConstraintGrammar grammar = structured.compile({OutputConstraint::Type::kJsonSchema, kSchema, "bench"});

  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::printf("vocabulary %d (%s), %d steps, %d repeats, JSON schema constraint, CPU sampler\n\n", vocab, argv[1],
              steps, repeats);
  std::printf("| batch | sampling | unconstrained (ms/step) | constrained (ms/step) | of which fill_bitmask | ratio |\n");
  std::printf("|---|---|---|---|---|---|\n");
  // Greedy: the sampler's work does not depend on how many tokens the mask leaves. Top-p: it
  // does (it sorts the finite candidates), so a mask can make sampling cheaper than without.
  for (const float temperature : {0.0f, 0.8f})
  for (const int batch : batches) {
    std::vector<float> logits(static_cast<std::size_t>(batch) * static_cast<std::size_t>(vocab));
    for (float& x : logits) x = normal(rng);
    pllm_tensor tensor{};
    tensor.struct_size = sizeof tensor;
    tensor.data = logits.data();
    tensor.dtype = PLLM_DTYPE_F32;
    tensor.device = {PLLM_DEVICE_CPU, 0};
    tensor.ndim = 2;
    tensor.shape[0] = batch;
    tensor.shape[1] = vocab;
    tensor.strides[0] = vocab;
    tensor.strides[1] = 1;
    std::vector<pllm_sampling_params> params(static_cast<std::size_t>(batch));
    std::vector<pllm_sample_row> rows(static_cast<std::size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      pllm_sampling_params& p = params[static_cast<std::size_t>(r)];
      p = pllm_sampling_params{};
      p.struct_size = sizeof(pllm_sampling_params);
      p.temperature = temperature;
      p.top_p = 0.95f;
      p.repetition_penalty = 1.0f;
      p.seed = static_cast<std::uint64_t>(r);
      pllm_sample_row& row = rows[static_cast<std::size_t>(r)];
      row = pllm_sample_row{};
      row.struct_size = sizeof(pllm_sample_row);
      row.params = &p;
      row.logits_row = r;
    }
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch));
    std::vector<std::int32_t> status(static_cast<std::size_t>(batch));
    const auto sample = [&](const pllm_sample_batch& b) {
      pllm_sample_output out{sizeof(pllm_sample_output), tokens.data(), nullptr, 0, nullptr, nullptr, status.data()};
      pllm_error error{};
      check_plugin_call(sampler.api().sample(sampler.get(), &b, &out, &error), error, sampler.library(), "sample");
    };
    Side plain, constrained;
    double fill_seconds = 0;
    const auto words = static_cast<std::size_t>(structured.words());
    std::vector<std::uint32_t> bitmask(static_cast<std::size_t>(batch) * words);
    for (int repeat = 0; repeat < repeats; ++repeat) {
      std::vector<std::unique_ptr<ConstraintMatcher>> matchers;
      std::vector<pllm_constraint_matcher*> handles;
      for (int r = 0; r < batch; ++r) {
        matchers.push_back(structured.make_matcher(grammar));
        handles.push_back(matchers.back()->get());
      }
      for (int step = 0; step < steps; ++step) {
        for (auto& row : rows) row.random_offset = static_cast<std::uint64_t>(step);
        const pllm_sample_batch unconstrained_batch{sizeof(pllm_sample_batch), batch, sizeof(pllm_sample_row),
                                                    rows.data(), &tensor, nullptr, 0, nullptr};
        auto start = Clock::now();
        sample(unconstrained_batch);
        plain.seconds += std::chrono::duration<double>(Clock::now() - start).count();
        ++plain.steps;

        start = Clock::now();
        structured.fill_bitmask(handles, bitmask.data());
        const auto filled = Clock::now();
        const pllm_sample_batch masked_batch{sizeof(pllm_sample_batch), batch, sizeof(pllm_sample_row), rows.data(),
                                             &tensor, bitmask.data(), static_cast<std::int32_t>(words), nullptr};
        sample(masked_batch);
        for (int r = 0; r < batch; ++r) {
          if (!structured.accept(handles[static_cast<std::size_t>(r)], tokens[static_cast<std::size_t>(r)])) {
            std::fprintf(stderr, "row %d: token %d refused by its matcher\n", r, tokens[static_cast<std::size_t>(r)]);
            return 1;
          }
        }
        const auto end = Clock::now();
        constrained.seconds += std::chrono::duration<double>(end - start).count();
        fill_seconds += std::chrono::duration<double>(filled - start).count();
        ++constrained.steps;
      }
    }
    const double a = 1e3 * plain.seconds / double(plain.steps);
    const double b = 1e3 * constrained.seconds / double(constrained.steps);
    std::printf("| %d | %s | %.3f | %.3f | %.3f | %.2fx |\n", batch, temperature > 0 ? "T 0.8, top-p 0.95" : "greedy",
                a, b, 1e3 * fill_seconds / double(constrained.steps), b / a);
  }
  return 0;
}
