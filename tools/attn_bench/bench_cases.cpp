#include "tools/attn_bench/bench_cases.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/dtype_name.h"
#include "tools/attn_bench/device_side.h"

namespace pagedllm::attn_bench {

const char* workload_name(Workload w) {
  switch (w) {
    case Workload::kDecode: return "decode";
    case Workload::kPrefill: return "prefill";
    case Workload::kMixed: return "mixed";
  }
  return "?";
}

BackendSpec BackendSpec::parse(std::string_view text, std::string_view flag) {
  BackendSpec spec;
  const auto colon = text.find(':');
  spec.plugin = std::string(text.substr(0, colon));
  if (spec.plugin.empty()) throw UsageError(fmt::format("{}: expected NAME[:OPTIONS_JSON], got '{}'", flag, text));
  if (colon != std::string_view::npos) {
    const std::string json_text(text.substr(colon + 1));
    const auto parsed = nlohmann::json::parse(json_text, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      throw UsageError(fmt::format("{} {}: the options after ':' must be a JSON object, got '{}'", flag,
                                   spec.plugin, json_text));
    }
    spec.options_json = parsed.dump();
  }
  return spec;
}

int32_t CaseSpec::prefill_seqs() const {
  switch (workload) {
    case Workload::kDecode: return 0;
    case Workload::kPrefill: return batch;
    case Workload::kMixed: return std::max(1, batch / 8);
  }
  return 0;
}

std::string CaseSpec::name() const {
  return fmt::format("{} ctx={} gqa={} hd={} bs={} {}", workload_name(workload), context, gqa, head_dim, block_size,
                     plugins::dtype_name(dtype));
}

double default_tolerance(pllm_dtype dtype) {
  if (dtype == PLLM_DTYPE_F16) return 4.0 * 0x1p-11;  // 4 unit roundoffs of f16 at |x| = 1: ~2.0e-3
  if (dtype == PLLM_DTYPE_BF16) return 4.0 * 0x1p-8;  // 4 unit roundoffs of bf16 at |x| = 1: ~1.6e-2
  return 1e-4;                                        // f32
}

namespace {

int64_t parse_int(std::string_view flag, std::string_view text, int64_t lo, int64_t hi) {
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not an integer", flag, text));
  }
  if (value < lo || value > hi) throw UsageError(fmt::format("{}: {} is out of range [{}, {}]", flag, value, lo, hi));
  return value;
}

std::vector<std::string_view> split_list(std::string_view text) {
  std::vector<std::string_view> items;
  std::size_t start = 0;
  while (true) {
    const auto comma = text.find(',', start);
    items.push_back(text.substr(start, comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

std::vector<int32_t> parse_int_list(std::string_view flag, std::string_view text, int64_t lo, int64_t hi) {
  std::vector<int32_t> values;
  for (auto item : split_list(text)) values.push_back(int32_t(parse_int(flag, item, lo, hi)));
  return values;
}

pllm_dtype parse_dtype(std::string_view flag, std::string_view text) {
  if (text == "f32") return PLLM_DTYPE_F32;
  if (text == "f16") return PLLM_DTYPE_F16;
  if (text == "bf16") return PLLM_DTYPE_BF16;
  throw UsageError(fmt::format("{}: unknown dtype '{}' (f32, f16, bf16)", flag, text));
}

Workload parse_workload(std::string_view flag, std::string_view text) {
  if (text == "decode") return Workload::kDecode;
  if (text == "prefill") return Workload::kPrefill;
  if (text == "mixed") return Workload::kMixed;
  throw UsageError(fmt::format("{}: unknown workload '{}' (decode, prefill, mixed)", flag, text));
}

template <class T>
const std::vector<T>& or_default(const std::vector<T>& given, const std::vector<T>& fallback) {
  return given.empty() ? fallback : given;
}

}  // namespace

constexpr int32_t kMaxContext = 32768;

std::string usage() {
  return R"(usage: pagedllm-attn-bench --a NAME[:OPTIONS_JSON] --b NAME[:OPTIONS_JSON] [options]

Runs identical randomized paged batches through two attention plugins and
reports max abs / rel difference of their outputs, time per run() call
(median after warm-up) and effective KV bandwidth. docs/attention-ab.md.

  --a, --b SPEC        plugin name or path, optionally ':' and its options as JSON,
                       e.g. --a 'attention_cpu:{"variant":"reference"}' --b attention_cpu
  --device-a, --device-b DEVICE
                       where each side runs: cpu (default), cuda or cuda:N; a CUDA side
                       gets its Q/K/V, output and KV cache in device memory, a stream,
                       and event timing (needs a build with CUDA)
  --plugin-dir DIR     where plugins are looked up (repeatable); default: the host's
                       search paths (PAGEDLLM_PLUGIN_PATH, then next to the binary)
  --suite quick|full   the grid of cases (default quick); the flags below override it:
                       quick: decode, prefill, mixed x context 512, 2048 x gqa 1, 4 x
                              head_dim 128 x block 16 x f32 (12 cases)
                       full:  decode, prefill, mixed x context 1024, 4096, 16384, 32768 x
                              gqa 1, 4, 8 x head_dim 64, 128 x block 16, 32 x f32 (144 cases)
  --workload LIST      decode, prefill, mixed (comma-separated)
  --context LIST       context lengths after the step, up to 32768
  --gqa LIST           query heads per kv head
  --head-dim LIST      head dimensions
  --block-size LIST    tokens per KV block
  --dtype LIST         f32, f16, bf16 (KV cache and activations)
  --kv-heads N         kv heads (default 8)
  --batch N            sequences per step (default: decode 16, prefill 2, mixed 16
                       of which batch/8 are prefill chunks)
  --chunk N            new tokens of each prefill sequence (default: quick 128, full 512;
                       capped at context)
  --reps N             timed repetitions per backend (default: quick 3, full 10)
  --warmup N           untimed calls before timing (default 1)
  --seed S             random seed (default 1)
  --tolerance X        max |a - b| allowed (default per dtype: f32 1e-4, f16 2e-3, bf16 1.6e-2)
  --json FILE          write machine-readable results
  -h, --help           this text

A case one side refuses (PLLM_ERROR_UNSUPPORTED) is reported as unsupported; the rest run.
Exit: 0 every case that ran within tolerance, 1 some case differs, 2 usage, plugin or memory
error, or every case unsupported.
)";
}

BenchOptions parse_args(const std::vector<std::string>& args) {
  BenchOptions o;
  bool have_a = false, have_b = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      return o;
    }
    if (i + 1 >= args.size()) throw UsageError(fmt::format("{}: missing value (see --help)", flag));
    const std::string_view value = args[++i];
    if (flag == "--a") {
      o.a = BackendSpec::parse(value, flag);
      have_a = true;
    } else if (flag == "--b") {
      o.b = BackendSpec::parse(value, flag);
      have_b = true;
    } else if (flag == "--device-a") {
      o.device_a = parse_device(value, flag);
    } else if (flag == "--device-b") {
      o.device_b = parse_device(value, flag);
    } else if (flag == "--plugin-dir") {
      o.plugin_dirs.emplace_back(value);
    } else if (flag == "--suite") {
      if (value != "quick" && value != "full") throw UsageError(fmt::format("--suite: '{}' is not quick or full", value));
      o.suite = std::string(value);
    } else if (flag == "--workload") {
      o.workloads.clear();
      for (auto w : split_list(value)) o.workloads.push_back(parse_workload(flag, w));
    } else if (flag == "--context") {
      o.contexts = parse_int_list(flag, value, 1, kMaxContext);
    } else if (flag == "--gqa") {
      o.gqas = parse_int_list(flag, value, 1, 64);
    } else if (flag == "--head-dim") {
      o.head_dims = parse_int_list(flag, value, 1, 1024);
    } else if (flag == "--block-size") {
      o.block_sizes = parse_int_list(flag, value, 1, 1024);
    } else if (flag == "--dtype") {
      o.dtypes.clear();
      for (auto d : split_list(value)) o.dtypes.push_back(parse_dtype(flag, d));
    } else if (flag == "--kv-heads") {
      o.num_kv_heads = int32_t(parse_int(flag, value, 1, 256));
    } else if (flag == "--batch") {
      o.batch = int32_t(parse_int(flag, value, 1, 4096));
    } else if (flag == "--chunk") {
      o.chunk = int32_t(parse_int(flag, value, 1, kMaxContext));
    } else if (flag == "--reps") {
      o.reps = int32_t(parse_int(flag, value, 1, 100000));
    } else if (flag == "--warmup") {
      o.warmup = int32_t(parse_int(flag, value, 0, 100000));
    } else if (flag == "--seed") {
      o.seed = uint64_t(parse_int(flag, value, 0, INT64_MAX));
    } else if (flag == "--tolerance") {
      try {
        std::size_t used = 0;
        const double t = std::stod(std::string(value), &used);
        if (used != value.size() || !(t >= 0)) throw std::invalid_argument("bad");
        o.tolerance = t;
      } catch (const std::exception&) {
        throw UsageError(fmt::format("--tolerance: '{}' is not a non-negative number", value));
      }
    } else if (flag == "--json") {
      o.json_path = std::string(value);
    } else {
      throw UsageError(fmt::format("unknown option '{}' (see --help)", flag));
    }
  }
  if (!have_a || !have_b) throw UsageError("both --a and --b are required (see --help)");
  return o;
}

int32_t BenchOptions::repetitions() const {
  if (reps > 0) return reps;
  return suite == "full" ? 10 : 3;
}

std::vector<CaseSpec> BenchOptions::cases() const {
  const bool full = suite == "full";
  const std::vector<Workload> all_workloads{Workload::kDecode, Workload::kPrefill, Workload::kMixed};
  const std::vector<int32_t> suite_contexts = full ? std::vector<int32_t>{1024, 4096, 16384, 32768}
                                                   : std::vector<int32_t>{512, 2048};
  const std::vector<int32_t> suite_gqas = full ? std::vector<int32_t>{1, 4, 8} : std::vector<int32_t>{1, 4};
  const std::vector<int32_t> suite_head_dims = full ? std::vector<int32_t>{64, 128} : std::vector<int32_t>{128};
  const std::vector<int32_t> suite_block_sizes = full ? std::vector<int32_t>{16, 32} : std::vector<int32_t>{16};
  const std::vector<pllm_dtype> suite_dtypes{PLLM_DTYPE_F32};

  std::vector<CaseSpec> cases;
  for (pllm_dtype dtype : or_default(dtypes, suite_dtypes)) {
    for (Workload workload : or_default(workloads, all_workloads)) {
      for (int32_t head_dim : or_default(head_dims, suite_head_dims)) {
        for (int32_t block_size : or_default(block_sizes, suite_block_sizes)) {
          for (int32_t gqa : or_default(gqas, suite_gqas)) {
            for (int32_t context : or_default(contexts, suite_contexts)) {
              CaseSpec c;
              c.workload = workload;
              c.context = context;
              c.gqa = gqa;
              c.num_kv_heads = num_kv_heads;
              c.head_dim = head_dim;
              c.block_size = block_size;
              c.dtype = dtype;
              c.batch = batch.value_or(workload == Workload::kPrefill ? 2 : 16);
              c.chunk = chunk.value_or(full ? 512 : 128);
              cases.push_back(c);
            }
          }
        }
      }
    }
  }
  return cases;
}

}  // namespace pagedllm::attn_bench
