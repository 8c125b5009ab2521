#include "common/flags.h"

#include <algorithm>
#include <string>

#include "absl/flags/parse.h"

namespace pagoda::common {

std::vector<char*> ParseFlags(int argc, char** argv) {
  // Rewrite in place: "--a-b[=v]" → "--a_b[=v]". Only the name part changes; values keep
  // their dashes. "--" ends flag parsing.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg[0] != '-') continue;
    size_t begin = arg[1] == '-' ? 2 : 1;
    size_t end = std::min(arg.find('='), arg.size());
    std::replace(argv[i] + begin, argv[i] + end, '-', '_');
  }
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace pagoda::common
