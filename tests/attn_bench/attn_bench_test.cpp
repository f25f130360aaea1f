// pagedllm-attn-bench: the command line and the case grid, then the tool end
// to end: attention_cpu reference vs optimized agree (exit 0, JSON fields), a
// deliberately wrong fixture backend is caught per case (exit 1), and
// unusable setups are clear errors (exit 2).

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#ifdef PAGEDLLM_ATTN_BENCH_CUDA
#include "tests/support/cuda_device.h"
#endif

#include "tests/support/run_command.h"
#include "tools/attn_bench/bench_cases.h"
#include "tools/attn_bench/device_side.h"
#include "tools/attn_bench/paged_case.h"

using namespace pagedllm::attn_bench;
using Catch::Matchers::Contains;
using pagedllm::testing::run_command;
using pagedllm::testing::TempDir;

namespace {

const std::string kBench = PAGEDLLM_BINARY_DIR "/bin/pagedllm-attn-bench";
const std::string kPluginDirs = std::string(" --plugin-dir " PAGEDLLM_FIXTURE_PLUGIN_DIR) +
                                " --plugin-dir " PAGEDLLM_BINARY_DIR "/plugins";
// Small geometry so every case runs in milliseconds on the reference kernel.
const std::string kTiny = " --kv-heads 2 --head-dim 64 --batch 4 --chunk 40 --reps 2";

}  // namespace

TEST_CASE("attn-bench command line: backends, lists, suites and overrides", "[attn_bench]") {
  const BenchOptions o = parse_args({"--a", R"(attention_cpu:{"variant": "reference"})", "--b", "attention_cpu",
                                     "--workload", "decode,mixed", "--context", "100,32768", "--gqa", "1,8",
                                     "--dtype", "bf16", "--seed", "7"});
  CHECK(o.a.plugin == "attention_cpu");
  CHECK(o.a.options_json == R"({"variant":"reference"})");
  CHECK(o.b.options_json == "{}");
  CHECK(o.seed == 7);
  CHECK(o.repetitions() == 3);
  const auto cases = o.cases();
  REQUIRE(cases.size() == 2 * 2 * 2);  // workloads x gqa x contexts; quick: one head_dim, one block size
  CHECK(cases[0].name() == "decode ctx=100 gqa=1 hd=128 bs=16 bf16");
  CHECK(cases[7].name() == "mixed ctx=32768 gqa=8 hd=128 bs=16 bf16");
  CHECK(cases[7].decode_seqs() == 14);
  CHECK(cases[7].prefill_seqs() == 2);

  const BenchOptions full = parse_args({"--a", "x", "--b", "y", "--suite", "full"});
  CHECK(full.cases().size() == 3 * 4 * 3 * 2 * 2);
  CHECK(full.repetitions() == 10);

  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--a", "x"},
           {"--a", "x", "--b", "y", "--context", "32769"},
           {"--a", "x", "--b", "y", "--context", "0"},
           {"--a", "x", "--b", "y", "--dtype", "f8"},
           {"--a", "x", "--b", "y", "--workload", "train"},
           {"--a", "x:{not json", "--b", "y"},
           {"--a", "x", "--b", "y", "--frobnicate", "1"},
           {"--a", "x", "--b", "y", "--tolerance", "-1"}}) {
    INFO(bad.back());
    CHECK_THROWS_AS(parse_args(bad), UsageError);
  }
}

TEST_CASE("attn-bench cases: permuted tables, decodes first, fill rounds write every cached slot once",
          "[attn_bench]") {
  CaseSpec spec;
  spec.workload = Workload::kMixed;
  spec.context = 100;
  spec.batch = 9;  // 8 decodes + 1 prefill chunk
  spec.chunk = 30;
  spec.num_kv_heads = 2;
  spec.head_dim = 8;
  PagedCase pc(spec, 42);
  const HostBatch& b = pc.step().batch;
  REQUIRE(b.num_seqs() == 9);
  CHECK(b.num_decode_seqs == 8);
  CHECK(b.num_tokens() == 8 + 30);
  CHECK(b.query_start_loc.back() == 38);
  uint64_t kv_tokens = 0;
  for (int32_t len : b.seq_lens) {
    CHECK(len <= 100);
    CHECK(len > 100 - 16);
    kv_tokens += uint64_t(len);
  }
  CHECK(pc.kv_bytes_read() == kv_tokens * 2 * 8 * 2 * 4);
  // Block tables are not the identity (random permutation of the pool).
  bool contiguous = true;
  for (std::size_t i = 1; i < 7; ++i) contiguous = contiguous && b.block_tables[i] == b.block_tables[i - 1] + 1;
  CHECK_FALSE(contiguous);
  // Every cached slot is written exactly once by the fill, and no new token's slot.
  std::vector<int> writes(std::size_t(pc.num_device_blocks() * spec.block_size), 0);
  int64_t filled = 0;
  for (int32_t i = 0; i < pc.num_fill_steps(); ++i) {
    const StepInputs in = pc.fill_step(i);
    for (int64_t slot : in.batch.slot_mapping) ++writes[std::size_t(slot)];
    filled += in.batch.num_tokens();
    CHECK(in.batch.num_tokens() <= PagedCase::kFillTokens);
  }
  CHECK(filled == pc.cached_tokens());
  for (int64_t slot : b.slot_mapping) CHECK(writes[std::size_t(slot)] == 0);
  CHECK(std::count(writes.begin(), writes.end(), 1) == filled);
}

TEST_CASE("attn-bench: attention_cpu reference vs optimized agree and the JSON has every field", "[attn_bench]") {
  TempDir dir;
  const auto json_file = dir.path() / "ab.json";
  // No --plugin-dir: the host's search paths find build/plugins next to build/bin.
  const auto r = run_command(kBench + R"( --a 'attention_cpu:{"variant":"reference"}')" +
                             R"( --b 'attention_cpu:{"variant":"optimized","num_threads":2}')" +
                             " --suite quick --context 64,200 --dtype f32,bf16" + kTiny + " --json " +
                             json_file.string());
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("24 cases: 24 within tolerance, 0 FAIL"));

  nlohmann::json j;
  std::ifstream(json_file) >> j;
  CHECK(j["tool"] == "pagedllm-attn-bench");
  CHECK(j["a"]["plugin"] == "attention_cpu");
  CHECK(j["a"]["options"]["variant"] == "reference");
  CHECK(j["b"]["options"]["num_threads"] == 2);
  for (const char* side : {"a", "b"}) {
    CHECK(j[side]["device"] == "cpu");
    CHECK(j[side]["copy_bandwidth_gbs"] == 0.0);  // measured for device sides only
  }
  CHECK(j["failed"] == 0);
  CHECK(j["passed"] == 24);
  REQUIRE(j["cases"].size() == 24);
  for (const auto& c : j["cases"]) {
    INFO(c["name"]);
    for (const char* key : {"workload", "context", "gqa", "num_heads", "num_kv_heads", "head_dim", "block_size",
                            "dtype", "num_seqs", "num_decode_seqs", "num_tokens", "kv_bytes", "max_abs_diff",
                            "max_rel_diff", "fill_max_abs_diff", "tolerance", "pass", "speedup_b_over_a"}) {
      CHECK(c.contains(key));
    }
    CHECK(c["pass"] == true);
    CHECK(c["max_abs_diff"].get<double>() <= c["tolerance"].get<double>());
    CHECK(c["tolerance"].get<double>() == (c["dtype"] == "f32" ? 1e-4 : 4.0 * 0x1p-8));
    const int64_t context = c["context"], seqs = c["num_seqs"];
    const int64_t per_token = 2 * 64 * 2 * (c["dtype"] == "f32" ? 4 : 2);
    CHECK(c["kv_bytes"].get<int64_t>() <= seqs * context * per_token);
    CHECK(c["kv_bytes"].get<int64_t>() > seqs * (context - 16) * per_token);
    for (const char* side : {"a", "b"}) {
      const auto& t = c[side];
      CHECK(t["times_ms"].size() == 2);
      CHECK(t["kv_bandwidth_fraction_of_copy"].is_null());
      CHECK(t["time_ms_median"].get<double>() > 0);
      CHECK(t["kv_bandwidth_gbs"].get<double>() ==
            Approx(c["kv_bytes"].get<double>() / (t["time_ms_median"].get<double>() * 1e-3) / 1e9));
    }
    if (c["workload"] == "decode") CHECK(c["num_tokens"] == 4);
    if (c["workload"] == "prefill") CHECK(c["num_decode_seqs"] == 0);
  }
}

TEST_CASE("attn-bench: an independent plain backend agrees and a wrong one fails naming the case", "[attn_bench]") {
  const std::string cases = " --context 100 --gqa 2 --dtype f32" + kTiny;
  const auto good =
      run_command(kBench + kPluginDirs + " --a fixture_attention --b 'attention_cpu:{\"num_threads\":1}'" + cases);
  INFO(good.out << good.err);
  CHECK(good.exit_code == 0);

  // The defect only touches prefill rows (more than one new token; the cache
  // fill runs decode-like steps): the prefill and mixed cases fail, decode passes.
  const auto bad = run_command(kBench + kPluginDirs + R"( --a 'fixture_attention:{"defect":"prefill_scale"}')" +
                               " --b attention_cpu --workload decode,prefill,mixed" + cases);
  INFO(bad.out << bad.err);
  CHECK(bad.exit_code == 1);
  CHECK_THAT(bad.out, Contains("FAIL prefill ctx=100 gqa=2 hd=64 bs=16 f32: max abs diff"));
  CHECK_THAT(bad.out, Contains("FAIL mixed ctx=100 gqa=2 hd=64 bs=16 f32: max abs diff"));
  CHECK_THAT(bad.out, Contains("(sequence 3, prefill chunk), head"));  // mixed: 3 decodes, then the chunk
  CHECK_THAT(bad.out, !Contains("FAIL decode"));
  CHECK_THAT(bad.out, Contains("3 cases: 1 within tolerance, 2 FAIL"));
}

TEST_CASE("attn-bench: unusable setups exit 2 with a message naming the problem", "[attn_bench]") {
  const std::string ok_b = " --b attention_cpu";
  struct Bad {
    std::string args, message;
  };
  for (const Bad& bad : std::vector<Bad>{
           {" --a no_such_plugin" + ok_b, "no_such_plugin"},
           {R"( --a 'attention_cpu:{"variant":"fast"}')" + ok_b, "rejected its options"},
           {R"( --a 'attention_cpu:{"varaint":"reference"}')" + ok_b, "varaint"},
           {" --a fixture_attention" + ok_b + " --dtype f16 --context 64", "every case was refused as unsupported"},
           {" --a attention_cpu" + ok_b + " --context 32768 --batch 4096 --kv-heads 256 --head-dim 1024",
            "MemAvailable"},
           {" --a attention_cpu", "both --a and --b are required"},
       }) {
    const auto r = run_command(kBench + kPluginDirs + kTiny + bad.args);
    INFO(bad.args << "\n" << r.out << r.err);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Contains(bad.message));
  }
}

TEST_CASE("attn-bench: a case one side refuses is reported unsupported and the rest run", "[attn_bench]") {
  // fixture_attention is f32-only: it refuses the f16 cases (bytes_per_block), attention_cpu runs them all.
  TempDir dir;
  const std::string json_path = (dir.path() / "r.json").string();
  const auto r = run_command(kBench + kPluginDirs + " --a fixture_attention --b attention_cpu --workload decode,mixed" +
                             " --context 64 --gqa 2 --dtype f16,f32 --json " + json_path + kTiny);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Contains("decode ctx=64 gqa=2 hd=64 bs=16 f16"));
  CHECK_THAT(r.out, Contains("unsupported | a (fixture_attention): bytes_per_block refused [case decode ctx=64 gqa=2 "
                             "hd=64 bs=16 f16]: the plugin does not support this case (dtype f16"));
  CHECK_THAT(r.out, Contains("4 cases: 2 within tolerance, 0 FAIL, 2 unsupported"));
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["passed"] == 2);
  CHECK(j["unsupported"] == 2);
  int refused = 0;
  for (const auto& c : j["cases"]) {
    if (c["dtype"] == "f16") {
      CHECK(c["status"] == "unsupported");
      CHECK_THAT(c["unsupported"].get<std::string>(), Contains("the KV cache must be f32"));
      CHECK_FALSE(c.contains("a"));
      ++refused;
    } else {
      CHECK(c["status"] == "pass");
      CHECK(c["a"]["time_ms_median"].get<double>() > 0);
    }
  }
  CHECK(refused == 2);
}

TEST_CASE("attn-bench devices: spelling, and a CUDA side without a device exits 2 naming it", "[attn_bench]") {
  CHECK(parse_device("cpu", "--device-a").type == PLLM_DEVICE_CPU);
  const pllm_device cuda1 = parse_device("cuda:1", "--device-b");
  CHECK(cuda1.type == PLLM_DEVICE_CUDA);
  CHECK(cuda1.index == 1);
  CHECK(parse_device("cuda", "--device-b").index == 0);
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "CPU"}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_device(bad, "--device-a"), Contains("--device-a") && Contains("not a device"));
  }
  const BenchOptions o = parse_args({"--a", "x", "--b", "y", "--device-b", "cuda:0"});
  CHECK(o.device_a.type == PLLM_DEVICE_CPU);
  CHECK(o.device_b.type == PLLM_DEVICE_CUDA);

  // A device no machine here has: refused before any plugin is loaded, whatever the build.
  const auto r = run_command(kBench + kPluginDirs + kTiny + " --a attention_cpu --b attention_cuda --device-b cuda:99");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("--device-b cuda:99"));
#ifdef PAGEDLLM_ATTN_BENCH_CUDA
  const std::string no_device = pagedllm::testing::cuda_device_unavailable_reason();
  if (!no_device.empty()) {
    // This machine: CUDA's own reason (no driver, no device), for cuda:0 too.
    const auto r0 = run_command(kBench + kPluginDirs + kTiny + " --a attention_cpu --b attention_cuda --device-b cuda:0");
    INFO(r0.out << r0.err);
    CHECK(r0.exit_code == 2);
    CHECK_THAT(r0.err, Contains("--device-b cuda:0: no usable CUDA device") && Contains(no_device));
  } else {
    CHECK_THAT(r.err, Contains("no such device"));
  }
#else
  CHECK_THAT(r.err, Contains("built without CUDA"));
#endif
}
