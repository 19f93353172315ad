#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "engine/cuda/cuda_check.cuh"
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

std::string cuda_device_name() {
  cudaDeviceProp prop{};
  if (cuda_device_count() == 0 || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return "";
  return prop.name;
}

double cuda_copy_bandwidth(std::size_t bytes, int reps) {
  SPECULA_CHECK(cuda_device_count() > 0, "copy bandwidth: no GPU (", cuda_unavailable_reason(), ")");
  void *src = nullptr, *dst = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  CUDA_CHECK(cudaMalloc(&src, bytes));
  CUDA_CHECK(cudaMalloc(&dst, bytes));
  CUDA_CHECK(cudaMemset(src, 0x5a, bytes));  // not zeros (METHOD.md)
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i <= reps; ++i) {
    CUDA_CHECK(cudaEventRecord(start));
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CUDA_CHECK(cudaEventRecord(stop));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    if (i > 0) ms.push_back(t);  // the first is the warm-up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(src);
  cudaFree(dst);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

}  // namespace specula
