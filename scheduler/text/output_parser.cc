#include "scheduler/text/output_parser.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "nlohmann/json.hpp"

namespace pagoda::scheduler::text {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kHermesOpen = "<tool_call>";
constexpr std::string_view kHermesClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";
constexpr std::string_view kMistralArgs = "[ARGS]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr size_t kMaxKeyBytes = 64;     // longer keys cannot be "name" or "arguments"
constexpr size_t kMaxNameBytes = 1024;  // a function name's raw JSON text

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Length of the longest proper prefix of `marker` that `text` ends with.
size_t PartialSuffix(std::string_view text, std::string_view marker) {
  const size_t most = std::min(marker.size() - 1, text.size());
  for (size_t n = most; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// Whether `text` is a proper prefix of `marker` (it could still become the marker).
bool IsPartial(std::string_view text, std::string_view marker) {
  return text.size() < marker.size() && marker.substr(0, text.size()) == text;
}

bool StartsWith(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

// Checks one JSON value as it arrives, byte by byte: structure, strings (escapes, no raw
// control characters) and literals; numbers are checked by their characters only (the whole
// value is parsed again once complete).
class JsonScanner {
 public:
  enum class Step {
    kMore,        // consumed; the value goes on
    kDone,        // consumed; it was the value's last byte
    kDoneBefore,  // not consumed: the value (a number or literal) ended before it
    kError,       // not consumed: no JSON value continues so
  };

  Step Feed(char c) {
    switch (state_) {
      case State::kValue:
        return StartValue(c);
      case State::kString:
        if (c == '"') return EndString();
        if (c == '\\') {
          state_ = State::kEscape;
        } else if (static_cast<unsigned char>(c) < 0x20) {
          return Step::kError;
        }
        return Step::kMore;
      case State::kEscape:
        if (c == 'u') {
          hex_left_ = 4;
          state_ = State::kHex;
          return Step::kMore;
        }
        if (std::string_view("\"\\/bfnrt").find(c) == std::string_view::npos) {
          return Step::kError;
        }
        state_ = State::kString;
        return Step::kMore;
      case State::kHex:
        if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return Step::kError;
        if (--hex_left_ == 0) state_ = State::kString;
        return Step::kMore;
      case State::kToken:
        if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '+' ||
            c == '-') {
          token_ += c;
          return Step::kMore;
        }
        if (!TokenValid()) return Step::kError;
        if (stack_.empty()) return Step::kDoneBefore;
        state_ = State::kAfterValue;
        return Feed(c);
      case State::kAfterValue:
        if (IsSpace(c)) return Step::kMore;
        if (c == ',') {
          state_ = stack_.back() == '{' ? State::kKey : State::kValue;
          return Step::kMore;
        }
        if (c == (stack_.back() == '{' ? '}' : ']')) return Close();
        return Step::kError;
      case State::kKeyOrEnd:
        if (IsSpace(c)) return Step::kMore;
        if (c == '}') return Close();
        [[fallthrough]];
      case State::kKey:
        if (IsSpace(c)) return Step::kMore;
        if (c != '"') return Step::kError;
        in_key_ = true;
        state_ = State::kString;
        return Step::kMore;
      case State::kColon:
        if (IsSpace(c)) return Step::kMore;
        if (c != ':') return Step::kError;
        state_ = State::kValue;
        return Step::kMore;
      case State::kValueOrEnd:
        if (IsSpace(c)) return Step::kMore;
        if (c == ']') return Close();
        return StartValue(c);
    }
    return Step::kError;
  }

  // At the end of the text: a number or literal that the end completes.
  bool CompleteAtEnd() const { return stack_.empty() && state_ == State::kToken && TokenValid(); }

 private:
  enum class State {
    kValue,       // a value starts (whitespace first, except at the top)
    kString,      // inside "..." (a value, or a key when in_key_)
    kEscape,      // after a backslash
    kHex,         // in \uXXXX
    kToken,       // a number or literal
    kAfterValue,  // after a value inside a container: ',' or the closer
    kKeyOrEnd,    // after '{'
    kKey,         // after ',' in an object
    kColon,       // after a key
    kValueOrEnd,  // after '['
  };

  Step StartValue(char c) {
    if (IsSpace(c) && !stack_.empty()) return Step::kMore;
    if (c == '{' || c == '[') {
      stack_ += c;
      state_ = c == '{' ? State::kKeyOrEnd : State::kValueOrEnd;
      return Step::kMore;
    }
    if (c == '"') {
      in_key_ = false;
      state_ = State::kString;
      return Step::kMore;
    }
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == 't' || c == 'f' ||
        c == 'n') {
      token_.assign(1, c);
      state_ = State::kToken;
      return Step::kMore;
    }
    return Step::kError;
  }

  Step EndString() {
    if (in_key_) {
      in_key_ = false;
      state_ = State::kColon;
      return Step::kMore;
    }
    return EndValue();
  }

  Step EndValue() {
    if (stack_.empty()) return Step::kDone;
    state_ = State::kAfterValue;
    return Step::kMore;
  }

  Step Close() {
    stack_.pop_back();
    return EndValue();
  }

  bool TokenValid() const {
    if (token_ == "true" || token_ == "false" || token_ == "null") return true;
    return nlohmann::json::accept(token_) && (token_[0] == '-' || absl::ascii_isdigit(token_[0]));
  }

  State state_ = State::kValue;
  std::string stack_;  // open containers, '{' or '['
  std::string token_;
  int hex_left_ = 0;
  bool in_key_ = false;
};

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::string MakeToolCallId(ToolCallFormat format, uint64_t seed, int32_t index) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  uint64_t state = seed ^ (0xD1B54A32D192ED03ull * (static_cast<uint64_t>(index) + 1));
  const bool mistral = format == ToolCallFormat::kMistral;
  std::string id = mistral ? "" : "call_";
  const int length = mistral ? 9 : 24;
  for (int i = 0; i < length; ++i) id += kAlphabet[SplitMix64(state) % 62];
  return id;
}

class OutputParser::Impl {
 public:
  explicit Impl(const Options& options) : options_(options) {
    calls_enabled_ = options.tools_given && options.format != ToolCallFormat::kNone;
    switch (calls_enabled_ ? options.format : ToolCallFormat::kNone) {
      case ToolCallFormat::kHermes:
        markers_ = {kHermesOpen};
        break;
      case ToolCallFormat::kMistral:
        markers_ = {kMistralOpen};
        break;
      case ToolCallFormat::kLlama3Json:
        markers_ = {kPythonTag};
        bare_allowed_ = true;
        break;
      case ToolCallFormat::kNone:
        break;
    }
    if (!options.reasoning) {
      mode_ = Mode::kLeadingSpace;
    } else {
      mode_ = options.starts_in_reasoning ? Mode::kReasoningSpace : Mode::kStart;
    }
  }

  std::vector<OutputEvent> Push(std::string_view text) {
    pending_.append(text);
    Run(/*final=*/false);
    return std::exchange(events_, {});
  }

  Final Finish() {
    Run(/*final=*/true);
    if (mode_ == Mode::kCall) ResolveCallAtEnd();
    Final out;
    out.events = std::exchange(events_, {});
    out.content = std::move(content_);
    out.reasoning = std::move(reasoning_);
    out.tool_calls = std::move(tool_calls_);
    return out;
  }

 private:
  enum class Mode {
    kStart,           // reasoning on: "<think>" may open the output (after whitespace)
    kReasoningSpace,  // whitespace at the start of the reasoning: dropped
    kReasoning,       // until "</think>"
    kThinkEnd,        // whitespace after "</think>": dropped
    kLeadingSpace,    // whitespace where markup may follow (start of content, after calls)
    kContent,         // content, looking for a call marker
    kCall,            // inside tool-call markup (Phase says where)
    kHermesSkip,      // after a hermes call's object: skipped until "</tool_call>"
  };
  enum class Phase {
    kOpen,         // after the marker: whitespace, then what the format allows
    kObject,       // in a call's JSON object (ObjectState says where)
    kMistralName,  // [TOOL_CALLS]name[ARGS]{...}: reading the name
    kArgsOnly,     // [TOOL_CALLS]name[ARGS]: the arguments value
    kAfterObject,  // whitespace, then a separator, a closer or something else
    kNextObject,   // after a separator: whitespace, then "{"
  };
  enum class ObjectState { kOpen, kKeyOrEnd, kKey, kKeyText, kColon, kValueStart, kValue, kAfter };
  enum class Role { kName, kArguments, kSkip };

  // ---- events ----
  void Emit(OutputEvent::Kind kind, std::string_view text, int32_t index = -1) {
    if (text.empty()) return;
    if (kind == OutputEvent::Kind::kContent) content_.append(text);
    if (kind == OutputEvent::Kind::kReasoning) reasoning_.append(text);
    if (!events_.empty() && events_.back().kind == kind && events_.back().index == index) {
      events_.back().text.append(text);
      return;
    }
    OutputEvent event;
    event.kind = kind;
    event.text = std::string(text);
    event.index = index;
    events_.push_back(std::move(event));
  }

  std::string_view Rest() const { return std::string_view(pending_).substr(pos_); }

  // Consumes n bytes of a call's markup (kept in call_raw_ in case the call falls through).
  void TakeCall(size_t n) {
    call_raw_.append(pending_, pos_, n);
    pos_ += n;
  }

  // ---- the loop ----
  void Run(bool final) {
    while (Step(final)) {
    }
    FlushArguments();
    pending_.erase(0, pos_);
    pos_ = 0;
  }

  // One step: false when nothing more can be decided without more text.
  bool Step(bool final) {
    const std::string_view rest = Rest();
    switch (mode_) {
      case Mode::kStart: {
        size_t j = 0;
        while (j < rest.size() && IsSpace(rest[j])) ++j;
        if (j == rest.size() && !final) return false;
        const std::string_view tail = rest.substr(j);
        if (StartsWith(tail, kThinkOpen)) {
          pos_ += j + kThinkOpen.size();
          mode_ = Mode::kReasoningSpace;
          return true;
        }
        if (IsPartial(tail, kThinkOpen) && !tail.empty() && !final) return false;
        mode_ = Mode::kLeadingSpace;
        return true;
      }
      case Mode::kReasoningSpace:
      case Mode::kThinkEnd: {
        while (pos_ < pending_.size() && IsSpace(pending_[pos_])) ++pos_;
        if (pos_ == pending_.size()) return false;
        mode_ = mode_ == Mode::kReasoningSpace ? Mode::kReasoning : Mode::kLeadingSpace;
        return true;
      }
      case Mode::kReasoning: {
        if (rest.empty()) return false;
        const size_t at = rest.find(kThinkClose);
        if (at != std::string_view::npos) {
          Emit(OutputEvent::Kind::kReasoning, rest.substr(0, at));
          pos_ += at + kThinkClose.size();
          mode_ = Mode::kThinkEnd;
          return true;
        }
        const size_t keep = final ? 0 : PartialSuffix(rest, kThinkClose);
        Emit(OutputEvent::Kind::kReasoning, rest.substr(0, rest.size() - keep));
        pos_ += rest.size() - keep;
        return false;
      }
      case Mode::kLeadingSpace:
        return LeadingSpace(rest, final);
      case Mode::kContent:
        return Content(rest, final);
      case Mode::kCall:
        return Call(final);
      case Mode::kHermesSkip:
        return HermesSkip(rest, final);
    }
    return false;
  }

  // Whitespace where markup may follow: dropped before markup or at the end; otherwise sent
  // as content, except after a call (dropped: it only separated the call from the text).
  bool LeadingSpace(std::string_view rest, bool final) {
    if (!calls_enabled_) {
      mode_ = Mode::kContent;
      return true;
    }
    size_t j = 0;
    while (j < rest.size() && IsSpace(rest[j])) ++j;
    if (j == rest.size()) {
      if (final) pos_ += j;
      return false;
    }
    const std::string_view tail = rest.substr(j);
    if (bare_allowed_ && tail[0] == '{') {
      bare_allowed_ = false;
      StartCall(/*bare=*/true);  // the whitespace goes with the call's text
      return true;
    }
    bool partial = false;
    for (const std::string_view marker : markers_) {
      if (StartsWith(tail, marker)) {
        if (after_call_) pos_ += j;
        mode_ = Mode::kContent;
        return true;
      }
      partial |= IsPartial(tail, marker);
    }
    if (partial && !final) return false;
    if (after_call_) pos_ += j;
    bare_allowed_ = false;
    after_call_ = false;
    mode_ = Mode::kContent;
    return true;
  }

  // Content: sent up to a call marker; held: a tail that may begin a marker, and the
  // whitespace before it (not content if the marker comes: it goes with the call's text).
  bool Content(std::string_view rest, bool final) {
    if (rest.empty()) return false;
    if (markers_.empty()) {
      Emit(OutputEvent::Kind::kContent, rest);
      pos_ += rest.size();
      return false;
    }
    size_t first = std::string_view::npos;
    std::string_view found;
    for (const std::string_view marker : markers_) {
      const size_t at = rest.find(marker);
      if (at < first) {
        first = at;
        found = marker;
      }
    }
    if (first != std::string_view::npos) {
      size_t end = first;
      while (end > 0 && IsSpace(rest[end - 1])) --end;
      Emit(OutputEvent::Kind::kContent, rest.substr(0, end));
      pos_ += end;
      bare_allowed_ = false;
      StartCall(/*bare=*/false);
      TakeCall(first - end + found.size());  // the whitespace too, in case the call fails
      return true;
    }
    size_t keep = 0;
    if (!final) {
      for (const std::string_view marker : markers_) {
        keep = std::max(keep, PartialSuffix(rest, marker));
      }
      while (keep < rest.size() && IsSpace(rest[rest.size() - keep - 1])) ++keep;
    }
    Emit(OutputEvent::Kind::kContent, rest.substr(0, rest.size() - keep));
    pos_ += rest.size() - keep;
    return false;
  }

  // After a hermes call's object: everything up to "</tool_call>" is skipped; a new
  // "<tool_call>" (the closer forgotten) starts the next call.
  bool HermesSkip(std::string_view rest, bool final) {
    const size_t close = rest.find(kHermesClose);
    const size_t open = rest.find(kHermesOpen);
    if (open < close) {
      pos_ += open;
      mode_ = Mode::kContent;
      return true;
    }
    if (close != std::string_view::npos) {
      pos_ += close + kHermesClose.size();
      after_call_ = true;
      mode_ = Mode::kLeadingSpace;
      return true;
    }
    const size_t keep =
        final ? 0 : std::max(PartialSuffix(rest, kHermesClose), PartialSuffix(rest, kHermesOpen));
    pos_ += rest.size() - keep;
    return false;
  }

  // ---- calls ----
  void StartCall(bool bare) {
    mode_ = Mode::kCall;
    phase_ = bare ? Phase::kObject : Phase::kOpen;
    in_array_ = false;
    call_raw_.clear();
    ResetCall(bare);
  }

  // A new call object begins (call_raw_ keeps what came before it in this section).
  void ResetCall(bool bare) {
    call_open_ = true;
    bare_ = bare;
    object_ = ObjectState::kOpen;
    key_.clear();
    first_key_ = true;
    scanner_ = JsonScanner();
    name_raw_.clear();
    name_.reset();
    args_seen_ = false;
    args_stream_ = false;
    args_done_ = false;
    args_raw_.clear();
    args_final_.clear();
    args_sent_ = 0;
    committed_ = false;
    index_ = -1;
  }

  bool Call(bool final) {
    const std::string_view rest = Rest();
    if (rest.empty()) return false;
    switch (phase_) {
      case Phase::kOpen: {
        size_t j = 0;
        while (j < rest.size() && IsSpace(rest[j])) ++j;
        if (j == rest.size()) {
          TakeCall(j);
          return false;
        }
        const char c = rest[j];
        TakeCall(j);
        if (c == '{') {
          phase_ = Phase::kObject;
          return true;
        }
        if (options_.format == ToolCallFormat::kMistral) {
          if (c == '[') {
            TakeCall(1);
            in_array_ = true;
            phase_ = Phase::kNextObject;
            return true;
          }
          if (IsNameChar(c)) {
            phase_ = Phase::kMistralName;
            return true;
          }
        }
        return Fail();
      }
      case Phase::kObject:
        return ObjectStep(rest[0]);
      case Phase::kMistralName: {
        size_t j = 0;
        while (j < rest.size() && IsNameChar(rest[j])) ++j;
        name_raw_.append(rest.substr(0, j));
        TakeCall(j);
        if (name_raw_.size() > kMaxNameBytes) return Fail();
        if (j == rest.size()) return false;
        const std::string_view tail = rest.substr(j);
        if (StartsWith(tail, kMistralArgs)) {
          TakeCall(kMistralArgs.size());
          if (name_raw_.empty()) return Fail();
          name_ = name_raw_;
          Commit();
          args_seen_ = true;
          phase_ = Phase::kArgsOnly;
          return true;
        }
        if (IsPartial(tail, kMistralArgs) && !final) return false;
        return Fail();
      }
      case Phase::kArgsOnly: {
        if (args_raw_.empty()) {  // whitespace before the value
          size_t j = 0;
          while (j < rest.size() && IsSpace(rest[j])) ++j;
          TakeCall(j);
          if (j == rest.size()) return false;
        }
        return ArgumentsByte(Rest()[0], [this] {
          FinishCall();
          after_call_ = true;
          mode_ = Mode::kLeadingSpace;
        });
      }
      case Phase::kAfterObject: {
        size_t j = 0;
        while (j < rest.size() && IsSpace(rest[j])) ++j;
        if (j == rest.size()) {
          TakeCall(j);
          return false;
        }
        const char c = rest[j];
        const bool llama = options_.format == ToolCallFormat::kLlama3Json;
        if ((llama && c == ';') || (in_array_ && c == ',')) {
          TakeCall(j + 1);
          phase_ = Phase::kNextObject;
          return true;
        }
        if (in_array_ && c == ']') TakeCall(j + 1);
        EndSection();
        return true;
      }
      case Phase::kNextObject: {
        size_t j = 0;
        while (j < rest.size() && IsSpace(rest[j])) ++j;
        if (j == rest.size()) {
          TakeCall(j);
          return false;
        }
        if (rest[j] != '{') {
          if (call_open_) return Fail();  // "[TOOL_CALLS][" and no object
          if (in_array_ && rest[j] == ']') TakeCall(j + 1);
          EndSection();
          return true;
        }
        TakeCall(j);
        ResetCall(/*bare=*/false);
        phase_ = Phase::kObject;
        return true;
      }
    }
    return false;
  }

  bool Take1() {
    TakeCall(1);
    return true;
  }

  static bool IsNameChar(char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  }

  // The calls are over: what follows is content (whitespace before it dropped).
  void EndSection() {
    call_raw_.clear();
    after_call_ = true;
    mode_ = Mode::kLeadingSpace;
  }

  // One byte of a call object.
  bool ObjectStep(char c) {
    switch (object_) {
      case ObjectState::kOpen:
        if (IsSpace(c)) return Take1();
        if (c != '{') return Fail();
        TakeCall(1);
        object_ = ObjectState::kKeyOrEnd;
        return true;
      case ObjectState::kKeyOrEnd:
      case ObjectState::kKey:
        if (IsSpace(c)) return Take1();
        if (c == '}' && object_ == ObjectState::kKeyOrEnd) return ObjectEnd();
        if (c != '"') return Fail();
        TakeCall(1);
        key_.clear();
        key_escape_ = false;
        object_ = ObjectState::kKeyText;
        return true;
      case ObjectState::kKeyText: {
        if (c == '"' && !key_escape_) {
          TakeCall(1);
          if (bare_ && first_key_ && key_ != "name" && key_ != "type" && key_ != "parameters" &&
              key_ != "arguments") {
            return Fail();
          }
          first_key_ = false;
          object_ = ObjectState::kColon;
          return true;
        }
        if (static_cast<unsigned char>(c) < 0x20) return Fail();
        key_escape_ = !key_escape_ && c == '\\';
        key_ += c;
        TakeCall(1);
        if (key_.size() > kMaxKeyBytes) return Fail();
        return true;
      }
      case ObjectState::kColon:
        if (IsSpace(c)) return Take1();
        if (c != ':') return Fail();
        TakeCall(1);
        object_ = ObjectState::kValueStart;
        return true;
      case ObjectState::kValueStart:
        if (IsSpace(c)) return Take1();
        scanner_ = JsonScanner();
        if (key_ == "name" && !name_) {
          if (c != '"') return Fail();
          role_ = Role::kName;
        } else if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
          role_ = Role::kArguments;
          args_seen_ = true;
          if (name_ && !committed_) Commit();
        } else {
          role_ = Role::kSkip;
        }
        object_ = ObjectState::kValue;
        return true;
      case ObjectState::kValue:
        return ValueByte(c);
      case ObjectState::kAfter:
        if (IsSpace(c)) return Take1();
        if (c == ',') {
          TakeCall(1);
          object_ = ObjectState::kKey;
          return true;
        }
        if (c == '}') return ObjectEnd();
        return Fail();
    }
    return false;
  }

  bool ValueByte(char c) {
    if (role_ == Role::kArguments) {
      return ArgumentsByte(c, [this] { object_ = ObjectState::kAfter; });
    }
    const JsonScanner::Step step = scanner_.Feed(c);
    if (step == JsonScanner::Step::kError) return Fail();
    if (step == JsonScanner::Step::kDoneBefore) {
      object_ = ObjectState::kAfter;
      return true;
    }
    TakeCall(1);
    if (role_ == Role::kName) {
      name_raw_ += c;
      if (name_raw_.size() > kMaxNameBytes) return Fail();
    }
    if (step == JsonScanner::Step::kDone) {
      object_ = ObjectState::kAfter;
      if (role_ == Role::kName) {
        const nlohmann::json name = nlohmann::json::parse(name_raw_, nullptr, false);
        if (!name.is_string() || name.get<std::string>().empty()) return Fail();
        name_ = name.get<std::string>();
        // Bare JSON is a call only with its arguments key: {"name": "Ada", "age": 36} is not.
        if (!bare_ || args_seen_) Commit();
      }
    }
    return true;
  }

  // One byte of the arguments value; `done` runs once the value is complete and valid.
  template <typename Done>
  bool ArgumentsByte(char c, Done done) {
    if (args_raw_.empty()) {
      // "{...}" streams; a string (JSON encoded twice) and null are held and converted.
      if (c != '{' && c != '"' && c != 'n') return Fail();
      args_stream_ = c == '{';
    }
    const JsonScanner::Step step = scanner_.Feed(c);
    if (step == JsonScanner::Step::kError) return Fail();
    if (step != JsonScanner::Step::kDoneBefore) {
      TakeCall(1);
      args_raw_ += c;
    }
    if (step == JsonScanner::Step::kMore) return true;
    if (!CompleteArguments()) return Fail();
    done();
    return true;
  }

  // The arguments value is complete in args_raw_: sets args_final_, false if it is not an
  // object (or a string holding one, or null).
  bool CompleteArguments() {
    const nlohmann::json value = nlohmann::json::parse(args_raw_, nullptr, false);
    if (value.is_discarded()) return false;
    if (value.is_object()) {
      args_final_ = args_raw_;
    } else if (value.is_null()) {
      args_final_ = "{}";
    } else if (value.is_string()) {
      const std::string inner = value.get<std::string>();
      const nlohmann::json decoded = nlohmann::json::parse(inner, nullptr, false);
      if (!decoded.is_object()) return false;
      args_final_ = std::string(absl::StripAsciiWhitespace(inner));
    } else {
      return false;
    }
    args_done_ = true;
    FlushArguments();
    return true;
  }

  // Sends what the client may see of the arguments: the streamed raw text so far, or the held
  // value once complete.
  void FlushArguments() {
    if (mode_ != Mode::kCall || !committed_) return;
    if (args_stream_) {
      if (args_sent_ < args_raw_.size()) {
        Emit(OutputEvent::Kind::kToolCallArguments, std::string_view(args_raw_).substr(args_sent_),
             index_);
        args_sent_ = args_raw_.size();
      }
    } else if (args_done_ && args_sent_ == 0) {
      Emit(OutputEvent::Kind::kToolCallArguments, args_final_, index_);
      args_sent_ = args_final_.size();
    }
  }

  void Commit() {
    committed_ = true;
    index_ = next_index_++;
    OutputEvent event;
    event.kind = OutputEvent::Kind::kToolCallStart;
    event.index = index_;
    event.id = MakeToolCallId(options_.format, options_.id_seed, index_);
    event.name = *name_;
    id_ = event.id;
    events_.push_back(std::move(event));
    FlushArguments();
  }

  bool ObjectEnd() {
    TakeCall(1);
    if (!name_ || (bare_ && !args_seen_)) return Fail();
    if (!args_seen_) {
      args_final_ = "{}";
      args_done_ = true;
      args_stream_ = false;
      FlushArguments();
    }
    FinishCall();
    if (options_.format == ToolCallFormat::kHermes) {
      mode_ = Mode::kHermesSkip;
    } else {
      phase_ = Phase::kAfterObject;
    }
    return true;
  }

  // The current call is complete: into the list.
  void FinishCall() {
    FlushArguments();
    tool_calls_.push_back(ToolCall{index_, id_, *name_, args_final_});
    call_raw_.clear();
    committed_ = false;
    call_open_ = false;
  }

  // The current call is malformed at pos_ (that byte not consumed). A call whose arguments
  // are complete stands; any other gives its text back to content.
  bool Fail() {
    if (committed_ && args_done_) {
      FinishCall();
      if (options_.format == ToolCallFormat::kHermes) {
        mode_ = Mode::kHermesSkip;
      } else {
        EndSection();
      }
      return true;
    }
    if (committed_) {
      FlushArguments();  // what was read, so that the stream does not depend on the pieces
      OutputEvent event;
      event.kind = OutputEvent::Kind::kToolCallInvalid;
      event.index = index_;
      events_.push_back(std::move(event));
      committed_ = false;
    }
    Emit(OutputEvent::Kind::kContent, call_raw_);
    call_raw_.clear();
    call_open_ = false;
    after_call_ = false;
    mode_ = Mode::kContent;
    return true;
  }

  void ResolveCallAtEnd() {
    if (phase_ == Phase::kObject && object_ == ObjectState::kValue && role_ == Role::kArguments &&
        !args_done_ && scanner_.CompleteAtEnd()) {
      // "null" at the very end: complete.
      if (CompleteArguments()) object_ = ObjectState::kAfter;
    }
    if (committed_ && args_done_) {
      FinishCall();
      EndSection();
      return;
    }
    if (!call_open_) {
      EndSection();
      return;
    }
    Fail();
    // Whatever Fail left is resolved as content: nothing is pending at the end.
    Run(/*final=*/true);
  }

  const Options options_;
  bool calls_enabled_ = false;
  std::vector<std::string_view> markers_;  // what opens a call in content
  bool bare_allowed_ = false;              // llama3_json: a "{" may still open the output
  bool after_call_ = false;                // kLeadingSpace follows a call
  Mode mode_;
  std::string pending_;  // input not decided yet, from pos_
  size_t pos_ = 0;
  std::vector<OutputEvent> events_;
  std::string content_;
  std::string reasoning_;
  std::vector<ToolCall> tool_calls_;
  int32_t next_index_ = 0;

  // The call being read.
  Phase phase_ = Phase::kOpen;
  bool in_array_ = false;   // mistral's [...]
  bool call_open_ = false;  // a call object began and is not finished
  bool bare_ = false;       // llama3_json without a tag: the first key must be a call's
  std::string call_raw_;    // its text so far, marker included
  ObjectState object_ = ObjectState::kOpen;
  std::string key_;
  bool key_escape_ = false;  // the key's last byte is an escaping backslash
  bool first_key_ = true;
  Role role_ = Role::kSkip;
  JsonScanner scanner_;
  std::string name_raw_;
  std::optional<std::string> name_;
  bool args_seen_ = false;
  bool args_stream_ = false;  // sent as it comes (an object), or held (string, null)
  bool args_done_ = false;
  std::string args_raw_;
  std::string args_final_;
  size_t args_sent_ = 0;
  bool committed_ = false;  // its start event is out
  int32_t index_ = -1;
  std::string id_;
};

OutputParser::~OutputParser() = default;

namespace {

// Drops the events of tool calls past the first `max` (0: keeps all).
void DropCallsPast(int32_t max, std::vector<OutputEvent>& events) {
  if (max <= 0) return;
  std::erase_if(events, [max](const OutputEvent& e) {
    return e.kind != OutputEvent::Kind::kContent && e.kind != OutputEvent::Kind::kReasoning &&
           e.index >= max;
  });
}

}  // namespace

OutputParser::OutputParser(const Options& options)
    : impl_(std::make_unique<Impl>(options)), max_tool_calls_(options.max_tool_calls) {}

std::vector<OutputEvent> OutputParser::Push(std::string_view text) {
  std::vector<OutputEvent> events = impl_->Push(text);
  DropCallsPast(max_tool_calls_, events);
  return events;
}

OutputParser::Final OutputParser::Finish() {
  Final final = impl_->Finish();
  DropCallsPast(max_tool_calls_, final.events);
  if (max_tool_calls_ > 0) {
    std::erase_if(final.tool_calls,
                  [this](const ToolCall& c) { return c.index >= max_tool_calls_; });
  }
  return final;
}

}  // namespace pagoda::scheduler::text
