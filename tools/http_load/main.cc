// pagoda-http-load: a small load client for the OpenAI-compatible HTTP API. Holds
// --concurrency streaming /v1/completions requests open at once (one keep-alive connection
// each, all on one thread with epoll), until --num-requests have completed; each request is a
// random token-id prompt of --input-len tokens asking for --output-len tokens with
// stream_options.include_usage. Prints (and writes to --json) the requests completed and
// failed, the tokens streamed (from the usage chunks), the events received, the duration, the
// peak number of streams open at once (event-stream head received, answer not yet complete)
// and tokens/s. Exits 1 unless every request completed with [DONE].
//
//   pagoda-http-load --address 127.0.0.1:8000 --concurrency 1000 --num-requests 1000
//       --input-len 32 --output-len 64 --ignore-eos --json out.json
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/flags.h"

ABSL_FLAG(std::string, address, "127.0.0.1:8000", "HOST:PORT of the HTTP API (IPv4)");
ABSL_FLAG(int, concurrency, 64, "streams open at once");
ABSL_FLAG(int, num_requests, 256, "requests in all");
ABSL_FLAG(int, input_len, 32, "prompt tokens per request (random ids)");
ABSL_FLAG(int, output_len, 64, "max_tokens per request");
ABSL_FLAG(bool, ignore_eos, true, "generate exactly --output-len tokens");
ABSL_FLAG(int, vocab, 256, "prompt token ids are drawn from [1, vocab)");
ABSL_FLAG(std::string, api_key, "", "sent as a Bearer token when set");
ABSL_FLAG(std::string, json, "", "write the result to FILE");
ABSL_FLAG(int, seed, 7, "seed of the prompts");

namespace {

struct Stream {
  int fd = -1;
  std::string out;  // request bytes not yet sent
  size_t out_at = 0;
  std::string in;     // bytes received, not yet parsed
  bool head = false;  // the status line and headers were read
  int status = 0;
  std::string body;  // the de-chunked body of the current answer
  bool active = false;
};

struct Totals {
  int started = 0, completed = 0, failed = 0, open = 0, peak_open = 0;
  int64_t tokens = 0, events = 0;
  std::string first_error;
};

std::string MakeRequest(std::mt19937& rng, const std::string& host) {
  nlohmann::json prompt = nlohmann::json::array();
  std::uniform_int_distribution<int> id(1, std::max(2, absl::GetFlag(FLAGS_vocab)) - 1);
  for (int i = 0; i < absl::GetFlag(FLAGS_input_len); ++i) prompt.push_back(id(rng));
  const nlohmann::json body = {{"prompt", prompt},
                               {"max_tokens", absl::GetFlag(FLAGS_output_len)},
                               {"ignore_eos", absl::GetFlag(FLAGS_ignore_eos)},
                               {"temperature", 0},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}}};
  const std::string text = body.dump();
  std::string auth;
  if (!absl::GetFlag(FLAGS_api_key).empty()) {
    auth = absl::StrCat("Authorization: Bearer ", absl::GetFlag(FLAGS_api_key), "\r\n");
  }
  return absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: ", host,
                      "\r\nContent-Type: application/json\r\n", auth,
                      "Content-Length: ", text.size(), "\r\n\r\n", text);
}

// Parses what `s.in` holds; returns 1 when the answer is complete, 0 when more is needed, -1
// on a malformed answer.
int Parse(Stream& s) {
  if (!s.head) {
    const size_t end = s.in.find("\r\n\r\n");
    if (end == std::string::npos) return 0;
    if (s.in.compare(0, 9, "HTTP/1.1 ") != 0 || !absl::SimpleAtoi(s.in.substr(9, 3), &s.status)) {
      return -1;
    }
    const bool chunked = s.in.substr(0, end).find("chunked") != std::string::npos;
    if (!chunked) {  // an error answer with Content-Length: read it whole
      const size_t at = s.in.find("Content-Length: ");
      size_t length = 0;
      if (at == std::string::npos ||
          !absl::SimpleAtoi(s.in.substr(at + 16, s.in.find("\r\n", at) - at - 16), &length)) {
        return -1;
      }
      if (s.in.size() < end + 4 + length) return 0;
      s.body = s.in.substr(end + 4, length);
      s.in.erase(0, end + 4 + length);
      return 1;
    }
    s.head = true;
    s.in.erase(0, end + 4);
  }
  for (;;) {
    const size_t line = s.in.find("\r\n");
    if (line == std::string::npos) return 0;
    size_t size = 0;
    if (!absl::SimpleHexAtoi(s.in.substr(0, line), &size)) return -1;
    if (s.in.size() < line + 2 + size + 2) return 0;
    s.body.append(s.in, line + 2, size);
    s.in.erase(0, line + 2 + size + 2);
    if (size == 0) return 1;
  }
}

// Counts an answer's events and tokens.
void Account(const Stream& s, Totals* t) {
  if (s.status != 200 || s.body.find("data: [DONE]") == std::string::npos) {
    ++t->failed;
    if (t->first_error.empty()) t->first_error = absl::StrCat(s.status, " ", s.body.substr(0, 300));
    return;
  }
  ++t->completed;
  size_t at = 0;
  while ((at = s.body.find("data: ", at)) != std::string::npos) {
    ++t->events;
    at += 6;
  }
  const size_t usage = s.body.rfind("\"completion_tokens\":");
  int64_t tokens = 0;
  if (usage != std::string::npos) {
    const size_t from = usage + 20;
    absl::SimpleAtoi(s.body.substr(from, s.body.find_first_of(",}", from) - from), &tokens);
  }
  t->tokens += tokens;
}

int Connect(const sockaddr_in& addr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 &&
      errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  pagoda::common::ParseFlags(argc, argv);
  const std::string address = absl::GetFlag(FLAGS_address);
  const size_t colon = address.rfind(':');
  int port = 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      inet_pton(AF_INET, address.substr(0, colon).c_str(), &addr.sin_addr) != 1) {
    std::fprintf(stderr, "pagoda-http-load: --address must be IPV4:PORT\n");
    return 2;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
  const int total = std::max(1, absl::GetFlag(FLAGS_num_requests));
  std::mt19937 rng(absl::GetFlag(FLAGS_seed));
  const int ep = epoll_create1(0);
  std::vector<Stream> streams(std::min(concurrency, total));
  Totals t;
  auto start_request = [&](size_t i) {
    Stream& s = streams[i];
    if (s.fd < 0) {
      s.fd = Connect(addr);
      if (s.fd < 0) return false;
      epoll_event ev{.events = EPOLLIN | EPOLLOUT, .data = {.u64 = i}};
      epoll_ctl(ep, EPOLL_CTL_ADD, s.fd, &ev);
    }
    s.out = MakeRequest(rng, address);
    s.out_at = 0;
    s.head = false;
    s.status = 0;
    s.body.clear();
    s.active = true;
    ++t.started;
    epoll_event ev{.events = EPOLLIN | EPOLLOUT, .data = {.u64 = i}};
    epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
    return true;
  };
  auto finish = [&](size_t i, bool ok) {
    Stream& s = streams[i];
    s.active = false;
    if (s.head) --t.open;
    if (ok) {
      Account(s, &t);
    } else {
      ++t.failed;
      if (t.first_error.empty()) t.first_error = "connection failed or closed";
      close(s.fd);
      s.fd = -1;
      s.in.clear();
    }
    if (t.started < total) start_request(i);
  };
  const absl::Time begin = absl::Now();
  for (size_t i = 0; i < streams.size(); ++i) {
    if (!start_request(i)) finish(i, false);
  }
  std::vector<epoll_event> events(1024);
  char buffer[65536];
  while (t.completed + t.failed < total) {
    const int n = epoll_wait(ep, events.data(), static_cast<int>(events.size()), 60000);
    if (n <= 0) {
      std::fprintf(stderr, "pagoda-http-load: no progress for 60 s\n");
      break;
    }
    for (int k = 0; k < n; ++k) {
      const size_t i = events[k].data.u64;
      Stream& s = streams[i];
      if (!s.active) continue;
      if ((events[k].events & EPOLLOUT) && s.out_at < s.out.size()) {
        const ssize_t w =
            send(s.fd, s.out.data() + s.out_at, s.out.size() - s.out_at, MSG_NOSIGNAL);
        if (w > 0) s.out_at += static_cast<size_t>(w);
        if (w < 0 && errno != EAGAIN) {
          finish(i, false);
          continue;
        }
        if (s.out_at == s.out.size()) {
          epoll_event ev{.events = EPOLLIN, .data = {.u64 = i}};
          epoll_ctl(ep, EPOLL_CTL_MOD, s.fd, &ev);
        }
      }
      if (events[k].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        const ssize_t r = recv(s.fd, buffer, sizeof(buffer), 0);
        if (r == 0 || (r < 0 && errno != EAGAIN)) {
          finish(i, false);
          continue;
        }
        if (r < 0) continue;
        s.in.append(buffer, static_cast<size_t>(r));
        const bool had_head = s.head;
        const int parsed = Parse(s);
        if (s.head && !had_head) t.peak_open = std::max(t.peak_open, ++t.open);
        if (parsed != 0) finish(i, parsed > 0);
      }
    }
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  const nlohmann::json result = {{"completed", t.completed},
                                 {"failed", t.failed},
                                 {"output_tokens", t.tokens},
                                 {"events", t.events},
                                 {"duration_s", seconds},
                                 {"peak_open_streams", t.peak_open},
                                 {"output_throughput", t.tokens / std::max(seconds, 1e-9)},
                                 {"first_error", t.first_error}};
  std::printf("%s\n", result.dump(2).c_str());
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    std::ofstream(path) << result.dump(2) << "\n";
  }
  return t.failed == 0 && t.completed == total ? 0 : 1;
}
