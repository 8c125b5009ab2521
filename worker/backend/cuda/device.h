// CUDA device discovery and error reporting for the CUDA backend.
#pragma once

#include <string>

namespace pagoda::worker::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never aborts).
int DeviceCount();
// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" for device `index`, or the CUDA error text.
std::string DeviceDescription(int index);

// The most devices the per-device caches below (and OptInSharedMemory's) index.
inline constexpr int kMaxDevices = 64;
// The current device, or -1 when there is none we can index.
int CurrentDevice();
// The current device's multiprocessors (1 without a device), read once per device.
int MultiprocessorCount();
// Whether the current device runs the sm_90a kernels (wgmma): compute capability 9.0 exactly, read
// once per device. Later GPUs get the compute_90 PTX, which has no wgmma.
bool WgmmaAvailable();

// Whether LaunchKernelAfterPrior (launch.cuh) launches its kernels as programmatic dependent
// launches (on by default; process-wide, as the backend's option sets it at Init).
void SetProgrammaticLaunch(bool on);
bool ProgrammaticLaunch();

}  // namespace pagoda::worker::cuda
