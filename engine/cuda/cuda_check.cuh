// defines: CUDA_CHECK and CUBLAS_CHECK, the device-call tier of base/error.h: every CUDA
// runtime and cuBLASLt call, and every kernel launch (CUDA_CHECK_LAUNCH, the last error right
// after it), throws SpeculaError naming the call, its file:line and the runtime's message.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "base/error.h"

namespace specula::cuda {

// A failed call's error is also the runtime's last error: it is cleared here, so that the next
// launch's check does not report it again.
inline void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    throw SpeculaError(detail::concat("CUDA error at ", file, ":", line, ": ", call, ": ", cudaGetErrorName(err), " (",
                                      cudaGetErrorString(err), ")"));
  }
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw SpeculaError(detail::concat("cuBLASLt error at ", file, ":", line, ": ", call, ": status ",
                                      static_cast<int>(status)));
}

}  // namespace specula::cuda

#define CUDA_CHECK(call) ::specula::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH() ::specula::cuda::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)
#define CUBLAS_CHECK(call) ::specula::cuda::check_cublas((call), #call, __FILE__, __LINE__)
