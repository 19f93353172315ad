// defines: BlockShared and the fixed-order block reductions the one-block-per-row kernels share
// (sample.cu, dynamic_tree.cu, logprobs.cu): every thread passes its partial and gets the
// result; thread 0 combines the partials in thread order, so a row's result depends on nothing
// but its data and the block size. Two barriers each, so consecutive calls never race.
#pragma once

#include <cuda_runtime.h>

namespace specula::cuda {

inline constexpr int kBlockSlots = 256;  // the most threads a block using BlockShared has

// One slot per thread for reductions, and the broadcast result.
struct BlockShared {
  double d[kBlockSlots];
  int i[kBlockSlots];
  float f[kBlockSlots];
  double d_out;
  int i_out;
  float f_out;
};

__device__ inline double block_sum(double v, BlockShared& sh) {
  sh.d[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) total = __dadd_rn(total, sh.d[t]);
    sh.d_out = total;
  }
  __syncthreads();
  return sh.d_out;
}

__device__ inline int block_sum(int v, BlockShared& sh) {
  sh.i[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int t = 0; t < static_cast<int>(blockDim.x); ++t) total += sh.i[t];
    sh.i_out = total;
  }
  __syncthreads();
  return sh.i_out;
}

__device__ inline float block_max(float v, BlockShared& sh) {
  sh.f[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = sh.f[0];
    for (int t = 1; t < static_cast<int>(blockDim.x); ++t) m = sh.f[t] > m ? sh.f[t] : m;
    sh.f_out = m;
  }
  __syncthreads();
  return sh.f_out;
}

// The block's best (value, index) from each thread's (best, at) (at -1: none): the largest
// value, ties to the lowest index; -1 when no thread has one. `values` is sh.f or sh.d.
template <class T>
__device__ inline int block_argmax_in(T best, int at, T* values, BlockShared& sh) {
  values[threadIdx.x] = best;
  sh.i[threadIdx.x] = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int t = 1; t < static_cast<int>(blockDim.x); ++t) {
      const int other = sh.i[t];
      if (other >= 0 && (at < 0 || values[t] > best || (values[t] == best && other < at))) best = values[t], at = other;
    }
    sh.i_out = at;
  }
  __syncthreads();
  return sh.i_out;
}
__device__ inline int block_argmax(float best, int at, BlockShared& sh) { return block_argmax_in(best, at, sh.f, sh); }
__device__ inline int block_argmax(double best, int at, BlockShared& sh) { return block_argmax_in(best, at, sh.d, sh); }

}  // namespace specula::cuda
