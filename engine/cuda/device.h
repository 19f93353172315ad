// defines: cuda_device_count and cuda_unavailable_reason, the CUDA-free host view of
// whether a GPU can be used (any error from the CUDA runtime means "no GPU").
#pragma once

#include <string>

namespace specula {

// Number of usable CUDA devices; 0 when the build has no CUDA or the runtime reports an
// error (no driver, no device).
int cuda_device_count();
// Why no device is usable ("" when one is).
std::string cuda_unavailable_reason();

}  // namespace specula
