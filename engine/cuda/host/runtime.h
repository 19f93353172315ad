// defines: the CUDA runtime API the backend calls, executed on the host (the host execution of
// engine/cuda/*.cu; include/cuda_runtime.h maps the real header's name here). Device memory is
// host memory; kernels run on the executor (executor.h). What it models, so that code which is
// wrong on a device is wrong here too:
//   - streams keep their order, and work on a stream runs only when something orders it: a
//     synchronisation of the stream, the device or an event recorded on it, a stream waiting on
//     such an event, or a synchronous copy on the legacy stream (which orders the legacy stream
//     alone). Work on a non-blocking stream and on the legacy stream is therefore never ordered
//     by luck: unordered, the legacy stream's work runs after the non-blocking stream's.
//   - cudaMemcpy from pageable memory to the device returns once the source is read; the device
//     write is legacy-stream work. Fresh allocations hold 0xff bytes (NaN as f32).
//   - while a stream captures a graph, a synchronisation, a synchronous copy or memset and, in
//     global or thread-local capture mode, an allocation or free abort (the driver refuses them);
//     graphs record kernels and copies and replay them.
//   - launch configurations are checked as the driver checks them (threads per block, grid
//     dimensions, dynamic shared memory against the function's attribute, also at replay).
// Errors of execution (a kernel launched on a replay with too much shared memory) are returned
// by the next synchronising call; launch errors by cudaGetLastError.
#pragma once

#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/cuda/host/device_types.h"
#include "engine/cuda/host/executor.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
enum cudaDeviceAttr { cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
inline constexpr unsigned int cudaStreamNonBlocking = 0x01;

struct cudaDeviceProp {
  char name[256];
  std::size_t totalGlobalMem;
  int major, minor;
};

namespace specula::cuda::host {
struct Stream;
struct Event;
struct Graph;
struct GraphExec;
}  // namespace specula::cuda::host
using cudaStream_t = specula::cuda::host::Stream*;
using cudaEvent_t = specula::cuda::host::Event*;
using cudaGraph_t = specula::cuda::host::Graph*;
using cudaGraphExec_t = specula::cuda::host::GraphExec*;

const char* cudaGetErrorName(cudaError_t error);
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes);

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

namespace specula::cuda::host {

// A kernel function's identity and its attributes (dynamic shared memory limit).
cudaError_t set_function_attribute(const void* function, cudaFuncAttribute attr, int value);

// Enqueues work on `stream` (or records it into the graph the stream captures): `work` runs
// once when the stream's order reaches it.
void enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// Checks a launch's configuration for `function` (sets the last error, launching nothing, where
// the driver would refuse it) and enqueues the grid.
void launch_grid(const void* function, const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes,
                 cudaStream_t stream, std::function<void()> body);

// kernel<<<grid, block, shared_bytes, stream>>>(args...): the arguments converted to the
// kernel's parameter types and copied, as a launch copies them.
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared_bytes,
            cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "kernel launch: argument count differs from the kernel's");
  std::tuple<std::decay_t<Params>...> params(static_cast<std::decay_t<Params>>(std::forward<Args>(args))...);
  launch_grid(reinterpret_cast<const void*>(kernel), name, grid, block, shared_bytes, stream,
              [kernel, params]() { std::apply(kernel, params); });
}

}  // namespace specula::cuda::host

template <class... Params>
cudaError_t cudaFuncSetAttribute(void (*function)(Params...), cudaFuncAttribute attr, int value) {
  return specula::cuda::host::set_function_attribute(reinterpret_cast<const void*>(function), attr, value);
}
