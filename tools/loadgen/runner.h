// Runner: drives one run of a workload against a scheduler over pagoda.v1.Generation.
//
// One dispatcher thread (the caller's) asks the Pacer what to do and starts Generate calls with
// gRPC's callback API; the calls' reactions run on gRPC's threads and only append timestamps to
// their own record, so no thread exists per stream and 1,000 requests in flight cost nothing
// but memory. Timestamps come from a monotonic clock started when the run begins.
//
// RunLoad returns when every started request has finished (or failed); a request's failure
// (deadline, RESOURCE_EXHAUSTED, a dropped connection) is recorded, never fatal.
//
// Padded static batching (PacerOptions::pad_waves): every request of a wave asks for the wave's
// longest output (ignore_eos makes it run that long), and its record counts only its own
// output_len tokens; its end (E2E) is the end of its stream, the padding included, as when a
// fixed batch answers when it ends.
#pragma once

#include <string>
#include <vector>

#include "pagoda/v1/generation.grpc.pb.h"
#include "tools/loadgen/pacer.h"
#include "tools/loadgen/stats.h"
#include "tools/loadgen/workload.h"

namespace pagoda::loadgen {

struct RunOptions {
  PacerOptions pacer;
  SamplingOptions sampling;
  double timeout_s = 600;    // deadline of each request
  int first_index = 0;       // the run sends workload requests first_index, first_index + 1, ...
  uint64_t prompt_salt = 0;  // Workload::Make's salt: a fresh value per run defeats caching
  // Each request gets its own GenerateRequest.cache_salt: no request reuses another's prompt KV
  // (the prefix cache "off" on a cluster that has it on).
  bool unique_cache_salts = false;
  std::string tenant;  // GenerateRequest.tenant of every request; empty: the default tenant
  // Request i is constrained by the JSON Schema json_schemas[i % size()] (Constraint.json_schema,
  // ignore_eos off: the server refuses it with a constraint); empty: no constraint.
  std::vector<std::string> json_schemas;
  bool progress = true;
  std::string label;  // printed before the progress bar
};

struct RunResult {
  std::vector<RequestRecord> records;  // ordered by request index
  int waves = 0;                       // static batching: waves sent
};

// The GenerateRequest for a workload request.
pagoda::v1::GenerateRequest BuildRequest(const RequestSpec& spec, const SamplingOptions& sampling);

// The longest output length of workload requests first_index .. first_index + count - 1: what
// every request of a padded static-batch wave generates.
int LongestOutput(const Workload& workload, int first_index, int count, uint64_t salt);

RunResult RunLoad(pagoda::v1::Generation::Stub& stub, const Workload& workload,
                  const RunOptions& options);

}  // namespace pagoda::loadgen
