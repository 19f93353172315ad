// defines: SPECULA_LAUNCH, the one way the backend launches a kernel, and
// SPECULA_DYNAMIC_SHARED, a kernel's dynamic shared memory, so that the same source compiles
// for the device (nvcc) and for the host execution (host/runtime.h, SPECULA_CUDA_HOST).
//   SPECULA_LAUNCH(kernel, grid, block, shared_bytes, stream, args...): kernel<<<grid, block,
//   shared_bytes, stream>>>(args...); a template kernel names its arguments (kernel<T>).
//   SPECULA_DYNAMIC_SHARED(T, name): `T* name`, the block's dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#if defined(SPECULA_CUDA_HOST)
#define SPECULA_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  ::specula::cuda::host::launch(#kernel, kernel, grid, block, shared_bytes, stream, __VA_ARGS__)
#define SPECULA_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::specula::cuda::host::dynamic_shared_memory())
#else
#define SPECULA_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  kernel<<<grid, block, shared_bytes, stream>>>(__VA_ARGS__)
#define SPECULA_DYNAMIC_SHARED(T, name) \
  extern __shared__ T name##_storage[];  \
  T* const name = name##_storage
#endif
