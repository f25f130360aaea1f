#include "core/server/prometheus_metrics.h"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace pagedllm::server {

namespace {

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (const char c : value) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double value) {
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (std::isnan(value)) return "NaN";
  return fmt::format("{}", value);
}

class Writer {
 public:
  explicit Writer(const std::string& model_name) : label_(fmt::format("model_name=\"{}\"", escape_label(model_name))) {}

  void family(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const char* name, double value, const std::string& extra_labels = {}) {
    out_ += fmt::format("{}{{{}{}}} {}\n", name, extra_labels, label_, number(value));
  }
  void gauge(const char* name, const char* help, double value) {
    family(name, "gauge", help);
    sample(name, value);
  }
  void counter(const char* name, const char* help, std::int64_t value) {
    family(name, "counter", help);
    sample(name, static_cast<double>(value));
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    family(name, "histogram", help);
    const std::string bucket = fmt::format("{}_bucket", name);
    for (std::size_t i = 0; i < h.upper_bounds().size(); ++i) {
      sample(bucket.c_str(), static_cast<double>(h.cumulative_counts()[i]),
             fmt::format("le=\"{}\",", number(h.upper_bounds()[i])));
    }
    sample(bucket.c_str(), static_cast<double>(h.count()), "le=\"+Inf\",");
    sample(fmt::format("{}_sum", name).c_str(), h.sum());
    sample(fmt::format("{}_count", name).c_str(), static_cast<double>(h.count()));
  }

  std::string take() { return std::move(out_); }

 private:
  std::string label_;
  std::string out_;
};

}  // namespace

std::string render_prometheus(const EngineMetrics& m, const std::string& model_name) {
  Writer w(model_name);
  const SchedulerStats& s = m.scheduler;
  w.gauge("pagedllm:num_requests_running", "Requests in the running batch.", s.num_running);
  w.gauge("pagedllm:num_requests_waiting", "Requests waiting to be scheduled.", s.num_waiting);
  w.gauge("pagedllm:num_requests_swapped", "Requests whose KV blocks are swapped out to host memory.", s.num_swapped);
  w.gauge("pagedllm:kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = all).", s.kv.usage());
  w.gauge("pagedllm:kv_cache_blocks_in_use", "KV cache blocks owned by requests (0 when idle).",
          s.kv.num_device_blocks - s.kv.num_free_device_blocks);
  w.gauge("pagedllm:kv_cache_num_blocks", "KV cache blocks on the device.", s.kv.num_device_blocks);
  w.counter("pagedllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.", s.kv.prefix_cache_queried_tokens);
  w.counter("pagedllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.", s.kv.prefix_cache_hit_tokens);
  w.counter("pagedllm:prompt_tokens_total", "Prompt tokens of requests that started.", m.prompt_tokens_total);
  w.counter("pagedllm:generation_tokens_total", "Generated tokens.", m.generation_tokens_total);
  w.counter("pagedllm:num_preemptions_total", "Preemptions of running requests (recompute and swap).",
            s.num_preemptions());

  w.family("pagedllm:request_success_total", "counter", "Finished requests by finish reason.");
  w.sample("pagedllm:request_success_total", static_cast<double>(m.requests_finished_stop), "finished_reason=\"stop\",");
  w.sample("pagedllm:request_success_total", static_cast<double>(m.requests_finished_length),
           "finished_reason=\"length\",");
  w.sample("pagedllm:request_success_total", static_cast<double>(m.requests_aborted), "finished_reason=\"abort\",");

  w.histogram("pagedllm:time_to_first_token_seconds", "Time from arrival to the first generated token.",
              m.time_to_first_token);
  w.histogram("pagedllm:inter_token_latency_seconds", "Time between consecutive tokens of a sequence.",
              m.inter_token_latency);
  w.histogram("pagedllm:e2e_request_latency_seconds", "Time from arrival to finish.", m.e2e_request_latency);
  w.histogram("pagedllm:request_queue_time_seconds", "Time from arrival to first being scheduled.", m.queue_time);

  if (m.speculative_decoding_enabled) {
    w.counter("pagedllm:spec_decode_num_draft_tokens_total", "Draft tokens proposed by the speculator.",
              m.spec_decode_draft_tokens);
    w.counter("pagedllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted by verification.",
              m.spec_decode_accepted_tokens);
    w.counter("pagedllm:spec_decode_num_drafts_total",
              "Verifications: one per sequence and step that had drafts. Mean acceptance length = "
              "1 + accepted tokens / drafts.",
              m.spec_decode_num_drafts);
    w.counter("pagedllm:spec_decode_disabled_by_batch_size_total",
              "Requests that arrived while speculative.disable_by_batch_size or more were unfinished, and "
              "so decode without drafts.",
              m.spec_decode_disabled_by_batch_size);
    w.family("pagedllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
             "Verifications that accepted the draft at this position (0-based).");
    for (std::size_t i = 0; i < m.spec_decode_accepted_per_position.size(); ++i) {
      w.sample("pagedllm:spec_decode_num_accepted_tokens_per_pos_total",
               static_cast<double>(m.spec_decode_accepted_per_position[i]), fmt::format("position=\"{}\",", i));
    }
  }
  return w.take();
}

}  // namespace pagedllm::server
