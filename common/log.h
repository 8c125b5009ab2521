// Minimal leveled logging to stderr (Debian's Abseil has no absl/log).
//
// One line per call: "2026-11-22T10:00:00.123Z I scheduler] message". The level threshold is
// process-wide configuration set once from main.cc (--log-level) before threads start.
#pragma once

#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pagoda::common {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// Parses "debug", "info", "warning" or "error"; returns false on anything else.
bool ParseLogLevel(std::string_view text, LogLevel* level);
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, std::string_view component, std::string_view message);

template <typename... Args>
void Logf(LogLevel level, std::string_view component, const absl::FormatSpec<Args...>& format,
          const Args&... args) {
  if (LogEnabled(level)) LogLine(level, component, absl::StrFormat(format, args...));
}

}  // namespace pagoda::common

#define PAGODA_LOG(level, component, ...) \
  ::pagoda::common::Logf(::pagoda::common::LogLevel::level, component, __VA_ARGS__)
