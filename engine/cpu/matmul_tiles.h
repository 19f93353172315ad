// defines: the ISA-generic tiles of the batch-invariant matrix product (matmul.h), written
// once over a vector traits type V and compiled by one translation unit per instruction set
// (matmul_avx2.cpp, matmul_avx512.cpp), each with its own target flags, over weights packed
// for that ISA (packed_weights.h).
//
// Everything here sits in an unnamed namespace on purpose: each ISA unit gets its own
// internal copy, so the linker can never merge an AVX-512 instantiation into the AVX2 path.
//
// V provides: Reg (a vector of V::kLanes floats), zero(), set1(float), loadx(const float*),
// storeu(float*, Reg), fma(a, b, c) = a * b + c, kTileRows (the rows of a tile: its 4 * rows
// accumulators, 4 weight vectors and rows broadcasts fit the register file), and per weight
// dtype a step of kPair<T> k values for 4 * kLanes outputs: load<T>(p, v) gives the lanes'
// weights for the step's k value v, upcast to f32 (F32, F16: one vector of consecutive
// outputs; BF16: one full-register load of pairs, the low halves shifted up for v = 0 and the
// high halves masked for v = 1).
//
// The order: output o of row r is one FMA chain over k = 0, 1, ..., in - 1 in one lane,
// started at zero: y = fma(x[k], w[o][k], y) for each k in turn. Nothing else touches it, so
// it does not depend on the row count, the tile, the k-blocking (a chain paused in memory
// resumes exactly), the thread split or even the vector width.
#pragma once

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/cpu/packed_weights.h"
#include "engine/cpu/threads.h"
#include "base/error.h"
#include "base/region_check.h"
#include "engine/safetensors.h"

namespace specula::cpu {
namespace {

// One stored weight as f32 (exact: F16 and BF16 are subsets of F32).
template <DType T>
inline float scalar_weight(const unsigned char* p) {
  if constexpr (T == DType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  } else {
    uint16_t h;
    std::memcpy(&h, p, 2);
    if constexpr (T == DType::F16) {
      return _cvtsh_ss(h);
    } else {
      const uint32_t bits = uint32_t(h) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
  }
}

template <DType T>
constexpr int64_t kWeightBytes = T == DType::F32 ? 4 : 2;

// Lines requested this far ahead of the k-range being read (the prefetcher alone falls behind).
constexpr int64_t kPrefetchBytes = 8192;

// A tile: R rows x one block of 4 * kLanes outputs over k in [k0, k1) (k0 a multiple of the
// step; k1 too unless it is in). Each (row, output) chain resumes from acc (or from zero when
// `first`) and is left there. The lines of [prefetch, prefetch_end) are requested from memory
// spread evenly over the tile's steps (an empty range requests none).
//   x: in [R, in] rows of stride in; block: the block's packed bytes;
//   acc: in/out [R, 4 * kLanes] the chains so far
template <class V, DType T, int R>
inline void tile(const float* x, int64_t in, int64_t k0, int64_t k1, const unsigned char* block, float* acc, bool first,
                 const unsigned char* prefetch, const unsigned char* prefetch_end) {
  constexpr int kPair = V::template kPair<T>;
  constexpr int64_t kOutputs = 4 * V::kLanes;
  constexpr int64_t kStepBytes = kOutputs * kPair * kWeightBytes<T>, kVectorBytes = kStepBytes / 4;
  const int64_t steps = (k1 - k0 + kPair - 1) / kPair;  // an odd in's last BF16 value reads a whole step
  for (int r = 0; r < R; ++r) check_region(x + r * in + k0, static_cast<std::size_t>(k1 - k0) * sizeof(float));
  check_region(block + k0 / kPair * kStepBytes, static_cast<std::size_t>(steps * kStepBytes));
  check_region(acc, R * kOutputs * sizeof(float));
  typename V::Reg a[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) a[r][j] = first ? V::zero() : V::loadx(acc + r * kOutputs + j * V::kLanes);
  const auto step = [&](const unsigned char* p, int64_t k, int values) {
    for (int v = 0; v < values; ++v) {
      typename V::Reg xb[R];
      for (int r = 0; r < R; ++r) xb[r] = V::set1(x[r * in + k + v]);
      for (int j = 0; j < 4; ++j) {
        const typename V::Reg w = V::template load<T>(p + j * kVectorBytes, v);
        for (int r = 0; r < R; ++r) a[r][j] = V::fma(xb[r], w, a[r][j]);
      }
    }
  };
  const int64_t full_end = k0 + (k1 - k0) / kPair * kPair, full_steps = (full_end - k0) / kPair;
  // Whole lines per step, rounded up so that the range is covered by the tile's last step.
  const int64_t prefetch_lines = (prefetch_end - prefetch + 63) / 64;
  const int64_t lines_per_step = full_steps > 0 ? (prefetch_lines + full_steps - 1) / full_steps : 0;
  const unsigned char* p = block + k0 / kPair * kStepBytes;
  for (int64_t k = k0; k < full_end; k += kPair, p += kStepBytes) {
    for (int64_t line = 0; line < lines_per_step && prefetch < prefetch_end; ++line, prefetch += 64)
      _mm_prefetch(reinterpret_cast<const char*>(prefetch), _MM_HINT_T0);
    step(p, k, kPair);
  }
  if (full_end < k1) step(p, full_end, static_cast<int>(k1 - full_end));  // an odd in's last BF16 value
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) V::storeu(acc + r * kOutputs + j * V::kLanes, a[r][j]);
}

// Rows [0, n) of one k-range: tiles of kTileRows rows, then one of the rest. The first tile
// brings the weights from memory; the others find them in L1. The range's bytes shifted
// kPrefetchBytes ahead are requested from memory across all its tiles, in shares of their rows,
// so that memory stays busy while the later tiles compute from L1 too.
template <class V, DType T>
inline void rows_of_block(const float* x, int n, int64_t in, int64_t k0, int64_t k1, const unsigned char* block,
                          float* acc, bool first) {
  constexpr int kRows = V::kTileRows, kPair = V::template kPair<T>;
  constexpr int64_t kOutputs = 4 * V::kLanes, kStepBytes = kOutputs * kPair * kWeightBytes<T>;
  const unsigned char* ahead = block + k0 / kPair * kStepBytes + kPrefetchBytes;
  const int64_t range_bytes = (k1 - k0 + kPair - 1) / kPair * kStepBytes;
  const auto share = [&](int rows) { return ahead + range_bytes * rows / n / 64 * 64; };  // rows [0, rows)'s end
  int r = 0;
  for (; r + kRows <= n; r += kRows)
    tile<V, T, kRows>(x + r * in, in, k0, k1, block, acc + r * kOutputs, first, share(r), share(r + kRows));
  const int rest = n - r;
  [&]<int... Rs>(std::integer_sequence<int, Rs...>) {
    ((rest == Rs + 1 ? tile<V, T, Rs + 1>(x + r * in, in, k0, k1, block, acc + r * kOutputs, first, share(r), share(n))
                     : void()),
     ...);
  }(std::make_integer_sequence<int, kRows - 1>{});
}

// A product's one-thread time (worth_threads' estimate): the weight bytes streamed at
// ~40 GB/s or the FLOPs at ~120 GFLOP/s, whichever takes longer.
inline double one_thread_ns(const PackedWeights& w, int n) {
  constexpr double kBytesPerNs = 40, kFlopsPerNs = 120;
  const double bytes_ns = static_cast<double>(w.bytes()) / kBytesPerNs;
  const double flops_ns = 2.0 * n * static_cast<double>(w.out()) * static_cast<double>(w.in()) / kFlopsPerNs;
  return std::max(bytes_ns, flops_ns);
}

// y[n, out] = x[n, in] * W[out, in]^T block by block, split across OpenMP threads in
// contiguous runs of blocks when worth it. Within a block, k in ranges whose weights (16 KiB)
// stay in L1 while every row's tiles read them; the chains wait in a per-thread buffer.
template <class V, DType T>
void matmul_typed(const float* x, const PackedWeights& w, float* y, int n) {
  constexpr int64_t kOutputs = 4 * V::kLanes;
  constexpr int64_t kRange = (16384 / (kOutputs * kWeightBytes<T>)) / 2 * 2;  // even: whole BF16 steps
  SPECULA_CHECK(w.block() == kOutputs && w.pair() == V::template kPair<T>, "matmul: weights packed for another ISA");
  const int64_t out = w.out(), in = w.in();
  const auto block = [&](int64_t b) {
    thread_local std::vector<float> acc;  // [n, kOutputs]: this thread's chains of the block
    acc.resize(static_cast<std::size_t>(n * kOutputs));
    for (int64_t k0 = 0; k0 < in; k0 += kRange)
      rows_of_block<V, T>(x, n, in, k0, std::min(in, k0 + kRange), w.block_data(b), acc.data(), k0 == 0);
    const int64_t o0 = b * kOutputs, valid = std::min(kOutputs, out - o0);
    for (int r = 0; r < n; ++r) check_region(y + r * out + o0, static_cast<std::size_t>(valid) * sizeof(float));
    for (int r = 0; r < n; ++r)
      std::memcpy(y + r * out + o0, acc.data() + r * kOutputs, static_cast<std::size_t>(valid) * sizeof(float));
  };
  const int64_t blocks = w.blocks();
  if (worth_threads(one_thread_ns(w, n))) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) block(b);
  } else {  // no OpenMP region at all: even a one-thread one costs ~1 us here
    for (int64_t b = 0; b < blocks; ++b) block(b);
  }
}

// The dtype dispatch every ISA unit exports.
template <class V>
void matmul_any_dtype(const float* x, const PackedWeights& w, float* y, int n) {
  switch (w.dtype()) {
    case DType::F32: return matmul_typed<V, DType::F32>(x, w, y, n);
    case DType::F16: return matmul_typed<V, DType::F16>(x, w, y, n);
    case DType::BF16: return matmul_typed<V, DType::BF16>(x, w, y, n);
    case DType::I8: break;  // never packed here (PackedWeights refuses it; matmul_int8.h)
  }
}

}  // namespace
}  // namespace specula::cpu
