// ArgCheck: how kernel launchers say which argument was wrong. A launcher states each rule on
// its Params with Require(); the first rule that fails becomes an INVALID_ARGUMENT status naming
// the launcher, the argument, its value and the limit ("LaunchSample: vocab 0 must be in
// [1, 8388608]"), instead of a bare cudaErrorInvalidValue.
//
// Plain C++ (no CUDA headers): used by the .cu launchers and by their host-side tests.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {

class ArgCheck {
 public:
  explicit ArgCheck(const char* launcher) : launcher_(launcher) {}

  // When !ok and no earlier rule failed: records "<launcher>: <formatted message>".
  template <typename... Args>
  ArgCheck& Require(bool ok, const absl::FormatSpec<Args...>& format, const Args&... args) {
    if (!ok && message_.empty()) {
      message_ = absl::StrCat(launcher_, ": ", absl::StrFormat(format, args...));
    }
    return *this;
  }
  // lo <= value <= hi: "<name> <value> must be in [lo, hi]".
  ArgCheck& RequireRange(int64_t value, int64_t lo, int64_t hi, const char* name) {
    return Require(value >= lo && value <= hi, "%s %d must be in [%d, %d]", name, value, lo, hi);
  }
  // value > 0: "<name> <value> must be positive".
  ArgCheck& RequirePositive(int64_t value, const char* name) {
    return Require(value > 0, "%s %d must be positive", name, value);
  }
  // A device pointer that must be set (and `alignment`-byte aligned, 1 = any).
  ArgCheck& RequirePointer(const void* p, const char* name, uintptr_t alignment = 1) {
    Require(p != nullptr, "%s is null", name);
    return Require(reinterpret_cast<uintptr_t>(p) % alignment == 0,
                   "%s (%p) must be %d-byte aligned", name, p, static_cast<int>(alignment));
  }

  absl::Status status() const {
    return message_.empty() ? absl::OkStatus() : absl::InvalidArgumentError(message_);
  }

 private:
  const char* launcher_;
  std::string message_;
};

}  // namespace pagoda::worker::cuda
