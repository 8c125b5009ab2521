// WorkerState: what the scheduler core keeps per attached worker (internal to scheduler/core).
#pragma once

#include <deque>
#include <vector>

#include "scheduler/core/step_model.h"
#include "scheduler/core/types.h"

namespace pagoda::scheduler {

// One step of a plan in flight, remembered until its result arrives.
struct FlightEntry {
  RequestId id;
  uint32_t epoch;  // the sequence's epoch when planned; a preemption makes the entry stale
  int32_t chunk;   // input tokens
  bool sample;
};

struct FlightPlan {
  uint64_t iteration;
  std::vector<FlightEntry> entries;
  int32_t tokens = 0;      // input tokens (StepModel)
  double work = 0;         // attention work (StepModel::Work summed over the steps)
  int32_t swap_pages = 0;  // pages swapped out and in
};

struct WorkerState {
  WorkerState(WorkerId worker_id, const WorkerInfo& worker_info)
      : id(worker_id), info(worker_info) {}
  WorkerId id;
  WorkerInfo info;
  std::vector<RequestId> running;          // admission order
  std::deque<FlightPlan> flight;           // oldest first; results arrive in this order
  uint64_t iteration = 0;                  // of the last plan built
  std::vector<RequestId> pending_frees;    // sequences the worker must forget
  std::vector<SwapCopy> pending_swap_out;  // for the next plan (preemptions by swap)
  std::vector<SwapCopy> pending_swap_in;   // for the plan being built (resumptions)
  // Forked completions whose copy of the parent's partial page is for the next plan.
  std::vector<RequestId> pending_copies;
  StepModel model;  // this worker's measured step times
};

}  // namespace pagoda::scheduler
