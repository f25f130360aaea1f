// tensor_parallel_check: one rank of models_llama split over an MPI group
// (run under mpirun by tensor_parallel_test.py). Every rank runs the sharded
// model (its collectives_mpi communicator passed at create) over the same
// steps — three sequences of different lengths, one prefilled in two chunks,
// then greedy decodes of all three in one batch — and rank 0 runs the whole
// model (TP = 1, the plugin as the fidelity tests check it against HF
// transformers) beside it. Checked:
//   - every rank returns the same logits, bit for bit (an all-gather of hashes);
//   - TP logits within the tolerance of TP = 1 (see kTolerance);
//   - the greedy token of every row equal: rank 0 broadcasts TP = 1's choice,
//     and every rank's TP argmax must equal it.
//
//
// With "cuda" (a build with CUDA): every rank's sharded model and attention run on
// cuda:0 in f32 — all ranks share the one device (the emulated one in CI, or one GPU),
// the model's collectives are collectives_mpi's staged through host memory — against
// TP = 1 on cuda:0 (rank 0) as above, and against the same split on the CPU in f32
// (every rank; kCrossDeviceAbsolute/Relative), the greedy token of every row equal on all three.
//
//   tensor_parallel_check <model dir> <decode steps> <model options json> [cuda]
// Exit 0 when every check passed, else 1 with "FAILED: ..." on stderr.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"
#include "tests/plugins/models_llama/paged_runner.h"
#ifdef PAGEDLLM_HAVE_CUDA
#include "tests/plugins/models_llama/cuda_placement.h"
#endif

namespace {

// TP changes only the order of f32 sums: o_proj and down_proj add each rank's
// partial products (a sum over its share of the columns) to the residual
// instead of one dot product over all columns. Each such reordering moves a
// sum by a few f32 ulps of its terms; through the layers and the final norm,
// the logits moved by at most 6.3e-7 of the row's largest |logit| on the cases
// of tensor_parallel_test.py (docs/tensor-parallel.md). 2e-5 of the largest
// |logit| (at least 1) leaves a 30x margin for other CPUs' kernels and still
// catches a wrong shard (a misplaced head or column moves logits by O(1)).
// On CUDA, cuBLAS's f32 GEMMs (f32 accumulation) also sum in an order of their own,
// which may change with the shape (the rank's narrower matrices): the same kind of
// reordering, the same bound.
constexpr double kTolerance = 2e-5;
// The CUDA split against the CPU split, both f32: two devices' kernels, compared as
// test_models_llama_cuda compares the CUDA model with the CPU's (and fidelity_test.cpp
// the CPU's with HF transformers) — 1e-4 + 1e-5 |ref| per logit.
constexpr double kCrossDeviceAbsolute = 1e-4, kCrossDeviceRelative = 1e-5;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

// collectives_mpi on `device` (the CPU: the test's own messages and the CPU split's collectives).
class Group {
 public:
  explicit Group(pllm_device device = {PLLM_DEVICE_CPU, 0}) {
    static pagedllm::PluginRegistry registry({PAGEDLLM_BINARY_DIR "/plugins"});
    auto library = registry.load("collectives_mpi", PLLM_PLUGIN_KIND_COLLECTIVES, "parallel.backend");
    pllm_collectives_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = "{\"timeout_seconds\": 120}";
    args.device = device;
    instance_ = pagedllm::create_plugin_instance<pllm_collectives_api, pllm_communicator>(library, args);
    ref_.struct_size = sizeof ref_;
    ref_.api = &instance_.api();
    ref_.comm = instance_.get();
    pllm_communicator_info info{};
    info.struct_size = sizeof info;
    pllm_error error{};
    pagedllm::check_plugin_call(ref_.api->get_info(ref_.comm, &info, &error), error, instance_.library(), "get_info");
    rank = info.rank;
    size = info.world_size;
  }
  const pllm_collectives_ref& ref() const { return ref_; }
  void call(pllm_status status, const pllm_error& error, const char* what) {
    pagedllm::check_plugin_call(status, error, instance_.library(), what);
  }
  void broadcast(void* data, int64_t bytes) {
    pllm_error error{};
    call(ref_.api->broadcast(ref_.comm, data, bytes, 0, nullptr, &error), error, "broadcast");
  }
  std::vector<int64_t> all_gather(int64_t value) {
    std::vector<int64_t> all(static_cast<std::size_t>(size));
    pllm_error error{};
    call(ref_.api->all_gather(ref_.comm, &value, all.data(), 1, PLLM_DTYPE_I64, nullptr, &error), error, "all_gather");
    return all;
  }

  int rank = 0;
  int size = 1;

 private:
  pagedllm::CollectivesInstance instance_;
  pllm_collectives_ref ref_{};
};

int64_t hash_rows(const std::vector<std::vector<float>>& rows) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& row : rows) {
    for (float v : row) {
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
  }
  return int64_t(h >> 1);
}

int32_t argmax(const std::vector<float>& row) {
  return int32_t(std::max_element(row.begin(), row.end()) - row.begin());
}

// The largest |a - b| over `bound(|b|)` of a step's rows (failing when above 1).
double worst_ratio(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b,
                   const std::function<double(double scale, double ref)>& bound, const std::string& what) {
  double worst = 0.0;
  for (std::size_t row = 0; row < a.size(); ++row) {
    double scale = 1.0;
    for (float v : b[row]) scale = std::max(scale, std::fabs(double(v)));
    double row_worst = 0.0;
    for (std::size_t v = 0; v < a[row].size(); ++v) {
      const double diff = std::fabs(double(a[row][v]) - double(b[row][v]));
      row_worst = std::max(row_worst, diff / bound(scale, std::fabs(double(b[row][v]))));
    }
    expect(row_worst <= 1.0, what + " row " + std::to_string(row) + ": logits differ by " +
                                 std::to_string(row_worst) + " times the tolerance");
    worst = std::max(worst, row_worst);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const bool on_cuda = argc == 5 && std::string(argv[4]) == "cuda";
  if (argc != 4 && !on_cuda) {
    std::fprintf(stderr, "usage: %s <model dir> <decode steps> <model options json> [cuda]\n", argv[0]);
    return 2;
  }
  const std::string model_dir = argv[1];
  const int decode_steps = std::atoi(argv[2]);
  const std::string options = argv[3];
  try {
    Group group;
    llama_test::Placement sharded, single;
    sharded.collectives = &group.ref();
    std::optional<Group> device_group;
    std::optional<llama_test::PagedRunner> cpu_split;
#ifdef PAGEDLLM_HAVE_CUDA
    llama_test::DeviceTensors tensors(0);
    if (on_cuda) {
      device_group.emplace(pllm_device{PLLM_DEVICE_CUDA, 0});
      single = llama_test::cuda_placement(tensors, PLLM_DTYPE_F32);
      sharded = single;
      sharded.collectives = &device_group->ref();
      llama_test::Placement cpu;
      cpu.dtype = PLLM_DTYPE_F32;
      cpu.collectives = &group.ref();
      cpu_split.emplace(model_dir, options, "{}", 4, 96, 7, cpu);
    }
#else
    if (on_cuda) throw std::runtime_error("cuda asked for, but this build has no CUDA");
#endif
    llama_test::PagedRunner tp(model_dir, options, "{}", 4, 96, 7, sharded);
    std::optional<llama_test::PagedRunner> whole;
    if (group.rank == 0) whole.emplace(model_dir, options, "{}", 4, 96, 7, single);

    const int32_t vocab = tp.info().vocab_size;
    std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 200, 31, 7, 77, 1000 % vocab, 3},
                                                 {2, 4},
                                                 {11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}};
    for (auto& prompt : prompts) {
      for (int32_t& t : prompt) t %= vocab;
    }
    for (const auto& prompt : prompts) {
      tp.add_sequence(prompt);
      if (whole) whole->add_sequence(prompt);
      if (cpu_split) cpu_split->add_sequence(prompt);
    }
    // Step 1: sequence 0 whole, sequence 2's first 6 tokens; step 2: sequence 1
    // and the rest of sequence 2 (a chunked prefill over paged context); then decodes.
    std::vector<std::vector<llama_test::PagedRunner::Chunk>> schedule = {
        {{0, int32_t(prompts[0].size())}, {2, 6}},
        {{1, int32_t(prompts[1].size())}, {2, int32_t(prompts[2].size()) - 6}},
    };
    double worst = 0.0, worst_cross_device = 0.0;
    for (int step = 0; step < 2 + decode_steps; ++step) {
      const auto chunks = step < 2 ? schedule[std::size_t(step)]
                                   : std::vector<llama_test::PagedRunner::Chunk>{{0, 1}, {1, 1}, {2, 1}};
      const auto tp_step = tp.step(chunks);
      std::vector<std::vector<float>> cpu_logits;  // the CPU split's, with "cuda"
      if (cpu_split) {
        cpu_logits = cpu_split->step(chunks).logits;
        worst_cross_device = std::max(
            worst_cross_device,
            worst_ratio(tp_step.logits, cpu_logits,
                        [](double, double ref) { return kCrossDeviceAbsolute + kCrossDeviceRelative * ref; },
                        "step " + std::to_string(step) + ": the CUDA split against the CPU split"));
      }
      const std::vector<int64_t> hashes = group.all_gather(hash_rows(tp_step.logits));
      for (int r = 1; r < group.size; ++r) {
        expect(hashes[std::size_t(r)] == hashes[0], "step " + std::to_string(step) + ": rank " + std::to_string(r) +
                                                        "'s logits differ from rank 0's");
      }
      // The greedy token of each sequence's last row, chosen from TP = 1 on rank 0.
      std::vector<int32_t> next(chunks.size(), -1);
      if (whole) {
        const auto ref_step = whole->step(chunks);
        for (std::size_t row = 0; row < tp_step.logits.size(); ++row) {
          const auto& a = tp_step.logits[row];
          const auto& b = ref_step.logits[row];
          double scale = 1.0, diff = 0.0;
          for (std::size_t v = 0; v < a.size(); ++v) {
            scale = std::max(scale, std::fabs(double(b[v])));
            diff = std::max(diff, std::fabs(double(a[v]) - double(b[v])));
          }
          worst = std::max(worst, diff / scale);
          expect(diff <= kTolerance * scale, "step " + std::to_string(step) + " row " + std::to_string(row) +
                                                 ": TP logits differ from TP = 1 by " + std::to_string(diff) +
                                                 " (largest |logit| " + std::to_string(scale) + ")");
        }
        int32_t row = -1;
        for (std::size_t i = 0; i < chunks.size(); ++i) {
          row += chunks[i].len;
          next[i] = argmax(ref_step.logits[std::size_t(row)]);
        }
      }
      group.broadcast(next.data(), int64_t(next.size() * sizeof(int32_t)));
      int32_t row = -1;
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        row += chunks[i].len;
        const int32_t seq = chunks[i].seq;
        const bool finished_prefill = tp.computed(seq) == int32_t(prompts[std::size_t(seq)].size());
        if (!finished_prefill && step < 2) continue;
        expect(argmax(tp_step.logits[std::size_t(row)]) == next[i],
               "step " + std::to_string(step) + " sequence " + std::to_string(seq) + ": rank " +
                   std::to_string(group.rank) + "'s greedy token " +
                   std::to_string(argmax(tp_step.logits[std::size_t(row)])) + ", TP = 1's " + std::to_string(next[i]));
        if (cpu_split) {
          expect(argmax(cpu_logits[std::size_t(row)]) == next[i],
                 "step " + std::to_string(step) + " sequence " + std::to_string(seq) + ": the CPU split's greedy "
                 "token on rank " + std::to_string(group.rank) + " differs from TP = 1's on cuda:0");
        }
        tp.append_token(seq, next[i]);
        if (whole) whole->append_token(seq, next[i]);
        if (cpu_split) cpu_split->append_token(seq, next[i]);
      }
    }
    if (group.rank == 0) {
      std::printf("tensor_parallel_check %s%s: %d ranks, %d decode steps, largest logit difference %.3g of the "
                  "largest |logit| (tolerance %.g)",
                  model_dir.c_str(), on_cuda ? " on cuda:0" : "", group.size, decode_steps, worst, kTolerance);
      if (on_cuda) std::printf("; against the CPU split: %.3g of the tolerance", worst_cross_device);
      std::printf("\n");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "FAILED: %s\n", e.what());
    return 1;
  }
  return failures ? 1 : 0;
}
