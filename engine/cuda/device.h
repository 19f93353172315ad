// defines: cuda_device_count and cuda_unavailable_reason, the CUDA-free host view of
// whether a GPU can be used (any error from the CUDA runtime means "no GPU"); cuda_device_name
// and cuda_copy_bandwidth, what the benchmarks report of the card. The first call loads the
// CUDA module (cuda_loader.cpp).
#pragma once

#include <cstddef>
#include <string>

namespace specula {

// Number of usable CUDA devices; 0 when the build has no CUDA, the module cannot be loaded or
// the runtime reports an error (no driver, no device).
int cuda_device_count();
// Why no device is usable ("" when one is).
std::string cuda_unavailable_reason();
// GPU 0's name ("" without one).
std::string cuda_device_name();
// Device-to-device copy bandwidth of GPU 0 in bytes per second, counting bytes read plus
// bytes written: the median of `reps` timed copies of `bytes` (after one warm-up), with
// device events. Throws SpeculaError without a GPU.
double cuda_copy_bandwidth(std::size_t bytes, int reps);

}  // namespace specula
