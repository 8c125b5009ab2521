#include "scheduler/engine/request_stream.h"

namespace pagoda::scheduler {

bool RequestStream::OnToken(int32_t token, const TokenLogprob* logprob) {
  absl::MutexLock lock(&mu_);
  pending_.tokens.push_back(token);
  if (logprob != nullptr) pending_.logprobs.push_back(*logprob);
  return false;
}

bool RequestStream::OnFinished(Event event) {
  absl::MutexLock lock(&mu_);
  pending_.finished = std::move(event);
  return false;
}

void RequestStream::Wake() {
  absl::MutexLock lock(&mu_);
  woken_ = true;
}

RequestStream::Update RequestStream::Wait(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto has_news = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return woken_ || !pending_.tokens.empty() || pending_.finished.has_value();
  };
  mu_.AwaitWithTimeout(absl::Condition(&has_news), timeout);
  woken_ = false;
  Update out = std::move(pending_);
  pending_ = Update{};
  return out;
}

}  // namespace pagoda::scheduler
