// The shared secret a worker presents to the scheduler on the worker link.
//
// Both processes read it from a file (--link-token-file) so it never shows in a process
// listing; the worker sends it as gRPC metadata on Attach, the scheduler compares it in
// constant time.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace pagoda::common {

// The metadata key carrying the token (lower case, as gRPC requires).
inline constexpr char kLinkTokenMetadataKey[] = "x-pagoda-link-token";

// Reads a token file: its content without trailing whitespace. Errors name the file; an
// empty token is an error (it would authenticate everyone).
absl::StatusOr<std::string> ReadLinkTokenFile(const std::string& path);

// Compares in time independent of where the strings differ.
bool LinkTokensEqual(std::string_view a, std::string_view b);

}  // namespace pagoda::common
