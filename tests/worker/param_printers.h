// How GoogleTest prints the worker tests' parameters (weight types and kernel tables) in test
// names and failures: by name. It finds PrintTo by argument-dependent lookup, so each lives in
// its type's namespace.
#pragma once

#include <ostream>

#include "common/gguf_reader.h"
#include "worker/backend/cpu/kernel_table.h"

namespace pagoda::common {
inline void PrintTo(GgmlType type, std::ostream* os) { *os << GgmlTypeName(type); }
}  // namespace pagoda::common

namespace pagoda::worker::cpu {
inline void PrintTo(CpuIsa isa, std::ostream* os) { *os << CpuIsaName(isa); }
}  // namespace pagoda::worker::cpu
