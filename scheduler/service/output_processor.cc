#include "scheduler/service/output_processor.h"

#include <algorithm>
#include <utility>

#include "scheduler/engine/engine.h"

namespace pagoda::scheduler {
namespace {

// The failure an abnormal end stands for; OK for a normal end.
absl::Status EndStatus(const Event& e) {
  switch (e.reason) {
    case FinishReason::kError:
      return absl::InternalError(e.message);
    case FinishReason::kCancelled:
      return absl::CancelledError(e.message);
    case FinishReason::kDeadline:
      return absl::DeadlineExceededError(e.message);
    default:
      return absl::OkStatus();
  }
}

}  // namespace

void AppendText(std::string_view text, std::vector<OutputEvent>* events) {
  if (text.empty()) return;
  if (!events->empty() && events->back().kind == OutputEvent::Kind::kText) {
    events->back().text += text;
    return;
  }
  events->push_back(OutputEvent{.kind = OutputEvent::Kind::kText, .text = std::string(text)});
}

OutputProcessor::OutputProcessor(const text::Tokenizer& tokenizer, Options options, absl::Mutex* mu)
    : mu_(mu), on_stop_match_(std::move(options.on_stop_match)) {
  completions_.reserve(options.n);
  for (int i = 0; i < options.n; ++i) {
    completions_.push_back(std::make_unique<Completion>(tokenizer, options.stops));
    if (options.post_processor) completions_.back()->post = options.post_processor();
  }
}

void OutputProcessor::AddToken(int index, int32_t token, const TokenLogprob* logprob) {
  mu_->AssertHeld();
  Completion& c = *completions_[index];
  c.pending.push_back(token);
  if (logprob != nullptr) c.pending_logprobs.push_back(*logprob);
}

void OutputProcessor::AddEnd(int index, Event event) {
  mu_->AssertHeld();
  ++arrived_;
  completions_[index]->final = std::move(event);
}

bool OutputProcessor::HasNews(int index) const {
  mu_->AssertHeld();
  const Completion& c = *completions_[index];
  return !c.pending.empty() || c.final.has_value();
}

int OutputProcessor::NextWithNews() {
  mu_->AssertHeld();
  const int count = n();
  for (int k = 0; k < count; ++k) {
    const int i = (next_ + k) % count;
    if (HasNews(i)) {
      next_ = (i + 1) % count;
      return i;
    }
  }
  return -1;
}

int OutputProcessor::ends_arrived() const {
  mu_->AssertHeld();
  return arrived_;
}

void OutputProcessor::Take(int index) {
  mu_->AssertHeld();
  Completion& c = *completions_[index];
  c.taken = true;
  c.taken_tokens.clear();
  c.taken_tokens.swap(c.pending);
  c.taken_logprobs.clear();
  c.taken_logprobs.swap(c.pending_logprobs);
  c.taken_final = std::move(c.final);
  c.final.reset();
}

bool OutputProcessor::Process(int index, CompletionDelta* out) {
  Completion& c = *completions_[index];
  if (!c.taken) return false;
  c.taken = false;
  out->tokens.clear();
  out->tokens.swap(c.taken_tokens);
  out->logprobs.clear();
  out->logprobs.swap(c.taken_logprobs);
  out->events.clear();
  out->end.reset();
  // Logprobs are parallel to the tokens when the request asked for them (one per token).
  if (out->logprobs.size() != out->tokens.size()) out->logprobs.clear();
  text_.clear();
  bool matched = false;
  size_t sent = 0;
  for (; sent < out->tokens.size() && c.matched_stop.empty(); ++sent) {
    text::StopMatcher::Result m = c.stops.Push(c.detok.Push(out->tokens[sent]));
    text_ += m.text;
    if (m.matched) {
      c.matched_stop = std::move(m.stop);
      matched = true;
    }
  }
  // Tokens after the match are never sent, nor their logprobs.
  out->tokens.resize(sent);
  if (!out->logprobs.empty()) out->logprobs.resize(sent);
  c.sent_tokens += static_cast<int32_t>(sent);
  if (matched) on_stop_match_(index);
  std::optional<Event> final = std::move(c.taken_final);
  c.taken_final.reset();
  if (final) {
    if (c.matched_stop.empty()) {
      // In this order: the detokenizer's last bytes go through the matcher before it lets go
      // of what it held back.
      text_ += c.stops.Push(c.detok.Flush()).text;
      text_ += c.stops.Flush();
    } else {
      // The match wins even when the engine ended the completion for another reason in the same
      // iteration; tokens past the match were never sent.
      final->reason = FinishReason::kStopString;
      final->completion_tokens = c.sent_tokens;
    }
  }
  Emit(c, text_, &out->events);
  if (final) {
    if (c.post != nullptr) c.post->Finish(&out->events);
    if (absl::Status s = EndStatus(*final); !s.ok() && failure_.ok()) failure_ = std::move(s);
    c.end = CompletionEnd{.event = *std::move(final), .matched_stop = c.matched_stop};
    out->end = c.end;
    ++ended_;
  }
  return true;
}

void OutputProcessor::Emit(Completion& c, std::string_view text, std::vector<OutputEvent>* events) {
  if (c.post != nullptr) {
    c.post->Push(text, events);
  } else {
    AppendText(text, events);
  }
}

const CompletionEnd& OutputProcessor::end(int index) const { return *completions_[index]->end; }

Event OutputProcessor::MergedEnd() const {
  Event merged = completions_[0]->end->event;
  for (size_t i = 1; i < completions_.size(); ++i) {
    const Event& e = completions_[i]->end->event;
    merged.completion_tokens += e.completion_tokens;
    merged.preemptions += e.preemptions;
    merged.timings.finished = std::max(merged.timings.finished, e.timings.finished);
  }
  return merged;
}

std::unique_ptr<OutputProcessor> MakeOutputProcessor(Engine* engine, RequestId id, int n,
                                                     const text::Tokenizer& tokenizer,
                                                     std::vector<std::string> stops,
                                                     absl::Mutex* mu) {
  OutputProcessor::Options options{
      .n = n,
      .stops = std::move(stops),
      .on_stop_match =
          [engine, id](int index) {
            // The engine delivers the completion's end to the sink as usual.
            engine->Finish(id + index, FinishReason::kStopString, "");
          },
      .post_processor = nullptr,
  };
  return std::make_unique<OutputProcessor>(tokenizer, std::move(options), mu);
}

}  // namespace pagoda::scheduler
