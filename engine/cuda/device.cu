#include <cuda_runtime.h>

#include "engine/cuda/device.h"

namespace specula {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a failed probe
    return 0;
  }
  return count;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA runtime: ") + cudaGetErrorString(err);
  }
  return count > 0 ? "" : "no CUDA device";
}

}  // namespace specula
