#include "worker/backend/cpu/kernel_table.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pagoda::worker::cpu {

std::string CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAvx512Amx:
      return "avx512amx";
    case CpuIsa::kAvx512Vnni:
      return "avx512vnni";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

#if defined(__x86_64__)
namespace {

// CPUID leaf 7, sub-leaf `sub`: EAX and EDX (false where the CPU has no leaf 7).
bool Leaf7(unsigned sub, unsigned* eax, unsigned* edx) {
  unsigned ebx, ecx;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, sub, *eax, ebx, ecx, *edx);
  return true;
}

// AMX-TILE and AMX-INT8 (leaf 7, EDX bits 24 and 25: GCC 12's __builtin_cpu_supports does not
// know AMX-INT8), and the OS's grant of the tile data state to this process (arch_prctl
// ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; Linux 5.16 and later), asked once.
bool AmxUsable() {
  static const bool usable = [] {
    unsigned eax, edx;
    if (!Leaf7(0, &eax, &edx) || ((edx >> 24) & 1) == 0 || ((edx >> 25) & 1) == 0) return false;
    constexpr long kArchReqXcompPerm = 0x1023;
    constexpr long kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return usable;
}

// F16C (leaf 1, ECX bit 29); clang 14's __builtin_cpu_supports does not know "f16c".
bool F16cSupported() {
  unsigned eax, ebx, ecx, edx;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && ((ecx >> 29) & 1) != 0;
}

// AMX-BF16 (leaf 7, EDX bit 22) and AVX512-BF16 (leaf 7 sub-leaf 1, EAX bit 5): the AMX table's
// BF16 products.
bool AmxBf16Usable() {
  unsigned eax, edx;
  if (!Leaf7(0, &eax, &edx) || ((edx >> 22) & 1) == 0) return false;
  return Leaf7(1, &eax, &edx) && ((eax >> 5) & 1) != 0;
}

}  // namespace
#endif

bool HasIntegerProducts(CpuIsa isa) {
  return isa == CpuIsa::kAvx512Vnni || isa == CpuIsa::kAvx512Amx;
}

bool IsaSupported(CpuIsa isa) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  switch (isa) {
    case CpuIsa::kAvx512Amx:
      return AmxUsable() && IsaSupported(CpuIsa::kAvx512Vnni);
    case CpuIsa::kAvx512Vnni:
      return __builtin_cpu_supports("avx512vnni") && IsaSupported(CpuIsa::kAvx512);
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             IsaSupported(CpuIsa::kAvx2);
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && F16cSupported();
    default:
      return true;
  }
#else
  return isa == CpuIsa::kPortable;
#endif
}

CpuIsa BestSupportedIsa() {
  if (IsaSupported(CpuIsa::kAvx512Amx)) return CpuIsa::kAvx512Amx;
  if (IsaSupported(CpuIsa::kAvx512Vnni)) return CpuIsa::kAvx512Vnni;
  if (IsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (IsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kPortable;
}

absl::StatusOr<CpuIsa> ResolveCpuIsa(std::string_view name) {
  const std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower.empty() || lower == "auto") return BestSupportedIsa();
  for (CpuIsa isa : {CpuIsa::kPortable, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                     CpuIsa::kAvx512Amx}) {
    if (lower != CpuIsaName(isa)) continue;
    if (!IsaSupported(isa)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cpu kernels '", lower,
          "' need instructions this CPU lacks; best here: ", CpuIsaName(BestSupportedIsa())));
    }
    return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cpu kernels '", std::string(name),
                   "' unknown (auto, portable, avx2, avx512, avx512vnni, avx512amx)"));
}

// The avx512vnni and avx512amx tables are kAvx512Kernels with the entries set below, built on
// first use, after every translation unit's tables are initialized.
const KernelTable& Kernels(CpuIsa isa) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512Vnni) {
    static const KernelTable vnni = [] {
      KernelTable table = kAvx512Kernels;
      table.isa = CpuIsa::kAvx512Vnni;
      table.quant_gemm_panel = QuantGemmPanelAvx512Vnni;
      table.packed_group_bytes = PackedGroupBytesAvx512Vnni;
      table.pack_activations = PackActivationsAvx512Vnni;
      return table;
    }();
    return vnni;
  }
  if (isa == CpuIsa::kAvx512Amx) {
    static const KernelTable amx = [] {
      KernelTable table = kAvx512Kernels;
      table.isa = CpuIsa::kAvx512Amx;
      table.quant_gemm_panel = QuantGemmPanelAmx;
      table.packed_group_bytes = PackedGroupBytesAmx;
      table.pack_activations = PackActivationsAmx;
      if (AmxBf16Usable()) {
        table.float_group_columns = FloatGroupColumnsAmx;
        table.float_group_bytes = FloatGroupBytesAmx;
        table.pack_float_activations = PackFloatActivationsAmx;
        table.float_gemm_panel = FloatGemmPanelAmx;
      }
      return table;
    }();
    return amx;
  }
  if (isa == CpuIsa::kAvx512) return kAvx512Kernels;
  if (isa == CpuIsa::kAvx2) return kAvx2Kernels;
#endif
  return kPortableKernels;
}

}  // namespace pagoda::worker::cpu
