// CUDA device discovery and error reporting for the CUDA backend.
#pragma once

#include <string>

namespace pagoda::worker::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no device (never aborts).
int DeviceCount();
// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" for device `index`, or the CUDA error text.
std::string DeviceDescription(int index);

}  // namespace pagoda::worker::cuda
