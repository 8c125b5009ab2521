#include "common/flags.h"

#include <algorithm>
#include <string>

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

namespace pagoda::common {

std::vector<char*> ParseFlags(int argc, char** argv) {
  // absl's --help lists only flags defined in a file named after the program (pagoda-cli.cc);
  // ours live in main.cc and friends. List every flag that is not absl's own.
  absl::FlagsUsageConfig usage;
  usage.contains_help_flags = [](absl::string_view file) {
    return !absl::StrContains(file, "absl/");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  absl::SetFlagsUsageConfig(usage);
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
