// The error type the Jinja engine throws internally. It never leaves the engine: ChatTemplate and
// the Template entry points catch it and return absl::InvalidArgumentError with its message.
#pragma once

#include <string>

namespace pagoda::scheduler::text::jinja {

struct JinjaError {
  std::string message;
};

}  // namespace pagoda::scheduler::text::jinja
