// Conversions between the core's plan/result structs and pagoda.worker.v1 messages.
#pragma once

#include <vector>

#include "pagoda/worker/v1/worker_link.pb.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

void EncodePlan(const Plan& plan, pagoda::worker::v1::IterationPlan* out);
std::vector<SampledToken> DecodeSampled(const pagoda::worker::v1::IterationResult& result);
// The worker's timings of a result: forward_seconds + sample_seconds, and swap_seconds. A value
// that is negative or not finite (a broken clock or worker) counts as 0: never measured.
StepTimes DecodeStepTimes(const pagoda::worker::v1::IterationResult& result);

}  // namespace pagoda::scheduler
