#include "scheduler/service/tenants.h"

#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace pagoda::scheduler {
namespace {

bool IsTenantByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == ':' ||
         c == '-';
}

// Debian's Abseil has a string_view of its own.
absl::string_view View(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// The whitespace-separated fields of one line.
std::vector<absl::string_view> Fields(absl::string_view line) {
  return absl::StrSplit(line, absl::ByAnyChar(" \t\r\f\v"), absl::SkipEmpty());
}

// The lines of `text`.
std::vector<absl::string_view> Lines(std::string_view text) {
  return absl::StrSplit(View(text), '\n');
}

std::string_view Std(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// "--flag PATH line N: " for errors about that line.
std::string Where(std::string_view flag, std::string_view path, int line) {
  return absl::StrFormat("%s %s line %d: ", flag, path, line);
}

}  // namespace

absl::Status CheckTenantName(std::string_view name, std::string_view what) {
  std::string got;
  if (name.empty() || name.size() > kMaxTenantBytes) {
    got = absl::StrFormat("%d bytes", name.size());
  } else {
    for (size_t i = 0; i < name.size(); ++i) {
      if (IsTenantByte(name[i])) continue;
      got = absl::StrFormat("byte 0x%02x at offset %d", static_cast<unsigned char>(name[i]), i);
      break;
    }
  }
  if (got.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s must be 1 to %d bytes of [A-Za-z0-9._:-]; got %s", what, kMaxTenantBytes, got));
}

absl::StatusOr<absl::flat_hash_map<std::string, double>> ParseTenantWeights(std::string_view text,
                                                                            std::string_view path) {
  absl::flat_hash_map<std::string, double> weights;
  int number = 0;
  for (absl::string_view line : Lines(text)) {
    ++number;
    line = line.substr(0, line.find('#'));
    const std::vector<absl::string_view> fields = Fields(line);
    if (fields.empty()) continue;
    const std::string where = Where("--tenant-weights", path, number);
    if (fields.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sexpected \"TENANT WEIGHT\", got %d fields", where, fields.size()));
    }
    if (absl::Status s = CheckTenantName(Std(fields[0]), "the tenant name"); !s.ok()) {
      return absl::InvalidArgumentError(where + std::string(s.message()));
    }
    double weight = 0;
    if (!absl::SimpleAtod(fields[1], &weight) || !std::isfinite(weight) || weight <= 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sthe weight of tenant %s must be a finite number > 0, got \"%s\"",
                          where, fields[0], fields[1]));
    }
    if (!weights.emplace(std::string(fields[0]), weight).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%stenant %s is named a second time", where, fields[0]));
    }
  }
  return weights;
}

absl::StatusOr<std::vector<ApiKey>> ParseApiKeys(std::string_view text, std::string_view path) {
  std::vector<ApiKey> keys;
  absl::flat_hash_set<absl::string_view> seen;
  int number = 0;
  for (absl::string_view line : Lines(text)) {
    ++number;
    const std::vector<absl::string_view> fields = Fields(line);
    if (fields.empty() || fields[0].front() == '#') continue;
    const std::string where = Where("--api-key-file", path, number);
    if (fields.size() > 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%sexpected \"KEY\" or \"KEY tenant=NAME\", got %d fields", where, fields.size()));
    }
    ApiKey& key = keys.emplace_back();
    key.key = std::string(fields[0]);
    if (!seen.insert(fields[0]).second) {
      return absl::InvalidArgumentError(where + "this key is given a second time");
    }
    if (fields.size() == 1) continue;
    absl::string_view tenant = fields[1];
    if (!absl::ConsumePrefix(&tenant, "tenant=")) {
      // Not echoed: it may be the rest of a key that holds a blank.
      return absl::InvalidArgumentError(
          where + "the field after the key must be tenant=NAME (a key holds no whitespace)");
    }
    if (absl::Status s = CheckTenantName(Std(tenant), "the tenant name"); !s.ok()) {
      return absl::InvalidArgumentError(where + std::string(s.message()));
    }
    key.tenant = std::string(tenant);
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--api-key-file %s holds no key (one key per line)", path));
  }
  return keys;
}

absl::StatusOr<Fairness> ParseFairness(std::string_view value) {
  if (value == "vtc") return Fairness::kVtc;
  if (value == "none") return Fairness::kNone;
  return absl::InvalidArgumentError(
      absl::StrFormat("--fairness must be vtc or none, got \"%s\"", value));
}

absl::StatusOr<PreemptionMode> ParsePreemptionMode(std::string_view value) {
  for (PreemptionMode mode :
       {PreemptionMode::kAuto, PreemptionMode::kRecompute, PreemptionMode::kSwap}) {
    if (value == PreemptionModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("--preemption-mode must be auto, recompute or swap, got \"%s\"", value));
}

}  // namespace pagoda::scheduler
