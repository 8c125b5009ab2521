// RunStreams: many Generate streams at once, for load and soak tests.
//
// Every stream is started up front with gRPC's callback API (no thread per stream), spread
// round-robin over the given stubs (one connection each), and read to its end. A stream may be
// cancelled by the client (ClientContext::TryCancel) a fixed time after it starts or once a
// number of tokens arrived, and carries its own deadline. RunStreams returns when every stream
// has ended, with one StreamResult per StreamPlan, in order; times are measured from the
// stream's start on a monotonic clock.
#pragma once

#include <grpcpp/security/credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "pagoda/v1/generation.grpc.pb.h"

namespace pagoda::testing {

struct StreamPlan {
  pagoda::v1::GenerateRequest request;
  absl::Duration deadline = absl::Seconds(120);
  std::optional<absl::Duration> cancel_after;  // TryCancel this long after the start
  int cancel_after_tokens = 0;                 // > 0: TryCancel once this many tokens came
};

struct StreamResult {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::optional<pagoda::v1::Finished> finished;  // the final message, when it came
  absl::Time start;                              // when the stream was started
  std::optional<absl::Duration> ttft;            // first message carrying a token
  absl::Duration e2e;                            // until the stream ended
};

std::vector<StreamResult> RunStreams(const std::vector<pagoda::v1::Generation::Stub*>& stubs,
                                     const std::vector<StreamPlan>& plans);

// Stubs on `connections` separate connections to `address` (distinct channel arguments keep
// gRPC from sharing one), for many clients at once.
std::vector<std::unique_ptr<pagoda::v1::Generation::Stub>> MakeStubs(
    const std::string& address, int connections,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr);

// The most streams open at one time: started, and not yet ended.
int PeakOpenStreams(const std::vector<StreamResult>& results);

// Percentile p in [0, 100] of `values` by linear interpolation between closest ranks (numpy's
// default); 0 when empty.
double Percentile(std::vector<double> values, double p);

}  // namespace pagoda::testing
