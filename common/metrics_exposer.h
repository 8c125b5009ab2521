// StartMetricsExposer: the HTTP endpoint both processes serve /metrics from.
//
// Header-only on purpose: only the scheduler's and the worker's metrics libraries link
// prometheus-cpp, and pagoda_common should not have to.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace pagoda::common {

// Serves GET /metrics on `address` (HOST:PORT; port 0 picks a free one) from `collectable`
// into `*exposer`; returns the bound port.
inline absl::StatusOr<int> StartMetricsExposer(
    const std::string& address, const std::weak_ptr<prometheus::Collectable>& collectable,
    std::unique_ptr<prometheus::Exposer>* exposer) {
  if (*exposer) return absl::FailedPreconditionError("the metrics endpoint is already served");
  try {
    // prometheus-cpp reports a failed bind by throwing; nothing else here throws.
    *exposer = std::make_unique<prometheus::Exposer>(address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot serve metrics on %s (%s): the address is invalid or the port is in use", address,
        e.what()));
  }
  (*exposer)->RegisterCollectable(collectable, "/metrics");
  const std::vector<int> ports = (*exposer)->GetListeningPorts();
  if (ports.empty()) return absl::InternalError("the metrics server reports no listening port");
  return ports.front();
}

}  // namespace pagoda::common
