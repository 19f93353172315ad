// defines: the device helpers the kernels share: to_f32 (a stored element widened), warp_sum
// and block_sum (sums in one fixed butterfly / warp order, so a row's reduction never depends
// on anything but its own data), warp_max and block_max.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace specula::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// The sum over a block of kThreads threads (every thread gets it); `partial` is shared
// [kThreads / 32]. Warps' sums are added in warp order.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* partial) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) total += partial[w];
  __syncthreads();  // partial may be reused right after
  return total;
}

template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* partial) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float m = partial[0];
#pragma unroll
  for (int w = 1; w < kThreads / 32; ++w) m = fmaxf(m, partial[w]);
  __syncthreads();
  return m;
}

}  // namespace specula::cuda
