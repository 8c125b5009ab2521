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

// text::OutputParser as a TextPostProcessor.
class ParserPostProcessor final : public TextPostProcessor {
 public:
  explicit ParserPostProcessor(const text::OutputParser::Options& options) : parser_(options) {}

  void Push(std::string_view text, std::vector<OutputEvent>* events) override {
    if (text.empty()) return;
    Convert(parser_.Push(text), events);
  }
  void Finish(std::vector<OutputEvent>* events) override {
    Convert(std::move(parser_.Finish().events), events);
  }

 private:
  static void Convert(std::vector<text::OutputEvent> in, std::vector<OutputEvent>* events) {
    using In = text::OutputEvent::Kind;
    using Out = OutputEvent::Kind;
    for (text::OutputEvent& e : in) {
      if (e.kind == In::kContent) {
        AppendText(e.text, events);
        continue;
      }
      Out kind = Out::kReasoning;
      switch (e.kind) {
        case In::kContent:
        case In::kReasoning:
          kind = Out::kReasoning;
          break;
        case In::kToolCallStart:
          kind = Out::kToolCallStart;
          break;
        case In::kToolCallArguments:
          kind = Out::kToolCallArguments;
          break;
        case In::kToolCallInvalid:
          kind = Out::kToolCallInvalid;
          break;
      }
      OutputEvent& out = events->emplace_back();
      out.kind = kind;
      out.text = std::move(e.text);
      out.index = e.index;
      out.id = std::move(e.id);
      out.name = std::move(e.name);
    }
  }

  text::OutputParser parser_;
};

}  // namespace

std::unique_ptr<TextPostProcessor> MakeParserPostProcessor(
    const text::OutputParser::Options& options) {
  return std::make_unique<ParserPostProcessor>(options);
}

std::vector<std::pair<int32_t, std::string>> MarkerTokens(const text::Tokenizer& tokenizer,
                                                          text::ToolCallFormat format) {
  std::vector<std::pair<int32_t, std::string>> out;
  for (std::string_view marker : text::SyntaxOf(format).special_markers) {
    std::vector<int32_t> ids =
        tokenizer.Encode(marker, /*add_special=*/false, /*parse_special=*/true);
    if (ids.size() == 1 && tokenizer.IsControl(ids[0])) out.emplace_back(ids[0], marker);
  }
  return out;
}

std::string OutputProcessor::Completion::Detokenize(
    int32_t token, const std::vector<std::pair<int32_t, std::string>>& rendered) {
  for (const auto& [id, text] : rendered) {
    // What the detokenizer held is an incomplete character that this token ends.
    if (id == token) return detok.Flush() + text;
  }
  return detok.Push(token);
}

void AppendText(std::string_view text, std::vector<OutputEvent>* events) {
  if (text.empty()) return;
  if (!events->empty() && events->back().kind == OutputEvent::Kind::kText) {
    events->back().text += text;
    return;
  }
  OutputEvent& e = events->emplace_back();
  e.kind = OutputEvent::Kind::kText;
  e.text = std::string(text);
}

OutputProcessor::OutputProcessor(const text::Tokenizer& tokenizer, Options options, absl::Mutex* mu)
    : mu_(mu),
      on_stop_match_(std::move(options.on_stop_match)),
      rendered_tokens_(std::move(options.rendered_tokens)) {
  completions_.reserve(options.n);
  for (int i = 0; i < options.n; ++i) {
    completions_.push_back(std::make_unique<Completion>(tokenizer, options.stops));
    if (options.post_processor) completions_.back()->post = options.post_processor(i);
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
    text::StopMatcher::Result m = c.stops.Push(c.Detokenize(out->tokens[sent], rendered_tokens_));
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

std::unique_ptr<OutputProcessor> MakeOutputProcessor(
    Engine* engine, RequestId id, int n, const text::Tokenizer& tokenizer,
    std::vector<std::string> stops, absl::Mutex* mu,
    const std::optional<text::OutputParser::Options>& parsing) {
  OutputProcessor::Options options{
      .n = n,
      .stops = std::move(stops),
      .on_stop_match =
          [engine, id](int index) {
            // The engine delivers the completion's end to the sink as usual.
            engine->Finish(id + index, FinishReason::kStopString, "");
          },
      .post_processor = nullptr,
      .rendered_tokens = {},
  };
  if (parsing) {
    options.post_processor = [parsing = *parsing](int index) {
      text::OutputParser::Options o = parsing;
      o.id_seed += static_cast<uint64_t>(index);
      return MakeParserPostProcessor(o);
    };
    options.rendered_tokens = MarkerTokens(tokenizer, parsing->format);
  }
  return std::make_unique<OutputProcessor>(tokenizer, std::move(options), mu);
}

}  // namespace pagoda::scheduler
