#pragma once
// pagedllm-attn-bench: the command line and the cases it expands to. A case
// is one batch geometry (workload, context, GQA, head_dim, block size, dtype,
// batch) that both backends run; a suite is a grid of cases that the
// command-line overrides narrow or replace. docs/attention-ab.md.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "pagedllm/sdk/tensor.h"

namespace pagedllm::attn_bench {

// A mistake on the command line (exit 2).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Workload { kDecode, kPrefill, kMixed };

const char* workload_name(Workload w);

// `--a NAME[:OPTIONS_JSON]`: a plugin name (or path) and its options.
struct BackendSpec {
  std::string plugin;
  std::string options_json = "{}";
  // Splits at the first ':'; the options must be a JSON object.
  static BackendSpec parse(std::string_view text, std::string_view flag);
};

struct CaseSpec {
  Workload workload = Workload::kDecode;
  int32_t context = 0;       // seq_len after the step (each sequence is within one block of it)
  int32_t gqa = 1;           // query heads per kv head
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t block_size = 16;
  pllm_dtype dtype = PLLM_DTYPE_F32;
  int32_t batch = 1;         // sequences in the step
  int32_t chunk = 512;       // new tokens of a prefill sequence (capped at context)

  int32_t num_heads() const { return num_kv_heads * gqa; }
  int32_t prefill_seqs() const;  // sequences with a chunk of new tokens
  int32_t decode_seqs() const { return batch - prefill_seqs(); }
  int32_t chunk_len() const { return chunk < context ? chunk : context; }
  // "decode ctx=1024 gqa=4 hd=128 bs=16 f32": unique within a run.
  std::string name() const;
};

struct BenchOptions {
  BackendSpec a, b;
  pllm_device device_a{PLLM_DEVICE_CPU, 0}, device_b{PLLM_DEVICE_CPU, 0};  // --device-a, --device-b
  std::vector<std::filesystem::path> plugin_dirs;  // empty: the host's search paths
  std::string suite = "quick";
  std::vector<Workload> workloads;
  std::vector<int32_t> contexts, gqas, head_dims, block_sizes;
  std::vector<pllm_dtype> dtypes;
  std::optional<int32_t> batch, chunk;
  int32_t num_kv_heads = 8;
  int32_t reps = 0;    // 0: the suite's
  int32_t warmup = 1;
  uint64_t seed = 1;
  std::optional<double> tolerance;  // empty: per dtype, default_tolerance()
  std::string json_path;
  bool help = false;

  // The suite's grid with every given override applied, in a fixed order.
  std::vector<CaseSpec> cases() const;
  int32_t repetitions() const;
};

// Throws UsageError.
BenchOptions parse_args(const std::vector<std::string>& args);
std::string usage();

// The default max |a - b| allowed per dtype; docs/attention-ab.md justifies them.
double default_tolerance(pllm_dtype dtype);

}  // namespace pagedllm::attn_bench
