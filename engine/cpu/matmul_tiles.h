// defines: the ISA-generic tiles of the batch-invariant matrix product (matmul.h), written
// once over a vector traits type V and compiled by one translation unit per instruction set
// (matmul_avx2.cpp, matmul_avx512.cpp), each with its own target flags.
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

// A tile of R rows x O outputs. Each (r, o) has its own accumulator: lanes over k in steps
// (the step's vectors in order), then hsum, then the tail past the last full step in order.
// That order depends on neither R nor O, so a row's result is the same in any tile (batch
// invariance).
//   x: in [R, in] (row stride in; BF16: packed); w: in [O, in] (row stride w_stride bytes);
//   y: out [R, out]
template <class V, DType T, int R, int O>
inline void tile(const float* x, int64_t in, const unsigned char* w, int64_t w_stride, float* y, int64_t out) {
  constexpr int64_t es = kWeightBytes<T>;
  typename V::Reg acc[R][O];
  for (int r = 0; r < R; ++r)
    for (int o = 0; o < O; ++o) acc[r][o] = V::zero();
  constexpr int kVectors = V::template kVectors<T>;
  constexpr int64_t kStep = V::kLanes * kVectors;
  const int64_t k_main = in - in % kStep;
  // The hardware prefetcher loses track of O interleaved row streams once the weights no
  // longer fit in cache (3x slower on this machine's 28 MB of target weights), so each cache
  // line of the rows kPrefetchRows further on is requested here, while this tile computes.
  constexpr int64_t kPrefetchRows = 16;
  for (int64_t k = 0; k < k_main; k += kStep) {
    if ((k * es) % 64 == 0)
      for (int o = 0; o < O; ++o)
        _mm_prefetch(reinterpret_cast<const char*>(w + (o + kPrefetchRows) * w_stride + k * es), _MM_HINT_T0);
    for (int v = 0; v < kVectors; ++v) {
      typename V::Reg wv[O];
      for (int o = 0; o < O; ++o) wv[o] = V::template load<T>(w + o * w_stride + k * es, v);
      for (int r = 0; r < R; ++r) {
        const typename V::Reg xv = V::loadx(x + r * in + k + v * V::kLanes);
        for (int o = 0; o < O; ++o) acc[r][o] = V::fma(xv, wv[o], acc[r][o]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int o = 0; o < O; ++o) {
      float s = V::hsum(acc[r][o]);
      for (int64_t k = k_main; k < in; ++k) s += x[r * in + k] * scalar_weight<T>(w + o * w_stride + k * es);
      y[r * out + o] = s;
    }
  }
}

// All n rows against O outputs: blocks of kRowBlock rows, then one tile for the rows left
// over, so a verify pass of a few rows reads each weight once per block, not once per row.
template <class V, DType T, int O>
void rows_for_outputs(const float* x, int n, int64_t in, const unsigned char* w, int64_t w_stride, float* y,
                      int64_t out) {
  int r = 0;
  for (; r + 4 <= n; r += 4) tile<V, T, 4, O>(x + r * in, in, w, w_stride, y + r * out, out);
  switch (n - r) {
    case 3: return tile<V, T, 3, O>(x + r * in, in, w, w_stride, y + r * out, out);
    case 2: return tile<V, T, 2, O>(x + r * in, in, w, w_stride, y + r * out, out);
    case 1: return tile<V, T, 1, O>(x + r * in, in, w, w_stride, y + r * out, out);
    default: return;
  }
}

// y[n, out] = x[n, in] * W[out, in]^T over blocks of 8 outputs, split across OpenMP threads.
template <class V, DType T>
void matmul_typed(const float* x_in, const TensorView& w, float* y, int n) {
  const int64_t out = w.shape[0], in = w.shape[1];
  const float* x = x_in;
  if constexpr (T == DType::BF16) {
    thread_local std::vector<float> packed;  // the caller's thread; the workers only read it
    packed.resize(static_cast<std::size_t>(n * in));
    pack_bf16_steps(x_in, n, in, V::kLanes, packed.data());
    x = packed.data();
  }
  const int64_t w_stride = in * kWeightBytes<T>;
  const auto* wb = static_cast<const unsigned char*>(w.data);
  constexpr int64_t kBlock = 8;  // outputs per work item: 8 independent FMA chains for decode
  const int64_t blocks = (out + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t o0 = b * kBlock;
    if (o0 + kBlock <= out) {
      if (n <= 2) {
        rows_for_outputs<V, T, 8>(x, n, in, wb + o0 * w_stride, w_stride, y + o0, out);
      } else {  // 4 x 4 tiles: 16 accumulators, each weight load shared by 4 rows
        rows_for_outputs<V, T, 4>(x, n, in, wb + o0 * w_stride, w_stride, y + o0, out);
        rows_for_outputs<V, T, 4>(x, n, in, wb + (o0 + 4) * w_stride, w_stride, y + o0 + 4, out);
      }
    } else {
      for (int64_t o = o0; o < out; ++o) rows_for_outputs<V, T, 1>(x, n, in, wb + o * w_stride, w_stride, y + o, out);
    }
  }
}

// The dtype dispatch every ISA unit exports.
template <class V>
void matmul_any_dtype(const float* x, const TensorView& w, float* y, int n) {
  switch (w.dtype) {
    case DType::F32: return matmul_typed<V, DType::F32>(x, w, y, n);
    case DType::F16: return matmul_typed<V, DType::F16>(x, w, y, n);
    case DType::BF16: return matmul_typed<V, DType::BF16>(x, w, y, n);
  }
}

}  // namespace
}  // namespace specula::cpu
