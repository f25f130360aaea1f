// pagedllm-bench: replays a workload against a running OpenAI-compatible
// server (streamed /v1/completions with exact prompt and output lengths) and
// reports throughput, TTFT, inter-token and end-to-end latency; writes JSON
// and PNG plots. docs/server.md "pagedllm-bench" has the options.

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "tools/bench/bench_stats.h"
#include "tools/bench/workload.h"

namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using nlohmann::json;
using namespace pagedllm::bench;

constexpr const char* kUsage = R"(Usage: pagedllm-bench [options]

Replays a workload against a running pagedllm (or any OpenAI-compatible)
server: streamed /v1/completions requests with prompts of exact token lengths
(token ids drawn one by one from the server's /tokenize of a built-in text, or
windows of a text file's tokens; optionally after a prefix every request shares)
and exact output lengths (ignore_eos). Tokens are timed by the chunks that bring
them: chunks with text, or with token ids (return_token_ids, vLLM's field, which
pagedllm serves too, is asked for: a token with no text of its own, such as part
of a character, arrives only so). Prints throughput and latency; writes JSON and
plots. Works with pagedllm, vLLM and llama.cpp's llama-server.

Options:
  --url URL               the server (default http://127.0.0.1:8000)
  --num-requests N        requests to send (default 100)
  --input-len N|MIN:MAX   prompt tokens, fixed or uniform in [MIN, MAX] (default 128)
  --shared-prefix-len N   every prompt starts with the same N tokens (one long system
                          prompt: what a prefix cache serves), then --input-len tokens
                          of its own (default 0)
  --output-len N|MIN:MAX  output tokens, fixed or uniform (default 128)
  --request-rate R        Poisson arrivals at R requests/s (default: all at once)
  --concurrency C         at most C requests in flight (default: no limit)
  --seed S                workload seed (default 0)
  --prompt-file FILE      each prompt is a window of FILE's tokens at a random offset
                          (the text read in order, e.g. source code: what speculative
                          decoding sees in use), not tokens drawn one by one
  --temperature T         sampling temperature (default 0: greedy)
  --model NAME            model name to send (default: the server's /v1/models)
  --api-key KEY           sent as "Authorization: Bearer KEY"
  --timeout S             seconds a request may take (default 600)
  --json FILE             write the configuration, summary and every request's timings
  --plot-dir DIR          write PNG plots there (with the project's Python, .venv;
                          PAGEDLLM_PYTHON names another with matplotlib)
  --help
)";

// A text whose tokens make up the prompts.
constexpr const char* kCorpus =
    "The quick brown fox jumps over the lazy dog. Serving large language models efficiently requires careful "
    "management of the key-value cache: memory is split into fixed-size blocks, sequences map their tokens to "
    "blocks through a block table, and a scheduler batches prefill and decode work under a token budget. "
    "When memory runs short, requests are preempted and later resumed by recomputation or by swapping their "
    "blocks to host memory. Prefix caching lets requests that share a prompt prefix reuse blocks that were "
    "already computed. Speculative decoding proposes several draft tokens with a small head and verifies them "
    "in one forward pass of the target model, accepting a prefix of them without changing the output "
    "distribution. Metrics such as time to first token, inter-token latency and throughput describe how a "
    "server behaves under load. 0123456789 !?;:,.()[]{} <html> def fib(n): return n if n < 2 else fib(n-1)";

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "8000";
  WorkloadSpec workload;
  std::optional<int> concurrency;
  double temperature = 0;
  std::optional<std::string> model;
  std::optional<std::string> api_key;
  double timeout_s = 600;
  std::optional<std::string> json_path;
  std::optional<std::string> plot_dir;
  std::optional<std::string> prompt_file;
  std::optional<std::string> prompt_text;  // prompt_file's contents
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string read_prompt_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("--prompt-file: cannot read '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().empty()) throw UsageError(fmt::format("--prompt-file: '{}' is empty", path));
  return text.str();
}

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", flag));
    const std::string value = argv[++i];
    auto number = [&](double min) {
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0' || !(v >= min)) {
        throw UsageError(fmt::format("{} must be a number >= {}, got '{}'", flag, min, value));
      }
      return v;
    };
    if (flag == "--url") {
      std::string rest = value;
      if (rest.starts_with("http://")) rest = rest.substr(7);
      if (rest.starts_with("https://")) throw UsageError("https is not supported; use http://");
      rest = rest.substr(0, rest.find('/'));
      const std::size_t colon = rest.rfind(':');
      o.host = colon == std::string::npos ? rest : rest.substr(0, colon);
      o.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
      if (o.host.starts_with('[') && o.host.ends_with(']')) o.host = o.host.substr(1, o.host.size() - 2);
    } else if (flag == "--num-requests") {
      o.workload.num_requests = static_cast<int>(number(1));
    } else if (flag == "--input-len" || flag == "--output-len") {
      try {
        (flag == "--input-len" ? o.workload.input_len : o.workload.output_len) = LengthRange::parse(value);
      } catch (const std::invalid_argument& e) {
        throw UsageError(fmt::format("{}: {}", flag, e.what()));
      }
    } else if (flag == "--shared-prefix-len") {
      o.workload.shared_prefix_len = static_cast<int>(number(0));
    } else if (flag == "--request-rate") {
      if (value != "inf") o.workload.request_rate = number(1e-9);
    } else if (flag == "--concurrency") {
      o.concurrency = static_cast<int>(number(1));
    } else if (flag == "--seed") {
      o.workload.seed = static_cast<std::uint64_t>(number(0));
    } else if (flag == "--temperature") {
      o.temperature = number(0);
    } else if (flag == "--model") {
      o.model = value;
    } else if (flag == "--api-key") {
      o.api_key = value;
    } else if (flag == "--timeout") {
      o.timeout_s = number(0.001);
    } else if (flag == "--json") {
      o.json_path = value;
    } else if (flag == "--plot-dir") {
      o.plot_dir = value;
    } else if (flag == "--prompt-file") {
      o.prompt_file = value;
      o.prompt_text = read_prompt_file(value);
      o.workload.contiguous_prompts = true;
    } else {
      throw UsageError(fmt::format("unknown option '{}'", flag));
    }
  }
  return o;
}

std::string view(beast::string_view text) { return {text.data(), text.size()}; }

http::request<http::string_body> make_request(const Options& o, http::verb method, const std::string& target,
                                              const std::string& body) {
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, o.host + ":" + o.port);
  req.set(http::field::user_agent, "pagedllm-bench");
  if (o.api_key) req.set(http::field::authorization, "Bearer " + *o.api_key);
  if (method == http::verb::post) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
  }
  req.keep_alive(false);
  return req;
}

// A blocking call for the setup requests.
json call(const Options& o, const tcp::resolver::results_type& endpoints, http::verb method, const std::string& target,
          const json& body = nullptr) {
  net::io_context io;
  beast::tcp_stream stream(io);
  stream.expires_after(std::chrono::seconds(30));
  stream.connect(endpoints);
  http::write(stream, make_request(o, method, target, body.is_null() ? "" : body.dump()));
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  http::read(stream, buffer, response);
  if (response.result_int() != 200) {
    throw std::runtime_error(fmt::format("{} {} -> {}: {}", view(http::to_string(method)), target,
                                         response.result_int(), response.body()));
  }
  return json::parse(response.body());
}

// Whether a streamed choice brings generated tokens. Its text alone is not enough: a token the tokenizer cannot
// decode on its own (part of a UTF-8 character, or an id outside the tokenizer's vocabulary, as in the peers
// benchmark's random model) comes with empty text. pagedllm then sends no chunk unless return_token_ids is asked
// (then its token_ids say it arrived); vLLM and llama-server send a chunk with empty text for each such token,
// which is a token as long as no finish_reason marks it as the closing chunk llama-server adds after the last one.
bool carries_token(const json& choice) {
  if (!choice.value("text", std::string()).empty()) return true;
  const auto ids = choice.find("token_ids");
  if (ids != choice.end() && ids->is_array() && !ids->empty()) return true;
  const auto finish = choice.find("finish_reason");
  return choice.contains("text") && (finish == choice.end() || finish->is_null());
}

// One streamed request: times the first chunk with a token (text, or token ids
// where the server returns them), the gaps between such chunks, and [DONE].
class StreamedRequest : public std::enable_shared_from_this<StreamedRequest> {
 public:
  StreamedRequest(net::io_context& io, const tcp::resolver::results_type& endpoints,
                  http::request<http::string_body> request, RequestRecord& record, double timeout_s,
                  std::function<void()> done)
      : stream_(io), endpoints_(endpoints), request_(std::move(request)), record_(record), done_(std::move(done)),
        timeout_(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s))) {
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
  }

  void start() {
    sent_ = Clock::now();
    stream_.expires_after(timeout_);
    stream_.async_connect(endpoints_, [self = shared_from_this()](beast::error_code ec, const tcp::endpoint&) {
      if (ec) return self->finish("connect: " + ec.message());
      http::async_write(self->stream_, self->request_, [self](beast::error_code write_ec, std::size_t) {
        if (write_ec) return self->finish("write: " + write_ec.message());
        http::async_read_header(self->stream_, self->buffer_, self->parser_,
                                [self](beast::error_code read_ec, std::size_t) { self->on_header(read_ec); });
      });
    });
  }

 private:
  void on_header(beast::error_code ec) {
    if (ec) return finish("read: " + ec.message());
    read();
  }

  void read() {
    if (parser_.is_done()) {
      return finish(status_error().empty() && !done_seen_ ? "the stream ended without [DONE]" : status_error());
    }
    http::async_read_some(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec && ec != http::error::end_of_stream) return self->finish("read: " + ec.message());
      if (self->parser_.get().result_int() == 200) self->consume(Clock::now());
      if (self->finished_) return;
      if (ec) return self->finish(self->status_error().empty() ? "the stream ended without [DONE]" : self->status_error());
      self->read();
    });
  }

  std::string status_error() const {
    const auto& response = parser_.get();
    if (response.result_int() == 200) return record_.error;
    return fmt::format("HTTP {}: {}", response.result_int(), response.body().substr(0, 300));
  }

  void consume(Clock::time_point now) {
    const std::string& body = parser_.get().body();
    for (std::size_t end; (end = body.find("\n\n", consumed_)) != std::string::npos; consumed_ = end + 2) {
      const std::string event = body.substr(consumed_, end - consumed_);
      if (!event.starts_with("data: ")) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done_seen_ = true;
        return finish(record_.error);
      }
      const json chunk = json::parse(payload, nullptr, false);
      if (chunk.is_discarded()) {
        record_.error = "a chunk is not JSON: " + payload.substr(0, 200);
        continue;
      }
      if (chunk.contains("error")) record_.error = chunk["error"].dump();
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        record_.output_tokens = chunk["usage"].value("completion_tokens", 0);
      }
      const json& choices = chunk.value("choices", json::array());
      if (choices.empty() || !carries_token(choices[0])) continue;
      const double since = std::chrono::duration<double>(now - (first_ ? sent_ : last_)).count();
      if (first_) {
        record_.ttft_s = since;
        first_ = false;
      } else {
        record_.itl_s.push_back(since);
      }
      last_ = now;
    }
  }

  void finish(std::string error) {
    if (finished_) return;
    finished_ = true;
    record_.e2e_s = std::chrono::duration<double>(Clock::now() - sent_).count();
    record_.error = std::move(error);
    record_.success = record_.error.empty() && done_seen_;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    done_();
  }

  beast::tcp_stream stream_;
  const tcp::resolver::results_type& endpoints_;
  http::request<http::string_body> request_;
  RequestRecord& record_;
  std::function<void()> done_;
  Clock::duration timeout_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  std::size_t consumed_ = 0;
  Clock::time_point sent_, last_;
  bool first_ = true;
  bool done_seen_ = false;
  bool finished_ = false;
};

// The token ids of `text` from the server's /tokenize: vLLM's and pagedllm's
// request ({"prompt", "add_special_tokens"}), then llama-server's ({"content",
// "add_special"}), which answers the first with no tokens.
std::vector<std::int32_t> tokenize(const Options& o, const tcp::resolver::results_type& endpoints,
                                   const std::string& text) {
  const json openai_style = call(o, endpoints, http::verb::post, "/tokenize",
                                 {{"prompt", text}, {"add_special_tokens", false}});
  auto tokens = openai_style.value("tokens", std::vector<std::int32_t>());
  if (!tokens.empty()) return tokens;
  const json llama_server_style =
      call(o, endpoints, http::verb::post, "/tokenize", {{"content", text}, {"add_special", false}});
  tokens = llama_server_style.value("tokens", std::vector<std::int32_t>());
  if (tokens.empty()) {
    throw std::runtime_error(fmt::format("/tokenize returned no tokens for the prompt text (answers: {} / {})",
                                         openai_style.dump().substr(0, 200),
                                         llama_server_style.dump().substr(0, 200)));
  }
  return tokens;
}

int run(const Options& o) {
  net::io_context io;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(o.host, o.port);

  const std::string model = o.model ? *o.model : call(o, endpoints, http::verb::get, "/v1/models")["data"][0]["id"].get<std::string>();
  const auto pool = tokenize(o, endpoints, o.prompt_text ? *o.prompt_text : std::string(kCorpus));
  const std::vector<PlannedRequest> plan = make_workload(o.workload, pool);
  fmt::print("pagedllm-bench: {} requests to {} at {}:{}, input {}{} tokens, output {} tokens, rate {}, "
             "concurrency {}\n",
             plan.size(), model, o.host, o.port,
             o.workload.shared_prefix_len > 0 ? fmt::format("{} shared + ", o.workload.shared_prefix_len) : "",
             o.workload.input_len.str(), o.workload.output_len.str(),
             o.workload.request_rate ? fmt::format("{}/s (Poisson)", *o.workload.request_rate) : "all at once",
             o.concurrency ? std::to_string(*o.concurrency) : "unlimited");

  std::vector<RequestRecord> records(plan.size());
  std::deque<std::size_t> ready;
  int in_flight = 0;
  std::size_t finished = 0;
  const auto run_start = Clock::now();
  Clock::time_point last_finish = run_start;
  std::function<void()> pump = [&] {
    while (!ready.empty() && (!o.concurrency || in_flight < *o.concurrency)) {
      const std::size_t i = ready.front();
      ready.pop_front();
      ++in_flight;
      const PlannedRequest& p = plan[i];
      RequestRecord& record = records[i];
      record.input_tokens = static_cast<int>(p.prompt.size());
      record.max_tokens = p.max_tokens;
      record.start_s = std::chrono::duration<double>(Clock::now() - run_start).count();
      const json body = {{"model", model},          {"prompt", p.prompt},  {"max_tokens", p.max_tokens},
                         {"temperature", o.temperature}, {"ignore_eos", true}, {"stream", true},
                         {"stream_options", {{"include_usage", true}}}, {"return_token_ids", true}};
      std::make_shared<StreamedRequest>(io, endpoints, make_request(o, http::verb::post, "/v1/completions", body.dump()),
                                        record, o.timeout_s, [&] {
                                          --in_flight;
                                          ++finished;
                                          last_finish = Clock::now();
                                          net::post(io, pump);
                                        })
          ->start();
    }
  };
  std::vector<std::unique_ptr<net::steady_timer>> arrivals;
  for (std::size_t i = 0; i < plan.size(); ++i) {
    if (!o.workload.request_rate) {
      ready.push_back(i);
      continue;
    }
    auto timer = std::make_unique<net::steady_timer>(
        io, run_start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(plan[i].arrival_s)));
    timer->async_wait([&, i](beast::error_code) {
      ready.push_back(i);
      pump();
    });
    arrivals.push_back(std::move(timer));
  }
  pump();
  io.run();

  const Summary summary = summarize(records, std::chrono::duration<double>(last_finish - run_start).count());
  fmt::print("{}", format_summary(summary));
  for (const RequestRecord& r : records) {
    if (!r.success) {
      fmt::print(stderr, "pagedllm-bench: first failure: {}\n", r.error);
      break;
    }
  }

  if (o.json_path) {
    json requests = json::array();
    for (const RequestRecord& r : records) requests.push_back(to_json(r));
    const json result = {{"config",
                          {{"url", fmt::format("http://{}:{}", o.host, o.port)},
                           {"model", model},
                           {"num_requests", o.workload.num_requests},
                           {"input_len", o.workload.input_len.str()},
                           {"shared_prefix_len", o.workload.shared_prefix_len},
                           {"output_len", o.workload.output_len.str()},
                           {"request_rate", o.workload.request_rate ? json(*o.workload.request_rate) : json("inf")},
                           {"concurrency", o.concurrency ? json(*o.concurrency) : json(nullptr)},
                           {"seed", o.workload.seed},
                           {"prompt_file", o.prompt_file ? json(*o.prompt_file) : json(nullptr)},
                           {"temperature", o.temperature}}},
                         {"summary", to_json(summary)},
                         {"requests", std::move(requests)}};
    std::ofstream out(*o.json_path);
    out << result.dump(1) << "\n";
    if (!out) throw std::runtime_error("cannot write " + *o.json_path);
    fmt::print("pagedllm-bench: wrote {}\n", *o.json_path);
  }
  if (o.plot_dir) {
    if (!o.json_path) throw UsageError("--plot-dir needs --json (the plots are drawn from it)");
    const char* python = std::getenv("PAGEDLLM_PYTHON");
    const std::string command = fmt::format("'{}' '{}' '{}' '{}'", python ? python : PAGEDLLM_BENCH_PYTHON,
                                            PAGEDLLM_BENCH_PLOT_SCRIPT, *o.json_path, *o.plot_dir);
    std::fflush(stdout);
    if (std::system(command.c_str()) != 0) throw std::runtime_error("plotting failed: " + command);
  }
  return summary.failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_options(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "pagedllm-bench: %s\n\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pagedllm-bench: error: %s\n", e.what());
    return 1;
  }
}
