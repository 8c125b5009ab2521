// Command-line helpers shared by the binaries.
#pragma once

#include <vector>

namespace pagoda::common {

// Parses absl flags, accepting dashed names: "--max-tokens 5" sets --max_tokens. Pagoda's
// documented command lines use dashes; absl defines flags with underscores. Returns the
// positional arguments (argv[0] first), like absl::ParseCommandLine.
std::vector<char*> ParseFlags(int argc, char** argv);

}  // namespace pagoda::common
