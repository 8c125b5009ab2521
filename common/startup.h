// Process start-up shared by the two binaries (pagoda-scheduler and pagoda-worker): the flags
// both define (--log-level, --tls-cert, --tls-key, --tls-ca, --link-token-file) are defined once,
// here, and read only through these functions. A main-only helper: only scheduler/main.cc and
// worker/main.cc use it (scripts/check-layering.sh), and only they link pagoda_startup.
//
// Contract: StartProcess runs first in main(), before any thread starts. Its errors, and those
// of the loaders, are InvalidArgument or NotFound with a message that names the flag (for
// example "--log-level must be debug, info, warning or error"); the caller prints it and exits.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tls.h"

namespace pagoda::common {

// Blocks the termination signals in every thread to come (signals.h), sets the --help usage
// line, parses the command line (flags.h: dashed names accepted) and applies --log-level.
absl::Status StartProcess(int argc, char** argv, const char* usage);

// Reads the PEM files of --tls-cert, --tls-key and --tls-ca for this side of the connection
// (tls.h): a server serves TLS with cert and key and requires client certificates signed by ca;
// a client verifies the server with ca and presents cert and key when given.
absl::StatusOr<TlsConfig> LoadTlsFromFlags(TlsSide side);

// The token of --link-token-file (link_token.h), or "" when the flag is empty (no
// authentication of the worker link).
absl::StatusOr<std::string> LoadLinkTokenFromFlags();

}  // namespace pagoda::common
