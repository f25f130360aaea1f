#include "core/server/http_session.h"

#include <chrono>
#include <random>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/server/cors.h"
#include "core/server/openai_response.h"

namespace pagedllm::server {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// While generating, the watch read takes at most this much of a pipelined request.
constexpr std::size_t kWatchBytes = 4096;
// Closing after an error reply: unread request bytes are drained for a while
// so the client reads the reply instead of a connection reset.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr std::size_t kLingerBytes = 1u << 20;
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
const std::string kServerName = std::string("pagedllm/") + PAGEDLLM_VERSION;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

std::string response_id(ApiKind kind) {
  thread_local std::mt19937_64 random{std::random_device{}()};
  return fmt::format("{}-{:016x}{:016x}", kind == ApiKind::kChat ? "chatcmpl" : "cmpl", random(), random());
}

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct HttpSession::Exchange {
  std::uint64_t serial = 0;
  GenerationPlan plan;
  std::unique_ptr<ResponseBuilder> builder;  // refers to `plan`
  std::vector<RequestId> ids;                // submitted engine requests, by prompt
  std::size_t finished = 0;                  // prompts whose last output arrived
  bool failed = false;                       // an error reply or event was sent instead

  // --- Streaming ---
  bool chunked = true;  // HTTP/1.1; an HTTP/1.0 stream ends by closing
  std::unique_ptr<http::response<http::empty_body>> header;
  std::unique_ptr<http::response_serializer<http::empty_body>> serializer;
  std::string pending;  // events not yet handed to the socket
  std::string sending;  // the write in progress
  bool writing = false;
  bool complete = false;  // every event is in pending or sent: the terminator follows
};

HttpSession::HttpSession(tcp::socket&& socket, std::shared_ptr<ServerState> state)
    : state_(std::move(state)), stream_(std::move(socket)), executor_(stream_.get_executor()) {}

HttpSession::~HttpSession() { state_->remove_session(this); }

void HttpSession::start() {
  state_->add_session(this, weak_from_this());
  net::dispatch(executor_, beast::bind_front_handler(&HttpSession::read_header, shared_from_this()));
}

void HttpSession::shutdown() {
  net::post(executor_, [self = shared_from_this()] {
    self->shutting_down_ = true;
    if (self->idle_) self->close_now();
  });
}

void HttpSession::close() {
  net::post(executor_, [self = shared_from_this()] { self->close_now(); });
}

// ---------------------------------------------------------------------------
// Reading a request

void HttpSession::read_header() {
  if (closed_) return;
  if (shutting_down_ || state_->draining()) {
    close_now();
    return;
  }
  parser_.emplace();
  limit_request_parser(*parser_, state_->config());
  idle_ = buffer_.size() == 0;
  stream_.expires_after(seconds(state_->config().keep_alive_timeout_s));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
}

void HttpSession::on_header(beast::error_code ec) {
  idle_ = false;
  if (ec) {
    on_read_error(ec);
    return;
  }
  if (beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
    stream_.expires_after(seconds(state_->config().send_timeout_s));
    net::async_write(stream_, net::buffer(kContinue.data(), kContinue.size()),
                     [self = shared_from_this()](beast::error_code write_ec, std::size_t) {
                       if (write_ec) {
                         self->close_now();
                         return;
                       }
                       self->read_body();
                     });
    return;
  }
  read_body();
}

void HttpSession::read_body() {
  stream_.expires_after(seconds(state_->config().request_timeout_s));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_body(ec); });
}

void HttpSession::on_body(beast::error_code ec) {
  if (ec) {
    on_read_error(ec);
    return;
  }
  request_ = parser_->release();
  parser_.reset();
  handle_request();
}

void HttpSession::on_read_error(beast::error_code ec) {
  if (closed_) return;
  keep_alive_ = false;
  request_ = {};
  // A refused request (a body over the limit, one too slow) is answered with the CORS headers its Origin
  // gets, so that a page can read why. The fields read so far are in the parser's message even when the
  // header itself was refused (a Content-Length over the limit).
  if (parser_) {
    const auto origin = parser_->get()[http::field::origin];
    if (!origin.empty()) request_.set(http::field::origin, origin);
  }
  if (auto reply = read_error_reply(ec, state_->config())) {
    write_reply(std::move(*reply));
  } else {
    // The client left, timed out or closed between requests: nobody to answer.
    close_now();
  }
}

void HttpSession::handle_request() {
  keep_alive_ = request_.keep_alive() && !shutting_down_ && !state_->draining();
  std::string allow;
  try {
    if (auto preflight = preflight_reply(state_->config().cors, request_)) {
      write_reply(std::move(*preflight));
      return;
    }
    const RouteMatch match = route_request(request_, state_->config(), allow);
    if (match.route == Route::kCompletions || match.route == Route::kChatCompletions) {
      start_generation(match.route == Route::kChatCompletions ? ApiKind::kChat : ApiKind::kCompletion);
      return;
    }
    write_reply(answer(match.route, match.path, request_.body(), *state_));
  } catch (const ApiError& e) {
    HttpReply reply = error_reply(e);
    if (!allow.empty()) reply.headers.emplace_back("Allow", allow);
    write_reply(std::move(reply));
  } catch (const std::exception& e) {
    host_log().error("http: {} {}: {}", std::string(request_.method_string()), std::string(request_.target()), e.what());
    write_reply(error_reply(internal_error(fmt::format("Internal error: {}", e.what()))));
  }
}

// ---------------------------------------------------------------------------
// Answering

void HttpSession::write_reply(HttpReply reply) {
  if (closed_) return;
  if (state_->draining()) keep_alive_ = false;
  const unsigned version = request_.version() == 10 ? 10 : 11;
  auto response = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(reply.status), version);
  response->set(http::field::server, kServerName);
  response->set(http::field::content_type, reply.content_type);
  for (const auto& [name, value] : reply.headers) response->set(name, value);
  for (const auto& [name, value] : cors_headers(state_->config().cors, view(request_[http::field::origin]))) {
    response->set(name, value);
  }
  response->keep_alive(keep_alive_);
  response->body() = std::move(reply.body);
  response->prepare_payload();
  if (reply.status >= 500) {
    host_log().warn("http: {} {} -> {}", std::string(request_.method_string()), std::string(request_.target()),
                    reply.status);
  }
  stream_.expires_after(seconds(state_->config().send_timeout_s));
  http::async_write(stream_, *response,
                    [self = shared_from_this(), response](beast::error_code ec, std::size_t) {
                      self->on_reply_written(ec);
                    });
}

void HttpSession::on_reply_written(beast::error_code ec) {
  if (ec) {
    close_now();
    return;
  }
  end_exchange();
  next_request();
}

void HttpSession::next_request() {
  if (closed_) return;
  if (!keep_alive_) {
    // With the watch read pending the request was read whole: nothing to drain.
    if (watching_) {
      close_now();
    } else {
      close_gracefully();
    }
  } else if (watching_) {
    // The watch read must end before the next request can be read.
    resume_after_watch_ = true;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);
  } else {
    read_header();
  }
}

// ---------------------------------------------------------------------------
// Generation

void HttpSession::start_generation(ApiKind kind) {
  Engine& engine = state_->engine();
  GenerationPlan plan = parse_generation_request(kind, request_.body(), engine, state_->tool_call_parsing());
  if (state_->draining()) throw unavailable("The server is shutting down.", "shutting_down", std::chrono::seconds(1));
  const int count = static_cast<int>(plan.prompts.size());
  const int limit = state_->config().max_concurrent_requests;
  if (count > limit) throw invalid_request(fmt::format("At most {} prompts per request.", limit), "prompt");
  if (!state_->try_reserve(count)) {
    throw unavailable(fmt::format("The server is at its limit of {} concurrent requests; retry later.", limit),
                      "overloaded", std::chrono::seconds(1));
  }

  exchange_ = std::make_unique<Exchange>();
  Exchange& ex = *exchange_;
  ex.serial = ++last_serial_;
  ex.plan = std::move(plan);
  ex.builder = std::make_unique<ResponseBuilder>(ex.plan, engine.tokenizer(), response_id(kind), unix_now(),
                                                 *parse_reasoning_format(state_->config().reasoning_parser));
  state_->exchange_started();
  self_ = shared_from_this();

  for (std::size_t i = 0; i < ex.plan.prompts.size(); ++i) {
    // The engine thread: account for the request, then hand the output to
    // this connection's strand. It never waits on the connection.
    auto on_output = [state = state_, weak = weak_from_this(), serial = ex.serial, i](RequestOutput&& output) {
      if (output.finished) state->request_finished(output.request_id);
      state->gate().pass([&] {
        if (auto self = weak.lock()) {
          net::post(self->executor_, [self, serial, i, output = std::move(output)]() mutable {
            self->on_output(serial, i, std::move(output));
          });
        }
      });
    };
    try {
      const RequestId id = engine.submit(make_engine_request(ex.plan, i), std::move(on_output));
      ex.ids.push_back(id);
      state_->request_submitted(id);
    } catch (const RequestRejected& e) {
      state_->release(count - static_cast<int>(i));
      fail_exchange(invalid_request(e.reason(), e.param().empty() ? std::nullopt : std::optional(e.param())));
      return;
    } catch (const EngineUnavailable& e) {
      state_->release(count - static_cast<int>(i));
      fail_exchange(unavailable(e.what(), "engine_unavailable", e.retry_after()));
      return;
    } catch (const std::exception& e) {
      state_->release(count - static_cast<int>(i));
      fail_exchange(internal_error(fmt::format("The engine refused the request: {}", e.what())));
      return;
    }
  }

  if (ex.plan.stream) {
    ex.chunked = request_.version() >= 11;
    if (!ex.chunked) keep_alive_ = false;
    ex.header = std::make_unique<http::response<http::empty_body>>(http::status::ok, request_.version());
    ex.header->set(http::field::server, kServerName);
    ex.header->set(http::field::content_type, "text/event-stream");
    ex.header->set(http::field::cache_control, "no-cache");
    for (const auto& [name, value] : cors_headers(state_->config().cors, view(request_[http::field::origin]))) {
      ex.header->set(name, value);
    }
    ex.header->keep_alive(keep_alive_);
    if (ex.chunked) ex.header->chunked(true);
    ex.serializer = std::make_unique<http::response_serializer<http::empty_body>>(*ex.header);
    ex.pending = ex.builder->stream_start();
    ex.writing = true;
    stream_.expires_after(seconds(state_->config().send_timeout_s));
    http::async_write_header(stream_, *ex.serializer, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_stream_written(ec);
    });
  }
  watch_for_disconnect();
}

void HttpSession::on_output(std::uint64_t serial, std::size_t prompt_index, RequestOutput output) {
  if (!exchange_ || exchange_->serial != serial || exchange_->failed || closed_) return;  // an exchange that ended
  Exchange& ex = *exchange_;
  if (output.error) {
    // The engine says which plugin failed and whether it stopped (docs/reliability.md "Plugin faults").
    fail_exchange(internal_error(fmt::format("Generation failed: {}", *output.error)));
    return;
  }
  for (const SequenceDelta& delta : output.sequences) {
    if (delta.finish_reason == FinishReason::kAborted) {
      fail_exchange(unavailable("The request was aborted by the server (it is shutting down).", "request_aborted",
                                std::chrono::seconds(1)));
      return;
    }
  }
  std::string events = ex.builder->add(prompt_index, output);
  if (output.finished) ++ex.finished;
  const bool done = ex.finished == ex.ids.size();
  if (!ex.plan.stream) {
    if (done) write_reply({200, "application/json", ex.builder->response_body(), {}});
    return;
  }
  ex.pending += events;
  if (done) {
    ex.pending += ex.builder->stream_end();
    ex.complete = true;
  }
  if (ex.pending.size() > kMaxPendingStreamBytes) {
    host_log().warn("http: a stream reader is {} bytes behind; aborting its request", ex.pending.size());
    close_now();
    return;
  }
  flush_stream();
}

void HttpSession::fail_exchange(const ApiError& error) {
  Exchange& ex = *exchange_;
  ex.failed = true;
  for (const RequestId id : ex.ids) state_->engine().abort(id);
  if (ex.header) {
    // The stream has begun: the error is its last event.
    ex.pending += "data: " + error.body() + "\n\n";
    ex.pending += kSseDone;
    ex.complete = true;
    flush_stream();
  } else {
    write_reply(error_reply(error));
  }
}

void HttpSession::end_exchange() {
  if (!exchange_) return;
  exchange_.reset();
  state_->exchange_ended();
  self_.reset();  // callers hold their own reference
}

void HttpSession::flush_stream() {
  Exchange& ex = *exchange_;
  if (ex.writing || closed_) return;
  const auto on_written = [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_stream_written(ec); };
  if (!ex.pending.empty()) {
    ex.sending = std::move(ex.pending);
    ex.pending.clear();
    ex.writing = true;
    stream_.expires_after(seconds(state_->config().send_timeout_s));
    if (ex.chunked) {
      net::async_write(stream_, http::make_chunk(net::buffer(ex.sending)), on_written);
    } else {
      net::async_write(stream_, net::buffer(ex.sending), on_written);
    }
  } else if (ex.complete) {
    ex.writing = true;
    const auto on_finished = [self = shared_from_this()](beast::error_code ec, std::size_t) {
      self->on_stream_finished(ec);
    };
    if (ex.chunked) {
      stream_.expires_after(seconds(state_->config().send_timeout_s));
      net::async_write(stream_, http::make_chunk_last(), on_finished);
    } else {
      net::post(executor_, [on_finished] { on_finished({}, 0); });
    }
  }
}

void HttpSession::on_stream_written(beast::error_code ec) {
  if (!exchange_) return;
  if (ec) {
    close_now();
    return;
  }
  exchange_->writing = false;
  flush_stream();
}

void HttpSession::on_stream_finished(beast::error_code ec) {
  if (ec) {
    close_now();
    return;
  }
  end_exchange();
  next_request();
}

void HttpSession::watch_for_disconnect() {
  // Bytes already buffered are a pipelined request: reading further would mix
  // it up with the watch, so such a client goes unwatched.
  if (watching_ || closed_ || !exchange_ || buffer_.size() > 0) return;
  watching_ = true;
  stream_.expires_never();  // waiting on the engine has no time limit
  stream_.async_read_some(buffer_.prepare(kWatchBytes), [self = shared_from_this()](beast::error_code ec,
                                                                                   std::size_t bytes) {
    self->on_watch(ec, bytes);
  });
}

void HttpSession::on_watch(beast::error_code ec, std::size_t bytes) {
  watching_ = false;
  if (!ec) buffer_.commit(bytes);
  if (resume_after_watch_) {
    resume_after_watch_ = false;
    if (ec && ec != net::error::operation_aborted) {
      close_now();
    } else {
      read_header();
    }
    return;
  }
  // EOF or reset while generating: the client is gone.
  if (ec) close_now();
}

// ---------------------------------------------------------------------------
// Closing

void HttpSession::close_gracefully() {
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  buffer_.clear();
  stream_.expires_after(kLingerTime);
  linger(0);
}

void HttpSession::linger(std::size_t drained) {
  stream_.async_read_some(buffer_.prepare(kWatchBytes), [self = shared_from_this(), drained](beast::error_code ec,
                                                                                           std::size_t bytes) {
    self->buffer_.clear();
    if (ec || drained + bytes > kLingerBytes) {
      self->close_now();
      return;
    }
    self->linger(drained + bytes);
  });
}

void HttpSession::close_now() {
  if (closed_) return;
  closed_ = true;
  if (exchange_) {
    for (const RequestId id : exchange_->ids) state_->engine().abort(id);
  }
  end_exchange();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

}  // namespace pagedllm::server
