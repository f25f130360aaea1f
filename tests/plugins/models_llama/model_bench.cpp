// models_llama_bench: prefill and decode throughput of the models_llama
// forward (through attention_cpu, as the engine runs it) next to an eager
// PyTorch f32 forward of the same weights (tools/bench/torch_llama_bench.py),
// on two generated models, with the same number of threads. Not a test:
// timings are printed, never asserted.
//
//   models_llama_bench [max_threads] [repeats]
//   models_llama_bench cuda[:N] [auto|f32|f16|bf16] [repeats]   (CUDA builds)
//
// On the CPU each engine runs with 1 thread and with max_threads (0, the
// default: one per hardware thread). On CUDA, models_llama with attention_cuda
// on device N in the given dtype (auto: as stored), on models/pagedllm-tiny and
// a generated 8-layer model of Llama-3.2-1B's layer shape; each step's time
// includes the host's part (batch building, plan, the copy of the logits).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "tests/plugins/models_llama/paged_runner.h"
#ifdef PAGEDLLM_HAVE_CUDA
#include "tests/plugins/models_llama/cuda_placement.h"
#endif

using namespace llama_test;
using Chunk = PagedRunner::Chunk;

namespace {

struct Workload {
  int32_t prefill_len;
  int32_t prompt_len;
  int32_t decode_steps;
  int repeats;
};

struct Result {
  double prefill = 0;  // tokens per second
  double decode1 = 0;
  double decode_n = 0;  // batch kBatchN on the CPU, kCudaBatchN on CUDA
  std::string engine;
};

constexpr int32_t kBatchN = 8;
constexpr int32_t kCudaBatchN = 32;

// How runners are built: options of the model and the attention backend, and
// where they run.
struct Setup {
  std::string model_options, attention_options;
  Placement placement;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<int32_t> tokens(int32_t count, int32_t vocab, uint32_t seed) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(int32_t((seed * 2654435761u + uint32_t(i) * 40503u) % uint32_t(vocab)));
  return out;
}

// The median: robust to the other processes of a shared machine.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// The model and the attention backend each get `threads` threads.
std::string threads_option(int threads) { return "{\"num_threads\": " + std::to_string(threads) + "}"; }
Setup cpu_setup(int threads) { return {threads_option(threads), threads_option(threads), {}}; }

// Decode tokens per second for `batch` sequences after prompts of prompt_len.
double decode_rate(const std::filesystem::path& model, const Setup& setup, const Workload& w, int32_t batch) {
  const int32_t block_size = 16;
  const int32_t blocks = batch * ((w.prompt_len + w.decode_steps) / block_size + 2);
  PagedRunner runner(model, setup.model_options, setup.attention_options, block_size, blocks, 7, setup.placement);
  std::vector<Chunk> prefill;
  for (int32_t s = 0; s < batch; ++s) {
    runner.add_sequence(tokens(w.prompt_len, runner.info().vocab_size, uint32_t(100 + s)));
    prefill.push_back({s, w.prompt_len});
  }
  std::vector<int32_t> last(static_cast<std::size_t>(batch));
  for (int32_t s = 0; s < batch; ++s) last[std::size_t(s)] = (s + 1) * w.prompt_len - 1;
  auto out = runner.step(prefill, last, {});
  std::vector<int32_t> rows(static_cast<std::size_t>(batch));
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<Chunk> decode;
  for (int32_t s = 0; s < batch; ++s) decode.push_back({s, 1});
  std::vector<double> times;
  for (int32_t step = 0; step < w.decode_steps; ++step) {
    for (int32_t s = 0; s < batch; ++s) runner.append_token(s, argmax(out.logits[std::size_t(s)]));
    const auto start = std::chrono::steady_clock::now();
    out = runner.step(decode, rows, {});
    times.push_back(seconds_since(start));
  }
  return batch / median(times);
}

Result bench_pagedllm(const std::filesystem::path& model, const Setup& setup, const Workload& w, int32_t batch_n) {
  Result r;
  {
    const int32_t block_size = 16;
    PagedRunner runner(model, setup.model_options, setup.attention_options, block_size,
                       (w.repeats + 1) * (w.prefill_len / block_size + 1), 7, setup.placement);
    std::vector<double> times;
    for (int i = 0; i <= w.repeats; ++i) {  // the first is a warm-up
      const int32_t seq = runner.add_sequence(tokens(w.prefill_len, runner.info().vocab_size, uint32_t(i)));
      const auto start = std::chrono::steady_clock::now();
      runner.step({{seq, w.prefill_len}}, {w.prefill_len - 1}, {});
      if (i) times.push_back(seconds_since(start));
    }
    r.prefill = w.prefill_len / median(times);
  }
  r.decode1 = decode_rate(model, setup, w, 1);
  r.decode_n = decode_rate(model, setup, w, batch_n);
  r.engine = "models_llama";
  return r;
}

Result bench_torch(const std::filesystem::path& model, int threads, const Workload& w) {
  TempDir io;
  const auto out = io.path() / "torch.json";
  const auto cmd = std::string(kPython) + " " PAGEDLLM_SOURCE_DIR "/tools/bench/torch_llama_bench.py --model " +
                   quote(model.string()) + " --output " + quote(out.string()) + " --threads " +
                   std::to_string(threads) + " --prefill-len " + std::to_string(w.prefill_len) + " --prompt-len " +
                   std::to_string(w.prompt_len) + " --decode-steps " + std::to_string(w.decode_steps) +
                   " --repeats " + std::to_string(w.repeats);
  const auto run = run_command(cmd);
  expect(run.exit_code == 0, "torch_llama_bench.py failed: " + run.err);
  std::ifstream in(out);
  const auto json = nlohmann::json::parse(in);
  expect(json["threads"].get<int>() == threads, "torch runs " + json["threads"].dump() + " threads");
  return {json["prefill_tokens_per_s"].get<double>(), json["decode_tokens_per_s"]["1"].get<double>(),
          json["decode_tokens_per_s"][std::to_string(kBatchN)].get<double>(),
          "PyTorch " + json["torch_version"].get<std::string>() + " eager f32"};
}

#ifdef PAGEDLLM_HAVE_CUDA
// models_llama + attention_cuda on `device` ("cuda" or "cuda:N").
int bench_cuda(const std::string& device, const std::string& dtype_name, int repeats) {
  const int32_t index = device.size() > 5 ? std::atoi(device.c_str() + 5) : 0;
  const pllm_dtype dtype = dtype_name == "f32"    ? PLLM_DTYPE_F32
                           : dtype_name == "f16"  ? PLLM_DTYPE_F16
                           : dtype_name == "bf16" ? PLLM_DTYPE_BF16
                                                  : PLLM_DTYPE_INVALID;
  if (dtype == PLLM_DTYPE_INVALID && dtype_name != "auto") {
    std::fprintf(stderr, "models_llama_bench: dtype '%s' is not auto, f32, f16 or bf16\n", dtype_name.c_str());
    return 2;
  }
  DeviceTensors tensors(index);
  const Setup setup{"{}", "{}", cuda_placement(tensors, dtype, index)};
  struct CudaCase {
    const char* name;
    const char* generator_args;  // nullptr: models/pagedllm-tiny
    Workload workload;
  };
  const CudaCase cases[] = {
      {"pagedllm-tiny: 6 layers, hidden 256, 8/2 heads x 32, vocab 8192 (bf16)", nullptr, {256, 64, 64, repeats}},
      {"llama-3.2-1B layer shape, 8 layers: hidden 2048, 32/8 heads x 64, intermediate 8192, vocab 32000 (bf16)",
       "--dtype bf16 --hidden-size 2048 --num-layers 8 --num-heads 32 --num-kv-heads 8 --head-dim 64 "
       "--intermediate-size 8192 --vocab-size 32000 --max-position-embeddings 4096",
       {2048, 256, 64, repeats}},
  };
  try {
    std::printf("models_llama + attention_cuda on %s, dtype %s: tokens/s (medians, host overhead included)\n",
                device.c_str(), dtype_name.c_str());
    for (const CudaCase& c : cases) {
      TempDir dir;
      std::filesystem::path model = PAGEDLLM_SOURCE_DIR "/models/pagedllm-tiny";
      if (c.generator_args) {
        make_model(dir.path(), c.generator_args);
        model = dir.path();
      }
      const Result r = bench_pagedllm(model, setup, c.workload, kCudaBatchN);
      std::printf("\n%s\n  prefill %d tokens   %12.1f\n  decode, batch 1     %12.1f\n  decode, batch %-5d %12.1f\n",
                  c.name, c.workload.prefill_len, r.prefill, r.decode1, kCudaBatchN, r.decode_n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "models_llama_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]).rfind("cuda", 0) == 0) {
#ifdef PAGEDLLM_HAVE_CUDA
    return bench_cuda(argv[1], argc > 2 ? argv[2] : "auto", argc > 3 ? std::atoi(argv[3]) : 5);
#else
    std::fprintf(stderr, "models_llama_bench: built without CUDA\n");
    return 2;
#endif
  }
  const int max_threads = pagedllm::plugins::resolve_num_threads(argc > 1 ? std::atoi(argv[1]) : 0);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<int> thread_counts = {1};
  if (max_threads > 1) thread_counts.push_back(max_threads);
  struct Case {
    const char* name;
    const char* generator_args;
    Workload workload;
  };
  const Case cases[] = {
      {"tiny: 3 layers, hidden 64, 4/2 heads x 16, intermediate 176, vocab 964", "", {128, 32, 64, repeats}},
      {"small: 8 layers, hidden 512, 8/4 heads x 64, intermediate 1408, vocab 8192",
       "--hidden-size 512 --num-layers 8 --num-heads 8 --num-kv-heads 4 --head-dim 64 --intermediate-size 1408 "
       "--vocab-size 8192 --max-position-embeddings 2048",
       {512, 128, 32, repeats}},
  };
  try {
    std::printf("models_llama (through attention_cpu) against an eager PyTorch f32 forward of the same weights\n");
    std::printf("tokens/s (medians); ratio = models_llama / torch at the same thread count, and / torch's best count\n");
    for (const Case& c : cases) {
      TempDir dir;
      make_model(dir.path(), c.generator_args);
      std::printf("\n%s\n  %-22s %7s %12s %12s %8s %11s\n", c.name, "", "threads", "models_llama", "torch", "ratio",
                  "vs torch's best");
      std::vector<std::pair<Result, Result>> results;
      for (int threads : thread_counts) {
        results.emplace_back(bench_pagedllm(dir.path(), cpu_setup(threads), c.workload, kBatchN),
                             bench_torch(dir.path(), threads, c.workload));
      }
      auto block = [&](const std::string& what, double Result::*field) {
        double torch_best = 0;
        for (const auto& r : results) torch_best = std::max(torch_best, r.second.*field);
        for (std::size_t i = 0; i < results.size(); ++i) {
          const double mine = results[i].first.*field, torch = results[i].second.*field;
          std::printf("  %-22s %7d %12.1f %12.1f %7.2fx %10.2fx\n", i ? "" : what.c_str(), thread_counts[i], mine,
                      torch, mine / torch, mine / torch_best);
        }
      };
      block("prefill " + std::to_string(c.workload.prefill_len) + " tokens", &Result::prefill);
      block("decode, batch 1", &Result::decode1);
      block("decode, batch " + std::to_string(kBatchN), &Result::decode_n);
      std::printf("  (%s)\n", results.front().second.engine.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "models_llama_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
