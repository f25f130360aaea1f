// pagedllm-attn-bench: the attention A/B harness. Loads two attention plugins,
// runs identical randomized paged batches through both (the cache filled
// through each backend's own write path), and reports per case the max
// abs/rel difference of their outputs, the median time per run() call and
// the effective KV bandwidth. A case one side refuses (PLLM_ERROR_UNSUPPORTED:
// an f16 case on an f32-only backend) is reported as unsupported and the rest
// run. docs/attention-ab.md.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <iostream>
#include <limits>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/plugin/plugin_registry.h"
#include "common/dtype_name.h"
#include "tools/attn_bench/ab_backend.h"
#include "tools/attn_bench/bench_cases.h"
#include "tools/attn_bench/device_side.h"
#include "tools/attn_bench/output_diff.h"
#include "tools/attn_bench/paged_case.h"

namespace {

using namespace pagedllm::attn_bench;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// FNV-1a of the case name mixed with the seed: a case gets the same inputs
// whatever else runs with it.
uint64_t case_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// MemAvailable from /proc/meminfo in bytes, 0 when unknown.
uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return 0;
}

struct SideTiming {
  std::vector<double> run_s, plan_s;
  double run_median() const { return median(run_s); }
  double plan_median() const { return median(plan_s); }
  double run_min() const { return run_s.empty() ? 0 : *std::min_element(run_s.begin(), run_s.end()); }
};

struct CaseResult {
  CaseSpec spec;
  int32_t num_seqs = 0, num_decode_seqs = 0, num_tokens = 0;
  int64_t cached_tokens = 0;
  uint64_t kv_bytes = 0, cache_bytes_a = 0, cache_bytes_b = 0;
  OutputDiff step_diff, fill_diff;
  double tolerance = 0;
  SideTiming a, b;
  // Where step_diff.worst is: token row, its sequence, head, dim.
  int64_t worst_token = -1, worst_seq = -1, worst_head = -1, worst_dim = -1;
  // Why a side refused the case (PLLM_ERROR_UNSUPPORTED); empty when it ran.
  std::string unsupported;
  bool ran() const { return unsupported.empty(); }
  bool pass() const { return ran() && step_diff.max_abs <= tolerance && fill_diff.max_abs <= tolerance; }
  bool failed() const { return ran() && !pass(); }
};

// One side of the A/B: the plugin and where it runs.
struct Side {
  AbBackend* backend;
  DeviceSide* device;
};

// Plans and runs `in` on both sides and folds the outputs into `diff`.
// Outputs start as NaN (DeviceSide::stage), so an element a backend leaves
// unwritten shows up.
void run_compared(Side (&sides)[2], StepInputs& in, const PagedCase& pc, OutputDiff& diff) {
  const CaseSpec& c = pc.spec();
  const pllm_batch batch = in.batch.view();
  std::vector<float> outputs[2];
  for (int s = 0; s < 2; ++s) {
    const pllm_attention_layer_args args = sides[s].device->stage(in, c, pc.scale());
    sides[s].backend->plan(batch, c);
    sides[s].backend->run(args, c);
    outputs[s] = sides[s].device->output();
  }
  diff.add(outputs[0], outputs[1]);
}

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

// Refuses a case whose KV caches, inputs and outputs would not fit in the
// host memory available now, before anything is generated.
void check_memory(const CaseSpec& c, AbBackend& a, AbBackend& b) {
  const pllm_kv_cache_spec spec = PagedCase::cache_spec(c);
  const auto blocks = uint64_t(PagedCase::max_device_blocks(c));
  // A CUDA side's cache is device memory: its plugin reports OUT_OF_MEMORY itself.
  auto host_cache = [&](AbBackend& side) {
    return side.device().type == PLLM_DEVICE_CPU ? side.bytes_per_block(spec, c) * blocks : 0;
  };
  const uint64_t cache_a = host_cache(a), cache_b = host_cache(b);
  const uint64_t host = PagedCase::max_host_bytes(c);
  const uint64_t need = cache_a + cache_b + host;
  const uint64_t avail = available_memory();
  if (avail > 0 && double(need) > 0.9 * double(avail)) {
    throw BenchError(fmt::format(
        "case {}: needs about {} of host memory (KV caches: a {}, b {}; inputs and outputs {}) but only {} is "
        "available (MemAvailable); lower --context, --batch or --kv-heads",
        c.name(), gib(double(need)), gib(double(cache_a)), gib(double(cache_b)), gib(double(host)),
        gib(double(avail))));
  }
}

CaseResult run_case(const BenchOptions& o, const CaseSpec& c, std::size_t index, std::size_t total, Side (&sides)[2]) {
  AbBackend& a = *sides[0].backend;
  AbBackend& b = *sides[1].backend;
  const std::string tag = fmt::format("[{}/{}] {}", index + 1, total, c.name());
  CaseResult r;
  r.spec = c;
  r.tolerance = o.tolerance.value_or(default_tolerance(c.dtype));

  a.create();
  b.create();
  check_memory(c, a, b);
  PagedCase pc(c, case_seed(o.seed, c.name()));
  r.num_seqs = pc.step().batch.num_seqs();
  r.num_decode_seqs = pc.step().batch.num_decode_seqs;
  r.num_tokens = pc.step().batch.num_tokens();
  r.cached_tokens = pc.cached_tokens();
  r.kv_bytes = pc.kv_bytes_read();
  const pllm_kv_cache_spec spec = pc.cache_spec();
  r.cache_bytes_a = a.bytes_per_block(spec, c) * uint64_t(pc.num_device_blocks());
  r.cache_bytes_b = b.bytes_per_block(spec, c) * uint64_t(pc.num_device_blocks());
  a.allocate_cache(spec, pc.num_device_blocks(), c);
  b.allocate_cache(spec, pc.num_device_blocks(), c);

  // Fill both caches through run(), comparing the fill outputs too.
  const auto started = Clock::now();
  auto last_report = started;
  for (int32_t i = 0; i < pc.num_fill_steps(); ++i) {
    StepInputs in = pc.fill_step(i);
    run_compared(sides, in, pc, r.fill_diff);
    if (seconds_since(last_report) > 2.0) {
      std::fprintf(stderr, "%s: filling the KV caches, batch %d/%d (%.0f s)\n", tag.c_str(), i + 1,
                   pc.num_fill_steps(), seconds_since(started));
      last_report = Clock::now();
    }
  }

  // The step: one compared call each, then warm-up, then timed calls
  // alternating which side goes first, so drift hits both alike.
  StepInputs& step = pc.step();
  run_compared(sides, step, pc, r.step_diff);
  if (r.step_diff.worst >= 0) {
    const int64_t row = int64_t(c.num_heads()) * c.head_dim;
    r.worst_token = r.step_diff.worst / row;
    r.worst_head = (r.step_diff.worst / c.head_dim) % c.num_heads();
    r.worst_dim = r.step_diff.worst % c.head_dim;
    const auto& qsl = step.batch.query_start_loc;
    r.worst_seq = int64_t(std::upper_bound(qsl.begin(), qsl.end(), int32_t(r.worst_token)) - qsl.begin()) - 1;
  }
  // Timing: a device side's run() is asynchronous, so it is timed with
  // events on its stream; plan() queues the metadata upload the first run()
  // after it waits for, which a model amortises over all its layers, so on a
  // device one untimed run() follows plan() and the next one is timed.
  const pllm_batch batch = step.batch.view();
  pllm_attention_layer_args args[2];
  SideTiming* timings[2] = {&r.a, &r.b};
  for (int s = 0; s < 2; ++s) args[s] = sides[s].device->stage(step, c, pc.scale());
  for (int32_t w = 0; w < o.warmup; ++w) {
    for (int s = 0; s < 2; ++s) {
      sides[s].backend->plan(batch, c);
      sides[s].backend->run(args[s], c);
      sides[s].device->synchronize();
    }
  }
  const int32_t reps = o.repetitions();
  last_report = Clock::now();
  for (int32_t rep = 0; rep < reps; ++rep) {
    for (int k = 0; k < 2; ++k) {
      const int s = (rep + k) % 2;
      Side& side = sides[s];
      const auto t0 = Clock::now();
      side.backend->plan(batch, c);
      timings[s]->plan_s.push_back(seconds_since(t0));
      if (side.device->device().type != PLLM_DEVICE_CPU) {
        side.backend->run(args[s], c);
        side.device->synchronize();
      }
      timings[s]->run_s.push_back(side.device->time_run([&] { side.backend->run(args[s], c); }));
    }
    if (seconds_since(last_report) > 2.0) {
      std::fprintf(stderr, "%s: timing, repetition %d/%d\n", tag.c_str(), rep + 1, reps);
      last_report = Clock::now();
    }
  }
  a.destroy();
  b.destroy();
  return r;
}

double bandwidth_gbs(uint64_t bytes, double seconds) { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }

// " 61% of copy" for a device side, empty on the CPU (no copy bandwidth measured).
std::string fraction_of_copy(double gbs, double copy_gbs) {
  return copy_gbs > 0 ? fmt::format(" {:>3.0f}% of copy", 100.0 * gbs / copy_gbs) : std::string();
}

void print_case(const CaseResult& r, std::size_t index, std::size_t total, const double (&copy_gbs)[2]) {
  if (!r.ran()) {
    fmt::print("[{:>2}/{}] {:<40} unsupported | {}\n", index + 1, total, r.spec.name(), r.unsupported);
    std::fflush(stdout);
    return;
  }
  const double ta = r.a.run_median(), tb = r.b.run_median();
  const double bw_a = bandwidth_gbs(r.kv_bytes, ta), bw_b = bandwidth_gbs(r.kv_bytes, tb);
  fmt::print("[{:>2}/{}] {:<40} {:>4} seqs {:>5} tok  KV {:>8.1f} MiB | a {:>9.3f} ms {:>7.2f} GB/s{} | b {:>9.3f} ms "
             "{:>7.2f} GB/s{} | b speed-up {:>6.2f}x | max abs {:.2e} rel {:.2e} | {}\n",
             index + 1, total, r.spec.name(), r.num_seqs, r.num_tokens, double(r.kv_bytes) / (1024.0 * 1024.0),
             ta * 1e3, bw_a, fraction_of_copy(bw_a, copy_gbs[0]), tb * 1e3, bw_b, fraction_of_copy(bw_b, copy_gbs[1]),
             tb > 0 ? ta / tb : 0.0, std::max(r.step_diff.max_abs, r.fill_diff.max_abs), r.step_diff.max_rel,
             r.pass() ? "ok" : "FAIL");
  std::fflush(stdout);
}

std::string failure_detail(const CaseResult& r) {
  if (r.step_diff.max_abs > r.tolerance) {
    return fmt::format("FAIL {}: max abs diff {:.3e} > tolerance {:.1e} at token {} (sequence {}{}), head {}, dim {}: "
                       "a = {:.6g}, b = {:.6g}",
                       r.spec.name(), r.step_diff.max_abs, r.tolerance, r.worst_token, r.worst_seq,
                       r.worst_seq < r.num_decode_seqs ? ", decode" : ", prefill chunk", r.worst_head, r.worst_dim,
                       r.step_diff.worst_a, r.step_diff.worst_b);
  }
  return fmt::format("FAIL {}: the cache fill's outputs differ: max abs diff {:.3e} > tolerance {:.1e} "
                     "(a = {:.6g}, b = {:.6g}); the write path or short contexts disagree",
                     r.spec.name(), r.fill_diff.max_abs, r.tolerance, r.fill_diff.worst_a, r.fill_diff.worst_b);
}

json side_json(const AbBackend& side, double copy_gbs) {
  return json{{"plugin", side.spec().plugin},
              {"device", device_label(side.device())},
              {"copy_bandwidth_gbs", copy_gbs},
              {"options", json::parse(side.spec().options_json)},
              {"name", side.library().name()},
              {"version", side.library().version()},
              {"file", side.library().file().string()}};
}

json timing_json(const SideTiming& t, uint64_t kv_bytes, double copy_gbs) {
  const double gbs = bandwidth_gbs(kv_bytes, t.run_median());
  return json{{"time_ms_median", t.run_median() * 1e3},
              {"kv_bandwidth_fraction_of_copy", copy_gbs > 0 ? json(gbs / copy_gbs) : json(nullptr)},
              {"time_ms_min", t.run_min() * 1e3},
              {"plan_ms_median", t.plan_median() * 1e3},
              {"kv_bandwidth_gbs", bandwidth_gbs(kv_bytes, t.run_median())},
              {"times_ms", [&] {
                 std::vector<double> ms;
                 for (double s : t.run_s) ms.push_back(s * 1e3);
                 return ms;
               }()}};
}

json case_json(const CaseResult& r, const double (&copy_gbs)[2]) {
  const CaseSpec& c = r.spec;
  auto finite = [](double x) { return std::isfinite(x) ? json(x) : json("inf"); };
  json j{{"name", c.name()},
         {"workload", workload_name(c.workload)},
         {"context", c.context},
         {"gqa", c.gqa},
         {"num_heads", c.num_heads()},
         {"num_kv_heads", c.num_kv_heads},
         {"head_dim", c.head_dim},
         {"block_size", c.block_size},
         {"dtype", pagedllm::plugins::dtype_name(c.dtype)},
         {"status", !r.ran() ? "unsupported" : r.pass() ? "pass" : "fail"}};
  if (!r.ran()) {
    j["unsupported"] = r.unsupported;
    return j;
  }
  j.update(json{{"num_seqs", r.num_seqs},
         {"num_decode_seqs", r.num_decode_seqs},
         {"num_tokens", r.num_tokens},
         {"cached_tokens", r.cached_tokens},
         {"kv_bytes", r.kv_bytes},
         {"cache_bytes", {{"a", r.cache_bytes_a}, {"b", r.cache_bytes_b}}},
         {"max_abs_diff", finite(r.step_diff.max_abs)},
         {"max_rel_diff", finite(r.step_diff.max_rel)},
         {"fill_max_abs_diff", finite(r.fill_diff.max_abs)},
         {"tolerance", r.tolerance},
         {"pass", r.pass()},
         {"a", timing_json(r.a, r.kv_bytes, copy_gbs[0])},
         {"b", timing_json(r.b, r.kv_bytes, copy_gbs[1])},
         {"speedup_b_over_a", r.b.run_median() > 0 ? r.a.run_median() / r.b.run_median() : 0.0}});
  if (r.worst_token >= 0) {
    j["worst"] = {{"token", r.worst_token}, {"seq", r.worst_seq}, {"head", r.worst_head}, {"dim", r.worst_dim},
                  {"a", r.step_diff.worst_a}, {"b", r.step_diff.worst_b}};
  }
  return j;
}

int run(const BenchOptions& o) {
  std::vector<std::filesystem::path> dirs = o.plugin_dirs;
  if (dirs.empty()) {
    for (auto& p : pagedllm::PluginRegistry::environment_search_paths()) dirs.push_back(std::move(p));
    for (auto& p : pagedllm::PluginRegistry::default_search_paths()) dirs.push_back(std::move(p));
  }
  pagedllm::PluginRegistry registry(dirs);
  // Devices first: a CUDA side on a machine without one is refused before any plugin loads.
  const std::unique_ptr<DeviceSide> device_a = make_device_side(o.device_a, "a");
  const std::unique_ptr<DeviceSide> device_b = make_device_side(o.device_b, "b");
  AbBackend a("a", o.a, o.device_a, registry);
  AbBackend b("b", o.b, o.device_b, registry);
  Side sides[2] = {{&a, device_a.get()}, {&b, device_b.get()}};
  const std::vector<CaseSpec> cases = o.cases();

  for (const Side& side : sides) {
    fmt::print("{}: {} {} ({}) on {}\n", side.backend->label(), side.backend->library().name(),
               side.backend->library().version(), side.backend->library().file().string(),
               side.device->description());
  }
  // Measured once per device side, before the cases, so the report can put
  // each kernel's KV bandwidth next to what the memory system delivers.
  double copy_gbs[2] = {0, 0};
  for (int s = 0; s < 2; ++s) {
    copy_gbs[s] = sides[s].device->copy_bandwidth_gbs();
    if (copy_gbs[s] > 0) {
      fmt::print("{}: device-to-device copy bandwidth {:.1f} GB/s (cudaMemcpy of 1 GiB, read + write bytes)\n",
                 sides[s].backend->label(), copy_gbs[s]);
    }
  }
  fmt::print("suite {}: {} cases, {} warm-up + {} timed run() calls per backend, seed {}, {} hardware threads; "
             "times are medians per run() call (one layer), KV bandwidth = KV bytes read / time\n",
             o.suite, cases.size(), o.warmup, o.repetitions(), o.seed, std::thread::hardware_concurrency());
  std::fflush(stdout);

  // Before any work: every case must fit in memory. A case a side refuses
  // (its sizing already says so) is set aside as unsupported.
  a.create();
  b.create();
  std::vector<std::string> refused(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    try {
      check_memory(cases[i], a, b);
    } catch (const CaseUnsupported& e) {
      refused[i] = e.what();
    }
  }

  std::vector<CaseResult> results;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    CaseResult r;
    r.spec = cases[i];
    r.unsupported = refused[i];
    if (r.ran()) {
      try {
        r = run_case(o, cases[i], i, cases.size(), sides);
      } catch (const CaseUnsupported& e) {
        a.destroy();
        b.destroy();
        r.unsupported = e.what();
      }
    }
    results.push_back(std::move(r));
    print_case(results.back(), i, cases.size(), copy_gbs);
  }

  int failed = 0, passed = 0;
  for (const CaseResult& r : results) {
    if (r.failed()) {
      ++failed;
      fmt::print("{}\n", failure_detail(r));
    }
    if (r.pass()) ++passed;
  }
  const int unsupported = int(results.size()) - failed - passed;
  fmt::print("{} cases: {} within tolerance, {} FAIL, {} unsupported\n", results.size(), passed, failed, unsupported);

  if (!o.json_path.empty()) {
    json j{{"tool", "pagedllm-attn-bench"},
           {"a", side_json(a, copy_gbs[0])},
           {"b", side_json(b, copy_gbs[1])},
           {"suite", o.suite},
           {"seed", o.seed},
           {"warmup", o.warmup},
           {"reps", o.repetitions()},
           {"hardware_threads", std::thread::hardware_concurrency()},
           {"passed", passed},
           {"failed", failed},
           {"unsupported", unsupported},
           {"cases", json::array()}};
    for (const CaseResult& r : results) j["cases"].push_back(case_json(r, copy_gbs));
    std::ofstream out(o.json_path);
    out << j.dump(2) << "\n";
    if (!out) throw BenchError(fmt::format("--json {}: cannot write the file", o.json_path));
  }
  if (failed) return 1;
  if (passed == 0) {
    // Nothing was compared: a run that proves nothing must not look like a pass.
    std::fprintf(stderr, "pagedllm-attn-bench: no case ran: every case was refused as unsupported (above)\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const BenchOptions o = parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::fputs(usage().c_str(), stdout);
      return 0;
    }
    return run(o);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "pagedllm-attn-bench: %s\n", e.what());
    return 2;
  } catch (const BenchError& e) {
    std::fprintf(stderr, "pagedllm-attn-bench: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "pagedllm-attn-bench: out of host memory; lower --context, --batch or --kv-heads\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedllm-attn-bench: %s\n", e.what());
    return 2;
  }
}
