// defines: the ISA-generic tiles of the batch-invariant matrix product (matmul.h), written
// once over a vector traits type V and compiled by one translation unit per instruction set
// (matmul_avx2.cpp, matmul_avx512.cpp), each with its own target flags, over weights packed
// for that ISA (packed_weights.h).
//
// Everything here sits in an unnamed namespace on purpose: each ISA unit gets its own
// internal copy, so the linker can never merge an AVX-512 instantiation into the AVX2 path.
//
// V provides: Reg (a vector of V::kLanes floats), zero(), loadx(const float*), fma(a, b, c)
// = a * b + c, hsum(Reg) (one fixed horizontal order), and per weight dtype a k-step of
// kVectors<T> * kLanes weights: load<T>(p, v) gives vector v of the step at p upcast to f32.
// F32 and F16 steps are one vector of consecutive weights. A BF16 step is two vectors from
// one full-register load: the even-indexed weights (the low halves shifted up) and the
// odd-indexed ones (the high halves masked), which halves the conversion work; x is then
// packed to match (pack_bf16_steps), each step's evens before its odds.
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/cpu/packed_weights.h"
#include "engine/cpu/threads.h"
#include "base/error.h"
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

// The rows of x with every full BF16 step of 2 * lanes values reordered to its even-indexed
// values, then its odd-indexed ones (the order load<BF16> delivers weights in); the tail past
// the last full step stays in place.
//   x: in [n, in]; packed: out [n, in]
inline void pack_bf16_steps(const float* x, int n, int64_t in, int lanes, float* packed) {
  const int64_t step = 2 * lanes, k_main = in - in % step;
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * in;
    float* pr = packed + r * in;
    for (int64_t k = 0; k < k_main; k += step)
      for (int i = 0; i < lanes; ++i) {
        pr[k + i] = xr[k + 2 * i];
        pr[k + lanes + i] = xr[k + 2 * i + 1];
      }
    std::copy(xr + k_main, xr + in, pr + k_main);
  }
}

// A tile of R rows x O outputs (O = 4: one packed group; O = 8: two adjacent groups). Each
// (r, o) has its own accumulator: lanes over k in steps (the step's vectors in order), then
// hsum, then the tail past the last full step in order. That order depends on neither R nor O,
// so a row's result is the same in any tile (batch invariance). Outputs o >= valid are
// padding: computed, never stored.
//   x: in [R, in] (row stride in; BF16: packed); group: the first group's packed bytes;
//   y: out [R, out], columns [0, valid) written
template <class V, DType T, int R, int O>
inline void tile(const float* x, int64_t in, const unsigned char* group, const PackedWeights& w, float* y,
                 int64_t out, int valid) {
  constexpr int64_t es = kWeightBytes<T>;
  constexpr int kVectors = V::template kVectors<T>;
  constexpr int64_t kStep = V::kLanes * kVectors;
  constexpr int64_t kGroup = PackedWeights::kGroup;
  const int64_t step_bytes = kStep * es, stride = kGroup * step_bytes;  // stride: one step of a group
  const unsigned char* wo[O];
  for (int o = 0; o < O; ++o) wo[o] = group + (o / kGroup) * w.group_bytes() + (o % kGroup) * step_bytes;
  typename V::Reg acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = V::zero();
  const int64_t steps = in / kStep, k_main = steps * kStep;
  // Each thread reads its groups as one sequential stream; the lines kPrefetchBytes further
  // on are requested while this step computes (the prefetcher alone falls behind).
  constexpr int64_t kPrefetchBytes = 8192;
  for (int64_t s = 0; s < steps; ++s) {
    for (int o = 0; o < O; ++o) _mm_prefetch(reinterpret_cast<const char*>(wo[o] + s * stride + kPrefetchBytes), _MM_HINT_T0);
    for (int v = 0; v < kVectors; ++v) {
      typename V::Reg wv[O];
      for (int o = 0; o < O; ++o) wv[o] = V::template load<T>(wo[o] + s * stride, v);
      for (int r = 0; r < R; ++r) {
        const typename V::Reg xv = V::loadx(x + r * in + s * kStep + v * V::kLanes);
        for (int o = 0; o < O; ++o) acc[r][o] = V::fma(xv, wv[o], acc[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O && o < valid; ++o) {
      float s = V::hsum(acc[r][o]);
      for (int64_t k = k_main; k < in; ++k) s += x[r * in + k] * scalar_weight<T>(wo[o] + steps * stride + (k - k_main) * es);
      y[r * out + o] = s;
    }
  }
}

// All n rows against O outputs: blocks of 4 rows, then one tile for the rows left over, so a
// verify pass of a few rows reads each weight from memory once, not once per row.
template <class V, DType T, int O>
void rows_for_outputs(const float* x, int n, int64_t in, const unsigned char* group, const PackedWeights& w, float* y,
                      int64_t out, int valid) {
  int r = 0;
  for (; r + 4 <= n; r += 4) tile<V, T, 4, O>(x + r * in, in, group, w, y + r * out, out, valid);
  switch (n - r) {
    case 3: return tile<V, T, 3, O>(x + r * in, in, group, w, y + r * out, out, valid);
    case 2: return tile<V, T, 2, O>(x + r * in, in, group, w, y + r * out, out, valid);
    case 1: return tile<V, T, 1, O>(x + r * in, in, group, w, y + r * out, out, valid);
    default: return;
  }
}

// A product's one-thread time (worth_threads' estimate): the weight bytes streamed at
// ~40 GB/s or the FLOPs at ~120 GFLOP/s, whichever takes longer.
inline double one_thread_ns(const PackedWeights& w, int n) {
  constexpr double kBytesPerNs = 40, kFlopsPerNs = 120;
  const double bytes_ns = static_cast<double>(w.bytes()) / kBytesPerNs;
  const double flops_ns = 2.0 * n * static_cast<double>(w.out()) * static_cast<double>(w.in()) / kFlopsPerNs;
  return std::max(bytes_ns, flops_ns);
}

// y[n, out] = x[n, in] * W[out, in]^T over pairs of packed groups (8 outputs), split across
// OpenMP threads in contiguous runs when worth it.
template <class V, DType T>
void matmul_typed(const float* x_in, const PackedWeights& w, float* y, int n) {
  const int64_t out = w.out(), in = w.in();
  SPECULA_CHECK(w.step() == V::kLanes * V::template kVectors<T>, "matmul: weights packed for another ISA");
  const float* x = x_in;
  if constexpr (T == DType::BF16) {
    thread_local std::vector<float> packed;  // the caller's thread; the workers only read it
    packed.resize(static_cast<std::size_t>(n * in));
    pack_bf16_steps(x_in, n, in, V::kLanes, packed.data());
    x = packed.data();
  }
  constexpr int64_t kGroup = PackedWeights::kGroup;
  const int64_t groups = w.groups(), pairs = (groups + 1) / 2;
  const auto pair_of_groups = [&](int64_t p) {
    const int64_t g = 2 * p, o0 = g * kGroup;
    const int valid = static_cast<int>(std::min<int64_t>(2 * kGroup, out - o0));
    if (g + 1 == groups) return rows_for_outputs<V, T, 4>(x, n, in, w.group(g), w, y + o0, out, valid);
    // 4 x 4 tiles (16 accumulators, each weight load shared by 4 rows) per group, then the
    // last 1-2 rows across both groups: 8 independent FMA chains per row (decode's case).
    int r = 0;
    const auto tiles_of_4 = [&]<int R>() {
      tile<V, T, R, 4>(x + r * in, in, w.group(g), w, y + r * out + o0, out, std::min(valid, 4));
      tile<V, T, R, 4>(x + r * in, in, w.group(g + 1), w, y + r * out + o0 + 4, out, valid - 4);
    };
    for (; r + 4 <= n; r += 4) tiles_of_4.template operator()<4>();
    switch (n - r) {
      case 3: return tiles_of_4.template operator()<3>();
      case 2: return tile<V, T, 2, 8>(x + r * in, in, w.group(g), w, y + r * out + o0, out, valid);
      case 1: return tile<V, T, 1, 8>(x + r * in, in, w.group(g), w, y + r * out + o0, out, valid);
      default: return;
    }
  };
  if (worth_threads(one_thread_ns(w, n))) {
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < pairs; ++p) pair_of_groups(p);
  } else {  // no OpenMP region at all: even a one-thread one costs ~1 us here
    for (int64_t p = 0; p < pairs; ++p) pair_of_groups(p);
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
