// Termination signals handled synchronously: the process blocks SIGINT, SIGTERM and SIGUSR1 in
// every thread, and main waits for them with sigwait. No async-signal handlers run.
#pragma once

namespace pagoda::common {

// Call first in main(), before any thread starts, so every thread inherits the blocked mask.
void BlockTerminationSignals();
// Waits for SIGINT, SIGTERM or SIGUSR1 and returns its number.
int WaitForTerminationSignal();
// Makes WaitForTerminationSignal() return SIGUSR1 (from any thread).
void WakeSignalWaiter();

}  // namespace pagoda::common
