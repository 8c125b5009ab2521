#include "scheduler/http/http_server.h"

#include <sys/resource.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "scheduler/http/beast_request.h"
#include "scheduler/http/openai_frontend.h"
#include "scheduler/http/responder.h"

namespace pagoda::scheduler::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

// Bytes a connection reads ahead (pipelined requests) while an answer is pending; past it, it
// stops reading until the answer is complete.
constexpr size_t kMaxReadAhead = size_t{64} << 10;
constexpr size_t kWatchChunk = 4096;
// A connection gets this long to deliver each whole request, counted from the end of the
// previous answer (so it is also the keep-alive idle timeout); then it is closed.
constexpr auto kRequestTimeout = std::chrono::seconds(60);

class Connection final : public Responder, public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, OpenAiFrontend* frontend, const HttpLimits& limits)
      : socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        frontend_(frontend),
        limits_(limits) {}

  void Start() { ReadRequest(); }

  void Post(std::function<void()> task) override {
    asio::post(socket_.get_executor(), std::move(task));
  }

  void Write(std::string bytes, std::function<void(bool)> done) override {
    auto buffer = std::make_shared<std::string>(std::move(bytes));
    asio::async_write(socket_, asio::buffer(*buffer),
                      [self = shared_from_this(), buffer, done = std::move(done)](
                          const beast::error_code& ec, size_t) { done(!ec); });
  }

  void WatchForDisconnect(std::function<void()> gone) override {
    gone_ = std::move(gone);
    Watch();
  }

  void Complete(bool reuse) override {
    gone_ = nullptr;
    if (!reuse || peer_closed_) return Close();
    if (watching_) {
      resume_ = true;  // the watch's handler reads the next request
      beast::error_code ec;
      socket_.cancel(ec);
      return;
    }
    ReadRequest();
  }

 private:
  void ReadRequest() {
    reading_ = true;
    timer_.expires_after(kRequestTimeout);
    // A timer that expired just as its read completed must not close the next request's read.
    timer_.async_wait(
        [weak = weak_from_this(), serial = ++read_serial_](const beast::error_code& ec) {
          auto self = weak.lock();
          if (self && !ec && self->reading_ && self->read_serial_ == serial) self->Close();
        });
    parser_.emplace();
    ApplyLimits(limits_, &*parser_);
    beast::http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](const beast::error_code& ec, size_t) { self->OnHeader(ec); });
  }

  // The headers are in (a body over the limit is refused here, from its Content-Length). A
  // client that sent "Expect: 100-continue" (curl does for bodies over 1 KiB) waits for an
  // interim answer before it sends the body.
  void OnHeader(const beast::error_code& ec) {
    if (ec || parser_->is_done()) return OnRead(ec);
    auto self = shared_from_this();
    auto read_body = [self] {
      beast::http::async_read(self->socket_, self->buffer_, *self->parser_,
                              [self](const beast::error_code& ec, size_t) { self->OnRead(ec); });
    };
    const auto expect = parser_->get().find(beast::http::field::expect);
    if (expect == parser_->get().end() || !beast::iequals(expect->value(), "100-continue")) {
      return read_body();
    }
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    asio::async_write(socket_, asio::buffer(kContinue.data(), kContinue.size()),
                      [self, read_body](const beast::error_code& ec, size_t) {
                        if (ec) return self->OnRead(ec);
                        read_body();
                      });
  }

  void OnRead(const beast::error_code& ec) {
    reading_ = false;
    timer_.cancel();
    if (ec) {
      // A closed or reset connection between requests is the normal end of a client.
      if (ec == beast::http::error::end_of_stream || ec == asio::error::operation_aborted ||
          ec == asio::error::connection_reset || ec == asio::error::eof) {
        return Close();
      }
      auto self = shared_from_this();
      return Write(ErrorResponse(ParseError(ec, limits_), /*keep_alive=*/false),
                   [self](bool) { self->Close(); });
    }
    HttpRequest request = FromBeast(parser_->release());
    parser_.reset();
    frontend_->Handle(std::move(request), shared_from_this());
  }

  // Keeps a read posted while an answer is pending: it completes with an error when the client
  // disconnects, or with pipelined bytes (kept for the next request).
  void Watch() {
    if (watching_ || peer_closed_ || buffer_.size() >= kMaxReadAhead) return;
    watching_ = true;
    socket_.async_read_some(buffer_.prepare(kWatchChunk),
                            [self = shared_from_this()](const beast::error_code& ec, size_t n) {
                              self->OnWatch(ec, n);
                            });
  }

  void OnWatch(const beast::error_code& ec, size_t n) {
    watching_ = false;
    if (!ec) buffer_.commit(n);
    if (ec && ec != asio::error::operation_aborted) {
      peer_closed_ = true;
      if (gone_) {
        std::function<void()> gone = std::move(gone_);
        gone_ = nullptr;
        gone();
      }
      if (resume_) Close();
      return;
    }
    if (resume_) {
      resume_ = false;
      return ReadRequest();
    }
    if (gone_ && !ec) Watch();
  }

  void Close() {
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  tcp::socket socket_;
  asio::steady_timer timer_;  // kRequestTimeout while a request is being read
  OpenAiFrontend* const frontend_;
  const HttpLimits limits_;
  beast::flat_buffer buffer_;
  std::optional<BeastParser> parser_;
  std::function<void()> gone_;
  bool reading_ = false;      // a request is being read (the timer runs)
  uint64_t read_serial_ = 0;  // which read the timer belongs to
  bool watching_ = false;
  bool resume_ = false;
  bool peer_closed_ = false;
};

// Lets this process hold as many sockets as the hard limit allows (the soft limit is often
// 1024, below a thousand streams plus the gRPC side).
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

struct HttpServer::Impl {
  Impl(HttpServerOptions opts, OpenAiFrontend* fe)
      : options(std::move(opts)), frontend(fe), acceptor(io) {}

  void Accept() {
    acceptor.async_accept(
        asio::make_strand(io), [this](const beast::error_code& ec, tcp::socket socket) {
          if (!acceptor.is_open()) return;
          if (!ec) {
            beast::error_code ignored;
            socket.set_option(tcp::no_delay(true), ignored);
            std::make_shared<Connection>(std::move(socket), frontend, options.limits)->Start();
          } else {
            PAGODA_LOG(kWarning, "http", "accept failed: %s", ec.message());
            if (ec == asio::error::no_descriptors) {
              std::this_thread::sleep_for(std::chrono::milliseconds(10));
            }
          }
          Accept();
        });
  }

  HttpServerOptions options;
  OpenAiFrontend* frontend;
  asio::io_context io;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  int port = 0;
  bool stopped = false;
};

HttpServer::HttpServer(HttpServerOptions options, OpenAiFrontend* frontend)
    : impl_(std::make_unique<Impl>(std::move(options), frontend)) {}

HttpServer::~HttpServer() { Stop(); }

absl::Status HttpServer::Start() {
  const std::string& listen = impl_->options.listen;
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--http-listen %s: expected HOST:PORT", listen));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  beast::error_code ec;
  tcp::resolver resolver(impl_->io);
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec || endpoints.empty()) {
    return absl::UnavailableError(
        absl::StrFormat("--http-listen %s: cannot resolve '%s': %s", listen, host, ec.message()));
  }
  const tcp::endpoint endpoint = *endpoints.begin();
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s (--http-listen): %s", listen, ec.message()));
  }
  impl_->port = a.local_endpoint().port();
  RaiseOpenFileLimit();
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->threads.emplace_back([impl = impl_.get()] { impl->io.run(); });
  }
  PAGODA_LOG(kInfo, "scheduler", "OpenAI-compatible HTTP API on %s (port %d, %d io threads)",
             listen, impl_->port, static_cast<int>(impl_->threads.size()));
  return absl::OkStatus();
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  impl_->io.stop();
  for (std::thread& t : impl_->threads) t.join();
  impl_->threads.clear();
  beast::error_code ec;
  impl_->acceptor.close(ec);
}

}  // namespace pagoda::scheduler::http
