// Python's string semantics for the engine's Python dialect (Dialect::kPython, interpreter.h):
// how Jinja2, running on Python, prints values (str() and repr()) and strips strings.
//
// Contract: str() and repr() follow CPython: none as None, booleans as True/False, floats as
// repr(float) (shortest round trip, "1.0", "1e-05", "1e+16"), lists as [a, b], tuples as (a,),
// dicts as {'k': v}, strings inside containers quoted and escaped as repr(str) does (printable
// characters by ICU's Unicode categories). Undefined prints as nothing at the top and as
// Undefined inside a container, a namespace as <Namespace {...}>, a macro as <Macro>. Output
// longer than `max_bytes` throws JinjaError. Inputs may be ill-formed UTF-8 (read as U+FFFD).
#pragma once

#include <string>
#include <string_view>

#include "scheduler/text/jinja/value.h"

namespace pagoda::scheduler::text::jinja {

// str(value), as {{ }}, `~`, `string`, `join` and `trim` apply it in Jinja2.
std::string ToPythonString(const Value& value, size_t max_bytes = kMaxValueTextBytes);
// repr(value): how a container prints its items.
std::string PythonRepr(const Value& value, size_t max_bytes = kMaxValueTextBytes);
// repr(float).
std::string FormatPythonFloat(double value);

// str.isspace() of one character.
bool IsPythonWhitespace(char32_t c);
// str.strip(chars), str.lstrip(chars), str.rstrip(chars): `chars` null strips whitespace.
std::string PythonStrip(std::string_view s, const std::string* chars, bool left, bool right);

}  // namespace pagoda::scheduler::text::jinja
