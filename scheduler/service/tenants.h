// Tenants as the front ends see them: the rule for a tenant's name, the --tenant-weights file
// and the --api-key-file, whose keys may name the tenant their requests are served as.
//
// Also the values of --fairness and --preemption-mode, the policies set beside the tenants.
//
// A tenant is a fair-share account of the core (NewRequest::tenant, SchedulerOptions::
// tenant_weights): gRPC names it in GenerateRequest.tenant, HTTP in the X-Pagoda-Tenant header
// or through the API key used; a request that names none is served as "default".
//
// Contract: every parser checks everything and refuses the first bad line with the file, its
// line number and what was wrong; nothing here touches the file system (main.cc reads the
// files). Names follow one rule everywhere: 1..kMaxTenantBytes bytes of [A-Za-z0-9._:-], so a
// name is always safe as a Prometheus label value and in a log line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "scheduler/core/scheduler.h"

namespace pagoda::scheduler {

inline constexpr size_t kMaxTenantBytes = 64;

// OK when `name` follows the rule; else INVALID_ARGUMENT "`what` ... must be 1 to 64 bytes of
// [A-Za-z0-9._:-]" naming what was wrong (length or the first bad byte).
absl::Status CheckTenantName(std::string_view name, std::string_view what);

// --tenant-weights: one tenant per line, "NAME WEIGHT" (whitespace between), WEIGHT a finite
// number > 0 (a tenant's share of service is its weight over the sum of the backlogged
// tenants'). Blank lines are skipped and '#' starts a comment. A tenant named twice is refused.
// `path` only names the file in errors.
absl::StatusOr<absl::flat_hash_map<std::string, double>> ParseTenantWeights(std::string_view text,
                                                                            std::string_view path);

// One key of --api-key-file and the tenant its requests are served as (empty: none named).
struct ApiKey {
  std::string key;
  std::string tenant;
};

// --api-key-file: one key per line, optionally followed by whitespace and "tenant=NAME". A file
// holding a single key (the format before tenants) is read as before. Blank lines and lines
// whose first non-blank character is '#' are skipped; a key given twice, a second field that
// is not tenant=NAME with a valid name, a third field, or a file without a key is refused.
absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(std::string_view text, std::string_view path);

// --fairness: "vtc" or "none"; INVALID_ARGUMENT naming the flag and both values otherwise.
absl::StatusOr<Fairness> ParseFairness(std::string_view value);
// --preemption-mode: "auto", "recompute" or "swap"; INVALID_ARGUMENT otherwise.
absl::StatusOr<PreemptionMode> ParsePreemptionMode(std::string_view value);

}  // namespace pagoda::scheduler
