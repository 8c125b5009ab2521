#include "common/port_file.h"

#include <cstdio>

namespace pagoda::common {

bool WritePortFile(const std::string& path, int port) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  const bool written = std::fprintf(f, "%d\n", port) > 0;
  return std::fclose(f) == 0 && written && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace pagoda::common
