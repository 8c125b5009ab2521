// HttpServer: the OpenAI-compatible API's HTTP/1.1 server (--http-listen), on Boost.Asio with
// Boost.Beast's request parser.
//
// No thread per connection or stream: a few io threads (HttpServerOptions::threads) run every
// connection's handlers, each connection on its own strand; a streaming answer is a chain of
// asynchronous writes fed by the engine (OpenAiCall), so thousands of open streams cost memory,
// not threads. Connections are persistent (keep-alive) and may pipeline. While an answer is
// pending the connection keeps a read posted on its socket, so a client that disconnects is
// seen at once and its request cancelled (Responder::WatchForDisconnect).
//
// Limits: a request must arrive whole within 60 s of the connection's previous answer (or its
// opening), else the connection is closed (idle keep-alive connections and slow senders do not
// hold sockets forever); headers above HttpLimits::max_header_bytes get 431, a body above
// max_body_bytes gets 413 (both close the connection), malformed HTTP gets 400.
//
// Start() binds (errors name the address) and starts the io threads; Stop() closes the
// listener and the connections and joins the threads. The server must outlive every call that
// may still post to its connections (the engine's sinks): destroy it after the engine.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "scheduler/http/http_message.h"

namespace pagoda::scheduler::http {

class OpenAiFrontend;

struct HttpServerOptions {
  std::string listen;  // HOST:PORT; port 0 picks a free one
  HttpLimits limits;
  int threads = 2;
};

class HttpServer {
 public:
  // `frontend` must outlive the server's threads (Stop()).
  HttpServer(HttpServerOptions options, OpenAiFrontend* frontend);
  ~HttpServer();

  absl::Status Start();
  int port() const;
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::scheduler::http
