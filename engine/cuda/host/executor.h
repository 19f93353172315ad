// defines: the host executor of CUDA kernels. A grid runs its blocks one after another on the
// calling thread; a block's threads run as cooperative fibers (Boost.Context) that switch only
// at __syncthreads and at warp shuffles, so a kernel runs as the device would run it with
// every interleaving the device may choose between those points left to the executor's order.
// Checked as it runs, each an abort naming the kernel, never a hang:
//   - a __syncthreads that not every thread of the block reaches at the same call site;
//   - a shuffle that not every lane named by its mask reaches at the same call site.
// The order of the threads within each phase is a setting (SPECULA_CUDA_HOST_ORDER=forward or
// reverse): a kernel that depends on it (a missing barrier) gives different results.
// The built-ins threadIdx, blockIdx, blockDim, gridDim read the running thread's coordinates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

#include "engine/cuda/host/device_types.h"

namespace specula::cuda::host {

enum class ThreadOrder { kForward, kReverse };
// The order of SPECULA_CUDA_HOST_ORDER (forward when unset; anything else aborts naming it).
ThreadOrder thread_order();
void set_thread_order(ThreadOrder order);

// The coordinates of the running device thread.
struct ThreadCoordinates {
  uint3 thread_index, block_index;
  dim3 block_dim, grid_dim;
};
const ThreadCoordinates& coordinates();

// Runs `body` once for every thread of every block of `grid` x `block` (one grid at a time in
// the process: the runtime calls it under its lock), with `shared_bytes` of
// dynamic shared memory per block (16-byte aligned, uninitialised: filled with 0xff).
void run_grid(const char* kernel, dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& body);

// The running block's dynamic shared memory.
void* dynamic_shared_memory();

// A call site of a barrier or shuffle: threads meet only where they name the same one.
struct Site {
  const char* file = "";
  int line = 0;
};

void sync_threads(Site where);
// Exchanges 8 bytes with lane (own lane ^ lane_mask) of the warp; every lane named by `mask`
// must reach the same call site.
std::uint64_t shuffle_xor(unsigned mask, std::uint64_t value, int lane_mask, int width, Site where);

template <class T>
T shfl_xor_sync(Site where, unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "__shfl_xor_sync: a value of at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = shuffle_xor(mask, bits, lane_mask, width, where);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

}  // namespace specula::cuda::host

#define threadIdx (::specula::cuda::host::coordinates().thread_index)
#define blockIdx (::specula::cuda::host::coordinates().block_index)
#define blockDim (::specula::cuda::host::coordinates().block_dim)
#define gridDim (::specula::cuda::host::coordinates().grid_dim)

#define __syncthreads() ::specula::cuda::host::sync_threads({__FILE__, __LINE__})
#define __shfl_xor_sync(...) ::specula::cuda::host::shfl_xor_sync({__FILE__, __LINE__}, __VA_ARGS__)
