// defines: the ISA-generic tiles of the batch-invariant matrix products -- the float product
// (matmul.h) and the bf16dot product (matmul_bf16dot.h) -- written once over a step policy P
// and compiled by one translation unit per instruction set (matmul_avx2.cpp, matmul_avx512.cpp,
// matmul_avx512bf16.cpp), each with its own target flags, over weights packed for that ISA
// (packed_weights.h).
//
// Everything here sits in an unnamed namespace on purpose: each ISA unit gets its own
// internal copy, so the linker can never merge an AVX-512 instantiation into the AVX2 path.
//
// P, the arithmetic of one step (kPair k values) of one block of 4 * V::kLanes outputs, gives:
// V (vector traits: Reg, kLanes, zero(), loadx(const float*), storeu(float*, Reg)), Input (the
// element type of x's rows), kPair, kWeightBytes, kTileRows (the rows of a tile: its 4 * rows
// accumulators and the step's operands fit the register file), kFlopsPerNs (one thread's rate,
// for worth_threads), at(row, k) (the Input of a row holding value k), inputs(values) (the
// Inputs holding `values` values from a step's start) and step<R>(x, stride, values, p, a):
// the step's products for R rows (x: row 0's Input at the step, rows `stride` apart; p: the
// step's weights; a: [R][4] accumulators).
//   UpcastStep<V, T>: x in f32, weights of dtype T upcast to f32 in registers, one FMA per
//     value (V per weight dtype: load<T>(p, v) gives the lanes' weights for the step's value v;
//     F32, F16: one vector of consecutive outputs; BF16: one full-register load of pairs, the
//     low halves shifted up for v = 0 and the high halves masked for v = 1).
//   PairStep<D>: x in BF16 pairs (bf16dot), one 32-bit broadcast per row and one load per
//     weight vector, D::dot(acc, x pair, weight pairs) per accumulator: vdpbf16ps or its
//     two-FMA emulation (EmulatedDot).
//
// The order: output o of row r is one chain over the steps in order in one lane, started at
// zero (UpcastStep: y = fma(x[k], w[o][k], y) for each k in turn; PairStep: the pair's high
// half, then its low half). Nothing else touches it, so it does not depend on the row count,
// the tile, the k-blocking (a chain paused in memory resumes exactly), the thread split or
// even the vector width.
#pragma once

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "engine/cpu/packed_weights.h"
#include "engine/cpu/threads.h"
#include "base/error.h"
#include "base/region_check.h"
#include "model/safetensors.h"

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

// The float product's step: x in f32, each weight upcast to f32, one FMA per k value.
template <class Vec, DType T>
struct UpcastStep {
  using V = Vec;
  using Input = float;
  static constexpr int kPair = V::template kPair<T>;
  static constexpr int64_t kWeightBytes = specula::cpu::kWeightBytes<T>;
  static constexpr int kTileRows = V::kTileRows;
  static constexpr double kFlopsPerNs = 120;
  static const float* at(const float* row, int64_t k) { return row + k; }
  static constexpr int64_t inputs(int64_t values) { return values; }
  template <int R>
  [[gnu::always_inline]] static void step(const float* x, int64_t stride, int values, const unsigned char* p,
                                          typename V::Reg (&a)[R][4]) {
    constexpr int64_t kVectorBytes = V::kLanes * kPair * kWeightBytes;
    for (int v = 0; v < values; ++v) {
      typename V::Reg xb[R];
      for (int r = 0; r < R; ++r) xb[r] = V::set1(x[r * stride + v]);
      for (int j = 0; j < 4; ++j) {
        const typename V::Reg w = V::template load<T>(p + j * kVectorBytes, v);
        for (int r = 0; r < R; ++r) a[r][j] = V::fma(xb[r], w, a[r][j]);
      }
    }
  }
};

// The bf16dot product's step (matmul_bf16dot.h): one k pair. D gives V, X and W (a row's
// broadcast pair and a weight vector's pairs, ready for dot), broadcast(uint32_t) -> X,
// load(const unsigned char*) -> W, dot(acc, X, W) (acc after the high halves' product, then
// the low halves'), kTileRows and kFlopsPerNs.
template <class D>
struct PairStep {
  using V = typename D::V;
  using Input = uint32_t;
  static constexpr int kPair = 2;
  static constexpr int64_t kWeightBytes = 2;
  static constexpr int kTileRows = D::kTileRows;
  static constexpr double kFlopsPerNs = D::kFlopsPerNs;
  static const uint32_t* at(const uint32_t* row, int64_t k) { return row + k / 2; }
  static constexpr int64_t inputs(int64_t values) { return (values + 1) / 2; }
  // Both halves always, an odd in's last step too: its high halves are zero in x and in w.
  template <int R>
  [[gnu::always_inline]] static void step(const uint32_t* x, int64_t stride, int, const unsigned char* p,
                                          typename V::Reg (&a)[R][4]) {
    typename D::X xb[R];
    for (int r = 0; r < R; ++r) xb[r] = D::broadcast(x[r * stride]);
    for (int j = 0; j < 4; ++j) {
      const typename D::W w = D::load(p + j * V::kLanes * 4);
      for (int r = 0; r < R; ++r) a[r][j] = D::dot(a[r][j], xb[r], w);
    }
  }
};

// vdpbf16ps's arithmetic with two FMAs on V (AVX-512F or AVX2): the pairs split into f32 high
// halves (masked) and low halves (shifted up), once per row and once per weight vector.
template <class Vec, int Rows>
struct EmulatedDot {
  using V = Vec;
  struct Halves {
    typename V::Reg high, low;
  };
  using X = Halves;
  using W = Halves;
  static constexpr int kTileRows = Rows;
  static constexpr double kFlopsPerNs = 120;
  static Halves split(typename V::Pairs pairs) { return {V::bf16_half(pairs, 1), V::bf16_half(pairs, 0)}; }
  static X broadcast(uint32_t pair) { return split(V::broadcast_pair(pair)); }
  static W load(const unsigned char* p) { return split(V::load_pairs(p)); }
  static typename V::Reg dot(typename V::Reg acc, const X& x, const W& w) {
    return V::fma(x.low, w.low, V::fma(x.high, w.high, acc));
  }
};

// A tile: R rows x one block of 4 * kLanes outputs over k in [k0, k1) (k0 a multiple of the
// step; k1 too unless it is in). Each (row, output) chain resumes from acc (or from zero when
// `first`) and is left there. The lines of [prefetch, prefetch_end) are requested from memory
// spread evenly over the tile's steps (an empty range requests none).
//   x: in [R rows, stride] (P::Input); block: the block's packed bytes;
//   acc: in/out [R, 4 * kLanes] the chains so far
template <class P, int R>
inline void tile(const typename P::Input* x, int64_t stride, int64_t k0, int64_t k1, const unsigned char* block,
                 float* acc, bool first, const unsigned char* prefetch, const unsigned char* prefetch_end) {
  using V = typename P::V;
  constexpr int kPair = P::kPair;
  constexpr int64_t kOutputs = 4 * V::kLanes, kStepBytes = kOutputs * kPair * P::kWeightBytes;
  const int64_t steps = (k1 - k0 + kPair - 1) / kPair;  // an odd in's last BF16 value reads a whole step
  for (int r = 0; r < R; ++r)
    check_region(P::at(x + r * stride, k0), static_cast<std::size_t>(P::inputs(k1 - k0)) * sizeof(typename P::Input));
  check_region(block + k0 / kPair * kStepBytes, static_cast<std::size_t>(steps * kStepBytes));
  check_region(acc, R * kOutputs * sizeof(float));
  typename V::Reg a[R][4];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 4; ++j) a[r][j] = first ? V::zero() : V::loadx(acc + r * kOutputs + j * V::kLanes);
  const auto step = [&](const unsigned char* p, int64_t k, int values) {
    P::template step<R>(P::at(x, k), stride, values, p, a);
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
template <class P>
inline void rows_of_block(const typename P::Input* x, int n, int64_t stride, int64_t k0, int64_t k1,
                          const unsigned char* block, float* acc, bool first) {
  constexpr int kRows = P::kTileRows, kPair = P::kPair;
  constexpr int64_t kOutputs = 4 * P::V::kLanes, kStepBytes = kOutputs * kPair * P::kWeightBytes;
  const unsigned char* ahead = block + k0 / kPair * kStepBytes + kPrefetchBytes;
  const int64_t range_bytes = (k1 - k0 + kPair - 1) / kPair * kStepBytes;
  const auto share = [&](int rows) { return ahead + range_bytes * rows / n / 64 * 64; };  // rows [0, rows)'s end
  int r = 0;
  for (; r + kRows <= n; r += kRows)
    tile<P, kRows>(x + r * stride, stride, k0, k1, block, acc + r * kOutputs, first, share(r), share(r + kRows));
  const int rest = n - r;
  [&]<int... Rs>(std::integer_sequence<int, Rs...>) {
    ((rest == Rs + 1
          ? tile<P, Rs + 1>(x + r * stride, stride, k0, k1, block, acc + r * kOutputs, first, share(r), share(n))
          : void()),
     ...);
  }(std::make_integer_sequence<int, kRows - 1>{});
}

// A product's one-thread time (worth_threads' estimate): the weight bytes streamed at
// ~40 GB/s or the FLOPs at `flops_per_ns`, whichever takes longer.
inline double one_thread_ns(const PackedWeights& w, int n, double flops_per_ns) {
  constexpr double kBytesPerNs = 40;
  const double bytes_ns = static_cast<double>(w.bytes()) / kBytesPerNs;
  const double flops_ns = 2.0 * n * static_cast<double>(w.out()) * static_cast<double>(w.in()) / flops_per_ns;
  return std::max(bytes_ns, flops_ns);
}

// y[n, out] = x[n, in] * W[out, in]^T block by block, split across OpenMP threads in
// contiguous runs of blocks when worth it. Within a block, k in ranges whose weights (16 KiB)
// stay in L1 while every row's tiles read them; the chains wait in a per-thread buffer.
//   x: in [n, stride] P::Input (f32: stride = in; BF16 pairs: (in + 1) / 2)
template <class P>
void matmul_tiled(const typename P::Input* x, int64_t stride, const PackedWeights& w, float* y, int n) {
  constexpr int64_t kOutputs = 4 * P::V::kLanes;
  constexpr int64_t kRange = (16384 / (kOutputs * P::kWeightBytes)) / 2 * 2;  // even: whole BF16 steps
  SPECULA_CHECK(w.block() == kOutputs && w.pair() == P::kPair, "matmul: weights packed for another ISA");
  const int64_t out = w.out(), in = w.in();
  const auto block = [&](int64_t b) {
    thread_local std::vector<float> acc;  // [n, kOutputs]: this thread's chains of the block
    acc.resize(static_cast<std::size_t>(n * kOutputs));
    for (int64_t k0 = 0; k0 < in; k0 += kRange)
      rows_of_block<P>(x, n, stride, k0, std::min(in, k0 + kRange), w.block_data(b), acc.data(), k0 == 0);
    const int64_t o0 = b * kOutputs, valid = std::min(kOutputs, out - o0);
    for (int r = 0; r < n; ++r) check_region(y + r * out + o0, static_cast<std::size_t>(valid) * sizeof(float));
    for (int r = 0; r < n; ++r)
      std::memcpy(y + r * out + o0, acc.data() + r * kOutputs, static_cast<std::size_t>(valid) * sizeof(float));
  };
  const int64_t blocks = w.blocks();
  if (worth_threads(one_thread_ns(w, n, P::kFlopsPerNs))) {
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) block(b);
  } else {  // no OpenMP region at all: even a one-thread one has its fixed cost (threads.h)
    for (int64_t b = 0; b < blocks; ++b) block(b);
  }
}

// The bf16dot product on rows already rounded to BF16 pairs (matmul_bf16dot.h).
template <class D>
void matmul_pairs(const uint32_t* x, const PackedWeights& w, float* y, int n) {
  matmul_tiled<PairStep<D>>(x, (w.in() + 1) / 2, w, y, n);
}

// The dtype dispatch every ISA unit exports.
template <class V>
void matmul_any_dtype(const float* x, const PackedWeights& w, float* y, int n) {
  switch (w.dtype()) {
    case DType::F32: return matmul_tiled<UpcastStep<V, DType::F32>>(x, w.in(), w, y, n);
    case DType::F16: return matmul_tiled<UpcastStep<V, DType::F16>>(x, w.in(), w, y, n);
    case DType::BF16: return matmul_tiled<UpcastStep<V, DType::BF16>>(x, w.in(), w, y, n);
  }
}

}  // namespace
}  // namespace specula::cpu
