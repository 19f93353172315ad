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

// Every thread's v folded by thread 0 from slot 0 on, in thread order, with `combine`.
template <class T, class Combine>
__device__ inline T block_fold(T v, T* slots, T& out, Combine combine) {
  slots[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T total = slots[0];
    for (int t = 1; t < static_cast<int>(blockDim.x); ++t) total = combine(total, slots[t]);
    out = total;
  }
  __syncthreads();
  return out;
}

__device__ inline double block_sum(double v, BlockShared& sh) {
  return block_fold(v, sh.d, sh.d_out, [](double a, double b) { return __dadd_rn(a, b); });
}
__device__ inline int block_sum(int v, BlockShared& sh) {
  return block_fold(v, sh.i, sh.i_out, [](int a, int b) { return a + b; });
}
// NaN only where slot 0 holds it (a NaN elsewhere never compares greater).
__device__ inline float block_max(float v, BlockShared& sh) {
  return block_fold(v, sh.f, sh.f_out, [](float a, float b) { return b > a ? b : a; });
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
