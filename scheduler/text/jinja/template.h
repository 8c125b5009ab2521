// A parsed Jinja template and its rendering: the engine's entry point. Renders as
// @huggingface/jinja does (lstrip_blocks and trim_blocks on, its undefined-variable rules: printing
// undefined gives nothing, an attribute of undefined is undefined, most operations on it fail), or,
// in the Python dialect (interpreter.h), as Python's Jinja2 does where the two differ.
//
// Contract: Parse and Render never throw and never crash on any input: a syntax error, a template
// error (raise_exception's message verbatim) or a limit reached is absl::InvalidArgumentError. A
// Template is immutable after Parse; Render may run concurrently from several threads.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "scheduler/text/jinja/ast.h"
#include "scheduler/text/jinja/interpreter.h"

namespace pagoda::scheduler::text::jinja {

// The largest template source Parse accepts.
inline constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

// JSON (insertion order kept) to a template value, as JavaScript's JSON.parse would build it:
// integral numbers are integers, and integer-like keys ("0", "7") come first in ascending order.
// Nesting deeper than 256 levels is an error.
absl::StatusOr<Value> JsonToValue(const nlohmann::ordered_json& json);

class Template {
 public:
  static absl::StatusOr<Template> Parse(std::string_view source);

  // Renders with `context`'s entries (a JSON object) as variables, next to the globals (true,
  // false, none, raise_exception, range, strftime_now reading `now` in UTC, namespace), with
  // `dialect`'s semantics (interpreter.h).
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context,
                                     const RenderLimits& limits,
                                     std::chrono::system_clock::time_point now,
                                     Dialect dialect = Dialect::kJavaScript) const;

 private:
  std::shared_ptr<const NodeList> program_;
};

}  // namespace pagoda::scheduler::text::jinja
