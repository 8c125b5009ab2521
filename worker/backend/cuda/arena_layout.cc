#include "worker/backend/cuda/arena_layout.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace pagoda::worker::cuda {
namespace {

double Mib(double bytes) { return bytes / (1 << 20); }

}  // namespace

absl::StatusOr<int> PlanKvPages(const MemoryBudget& b, size_t page) {
  if (!(b.fraction > 0 && b.fraction <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--gpu-memory-fraction %g must be in (0, 1]", b.fraction));
  }
  if (page == 0) return absl::InvalidArgumentError("KV page size is 0 bytes");
  const double usable_free = std::max(0.0, double(b.device_free) - double(b.reserve));
  if (b.requested_pages > 0) {
    const double need = double(b.requested_pages) * double(page);
    if (need > usable_free) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "--kv-pages %d needs %.1f MiB of GPU memory but %.1f MiB are free (after the weights, "
          "the workspace and %.0f MiB reserved)",
          b.requested_pages, Mib(need), Mib(usable_free), Mib(double(b.reserve))));
    }
    return b.requested_pages;
  }
  const double used = double(b.device_total) - double(b.device_free);
  const double budget =
      std::min(double(b.device_total) * b.fraction - used - double(b.reserve), usable_free);
  const double pages = budget <= 0 ? 0 : std::min(budget / double(page), double(1 << 24));
  if (pages < 1) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "no GPU memory left for the KV arena: --gpu-memory-fraction %g of %.1f MiB, %.1f MiB "
        "already used (weights, workspace), %.0f MiB reserved; one page needs %.3f MiB",
        b.fraction, Mib(double(b.device_total)), Mib(used), Mib(double(b.reserve)),
        Mib(double(page))));
  }
  return static_cast<int>(pages);
}

}  // namespace pagoda::worker::cuda
