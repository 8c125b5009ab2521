// Port files: how a process started with port 0 tells scripts and tests the port it bound.
#pragma once

#include <string>

namespace pagoda::common {

// Writes "<port>\n" to `path` through a temporary file and a rename, so a reader polling for
// the file never sees it half written. False on any I/O error.
bool WritePortFile(const std::string& path, int port);

}  // namespace pagoda::common
